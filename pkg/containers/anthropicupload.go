package containers

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"path"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"
)

// This file is Anthropic's POST /v1/files, served when the operator has codeinterp own the
// uploads (Config.Uploads): the files a client uploads to hand to the container as
// container_upload blocks.

// The bounds of expires_in_seconds, as natively.
const (
	minUploadTTL = 3600 * time.Second
	maxUploadTTL = 7776000 * time.Second
)

// isUpload reports whether id is an uploaded file's id that this server keeps.
func (a *AnthropicFiles) isUpload(id string) bool {
	return a.cfg.Uploads != nil && IsUploadID(id)
}

// uploadMetadata is u's FileMetadata; an uploaded file is not downloadable, as natively.
func uploadMetadata(u Upload) fileMetadataJSON {
	m := fileMetadataJSON{ID: u.ID, Type: "file", Filename: u.Filename, MimeType: u.MimeType, SizeBytes: u.Bytes,
		CreatedAt: u.CreatedAt.UTC().Format(time.RFC3339)}
	if !u.ExpiresAt.IsZero() {
		at := u.ExpiresAt.UTC().Format(time.RFC3339)
		m.ExpiresAt = &at
	}
	return m
}

// upload is POST /v1/files: a multipart body with the file ("file") and, optionally,
// expires_in_seconds. The file is read as it arrives, bounded by the file size, the caller's
// and the server's quota, and an idle deadline; one that breaks a bound leaves nothing.
func (a *AnthropicFiles) upload(c fileCall) {
	if !a.beginUpload(c.identity) {
		writeAnthropicError(c.w, http.StatusTooManyRequests,
			fmt.Sprintf("Too many uploads in progress for this API key (at most %d at once): wait for one to finish.", a.cfg.MaxUploadsPerIdentity))
		return
	}
	defer a.endUpload(c.identity)
	up := a.cfg.Uploads
	if n := c.r.ContentLength; n > up.MaxFileBytes()+1<<20 {
		a.uploadFailed(c, ErrTooLarge)
		return
	}
	// The multipart framing adds a little to the file; the file itself is bounded by Put.
	c.r.Body = http.MaxBytesReader(c.w, newIdleBody(c.w, c.r.Body, a.cfg.UploadIdle), up.MaxFileBytes()+1<<20)
	mr, err := c.r.MultipartReader()
	if err != nil {
		writeAnthropicError(c.w, http.StatusBadRequest, "The body must be multipart/form-data with a 'file' part.")
		return
	}
	var (
		got Upload
		ttl time.Duration
	)
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			a.uploadFailed(c, err)
			return
		}
		switch part.FormName() {
		case "file":
			if got.ID != "" {
				a.uploadFailed(c, badUpload("file: only one file may be uploaded per request"))
				return
			}
			name, err := uploadName(part.FileName(), part.Header.Get("Content-Type"))
			if err != nil {
				a.uploadFailed(c, err)
				return
			}
			if got, err = up.Put(c.r.Context(), c.identity, name, uploadType(name, part.Header.Get("Content-Type")), ttl, part); err != nil {
				a.uploadFailed(c, err)
				return
			}
		case "expires_in_seconds":
			v, err := io.ReadAll(io.LimitReader(part, 32))
			if err != nil {
				a.uploadFailed(c, err)
				return
			}
			n, err := strconv.ParseInt(strings.TrimSpace(string(v)), 10, 64)
			if err != nil || time.Duration(n)*time.Second < minUploadTTL || time.Duration(n)*time.Second > maxUploadTTL {
				a.uploadFailed(c, badUpload("expires_in_seconds: Input should be an integer from 3600 to 7776000"))
				return
			}
			ttl = time.Duration(n) * time.Second
		}
	}
	if got.ID == "" {
		a.uploadFailed(c, badUpload("file: Field required"))
		return
	}
	if ttl > 0 && got.ExpiresAt.IsZero() {
		// expires_in_seconds came after the file.
		if got, err = up.expireIn(c.identity, got.ID, ttl); err != nil {
			a.uploadFailed(c, err)
			return
		}
	}
	writeJSON(c.w, uploadMetadata(got))
}

// uploadError is a client mistake in an upload, a 400.
type uploadError string

func (e uploadError) Error() string { return string(e) }

func badUpload(msg string) error { return uploadError(msg) }

// uploadFailed answers an upload that failed, in Anthropic's error shape.
func (a *AnthropicFiles) uploadFailed(c fileCall, err error) {
	var ue uploadError
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &ue):
		writeAnthropicError(c.w, http.StatusBadRequest, string(ue))
	case errors.Is(err, ErrTooLarge), errors.As(err, &mbe):
		c.w.Header().Set("Connection", "close")
		writeAnthropicError(c.w, http.StatusRequestEntityTooLarge,
			fmt.Sprintf("File too large: uploaded files are limited to %d bytes.", a.cfg.Uploads.MaxFileBytes()))
	case errors.Is(err, ErrQuota):
		writeAnthropicErrorCode(c.w, http.StatusBadRequest, "storage_quota_exceeded",
			"Storage quota exceeded: delete files you no longer need, then upload again.")
	case errors.Is(err, os.ErrDeadlineExceeded):
		// The body stalled past the idle deadline (which also ends the request's context).
		c.w.Header().Set("Connection", "close")
		writeAnthropicError(c.w, http.StatusRequestTimeout,
			fmt.Sprintf("The request body stalled: no byte arrived for %s.", a.cfg.UploadIdle))
	case c.r.Context().Err() != nil:
		// The client went away; nobody reads an answer.
	default:
		a.log.Info("read an upload", zap.Error(err))
		writeAnthropicError(c.w, http.StatusBadRequest, "The multipart body cannot be read.")
	}
}

// uploadName is the name an uploaded file keeps: the last element of the part's filename, as
// natively; an absent or empty one is "unnamed" with the extension of its type.
func uploadName(filename, contentType string) (string, error) {
	name := path.Base(strings.ReplaceAll(filename, `\`, "/"))
	if filename == "" || name == "." || name == "/" {
		name = "unnamed"
		if mt, _, err := mime.ParseMediaType(contentType); err == nil {
			for ext, t := range mimeTypes {
				if t == mt {
					name += ext
					break
				}
			}
		}
	}
	if name == ".." || len(name) > 255 || strings.ContainsRune(name, 0) || !utf8.ValidString(name) {
		return "", badUpload("file: the file name must be at most 255 bytes of UTF-8")
	}
	return name, nil
}

// uploadType is an uploaded file's mime_type: by its name's extension when it is one of the
// known ones, else the part's own type.
func uploadType(name, contentType string) string {
	if t := mimeType(name); t != "application/octet-stream" {
		return t
	}
	if mt, _, err := mime.ParseMediaType(contentType); err == nil && mt != "" {
		return mt
	}
	return "application/octet-stream"
}

// writeAnthropicErrorCode writes an error in Anthropic's shape with details.error_code, which
// the SDKs branch on.
func writeAnthropicErrorCode(w http.ResponseWriter, status int, code, message string) {
	var body struct {
		Type  string `json:"type"`
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
			Details struct {
				ErrorCode string `json:"error_code"`
			} `json:"details"`
		} `json:"error"`
	}
	body.Type = "error"
	body.Error.Type = "invalid_request_error"
	if status == http.StatusNotFound {
		body.Error.Type = "not_found_error"
	}
	body.Error.Message, body.Error.Details.ErrorCode = message, code
	js, _ := json.Marshal(body)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(js)
}
