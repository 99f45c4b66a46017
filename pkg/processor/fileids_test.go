package processor

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	configv1 "github.com/codeinterp/codeinterp/api/codeinterp/config/v1"
	"github.com/codeinterp/codeinterp/pkg/admission"
	"github.com/codeinterp/codeinterp/pkg/files"
	"github.com/codeinterp/codeinterp/pkg/loop"
	"github.com/codeinterp/codeinterp/pkg/store"
	"github.com/codeinterp/codeinterp/pkg/store/memory"
)

// fakeFiles is a Files API that has the files in names, fails for "file-broken", and
// records the base URLs and credentials it was made for and called with.
type fakeFiles struct {
	mu    sync.Mutex
	names map[string]string
	bases []string
	auths []string
}

func (f *fakeFiles) at(base string) admission.Files {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.bases = append(f.bases, base)
	return f
}

func (f *fakeFiles) Stat(_ context.Context, cred files.Credentials, id string) (string, int64, error) {
	f.mu.Lock()
	f.auths = append(f.auths, cred["Authorization"])
	f.mu.Unlock()
	if id == "file-broken" {
		return "", 0, fmt.Errorf("%w: retrieve file %s: status 500 from http://10.0.0.1:8080", files.ErrUpstream, id)
	}
	name, ok := f.names[id]
	if !ok {
		return "", 0, files.ErrNotFound
	}
	return name, int64(len(name)), nil
}

func (f *fakeFiles) Fetch(ctx context.Context, cred files.Credentials, id string) (string, io.ReadCloser, error) {
	name, _, err := f.Stat(ctx, cred, id)
	if err != nil {
		return "", nil, err
	}
	return name, io.NopCloser(strings.NewReader("content of " + name)), nil
}

func fileIDsBody(ids ...string) string {
	return `{"model":"m","input":"x","tools":[{"type":"code_interpreter","container":{"type":"auto","file_ids":["` + strings.Join(ids, `","`) + `"]}}]}`
}

// The tool's file_ids are looked up before the request goes upstream: a missing one is a 400
// naming it, a Files API failure a 502 that names no address; found ones reach the loop
// with their names, to be fetched with the caller's credentials.
func TestFileIDs(t *testing.T) {
	ff := &fakeFiles{names: map[string]string{"file-a": "data.csv", "file-b": "notes.txt"}}
	final := []byte(`{"id":"resp_1","output":[]}`)
	fl := &fakeLoop{calls: true, resp: loop.Response{Status: 200, Header: http.Header{"Content-Type": {"application/json"}}, Body: final, Stop: loop.StopDone}}
	ts := newTestServerWith(t, func(o *testOptions) { o.NewFiles = ff.at }, nil, fl, nil)

	tests := []struct {
		name       string
		give       string
		wantStatus int
		wantCode   string
		wantParam  string
		wantIn     string // in the error's message
	}{
		{name: "missing", give: fileIDsBody("file-a", "file-missing"), wantStatus: 400, wantCode: "file_not_found", wantParam: "tools", wantIn: "file-missing"},
		{name: "files api failed", give: fileIDsBody("file-broken", "file-a"), wantStatus: 502, wantCode: "files_api_failed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ex := ts.open(t)
			ex.send(postHeaders("/openai/v1/responses"))
			ir := ex.send(reqBody(tt.give)).GetImmediateResponse()
			require.NotNil(t, ir, "%s is answered at once", tt.name)
			assert.Equal(t, tt.wantStatus, int(ir.GetStatus().GetCode()), "status of %s", tt.name)
			assert.Equal(t, tt.wantCode, gjson.GetBytes(ir.GetBody(), "error.code").String(), "code of %s: %s", tt.name, ir.GetBody())
			assert.Equal(t, tt.wantParam, gjson.GetBytes(ir.GetBody(), "error.param").String(), "param of %s", tt.name)
			assert.Contains(t, gjson.GetBytes(ir.GetBody(), "error.message").String(), tt.wantIn, "message of %s", tt.name)
			assert.NotContains(t, string(ir.GetBody()), "10.0.0.1", "no address reaches the client")
		})
	}
	assert.Empty(t, fl.requests(), "nothing ran")

	ex := ts.open(t)
	ex.send(postHeaders("/openai/v1/responses"))
	resp := ex.send(reqBody(fileIDsBody("file-a", "file-b")))
	require.Nil(t, resp.GetImmediateResponse(), "found files let the request go upstream")
	ex.send(respHeaders(":status", "200", "content-type", "application/json"))
	require.NoError(t, ex.stream.Send(respBody([]byte(`{"id":"resp_0","output":[]}`))))
	_, err := ex.stream.Recv() // the timeout override
	require.NoError(t, err)
	_, err = ex.stream.Recv()
	require.NoError(t, err)
	reqs := fl.requests()
	require.Len(t, reqs, 1)
	assert.Equal(t, []loop.InputFile{{ID: "file-a", Name: "data.csv", Bytes: 8}, {ID: "file-b", Name: "notes.txt", Bytes: 9}}, reqs[0].InputFiles)
	require.NotNil(t, reqs[0].Files, "the loop gets a fetcher")
	name, rc, err := reqs[0].Files.Fetch(context.Background(), "file-b")
	require.NoError(t, err)
	b, _ := io.ReadAll(rc)
	rc.Close()
	assert.Equal(t, "notes.txt", name)
	assert.Equal(t, "content of notes.txt", string(b))
	ff.mu.Lock()
	defer ff.mu.Unlock()
	for _, base := range ff.bases {
		assert.Equal(t, "http://127.0.0.1:10000/openai", base, "the Files API is the upstream's, under the route's prefix")
	}
	for _, a := range ff.auths {
		assert.Equal(t, "Bearer sk-one", a, "the caller's credentials")
	}
}

// An auto container reuses the last live container of the context: the answers the request
// continues from (previous_response_id), then its replayed items; a dead one is skipped.
func TestAutoContainerFromContext(t *testing.T) {
	pending := memory.NewPending(nil)
	fl := &fakeLoop{resp: loop.Response{Status: 200, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"id":"resp_2","output":[]}`), Stop: loop.StopDone}}
	var ts *testServer
	containers := fakeContainers{}
	ts = newTestServerWith(t, func(o *testOptions) { o.Continuations = pending }, nil, fl, containers)
	identity, _ := ts.srv.signer.identity(newHeaderMap(headerMapOf("authorization", "Bearer sk-one")), "")
	containers["cntr_old"] = identity
	containers["cntr_live"] = identity
	containers["cntr_replayed"] = identity
	pending.PutContainers(identity, []string{"cntr_old", "cntr_live", "cntr_dead"}, store.Key{Kind: "responses.response", ID: "resp_1"})

	tests := []struct {
		name string
		give string
		want string
	}{
		{name: "previous_response_id", give: `{"model":"m","previous_response_id":"resp_1","input":"x","tools":[{"type":"code_interpreter","container":{"type":"auto"}}]}`, want: "cntr_live"},
		{name: "a replayed item is later", give: `{"model":"m","previous_response_id":"resp_1","input":[{"type":"code_interpreter_call","id":"ci_1","code":"x=1","container_id":"cntr_replayed","outputs":[]}],"tools":[{"type":"code_interpreter","container":{"type":"auto"}}]}`, want: "cntr_replayed"},
		{name: "unknown answer", give: `{"model":"m","previous_response_id":"resp_other","input":"x","tools":[{"type":"code_interpreter","container":{"type":"auto"}}]}`, want: ""},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ex := ts.open(t)
			ex.send(postHeaders("/v1/responses"))
			require.Nil(t, ex.send(reqBody(tt.give)).GetImmediateResponse(), "%s goes upstream", tt.name)
			ex.send(respHeaders(":status", "200", "content-type", "application/json"))
			ex.send(respBody([]byte(`{"id":"resp_x","output":[]}`)))
			reqs := fl.requests()
			require.Len(t, reqs, i+1)
			assert.Equal(t, tt.want, reqs[i].Sandbox.ContainerID, "container of %s", tt.name)
		})
	}
}

// max_upload_bytes bounds the files of container.file_ids too: one larger is a 400 naming it
// and the limit, before anything goes upstream; the loop copies the others under that limit.
func TestFileIDsOverTheUploadLimit(t *testing.T) {
	ff := &fakeFiles{names: map[string]string{"file-a": "data.csv", "file-b": "notes.txt"}} // 8 and 9 bytes
	fl := &fakeLoop{calls: true, resp: loop.Response{Status: 200, Header: http.Header{"Content-Type": {"application/json"}},
		Body: []byte(`{"id":"resp_1","output":[]}`), Stop: loop.StopDone}}
	ts := newTestServerWith(t, func(o *testOptions) { o.NewFiles = ff.at }, func(c *configv1.Config) { c.MaxUploadBytes = 8 }, fl, nil)

	ex := ts.open(t)
	ex.send(postHeaders("/openai/v1/responses"))
	ir := ex.send(reqBody(fileIDsBody("file-a", "file-b"))).GetImmediateResponse()
	require.NotNil(t, ir, "a file over the limit is answered at once")
	assert.Equal(t, http.StatusBadRequest, int(ir.GetStatus().GetCode()))
	assert.Equal(t, "file_too_large", gjson.GetBytes(ir.GetBody(), "error.code").String(), "%s", ir.GetBody())
	assert.Equal(t, "invalid_request_error", gjson.GetBytes(ir.GetBody(), "error.type").String(), "%s", ir.GetBody())
	assert.Equal(t, "tools", gjson.GetBytes(ir.GetBody(), "error.param").String())
	msg := gjson.GetBytes(ir.GetBody(), "error.message").String()
	assert.Contains(t, msg, "file-b", "the message names the file")
	assert.Contains(t, msg, "at most 8 bytes", "the message names the limit")
	assert.Empty(t, fl.requests(), "nothing ran")

	ex = ts.open(t)
	ex.send(postHeaders("/openai/v1/responses"))
	require.Nil(t, ex.send(reqBody(fileIDsBody("file-a"))).GetImmediateResponse(), "a file at the limit goes")
	ex.send(respHeaders(":status", "200", "content-type", "application/json"))
	require.NoError(t, ex.stream.Send(respBody([]byte(`{"id":"resp_0","output":[]}`))))
	_, err := ex.stream.Recv() // the timeout override
	require.NoError(t, err)
	_, err = ex.stream.Recv()
	require.NoError(t, err)
	reqs := fl.requests()
	require.Len(t, reqs, 1)
	assert.Equal(t, int64(8), reqs[0].MaxInputFileBytes, "the loop copies under the same limit")
}
