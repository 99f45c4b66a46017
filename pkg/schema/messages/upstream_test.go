package messages

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/pkg/schema"
)

// upstreamSSE is a Messages stream as the API sends it: a text block, a tool_use whose input
// comes in pieces, the usage in message_delta.
const upstreamSSE = "event: message_start\n" +
	`data: {"type":"message_start","message":{"id":"msg_s","type":"message","role":"assistant","model":"m","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":12,"cache_read_input_tokens":4,"output_tokens":1}}}` + "\n\n" +
	"event: ping\ndata: {\"type\":\"ping\"}\n\n" +
	"event: content_block_start\n" + `data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}` + "\n\n" +
	"event: content_block_delta\n" + `data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Let me "}}` + "\n\n" +
	"event: content_block_delta\n" + `data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"check ✓."}}` + "\n\n" +
	"event: content_block_stop\n" + `data: {"type":"content_block_stop","index":0}` + "\n\n" +
	"event: content_block_start\n" + `data: {"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_S","name":"bash_code_execution","input":{}}}` + "\n\n" +
	"event: content_block_delta\n" + `data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":""}}` + "\n\n" +
	"event: content_block_delta\n" + `data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"comm"}}` + "\n\n" +
	"event: content_block_delta\n" + `data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"and\": \"ls -l\"}"}}` + "\n\n" +
	"event: content_block_stop\n" + `data: {"type":"content_block_stop","index":1}` + "\n\n" +
	"event: message_delta\n" + `data: {"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":25}}` + "\n\n" +
	"event: message_stop\n" + `data: {"type":"message_stop"}` + "\n\n"

// TestUpstreamStream: the stream builds the message the upstream would have answered as JSON,
// and passes the content block events on as they came.
func TestUpstreamStream(t *testing.T) {
	x := streamExchange(t)
	var relayed []string
	answer, err := schema.ReadEventStream(strings.NewReader(upstreamSSE), 1<<20, x.ReadStream(), func(d []byte) error {
		relayed = append(relayed, gjson.GetBytes(d, "type").String())
		return nil
	})
	require.NoError(t, err, "read the stream")
	assert.JSONEq(t, `{"id":"msg_s","type":"message","role":"assistant","model":"m",`+
		`"content":[{"type":"text","text":"Let me check ✓."},{"type":"tool_use","id":"toolu_S","name":"bash_code_execution","input":{"command": "ls -l"}}],`+
		`"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":12,"cache_read_input_tokens":4,"output_tokens":25}}`, string(answer), "the message")
	assert.Equal(t, []string{"message_start", "content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
		"content_block_start", "content_block_delta", "content_block_delta", "content_block_delta", "content_block_stop"}, relayed, "message_start and the block events are passed on")
	turn, err := x.ParseTurn(answer)
	require.NoError(t, err, "the loop reads the answer")
	require.Len(t, turn.Calls, 1, "the call")
	assert.NoError(t, turn.Calls[0].ArgsErr, "its input")
}

// TestUpstreamStreamOfAnAnswer: the stream writeSSE makes of an answer reads back as that
// answer's content, stop and usage.
func TestUpstreamStreamOfAnAnswer(t *testing.T) {
	final := finalOf(t)
	var b bytes.Buffer
	require.NoError(t, writeSSE(&b, final), "write")
	answer, err := schema.ReadEventStream(&b, 1<<20, (&exchange{}).ReadStream(), func([]byte) error { return nil })
	require.NoError(t, err, "read")
	for _, k := range []string{"id", "content", "stop_reason", "stop_sequence", "usage"} {
		assert.JSONEq(t, gjson.GetBytes(final, k).Raw, gjson.GetBytes(answer, k).Raw, "%s", k)
	}
}

func TestUpstreamStreamRefuses(t *testing.T) {
	start := `{"type":"message_start","message":{"id":"m","content":[]}}`
	text := `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`
	tests := []struct {
		name string
		give []string
		want string
	}{
		{"not JSON", []string{`{`}, "not JSON"},
		{"no message_start", []string{text}, "before message_start"},
		{"two starts", []string{start, start}, "repeated"},
		{"index gap", []string{start, `{"type":"content_block_start","index":1,"content_block":{"type":"text"}}`}, "expected 0"},
		{"delta of no block", []string{start, `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"x"}}`}, "no open block"},
		{"delta after stop", []string{start, text, `{"type":"content_block_stop","index":0}`, `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"x"}}`}, "no open block"},
		{"an error", []string{start, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`}, "overloaded_error"},
		{"after the stop", []string{start, `{"type":"message_stop"}`, `{"type":"ping"}`}, "after message_stop"},
	}
	for _, tt := range tests {
		u := (&exchange{}).ReadStream()
		var err error
		for _, d := range tt.give {
			if _, _, err = u.Event("", []byte(d)); err != nil {
				break
			}
		}
		require.Error(t, err, "%s", tt.name)
		assert.Contains(t, err.Error(), tt.want, "%s", tt.name)
	}
}

// TestUpstreamStreamBrokenInput: a tool input the model broke is the call's invalid input,
// not a broken answer.
func TestUpstreamStreamBrokenInput(t *testing.T) {
	x := streamExchange(t)
	u := x.ReadStream()
	var answer []byte
	for _, d := range []string{
		`{"type":"message_start","message":{"id":"m","type":"message","content":[]}}`,
		`{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_X","name":"bash_code_execution","input":{}}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"command\": \"ls"}}`,
		`{"type":"content_block_stop","index":0}`,
		`{"type":"message_stop"}`,
	} {
		_, a, err := u.Event("", []byte(d))
		require.NoError(t, err, "event %s", d)
		answer = a
	}
	require.NotNil(t, answer, "the answer")
	turn, err := x.ParseTurn(answer)
	require.NoError(t, err, "parse: %s", answer)
	require.Len(t, turn.Calls, 1, "the call")
	assert.Error(t, turn.Calls[0].ArgsErr, "its input is invalid")
}

// TestExchangeFollowUpStreams: a streaming client's follow-up asks for a stream.
func TestExchangeFollowUpStreams(t *testing.T) {
	x := streamExchange(t)
	assert.True(t, gjson.GetBytes(x.Request().Body, "stream").Bool(), "the first call streams too")
	_, err := x.ParseTurn([]byte(answer1))
	require.NoError(t, err, "parse")
	next, err := x.FollowUp([]schema.CallOutput{{CallID: "toolu_A", Output: "hi"}, {CallID: "toolu_B", Output: "ok"}}, schema.FollowUpOptions{Stream: true})
	require.NoError(t, err, "follow up")
	assert.True(t, gjson.GetBytes(next, "stream").Bool(), "the follow-up streams")
	assert.Equal(t, 1, bytes.Count(next, []byte(`"stream"`)), "one stream key")
	whole, err := x.FollowUp([]schema.CallOutput{{CallID: "toolu_A", Output: "hi"}, {CallID: "toolu_B", Output: "ok"}}, schema.FollowUpOptions{})
	require.NoError(t, err, "follow up")
	assert.False(t, gjson.GetBytes(whole, "stream").Bool(), "a follow-up not asked to stream asks for a whole answer")
}

// TestUpstreamStreamError: an error the upstream's stream reports ends the client's stream as
// the upstream reported it.
func TestUpstreamStreamError(t *testing.T) {
	x := streamExchange(t)
	var b bytes.Buffer
	sink := x.Events(&b)
	require.NoError(t, sink.Event(schema.Event{Kind: schema.EventRound, Body: []byte(answer2)}), "round")
	stream := "event: message_start\n" + `data: {"type":"message_start","message":{"id":"m","content":[]}}` + "\n\n" +
		"event: error\n" + `data: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}` + "\n\n"
	_, err := schema.ReadEventStream(strings.NewReader(stream), 1<<20, x.ReadStream(), func([]byte) error { return nil })
	require.ErrorIs(t, err, schema.ErrBadStream, "the stream ends in an error")
	require.NoError(t, sink.Event(schema.Event{Kind: schema.EventFailed, Status: 502, Body: ErrorBody(502, "The model's answer stream is malformed.")}), "failed")
	assert.True(t, strings.HasSuffix(b.String(), "event: error\ndata: {\"error\":{\"message\":\"Overloaded\",\"type\":\"overloaded_error\"},\"type\":\"error\"}\n\n"),
		"the upstream's error: %s", b.String())
}

// A client whose stream is replayed gets a first call that asks for a whole answer.
func TestExchangeWholeFirst(t *testing.T) {
	body := `{"model":"m","max_tokens":10,"stream":true,"tools":[{"type":"code_execution_20250522","name":"code_execution"}],"messages":[{"role":"user","content":"hi"}]}`
	x, err := Surface{}.NewExchange([]byte(body), schema.Options{WholeFirst: true})
	require.NoError(t, err)
	assert.True(t, x.Request().Stream, "the client streams")
	assert.False(t, gjson.GetBytes(x.Request().Body, "stream").Bool(), "the first call asks for a whole answer")
	_, err = x.ParseTurn([]byte(`{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[{"type":"tool_use","id":"toolu_1","name":"code_execution","input":{"code":"1"}}],"stop_reason":"tool_use","usage":{"input_tokens":1,"output_tokens":1}}`))
	require.NoError(t, err)
	next, err := x.FollowUp([]schema.CallOutput{{CallID: "toolu_1", Output: "1"}}, schema.FollowUpOptions{Stream: true})
	require.NoError(t, err)
	assert.True(t, gjson.GetBytes(next, "stream").Bool(), "a follow-up asked to stream does")
}
