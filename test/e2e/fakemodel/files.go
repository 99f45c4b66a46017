package fakemodel

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// This file is the fake model's Files API: GET /v1/files/{id} and GET /v1/files/{id}/content,
// serving the files a test registers, to their owner's key only, as OpenAI's Files API does.

// File is a file of the fake Files API.
type File struct {
	// ID is the file's id, "file-…".
	ID string
	// Filename is the name it was uploaded with.
	Filename string
	// Purpose defaults to "user_data".
	Purpose string
	// Key is the API key that may read it: requests must carry "Authorization: Bearer <Key>".
	// A request with another key gets a 404, as a file of another organization does; one
	// without a key a 401.
	Key string
	// Content is the file's bytes.
	Content []byte
	// CreatedAt defaults to when it was added.
	CreatedAt time.Time
}

// AddFile makes the Files API serve f (replacing a file of the same id).
func (s *Server) AddFile(f File) {
	if f.Purpose == "" {
		f.Purpose = "user_data"
	}
	if f.CreatedAt.IsZero() {
		f.CreatedAt = time.Now()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.files == nil {
		s.files = map[string]File{}
	}
	s.files[f.ID] = f
}

// serveFile serves r if it is a Files API call of a file registered with [Server.AddFile]'s
// API (any GET under /v1/files/ once a file was added), and reports whether it did.
func (s *Server) serveFile(w http.ResponseWriter, r *http.Request) bool {
	rest, ok := strings.CutPrefix(r.URL.Path, "/v1/files/")
	if !ok || r.Method != http.MethodGet {
		return false
	}
	id, content := strings.CutSuffix(rest, "/content")
	s.mu.Lock()
	f, known := s.files[id]
	serving := s.files != nil
	s.mu.Unlock()
	if !serving || strings.Contains(id, "/") {
		return false
	}
	auth := r.Header.Get("Authorization")
	switch {
	case auth == "":
		s.write(w, r, Response{Status: http.StatusUnauthorized, JSON: map[string]any{"error": map[string]any{
			"message": "You didn't provide an API key.", "type": "invalid_request_error", "param": nil, "code": nil,
		}}})
	case !known || auth != "Bearer "+f.Key:
		s.write(w, r, Response{Status: http.StatusNotFound, JSON: map[string]any{"error": map[string]any{
			"message": "No such File object: " + id, "type": "invalid_request_error", "param": "id", "code": nil,
		}}})
	case content:
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.Itoa(len(f.Content)))
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(f.Content)
	default:
		s.write(w, r, JSON(map[string]any{
			"id": f.ID, "object": "file", "bytes": len(f.Content), "created_at": f.CreatedAt.Unix(),
			"filename": f.Filename, "purpose": f.Purpose, "status": "processed",
		}))
	}
	return true
}

// addFile is the control API's POST /files.
func (c *Control) addFile(w http.ResponseWriter, r *http.Request) {
	var in struct {
		ID       string `json:"id"`
		Filename string `json:"filename"`
		Purpose  string `json:"purpose"`
		Key      string `json:"key"`
		Content  []byte `json:"content"` // base64, as encoding/json reads []byte
	}
	dec := json.NewDecoder(io.LimitReader(r.Body, maxControlBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		writeControl(w, http.StatusBadRequest, map[string]any{"error": "decode files: " + err.Error()})
		return
	}
	if in.ID == "" || strings.ContainsAny(in.ID, "/?#") || in.Key == "" {
		writeControl(w, http.StatusBadRequest, map[string]any{"error": "files: id (no /, ? or #) and key are required"})
		return
	}
	c.s.AddFile(File{ID: in.ID, Filename: in.Filename, Purpose: in.Purpose, Key: in.Key, Content: in.Content})
	writeControl(w, http.StatusOK, map[string]any{"id": in.ID})
}
