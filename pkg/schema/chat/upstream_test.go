package chat_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/schema/chat"
)

// streamRequest is a client's streaming request with the code tool and a client function.
const streamRequest = `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"q"}],` +
	`"tools":[{"type":"code_interpreter"},{"type":"function","function":{"name":"weather","parameters":{}}}]}`

// chunk is a chat.completion.chunk data line of the stream "cc-1" with the given choices and
// usage (raw JSON).
func chunk(choices, usage string) string {
	return `data: {"id":"cc-1","object":"chat.completion.chunk","created":7,"model":"m","system_fingerprint":"fp","choices":` + choices + `,"usage":` + usage + "}\n\n"
}

// delta is a chunk with one choice 0 delta.
func delta(d string) string {
	return chunk(`[{"index":0,"delta":`+d+`,"logprobs":null,"finish_reason":null}]`, "null")
}

// upstreamSSE is a chunk stream as the API sends it: text in pieces, a call of the code
// function and one of a client function, their arguments in pieces, the finish chunk, the
// usage chunk and [DONE].
var upstreamSSE = delta(`{"role":"assistant","content":""}`) +
	delta(`{"content":"Let me "}`) +
	delta(`{"content":"check ✓."}`) +
	delta(`{"tool_calls":[{"index":0,"id":"call_c","type":"function","function":{"name":"code_interpreter","arguments":""}}]}`) +
	delta(`{"tool_calls":[{"index":0,"function":{"arguments":"{\"co"}}]}`) +
	delta(`{"tool_calls":[{"index":0,"function":{"arguments":"de\": \"print(1)\"}"}}]}`) +
	delta(`{"tool_calls":[{"index":1,"id":"call_w","type":"function","function":{"name":"weather","arguments":"{\"ci"}}]}`) +
	delta(`{"tool_calls":[{"index":1,"function":{"arguments":"ty\": \"Paris\"}"}}]}`) +
	chunk(`[{"index":0,"delta":{},"logprobs":null,"finish_reason":"tool_calls"}]`, "null") +
	chunk(`[]`, `{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15,"prompt_tokens_details":{"cached_tokens":2}}`) +
	"data: [DONE]\n\n"

// upstreamAnswer is the answer upstreamSSE streams.
const upstreamAnswer = `{"id":"cc-1","object":"chat.completion","created":7,"model":"m","system_fingerprint":"fp","choices":[{"index":0,"message":{"role":"assistant",` +
	`"content":"Let me check ✓.","refusal":null,"tool_calls":[{"id":"call_c","type":"function","function":{"name":"code_interpreter","arguments":"{\"code\": \"print(1)\"}"}},` +
	`{"id":"call_w","type":"function","function":{"name":"weather","arguments":"{\"city\": \"Paris\"}"}}]},"logprobs":null,"finish_reason":"tool_calls"}],` +
	`"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15,"prompt_tokens_details":{"cached_tokens":2}}}`

func newStreamExchange(t *testing.T) schema.Exchange {
	t.Helper()
	x, err := chat.Surface{}.NewExchange([]byte(streamRequest), schema.Options{})
	require.NoError(t, err, "NewExchange")
	return x
}

// read reads stream through a new UpstreamStream of x, and returns the answer and the deltas
// passed on.
func read(t *testing.T, x schema.Exchange, stream string) ([]byte, []string, error) {
	t.Helper()
	var deltas []string
	answer, err := schema.ReadEventStream(strings.NewReader(stream), 1<<20, x.(schema.StreamReader).ReadStream(), func(d []byte) error {
		require.True(t, json.Valid(d), "delta %q is JSON", d)
		deltas = append(deltas, gjson.GetBytes(d, "delta").Raw)
		return nil
	})
	return answer, deltas, err
}

// TestUpstreamStream: the stream builds the answer the upstream would have sent as JSON, and
// passes on the text and the client function's fragments (at the client's index), never the
// code function's.
func TestUpstreamStream(t *testing.T) {
	x := newStreamExchange(t)
	answer, deltas, err := read(t, x, upstreamSSE)
	require.NoError(t, err, "read the stream")
	assert.JSONEq(t, upstreamAnswer, string(answer), "the answer")
	assert.Equal(t, []string{
		`{"content":"Let me "}`,
		`{"content":"check ✓."}`,
		`{"tool_calls":[{"index":0,"id":"call_w","type":"function","function":{"name":"weather","arguments":"{\"ci"}}]}`,
		`{"tool_calls":[{"index":0,"function":{"arguments":"ty\": \"Paris\"}"}}]}`,
	}, deltas, "what the client may see")

	turn, err := x.ParseTurn(answer)
	require.NoError(t, err, "the loop reads the answer")
	want, err := chat.ParseTurn([]byte(upstreamAnswer), "")
	require.NoError(t, err)
	assert.Equal(t, want, turn, "the turn of the streamed answer is the JSON answer's")
	require.Len(t, turn.Calls, 1, "the code call")
	assert.Equal(t, "print(1)", turn.Calls[0].Code, "its code, from the fragments")
	assert.Equal(t, []string{"call_w"}, turn.ClientCallIDs, "the client's call")
}

// TestUpstreamStreamEnds: an upstream that sends no [DONE] ends its answer with the usage
// chunk after the last finish_reason; one that ends before it is a bad stream.
func TestUpstreamStreamEnds(t *testing.T) {
	noDone := strings.TrimSuffix(upstreamSSE, "data: [DONE]\n\n")
	answer, _, err := read(t, newStreamExchange(t), noDone)
	require.NoError(t, err, "a stream without [DONE]")
	assert.JSONEq(t, upstreamAnswer, string(answer), "the answer of a stream without [DONE]")

	noUsage := strings.Replace(noDone, chunk(`[]`, `{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15,"prompt_tokens_details":{"cached_tokens":2}}`), "", 1)
	_, _, err = read(t, newStreamExchange(t), noUsage)
	assert.ErrorIs(t, err, schema.ErrBadStream, "a stream that ends after its finish_reason without usage or [DONE]")

	// Usage before the finish (some backends send it in every chunk) does not end the answer.
	early := delta(`{"role":"assistant","content":"a"}`) + chunk(`[]`, `{"total_tokens":1}`) + delta(`{"content":"b"}`) +
		chunk(`[{"index":0,"delta":{},"finish_reason":"stop"}]`, `{"total_tokens":2}`) + "data: [DONE]\n\n"
	answer, deltas, err := read(t, newStreamExchange(t), early)
	require.NoError(t, err, "usage before the finish")
	assert.Equal(t, "ab", gjson.GetBytes(answer, "choices.0.message.content").String(), "the text")
	assert.Equal(t, int64(2), gjson.GetBytes(answer, "usage.total_tokens").Int(), "the last usage")
	assert.Equal(t, []string{`{"content":"a"}`, `{"content":"b"}`}, deltas, "the text passed on")
}

// TestUpstreamStreamChoices: choices are built by index, with their logprobs and refusals;
// only choice 0 is passed on.
func TestUpstreamStreamChoices(t *testing.T) {
	lp := func(tok string) string {
		return `{"content":[{"token":"` + tok + `","logprob":-0.5,"bytes":null,"top_logprobs":[]}],"refusal":null}`
	}
	stream := chunk(`[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null},{"index":1,"delta":{"role":"assistant","content":""},"finish_reason":null}]`, "null") +
		chunk(`[{"index":1,"delta":{"content":"B"},"logprobs":`+lp("B")+`,"finish_reason":null}]`, "null") +
		chunk(`[{"index":0,"delta":{"content":"A"},"logprobs":`+lp("A")+`,"finish_reason":null}]`, "null") +
		chunk(`[{"index":0,"delta":{"content":"a"},"logprobs":`+lp("a")+`,"finish_reason":null}]`, "null") +
		chunk(`[{"index":1,"delta":{"refusal":"no"},"finish_reason":"stop"}]`, "null") +
		chunk(`[{"index":0,"delta":{},"finish_reason":"stop"}]`, "null") +
		chunk(`[]`, `{"total_tokens":3}`)
	answer, deltas, err := read(t, newStreamExchange(t), stream)
	require.NoError(t, err, "read")
	var got openai.ChatCompletion
	require.NoError(t, json.Unmarshal(answer, &got), "the SDK reads the answer %s", answer)
	require.Len(t, got.Choices, 2, "choices")
	assert.Equal(t, "Aa", got.Choices[0].Message.Content, "choice 0")
	assert.Equal(t, "B", got.Choices[1].Message.Content, "choice 1")
	assert.Equal(t, "no", got.Choices[1].Message.Refusal, "choice 1's refusal")
	assert.Len(t, got.Choices[0].Logprobs.Content, 2, "choice 0's logprobs")
	assert.Equal(t, "stop", got.Choices[1].FinishReason, "choice 1's finish")
	assert.Equal(t, []string{`{"content":"A"}`, `{"content":"a"}`}, deltas, "only choice 0 is passed on")
}

// TestUpstreamStreamRefuses: a malformed stream is a bad stream, not an answer.
func TestUpstreamStreamRefuses(t *testing.T) {
	tests := []struct {
		name, give string
	}{
		{name: "not JSON", give: "data: hello\n\n"},
		{name: "not an object", give: "data: [1]\n\n"},
		{name: "DONE first", give: "data: [DONE]\n\n"},
		{name: "choices not a list", give: `data: {"id":"x","choices":{}}` + "\n\n"},
		{name: "choice without index", give: `data: {"id":"x","choices":[{"delta":{"content":"a"}}]}` + "\n\n"},
		{name: "choice index too large", give: `data: {"id":"x","choices":[{"index":100000,"delta":{}}]}` + "\n\n"},
		{name: "tool call index gap", give: delta(`{"tool_calls":[{"index":2,"id":"c","function":{"name":"f"}}]}`)},
		{name: "tool call not an object", give: delta(`{"tool_calls":[7]}`)},
		{name: "ends early", give: delta(`{"content":"a"}`)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			answer, _, err := read(t, newStreamExchange(t), tt.give)
			assert.ErrorIs(t, err, schema.ErrBadStream, "%s", tt.give)
			assert.Nil(t, answer, "%s", tt.give)
		})
	}
	us := newStreamExchange(t).(schema.StreamReader).ReadStream()
	_, _, err := us.Event("", []byte(delta(`{"content":"a"}`)[len("data: "):]))
	require.NoError(t, err)
	_, answer, err := us.Event("", []byte("[DONE]"))
	require.NoError(t, err)
	require.NotNil(t, answer)
	_, _, err = us.Event("", []byte(`{"id":"cc-1","choices":[]}`))
	assert.Error(t, err, "a chunk after [DONE]")
	_, _, err = us.Event("", []byte("[DONE]"))
	assert.NoError(t, err, "a [DONE] after the end is ignored")
}

// TestUpstreamStreamError: an error the upstream reports in its stream fails the reading, and
// the client's stream ends with that error as the API sent it.
func TestUpstreamStreamError(t *testing.T) {
	x := newStreamExchange(t)
	var out strings.Builder
	sink := x.Events(&out)
	require.NoError(t, sink.Event(schema.Event{Kind: schema.EventRound, Body: []byte(upstreamAnswer)}))
	upstreamErr := `{"error":{"message":"The server is overloaded.","type":"server_error","param":null,"code":"overloaded"}}`
	_, err := schema.ReadEventStream(strings.NewReader(delta(`{"role":"assistant","content":"Hi"}`)+"data: "+upstreamErr+"\n\n"), 1<<20,
		x.(schema.StreamReader).ReadStream(), func(d []byte) error {
			return sink.Event(schema.Event{Kind: schema.EventDelta, Round: 1, Body: d})
		})
	require.ErrorIs(t, err, schema.ErrBadStream, "an error in the stream")
	require.NoError(t, sink.Event(schema.Event{Kind: schema.EventFailed, Status: 502, Body: []byte(`{"error":{"message":"bad stream","code":"upstream_error"}}`)}))
	assert.True(t, strings.HasSuffix(out.String(), "data: "+upstreamErr+"\n\n"), "the stream ends with the upstream's error: %s", out.String())
	assert.True(t, sink.(interface{ Ended() bool }).Ended(), "the stream ended")
}
