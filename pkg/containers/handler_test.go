package containers

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/codeinterp/codeinterp/pkg/files"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// memStore is an in-memory Store and FileStore: containers and files keyed by identity.
type memStore struct {
	mu         sync.Mutex
	now        time.Time
	containers map[string]map[string]*memContainer // identity -> id -> container
	puts       int
}

type memContainer struct {
	c     Container
	files map[string]memFile
}

type memFile struct {
	f    File
	data []byte
}

func newMemStore() *memStore {
	return &memStore{now: time.Unix(1_700_000_000, 0), containers: map[string]map[string]*memContainer{}}
}

func newID(prefix string) string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

func (s *memStore) tick() time.Time {
	s.now = s.now.Add(time.Second)
	return s.now
}

func (s *memStore) Create(_ context.Context, identity string, nc NewContainer) (Container, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if nc.MemoryLimit == "" {
		nc.MemoryLimit = "1g"
	}
	if nc.MemoryLimit == "2g" {
		return Container{}, &InvalidError{Param: "memory_limit", Message: "Invalid 'memory_limit': expected one of 1g, 4g, 16g, 64g."}
	}
	if nc.NetworkPolicy != nil {
		// As a server that has not enabled network access.
		return Container{}, &InvalidError{Param: "network_policy", Message: "Invalid 'network_policy': network access is not enabled on this server."}
	}
	if nc.ExpiresAfter == 0 {
		nc.ExpiresAfter = 20 * time.Minute
	}
	now := s.tick()
	c := Container{ID: newID("cntr_"), Name: nc.Name, CreatedAt: now, LastActiveAt: now, ExpiresAfter: nc.ExpiresAfter, MemoryLimit: nc.MemoryLimit}
	if s.containers[identity] == nil {
		s.containers[identity] = map[string]*memContainer{}
	}
	s.containers[identity][c.ID] = &memContainer{c: c, files: map[string]memFile{}}
	return c, nil
}

func (s *memStore) List(_ context.Context, identity string) ([]Container, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Container
	for _, c := range s.containers[identity] {
		out = append(out, c.c)
	}
	return out, nil
}

func (s *memStore) get(identity, id string) (*memContainer, error) {
	c, ok := s.containers[identity][id]
	if !ok {
		return nil, ErrNotFound
	}
	c.c.LastActiveAt = s.tick()
	return c, nil
}

func (s *memStore) Get(_ context.Context, identity, id string) (Container, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, err := s.get(identity, id)
	if err != nil {
		return Container{}, err
	}
	return c.c, nil
}

func (s *memStore) Delete(_ context.Context, identity, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.get(identity, id); err != nil {
		return err
	}
	delete(s.containers[identity], id)
	return nil
}

func (s *memStore) Put(_ context.Context, identity, id, name string, r io.Reader) (File, error) {
	data, err := io.ReadAll(r)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.puts++
	if err != nil {
		return File{}, err // nothing of it is kept
	}
	c, err := s.get(identity, id)
	if err != nil {
		return File{}, err
	}
	f := File{ID: newID("cfile_"), ContainerID: id, Path: "/mnt/data/" + name, Bytes: int64(len(data)), CreatedAt: s.tick(), Source: "user"}
	c.files[f.ID] = memFile{f: f, data: data}
	return f, nil
}

func (s *memStore) Files(_ context.Context, identity, id string) ([]File, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, err := s.get(identity, id)
	if err != nil {
		return nil, err
	}
	var out []File
	for _, f := range c.files {
		out = append(out, f.f)
	}
	return out, nil
}

func (s *memStore) file(identity, id, fileID string) (memFile, error) {
	c, err := s.get(identity, id)
	if err != nil {
		return memFile{}, err
	}
	f, ok := c.files[fileID]
	if !ok {
		return memFile{}, ErrNotFound
	}
	return f, nil
}

func (s *memStore) File(_ context.Context, identity, id, fileID string) (File, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f, err := s.file(identity, id, fileID)
	return f.f, err
}

func (s *memStore) Open(_ context.Context, identity, id, fileID string) (io.ReadCloser, File, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f, err := s.file(identity, id, fileID)
	if err != nil {
		return nil, File{}, err
	}
	return io.NopCloser(bytes.NewReader(f.data)), f.f, nil
}

func (s *memStore) Remove(_ context.Context, identity, id, fileID string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, err := s.get(identity, id)
	if err != nil {
		return err
	}
	if _, ok := c.files[fileID]; !ok {
		return ErrNotFound
	}
	delete(c.files, fileID)
	return nil
}

func (s *memStore) count(identity string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.containers[identity])
}

// filesServer is an upstream Files API with the files given, readable with one key only.
func filesServer(t *testing.T, key string, files map[string]string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+key {
			http.Error(w, `{"error":{"message":"no"}}`, http.StatusUnauthorized)
			return
		}
		rest, ok := strings.CutPrefix(r.URL.Path, "/v1/files/")
		id, content := strings.CutSuffix(rest, "/content")
		data, known := files[id]
		switch {
		case !ok || !known:
			http.Error(w, `{"error":{"message":"No such File object"}}`, http.StatusNotFound)
		case content:
			_, _ = io.WriteString(w, data)
		default:
			fmt.Fprintf(w, `{"id":%q,"object":"file","filename":"upload-%s.csv","bytes":%d}`, id, id, len(data))
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

type fixture struct {
	store   *memStore
	handler *Handler
	srv     *httptest.Server
}

func newFixture(t *testing.T, cfg Config) *fixture {
	t.Helper()
	st := newMemStore()
	if cfg.Identify == nil {
		cfg.Identify = func(r *http.Request) (string, error) { return r.Header.Get("Authorization"), nil }
	}
	cfg.Log = zaptest.NewLogger(t)
	h := New(st, st, cfg)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &fixture{store: st, handler: h, srv: srv}
}

func (f *fixture) client(key string) openai.Client {
	return openai.NewClient(option.WithBaseURL(f.srv.URL+"/v1/"), option.WithAPIKey(key), option.WithMaxRetries(0),
		option.WithHTTPClient(f.srv.Client()))
}

func apiStatus(t *testing.T, err error) int {
	t.Helper()
	var apiErr *openai.Error
	require.ErrorAs(t, err, &apiErr, "an API error")
	return apiErr.StatusCode
}

// TestContainersWithTheSDK drives every call of the API with openai-go.
func TestContainersWithTheSDK(t *testing.T) {
	f := newFixture(t, Config{})
	ctx := t.Context()
	c := f.client("sk-a")

	made, err := c.Containers.New(ctx, openai.ContainerNewParams{
		Name:         "analysis",
		ExpiresAfter: openai.ContainerNewParamsExpiresAfter{Anchor: "last_active_at", Minutes: 5},
		MemoryLimit:  openai.ContainerNewParamsMemoryLimit4g,
	})
	require.NoError(t, err, "create")
	assert.True(t, strings.HasPrefix(made.ID, "cntr_"), "id %q", made.ID)
	assert.Equal(t, "container", made.Object, "object")
	assert.Equal(t, "analysis", made.Name, "name")
	assert.Equal(t, "running", made.Status, "status")
	assert.Equal(t, int64(5), made.ExpiresAfter.Minutes, "expiry minutes")
	assert.Equal(t, "last_active_at", string(made.ExpiresAfter.Anchor), "expiry anchor")
	assert.Equal(t, "4g", string(made.MemoryLimit), "memory limit")

	got, err := c.Containers.Get(ctx, made.ID)
	require.NoError(t, err, "retrieve")
	assert.Equal(t, made.ID, got.ID, "retrieved id")

	csv := []byte("a,b\n1,2\n3,4\n")
	up, err := c.Containers.Files.New(ctx, made.ID, openai.ContainerFileNewParams{File: openai.File(bytes.NewReader(csv), "data.csv", "text/csv")})
	require.NoError(t, err, "upload")
	assert.True(t, strings.HasPrefix(up.ID, "cfile_"), "file id %q", up.ID)
	assert.Equal(t, "container.file", string(up.Object), "file object")
	assert.Equal(t, "/mnt/data/data.csv", up.Path, "file path")
	assert.Equal(t, int64(len(csv)), up.Bytes, "file bytes")
	assert.Equal(t, made.ID, up.ContainerID, "file container")
	assert.Equal(t, "user", string(up.Source), "file source")

	files, err := c.Containers.Files.List(ctx, made.ID, openai.ContainerFileListParams{})
	require.NoError(t, err, "list files")
	require.Len(t, files.Data, 1, "files")
	assert.Equal(t, up.ID, files.Data[0].ID, "listed file")

	fget, err := c.Containers.Files.Get(ctx, made.ID, up.ID)
	require.NoError(t, err, "retrieve file")
	assert.Equal(t, up.Path, fget.Path, "retrieved file path")

	resp, err := c.Containers.Files.Content.Get(ctx, made.ID, up.ID)
	require.NoError(t, err, "download")
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err, "read the download")
	assert.Equal(t, csv, body, "downloaded bytes")

	require.NoError(t, c.Containers.Files.Delete(ctx, made.ID, up.ID), "delete file")
	_, err = c.Containers.Files.Get(ctx, made.ID, up.ID)
	assert.Equal(t, http.StatusNotFound, apiStatus(t, err), "a deleted file")

	require.NoError(t, c.Containers.Delete(ctx, made.ID), "delete container")
	_, err = c.Containers.Get(ctx, made.ID)
	assert.Equal(t, http.StatusNotFound, apiStatus(t, err), "a deleted container")
}

func TestContainersListPages(t *testing.T) {
	f := newFixture(t, Config{})
	ctx := t.Context()
	c := f.client("sk-a")
	var ids []string
	for i := range 5 {
		made, err := c.Containers.New(ctx, openai.ContainerNewParams{Name: fmt.Sprintf("c%d", i%2)})
		require.NoError(t, err, "create %d", i)
		ids = append(ids, made.ID)
	}
	first, err := c.Containers.List(ctx, openai.ContainerListParams{Limit: openai.Int(2)})
	require.NoError(t, err, "first page")
	require.Len(t, first.Data, 2, "first page")
	assert.Equal(t, []string{ids[4], ids[3]}, []string{first.Data[0].ID, first.Data[1].ID}, "newest first")
	assert.True(t, first.HasMore, "more after the first page")

	var all []string
	iter := c.Containers.ListAutoPaging(ctx, openai.ContainerListParams{Limit: openai.Int(2), Order: openai.ContainerListParamsOrderAsc})
	for iter.Next() {
		all = append(all, iter.Current().ID)
	}
	require.NoError(t, iter.Err(), "auto paging")
	assert.Equal(t, ids, all, "every container once, oldest first")

	named, err := c.Containers.List(ctx, openai.ContainerListParams{Name: openai.String("c1")})
	require.NoError(t, err, "by name")
	assert.Len(t, named.Data, 2, "containers named c1")
}

// TestContainersTenants: another API key sees none of a container, and every call on it is a
// 404; a caller without a key gets a 401.
func TestContainersTenants(t *testing.T) {
	f := newFixture(t, Config{})
	ctx := t.Context()
	owner, other := f.client("sk-owner"), f.client("sk-other")
	made, err := owner.Containers.New(ctx, openai.ContainerNewParams{Name: "mine"})
	require.NoError(t, err, "create")
	up, err := owner.Containers.Files.New(ctx, made.ID, openai.ContainerFileNewParams{File: openai.File(strings.NewReader("secret"), "s.txt", "text/plain")})
	require.NoError(t, err, "upload")

	list, err := other.Containers.List(ctx, openai.ContainerListParams{})
	require.NoError(t, err, "list as another key")
	assert.Empty(t, list.Data, "another key lists nothing")
	calls := map[string]func() error{
		"retrieve": func() error { _, err := other.Containers.Get(ctx, made.ID); return err },
		"delete":   func() error { return other.Containers.Delete(ctx, made.ID) },
		"list files": func() error {
			_, err := other.Containers.Files.List(ctx, made.ID, openai.ContainerFileListParams{})
			return err
		},
		"write": func() error {
			_, err := other.Containers.Files.New(ctx, made.ID, openai.ContainerFileNewParams{File: openai.File(strings.NewReader("x"), "x.txt", "text/plain")})
			return err
		},
		"read":        func() error { _, err := other.Containers.Files.Get(ctx, made.ID, up.ID); return err },
		"download":    func() error { _, err := other.Containers.Files.Content.Get(ctx, made.ID, up.ID); return err },
		"delete file": func() error { return other.Containers.Files.Delete(ctx, made.ID, up.ID) },
	}
	for name, call := range calls {
		assert.Equal(t, http.StatusNotFound, apiStatus(t, call()), "%s as another key", name)
	}
	_, err = owner.Containers.Files.Get(ctx, made.ID, up.ID)
	assert.NoError(t, err, "the owner's file is still there")

	resp, err := f.srv.Client().Get(f.srv.URL + "/v1/containers")
	require.NoError(t, err, "list without a key")
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "no key")
	assert.Equal(t, "missing_api_key", gjson.GetBytes(body, "error.code").String(), "error code: %s", body)
}

// TestContainerFilesByID: file_ids on create and a container file by file_id, as JSON (the
// Python SDK) and as a multipart field (openai-go), read from the upstream's Files API with the
// caller's key.
func TestContainerFilesByID(t *testing.T) {
	up := filesServer(t, "sk-a", map[string]string{"file-1": "x,y\n1,2\n", "file-2": "hello"})
	f := newFixture(t, Config{Fetcher: fixed(&files.API{Base: up.URL, Client: up.Client()})})
	ctx := t.Context()
	c := f.client("sk-a")

	made, err := c.Containers.New(ctx, openai.ContainerNewParams{Name: "with files", FileIDs: []string{"file-1"}})
	require.NoError(t, err, "create with file_ids")
	list, err := c.Containers.Files.List(ctx, made.ID, openai.ContainerFileListParams{})
	require.NoError(t, err, "list files")
	require.Len(t, list.Data, 1, "the file of file_ids")
	assert.Equal(t, "/mnt/data/upload-file-1.csv", list.Data[0].Path, "its path")

	byID, err := c.Containers.Files.New(ctx, made.ID, openai.ContainerFileNewParams{FileID: openai.String("file-2")})
	require.NoError(t, err, "file_id as a multipart field")
	resp, err := c.Containers.Files.Content.Get(ctx, made.ID, byID.ID)
	require.NoError(t, err, "download")
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, "hello", string(got), "copied bytes")

	status, body := post(t, f, "sk-a", "/v1/containers/"+made.ID+"/files", "application/json", `{"file_id":"file-2"}`)
	assert.Equal(t, http.StatusOK, status, "file_id as JSON: %s", body)
	assert.Equal(t, "/mnt/data/upload-file-2.csv", gjson.Get(body, "path").String(), "JSON file_id path")

	_, err = c.Containers.Files.New(ctx, made.ID, openai.ContainerFileNewParams{FileID: openai.String("file-404")})
	assert.Equal(t, http.StatusBadRequest, apiStatus(t, err), "a file the Files API does not have")

	before := f.store.count("Bearer sk-a")
	_, err = c.Containers.New(ctx, openai.ContainerNewParams{Name: "half", FileIDs: []string{"file-1", "file-404"}})
	assert.Equal(t, http.StatusBadRequest, apiStatus(t, err), "create with a missing file")
	assert.Equal(t, before, f.store.count("Bearer sk-a"), "no container is left by a failed create")

	other := f.client("sk-b")
	mine, err := other.Containers.New(ctx, openai.ContainerNewParams{Name: "b"})
	require.NoError(t, err, "create as b")
	_, err = other.Containers.Files.New(ctx, mine.ID, openai.ContainerFileNewParams{FileID: openai.String("file-1")})
	assert.Equal(t, http.StatusBadRequest, apiStatus(t, err), "another key cannot copy a's file")
}

func post(t *testing.T, f *fixture, key, path, contentType, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, f.srv.URL+path, strings.NewReader(body))
	require.NoError(t, err, "request %s", path)
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", contentType)
	resp, err := f.srv.Client().Do(req)
	require.NoError(t, err, "POST %s", path)
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(out)
}

func TestContainersRefuse(t *testing.T) {
	f := newFixture(t, Config{MaxUploadBytes: 1000})
	ctx := t.Context()
	c := f.client("sk-a")
	made, err := c.Containers.New(ctx, openai.ContainerNewParams{Name: "x"})
	require.NoError(t, err, "create")

	tests := []struct {
		name, path, contentType, body string
		wantStatus                    int
		wantCode                      string
	}{
		{"no name", "/v1/containers", "application/json", `{}`, 400, "missing_required_parameter"},
		{"expiry over the cap", "/v1/containers", "application/json", `{"name":"x","expires_after":{"anchor":"last_active_at","minutes":21}}`, 400, "integer_above_max_value"},
		{"expiry anchor", "/v1/containers", "application/json", `{"name":"x","expires_after":{"anchor":"created_at","minutes":2}}`, 400, "invalid_value"},
		{"unknown field", "/v1/containers", "application/json", `{"name":"x","colour":"red"}`, 400, "unknown_parameter"},
		{"network", "/v1/containers", "application/json", `{"name":"x","network_policy":{"type":"allowlist","allowed_domains":["a.b"]}}`, 400, "invalid_value"},
		{"network type", "/v1/containers", "application/json", `{"name":"x","network_policy":{"type":"open"}}`, 400, "invalid_value"},
		{"network without a type", "/v1/containers", "application/json", `{"name":"x","network_policy":{}}`, 400, "missing_required_parameter"},
		{"allowlist without domains", "/v1/containers", "application/json", `{"name":"x","network_policy":{"type":"allowlist"}}`, 400, "missing_required_parameter"},
		{"secret without value", "/v1/containers", "application/json", `{"name":"x","network_policy":{"type":"allowlist","allowed_domains":["a.b"],"domain_secrets":[{"domain":"a.b","name":"T"}]}}`, 400, "missing_required_parameter"},
		{"network unknown field", "/v1/containers", "application/json", `{"name":"x","network_policy":{"type":"allowlist","allowed_domains":["a.b"],"ports":[1]}}`, 400, "unknown_parameter"},
		{"memory limit", "/v1/containers", "application/json", `{"name":"x","memory_limit":"2g"}`, 400, "invalid_value"},
		{"not JSON", "/v1/containers", "application/json", `{"name":`, 400, "invalid_json"},
		{"file id without fetcher", "/v1/containers/" + made.ID + "/files", "application/json", `{"file_id":"file-1"}`, 400, "invalid_value"},
		{"neither file nor id", "/v1/containers/" + made.ID + "/files", "application/json", `{}`, 400, "missing_required_parameter"},
		{"unknown container", "/v1/containers/cntr_nope/files", "application/json", `{"file_id":"f"}`, 404, "not_found"},
		{"other media", "/v1/containers/" + made.ID + "/files", "text/plain", `hello`, 415, "unsupported_media_type"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body := post(t, f, "sk-a", tt.path, tt.contentType, tt.body)
			assert.Equal(t, tt.wantStatus, status, "status of %s: %s", tt.body, body)
			assert.Equal(t, tt.wantCode, gjson.Get(body, "error.code").String(), "code of %s: %s", tt.body, body)
			assert.True(t, gjson.Get(body, "error.message").Exists(), "OpenAI error shape: %s", body)
		})
	}

	_, err = c.Containers.Files.New(ctx, made.ID, openai.ContainerFileNewParams{File: openai.File(bytes.NewReader(make([]byte, 1001)), "big.bin", "application/octet-stream")})
	assert.Equal(t, http.StatusRequestEntityTooLarge, apiStatus(t, err), "a file over the limit")
	files, err := c.Containers.Files.List(ctx, made.ID, openai.ContainerFileListParams{})
	require.NoError(t, err, "list files")
	assert.Empty(t, files.Data, "nothing is left of a refused upload")
	_, err = c.Containers.Files.New(ctx, made.ID, openai.ContainerFileNewParams{File: openai.File(bytes.NewReader(make([]byte, 1000)), "fits.bin", "application/octet-stream")})
	assert.NoError(t, err, "a file at the limit")

	resp, err := f.srv.Client().Get(f.srv.URL + "/v1/containerz")
	require.NoError(t, err, "unknown path")
	resp.Body.Close()
	assert.Equal(t, http.StatusNotFound, resp.StatusCode, "unknown path")
}

// TestContainerUploadStreams: an upload reaches the store while the client is still sending.
func TestContainerUploadStreams(t *testing.T) {
	seen := make(chan struct{})
	st := &streamCheck{memStore: newMemStore(), seen: seen}
	srv := httptest.NewServer(New(st, st, Config{Identify: func(*http.Request) (string, error) { return "me", nil }}))
	t.Cleanup(srv.Close)
	made, err := st.Create(t.Context(), "me", NewContainer{Name: "x"})
	require.NoError(t, err, "create")

	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		defer pw.Close()
		if _, err := io.WriteString(pw, "--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"s.txt\"\r\n\r\nfirst part "); err != nil {
			done <- err
			return
		}
		<-seen // the store has read the first bytes before the rest is sent
		_, err := io.WriteString(pw, "second part\r\n--B--\r\n")
		done <- err
	}()
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/v1/containers/"+made.ID+"/files", pr)
	require.NoError(t, err, "request")
	req.Header.Set("Content-Type", "multipart/form-data; boundary=B")
	resp, err := srv.Client().Do(req)
	require.NoError(t, err, "upload")
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, <-done, "client writes")
	assert.Equal(t, http.StatusOK, resp.StatusCode, "status: %s", body)
	assert.Equal(t, int64(len("first part second part")), gjson.GetBytes(body, "bytes").Int(), "bytes: %s", body)
}

// streamCheck is a memStore whose Put signals once it has read the first bytes.
type streamCheck struct {
	*memStore
	seen chan struct{}
}

func (s *streamCheck) Put(ctx context.Context, identity, id, name string, r io.Reader) (File, error) {
	first := make([]byte, 5)
	if _, err := io.ReadFull(r, first); err != nil {
		return File{}, err
	}
	close(s.seen)
	return s.memStore.Put(ctx, identity, id, name, io.MultiReader(bytes.NewReader(first), r))
}

func TestBaseName(t *testing.T) {
	tests := []struct{ give, want string }{
		{"data.csv", "data.csv"}, {"dir/data.csv", "data.csv"}, {`C:\x\y.txt`, "y.txt"}, {"../../etc/passwd", "passwd"},
	}
	for _, tt := range tests {
		got, err := baseName(tt.give)
		require.NoError(t, err, "baseName(%q)", tt.give)
		assert.Equal(t, tt.want, got, "baseName(%q)", tt.give)
	}
	for _, bad := range []string{"", ".", "..", "/", "a\x00b", strings.Repeat("x", 256)} {
		_, err := baseName(bad)
		assert.Error(t, err, "baseName(%q)", bad)
	}
	assert.True(t, errors.Is(ErrTooLarge, ErrTooLarge), "sentinel")
}

func (s *memStore) expire(identity, id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.containers[identity][id].c.Expired = true
}

// TestExpiredContainer: an expired container is still listed and retrieved, with status
// "expired", and refuses a file before reading a byte of it.
func TestExpiredContainer(t *testing.T) {
	f := newFixture(t, Config{})
	ctx := t.Context()
	c := f.client("sk-a")
	made, err := c.Containers.New(ctx, openai.ContainerNewParams{Name: "old"})
	require.NoError(t, err, "create")
	f.store.expire("Bearer sk-a", made.ID)

	got, err := c.Containers.Get(ctx, made.ID)
	require.NoError(t, err, "retrieve an expired container")
	assert.Equal(t, "expired", got.Status, "its status")
	list, err := c.Containers.List(ctx, openai.ContainerListParams{})
	require.NoError(t, err, "list")
	require.Len(t, list.Data, 1, "the expired container is listed")
	assert.Equal(t, "expired", list.Data[0].Status, "listed status")

	puts := f.store.puts
	_, err = c.Containers.Files.New(ctx, made.ID, openai.ContainerFileNewParams{File: openai.File(strings.NewReader("x"), "x.txt", "text/plain")})
	var apiErr *openai.Error
	require.ErrorAs(t, err, &apiErr, "upload into an expired container")
	assert.Equal(t, http.StatusBadRequest, apiErr.StatusCode, "status")
	assert.Equal(t, "container_expired", apiErr.Code, "code")
	assert.Equal(t, puts, f.store.puts, "the store is not asked to write")
}

// TestContainerFilesByIDRefused: file_ids checked before the container is made: too large for
// the upload limit, or failing upstream; a copy by id is bounded like an upload.
func TestContainerFilesByIDRefused(t *testing.T) {
	up := filesServer(t, "sk-a", map[string]string{"file-big": strings.Repeat("x", 2000), "file-ok": "ok"})
	broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, `{"error":{"message":"upstream secret"}}`, http.StatusInternalServerError)
	}))
	t.Cleanup(broken.Close)

	f := newFixture(t, Config{MaxUploadBytes: 1000, Fetcher: fixed(&files.API{Base: up.URL, Client: up.Client()})})
	ctx := t.Context()
	c := f.client("sk-a")
	_, err := c.Containers.New(ctx, openai.ContainerNewParams{Name: "big", FileIDs: []string{"file-ok", "file-big"}})
	assert.Equal(t, http.StatusRequestEntityTooLarge, apiStatus(t, err), "a file_ids file over the upload limit")
	assert.Zero(t, f.store.count("Bearer sk-a"), "no container is made")

	made, err := c.Containers.New(ctx, openai.ContainerNewParams{Name: "x"})
	require.NoError(t, err, "create")
	_, err = c.Containers.Files.New(ctx, made.ID, openai.ContainerFileNewParams{FileID: openai.String("file-big")})
	assert.Equal(t, http.StatusRequestEntityTooLarge, apiStatus(t, err), "a copy by id over the upload limit")
	list, err := c.Containers.Files.List(ctx, made.ID, openai.ContainerFileListParams{})
	require.NoError(t, err, "list files")
	assert.Empty(t, list.Data, "nothing left of a refused copy")

	g := newFixture(t, Config{Fetcher: fixed(&files.API{Base: broken.URL, Client: broken.Client()})})
	status, body := post(t, g, "sk-a", "/v1/containers", "application/json", `{"name":"x","file_ids":["file-1"]}`)
	assert.Equal(t, http.StatusBadGateway, status, "the Files API fails: %s", body)
	assert.Equal(t, "files_api_failed", gjson.Get(body, "error.code").String(), "code: %s", body)
	assert.NotContains(t, body, "upstream secret", "the upstream's body is not shown")
	assert.NotContains(t, body, "127.0.0.1", "the upstream's address is not shown")
	assert.Zero(t, g.store.count("Bearer sk-a"), "no container is made")
}

// TestUploadsPerIdentityBounded: an identity has at most MaxUploadsPerIdentity uploads in
// progress; one more is a 429, while another identity still uploads.
func TestUploadsPerIdentityBounded(t *testing.T) {
	f := newFixture(t, Config{MaxUploadsPerIdentity: 1})
	a, err := f.store.Create(t.Context(), "Bearer sk-a", NewContainer{Name: "a"})
	require.NoError(t, err, "create a")
	b, err := f.store.Create(t.Context(), "Bearer sk-b", NewContainer{Name: "b"})
	require.NoError(t, err, "create b")

	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	req, err := http.NewRequest(http.MethodPost, f.srv.URL+"/v1/containers/"+a.ID+"/files", pr)
	require.NoError(t, err, "request")
	req.Header.Set("Authorization", "Bearer sk-a")
	req.Header.Set("Content-Type", mw.FormDataContentType())
	first := make(chan int, 1)
	go func() {
		resp, err := f.srv.Client().Do(req)
		if err != nil {
			first <- 0
			return
		}
		resp.Body.Close()
		first <- resp.StatusCode
	}()
	part, err := mw.CreateFormFile("file", "slow.csv")
	require.NoError(t, err, "file part")
	_, err = part.Write([]byte("a,b\n"))
	require.NoError(t, err, "first bytes")
	require.Eventually(t, func() bool {
		f.handler.uploadCount.mu.Lock()
		defer f.handler.uploadCount.mu.Unlock()
		return f.handler.uploadCount.n["Bearer sk-a"] == 1
	}, 10*time.Second, time.Millisecond, "the server has the first upload under way")

	status, out := post(t, f, "sk-a", "/v1/containers/"+a.ID+"/files", "application/json", `{"file_id":"file-x"}`)
	assert.Equal(t, http.StatusTooManyRequests, status, "a second upload of the same key: %s", out)
	assert.Equal(t, "too_many_uploads", gjson.Get(out, "error.code").String(), "code: %s", out)
	before := f.store.count("Bearer sk-a")
	status, out = post(t, f, "sk-a", "/v1/containers", "application/json", `{"name":"c","file_ids":["file-x"]}`)
	assert.Equal(t, http.StatusTooManyRequests, status, "a create copying file_ids is an upload too: %s", out)
	assert.Equal(t, "too_many_uploads", gjson.Get(out, "error.code").String(), "code: %s", out)
	assert.Equal(t, before, f.store.count("Bearer sk-a"), "no container is made")

	var body bytes.Buffer
	mwb := multipart.NewWriter(&body)
	pb, err := mwb.CreateFormFile("file", "b.csv")
	require.NoError(t, err, "b part")
	_, _ = pb.Write([]byte("1\n"))
	require.NoError(t, mwb.Close(), "close b")
	status, out = post(t, f, "sk-b", "/v1/containers/"+b.ID+"/files", mwb.FormDataContentType(), body.String())
	assert.Equal(t, http.StatusOK, status, "another key uploads meanwhile: %s", out)

	require.NoError(t, mw.Close(), "close the slow upload")
	require.NoError(t, pw.Close(), "end the slow body")
	assert.Equal(t, http.StatusOK, <-first, "the slow upload completes")
	status, out = post(t, f, "sk-a", "/v1/containers/"+a.ID+"/files", mwb.FormDataContentType(), body.String())
	assert.Equal(t, http.StatusOK, status, "once it is done the key uploads again: %s", out)
}

// fixed is the Fetcher of every prefix.
func fixed(f Fetcher) func(string) Fetcher { return func(string) Fetcher { return f } }

// TestFilesByIDUnderPrefix: a call under a path prefix copies from the Files API of that
// prefix, as the code_interpreter loop does on the same route.
func TestFilesByIDUnderPrefix(t *testing.T) {
	plain := filesServer(t, "sk-a", map[string]string{"file-1": "plain"})
	analyst := filesServer(t, "sk-a", map[string]string{"file-1": "analyst"})
	var mu sync.Mutex
	var asked []string
	f := newFixture(t, Config{PathPrefixes: []string{"/analyst"}, Fetcher: func(prefix string) Fetcher {
		mu.Lock()
		defer mu.Unlock()
		asked = append(asked, prefix)
		if prefix == "/analyst" {
			return &files.API{Base: analyst.URL, Client: analyst.Client()}
		}
		return &files.API{Base: plain.URL, Client: plain.Client()}
	}})
	status, body := post(t, f, "sk-a", "/analyst/v1/containers", "application/json", `{"name":"x","file_ids":["file-1"]}`)
	require.Equal(t, http.StatusOK, status, "create under the prefix: %s", body)
	id := gjson.Get(body, "id").String()
	f.store.mu.Lock()
	defer f.store.mu.Unlock()
	mu.Lock()
	defer mu.Unlock()
	ct, ok := f.store.containers["Bearer sk-a"][id]
	require.True(t, ok, "the container is kept")
	for _, fl := range ct.files {
		assert.Equal(t, "analyst", string(fl.data), "copied from the prefix's Files API")
	}
	assert.Len(t, ct.files, 1, "one file")
	assert.NotContains(t, asked, "", "the unprefixed Files API is not asked")
}
