package processor

import (
	"context"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/pkg/store"
	"github.com/codeinterp/codeinterp/pkg/store/memory"
)

// setHeaders returns the headers a headers or body answer sets.
func setHeaders(resp *extprocv3.ProcessingResponse) map[string]string {
	var c *extprocv3.CommonResponse
	switch {
	case resp.GetRequestBody() != nil:
		c = resp.GetRequestBody().GetResponse()
	case resp.GetResponseHeaders() != nil:
		c = resp.GetResponseHeaders().GetResponse()
	}
	out := map[string]string{}
	for _, h := range c.GetHeaderMutation().GetSetHeaders() {
		out[h.GetHeader().GetKey()] = string(h.GetHeader().GetRawValue())
	}
	return out
}

// readLive answers the upstream's response of a stream the server follows live (status 404,
// as an upstream that never issued the id answers) and reads the events it streams, until
// limit events were read or the body ends; it returns them and whether the body ended.
func readLive(t *testing.T, ex *exchange, limit int) (string, bool) {
	t.Helper()
	resp := ex.send(respHeaders(":status", "404", "content-type", "application/json", "content-length", "40"))
	require.NotNil(t, resp.GetResponseHeaders(), "the upstream's headers are answered")
	set := setHeaders(resp)
	assert.Equal(t, "200", set[":status"], "the client gets a 200")
	assert.Equal(t, "text/event-stream; charset=utf-8", set["content-type"])
	assert.Equal(t, filterv3.ProcessingMode_FULL_DUPLEX_STREAMED, resp.GetModeOverride().GetResponseBodyMode(), "the body is switched")
	require.NoError(t, ex.stream.Send(respBody([]byte(`{"error":{"message":"not found"}}`))))
	var evs strings.Builder
	for strings.Count(evs.String(), "\n\n") < limit {
		sr := ex.recv().GetResponseBody().GetResponse().GetBodyMutation().GetStreamedResponse()
		require.NotNil(t, sr, "a streamed_response")
		evs.Write(sr.GetBody())
		if sr.GetEndOfStream() {
			return evs.String(), true
		}
	}
	return evs.String(), false
}

func TestBackgroundCreateStreamFollowsTheRun(t *testing.T) {
	ts := newBackgroundServer(t, &bgLoop{}, Background{})
	ex := ts.open(t)
	ex.send(postHeaders("/v1/responses"))
	resp := ex.send(reqBody(strings.Replace(bgBody, `"background":true`, `"background":true,"stream":true`, 1)))
	require.NotNil(t, resp.GetRequestBody(), "the create goes on upstream: %v", resp)
	set := setHeaders(resp)
	id, ok := strings.CutPrefix(set[":path"], "/v1/responses/")
	require.True(t, ok, "renamed after the response: %v", set)
	assert.Equal(t, "0", set["content-length"])
	assert.True(t, resp.GetRequestBody().GetResponse().GetBodyMutation().GetClearBody(), "no model gets the request")

	evs, ended := readLive(t, ex, 1000)
	require.True(t, ended, "the stream ends")
	assert.True(t, strings.HasPrefix(evs, "event: response.created\n"), evs)
	assert.Contains(t, evs, `"id":"`+id+`"`)
	assert.True(t, strings.HasSuffix(evs, "\n\n") && strings.Contains(evs[strings.LastIndex(evs[:len(evs)-2], "\n\n"):], "event: response.completed\n"),
		"the stream ends with the answer: %s", evs)
	for i, ev := range strings.Split(strings.TrimSuffix(evs, "\n\n"), "\n\n") {
		_, data, _ := strings.Cut(ev, "data: ")
		assert.Equal(t, int64(i), gjson.Get(data, "sequence_number").Int(), "event %d: %s", i, ev)
	}
}

// A live GET of a running response gets its events as they are recorded, from after
// starting_after; a client that leaves ends the reading, and the run goes on.
func TestBackgroundLiveGetClientLeaves(t *testing.T) {
	bl := &bgLoop{block: true, causes: make(chan error, 8)}
	ts := newBackgroundServer(t, bl, Background{})
	id := gjson.GetBytes(createBackground(t, ts, bgBody, "sk-one").GetBody(), "id").String()
	waitStatus(t, ts, id, "in_progress")

	ex := ts.open(t)
	resp := ex.send(reqHeaders(true, ":authority", "llm.local", ":path", "/v1/responses/"+id+"?stream=true&starting_after=1",
		":method", http.MethodGet, ":scheme", "http", "authorization", "Bearer sk-one", "x-codeinterp-session", "forged"))
	require.NotNil(t, resp.GetRequestHeaders(), "the GET goes on upstream: %v", resp)
	assert.Contains(t, resp.GetRequestHeaders().GetResponse().GetHeaderMutation().GetRemoveHeaders(), "x-codeinterp-session", "reserved headers do not go upstream")
	assert.Equal(t, filterv3.ProcessingMode_SEND, resp.GetModeOverride().GetResponseHeaderMode())
	evs, ended := readLive(t, ex, 1)
	assert.False(t, ended, "the run goes on")
	assert.True(t, strings.HasPrefix(evs, "event: response.in_progress\n"), "after starting_after=1: %s", evs)

	live := ts.srv.Live()
	ex.close()
	require.Eventually(t, func() bool { return ts.srv.Live() < live }, 5*time.Second, 10*time.Millisecond, "the reader ends with its client")
	assert.Equal(t, 1, ts.srv.BackgroundRunning(), "the run goes on without its reader")
	select {
	case err := <-bl.causes:
		t.Fatalf("the run was ended: %v", err)
	default:
	}
}

// A live GET with starting_after the largest int gets no event while the run goes on, nor
// any once it ends: the events are not sent again at each read.
func TestBackgroundLiveStartingAfterLargest(t *testing.T) {
	bl := &bgLoop{block: true, causes: make(chan error, 8)}
	ts := newBackgroundServer(t, bl, Background{})
	id := gjson.GetBytes(createBackground(t, ts, bgBody, "sk-one").GetBody(), "id").String()
	waitStatus(t, ts, id, "in_progress")
	ex := ts.open(t)
	ex.send(reqHeaders(true, ":authority", "llm.local", ":path", "/v1/responses/"+id+"?stream=true&starting_after="+strconv.Itoa(math.MaxInt),
		":method", http.MethodGet, ":scheme", "http", "authorization", "Bearer sk-one"))
	// Several reads (a Poll is 10 ms) while it runs, then its end.
	time.AfterFunc(100*time.Millisecond, func() { ts.srv.bg.cancelRun(id) })
	evs, ended := readLive(t, ex, 9)
	assert.True(t, ended, "the stream ends with the run")
	assert.Empty(t, evs, "no event comes after starting_after=%d", math.MaxInt)
}

func TestNextAfter(t *testing.T) {
	ev := func(seq string) string { return "event: e\ndata: {\"type\":\"e\",\"sequence_number\":" + seq + "}\n\n" }
	tests := []struct {
		name  string
		after int
		evs   string
		want  int
	}{
		{"from the start", -1, ev("0") + ev("1") + ev("2"), 2},
		{"after a starting_after", 4, ev("5") + ev("6"), 6},
		{"a gap in the numbering", 4, ev("9"), 9},
		{"numbered below after", 7, ev("3"), 8},
		{"no numbering", 1, "event: e\ndata: {}\n\nevent: e\ndata: {}\n\n", 3},
		{"no numbering at the largest int", math.MaxInt - 1, "event: e\ndata: {}\n\nevent: e\ndata: {}\n\n", math.MaxInt},
		{"a number past the largest int", 1, ev("9223372036854775808"), math.MaxInt},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, nextAfter(tt.after, []byte(tt.evs)), "after %d: %q", tt.after, tt.evs)
		})
	}
}

// A caller follows at most LiveReadersPerRun × MaxPerIdentity running responses' streams at
// once: past it, a live GET gets the native 429, while another caller's is served; a reader
// that ends (here before the upstream answered) gives its place back.
func TestBackgroundLiveReadersBounded(t *testing.T) {
	bl := &bgLoop{block: true, causes: make(chan error, 8)}
	ts := newBackgroundServer(t, bl, Background{MaxPerIdentity: 1})
	ids := map[string]string{}
	for _, key := range []string{"sk-one", "sk-two"} {
		ids[key] = gjson.GetBytes(createBackground(t, ts, bgBody, key).GetBody(), "id").String()
		require.Eventually(t, func() bool {
			return gjson.GetBytes(retrieve(t, ts, http.MethodGet, "/v1/responses/"+ids[key], key).GetBody(), "status").String() == "in_progress"
		}, 5*time.Second, 10*time.Millisecond, "%s's response runs", key)
	}
	follow := func(key string) (*exchange, *extprocv3.ProcessingResponse) {
		ex := ts.open(t)
		return ex, ex.send(reqHeaders(true, ":authority", "llm.local", ":path", "/v1/responses/"+ids[key]+"?stream=true",
			":method", http.MethodGet, ":scheme", "http", "authorization", "Bearer "+key))
	}
	var readers []*exchange
	for i := range LiveReadersPerRun {
		ex, resp := follow("sk-one")
		require.NotNil(t, resp.GetRequestHeaders(), "reader %d follows live: %v", i, resp)
		readers = append(readers, ex)
	}
	_, resp := follow("sk-one")
	im := resp.GetImmediateResponse()
	require.NotNil(t, im, "a reader past the bound is answered at once: %v", resp)
	assert.Equal(t, int32(http.StatusTooManyRequests), int32(im.GetStatus().GetCode()), "past the bound")
	assert.Equal(t, "rate_limit_exceeded", gjson.GetBytes(im.GetBody(), "error.code").String(), "the native 429: %s", im.GetBody())
	assert.Equal(t, "rate_limit_error", gjson.GetBytes(im.GetBody(), "error.type").String(), "the native 429: %s", im.GetBody())

	_, resp = follow("sk-two")
	assert.NotNil(t, resp.GetRequestHeaders(), "another caller's reader follows live: %v", resp)

	readers[0].close()
	require.Eventually(t, func() bool {
		ex, resp := follow("sk-one")
		defer ex.close()
		return resp.GetRequestHeaders() != nil
	}, 5*time.Second, 10*time.Millisecond, "a reader that ended gives its place back")
}

// goneStore is a store whose stored answers are gone (expired) once gone is set.
type goneStore struct {
	store.Pending
	gone atomic.Bool
}

func (g *goneStore) Get(identity string, k store.Key) []store.PendingCall {
	if g.gone.Load() && k.Kind == "responses.stored" {
		return nil
	}
	return g.Pending.Get(identity, k)
}

// A live GET whose upstream answers with no body, when the response is no longer stored,
// gets the surface's 500, not a failed stream.
func TestBackgroundLiveGetGoneAtBodylessAnswer(t *testing.T) {
	gs := &goneStore{Pending: memory.NewPending(nil)}
	ts := newTestServerWith(t, func(o *testOptions) {
		o.Stored = gs
		o.Loop = &bgLoop{block: true, causes: make(chan error, 8)}
		o.Background = Background{Poll: 10 * time.Millisecond}
	}, nil, nil, nil)
	t.Cleanup(func() { require.NoError(t, ts.srv.StopBackground(context.Background())) })
	id := gjson.GetBytes(createBackground(t, ts, bgBody, "sk-one").GetBody(), "id").String()
	waitStatus(t, ts, id, "in_progress")
	ex := ts.open(t)
	resp := ex.send(reqHeaders(true, ":authority", "llm.local", ":path", "/v1/responses/"+id+"?stream=true",
		":method", http.MethodGet, ":scheme", "http", "authorization", "Bearer sk-one"))
	require.NotNil(t, resp.GetRequestHeaders(), "the GET goes on upstream: %v", resp)
	gs.gone.Store(true)
	resp = ex.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
		ResponseHeaders: &extprocv3.HttpHeaders{Headers: headerMapOf(":status", "404"), EndOfStream: true}}})
	im := resp.GetImmediateResponse()
	require.NotNil(t, im, "answered at once: %v", resp)
	assert.Equal(t, int32(http.StatusInternalServerError), int32(im.GetStatus().GetCode()))
	assert.Equal(t, "stored_answer_gone", gjson.GetBytes(im.GetBody(), "error.code").String(), "in the surface's shape: %s", im.GetBody())
}
