package fakemodel

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
)

// This file is the fake model's GET /v1/models, which answers as OpenAI's does for an API key
// it knows, and with a 401 invalid_api_key for one it does not: once a key was added with
// [Server.AddKey], only the added keys are known; before, every key is.

// AddKey makes key (sent as "Authorization: Bearer <key>", or as Anthropic sends it, in
// x-api-key) one GET /v1/models takes.
func (s *Server) AddKey(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.keys == nil {
		s.keys = map[string]bool{}
	}
	s.keys[key] = true
}

// ForgetKeys forgets the keys added: every key is taken again.
func (s *Server) ForgetKeys() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys = nil
}

// serveModels serves r if it is GET /v1/models, and reports whether it did.
func (s *Server) serveModels(w http.ResponseWriter, r *http.Request) bool {
	if r.URL.Path != "/v1/models" || r.Method != http.MethodGet {
		return false
	}
	auth := r.Header.Get("Authorization")
	key, bearer := strings.CutPrefix(auth, "Bearer ")
	if auth == "" && r.Header.Get("X-Api-Key") != "" {
		// Anthropic's GET /v1/models takes its key in x-api-key.
		auth, key, bearer = "x-api-key", r.Header.Get("X-Api-Key"), true
	}
	s.mu.Lock()
	known := s.keys == nil || s.keys[key]
	s.mu.Unlock()
	switch {
	case auth == "":
		s.write(w, r, Response{Status: http.StatusUnauthorized, JSON: map[string]any{"error": map[string]any{
			"message": "You didn't provide an API key.", "type": "invalid_request_error", "param": nil, "code": nil,
		}}})
	case !bearer || !known:
		s.write(w, r, Response{Status: http.StatusUnauthorized, JSON: map[string]any{"error": map[string]any{
			"message": "Incorrect API key provided.", "type": "invalid_request_error", "param": nil, "code": "invalid_api_key",
		}}})
	default:
		s.write(w, r, JSON(map[string]any{"object": "list", "data": []any{
			map[string]any{"id": "fake-model", "object": "model", "created": 0, "owned_by": "fakemodel"},
		}}))
	}
	return true
}

// addKey is the control API's POST /keys.
func (c *Control) addKey(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Key string `json:"key"`
	}
	dec := json.NewDecoder(io.LimitReader(r.Body, maxControlBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil || in.Key == "" {
		writeControl(w, http.StatusBadRequest, map[string]any{"error": "keys: a key is required"})
		return
	}
	c.s.AddKey(in.Key)
	writeControl(w, http.StatusOK, map[string]any{"key": in.Key})
}
