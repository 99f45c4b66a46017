package responses_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/schema/responses"
)

// sseEvent is one event of a stream: its type and data line.
type sseEvent struct{ typ, data string }

func parseSSE(t *testing.T, b []byte) []sseEvent {
	t.Helper()
	var out []sseEvent
	for _, block := range strings.Split(strings.TrimSuffix(string(b), "\n\n"), "\n\n") {
		var ev sseEvent
		for _, line := range strings.Split(block, "\n") {
			switch {
			case strings.HasPrefix(line, "event: "):
				ev.typ = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				ev.data = strings.TrimPrefix(line, "data: ")
			}
		}
		require.NotEmpty(t, ev.typ, "event in %q", block)
		out = append(out, ev)
	}
	return out
}

const eventsClient = `{"model":"m","stream":true,"input":"q","tools":[{"type":"code_interpreter","container":{"type":"auto"}},{"type":"function","name":"w","parameters":{}}]}`

func call(id, code string) string {
	return `{"type":"function_call","id":"fc_` + id + `","call_id":"call_` + id + `","name":"code_interpreter","arguments":"{\"code\":\"` + code + `\"}","status":"completed"}`
}

func answer(id string, items ...string) []byte {
	return []byte(`{"id":"resp_` + id + `","object":"response","created_at":1,"status":"completed","model":"m","output":[` +
		strings.Join(items, ",") + `],"tools":[{"type":"function","name":"code_interpreter","parameters":{}}],"usage":{"input_tokens":1,"output_tokens":1,"total_tokens":2}}`)
}

// The events written as the loop goes are, item for item and event for event, the stream the
// final answer makes (SSE): only response.created and response.in_progress differ, since they
// are written before the last turn exists.
func TestEventsAreTheFinalAnswersStream(t *testing.T) {
	x, err := responses.Surface{}.NewExchange([]byte(eventsClient), schema.Options{})
	require.NoError(t, err)
	message := `{"type":"message","id":"msg_1","role":"assistant","status":"completed","content":[{"type":"output_text","text":"Let me compute that for you.","annotations":[]}]}`
	reasoning := `{"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"think"}]}`
	r1 := answer("1", reasoning, message, call("a", "print(1)"), call("b", "print(2)"))
	r2 := answer("2", call("c", "x = 3"), `{"type":"message","id":"msg_2","role":"assistant","status":"completed","content":[{"type":"output_text","text":"more","annotations":[]}]}`)
	r3 := answer("3", `{"type":"message","id":"msg_3","role":"assistant","status":"completed","content":[{"type":"output_text","text":"The answer is 3.","annotations":[]}]}`,
		call("late", "print(4)")) // made after the model was told to answer in text: dropped
	done := func(id, code, out string) schema.CodeCall {
		return schema.CodeCall{ID: id, Status: "completed", Code: code, ContainerID: "cntr_1", Outputs: []schema.CodeOutput{{Type: "logs", Logs: out}}}
	}
	a, b, c := done("ci_a", "print(1)", "1\n"), done("ci_b", "print(2)", "2\n"), done("ci_c", "x = 3", "")
	rounds := []schema.Round{{Body: r1, Calls: []schema.CodeCall{a, b}}, {Body: r2, Calls: []schema.CodeCall{c}}, {Body: r3}}
	final, err := x.Final(rounds, "")
	require.NoError(t, err)

	var buf bytes.Buffer
	sink := x.Events(&buf)
	emit := func(ev schema.Event) { require.NoError(t, sink.Event(ev), "event %v", ev.Kind) }
	for i, r := range rounds {
		emit(schema.Event{Kind: schema.EventRound, Round: i, Body: r.Body})
		for _, cc := range r.Calls {
			started := cc
			started.Status, started.Outputs = "in_progress", []schema.CodeOutput{}
			emit(schema.Event{Kind: schema.EventCallStarted, Round: i, Call: &started})
			emit(schema.Event{Kind: schema.EventCallDone, Round: i, Call: &cc})
		}
	}
	emit(schema.Event{Kind: schema.EventDone, Body: final})

	replay, err := responses.SSE(final)
	require.NoError(t, err)
	got, want := parseSSE(t, buf.Bytes()), parseSSE(t, replay)
	require.Len(t, got, len(want), "event count\n got: %s\nwant: %s", buf.Bytes(), replay)
	for i := range want {
		assert.Equal(t, want[i].typ, got[i].typ, "event %d's type", i)
		if want[i].typ == "response.created" || want[i].typ == "response.in_progress" {
			assert.Contains(t, got[i].data, `"id":"resp_1"`, "event %d is the first turn's", i)
			assert.Contains(t, got[i].data, `"tools":[{"type":"code_interpreter"`, "event %d shows the client's tools", i)
			continue
		}
		assert.Equal(t, want[i].data, got[i].data, "event %d (%s)", i, want[i].typ)
	}
}

// A failure after some rounds ends the stream with response.failed; one before any round
// writes nothing, so that the client gets the JSON error.
func TestEventsFailure(t *testing.T) {
	x, err := responses.Surface{}.NewExchange([]byte(eventsClient), schema.Options{})
	require.NoError(t, err)
	var buf bytes.Buffer
	sink := x.Events(&buf)
	errBody := []byte(`{"error":{"message":"overloaded","type":"server_error","code":"overloaded"}}`)
	require.NoError(t, sink.Event(schema.Event{Kind: schema.EventFailed, Status: 500, Body: errBody}))
	assert.Empty(t, buf.String(), "nothing streamed before any round")

	r1 := answer("1", call("a", "print(1)"))
	require.NoError(t, sink.Event(schema.Event{Kind: schema.EventRound, Body: r1}))
	partial, err := x.Final([]schema.Round{{Body: r1}}, "")
	require.NoError(t, err)
	require.NoError(t, sink.Event(schema.Event{Kind: schema.EventFailed, Status: 500, Body: errBody, Partial: partial}))
	evs := parseSSE(t, buf.Bytes())
	require.Len(t, evs, 3)
	assert.Equal(t, []string{"response.created", "response.in_progress", "response.failed"}, []string{evs[0].typ, evs[1].typ, evs[2].typ})
	assert.Contains(t, evs[2].data, `"error":{"code":"overloaded","message":"overloaded"}`)
}
