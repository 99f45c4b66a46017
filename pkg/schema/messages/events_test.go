package messages

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"flag"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/ssestream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/pkg/schema"
)

var update = flag.Bool("update", false, "rewrite the golden files")

const (
	streamRequest = `{"model":"m","max_tokens":100,"stream":true,"tools":[{"type":"code_execution_20250825","name":"code_execution"},` +
		`{"name":"weather","input_schema":{"type":"object"}}],"messages":[{"role":"user","content":"go"}]}`
	// streamAnswer2 is the text answer of the second round, streamed below by streamDeltas.
	streamAnswer2 = `{"id":"msg_2","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"It printed hi."},` +
		`{"type":"tool_use","id":"toolu_W","name":"weather","input":{"city":"Paris"}}],` +
		`"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":30,"output_tokens":7,"cache_read_input_tokens":3}}`
)

// streamDeltas are the upstream events of streamAnswer2's blocks, as upstreamStream passes
// them on: the text in two deltas, and the client's tool_use with its input in two pieces.
var streamDeltas = []string{
	`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
	`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"It printed "}}`,
	`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hi."}}`,
	`{"type":"content_block_stop","index":0}`,
	`{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_W","name":"weather","input":{}}}`,
	`{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"city\":"}}`,
	`{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"\"Paris\"}"}}`,
}

// bashOutput is what the program of a bash call prints when its command printed out.
func bashOutput(x *exchange, id, out string) string {
	return marker(x.key, id) + `{"k":"bash","rc":0,"out":"` + base64.StdEncoding.EncodeToString([]byte(out)) + `","err":""}` + "\n"
}

func streamExchange(t *testing.T) *exchange {
	t.Helper()
	sx, err := Surface{}.NewExchange([]byte(streamRequest), schema.Options{})
	require.NoError(t, err, "new exchange")
	x := sx.(*exchange)
	x.now = func() time.Time { return time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC) }
	return x
}

// runStream drives the exchange's sink as the loop does: round 1 (text, a bash and a text
// editor call) whole, both calls run, round 2 streamed (live) or whole, and the final answer.
// It returns the stream and the final answer.
func runStream(t *testing.T, x *exchange, live bool) (string, []byte) {
	t.Helper()
	var b bytes.Buffer
	sink := x.Events(&b)
	ev := func(e schema.Event) { require.NoError(t, sink.Event(e), "event %d", e.Kind) }
	ev(schema.Event{Kind: schema.EventRound, Body: []byte(answer1)})
	calls := []schema.CodeCall{
		{ID: "ci_1", Status: "completed", ContainerID: "cntr_1", Run: &schema.CodeRun{Stdout: bashOutput(x, "toolu_A", "hi\n")}},
		{ID: "ci_2", Status: "incomplete", ContainerID: "cntr_1"},
	}
	for i := range calls {
		started := schema.CodeCall{ID: calls[i].ID, Status: "in_progress", ContainerID: "cntr_1"}
		ev(schema.Event{Kind: schema.EventCallStarted, Call: &started})
		ev(schema.Event{Kind: schema.EventCallDone, Call: &calls[i]})
	}
	if live {
		for _, d := range streamDeltas {
			ev(schema.Event{Kind: schema.EventDelta, Round: 1, Body: []byte(d)})
		}
	}
	ev(schema.Event{Kind: schema.EventRound, Round: 1, Body: []byte(streamAnswer2)})
	final, err := x.Final([]schema.Round{{Body: []byte(answer1), Calls: calls}, {Body: []byte(streamAnswer2)}}, "")
	require.NoError(t, err, "final")
	ev(schema.Event{Kind: schema.EventDone, Body: final})
	assert.True(t, sink.(interface{ Ended() bool }).Ended(), "the stream says it ended")
	return b.String(), final
}

// accumulate reads a Messages event stream with anthropic-sdk-go's accumulator.
func accumulate(t *testing.T, stream string) anthropic.Message {
	t.Helper()
	res := &http.Response{Header: http.Header{"Content-Type": {"text/event-stream"}}, Body: io.NopCloser(strings.NewReader(stream))}
	st := ssestream.NewStream[anthropic.MessageStreamEventUnion](ssestream.NewDecoder(res), nil)
	var acc anthropic.Message
	for st.Next() {
		require.NoError(t, acc.Accumulate(st.Current()), "accumulate %s", st.Current().Type)
	}
	require.NoError(t, st.Err(), "stream")
	return acc
}

// assertSameMessage checks that the accumulated message is the plain answer: its id, stop,
// container, usage and every block.
func assertSameMessage(t *testing.T, final []byte, acc anthropic.Message) {
	t.Helper()
	var plain anthropic.Message
	require.NoError(t, json.Unmarshal(final, &plain), "decode plain: %s", final)
	assert.Equal(t, summary(plain), summary(acc), "the accumulated message is the plain one")
	require.Len(t, acc.Content, len(plain.Content), "blocks")
	for i := range plain.Content {
		assert.JSONEq(t, plain.Content[i].RawJSON(), acc.Content[i].RawJSON(), "block %d", i)
	}
	assert.JSONEq(t, gjson.GetBytes(final, "usage").Raw, gjson.Get(acc.RawJSON(), "usage").Raw, "usage")
	assert.Equal(t, plain.Container.ID, acc.Container.ID, "container")
	assert.Equal(t, plain.Container.ExpiresAt, acc.Container.ExpiresAt, "container expiry")
}

// TestEventsGolden pins the progressive stream event by event: message_start with the first
// answer; round 1's text; each call's server_tool_use (its input as one input_json_delta)
// when it starts and its result block whole when it ends — the second cut short by the
// deadline, execution_time_exceeded; round 2's text and the client's tool_use relayed delta
// by delta as the model streamed them; message_delta with the summed usage and the container.
func TestEventsGolden(t *testing.T) {
	x := streamExchange(t)
	got, final := runStream(t, x, true)
	path := filepath.Join("testdata", "events.golden")
	if *update {
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644), "write golden")
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "read golden (go test -update writes it)")
	assert.Equal(t, string(want), got, "the event stream")
	assertSameMessage(t, final, accumulate(t, got))
	assert.Equal(t, "msg_1", gjson.GetBytes(final, "id").String(), "a streamed answer keeps the first answer's id")
}

// TestEventsAreTheFinalAnswersStream: without live deltas the progressive stream is, event
// for event, the final answer's stream but for message_start, which the first answer makes.
func TestEventsAreTheFinalAnswersStream(t *testing.T) {
	x := streamExchange(t)
	got, final := runStream(t, x, false)
	var replay bytes.Buffer
	require.NoError(t, writeSSE(&replay, final), "replay")
	cut := func(s string) string { return s[strings.Index(s, "event: ping"):] }
	assert.Equal(t, cut(replay.String()), cut(got), "the events after message_start")
	assertSameMessage(t, final, accumulate(t, got))

	live, _ := runStream(t, streamExchange(t), true)
	assert.Equal(t, strings.Count(got, "event: content_block_start"), strings.Count(live, "event: content_block_start"),
		"a live round has the same blocks")
}

// TestEventsLiveBlockedAtCall: a streamed round's blocks are relayed up to its first code
// call; a block left open is closed when the round's answer arrives, and the rest is written
// from the answer.
func TestEventsLiveBlockedAtCall(t *testing.T) {
	x := streamExchange(t)
	var b bytes.Buffer
	sink := x.Events(&b)
	require.NoError(t, sink.Event(schema.Event{Kind: schema.EventRound, Body: []byte(answer2)}), "round 1")
	for _, d := range []string{
		`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Running"}}`,
		`{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_A","name":"bash_code_execution","input":{}}}`,
		`{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{}"}}`,
	} {
		require.NoError(t, sink.Event(schema.Event{Kind: schema.EventDelta, Round: 1, Body: []byte(d)}), "delta %s", d)
	}
	streamed := b.String()
	assert.Contains(t, streamed, `"index":1,"delta":{"type":"text_delta","text":"Running"}`, "the text is relayed at the client's index")
	assert.NotContains(t, streamed, "bash_code_execution", "the code call is not")
	round2 := `{"id":"msg_3","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"Running"},` +
		`{"type":"tool_use","id":"toolu_A","name":"bash_code_execution","input":{"command":"echo hi"}},{"type":"text","text":"after"}],` +
		`"stop_reason":"tool_use","usage":{"input_tokens":1,"output_tokens":1}}`
	require.NoError(t, sink.Event(schema.Event{Kind: schema.EventRound, Round: 1, Body: []byte(round2)}), "round 2")
	require.NoError(t, sink.Event(schema.Event{Kind: schema.EventCallStarted, Call: &schema.CodeCall{}}), "call started")
	tail := b.String()[len(streamed):]
	assert.True(t, strings.HasPrefix(tail, "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}"), "the open text block is closed: %s", tail)
	assert.Contains(t, tail, `"index":2,"content_block":{"type":"server_tool_use","id":"srvtoolu_A"`, "then the call, from the answer")
	assert.Equal(t, 1, strings.Count(b.String(), `"text":"Running"`), "the relayed text is not written again")
}

// TestEventsFailed: a failure before anything was streamed leaves the client's JSON error; one
// after ends the stream with the native error event.
func TestEventsFailed(t *testing.T) {
	x := streamExchange(t)
	var b bytes.Buffer
	sink := x.Events(&b)
	fail := schema.Event{Kind: schema.EventFailed, Status: 502, Body: ErrorBody(502, "The follow-up call to the model failed.")}
	require.NoError(t, sink.Event(fail), "failed at once")
	assert.Empty(t, b.String(), "nothing streamed")
	assert.False(t, sink.(interface{ Ended() bool }).Ended(), "the stream did not end: the client gets the JSON error")

	require.NoError(t, sink.Event(schema.Event{Kind: schema.EventRound, Body: []byte(answer1)}), "round")
	require.NoError(t, sink.Event(fail), "failed")
	out := b.String()
	assert.True(t, strings.HasPrefix(out, "event: message_start\n"), "the stream began")
	assert.True(t, strings.HasSuffix(out, "event: error\ndata: {\"error\":{\"message\":\"The follow-up call to the model failed.\",\"type\":\"api_error\"},\"type\":\"error\"}\n\n"),
		"and ends with the error event: %s", out)
	assert.True(t, sink.(interface{ Ended() bool }).Ended(), "it ended")
}
