package processor

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/pkg/loop"
	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/store"
	"github.com/codeinterp/codeinterp/pkg/store/memory"
)

// bgLoop is a loop for background responses: it answers with upstream's round, or, with
// block, runs until its context ends.
type bgLoop struct {
	block bool
	mu    sync.Mutex
	reqs  []loop.Request
	// causes gets the cause of each run a context ended (size 8).
	causes chan error
}

const bgUpstream = `{"id":"resp_up","object":"response","status":"completed","model":"m","output":[{"type":"message","id":"msg_1","role":"assistant","status":"completed","content":[{"type":"output_text","text":"42","annotations":[]}]}]}`

func (b *bgLoop) Run(ctx context.Context, r loop.Request) loop.Response {
	b.mu.Lock()
	b.reqs = append(b.reqs, r)
	b.mu.Unlock()
	if b.block {
		<-ctx.Done()
		b.causes <- context.Cause(ctx)
		return loop.Response{Status: 499, Stop: loop.StopCanceled}
	}
	rounds := []schema.Round{{Body: []byte(bgUpstream)}}
	_, _ = r.Exchange.ParseTurn(rounds[0].Body)
	final, err := r.Exchange.Final(rounds, "")
	if err != nil {
		panic(err)
	}
	_ = r.Sink.Event(schema.Event{Kind: schema.EventRound, Body: rounds[0].Body})
	_ = r.Sink.Event(schema.Event{Kind: schema.EventDone, Body: final})
	return loop.Response{Status: 200, Header: http.Header{"Content-Type": {"application/json"}}, Body: final, Stop: loop.StopDone}
}

func (b *bgLoop) requests() []loop.Request {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]loop.Request(nil), b.reqs...)
}

const bgBody = `{"model":"m","background":true,"tools":[{"type":"code_interpreter","container":{"type":"auto"}}],"input":"compute 40+2"}`

func newBackgroundServer(t *testing.T, bl *bgLoop, bounds Background) *testServer {
	t.Helper()
	bounds.Poll = 10 * time.Millisecond
	ts := newTestServerWith(t, func(o *testOptions) {
		o.Stored = memory.NewPending(nil)
		o.Loop = bl
		o.Background = bounds
	}, nil, nil, nil)
	t.Cleanup(func() { require.NoError(t, ts.srv.StopBackground(context.Background())) })
	return ts
}

// createBackground sends a background request as key and returns the immediate answer.
func createBackground(t *testing.T, ts *testServer, body, key string) *extprocv3.ImmediateResponse {
	t.Helper()
	ex := ts.open(t)
	ex.send(reqHeaders(false, ":authority", "llm.local", ":path", "/v1/responses", ":method", "POST", ":scheme", "http",
		"content-type", "application/json", "authorization", "Bearer "+key, "x-request-id", "req-1"))
	im := ex.send(reqBody(body)).GetImmediateResponse()
	require.NotNil(t, im, "a background request is answered at once")
	return im
}

// retrieve sends method on path as key and returns the immediate answer.
func retrieve(t *testing.T, ts *testServer, method, path, key string) *extprocv3.ImmediateResponse {
	t.Helper()
	return ts.open(t).send(reqHeaders(true, ":authority", "llm.local", ":path", path, ":method", method, ":scheme", "http",
		"authorization", "Bearer "+key)).GetImmediateResponse()
}

// waitStatus polls GET until the response has status want, and returns it.
func waitStatus(t *testing.T, ts *testServer, id, want string) string {
	t.Helper()
	var body string
	require.Eventually(t, func() bool {
		im := retrieve(t, ts, http.MethodGet, "/v1/responses/"+id, "sk-one")
		body = string(im.GetBody())
		return im != nil && gjson.Get(body, "status").String() == want
	}, 5*time.Second, 10*time.Millisecond, "response %s reaches %s", id, want)
	return body
}

func TestBackgroundCompletes(t *testing.T) {
	bl := &bgLoop{}
	ts := newBackgroundServer(t, bl, Background{})
	im := createBackground(t, ts, bgBody, "sk-one")
	assert.Equal(t, int32(200), int32(im.GetStatus().GetCode()))
	queued := string(im.GetBody())
	id := gjson.Get(queued, "id").String()
	assert.True(t, strings.HasPrefix(id, "resp_"), "the queued response is named: %s", queued)
	assert.Equal(t, "queued", gjson.Get(queued, "status").String())
	assert.True(t, gjson.Get(queued, "background").Bool())
	assert.Equal(t, "code_interpreter", gjson.Get(queued, "tools.0.type").String(), "the client's tools")

	final := waitStatus(t, ts, id, "completed")
	assert.Equal(t, id, gjson.Get(final, "id").String(), "the answer keeps the response's name")
	assert.Equal(t, "42", gjson.Get(final, "output.0.content.0.text").String())
	reqs := bl.requests()
	require.Len(t, reqs, 1)
	first := string(reqs[0].FirstRequest)
	assert.NotEmpty(t, first, "the loop sends the first round itself")
	assert.False(t, gjson.Get(first, "background").Exists(), "the upstream gets no background: %s", first)
	assert.Equal(t, "function", gjson.Get(first, "tools.0.type").String(), "the first round has the rewritten tool")
	assert.NotEmpty(t, reqs[0].Header.Get(followUpHeader), "the first round is signed as a follow-up")

	events := string(retrieve(t, ts, http.MethodGet, "/v1/responses/"+id+"?stream=true", "sk-one").GetBody())
	assert.True(t, strings.HasPrefix(events, "event: response.created\n"), events)
	for i, typ := range []string{"response.created", "response.queued", "response.in_progress"} {
		assert.Contains(t, events, "event: "+typ+"\ndata: {\"type\":\""+typ+"\",\"sequence_number\":"+string(rune('0'+i))+",", "event %d", i)
	}
	assert.Contains(t, events, "event: response.completed\n")
	assert.Equal(t, 1, strings.Count(events, "event: response.created\n"), "the loop's own start is not repeated")
	after := string(retrieve(t, ts, http.MethodGet, "/v1/responses/"+id+"?stream=true&starting_after=1", "sk-one").GetBody())
	assert.Equal(t, events[strings.Index(events, "event: response.in_progress"):], after, "starting_after=1 resumes after the second event")

	im = retrieve(t, ts, http.MethodPost, "/v1/responses/"+id+"/cancel", "sk-one")
	require.NotNil(t, im)
	assert.Equal(t, int32(400), int32(im.GetStatus().GetCode()), "a completed response cannot be cancelled")
	assert.Nil(t, retrieve(t, ts, http.MethodGet, "/v1/responses/"+id, "sk-two"), "another caller's GET goes upstream")
}

func TestBackgroundCancel(t *testing.T) {
	bl := &bgLoop{block: true, causes: make(chan error, 8)}
	ts := newBackgroundServer(t, bl, Background{})
	id := gjson.GetBytes(createBackground(t, ts, bgBody, "sk-one").GetBody(), "id").String()
	waitStatus(t, ts, id, "in_progress")
	assert.Nil(t, retrieve(t, ts, http.MethodPost, "/v1/responses/"+id+"/cancel", "sk-two"), "another caller's cancel goes upstream")

	im := retrieve(t, ts, http.MethodPost, "/v1/responses/"+id+"/cancel", "sk-one")
	require.NotNil(t, im)
	assert.Equal(t, int32(200), int32(im.GetStatus().GetCode()))
	assert.Equal(t, "cancelled", gjson.GetBytes(im.GetBody(), "status").String())
	select {
	case err := <-bl.causes:
		assert.ErrorIs(t, err, errCancelled, "the loop is ended by the cancellation")
	case <-time.After(5 * time.Second):
		t.Fatal("the loop was not cancelled")
	}
	waitStatus(t, ts, id, "cancelled")
	require.Eventually(t, func() bool { return ts.srv.BackgroundRunning() == 0 }, 5*time.Second, 10*time.Millisecond)
	im = retrieve(t, ts, http.MethodPost, "/v1/responses/"+id+"/cancel", "sk-one")
	assert.Equal(t, int32(200), int32(im.GetStatus().GetCode()), "cancelling again answers the cancelled response")
}

// A run renews its lease while its loop runs: read many leases later, its response is still in
// progress (not marked failed as a run whose replica died is); then it is cancelled as any.
func TestBackgroundLeaseRenewedWhileRunning(t *testing.T) {
	bl := &bgLoop{block: true, causes: make(chan error, 8)}
	ts := newBackgroundServer(t, bl, Background{Lease: 80 * time.Millisecond})
	id := gjson.GetBytes(createBackground(t, ts, bgBody, "sk-one").GetBody(), "id").String()
	waitStatus(t, ts, id, "in_progress")
	for i := range 10 {
		time.Sleep(40 * time.Millisecond)
		body := string(retrieve(t, ts, http.MethodGet, "/v1/responses/"+id, "sk-one").GetBody())
		require.Equal(t, "in_progress", gjson.Get(body, "status").String(), "read %d, %d leases in: %s", i, (i+1)/2, body)
	}
	im := retrieve(t, ts, http.MethodPost, "/v1/responses/"+id+"/cancel", "sk-one")
	assert.Equal(t, "cancelled", gjson.GetBytes(im.GetBody(), "status").String(), "cancel: %s", im.GetBody())
	select {
	case err := <-bl.causes:
		assert.ErrorIs(t, err, errCancelled, "the loop is ended by the cancellation")
	case <-time.After(5 * time.Second):
		t.Fatal("the loop was not cancelled")
	}
	waitStatus(t, ts, id, "cancelled")
}

// A cancellation another replica stored (the flag in the shared store) ends the run too.
func TestBackgroundCancelFromTheStore(t *testing.T) {
	bl := &bgLoop{block: true, causes: make(chan error, 8)}
	ts := newBackgroundServer(t, bl, Background{})
	id := gjson.GetBytes(createBackground(t, ts, bgBody, "sk-one").GetBody(), "id").String()
	waitStatus(t, ts, id, "in_progress")
	ts.srv.bg.mu.Lock()
	delete(ts.srv.bg.runs, id) // as if it ran on another replica: only the store can tell it
	ts.srv.bg.mu.Unlock()
	im := retrieve(t, ts, http.MethodPost, "/v1/responses/"+id+"/cancel", "sk-one")
	require.NotNil(t, im)
	select {
	case err := <-bl.causes:
		assert.ErrorIs(t, err, errCancelled, "the run reads the cancellation from the store")
	case <-time.After(5 * time.Second):
		t.Fatal("the loop was not cancelled")
	}
	waitStatus(t, ts, id, "cancelled")
}

func TestBackgroundBounds(t *testing.T) {
	bl := &bgLoop{block: true, causes: make(chan error, 8)}
	ts := newBackgroundServer(t, bl, Background{MaxPerIdentity: 1, Max: 2})
	createBackground(t, ts, bgBody, "sk-one")
	im := createBackground(t, ts, bgBody, "sk-one")
	assert.Equal(t, int32(429), int32(im.GetStatus().GetCode()), "over the caller's bound")
	assert.Equal(t, "rate_limit_exceeded", gjson.GetBytes(im.GetBody(), "error.code").String(), string(im.GetBody()))
	im = createBackground(t, ts, bgBody, "sk-two")
	assert.Equal(t, int32(200), int32(im.GetStatus().GetCode()), "another caller has room")
	im = createBackground(t, ts, bgBody, "sk-three")
	assert.Equal(t, int32(429), int32(im.GetStatus().GetCode()), "over the bound in all")
	assert.Contains(t, string(im.GetBody()), "at once")
}

func TestBackgroundStoppedAtShutdown(t *testing.T) {
	bl := &bgLoop{block: true, causes: make(chan error, 8)}
	ts := newBackgroundServer(t, bl, Background{})
	id := gjson.GetBytes(createBackground(t, ts, bgBody, "sk-one").GetBody(), "id").String()
	waitStatus(t, ts, id, "in_progress")
	require.NoError(t, ts.srv.StopBackground(context.Background()))
	assert.ErrorIs(t, <-bl.causes, ErrShuttingDown)
	failed := waitStatus(t, ts, id, "failed")
	assert.Equal(t, "server_shutting_down", gjson.Get(failed, "error.code").String(), failed)
	im := createBackground(t, ts, bgBody, "sk-one")
	assert.Equal(t, int32(503), int32(im.GetStatus().GetCode()), "no new run after the stop")
}

// Without the hosted tool a background request passes through untouched.
func TestBackgroundWithoutTheToolPassesThrough(t *testing.T) {
	ts := newBackgroundServer(t, &bgLoop{}, Background{})
	ex := ts.open(t)
	ex.send(postHeaders("/v1/responses"))
	resp := ex.send(reqBody(`{"model":"m","background":true,"input":"hi"}`))
	assert.Nil(t, resp.GetImmediateResponse())
	assert.Nil(t, resp.GetRequestBody().GetResponse().GetBodyMutation(), "the body goes upstream as sent")
}

// stallStore is a store of stored answers whose write of a completed record blocks until gate
// is closed: the runner is stalled (not dead) between its last check of the record and its
// write, past its lease.
type stallStore struct {
	*memory.Pending
	entered chan struct{} // closed when the write blocks
	once    sync.Once
	gate    chan struct{}
}

func (s *stallStore) hold(k store.Key, calls []store.PendingCall) {
	if k.Kind == "responses.stored" && len(calls) == 1 && gjson.Get(calls[0].Arguments, "status").String() == "completed" {
		s.once.Do(func() { close(s.entered) })
		<-s.gate
	}
}

func (s *stallStore) Put(identity string, calls []store.PendingCall, keys ...store.Key) {
	for _, k := range keys {
		s.hold(k, calls)
	}
	s.Pending.Put(identity, calls, keys...)
}

func (s *stallStore) Swap(identity string, k store.Key, old, calls []store.PendingCall) bool {
	s.hold(k, calls)
	return s.Pending.Swap(identity, k, old, calls)
}

// A runner stalled past its lease (between its check of the record and its write of the
// answer, its renewals stopped) finds, when it goes on, the response failed by the replica
// that read it after the lease: its write is refused, and so is every later one, so the
// failure stays and its stream ends with the one response.failed.
func TestBackgroundStalledRunnerIsFenced(t *testing.T) {
	ss := &stallStore{Pending: memory.NewPending(nil), entered: make(chan struct{}), gate: make(chan struct{})}
	ts := newTestServerWith(t, func(o *testOptions) {
		o.Stored = ss
		o.Loop = &bgLoop{}
		o.Background = Background{Poll: 5 * time.Millisecond, Lease: 100 * time.Millisecond}
	}, nil, nil, nil)
	t.Cleanup(func() { require.NoError(t, ts.srv.StopBackground(context.Background())) })
	id := gjson.GetBytes(createBackground(t, ts, bgBody, "sk-one").GetBody(), "id").String()
	<-ss.entered
	failed := waitStatus(t, ts, id, "failed")
	assert.Equal(t, "server_error", gjson.Get(failed, "error.code").String(), "failed by the lease's end: %s", failed)
	close(ss.gate)
	require.Eventually(t, func() bool { return ts.srv.BackgroundRunning() == 0 }, 5*time.Second, 5*time.Millisecond, "the run ends")

	got := string(retrieve(t, ts, http.MethodGet, "/v1/responses/"+id, "sk-one").GetBody())
	assert.JSONEq(t, failed, got, "the failure another replica recorded stays")
	events := string(retrieve(t, ts, http.MethodGet, "/v1/responses/"+id+"?stream=true", "sk-one").GetBody())
	assert.True(t, strings.HasSuffix(events, "\n\n") && strings.Contains(events[strings.LastIndex(events[:len(events)-2], "\n\n"):], "event: response.failed\n"),
		"the stream ends with the takeover's response.failed: %s", events)
	assert.NotContains(t, events, "response.completed", "the stream has one terminal event, the record's")
	for i, ev := range strings.Split(strings.TrimSuffix(events, "\n\n"), "\n\n") {
		_, data, _ := strings.Cut(ev, "data: ")
		assert.Equal(t, int64(i), gjson.Get(data, "sequence_number").Int(), "event %d: %s", i, ev)
	}
}
