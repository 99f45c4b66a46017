package responses

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/store"
	"github.com/codeinterp/codeinterp/pkg/store/memory"
)

func TestBackgroundRequest(t *testing.T) {
	tests := []struct {
		name           string
		give           string
		wantBackground bool
		wantUntouched  bool
	}{
		{"with the tool", `{"model":"m","background":true,"tools":[{"type":"code_interpreter","container":{"type":"auto"}}],"input":"x"}`, true, false},
		{"without the tool", `{"model":"m","background":true,"input":"x"}`, false, true},
		{"background false", `{"model":"m","background":false,"tools":[{"type":"code_interpreter","container":{"type":"auto"}}],"input":"x"}`, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x, err := Surface{}.NewExchange([]byte(tt.give), schema.Options{})
			require.NoError(t, err)
			ex := x.(*exchange)
			assert.Equal(t, tt.wantBackground, ex.Background(), "%s: Background", tt.name)
			if tt.wantBackground {
				assert.False(t, gjson.GetBytes(x.Request().Body, "background").Exists(), "%s: the upstream gets no background", tt.name)
			}
			if tt.wantUntouched {
				assert.Equal(t, tt.give, string(x.Request().Body), "%s: the body passes untouched", tt.name)
			}
		})
	}
}

// The record of a background response goes queued → in_progress → completed through the
// store, with its events numbered in order, and cancel answers natively.
func TestBackgroundRecord(t *testing.T) {
	p := memory.NewPending(nil)
	give := `{"model":"m","background":true,"stream":true,"tools":[{"type":"code_interpreter","container":{"type":"auto"}}],"input":"x"}`
	x, err := Surface{}.NewExchange([]byte(give), schema.Options{})
	require.NoError(t, err)
	ex := x.(*exchange)
	// The lease is read against the wall clock, as replicas read each other's.
	now := time.Now().Truncate(time.Second)
	id, answer, stream := ex.BeginBackground(p, "id-a", now, time.Minute)
	require.True(t, stream)
	assert.Equal(t, 2, strings.Count(string(answer), "\n\n"), "created and queued: %s", answer)
	serve := func(method, rest, query string) (int, string, bool) {
		st, b, _, live, ok := Surface{}.ServeStored(p, func() string { return "id-a" }, method, rest, query, nil)
		require.True(t, ok, "%s %s", method, rest)
		return st, string(b), live
	}
	st, body, _ := serve(http.MethodGet, "/"+id, "")
	assert.Equal(t, http.StatusOK, st)
	assert.Equal(t, "queued", gjson.Get(body, "status").String())
	assert.Equal(t, now.Unix(), gjson.Get(body, "created_at").Int())

	ex.BackgroundRunning()
	_, _, live := serve(http.MethodGet, "/"+id, "stream=true")
	assert.True(t, live, "the stream of a response in progress is live")
	upstream := `{"id":"resp_up","object":"response","status":"completed","output":[{"type":"message","id":"msg_1","role":"assistant","status":"completed","content":[{"type":"output_text","text":"42","annotations":[]}]}]}`
	rounds := []schema.Round{{Body: []byte(upstream)}}
	_, err = ex.ParseTurn(rounds[0].Body)
	require.NoError(t, err)
	final, err := ex.Final(rounds, "")
	require.NoError(t, err)
	assert.Equal(t, id, gjson.GetBytes(final, "id").String(), "the answer is named after the response")
	sink := ex.BackgroundSink()
	require.NoError(t, sink.Event(schema.Event{Kind: schema.EventRound, Body: rounds[0].Body}))
	require.NoError(t, sink.Event(schema.Event{Kind: schema.EventDone, Body: final}))
	ex.EndBackground(http.StatusOK, final, false)

	_, events, live := serve(http.MethodGet, "/"+id, "stream=true")
	assert.False(t, live, "the stream of a completed response is over")
	n := 0
	for ev := range strings.SplitSeq(strings.TrimSuffix(events, "\n\n"), "\n\n") {
		data := ev[strings.Index(ev, "data: ")+6:]
		assert.Equal(t, int64(n), gjson.Get(data, "sequence_number").Int(), "event %d is numbered in order: %s", n, ev)
		if r := gjson.Get(data, "response"); r.Exists() {
			assert.Equal(t, id, r.Get("id").String(), "event %d names the response", n)
		}
		n++
	}
	assert.True(t, strings.HasSuffix(events, "\n\n") && strings.Contains(events, "event: response.completed\n"), events)
	assert.Equal(t, 1, strings.Count(events, "event: response.in_progress\n"), "in_progress once")
	st, body, _ = serve(http.MethodPost, "/"+id+"/cancel", "")
	assert.Equal(t, http.StatusBadRequest, st, "a completed response cannot be cancelled")
	assert.Contains(t, body, "Cannot cancel a completed response.")
}

// A background response deleted while it runs is asked to stop, and stays deleted: the run's
// later writes do not bring it back.
func TestBackgroundDeletedWhileRunning(t *testing.T) {
	p := memory.NewPending(nil)
	give := `{"model":"m","background":true,"tools":[{"type":"code_interpreter","container":{"type":"auto"}}],"input":"x"}`
	x, err := Surface{}.NewExchange([]byte(give), schema.Options{})
	require.NoError(t, err)
	ex := x.(*exchange)
	id, _, _ := ex.BeginBackground(p, "id-a", time.Now(), time.Minute)
	ex.BackgroundRunning()
	serve := func(method string) (int, string) {
		st, b, _, _, ok := Surface{}.ServeStored(p, func() string { return "id-a" }, method, "/"+id, "", nil)
		require.True(t, ok, "%s is answered here", method)
		return st, string(b)
	}
	st, body := serve(http.MethodDelete)
	require.Equal(t, http.StatusOK, st, "DELETE: %s", body)
	assert.True(t, ex.PollBackground(time.Now()), "the run is asked to stop")
	ex.EndBackground(0, nil, true)
	st, body = serve(http.MethodGet)
	assert.Equal(t, http.StatusNotFound, st, "still deleted after the run's last write: %s", body)
}

// beginRunning starts the record of a background response in p for id-a whose runner's lease
// was last renewed at began, and marks it running.
func beginRunning(t *testing.T, p *memory.Pending, began time.Time, lease time.Duration) (*exchange, string) {
	t.Helper()
	give := `{"model":"m","background":true,"tools":[{"type":"code_interpreter","container":{"type":"auto"}}],"input":"x"}`
	x, err := Surface{}.NewExchange([]byte(give), schema.Options{})
	require.NoError(t, err)
	ex := x.(*exchange)
	id, _, _ := ex.BeginBackground(p, "id-a", began, lease)
	ex.BackgroundRunning()
	return ex, id
}

// serveAs answers method rest?query for id-a from p.
func serveAs(t *testing.T, p *memory.Pending, method, rest, query string) (int, string, bool) {
	t.Helper()
	st, b, _, live, ok := Surface{}.ServeStored(p, func() string { return "id-a" }, method, rest, query, nil)
	require.True(t, ok, "%s %s?%s is answered here", method, rest, query)
	return st, string(b), live
}

// A response whose runner's lease ended (the runner died without shutting down) is marked
// failed, with a fixed server_error, by the first read, on any path; its stream ends with
// response.failed; the runner, should it wake, stops and records nothing more.
func TestBackgroundLeaseEnded(t *testing.T) {
	for _, read := range []struct{ method, sub, query string }{
		{http.MethodGet, "", ""}, {http.MethodGet, "", "stream=true"}, {http.MethodPost, "/cancel", ""}, {http.MethodGet, "/input_items", ""},
	} {
		t.Run(read.method+read.sub+"?"+read.query, func(t *testing.T) {
			p := memory.NewPending(nil)
			ex, id := beginRunning(t, p, time.Now().Add(-time.Minute), 10*time.Second)
			st, body, live := serveAs(t, p, read.method, "/"+id+read.sub, read.query)
			assert.False(t, live, "%s: the stream of a lost response is over", read.method)
			if read.sub == "/cancel" {
				assert.Equal(t, http.StatusBadRequest, st, "cancel of a lost response: %s", body)
				assert.Contains(t, body, "Cannot cancel a failed response.", "cancel of a lost response")
			}
			_, body, _ = serveAs(t, p, http.MethodGet, "/"+id, "")
			assert.Equal(t, "failed", gjson.Get(body, "status").String(), "the record after a read: %s", body)
			assert.Equal(t, "server_error", gjson.Get(body, "error.code").String(), "the error's code: %s", body)
			assert.Equal(t, BackgroundLostMessage, gjson.Get(body, "error.message").String(), "the error's message: %s", body)
			_, events, live := serveAs(t, p, http.MethodGet, "/"+id, "stream=true")
			assert.False(t, live, "the stream is over")
			assert.Equal(t, 1, strings.Count(events, "event: response.failed\n"), "one terminal event: %s", events)
			assert.True(t, strings.HasSuffix(events, "\n\n") && strings.Contains(events[strings.LastIndex(events, "event: "):], "response.failed"),
				"the stream ends with response.failed: %s", events)

			assert.True(t, ex.PollBackground(time.Now()), "the runner, polling again, stops")
			ex.EndBackground(http.StatusOK, []byte(`{"id":"`+id+`","object":"response","status":"completed","output":[]}`), false)
			_, body, _ = serveAs(t, p, http.MethodGet, "/"+id, "")
			assert.Equal(t, "failed", gjson.Get(body, "status").String(), "the runner's late end leaves the record failed: %s", body)
			_, after, _ := serveAs(t, p, http.MethodGet, "/"+id, "stream=true")
			assert.Equal(t, events, after, "the runner's late end records no event")
		})
	}
}

// A runner that renews its lease keeps its response in progress; one whose lease is live is
// left alone, and so is one without a lease (a runner older than leases).
func TestBackgroundLeaseRenewed(t *testing.T) {
	p := memory.NewPending(nil)
	ex, id := beginRunning(t, p, time.Now().Add(-time.Minute), 10*time.Second)
	assert.False(t, ex.PollBackground(time.Now()), "a poll of a run nobody cancelled")
	_, body, live := serveAs(t, p, http.MethodGet, "/"+id, "stream=true")
	assert.True(t, live, "the stream of a response whose lease was renewed is live: %s", body)
	_, body, _ = serveAs(t, p, http.MethodGet, "/"+id, "")
	assert.Equal(t, "in_progress", gjson.Get(body, "status").String(), "renewed: %s", body)

	q := memory.NewPending(nil)
	_, id = beginRunning(t, q, time.Now(), 10*time.Second)
	_, body, _ = serveAs(t, q, http.MethodGet, "/"+id, "")
	assert.Equal(t, "in_progress", gjson.Get(body, "status").String(), "a live lease: %s", body)

	r := memory.NewPending(nil)
	_, id = beginRunning(t, r, time.Now().Add(-time.Minute), 10*time.Second)
	r.Drop("id-a", store.Key{Kind: kindBackgroundLease, ID: id})
	_, body, _ = serveAs(t, r, http.MethodGet, "/"+id, "")
	assert.Equal(t, "in_progress", gjson.Get(body, "status").String(), "no lease: %s", body)
}

// Of replicas reading a lost response at once, one marks it failed: its stream gets one
// terminal event.
func TestBackgroundLeaseEndedOnce(t *testing.T) {
	p := memory.NewPending(nil)
	_, id := beginRunning(t, p, time.Now().Add(-time.Minute), 10*time.Second)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			st, b, _, _, _ := Surface{}.ServeStored(p, func() string { return "id-a" }, http.MethodGet, "/"+id, "", nil)
			assert.Equal(t, http.StatusOK, st, "GET: %s", b)
			assert.Equal(t, "failed", gjson.GetBytes(b, "status").String(), "every reader sees it failed: %s", b)
		})
	}
	wg.Wait()
	_, events, _ := serveAs(t, p, http.MethodGet, "/"+id, "stream=true")
	assert.Equal(t, 1, strings.Count(events, "event: response.failed\n"), "one terminal event after 8 readers: %s", events)
}

// A runner whose lease entry the store's bounds dropped (its own identity's other entries, or
// another identity's in all) is not fenced: no takeover drops a lease before it records the
// failure, so the run puts its lease back, goes on and records its end; a reader then finds
// a lease to go by.
func TestBackgroundLeaseDroppedByTheStoreBound(t *testing.T) {
	tests := []struct {
		name   string
		limits memory.PendingLimits
		who    string
		n      int
	}{
		{"the identity's own entries", memory.PendingLimits{MaxEntriesPerIdentity: 4}, "id-a", 2},
		{"another identity's entries", memory.PendingLimits{MaxEntries: 6}, "id-b", 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := memory.NewPendingLimited(nil, tt.limits)
			now := time.Now()
			ex, id := beginRunning(t, p, now, time.Minute)
			leaseKey := store.Key{Kind: kindBackgroundLease, ID: id}
			for i := range tt.n {
				other := "resp_other" + strconv.Itoa(i)
				p.Put(tt.who, []store.PendingCall{{CallID: other, Arguments: `{"status":"completed"}`}}, store.Key{Kind: kindStored, ID: other})
			}
			require.Empty(t, p.Get("id-a", leaseKey), "the store's bound dropped the lease")

			assert.False(t, ex.PollBackground(now.Add(20*time.Second)), "a run whose lease the store's bound dropped goes on")
			assert.Len(t, p.Get("id-a", leaseKey), 1, "its lease is put back")
			ex.EndBackground(http.StatusOK, []byte(`{"id":"`+id+`","object":"response","status":"completed","output":[]}`), false)
			_, body, _ := serveAs(t, p, http.MethodGet, "/"+id, "")
			assert.Equal(t, "completed", gjson.Get(body, "status").String(), "the run's end is recorded: %s", body)
		})
	}
}

// A starting_after past every event, up to the largest integer, gives no event.
func TestBackgroundStartingAfterPastTheEnd(t *testing.T) {
	p := memory.NewPending(nil)
	_, id := beginRunning(t, p, time.Now(), time.Minute)
	for _, after := range []int{3, 100, math.MaxInt - 1, math.MaxInt} {
		st, events, live := serveAs(t, p, http.MethodGet, "/"+id, "stream=true&starting_after="+strconv.Itoa(after))
		assert.Equal(t, http.StatusOK, st, "starting_after=%d: %s", after, events)
		assert.True(t, live, "starting_after=%d: the stream is live", after)
		assert.Empty(t, events, "starting_after=%d: no event comes after it", after)
	}
	_, events, _ := serveAs(t, p, http.MethodGet, "/"+id, "stream=true&starting_after=1")
	assert.Equal(t, 1, strings.Count(events, "\n\n"), "starting_after=1 of three events: %s", events)
}

// A stream whose recorded events end with the terminal event is over, though the record still
// says in_progress (its runner recorded its end but was stalled before its record said so): a
// reader that got the terminal event stops there, and never waits for a failure that a
// takeover would record at the same sequence number.
func TestBackgroundStreamOverAtItsTerminalEvent(t *testing.T) {
	p := memory.NewPending(nil)
	ex, id := beginRunning(t, p, time.Now(), time.Minute)
	_, _, live := serveAs(t, p, http.MethodGet, "/"+id, "stream=true")
	require.True(t, live, "a running response's stream is live")
	ex.bg.mu.Lock()
	ex.bg.appendTerminal("completed", setStatus(ex.bg.base, "completed"))
	ex.bg.saveEventsLocked()
	ex.bg.mu.Unlock()
	_, body, _ := serveAs(t, p, http.MethodGet, "/"+id, "")
	require.Equal(t, "in_progress", gjson.Get(body, "status").String(), "the record is not written yet: %s", body)

	_, events, live := serveAs(t, p, http.MethodGet, "/"+id, "stream=true&starting_after=2")
	assert.False(t, live, "a stream whose last event is terminal is over: %s", events)
	assert.True(t, strings.HasPrefix(events, "event: response.completed\n"), "the terminal event: %s", events)
}

// A runner stalled past its lease whose events the store's bounds dropped before the takeover
// (which then had none to end with response.failed) does not put its events back: the
// record is the takeover's failure, and the run is fenced.
func TestBackgroundEventsDroppedBeforeTheTakeover(t *testing.T) {
	p := memory.NewPending(nil)
	began := time.Now().Add(-time.Minute)
	ex, id := beginRunning(t, p, began, 10*time.Second)
	eventsKey := store.Key{Kind: kindBackgroundEvents, ID: id}
	ex.bg.mu.Lock()
	ex.bg.appendRaw("response.output_item.added", `{"type":"response.output_item.added","sequence_number":0,"output_index":0,"item":{"type":"message"}}`)
	ex.bg.mu.Unlock()
	p.Drop("id-a", eventsKey)
	_, body, _ := serveAs(t, p, http.MethodGet, "/"+id, "")
	require.Equal(t, "failed", gjson.Get(body, "status").String(), "taken over: %s", body)

	// Its renewal not due yet, the run only saves its events.
	assert.True(t, ex.PollBackground(began.Add(time.Second)), "the stalled run stops")
	assert.Empty(t, p.Get("id-a", eventsKey), "its events are not put back")
	ex.EndBackground(http.StatusOK, []byte(`{"id":"`+id+`","object":"response","status":"completed","output":[]}`), false)
	_, events, _ := serveAs(t, p, http.MethodGet, "/"+id, "stream=true")
	assert.NotContains(t, events, "response.completed", "the stream does not end as the stalled run would")
	assert.Contains(t, events, "event: response.failed\n", "the stream ends as the record does: %s", events)
}
