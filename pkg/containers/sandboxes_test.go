package containers

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
	"go.uber.org/zap/zaptest"

	"github.com/codeinterp/codeinterp/pkg/files"
	"github.com/codeinterp/codeinterp/pkg/sandbox"
	"github.com/codeinterp/codeinterp/pkg/sandbox/sandboxtest"
)

// managerFixture serves the API over a real sandbox Manager of sandboxtest containers.
func managerFixture(t *testing.T, mcfg sandbox.ManagerConfig, cfg Config) (*fixture, *sandbox.Manager, *sandboxtest.Provider) {
	t.Helper()
	p := &sandboxtest.Provider{}
	m := sandbox.NewManager(p, mcfg, zaptest.NewLogger(t))
	t.Cleanup(func() { require.NoError(t, m.Close(context.Background()), "close the manager") })
	if cfg.Identify == nil {
		cfg.Identify = func(r *http.Request) (string, error) { return r.Header.Get("Authorization"), nil }
	}
	cfg.Log = zaptest.NewLogger(t)
	st := Sandboxes(m, cfg.MaxUploadBytes)
	srv := httptest.NewServer(New(st, st, cfg))
	t.Cleanup(srv.Close)
	return &fixture{srv: srv}, m, p
}

// TestSandboxStore drives the API over the Manager: the container the API creates is the one
// the code runs in, and the files the API uploads are the files the code reads.
func TestSandboxStore(t *testing.T) {
	up := filesServer(t, "sk-a", map[string]string{"file-1": "from the files api"})
	f, m, p := managerFixture(t, sandbox.ManagerConfig{}, Config{Fetcher: fixed(&files.API{Base: up.URL, Client: up.Client()})})
	ctx := t.Context()
	c := f.client("sk-a")

	made, err := c.Containers.New(ctx, openai.ContainerNewParams{
		Name: "analysis", FileIDs: []string{"file-1"},
		ExpiresAfter: openai.ContainerNewParamsExpiresAfter{Anchor: "last_active_at", Minutes: 7},
		MemoryLimit:  openai.ContainerNewParamsMemoryLimit4g,
	})
	require.NoError(t, err, "create")
	assert.Equal(t, "analysis", made.Name, "name")
	assert.Equal(t, "running", made.Status, "status")
	assert.Equal(t, int64(7), made.ExpiresAfter.Minutes, "expiry")
	assert.Equal(t, "4g", string(made.MemoryLimit), "memory limit")
	assert.True(t, m.Known("Bearer sk-a", made.ID), "the loop knows the container by its id")

	data := make([]byte, 3<<20)
	_, _ = rand.Read(data)
	upl, err := c.Containers.Files.New(ctx, made.ID, openai.ContainerFileNewParams{File: openai.File(bytes.NewReader(data), "blob.bin", "application/octet-stream")})
	require.NoError(t, err, "upload")
	assert.Equal(t, "/mnt/data/blob.bin", upl.Path, "an upload lands under its own name")
	assert.Equal(t, int64(len(data)), upl.Bytes, "bytes")
	assert.Equal(t, "user", string(upl.Source), "source")
	byID, err := c.Containers.Files.New(ctx, made.ID, openai.ContainerFileNewParams{FileID: openai.String("file-1")})
	require.NoError(t, err, "copy by file_id")
	assert.Equal(t, "/mnt/data/upload-file-1.csv", byID.Path, "a copy by id lands under the Files API's name")

	require.Equal(t, 1, p.Created(), "one container started, for its files")
	text, ok := p.Container(0).FileText("/mnt/data/upload-file-1.csv")
	require.True(t, ok, "the code finds the copied file")
	assert.Equal(t, "from the files api", text, "its content")

	list, err := c.Containers.Files.List(ctx, made.ID, openai.ContainerFileListParams{})
	require.NoError(t, err, "list files")
	paths := map[string]bool{}
	for _, fl := range list.Data {
		paths[fl.Path] = true
	}
	assert.Equal(t, map[string]bool{"/mnt/data/blob.bin": true, "/mnt/data/upload-file-1.csv": true}, paths, "files, those of file_ids included")

	resp, err := c.Containers.Files.Content.Get(ctx, made.ID, upl.ID)
	require.NoError(t, err, "download")
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err, "read the download")
	assert.True(t, bytes.Equal(data, got), "downloaded byte for byte (%d bytes, want %d)", len(got), len(data))
	assert.Equal(t, `attachment; filename=blob.bin`, resp.Header.Get("Content-Disposition"), "download name")

	other := f.client("sk-b")
	_, err = other.Containers.Get(ctx, made.ID)
	assert.Equal(t, http.StatusNotFound, apiStatus(t, err), "another key")
	_, err = other.Containers.Files.Content.Get(ctx, made.ID, upl.ID)
	assert.Equal(t, http.StatusNotFound, apiStatus(t, err), "another key downloads")

	require.NoError(t, c.Containers.Files.Delete(ctx, made.ID, upl.ID), "delete the file")
	_, ok = p.Container(0).FileText("/mnt/data/blob.bin")
	assert.False(t, ok, "the file is gone from the container")
	_, err = c.Containers.Files.Get(ctx, made.ID, upl.ID)
	assert.Equal(t, http.StatusNotFound, apiStatus(t, err), "a deleted file")

	require.NoError(t, c.Containers.Delete(ctx, made.ID), "delete the container")
	gone, err := c.Containers.Get(ctx, made.ID)
	require.NoError(t, err, "a deleted container is still shown, expired")
	assert.Equal(t, "expired", gone.Status, "status of a deleted container")
	_, err = c.Containers.Files.New(ctx, made.ID, openai.ContainerFileNewParams{File: openai.File(strings.NewReader("x"), "x.txt", "text/plain")})
	var apiErr *openai.Error
	require.ErrorAs(t, err, &apiErr, "upload into a deleted container")
	assert.Equal(t, "container_expired", apiErr.Code, "the native error")
}

// TestSandboxStoreRefuses: the Manager's refusals become the API's errors.
func TestSandboxStoreRefuses(t *testing.T) {
	f, _, p := managerFixture(t, sandbox.ManagerConfig{MaxContainers: 1, MaxContainersPerIdentity: 1, MaxSessionsPerIdentity: 1},
		Config{MaxUploadBytes: 1 << 20})
	ctx := t.Context()
	c := f.client("sk-a")
	made, err := c.Containers.New(ctx, openai.ContainerNewParams{Name: "one"})
	require.NoError(t, err, "create")

	_, err = c.Containers.Files.New(ctx, made.ID, openai.ContainerFileNewParams{File: openai.File(bytes.NewReader(make([]byte, 1<<20+1)), "big.bin", "application/octet-stream")})
	assert.Equal(t, http.StatusRequestEntityTooLarge, apiStatus(t, err), "a file over the limit")
	list, err := c.Containers.Files.List(ctx, made.ID, openai.ContainerFileListParams{})
	require.NoError(t, err, "list files")
	assert.Empty(t, list.Data, "nothing is left of it")
	if p.Created() > 0 {
		assert.Empty(t, p.Container(0).FilePaths(), "nothing of it in the container")
	}

	_, err = c.Containers.Files.Get(ctx, made.ID, "cfile_00000000000000000000000000000000")
	assert.Equal(t, http.StatusNotFound, apiStatus(t, err), "an unknown file")
	_, err = c.Containers.Get(ctx, "cntr_unknown")
	assert.Equal(t, http.StatusNotFound, apiStatus(t, err), "an unknown container")

	// The caps: the only container of the server is in use by nobody, so it is evicted for
	// the new one (as the loop's containers are), and the old id is then expired.
	b := f.client("sk-b")
	second, err := b.Containers.New(ctx, openai.ContainerNewParams{Name: "two"})
	require.NoError(t, err, "create at the cap evicts the least recently used")
	old, err := c.Containers.Get(ctx, made.ID)
	require.NoError(t, err, "the evicted container")
	assert.Equal(t, "expired", old.Status, "evicted: expired")
	assert.NotEqual(t, made.ID, second.ID, "a new container")
}

// TestSandboxStoreExpiry: a container idle past its expiry is expired.
func TestSandboxStoreExpiry(t *testing.T) {
	p := &sandboxtest.Provider{}
	m := sandbox.NewManager(p, sandbox.ManagerConfig{}, zaptest.NewLogger(t))
	t.Cleanup(func() { require.NoError(t, m.Close(context.Background()), "close the manager") })
	st := Sandboxes(m, 0)
	ctx := t.Context()
	made, err := st.Create(ctx, "me", NewContainer{Name: "short", ExpiresAfter: 50 * time.Millisecond})
	require.NoError(t, err, "create")
	assert.False(t, made.Expired, "alive at first")
	time.Sleep(150 * time.Millisecond)
	got, err := st.Get(ctx, "me", made.ID)
	require.NoError(t, err, "an expired container is still retrieved")
	assert.True(t, got.Expired, "expired once idle past its expiry")
	_, err = st.Put(ctx, "me", made.ID, "a.txt", strings.NewReader("x"))
	assert.True(t, errors.Is(err, ErrExpired), "a file into an expired container: %v", err)
	_, err = st.Files(ctx, "me", made.ID)
	assert.True(t, errors.Is(err, ErrExpired), "the files of an expired container: %v", err)

}

// capped is a provider that creates no container above 16g, as a host with less memory.
type capped struct{ *sandboxtest.Provider }

func (capped) CheckSpec(s sandbox.Spec) error {
	if s.MemoryLimit == "64g" {
		return &sandbox.SpecError{Field: "memory_limit", Value: s.MemoryLimit, Reason: "above the largest this server allows, 16g"}
	}
	return nil
}

func TestSandboxStoreInvalidSpec(t *testing.T) {
	m := sandbox.NewManager(capped{&sandboxtest.Provider{}}, sandbox.ManagerConfig{}, zaptest.NewLogger(t))
	t.Cleanup(func() { require.NoError(t, m.Close(context.Background()), "close the manager") })
	st := Sandboxes(m, 0)
	srv := httptest.NewServer(New(st, st, Config{Identify: func(*http.Request) (string, error) { return "me", nil }}))
	t.Cleanup(srv.Close)
	f := &fixture{srv: srv}
	c := f.client("sk-a")
	_, err := c.Containers.New(t.Context(), openai.ContainerNewParams{Name: "x", MemoryLimit: openai.ContainerNewParamsMemoryLimit64g})
	var apiErr *openai.Error
	require.ErrorAs(t, err, &apiErr, "a memory limit the backend refuses")
	assert.Equal(t, http.StatusBadRequest, apiErr.StatusCode, "status")
	assert.Equal(t, "memory_limit", apiErr.Param, "param")
	assert.Contains(t, apiErr.Message, "16g", "the reason is the client's to read")
}

// brokenFetcher is a Files API whose downloads break off after their first bytes.
type brokenFetcher struct{}

func (brokenFetcher) Stat(context.Context, files.Credentials, string) (string, int64, error) {
	return "data.csv", 10, nil
}

func (brokenFetcher) Fetch(context.Context, files.Credentials, string) (string, io.ReadCloser, error) {
	return "data.csv", io.NopCloser(io.MultiReader(strings.NewReader("a,b\n"), iotest.ErrReader(errors.New("connection reset by 10.1.2.3")))), nil
}

// TestBrokenSources: an upload cut short is the client's 400 and a Files API download that
// breaks off mid-copy a 502; neither leaves a file, nor a container for a create.
func TestBrokenSources(t *testing.T) {
	f, _, _ := managerFixture(t, sandbox.ManagerConfig{}, Config{Fetcher: fixed(brokenFetcher{})})
	ctx := t.Context()
	c := f.client("sk-a")
	made, err := c.Containers.New(ctx, openai.ContainerNewParams{Name: "x"})
	require.NoError(t, err, "create")

	var form bytes.Buffer
	mw := multipart.NewWriter(&form)
	fw, err := mw.CreateFormFile("file", "cut.bin")
	require.NoError(t, err, "form")
	_, _ = fw.Write(bytes.Repeat([]byte("x"), 64<<10))
	// No closing boundary: the part ends with the body, unexpectedly.
	status, body := post(t, f, "sk-a", "/v1/containers/"+made.ID+"/files", mw.FormDataContentType(), form.String())
	assert.Equal(t, http.StatusBadRequest, status, "a truncated multipart body: %s", body)
	assert.Equal(t, "invalid_multipart", gjson.Get(body, "error.code").String(), "code: %s", body)

	status, body = post(t, f, "sk-a", "/v1/containers/"+made.ID+"/files", "application/json", `{"file_id":"file-1"}`)
	assert.Equal(t, http.StatusBadGateway, status, "a Files API body that breaks off: %s", body)
	assert.Equal(t, "files_api_failed", gjson.Get(body, "error.code").String(), "code: %s", body)
	assert.NotContains(t, body, "10.1.2.3", "the upstream's error is not shown")

	list, err := c.Containers.Files.List(ctx, made.ID, openai.ContainerFileListParams{})
	require.NoError(t, err, "list files")
	assert.Empty(t, list.Data, "nothing is left of either")

	status, body = post(t, f, "sk-a", "/v1/containers", "application/json", `{"name":"y","file_ids":["file-1"]}`)
	assert.Equal(t, http.StatusBadGateway, status, "a create whose file_ids copy breaks off: %s", body)
	all, err := c.Containers.List(ctx, openai.ContainerListParams{})
	require.NoError(t, err, "list containers")
	for _, ct := range all.Data {
		if ct.ID != made.ID {
			assert.Equal(t, "expired", string(ct.Status), "no container is left running of the create")
		}
	}
}

// TestUnavailableIsNotFull: a cap refusal is the client's 429; a container that failed to
// start is the server's 503, which names nothing of the failure.
func TestUnavailableIsNotFull(t *testing.T) {
	assert.ErrorIs(t, storeError(fmt.Errorf("create: %w", sandbox.ErrAtCapacity)), ErrFull, "a cap refusal")
	assert.ErrorIs(t, storeError(fmt.Errorf("start: %w", sandbox.ErrUnavailable)), ErrUnavailable, "another unavailability")
	assert.NotErrorIs(t, storeError(fmt.Errorf("start: %w", sandbox.ErrUnavailable)), ErrFull, "is not a full server")

	f, _, p := managerFixture(t, sandbox.ManagerConfig{}, Config{})
	ctx := t.Context()
	c := f.client("sk-a")
	made, err := c.Containers.New(ctx, openai.ContainerNewParams{Name: "lazy"})
	require.NoError(t, err, "create (the container starts on first use)")
	p.FailCreate(errors.New("bwrap: setting up uid map at /var/lib/codeinterp: permission denied"))
	var form bytes.Buffer
	mw := multipart.NewWriter(&form)
	fw, err := mw.CreateFormFile("file", "a.txt")
	require.NoError(t, err, "form")
	_, _ = fw.Write([]byte("a"))
	require.NoError(t, mw.Close(), "form")
	status, body := post(t, f, "sk-a", "/v1/containers/"+made.ID+"/files", mw.FormDataContentType(), form.String())
	assert.Equal(t, http.StatusServiceUnavailable, status, "the container fails to start: %s", body)
	assert.Equal(t, "server_error", gjson.Get(body, "error.type").String(), "type: %s", body)
	assert.Equal(t, "The container could not be started. Try again later.", gjson.Get(body, "error.message").String(), "message: %s", body)
	assert.NotContains(t, body, "/var/lib", "no internals")
}

// TestSandboxStoreNetworkPolicy: an allowlist reaches the container's Spec whole, secrets
// included, and the container object echoes the allowlist without them.
func TestSandboxStoreNetworkPolicy(t *testing.T) {
	f, _, p := managerFixture(t, sandbox.ManagerConfig{}, Config{})
	const value = "sk-the-real-value"
	status, body := post(t, f, "sk-a", "/v1/containers", "application/json",
		`{"name":"x","network_policy":{"type":"allowlist","allowed_domains":["api.example.com"],`+
			`"domain_secrets":[{"domain":"api.example.com","name":"API_TOKEN","value":"`+value+`"}]}}`)
	require.Equal(t, http.StatusOK, status, body)
	assert.Equal(t, "allowlist", gjson.Get(body, "network_policy.type").String(), body)
	assert.Equal(t, `["api.example.com"]`, gjson.Get(body, "network_policy.allowed_domains").Raw, body)
	assert.False(t, gjson.Get(body, "network_policy.domain_secrets").Exists(), "secrets are never echoed: %s", body)
	assert.NotContains(t, body, value)

	// The container starts on first use: a file written into it.
	id := gjson.Get(body, "id").String()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	fw, err := mw.CreateFormFile("file", "a.txt")
	require.NoError(t, err)
	_, _ = fw.Write([]byte("x"))
	require.NoError(t, mw.Close())
	status, body = post(t, f, "sk-a", "/v1/containers/"+id+"/files", mw.FormDataContentType(), buf.String())
	require.Equal(t, http.StatusOK, status, body)
	specs := p.Specs()
	require.Len(t, specs, 1)
	require.NotNil(t, specs[0].NetworkPolicy)
	assert.Equal(t, []string{"api.example.com"}, specs[0].NetworkPolicy.AllowedDomains)
	assert.Equal(t, []sandbox.DomainSecret{{Domain: "api.example.com", Name: "API_TOKEN", Value: value}}, specs[0].NetworkPolicy.DomainSecrets)

	status, body = post(t, f, "sk-a", "/v1/containers", "application/json", `{"name":"y","network_policy":{"type":"disabled"}}`)
	require.Equal(t, http.StatusOK, status, body)
	assert.Equal(t, `{"type":"disabled"}`, gjson.Get(body, "network_policy").Raw)
}
