package app

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	configv1 "github.com/codeinterp/codeinterp/api/codeinterp/config/v1"
	"github.com/codeinterp/codeinterp/pkg/admission"
	"github.com/codeinterp/codeinterp/pkg/config"
	"github.com/codeinterp/codeinterp/pkg/containers"
	"github.com/codeinterp/codeinterp/pkg/files"
	"github.com/codeinterp/codeinterp/pkg/identity"
	"github.com/codeinterp/codeinterp/pkg/loop"
	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/schema/messages"
)

// upstreamFiles is a Files API that knows no file and counts the calls.
type upstreamFiles struct{ calls int }

func (u *upstreamFiles) Stat(context.Context, files.Credentials, string) (string, int64, error) {
	u.calls++
	return "", 0, files.ErrNotFound
}

func (u *upstreamFiles) Fetch(context.Context, files.Credentials, string) (string, io.ReadCloser, error) {
	u.calls++
	return "", nil, files.ErrNotFound
}

// TestUploadFiles: a container_upload's file is read from the caller's own uploads, found by
// the identity of their credential as the API listener tells it; another key's is not found,
// and ids that are not uploads' go to the upstream.
func TestUploadFiles(t *testing.T) {
	secret := []byte("a secret of the uploads test, long enough")
	hasher := identity.New(secret, identity.Config{})
	owner, err := hasher.Of(func(name string) []string {
		if name == "x-api-key" {
			return []string{"sk-ant-a"}
		}
		return nil
	}, "")
	require.NoError(t, err, "the owner's identity")
	up := containers.NewUploads(containers.UploadsConfig{})
	u, err := up.Put(t.Context(), owner, "sales.csv", "text/csv", 0, strings.NewReader("a,b\n"))
	require.NoError(t, err, "upload")
	next := &upstreamFiles{}
	uf, ok := newUploadFiles(up, hasher)("http://127.0.0.1:1").(uploadFiles)
	require.True(t, ok, "an uploadFiles")
	uf.next = next // the upstream, counted

	name, size, err := uf.Stat(t.Context(), files.Credentials{"X-Api-Key": "sk-ant-a"}, u.ID)
	require.NoError(t, err, "the owner's stat")
	assert.Equal(t, "sales.csv", name, "name")
	assert.EqualValues(t, 4, size, "size")
	name, rc, err := uf.Fetch(t.Context(), files.Credentials{"X-Api-Key": "sk-ant-a"}, u.ID)
	require.NoError(t, err, "the owner's fetch")
	body, _ := io.ReadAll(rc)
	require.NoError(t, rc.Close(), "close")
	assert.Equal(t, "sales.csv", name, "fetched name")
	assert.Equal(t, "a,b\n", string(body), "the bytes")

	_, _, err = uf.Stat(t.Context(), files.Credentials{"X-Api-Key": "sk-ant-b"}, u.ID)
	assert.ErrorIs(t, err, files.ErrNotFound, "another key's stat")
	_, _, err = uf.Fetch(t.Context(), files.Credentials{"X-Api-Key": "sk-ant-b"}, u.ID)
	assert.ErrorIs(t, err, files.ErrNotFound, "another key's fetch")
	_, _, err = uf.Stat(t.Context(), files.Credentials{}, u.ID)
	assert.ErrorIs(t, err, files.ErrNotFound, "no credential")
	assert.Zero(t, next.calls, "an upload's id never reaches the upstream")

	_, _, err = uf.Stat(t.Context(), files.Credentials{"X-Api-Key": "sk-ant-a"}, "file-abc")
	assert.ErrorIs(t, err, files.ErrNotFound, "an OpenAI id")
	assert.Equal(t, 1, next.calls, "goes to the upstream")
}

// TestUploadsOf: own_uploads is off by default, and refused where the uploads in one
// gateway's memory cannot serve every request.
func TestUploadsOf(t *testing.T) {
	up, err := uploadsOf(&configv1.Config{})
	require.NoError(t, err, "default")
	assert.Nil(t, up, "off by default")

	tests := []struct {
		name string
		give func(*configv1.Config)
	}{
		{"store redis", func(c *configv1.Config) { c.Store = config.StoreRedis }},
		{"identity_header", func(c *configv1.Config) { c.DefaultProfile = &configv1.Profile{IdentityHeader: "x-user"} }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := &configv1.Config{AnthropicFiles: &configv1.AnthropicFiles{OwnUploads: true}}
			tt.give(cfg)
			_, err := uploadsOf(cfg)
			require.Error(t, err, "refused")
			assert.Contains(t, err.Error(), "anthropic_files.own_uploads", "names the field")
		})
	}
	up, err = uploadsOf(&configv1.Config{AnthropicFiles: &configv1.AnthropicFiles{OwnUploads: true, MaxFileBytes: 10}})
	require.NoError(t, err, "on")
	assert.EqualValues(t, 10, up.MaxFileBytes(), "max_file_bytes")
}

// anthropicCaller is a caller with an x-api-key.
type anthropicCaller string

func (c anthropicCaller) Identity() string { return string(c) }

func (c anthropicCaller) Credentials() http.Header {
	return http.Header{"X-Api-Key": {string(c)}, "Anthropic-Version": {"2023-06-01"}}
}

// TestContainerUploadFromUpstream: with own_uploads off (the default), a container_upload's
// file is read from the upstream's Files API (Anthropic's shapes) with the caller's credential;
// a file the upstream does not show the caller refuses the request before the model sees it.
func TestContainerUploadFromUpstream(t *testing.T) {
	const id = "file_011CNha8iCJcU1wXNR6q4V8w"
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Api-Key") != "sk-ant-a" {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		switch r.URL.Path {
		case "/v1/files/" + id:
			_, _ = io.WriteString(w, `{"id":"`+id+`","type":"file","filename":"sales.csv","mime_type":"text/csv","size_bytes":4,`+
				`"created_at":"2026-08-20T10:00:00Z","downloadable":true,"expires_at":null}`)
		case "/v1/files/" + id + "/content":
			_, _ = io.WriteString(w, "a,b\n")
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	t.Cleanup(upstream.Close)
	body := `{"model":"claude-x","max_tokens":64,"tools":[{"type":"code_execution_20250522","name":"code_execution"}],` +
		`"messages":[{"role":"user","content":[{"type":"container_upload","file_id":"` + id + `"}]}]}`
	adm := admission.New(nil, nil, admission.Config{})
	req := admission.Request{Path: "/v1/messages", Upstream: upstream.URL}

	x, err := messages.Surface{}.NewExchange([]byte(body), schema.Options{})
	require.NoError(t, err, "exchange")
	ad, refusal := adm.Prepare(t.Context(), x, anthropicCaller("sk-ant-a"), req)
	require.Nil(t, refusal, "the owner's request")
	var lr loop.Request
	ad.Apply(&lr)
	require.Len(t, lr.InputFiles, 1, "one file to copy in")
	assert.Equal(t, "sales.csv", lr.InputFiles[0].Name, "as the upstream names it")
	name, rc, err := lr.Files.Fetch(t.Context(), id)
	require.NoError(t, err, "the loop's fetch")
	got, _ := io.ReadAll(rc)
	require.NoError(t, rc.Close(), "close")
	assert.Equal(t, "sales.csv", name, "fetched name")
	assert.Equal(t, "a,b\n", string(got), "the bytes")

	x, err = messages.Surface{}.NewExchange([]byte(body), schema.Options{})
	require.NoError(t, err, "exchange")
	_, refusal = adm.Prepare(t.Context(), x, anthropicCaller("sk-ant-b"), req)
	require.NotNil(t, refusal, "another key's request is refused")
	assert.Equal(t, http.StatusBadRequest, refusal.Err.HTTPStatus(), "a 400")
	assert.Contains(t, refusal.Err.Message, id, "naming the file")
}
