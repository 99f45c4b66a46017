package e2e

import (
	"bytes"
	"crypto/rand"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	configv1 "github.com/codeinterp/codeinterp/api/codeinterp/config/v1"
	"github.com/codeinterp/codeinterp/test/e2e/fakemodel"
)

// Issue 12 end to end: the Containers API served by codeinterp through Envoy (its own route
// and cluster, no ext_proc), with openai-go: containers and their files, uploads and copies
// from the model's Files API, downloads byte for byte, the code seeing what was uploaded, and
// tenants kept apart.
func TestContainersAPI(t *testing.T) {
	env := NewEnv(t, EnvOptions{})
	env.Fronts(t, func(t *testing.T, s *Stack) {
		m := newModel(t, s.Model)
		t.Run("containers and their files", func(t *testing.T) { testContainersAndFiles(t, s, m) })
		t.Run("another API key sees nothing", func(t *testing.T) { testContainersTenants(t, s) })
		t.Run("the profile route's prefix", func(t *testing.T) { testContainersPrefixed(t, s) })
		t.Run("a key the upstream refuses", func(t *testing.T) { testContainersRefusedKey(t, s) })
	})
}

// modelsCalls counts the upstream's GET /v1/models calls with key.
func modelsCalls(s *Stack, key string) int {
	n := 0
	for _, r := range s.Model.RequestsTo("/v1/models") {
		if r.Header.Get("Authorization") == "Bearer "+key {
			n++
		}
	}
	return n
}

// testContainersRefusedKey: a key the upstream refuses is a 401 invalid_api_key and gets no
// container; a key it takes works; the upstream is asked once per key, not per call.
func testContainersRefusedKey(t *testing.T, s *Stack) {
	ctx := t.Context()
	good, bad := "sk-known-"+s.Front.Name(), "sk-made-up-"+s.Front.Name()
	s.Model.AddKey(good)
	badc, goodc := s.Client(bad), s.Client(good)
	for i := range 3 {
		_, err := badc.Containers.New(ctx, openai.ContainerNewParams{Name: "mine"})
		e := apiError(t, err, "create with a made-up key")
		assert.Equal(t, http.StatusUnauthorized, e.StatusCode, "status, call %d", i)
		assert.Equal(t, "invalid_api_key", e.Code, "code, call %d", i)
		_, err = badc.Containers.List(ctx, openai.ContainerListParams{})
		assert.Equal(t, http.StatusUnauthorized, apiError(t, err, "list with a made-up key").StatusCode, "list, call %d", i)
	}
	assert.Equal(t, 1, modelsCalls(s, bad), "the refusal is remembered")
	for range 3 {
		made, err := goodc.Containers.New(ctx, openai.ContainerNewParams{Name: "mine"})
		require.NoError(t, err, "create with a key the upstream takes")
		require.NoError(t, goodc.Containers.Delete(ctx, made.ID), "delete")
	}
	assert.Equal(t, 1, modelsCalls(s, good), "the acceptance is remembered")
}

func download(t *testing.T, c openai.Client, containerID, fileID string) []byte {
	t.Helper()
	resp, err := c.Containers.Files.Content.Get(t.Context(), containerID, fileID)
	require.NoError(t, err, "download %s", fileID)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err, "read the download of %s", fileID)
	return b
}

func testContainersAndFiles(t *testing.T, s *Stack, m *model) {
	ctx := t.Context()
	key := "sk-cntr-" + s.Front.Name()
	s.Model.AddKey(key)
	c := s.Client(key)
	s.Model.AddFile(fakemodel.File{ID: "file-notes-" + s.Front.Name(), Filename: "notes.txt", Key: key, Content: []byte("from the Files API\n")})
	s.Model.AddFile(fakemodel.File{ID: "file-seed-" + s.Front.Name(), Filename: "seed.json", Key: key, Content: []byte(`{"seed": 7}`)})

	made, err := c.Containers.New(ctx, openai.ContainerNewParams{
		Name:         "analysis",
		FileIDs:      []string{"file-seed-" + s.Front.Name()},
		ExpiresAfter: openai.ContainerNewParamsExpiresAfter{Anchor: "last_active_at", Minutes: 5},
		MemoryLimit:  openai.ContainerNewParamsMemoryLimit1g,
	})
	require.NoError(t, err, "create")
	assert.True(t, strings.HasPrefix(made.ID, "cntr_"), "id %q", made.ID)
	assert.Equal(t, "analysis", made.Name, "name")
	assert.Equal(t, "running", made.Status, "status")
	assert.Equal(t, int64(5), made.ExpiresAfter.Minutes, "expires_after.minutes")
	assert.Equal(t, "1g", string(made.MemoryLimit), "memory_limit")

	got, err := c.Containers.Get(ctx, made.ID)
	require.NoError(t, err, "retrieve")
	assert.Equal(t, made.ID, got.ID, "retrieved")
	list, err := c.Containers.List(ctx, openai.ContainerListParams{})
	require.NoError(t, err, "list")
	require.Len(t, list.Data, 1, "the key's containers")
	assert.Equal(t, made.ID, list.Data[0].ID, "listed")

	// A multipart upload (a binary file, so byte for byte means something), and a copy by
	// file_id (openai-go sends it as a multipart field) from the model's Files API, read with
	// the caller's key through Envoy.
	blob := make([]byte, 1<<20+123)
	_, _ = rand.Read(blob)
	up, err := c.Containers.Files.New(ctx, made.ID, openai.ContainerFileNewParams{File: openai.File(bytes.NewReader(blob), "blob.bin", "application/octet-stream")})
	require.NoError(t, err, "upload")
	assert.True(t, strings.HasPrefix(up.ID, "cfile_"), "file id %q", up.ID)
	assert.Equal(t, "/mnt/data/blob.bin", up.Path, "an upload lands under its name")
	assert.Equal(t, int64(len(blob)), up.Bytes, "bytes")
	assert.Equal(t, "user", string(up.Source), "source")
	assert.Equal(t, made.ID, up.ContainerID, "container_id")
	csv := "a,b\n1,2\n3,4\n"
	upCSV, err := c.Containers.Files.New(ctx, made.ID, openai.ContainerFileNewParams{File: openai.File(strings.NewReader(csv), "data.csv", "text/csv")})
	require.NoError(t, err, "upload a CSV")

	before := len(s.Model.RequestsTo("/v1/files/file-notes-" + s.Front.Name()))
	byID, err := c.Containers.Files.New(ctx, made.ID, openai.ContainerFileNewParams{FileID: openai.String("file-notes-" + s.Front.Name())})
	require.NoError(t, err, "copy by file_id")
	assert.Equal(t, "/mnt/data/notes.txt", byID.Path, "a copy lands under the Files API's name")
	assert.Equal(t, int64(len("from the Files API\n")), byID.Bytes, "bytes of the copy")
	metaReqs := s.Model.RequestsTo("/v1/files/file-notes-" + s.Front.Name())
	require.Greater(t, len(metaReqs), before, "the Files API was asked")
	assert.Equal(t, "Bearer "+key, metaReqs[len(metaReqs)-1].Header.Get("Authorization"), "with the caller's own key")

	files, err := c.Containers.Files.List(ctx, made.ID, openai.ContainerFileListParams{})
	require.NoError(t, err, "list files")
	paths := map[string]string{}
	for _, f := range files.Data {
		paths[f.Path] = f.ID
	}
	for _, p := range []string{"/mnt/data/seed.json", "/mnt/data/blob.bin", "/mnt/data/data.csv", "/mnt/data/notes.txt"} {
		assert.Contains(t, paths, p, "listed files")
	}
	fget, err := c.Containers.Files.Get(ctx, made.ID, up.ID)
	require.NoError(t, err, "retrieve a file")
	assert.Equal(t, up.Path, fget.Path, "retrieved path")

	assert.True(t, bytes.Equal(blob, download(t, c, made.ID, up.ID)), "the upload downloads byte for byte")
	assert.Equal(t, "from the Files API\n", string(download(t, c, made.ID, byID.ID)), "the copy downloads byte for byte")
	assert.Equal(t, `{"seed": 7}`, string(download(t, c, made.ID, paths["/mnt/data/seed.json"])), "the file of file_ids")

	// The code runs in that container and finds the files by their names.
	n := len(s.Model.Requests())
	m.script(responsesPath,
		responsesReply(usage(1, 1), runCode("call_read", "import pandas\nprint(open('/mnt/data/data.csv').read().count('\\n'), open('/mnt/data/notes.txt').read().strip())")),
		responsesReply(usage(1, 1), fakemodel.Message("Read.")))
	p := responses.ResponseNewParams{
		Model: testModel,
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("read the files")},
		Tools: []responses.ToolUnionParam{containerTool(made.ID)},
	}
	resp, err := c.Responses.New(ctx, p)
	require.NoError(t, err, "a code run in the container")
	reqs := m.since(n)
	require.Len(t, reqs, 2, "the model's requests")
	assert.Equal(t, "3 from the Files API\n", outputOf(t, reqs[1], "call_read"), "the code read the uploaded and the copied file")
	assert.Equal(t, made.ID, codeCall(t, *resp, 0).ContainerID, "the call ran in the API's container")

	require.NoError(t, c.Containers.Files.Delete(ctx, made.ID, upCSV.ID), "delete a file")
	_, err = c.Containers.Files.Get(ctx, made.ID, upCSV.ID)
	assert.Equal(t, http.StatusNotFound, apiError(t, err, "a deleted file").StatusCode, "a deleted file")

	require.NoError(t, c.Containers.Delete(ctx, made.ID), "delete the container")
	gone, err := c.Containers.Get(ctx, made.ID)
	require.NoError(t, err, "a deleted container is remembered")
	assert.Equal(t, "expired", gone.Status, "as expired")
	_, err = c.Containers.Files.New(ctx, made.ID, openai.ContainerFileNewParams{File: openai.File(strings.NewReader("x"), "x.txt", "text/plain")})
	e := apiError(t, err, "upload into a deleted container")
	assert.Equal(t, http.StatusBadRequest, e.StatusCode, "status")
	assert.Equal(t, "container_expired", e.Code, "code")
}

func testContainersTenants(t *testing.T, s *Stack) {
	ctx := t.Context()
	ownerKey := "sk-owner-" + s.Front.Name()
	s.Model.AddKey(ownerKey)
	s.Model.AddKey("sk-other-" + s.Front.Name())
	owner, other := s.Client(ownerKey), s.Client("sk-other-"+s.Front.Name())
	s.Model.AddFile(fakemodel.File{ID: "file-own-" + s.Front.Name(), Filename: "own.txt", Key: ownerKey, Content: []byte("mine")})
	made, err := owner.Containers.New(ctx, openai.ContainerNewParams{Name: "private"})
	require.NoError(t, err, "create as the owner")
	up, err := owner.Containers.Files.New(ctx, made.ID, openai.ContainerFileNewParams{File: openai.File(strings.NewReader("secret"), "secret.txt", "text/plain")})
	require.NoError(t, err, "upload as the owner")

	list, err := other.Containers.List(ctx, openai.ContainerListParams{})
	require.NoError(t, err, "list as another key")
	for _, c := range list.Data {
		assert.NotEqual(t, made.ID, c.ID, "another key does not list the owner's container")
	}
	calls := map[string]func() error{
		"retrieve": func() error { _, err := other.Containers.Get(ctx, made.ID); return err },
		"list files": func() error {
			_, err := other.Containers.Files.List(ctx, made.ID, openai.ContainerFileListParams{})
			return err
		},
		"upload": func() error {
			_, err := other.Containers.Files.New(ctx, made.ID, openai.ContainerFileNewParams{File: openai.File(strings.NewReader("x"), "x.txt", "text/plain")})
			return err
		},
		"retrieve a file": func() error { _, err := other.Containers.Files.Get(ctx, made.ID, up.ID); return err },
		"download":        func() error { _, err := other.Containers.Files.Content.Get(ctx, made.ID, up.ID); return err },
		"delete a file":   func() error { return other.Containers.Files.Delete(ctx, made.ID, up.ID) },
		"delete":          func() error { return other.Containers.Delete(ctx, made.ID) },
	}
	for name, call := range calls {
		assert.Equal(t, http.StatusNotFound, apiError(t, call(), name).StatusCode, "%s as another key: a 404, never a 403", name)
	}
	// Nor can another key copy the owner's Files API file into a container of its own.
	mine, err := other.Containers.New(ctx, openai.ContainerNewParams{Name: "theirs"})
	require.NoError(t, err, "create as another key")
	_, err = other.Containers.Files.New(ctx, mine.ID, openai.ContainerFileNewParams{FileID: openai.String("file-own-" + s.Front.Name())})
	e := apiError(t, err, "copy another key's file")
	assert.Equal(t, http.StatusBadRequest, e.StatusCode, "status")
	assert.Equal(t, "file_not_found", e.Code, "code")

	assert.Equal(t, "secret", string(download(t, owner, made.ID, up.ID)), "the owner's file is untouched")
	require.NoError(t, owner.Containers.Delete(ctx, made.ID), "delete as the owner")
	require.NoError(t, other.Containers.Delete(ctx, mine.ID), "delete as the other key")
}

// testContainersPrefixed: /analyst/v1/containers reaches the same API (path_prefixes).
func testContainersPrefixed(t *testing.T, s *Stack) {
	ctx := t.Context()
	key := "sk-prefixed-" + s.Front.Name()
	s.Model.AddKey(key)
	analyst, plain := s.ClientAt("/analyst/v1/", key), s.Client(key)
	made, err := analyst.Containers.New(ctx, openai.ContainerNewParams{Name: "via analyst"})
	require.NoError(t, err, "create through the profile route")
	got, err := plain.Containers.Get(ctx, made.ID)
	require.NoError(t, err, "the same container through /v1/")
	assert.Equal(t, "via analyst", got.Name, "name")
	require.NoError(t, plain.Containers.Delete(ctx, made.ID), "delete")
}

// TestContainersLimits: with a short default expiry (a second) and a small upload limit (1 MiB),
// a container idle past its expiry is shown expired and refuses files with the native error,
// and a file over the limit is a 413 that leaves nothing behind.
func TestContainersLimits(t *testing.T) {
	env := NewEnv(t, EnvOptions{Configure: func(c *configv1.Config) {
		c.Sandbox.SessionIdleTtl = durationpb.New(time.Second)
		c.MaxUploadBytes = 1 << 20
	}})
	env.Fronts(t, func(t *testing.T, s *Stack) {
		ctx := t.Context()
		c := s.Client("sk-limits-" + s.Front.Name())
		t.Run("expired", func(t *testing.T) {
			made, err := c.Containers.New(ctx, openai.ContainerNewParams{Name: "short"})
			require.NoError(t, err, "create")
			assert.Equal(t, "running", made.Status, "alive at first")
			time.Sleep(1500 * time.Millisecond)
			got, err := c.Containers.Get(ctx, made.ID)
			require.NoError(t, err, "an expired container is still retrieved")
			assert.Equal(t, "expired", got.Status, "idle past its expiry")
			_, err = c.Containers.Files.New(ctx, made.ID, openai.ContainerFileNewParams{File: openai.File(strings.NewReader("x"), "x.txt", "text/plain")})
			e := apiError(t, err, "upload into an expired container")
			assert.Equal(t, http.StatusBadRequest, e.StatusCode, "status")
			assert.Equal(t, "container_expired", e.Code, "code")
			assert.Equal(t, "invalid_request_error", e.Type, "type")
			_, err = c.Containers.Files.List(ctx, made.ID, openai.ContainerFileListParams{})
			assert.Equal(t, "container_expired", apiError(t, err, "list the files of an expired container").Code, "code")
		})
		t.Run("too large", func(t *testing.T) {
			made, err := c.Containers.New(ctx, openai.ContainerNewParams{Name: "small",
				ExpiresAfter: openai.ContainerNewParamsExpiresAfter{Anchor: "last_active_at", Minutes: 1}})
			require.NoError(t, err, "create")
			_, err = c.Containers.Files.New(ctx, made.ID, openai.ContainerFileNewParams{File: openai.File(bytes.NewReader(make([]byte, 3<<20)), "big.bin", "application/octet-stream")})
			e := apiError(t, err, "a file over the upload limit")
			assert.Equal(t, http.StatusRequestEntityTooLarge, e.StatusCode, "status")
			assert.Equal(t, "file_too_large", e.Code, "code")
			files, err := c.Containers.Files.List(ctx, made.ID, openai.ContainerFileListParams{})
			require.NoError(t, err, "list files")
			assert.Empty(t, files.Data, "nothing is left of it")
			fits, err := c.Containers.Files.New(ctx, made.ID, openai.ContainerFileNewParams{File: openai.File(bytes.NewReader(make([]byte, 1<<20)), "fits.bin", "application/octet-stream")})
			require.NoError(t, err, "a file at the limit")
			assert.Equal(t, int64(1<<20), fits.Bytes, "its size")
		})
	})
}
