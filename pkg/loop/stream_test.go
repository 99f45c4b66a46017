package loop

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/pkg/schema"
	schemaresponses "github.com/codeinterp/codeinterp/pkg/schema/responses"
	"github.com/codeinterp/codeinterp/pkg/schema/sse"
)

var streamClient = strings.Replace(responsesClient, `{"model"`, `{"stream":true,"model"`, 1)

// upstreamEvents returns the raw events of the stream the upstream sends for answer.
func upstreamEvents(t *testing.T, answer string) [][]byte {
	t.Helper()
	stream, err := schemaresponses.SSE([]byte(answer))
	require.NoError(t, err)
	var out [][]byte
	for _, ev := range strings.SplitAfter(string(stream), "\n\n") {
		if ev != "" {
			out = append(out, []byte(ev))
		}
	}
	return out
}

// streamModel answers every follow-up with events, as an event stream; after the first event
// that contains pause it waits until gate is closed (at most 5 s).
type streamModel struct {
	events [][]byte
	pause  string
	gate   chan struct{}
	mu     sync.Mutex
	bodies [][]byte
}

func (m *streamModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	m.mu.Lock()
	m.bodies = append(m.bodies, body)
	m.mu.Unlock()
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	paused := false
	for _, ev := range m.events {
		_, _ = w.Write(ev)
		w.(http.Flusher).Flush()
		if !paused && m.pause != "" && bytes.Contains(ev, []byte(m.pause)) {
			paused = true
			select {
			case <-m.gate:
			case <-time.After(5 * time.Second):
			case <-r.Context().Done():
				return
			}
		}
	}
}

// recordingSink records the kinds of the events it passes on, and closes gate at the first
// EventDelta that carries an output_text delta.
type recordingSink struct {
	schema.Sink
	gate  chan struct{}
	kinds []schema.EventKind
}

func (s *recordingSink) Event(ev schema.Event) error {
	s.kinds = append(s.kinds, ev.Kind)
	if ev.Kind == schema.EventDelta && bytes.Contains(ev.Body, []byte(`"response.output_text.delta"`)) && s.gate != nil {
		close(s.gate)
		s.gate = nil
	}
	return s.Sink.Event(ev)
}

// A client that streams gets the follow-up's text as the upstream streams it: the loop asks for
// stream:true, passes the text delta on before the upstream's stream ends, and the answer is
// the one the completed response makes.
func TestStreamedFollowUpRelaysDeltas(t *testing.T) {
	f := newFixture(t)
	final := respText("2", "The answer is 42.")
	gate := make(chan struct{})
	model := &streamModel{events: upstreamEvents(t, final), pause: `"response.output_text.delta"`, gate: gate}
	srv := httptest.NewServer(model)
	t.Cleanup(srv.Close)

	req := f.request(t, respSurface, streamClient, respCall("1", "print(40+2)", 10))
	req.URL = srv.URL + "/v1/responses"
	sink := &recordingSink{Sink: req.Sink, gate: gate}
	req.Sink = sink
	res := f.engine.Run(context.Background(), req)
	require.Equal(t, http.StatusOK, res.Status, "body: %s", res.Body)

	require.Len(t, model.bodies, 1)
	assert.True(t, gjson.GetBytes(model.bodies[0], "stream").Bool(), "the follow-up asks for a stream: %s", model.bodies[0])
	assert.Nil(t, sink.gate, "the text delta reached the sink while the upstream stream was paused")
	assert.Equal(t, "The answer is 42.", gjson.GetBytes(res.Body, "output.1.content.0.text").String(), "the answer: %s", res.Body)
	assert.Equal(t, 2, int(gjson.GetBytes(res.Body, "output.#").Int()), "code call and message: %s", res.Body)

	// Deltas of round 1 come before its EventRound, which comes before EventDone.
	firstDelta, round, done := -1, -1, -1
	for i, k := range sink.kinds {
		switch {
		case k == schema.EventDelta && firstDelta < 0:
			firstDelta = i
		case k == schema.EventRound:
			round = i
		case k == schema.EventDone:
			done = i
		}
	}
	assert.True(t, firstDelta >= 0 && firstDelta < round && round < done, "event order %v", sink.kinds)

	// The client's stream ends with the answer and shows each item once.
	evs := clientEvents(t, f.stream.Bytes())
	require.NotEmpty(t, evs)
	last := evs[len(evs)-1]
	assert.Equal(t, "response.completed", last.Name)
	assert.JSONEq(t, gjson.GetBytes(res.Body, "output").Raw, gjson.GetBytes(last.Data, "response.output").Raw, "the completed response")
	added := 0
	for i, ev := range evs {
		assert.Equal(t, int64(i), gjson.GetBytes(ev.Data, "sequence_number").Int(), "event %d's sequence_number", i)
		if ev.Name == "response.output_item.added" {
			assert.Equal(t, int64(added), gjson.GetBytes(ev.Data, "output_index").Int(), "item %d's index", added)
			added++
		}
	}
	assert.Equal(t, 2, added, "items added: %s", f.stream.Bytes())
}

func clientEvents(t *testing.T, stream []byte) []sse.Event {
	t.Helper()
	rd := sse.NewReader(bytes.NewReader(stream), 0, 0)
	var out []sse.Event
	for {
		ev, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		require.NoError(t, err)
		ev.Data = bytes.Clone(ev.Data)
		out = append(out, ev)
	}
}

// An upstream stream that cannot be read to its answer is an upstream error: a 502, which the
// client's stream shows as response.failed.
func TestStreamedFollowUpMalformed(t *testing.T) {
	good := upstreamEvents(t, respText("2", strings.Repeat("long text ", 100)))
	tests := []struct {
		name     string
		give     [][]byte
		maxBytes int64
	}{
		{name: "not json", give: [][]byte{[]byte("event: response.created\ndata: {\"type\":\n\n")}},
		{name: "ends before its answer", give: good[:len(good)-1]},
		{name: "error event", give: [][]byte{[]byte("event: error\ndata: {\"type\":\"error\",\"code\":\"server_error\",\"message\":\"boom\"}\n\n")}},
		{name: "larger than max_response_bytes", give: good, maxBytes: 2000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			srv := httptest.NewServer(&streamModel{events: tt.give})
			t.Cleanup(srv.Close)
			req := f.request(t, respSurface, streamClient, respCall("1", "print(40+2)", 10))
			req.URL = srv.URL + "/v1/responses"
			req.MaxResponseBytes = tt.maxBytes
			res := f.engine.Run(context.Background(), req)
			assert.Equal(t, http.StatusBadGateway, res.Status, "%s: %s", tt.name, res.Body)
			assert.Equal(t, StopUpstreamError, res.Stop)
			assert.Equal(t, "upstream_invalid_stream", gjson.GetBytes(res.Body, "error.code").String(), "%s: %s", tt.name, res.Body)
			assert.Contains(t, f.stream.String(), "event: response.failed", "%s: the client's stream", tt.name)
		})
	}
}

// An upstream that answers a stream request with JSON is read as before.
func TestStreamRequestAnsweredWithJSON(t *testing.T) {
	f := newFixture(t, scripted{status: 200, body: respText("2", "The answer is 42.")})
	res := f.engine.Run(context.Background(), f.request(t, respSurface, streamClient, respCall("1", "print(40+2)", 10)))
	require.Equal(t, http.StatusOK, res.Status, "body: %s", res.Body)
	assert.True(t, gjson.GetBytes(f.model.sent()[0], "stream").Bool(), "the follow-up asks for a stream")
	assert.Contains(t, f.stream.String(), `"delta":"The answer is 42."`, "the stream: %s", f.stream.String())
	assert.Contains(t, f.stream.String(), "event: response.completed")
}

// failingSink fails at the first EventDelta: the client went away while the answer streamed.
type failingSink struct{ schema.Sink }

func (s failingSink) Event(ev schema.Event) error {
	if ev.Kind == schema.EventDelta {
		return errors.New("client gone")
	}
	return s.Sink.Event(ev)
}

// A client that goes away while a follow-up streams stops the loop at once: the rest of the
// upstream's stream is not read.
func TestStreamedFollowUpClientGone(t *testing.T) {
	f := newFixture(t)
	gate := make(chan struct{}) // never closed: the model holds its stream after the first delta
	srv := httptest.NewServer(&streamModel{events: upstreamEvents(t, respText("2", "The answer is 42.")), pause: `"response.output_text.delta"`, gate: gate})
	t.Cleanup(srv.Close)
	req := f.request(t, respSurface, streamClient, respCall("1", "print(40+2)", 10))
	req.URL = srv.URL + "/v1/responses"
	req.Sink = failingSink{Sink: req.Sink}
	start := time.Now()
	res := f.engine.Run(context.Background(), req)
	assert.Equal(t, StopCanceled, res.Stop, "status %d: %s", res.Status, res.Body)
	assert.Less(t, time.Since(start), 4*time.Second, "the loop did not wait for the held stream")
}

// A first answer given as an event stream is read as one: its call runs, and the answer is the
// one its completed response makes; read from a stream that stalls, it ends at the loop's
// deadline; malformed, it is an upstream error.
func TestFirstStream(t *testing.T) {
	t.Run("read", func(t *testing.T) {
		f := newFixture(t, scripted{status: 200, body: respText("2", "The answer is 42.")})
		req := f.request(t, respSurface, streamClient, respCall("1", "print(40+2)", 10))
		var stream bytes.Buffer
		for _, ev := range upstreamEvents(t, string(req.First)) {
			stream.Write(ev)
		}
		req.First, req.FirstStream = nil, &stream
		res := f.engine.Run(context.Background(), req)
		require.Equal(t, http.StatusOK, res.Status, "body: %s", res.Body)
		assert.Equal(t, 1, res.Calls, "the streamed answer's call ran")
		assert.Equal(t, "code_interpreter_call", gjson.GetBytes(res.Body, "output.0.type").String(), "the answer: %s", res.Body)
		assert.Equal(t, "The answer is 42.", gjson.GetBytes(res.Body, "output.1.content.0.text").String(), "the answer: %s", res.Body)
	})
	t.Run("malformed", func(t *testing.T) {
		f := newFixture(t)
		req := f.request(t, respSurface, streamClient, respCall("1", "print(40+2)", 10))
		req.First, req.FirstStream = nil, strings.NewReader("event: response.created\ndata: {\"type\":\n\n")
		res := f.engine.Run(context.Background(), req)
		assert.Equal(t, http.StatusBadGateway, res.Status, "%s", res.Body)
		assert.Equal(t, "upstream_invalid_stream", gjson.GetBytes(res.Body, "error.code").String(), "%s", res.Body)
		assert.Zero(t, res.Calls, "nothing ran")
	})
	t.Run("stalls past the deadline", func(t *testing.T) {
		f := newFixture(t)
		req := f.request(t, respSurface, streamClient, respCall("1", "print(40+2)", 10))
		pr, pw := io.Pipe()
		t.Cleanup(func() { _ = pw.Close() })
		req.First, req.FirstStream = nil, pr
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		// The reader gives up with the loop, as the processor's does (context.AfterFunc).
		stop := context.AfterFunc(ctx, func() { _ = pr.CloseWithError(ctx.Err()) })
		defer stop()
		res := f.engine.Run(ctx, req)
		assert.Equal(t, StopDeadline, res.Stop, "status %d: %s", res.Status, res.Body)
		assert.Equal(t, http.StatusGatewayTimeout, res.Status, "%s", res.Body)
	})
}
