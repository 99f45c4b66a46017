package containers

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
	"go.uber.org/zap/zaptest"

	"github.com/codeinterp/codeinterp/pkg/files"
	"github.com/codeinterp/codeinterp/pkg/sandbox"
	"github.com/codeinterp/codeinterp/pkg/sandbox/sandboxtest"
)

// afilesFixture serves the Files API (and, for other paths, the Containers API) as the app
// does, over st; callers are identified by x-api-key.
func afilesFixture(t *testing.T, st interface {
	Store
	FileStore
}, cfg Config) *httptest.Server {
	t.Helper()
	if cfg.Identify == nil {
		cfg.Identify = func(r *http.Request) (string, error) { return r.Header.Get("X-Api-Key"), nil }
	}
	cfg.Log = zaptest.NewLogger(t)
	af, h := NewAnthropicFiles(st, st, cfg), New(st, st, cfg)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if af.Serves(r) {
			af.ServeHTTP(w, r)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func anthropicFilesClient(srv *httptest.Server, key, base string) anthropic.Client {
	return anthropic.NewClient(option.WithBaseURL(srv.URL+base), option.WithHeader("x-api-key", key), option.WithMaxRetries(0),
		option.WithHTTPClient(srv.Client()))
}

func anthropicStatus(t *testing.T, err error, what string) (int, string) {
	t.Helper()
	var apiErr *anthropic.Error
	require.ErrorAs(t, err, &apiErr, "%s: an API error", what)
	return apiErr.StatusCode, gjson.Get(apiErr.RawJSON(), "error.type").String()
}

// putFile makes a container of identity with one file.
func putFile(t *testing.T, st Store, fs FileStore, identity, name, content string) (Container, File) {
	t.Helper()
	ct, err := st.Create(t.Context(), identity, NewContainer{Name: "c"})
	require.NoError(t, err, "create a container of %s", identity)
	f, err := fs.Put(t.Context(), identity, ct.ID, name, strings.NewReader(content))
	require.NoError(t, err, "put %s", name)
	return ct, f
}

// TestAnthropicFilesWithTheSDK drives the Files API with anthropic-sdk-go, beta and GA: the
// metadata, the bytes and the deletion of a container file, found among the caller's
// containers by its id alone.
func TestAnthropicFilesWithTheSDK(t *testing.T) {
	st := newMemStore()
	srv := afilesFixture(t, st, Config{})
	_, _ = putFile(t, st, st, "sk-a", "other.txt", "another container")
	ct, f := putFile(t, st, st, "sk-a", "chart.csv", "a,b\n1,2\n")
	ctx := t.Context()
	c := anthropicFilesClient(srv, "sk-a", "/")

	meta, err := c.Beta.Files.GetMetadata(ctx, f.ID, anthropic.BetaFileGetMetadataParams{})
	require.NoError(t, err, "beta metadata")
	assert.Equal(t, f.ID, meta.ID, "id")
	assert.Equal(t, "chart.csv", meta.Filename, "filename")
	assert.Equal(t, "text/csv", meta.MimeType, "mime_type")
	assert.Equal(t, int64(8), meta.SizeBytes, "size_bytes")
	assert.True(t, meta.Downloadable, "a container file is downloadable")
	assert.Equal(t, f.CreatedAt.Unix(), meta.CreatedAt.Unix(), "created_at")
	got, err := st.Get(ctx, "sk-a", ct.ID)
	require.NoError(t, err, "get the container")
	assert.WithinDuration(t, got.LastActiveAt.Add(got.ExpiresAfter), meta.ExpiresAt, 5*time.Second, "expires_at: with its container")

	ga, err := c.Files.GetMetadata(ctx, f.ID, anthropic.FileGetMetadataParams{})
	require.NoError(t, err, "GA metadata")
	assert.Equal(t, "chart.csv", ga.Filename, "GA filename")

	res, err := c.Beta.Files.Download(ctx, f.ID, anthropic.BetaFileDownloadParams{})
	require.NoError(t, err, "download")
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err, "read the download")
	require.NoError(t, res.Body.Close(), "close the download")
	assert.Equal(t, "a,b\n1,2\n", string(body), "the bytes")
	assert.Equal(t, "text/csv", res.Header.Get("Content-Type"), "content type")
	assert.Equal(t, "8", res.Header.Get("Content-Length"), "content length")
	assert.Equal(t, `attachment; filename=chart.csv`, res.Header.Get("Content-Disposition"), "content disposition")

	del, err := c.Beta.Files.Delete(ctx, f.ID, anthropic.BetaFileDeleteParams{})
	require.NoError(t, err, "delete")
	assert.Equal(t, f.ID, del.ID, "deleted id")
	assert.EqualValues(t, "file_deleted", del.Type, "deleted type")
	_, err = c.Beta.Files.GetMetadata(ctx, f.ID, anthropic.BetaFileGetMetadataParams{})
	status, typ := anthropicStatus(t, err, "metadata of a deleted file")
	assert.Equal(t, http.StatusNotFound, status, "a deleted file is gone")
	assert.Equal(t, "not_found_error", typ, "error type")
	_, err = st.File(ctx, "sk-a", ct.ID, f.ID)
	assert.ErrorIs(t, err, ErrNotFound, "gone from its container")

	// Under a path prefix too.
	_, g := putFile(t, st, st, "sk-a", "g.png", "png")
	srvP := afilesFixture(t, st, Config{PathPrefixes: []string{"/analyst"}})
	cp := anthropicFilesClient(srvP, "sk-a", "/analyst/")
	meta, err = cp.Beta.Files.GetMetadata(ctx, g.ID, anthropic.BetaFileGetMetadataParams{})
	require.NoError(t, err, "metadata under /analyst")
	assert.Equal(t, "image/png", meta.MimeType, "mime_type under /analyst")
}

// TestAnthropicFilesTenants: another key's file, an id codeinterp did not mint, a missing
// key: Anthropic's errors, and nothing of another tenant's file shown or removed.
func TestAnthropicFilesTenants(t *testing.T) {
	st := newMemStore()
	srv := afilesFixture(t, st, Config{})
	ct, f := putFile(t, st, st, "sk-a", "secret.txt", "a's")
	ctx := t.Context()
	b := anthropicFilesClient(srv, "sk-b", "/")
	_, _ = putFile(t, st, st, "sk-b", "mine.txt", "b's")

	tests := []struct {
		name string
		call func() error
	}{
		{"metadata", func() error {
			_, err := b.Beta.Files.GetMetadata(ctx, f.ID, anthropic.BetaFileGetMetadataParams{})
			return err
		}},
		{"download", func() error {
			_, err := b.Beta.Files.Download(ctx, f.ID, anthropic.BetaFileDownloadParams{})
			return err
		}},
		{"delete", func() error {
			_, err := b.Beta.Files.Delete(ctx, f.ID, anthropic.BetaFileDeleteParams{})
			return err
		}},
		{"an upstream id", func() error {
			_, err := b.Beta.Files.GetMetadata(ctx, "file_011CNha8iCJcU1wXNR6q4V8w", anthropic.BetaFileGetMetadataParams{})
			return err
		}},
		{"the container's id", func() error {
			_, err := b.Beta.Files.GetMetadata(ctx, ct.ID, anthropic.BetaFileGetMetadataParams{})
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, typ := anthropicStatus(t, tt.call(), tt.name)
			assert.Equal(t, http.StatusNotFound, status, "%s of another key's file", tt.name)
			assert.Equal(t, "not_found_error", typ, "%s: error type", tt.name)
		})
	}
	_, err := st.File(ctx, "sk-a", ct.ID, f.ID)
	assert.NoError(t, err, "a's file is still there")

	list, err := b.Beta.Files.List(ctx, anthropic.BetaFileListParams{})
	require.NoError(t, err, "b's list")
	require.Len(t, list.Data, 1, "b sees its own file only")
	assert.Equal(t, "mine.txt", list.Data[0].Filename, "b's file")

	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/v1/files/"+f.ID, nil)
	require.NoError(t, err, "request without a key")
	res, err := srv.Client().Do(req)
	require.NoError(t, err, "call without a key")
	js, _ := io.ReadAll(res.Body)
	_ = res.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, res.StatusCode, "no key: 401")
	assert.Equal(t, "authentication_error", gjson.GetBytes(js, "error.type").String(), "its type: %s", js)
	assert.Equal(t, "error", gjson.GetBytes(js, "type").String(), "Anthropic's shape: %s", js)
}

// TestAnthropicFilesVerify: a key the upstream refuses gets a 401 authentication_error.
func TestAnthropicFilesVerify(t *testing.T) {
	st := newMemStore()
	srv := afilesFixture(t, st, Config{Verify: func(_ context.Context, identity string, creds files.Credentials) error {
		if creds["X-Api-Key"] != "sk-good" {
			return ErrUnauthorized
		}
		return nil
	}})
	_, f := putFile(t, st, st, "sk-bad", "x.txt", "x")
	bad := anthropicFilesClient(srv, "sk-bad", "/")
	_, err := bad.Beta.Files.GetMetadata(t.Context(), f.ID, anthropic.BetaFileGetMetadataParams{})
	status, typ := anthropicStatus(t, err, "a refused key")
	assert.Equal(t, http.StatusUnauthorized, status, "a refused key: 401")
	assert.Equal(t, "authentication_error", typ, "error type")
}

// TestAnthropicFilesList pages the caller's container files, the newest first, in the GA
// shape (next_page) and the beta one (first_id, last_id, has_more), and by ids.
func TestAnthropicFilesList(t *testing.T) {
	st := newMemStore()
	srv := afilesFixture(t, st, Config{})
	ctx := t.Context()
	ct, err := st.Create(ctx, "sk-a", NewContainer{Name: "c"})
	require.NoError(t, err, "create")
	var ids []string // the newest first
	for _, name := range []string{"a.txt", "b.txt", "c.txt", "d.txt", "e.txt"} {
		f, err := st.Put(ctx, "sk-a", ct.ID, name, strings.NewReader(name))
		require.NoError(t, err, "put %s", name)
		ids = append([]string{f.ID}, ids...)
	}
	_, other := putFile(t, st, st, "sk-a", "f.txt", "in another container")
	ids = append([]string{other.ID}, ids...)
	c := anthropicFilesClient(srv, "sk-a", "/")

	var got []string
	pager := c.Files.ListAutoPaging(ctx, anthropic.FileListParams{Limit: anthropic.Int(2)})
	for pager.Next() {
		got = append(got, pager.Current().ID)
	}
	require.NoError(t, pager.Err(), "GA paging")
	assert.Equal(t, ids, got, "GA pages: every file, the newest first")

	// This SDK's beta service sends no beta header and reads the GA shape.
	sdkBeta, err := c.Beta.Files.List(ctx, anthropic.BetaFileListParams{Limit: anthropic.Int(4)})
	require.NoError(t, err, "beta list")
	require.Len(t, sdkBeta.Data, 4, "the first page")
	assert.NotEmpty(t, sdkBeta.NextPage, "next_page: %s", sdkBeta.RawJSON())

	raw := func(query string) string {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/v1/files?"+query, nil)
		require.NoError(t, err, "request %s", query)
		req.Header.Set("X-Api-Key", "sk-a")
		req.Header.Set("Anthropic-Beta", "files-api-2025-04-14")
		res, err := srv.Client().Do(req)
		require.NoError(t, err, "list %s", query)
		defer res.Body.Close()
		js, err := io.ReadAll(res.Body)
		require.NoError(t, err, "read %s", query)
		return string(js)
	}
	// With the deprecated beta header (older SDKs send it), the beta shapes.
	first := raw("limit=4")
	assert.Equal(t, int64(4), gjson.Get(first, "data.#").Int(), "the first page: %s", first)
	assert.Equal(t, ids[3], gjson.Get(first, "last_id").String(), "last_id: %s", first)
	assert.Equal(t, ids[0], gjson.Get(first, "first_id").String(), "first_id")
	assert.True(t, gjson.Get(first, "has_more").Bool(), "has_more")
	assert.False(t, gjson.Get(first, "next_page").Exists(), "no GA cursor")
	second := raw("limit=4&after_id=" + ids[3])
	assert.Equal(t, ids[4], gjson.Get(second, "data.0.id").String(), "after_id: %s", second)
	assert.Equal(t, int64(2), gjson.Get(second, "data.#").Int(), "the rest")
	assert.False(t, gjson.Get(second, "has_more").Bool(), "no more")
	before := raw("limit=2&before_id=" + ids[3])
	assert.Equal(t, []string{ids[1], ids[2]}, []string{gjson.Get(before, "data.0.id").String(), gjson.Get(before, "data.1.id").String()}, "before_id: %s", before)
	assert.True(t, gjson.Get(before, "has_more").Bool(), "newer files before them")
	scoped := raw("scope_id=" + ct.ID)
	assert.Equal(t, int64(5), gjson.Get(scoped, "data.#").Int(), "scope_id names a container: %s", scoped)

	byIDs, err := c.Files.List(ctx, anthropic.FileListParams{IDs: []string{ids[2], "file_unknown", ids[5]}})
	require.NoError(t, err, "list by ids")
	require.Len(t, byIDs.Data, 2, "unknown ids are left out")
	assert.Empty(t, byIDs.NextPage, "one page")

	_, err = c.Files.List(ctx, anthropic.FileListParams{Limit: anthropic.Int(1001)})
	status, typ := anthropicStatus(t, err, "limit over 1000")
	assert.Equal(t, http.StatusBadRequest, status, "limit over 1000")
	assert.Equal(t, "invalid_request_error", typ, "its type")
}

// TestAnthropicFilesOverSandboxes: over a sandbox Manager, a file the code wrote (registered
// by the run) is found by its id, and an expired container's files are gone.
func TestAnthropicFilesOverSandboxes(t *testing.T) {
	p := &sandboxtest.Provider{}
	m := sandbox.NewManager(p, sandbox.ManagerConfig{}, zaptest.NewLogger(t))
	t.Cleanup(func() { require.NoError(t, m.Close(context.Background()), "close the manager") })
	st := Sandboxes(m, 0)
	srv := afilesFixture(t, st, Config{})
	ctx := t.Context()
	info, err := m.Create(ctx, sandbox.CreateRequest{Identity: "sk-a", Name: "c"})
	require.NoError(t, err, "create")
	fi, err := m.PutFile(ctx, "sk-a", info.ID, "/mnt/data/out/report.md", sandbox.SourceAssistant, strings.NewReader("# hi\n"), 0)
	require.NoError(t, err, "write a file")
	c := anthropicFilesClient(srv, "sk-a", "/")

	meta, err := c.Beta.Files.GetMetadata(ctx, fi.ID, anthropic.BetaFileGetMetadataParams{})
	require.NoError(t, err, "metadata")
	assert.Equal(t, "report.md", meta.Filename, "the base name")
	assert.Equal(t, "text/markdown", meta.MimeType, "mime_type")
	assert.Equal(t, int64(5), meta.SizeBytes, "size")
	res, err := c.Beta.Files.Download(ctx, fi.ID, anthropic.BetaFileDownloadParams{})
	require.NoError(t, err, "download")
	body, _ := io.ReadAll(res.Body)
	_ = res.Body.Close()
	assert.Equal(t, "# hi\n", string(body), "the bytes")

	b := anthropicFilesClient(srv, "sk-b", "/")
	_, err = b.Beta.Files.Download(ctx, fi.ID, anthropic.BetaFileDownloadParams{})
	status, _ := anthropicStatus(t, err, "another key")
	assert.Equal(t, http.StatusNotFound, status, "another key: 404")

	require.NoError(t, m.DeleteContainer(ctx, "sk-a", info.ID), "delete the container")
	_, err = c.Beta.Files.GetMetadata(ctx, fi.ID, anthropic.BetaFileGetMetadataParams{})
	status, typ := anthropicStatus(t, err, "a deleted container's file")
	assert.Equal(t, http.StatusNotFound, status, "its files went with it")
	assert.Equal(t, "not_found_error", typ, "error type")
	assert.False(t, errors.Is(err, ErrNotFound), "the client sees the API error only")
}
