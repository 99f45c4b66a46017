package files

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type upstreamFile struct {
	name    string
	content string
}

// upstream is a Files API that serves files to the key "Bearer sk-a", a 403 to any other key,
// and the statuses of ids "status-NNN".
func upstream(t *testing.T, files map[string]upstreamFile) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	lookup := func(w http.ResponseWriter, r *http.Request) (upstreamFile, bool) {
		if r.Header.Get("Authorization") != "Bearer sk-a" {
			http.Error(w, `{"error":{"message":"secret detail"}}`, http.StatusForbidden)
			return upstreamFile{}, false
		}
		id := r.PathValue("id")
		if code, ok := strings.CutPrefix(id, "status-"); ok {
			w.WriteHeader(map[string]int{"500": 500, "401": 401, "429": 429}[code])
			_, _ = io.WriteString(w, `{"error":{"message":"secret detail"}}`)
			return upstreamFile{}, false
		}
		f, ok := files[id]
		if !ok {
			http.Error(w, `{"error":{"message":"No such File object"}}`, http.StatusNotFound)
		}
		return f, ok
	}
	mux.HandleFunc("GET /v1/files/{id}", func(w http.ResponseWriter, r *http.Request) {
		if f, ok := lookup(w, r); ok {
			assert.Equal(t, "org-1", r.Header.Get("OpenAI-Organization"), "the organization is forwarded")
			_ = json.NewEncoder(w).Encode(map[string]any{"id": r.PathValue("id"), "object": "file",
				"bytes": len(f.content), "created_at": 1, "filename": f.name, "purpose": "user_data"})
		}
	})
	mux.HandleFunc("GET /v1/files/{id}/content", func(w http.ResponseWriter, r *http.Request) {
		if f, ok := lookup(w, r); ok {
			_, _ = io.WriteString(w, f.content)
		}
	})
	mux.HandleFunc("GET /moved", func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("a redirect was followed, with Authorization %q", r.Header.Get("Authorization"))
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func TestFetch(t *testing.T) {
	srv := upstream(t, map[string]upstreamFile{
		"file-1":   {name: "data.csv", content: "x,y\n1,2\n"},
		"file-dir": {name: `C:\Users\me\report.txt`, content: "r"},
	})
	a := &API{Base: srv.URL + "/"}
	cred := Credentials{"Authorization": "Bearer sk-a", "Openai-Organization": "org-1"}

	name, n, err := a.Stat(t.Context(), cred, "file-1")
	require.NoError(t, err, "stat file-1")
	assert.Equal(t, "data.csv", name, "its name")
	assert.Equal(t, int64(8), n, "its size")

	name, rc, err := a.Fetch(t.Context(), cred, "file-1")
	require.NoError(t, err, "fetch file-1")
	got, err := io.ReadAll(rc)
	require.NoError(t, err, "read file-1")
	require.NoError(t, rc.Close(), "close file-1")
	assert.Equal(t, "data.csv", name, "its name")
	assert.Equal(t, "x,y\n1,2\n", string(got), "its bytes")

	name, _, err = a.Stat(t.Context(), cred, "file-dir")
	require.NoError(t, err, "stat a file uploaded with a path")
	assert.Equal(t, "report.txt", name, "the base name of a path")
}

func TestFetchErrors(t *testing.T) {
	srv := upstream(t, map[string]upstreamFile{
		"file-dot":   {name: "..", content: "x"},
		"file-nul":   {name: "a\x00b", content: "x"},
		"file-long":  {name: strings.Repeat("a", 256), content: "x"},
		"file-slash": {name: "dir/", content: "x"},
		"file-empty": {name: "", content: "x"},
	})
	a := &API{Base: srv.URL}
	good := Credentials{"Authorization": "Bearer sk-a", "Openai-Organization": "org-1"}
	tests := []struct {
		name   string
		cred   Credentials
		fileID string
		want   error
	}{
		{"unknown file", good, "file-404", ErrNotFound},
		{"another key", Credentials{"Authorization": "Bearer sk-b"}, "file-dot", ErrNotFound},
		{"no key", Credentials{}, "file-dot", ErrNotFound},
		{"401", good, "status-401", ErrNotFound},
		{"500", good, "status-500", ErrUpstream},
		{"429", good, "status-429", ErrUpstream},
		{"id with a slash", good, "../moved", ErrNotFound},
		{"id dot dot", good, "..", ErrNotFound},
		{"empty id", good, "", ErrNotFound},
		{"name ..", good, "file-dot", ErrUpstream},
		{"name with NUL", good, "file-nul", ErrUpstream},
		{"name too long", good, "file-long", ErrUpstream},
		{"name of a directory", good, "file-slash", ErrUpstream},
		{"empty name", good, "file-empty", ErrUpstream},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, rc, err := a.Fetch(t.Context(), tt.cred, tt.fileID)
			require.ErrorIs(t, err, tt.want, "fetch %q", tt.fileID)
			assert.Nil(t, rc, "no content on an error")
			assert.NotContains(t, err.Error(), "secret detail", "the upstream's body is never shown")
			assert.NotContains(t, err.Error(), "sk-", "no credential in an error")
		})
	}
}

func TestFetchStatusNamesStep(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/files/{id}", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, `{"filename":"a.txt","bytes":1}`)
	})
	mux.HandleFunc("GET /v1/files/{id}/content", func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusBadGateway)
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	_, _, err := (&API{Base: srv.URL, Client: srv.Client()}).Fetch(t.Context(), Credentials{}, "file-1")
	require.ErrorIs(t, err, ErrUpstream, "a failed download")
	assert.Equal(t, "files api failed: download file file-1: status 502", err.Error(), "the message names step and status")
}

func TestNoRedirect(t *testing.T) {
	srv := upstream(t, nil)
	redirect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, srv.URL+"/moved", http.StatusFound)
	}))
	defer redirect.Close()
	_, _, err := (&API{Base: redirect.URL}).Fetch(t.Context(), Credentials{"Authorization": "Bearer sk-a"}, "file-1")
	require.ErrorIs(t, err, ErrUpstream, "a redirect is a failure, not followed")
}

func TestCredentialsOf(t *testing.T) {
	h := http.Header{}
	h.Set("authorization", "Bearer sk-a")
	h.Set("api-key", "k1")
	h.Set("x-api-key", "k2")
	h.Set("openai-organization", "org")
	h.Set("OpenAI-Project", "proj")
	h.Set("Cookie", "c")
	h.Set("X-User", "u")
	assert.Equal(t, Credentials{"Authorization": "Bearer sk-a", "Api-Key": "k1", "X-Api-Key": "k2",
		"Openai-Organization": "org", "Openai-Project": "proj"}, CredentialsOf(h), "only the credential headers")
	assert.Empty(t, CredentialsOf(http.Header{}), "none")
}

func TestContextCanceled(t *testing.T) {
	srv := upstream(t, map[string]upstreamFile{"file-1": {name: "a", content: "b"}})
	ctx, cancel := contextCanceled(t)
	cancel()
	_, _, err := (&API{Base: srv.URL}).Fetch(ctx, Credentials{"Authorization": "Bearer sk-a"}, "file-1")
	assert.True(t, errors.Is(err, ctx.Err()), "a canceled call returns the context's error, got %v", err)
}

func contextCanceled(t *testing.T) (context.Context, context.CancelFunc) {
	return context.WithCancel(t.Context())
}
