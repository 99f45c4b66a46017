package fakemodel

import (
	"context"
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
	"go.uber.org/zap/zaptest"

	"github.com/codeinterp/codeinterp/pkg/files"
)

func get(t *testing.T, s *Server, path, auth string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, s.URL()+path, nil)
	require.NoError(t, err, "GET %s", path)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := s.Client().Do(req)
	require.NoError(t, err, "GET %s", path)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err, "read %s", path)
	return resp.StatusCode, string(b)
}

func TestFilesAPI(t *testing.T) {
	s := New(t)
	s.AddFile(File{ID: "file-1", Filename: "data.csv", Key: "sk-a", Content: []byte("x,y\n1,2\n")})

	tests := []struct {
		name, path, auth string
		wantStatus       int
		wantBody         string
	}{
		{"metadata", "/v1/files/file-1", "Bearer sk-a", 200, ""},
		{"content", "/v1/files/file-1/content", "Bearer sk-a", 200, "x,y\n1,2\n"},
		{"another key", "/v1/files/file-1/content", "Bearer sk-b", 404, ""},
		{"no key", "/v1/files/file-1", "", 401, ""},
		{"unknown", "/v1/files/file-2", "Bearer sk-a", 404, ""},
	}
	// The table's calls of file-1 that ran: `make test-envoy` (-run '/real-envoy') runs none.
	ran := 0
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.path == "/v1/files/file-1" {
				ran++
			}
			status, body := get(t, s, tt.path, tt.auth)
			assert.Equal(t, tt.wantStatus, status, "status of %s", tt.path)
			if tt.wantBody != "" {
				assert.Equal(t, tt.wantBody, body, "body of %s", tt.path)
			}
			if status != 200 {
				assert.True(t, gjson.Get(body, "error.message").Exists(), "OpenAI's error envelope: %s", body)
			}
		})
	}
	_, meta := get(t, s, "/v1/files/file-1", "Bearer sk-a")
	assert.Equal(t, "file", gjson.Get(meta, "object").String(), "object")
	assert.Equal(t, "data.csv", gjson.Get(meta, "filename").String(), "filename")
	assert.Equal(t, int64(8), gjson.Get(meta, "bytes").Int(), "bytes")
	assert.Equal(t, "user_data", gjson.Get(meta, "purpose").String(), "purpose")
	assert.Positive(t, gjson.Get(meta, "created_at").Int(), "created_at")
	assert.Len(t, s.RequestsTo("/v1/files/file-1"), ran+1, "the Files API's requests are recorded")

	// pkg/files reads it.
	name, rc, err := (&files.API{Base: s.URL(), Client: s.Client()}).Fetch(context.Background(), files.Credentials{"Authorization": "Bearer sk-a"}, "file-1")
	require.NoError(t, err, "files.API fetches from the fake")
	b, _ := io.ReadAll(rc)
	rc.Close()
	assert.Equal(t, "data.csv", name, "name through files.API")
	assert.Equal(t, "x,y\n1,2\n", string(b), "bytes through files.API")
}

func TestFilesAPINotServedWithoutFiles(t *testing.T) {
	s := New(t)
	s.Enqueue("/v1/files/file-1", JSON(map[string]any{"scripted": true}))
	status, body := get(t, s, "/v1/files/file-1", "Bearer sk-a")
	assert.Equal(t, 200, status, "a scripted answer")
	assert.True(t, gjson.Get(body, "scripted").Bool(), "a queued answer wins: %s", body)
}

func TestControlFiles(t *testing.T) {
	s, err := Start(zaptest.NewLogger(t))
	require.NoError(t, err, "Start")
	defer s.Close()
	ctl := httptest.NewServer(NewControl(s))
	defer ctl.Close()
	status, _ := controlCall(t, ctl, http.MethodPost, "/files",
		`{"id":"file-9","filename":"a.txt","key":"sk-a","content":"`+base64.StdEncoding.EncodeToString([]byte("hello"))+`"}`)
	require.Equal(t, http.StatusOK, status, "add a file")
	code, body := get(t, s, "/v1/files/file-9/content", "Bearer sk-a")
	assert.Equal(t, 200, code, "content")
	assert.Equal(t, "hello", body, "content added through the control API")
	status, _ = controlCall(t, ctl, http.MethodPost, "/files", `{"id":"a/b","key":"k"}`)
	assert.Equal(t, http.StatusBadRequest, status, "an id with a slash")
	status, _ = controlCall(t, ctl, http.MethodPost, "/files", `{"id":"file-1"}`)
	assert.Equal(t, http.StatusBadRequest, status, "no key")
}
