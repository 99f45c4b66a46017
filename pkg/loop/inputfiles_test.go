package loop

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/pkg/sandbox"
	"github.com/codeinterp/codeinterp/pkg/sandbox/sandboxtest"
)

// fakeFetcher serves files from a map; a file named in broken fails after part of its bytes.
type fakeFetcher struct {
	mu      sync.Mutex
	files   map[string][2]string // id -> name, content
	broken  string
	fetched []string
}

func (f *fakeFetcher) Fetch(_ context.Context, id string) (string, io.ReadCloser, error) {
	f.mu.Lock()
	f.fetched = append(f.fetched, id)
	f.mu.Unlock()
	nc, ok := f.files[id]
	if !ok {
		return "", nil, errors.New("no such file")
	}
	var r io.Reader = strings.NewReader(nc[1])
	if id == f.broken {
		r = io.MultiReader(strings.NewReader(nc[1][:2]), iotestErrReader{})
	}
	return nc[0], io.NopCloser(r), nil
}

type iotestErrReader struct{}

func (iotestErrReader) Read([]byte) (int, error) { return 0, errors.New("connection reset") }

// The tool's files are copied into /mnt/data before the first run, once for the request.
func TestInputFilesCopiedIn(t *testing.T) {
	f := newFixture(t, scripted{status: 200, body: respCall("2", "second", 10)}, scripted{status: 200, body: respText("3", "done")})
	var seen []string
	f.provider.Provider.Run = func(ctx context.Context, c *sandboxtest.Container, code string) (sandbox.Result, error) {
		for _, p := range []string{"/mnt/data/data.csv", "/mnt/data/notes.txt"} {
			rc, _, err := c.OpenFile(ctx, p)
			if err != nil {
				seen = append(seen, p+": "+err.Error())
				continue
			}
			b, _ := io.ReadAll(rc)
			rc.Close()
			seen = append(seen, p+": "+string(b))
		}
		return sandbox.Result{Stdout: "ok\n"}, nil
	}
	fetcher := &fakeFetcher{files: map[string][2]string{"file-a": {"data.csv", "a,b\n1,2\n"}, "file-b": {"../notes.txt", "hi"}}}
	req := f.request(t, respSurface, responsesClient, respCall("1", "first", 10))
	req.InputFiles = []InputFile{{ID: "file-a", Name: "data.csv"}, {ID: "file-b", Name: "notes.txt"}}
	req.Files = fetcher
	res := f.engine.Run(context.Background(), req)
	require.Equal(t, http.StatusOK, res.Status, "body: %s", res.Body)
	assert.Equal(t, []string{"/mnt/data/data.csv: a,b\n1,2\n", "/mnt/data/notes.txt: hi", "/mnt/data/data.csv: a,b\n1,2\n", "/mnt/data/notes.txt: hi"}, seen,
		"both runs see the files; a name is only a base name")
	assert.Equal(t, []string{"file-a", "file-b"}, fetcher.fetched, "each file is fetched once")
}

// A file that cannot be copied fails the call with a fixed text, without running the code,
// and leaves nothing of itself.
func TestInputFilesUnavailable(t *testing.T) {
	f := newFixture(t, scripted{status: 200, body: respText("2", "no files")})
	fetcher := &fakeFetcher{files: map[string][2]string{"file-a": {"data.csv", "a,b\n"}, "file-b": {"big.bin", "0123456789"}}, broken: "file-b"}
	req := f.request(t, respSurface, responsesClient, respCall("1", "print(1)", 10))
	req.InputFiles = []InputFile{{ID: "file-a"}, {ID: "file-b"}}
	req.Files = fetcher
	res := f.engine.Run(context.Background(), req)
	require.Equal(t, http.StatusOK, res.Status, "body: %s", res.Body)
	assert.Equal(t, "failed", gjson.GetBytes(res.Body, "output.0.status").String(), "the call failed: %s", res.Body)
	sent := f.model.sent()
	require.Len(t, sent, 1)
	assert.Equal(t, TextFilesUnavailable, gjson.GetBytes(sent[0], "input.2.output").String(), "the model reads the fixed text")
	_, _, codes := f.provider.counts()
	assert.Empty(t, codes, "the code did not run")
	var files []string
	c := f.provider.Container(0) // the caller's container lives on after the request
	for _, p := range []string{"/mnt/data/data.csv", "/mnt/data/big.bin"} {
		if _, err := c.StatFile(context.Background(), p); err == nil {
			files = append(files, p)
		}
	}
	assert.Equal(t, []string{"/mnt/data/data.csv"}, files, "nothing of the broken file is left")
}
