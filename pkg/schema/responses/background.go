package responses

import (
	"bytes"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/schema/internal/openai"
	"github.com/codeinterp/codeinterp/pkg/store"
)

// A background response (issue 24: "background": true with the hosted tool) runs its loop in
// the server, detached from the client's request, which gets the response at status "queued"
// at once. Its record lives in the store of stored answers, so that every replica sharing it
// serves it:
//
//   - under kindStored, the response as GET /v1/responses/{id} shows it (queued, in_progress,
//     then completed, failed, incomplete or cancelled), with the request's input items, as a
//     stored answer is kept;
//   - under kindBackgroundEvents, its event stream as it is produced: one entry whose
//     Arguments are the events (numbered from 0), Output their count, for GET
//     /v1/responses/{id}?stream=true&starting_after=N;
//   - under kindBackgroundCancel, the cancellation POST /v1/responses/{id}/cancel asked for,
//     which the replica running the loop reads between its rounds and while it waits;
//   - under kindBackgroundLease, the lease of the replica running the loop: one entry whose
//     Arguments is the time (Unix milliseconds) its lease ends. The runner renews it every
//     quarter of the lease while the loop runs; a replica that reads the record of a response
//     still queued or in_progress whose lease has ended (its runner died without shutting
//     down: SIGKILL, a lost node) marks it failed (see expireLease), exactly once among the
//     replicas: the record is swapped from what it read ([store.Pending.Swap]).
//
// The runner is fenced: a runner that was only stalled past its lease must never overwrite
// the failure another replica recorded. Every write it makes is a compare-and-set: the lease
// is renewed by swapping it from the runner's own last lease (the takeover drops it), the
// events by swapping them from what the runner last saved (the takeover appends
// response.failed to them), and the record by swapping it from the value just read and found
// neither failed by a takeover nor deleted. Once one is refused the run records nothing more.
const (
	kindBackgroundEvents = "responses.background.events"
	kindBackgroundCancel = "responses.background.cancel"
	kindBackgroundLease  = "responses.background.lease"
)

// BackgroundLostMessage is the message of the error a background response whose runner's lease
// ended carries (code "server_error"): it names no replica, address or cause.
const BackgroundLostMessage = "The server running this background response stopped before it was complete. Create the response again."

// MaxBackgroundEventBytes bounds the event stream a background response records: the events
// past it are not recorded (a resumed stream then jumps from the last one recorded to the
// terminal event, which is always recorded, and the answer is whole in GET's JSON).
const MaxBackgroundEventBytes = 512 << 10

// withoutBackground returns body without its top-level "background": true, and whether it
// had it.
func withoutBackground(body []byte) ([]byte, bool) {
	if gjson.GetBytes(body, "background").Type != gjson.True {
		return body, false
	}
	out, err := sjson.DeleteBytes(body, "background")
	if err != nil {
		return body, false
	}
	return out, true
}

// bgRun is the record of a background response while its loop runs. Its methods are safe
// for concurrent use (the loop's Sink and the runner's poll).
type bgRun struct {
	id       string
	p        store.Pending
	identity string
	// base is the response object at status "queued"; input the request's input items.
	base  []byte
	input []byte

	mu sync.Mutex
	// events are the events recorded, n their count; unsaved reports events not yet in the
	// store; full that the bound was reached.
	events        []byte
	n             int
	unsaved, full bool
	// status is the response's status as last recorded.
	status string
	// lease is how long the runner's lease lasts from each renewal; beat is the last renewal.
	lease time.Duration
	beat  time.Time
	// expired reports that another replica marked the response failed after the lease
	// ended: the run records nothing more.
	expired bool
	// leased and saved are the lease and the events as the run last wrote them (CallID ""
	// before its first write): its next write of each is swapped from them.
	leased, saved store.PendingCall
}

// Background reports whether the request asked for a background response with the hosted
// tool: the processor then runs its loop detached (see BeginBackground).
func (x *exchange) Background() bool { return x.background }

// BeginBackground records the background response of the request, for identity, in p, at
// status "queued", with the runner's lease ending lease after now (see kindBackgroundLease;
// PollBackground renews it), and returns its id and the create request's answer: the response
// as JSON, or, when the client asked for a stream, the stream's first events
// (response.created and response.queued), from which the client resumes with GET
// …?stream=true&starting_after=N. It must be called once, before the loop starts.
func (x *exchange) BeginBackground(p store.Pending, identity string, now time.Time, lease time.Duration) (id string, answer []byte, stream bool) {
	r := &bgRun{id: schema.NewItemID("resp_"), p: p, identity: identity, status: "queued", lease: lease}
	r.base = queuedResponse(x.clientBody, r.id, now)
	if r.input = storedInput(x.clientBody); r.input == nil {
		// Asked not to be stored: the record lives for the polling all the same.
		r.input = []byte("[]")
	}
	x.bg = r
	r.mu.Lock()
	r.renewLocked(now)
	r.appendEvent("response.created", r.base)
	r.appendEvent("response.queued", r.base)
	r.saveLocked(r.base)
	r.mu.Unlock()
	if x.Request().Stream {
		return r.id, bytes.Clone(r.events), true
	}
	return r.id, r.base, false
}

// BackgroundRunning records that the loop of the background response started.
func (x *exchange) BackgroundRunning() {
	r := x.bg
	r.mu.Lock()
	defer r.mu.Unlock()
	resp := setStatus(r.base, "in_progress")
	r.status = "in_progress"
	r.appendEvent("response.in_progress", resp)
	r.saveLocked(resp)
}

// BackgroundSink returns the Sink the background response's loop reports to: its events are
// recorded, numbered after those recorded, as they happen.
func (x *exchange) BackgroundSink() schema.Sink { return x.Events(&bgWriter{r: x.bg}) }

// PollBackground saves the events recorded since the last save, renews the runner's lease
// when a quarter of it has passed since the last renewal (now is the time), and reports
// whether the run must stop: its cancellation was asked for (on any replica sharing the
// store), or another replica marked it failed after its lease ended (the run then records
// nothing more).
func (x *exchange) PollBackground(now time.Time) bool {
	r := x.bg
	r.mu.Lock()
	if !r.expired && now.Sub(r.beat) >= r.lease/4 {
		if r.lostLocked() {
			r.expired = true
		} else {
			r.renewLocked(now)
		}
	}
	if r.unsaved && !r.expired {
		r.saveEventsLocked()
	}
	if r.expired {
		r.mu.Unlock()
		return true
	}
	r.mu.Unlock()
	return r.p.Get(r.identity, store.Key{Kind: kindBackgroundCancel, ID: r.id}) != nil
}

// renewLocked renews the runner's lease from now, swapping it from the lease the run last
// wrote: a lease another replica took over (dropped after it recorded the failure) is not
// brought back, and the run is fenced (r.expired); one the store's bounds dropped is put
// back (see swapLocked); r.mu is held.
func (r *bgRun) renewLocked(now time.Time) {
	r.beat = now
	next := store.PendingCall{CallID: r.id, Arguments: strconv.FormatInt(now.Add(r.lease).UnixMilli(), 10)}
	if r.swapLocked(store.Key{Kind: kindBackgroundLease, ID: r.id}, &r.leased, next) {
		r.leased = next
	}
}

// swapLocked writes next under key, swapped from *last (what the run last wrote there; Put
// when it wrote nothing yet), and reports whether it did. A refused swap fences the run
// (r.expired) unless the entry still holds *last (a store bound refused the value: the run
// goes on, the value unsaved) or the entry is gone while the record is not the takeover's
// failure: the store's bounds (per identity, or in all) dropped it, since a takeover
// records the failure before it drops the lease, and it is put again; r.mu is held.
func (r *bgRun) swapLocked(key store.Key, last *store.PendingCall, next store.PendingCall) bool {
	if r.expired {
		return false
	}
	if last.CallID == "" {
		r.p.Put(r.identity, []store.PendingCall{next}, key)
		return true
	}
	if r.p.Swap(r.identity, key, []store.PendingCall{*last}, []store.PendingCall{next}) {
		return true
	}
	switch cur := r.p.Get(r.identity, key); {
	case len(cur) == 1 && cur[0] == *last:
		return false
	case len(cur) == 0 && !r.lostLocked():
		r.p.Put(r.identity, []store.PendingCall{next}, key)
		return true
	}
	r.expired = true
	return false
}

// lostLocked reports whether the run's record is the failure a takeover recorded (see
// expireLease); r.mu is held.
func (r *bgRun) lostLocked() bool {
	cur := r.p.Get(r.identity, store.Key{Kind: kindStored, ID: r.id})
	return len(cur) == 1 && cur[0].Arguments != "" && lostRecord(cur[0].Arguments)
}

// lostRecord reports whether a background response's record resp is the failure expireLease
// records after the runner's lease ended. (The run's own answer may be kept before its end
// is recorded, and a cancellation is recorded at once and again as the run ends: those are
// not it.)
func lostRecord(resp string) bool {
	return gjson.Get(resp, "status").String() == "failed" && gjson.Get(resp, "error.message").String() == BackgroundLostMessage
}

// expireLease returns the record e of background response id, kept for who, to serve at now:
// e itself, unless it is still queued or in_progress and its runner's lease has ended. Then the record is swapped for the response at status "failed" with the error
// BackgroundLostMessage, and its stream gets its terminal event, by the one replica whose
// swap wins; the others read what it wrote.
func expireLease(p store.Pending, who, id string, e store.PendingCall, now time.Time) store.PendingCall {
	if e.Arguments == "" || gjson.Get(e.Arguments, "background").Type != gjson.True || !backgroundLive(gjson.Get(e.Arguments, "status").String()) {
		return e
	}
	leaseKey := store.Key{Kind: kindBackgroundLease, ID: id}
	l := p.Get(who, leaseKey)
	if len(l) != 1 {
		// No lease: the runner predates leases (a rolling upgrade), or the store's bounds
		// dropped it; nothing tells that the run is lost.
		return e
	}
	if end, err := strconv.ParseInt(l[0].Arguments, 10, 64); err != nil || now.UnixMilli() <= end {
		return e
	}
	resp := setStatus([]byte(e.Arguments), "failed")
	if b, err := sjson.SetBytes(resp, "error", map[string]string{"code": "server_error", "message": BackgroundLostMessage}); err == nil {
		resp = b
	}
	key := store.Key{Kind: kindStored, ID: id}
	failed := store.PendingCall{CallID: id, Arguments: string(resp), Output: e.Output}
	if !p.Swap(who, key, []store.PendingCall{e}, []store.PendingCall{failed}) {
		if cur := p.Get(who, key); len(cur) == 1 && cur[0].CallID == id {
			return cur[0]
		}
		return e
	}
	if evs := p.Get(who, store.Key{Kind: kindBackgroundEvents, ID: id}); len(evs) == 1 {
		n, _ := strconv.Atoi(evs[0].Output)
		r := &bgRun{id: id, p: p, identity: who, events: []byte(evs[0].Arguments), n: n}
		if r.terminalRecorded() {
			// The run recorded its end but was stalled before its record said so (its write
			// of the record is refused now): the stream ends as the record does.
			if i := bytes.LastIndex(r.events[:len(r.events)-2], []byte("\n\n")); i >= 0 {
				r.events = r.events[:i+2]
			} else {
				r.events = nil
			}
			r.n--
		}
		r.appendTerminal("failed", resp)
		r.saveEventsLocked()
	}
	p.Drop(who, leaseKey)
	return failed
}

// EndBackground records the end of the background response: with cancelled, at status
// "cancelled"; else the loop's answer, status and body (a 200's body is the final answer, an
// error's its JSON error, which the response carries at status "failed").
func (x *exchange) EndBackground(status int, body []byte, cancelled bool) {
	r := x.bg
	r.mu.Lock()
	defer r.mu.Unlock()
	defer func() {
		if !r.expired {
			r.p.Drop(r.identity, store.Key{Kind: kindBackgroundLease, ID: r.id})
		}
	}()
	if r.expired {
		return
	}
	var resp []byte
	switch {
	case cancelled:
		resp = setStatus(r.base, "cancelled")
	case status == http.StatusOK && gjson.ValidBytes(body):
		resp = body
	default:
		e := gjson.GetBytes(body, "error")
		code, msg := e.Get("code").String(), e.Get("message").String()
		if code == "" {
			code = "server_error"
		}
		if msg == "" {
			msg = "The response failed."
		}
		resp = setStatus(r.base, "failed")
		if b, err := sjson.SetBytes(resp, "error", map[string]string{"code": code, "message": msg}); err == nil {
			resp = b
		}
	}
	st := gjson.GetBytes(resp, "status").String()
	if !r.terminalRecorded() {
		// The loop's Sink wrote the terminal event of an answer it completed or failed; a
		// cancelled run, or one that failed before the Sink began, gets its own.
		r.appendTerminal(st, resp)
	}
	r.status = st
	r.saveLocked(resp)
}

// terminalRecorded reports whether the last event recorded ends the stream.
func (r *bgRun) terminalRecorded() bool { return endsStream(r.events) }

// endsStream reports whether the last of the events evs ends a response's stream.
func endsStream(evs []byte) bool {
	i := bytes.LastIndex(evs, []byte("event: "))
	if i < 0 {
		return false
	}
	typ, _, _ := bytes.Cut(evs[i+len("event: "):], []byte("\n"))
	return isTerminalEvent(string(typ))
}

// isTerminalEvent reports whether an event of type typ ends a response's stream.
func isTerminalEvent(typ string) bool {
	switch typ {
	case "response.completed", "response.failed", "response.incomplete", "response.cancelled", "error":
		return true
	}
	return false
}

// appendTerminal records the event that ends the stream of a response at status st.
func (r *bgRun) appendTerminal(st string, resp []byte) {
	typ := "response." + st
	switch st {
	case "completed", "failed", "incomplete", "cancelled":
	default:
		typ = "response.failed"
	}
	r.full = false // the terminal event is always recorded
	r.appendEvent(typ, resp)
}

// appendEvent records an event of type typ carrying the response resp; r.mu is held.
func (r *bgRun) appendEvent(typ string, resp []byte) {
	s, ok := openai.CompactBody(resp)
	if !ok {
		return
	}
	r.appendRaw(typ, `{"type":`+strconv.Quote(typ)+`,"sequence_number":0,"response":`+s+`}`)
}

// appendRaw records the event typ whose data is data, numbered next; r.mu is held.
func (r *bgRun) appendRaw(typ, data string) {
	if r.full && !isTerminalEvent(typ) {
		return
	}
	data, err := sjson.Set(data, "sequence_number", r.n)
	if err != nil {
		return
	}
	if gjson.Get(data, "response").IsObject() {
		// The loop's encoder names the response after the upstream's turn; it is ours.
		if d, err := sjson.Set(data, "response.id", r.id); err == nil {
			data = d
		}
		if d, err := sjson.Set(data, "response.background", true); err == nil {
			data = d
		}
	}
	ev := "event: " + typ + "\ndata: " + data + "\n\n"
	if len(r.events)+len(ev) > MaxBackgroundEventBytes && !isTerminalEvent(typ) {
		r.full = true
		return
	}
	r.events = append(r.events, ev...)
	r.n++
	r.unsaved = true
}

// saveLocked saves the response resp as the record's state, and the events; r.mu is held. A
// response deleted while it ran stays deleted: its tombstone is left as it is; so does one
// another replica marked failed after the run's lease ended (see expireLease), and the run is
// then fenced. The record is swapped from the value read and checked, so that no takeover
// lands between the check and the write; a cancellation that lands there is read again.
func (r *bgRun) saveLocked(resp []byte) {
	key := store.Key{Kind: kindStored, ID: r.id}
	next := []store.PendingCall{{CallID: r.id, Arguments: string(resp), Output: string(r.input)}}
	for range 4 {
		cur := r.p.Get(r.identity, key)
		if len(cur) == 1 && cur[0].CallID == r.id && (cur[0].Arguments == "" || lostRecord(cur[0].Arguments)) {
			r.expired = r.expired || cur[0].Arguments != ""
			return
		}
		if !r.saveEventsLocked() && r.expired {
			return
		}
		if len(cur) == 0 {
			// Never written, or dropped by the store's bounds (no takeover drops it).
			r.p.Put(r.identity, next, key)
			return
		}
		if r.p.Swap(r.identity, key, cur, next) {
			return
		}
	}
}

// saveEventsLocked saves the events recorded, swapped from what the run last saved (see
// swapLocked), and reports whether it did; r.mu is held.
func (r *bgRun) saveEventsLocked() bool {
	next := store.PendingCall{CallID: r.id, Arguments: string(r.events), Output: strconv.Itoa(r.n)}
	if next == r.saved {
		r.unsaved = false
		return true
	}
	if !r.swapLocked(store.Key{Kind: kindBackgroundEvents, ID: r.id}, &r.saved, next) {
		return false
	}
	r.saved = next
	r.unsaved = false
	return true
}

// bgWriter records the events the loop's encoder writes: those that name the response's
// start (response.created, response.in_progress, recorded already) are left out, the others
// numbered on.
type bgWriter struct {
	r *bgRun
	// partial is an event whose end has not been written yet.
	partial []byte
}

func (w *bgWriter) Write(p []byte) (int, error) {
	w.partial = append(w.partial, p...)
	w.r.mu.Lock()
	defer w.r.mu.Unlock()
	for {
		i := bytes.Index(w.partial, []byte("\n\n"))
		if i < 0 {
			break
		}
		ev := string(w.partial[:i])
		w.partial = w.partial[i+2:]
		var typ, data string
		for _, line := range strings.Split(ev, "\n") {
			if t, ok := strings.CutPrefix(line, "event: "); ok {
				typ = t
			} else if d, ok := strings.CutPrefix(line, "data: "); ok {
				data = d
			}
		}
		if data == "" || typ == "response.created" || typ == "response.in_progress" {
			continue
		}
		if typ == "" {
			typ = gjson.Get(data, "type").String()
		}
		w.r.appendRaw(typ, data)
	}
	return len(p), nil
}

// backgroundFinal names the final answer body of a background response after it (id, and
// "background": true); the upstream's id of its last turn is what a continuation from it
// sends upstream (see Remember).
func (x *exchange) backgroundFinal(body []byte, rounds []schema.Round) ([]byte, error) {
	last := gjson.GetBytes(body, "id").String()
	if len(rounds) > 0 {
		last = gjson.GetBytes(rounds[len(rounds)-1].Body, "id").String()
	}
	body, err := sjson.SetBytes(body, "id", x.bg.id)
	if err == nil {
		body, err = sjson.SetBytes(body, "background", true)
	}
	if err == nil && last != "" && last != x.bg.id {
		x.named, x.upstreamID = x.bg.id, last
	}
	return body, err
}

// queuedResponse is the response object of a background request body at status "queued",
// named id: what the request set of the response's fields, the others at their defaults.
func queuedResponse(body []byte, id string, now time.Time) []byte {
	out := []byte(`{}`)
	set := func(k string, v any) {
		if b, err := sjson.SetBytes(out, k, v); err == nil {
			out = b
		}
	}
	setRaw := func(k, raw string) {
		if b, err := sjson.SetRawBytes(out, k, []byte(raw)); err == nil {
			out = b
		}
	}
	set("id", id)
	set("object", "response")
	set("created_at", now.Unix())
	set("status", "queued")
	set("background", true)
	setRaw("error", "null")
	setRaw("incomplete_details", "null")
	defaults := []struct{ key, def string }{
		{"instructions", "null"}, {"max_output_tokens", "null"}, {"model", `""`}, {"output", "[]"},
		{"parallel_tool_calls", "true"}, {"previous_response_id", "null"}, {"reasoning", `{"effort":null,"summary":null}`},
		{"service_tier", `"auto"`}, {"store", "true"}, {"temperature", "1.0"}, {"text", `{"format":{"type":"text"}}`},
		{"tool_choice", `"auto"`}, {"tools", "[]"}, {"top_p", "1.0"}, {"truncation", `"disabled"`},
		{"usage", "null"}, {"user", "null"}, {"metadata", "{}"},
	}
	for _, d := range defaults {
		v := gjson.GetBytes(body, d.key)
		if d.key != "output" && d.key != "usage" && v.Exists() && v.Type != gjson.Null {
			setRaw(d.key, v.Raw)
		} else {
			setRaw(d.key, d.def)
		}
	}
	return out
}

// setStatus returns resp at status st.
func setStatus(resp []byte, st string) []byte {
	b, err := sjson.SetBytes(resp, "status", st)
	if err != nil {
		return resp
	}
	return b
}

// backgroundLive reports whether a response's status is one a background response leaves
// (queued, in_progress): its stream is not over.
func backgroundLive(status string) bool { return status == "queued" || status == "in_progress" }

// serveCancel answers POST /v1/responses/{id}/cancel for the background response e kept for
// who: one in progress is marked cancelled at once and its loop asked to stop
// (the replica running it reads the flag); one that has ended answers as natively.
func serveCancel(p store.Pending, who, id string, e store.PendingCall) (int, []byte) {
	resp := []byte(e.Arguments)
	switch st := gjson.GetBytes(resp, "status").String(); {
	case st == "cancelled":
		return http.StatusOK, resp
	case !backgroundLive(st):
		return http.StatusBadRequest, openai.ErrorJSON(fmt.Sprintf("Cannot cancel a %s response.", st), "invalid_request_error", "", "")
	}
	p.Put(who, []store.PendingCall{{CallID: id}}, store.Key{Kind: kindBackgroundCancel, ID: id})
	resp = setStatus(resp, "cancelled")
	p.Put(who, []store.PendingCall{{CallID: id, Arguments: string(resp), Output: e.Output}}, store.Key{Kind: kindStored, ID: id})
	return http.StatusOK, resp
}

// backgroundEvents returns the recorded events of background response id after sequence
// number after (-1: all), and whether the response's stream is over; ok is false when none
// are recorded (an answer kept after a request that was not a background one).
func backgroundEvents(p store.Pending, who, id string, after int) (events []byte, ok bool) {
	calls := p.Get(who, store.Key{Kind: kindBackgroundEvents, ID: id})
	if len(calls) != 1 {
		return nil, false
	}
	rest := []byte(calls[0].Arguments)
	// Counted up, not as range after+1: starting_after may be the largest int.
	for i := 0; i <= after; i++ {
		i := bytes.Index(rest, []byte("\n\n"))
		if i < 0 {
			return nil, true
		}
		rest = rest[i+2:]
	}
	return rest, true
}
