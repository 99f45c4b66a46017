package chat_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/schema/chat"
)

// plainRequest is streamRequest without the stream.
const plainRequest = `{"model":"m","messages":[{"role":"user","content":"q"}],` +
	`"tools":[{"type":"code_interpreter"},{"type":"function","function":{"name":"weather","parameters":{}}}]}`

// codeAnswer is a first answer that only calls the code function.
const codeAnswer = `{"id":"cc-0","object":"chat.completion","created":5,"model":"m","system_fingerprint":"fp","choices":[{"index":0,"message":{"role":"assistant",` +
	`"content":null,"refusal":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"code_interpreter","arguments":"{\"code\":\"print(42)\"}"}}]},` +
	`"logprobs":null,"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":10,"completion_tokens":3,"total_tokens":13}}`

// longText is longer than one delta of chat.SSE: its stream has several.
var longText = strings.Repeat("The code printed 42, which is the answer. ", 8)

// textAnswer is an answer with longText.
var textAnswer = `{"id":"cc-1","object":"chat.completion","created":7,"model":"m","system_fingerprint":"fp","choices":[{"index":0,"message":{"role":"assistant",` +
	`"content":"` + longText + `","refusal":null},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":20,"completion_tokens":30,"total_tokens":50}}`

// twoChoices is an answer with two choices (n=2).
const twoChoices = `{"id":"cc-2","object":"chat.completion","created":8,"model":"m","choices":[` +
	`{"index":0,"message":{"role":"assistant","content":"First."},"logprobs":null,"finish_reason":"stop"},` +
	`{"index":1,"message":{"role":"assistant","content":"Second."},"logprobs":null,"finish_reason":"length"}],` +
	`"usage":{"prompt_tokens":20,"completion_tokens":4,"total_tokens":24}}`

// round is one upstream answer of a scripted loop: its JSON body, and the chunk stream it
// came as (empty: it came as JSON).
type round struct {
	body, stream string
}

// streamOf is the chunk stream of a JSON answer, as the API sends it when asked for usage.
func streamOf(t *testing.T, body string) string {
	t.Helper()
	out, err := chat.SSE([]byte(body), []byte(`{"include_usage":true}`))
	require.NoError(t, err, "SSE of %s", body)
	return string(out)
}

// runStream plays a loop's rounds to the Sink of a streaming request (the streamed rounds
// through the exchange's UpstreamStream, their deltas to the Sink as they come), and returns
// the client's stream and, for each streamed round, the stream's length once its upstream
// stream was read (before its answer was handed on).
func runStream(t *testing.T, request string, rounds []round) (string, []int) {
	t.Helper()
	x, err := chat.Surface{}.NewExchange([]byte(request), schema.Options{})
	require.NoError(t, err, "NewExchange")
	var out strings.Builder
	sink := x.Events(&out)
	var done []schema.Round
	var live []int
	for i, r := range rounds {
		answer := []byte(r.body)
		if r.stream != "" {
			answer, err = schema.ReadEventStream(strings.NewReader(r.stream), 1<<20, x.(schema.StreamReader).ReadStream(), func(d []byte) error {
				return sink.Event(schema.Event{Kind: schema.EventDelta, Round: i, Body: d})
			})
			require.NoError(t, err, "round %d's stream", i)
			live = append(live, out.Len())
		}
		require.NoError(t, sink.Event(schema.Event{Kind: schema.EventRound, Round: i, Body: answer}), "round %d", i)
		turn, err := x.ParseTurn(answer)
		require.NoError(t, err, "round %d", i)
		var calls []schema.CodeCall
		if turn.ClientCalls == 0 {
			for _, c := range turn.Calls {
				cc := &schema.CodeCall{ID: "ci_" + c.CallID, Code: c.Code, Status: "completed"}
				require.NoError(t, sink.Event(schema.Event{Kind: schema.EventCallStarted, Round: i, Call: cc}))
				require.NoError(t, sink.Event(schema.Event{Kind: schema.EventCallDone, Round: i, Call: cc}))
				calls = append(calls, *cc)
			}
		}
		done = append(done, schema.Round{Body: answer, Calls: calls})
	}
	final, err := x.Final(done, "")
	require.NoError(t, err, "Final")
	require.NoError(t, sink.Event(schema.Event{Kind: schema.EventDone, Body: final}), "done")
	assert.True(t, sink.(interface{ Ended() bool }).Ended(), "the stream ended")
	return out.String(), live
}

// plainAnswer is the answer a plain request gets from the same rounds (as JSON).
func plainAnswer(t *testing.T, rounds []round) openai.ChatCompletion {
	t.Helper()
	x, err := chat.Surface{}.NewExchange([]byte(plainRequest), schema.Options{})
	require.NoError(t, err, "NewExchange")
	var done []schema.Round
	for _, r := range rounds {
		_, err := x.ParseTurn([]byte(r.body))
		require.NoError(t, err)
		done = append(done, schema.Round{Body: []byte(r.body)})
	}
	final, err := x.Final(done, "")
	require.NoError(t, err, "Final")
	var c openai.ChatCompletion
	require.NoError(t, json.Unmarshal(final, &c), "SDK parse of %s", final)
	return c
}

// accumulate reads a client's chunk stream as the SDK does, with its accumulator.
func accumulate(t *testing.T, stream string) openai.ChatCompletion {
	t.Helper()
	var acc openai.ChatCompletionAccumulator
	n := 0
	for _, ev := range strings.Split(stream, "\n\n") {
		data, ok := strings.CutPrefix(ev, "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var c openai.ChatCompletionChunk
		require.NoError(t, json.Unmarshal([]byte(data), &c), "chunk %d: %s", n, data)
		require.True(t, acc.AddChunk(c), "accumulate chunk %d: %s", n, data)
		n++
	}
	require.True(t, strings.HasSuffix(stream, "data: [DONE]\n\n"), "the stream ends with [DONE]: %s", stream)
	return acc.ChatCompletion
}

// completionView is what a client knows of a completion, parsed or accumulated.
type completionView struct {
	ID, Model, SystemFingerprint string
	Created                      int64
	Choices                      []choiceView
	Usage                        [3]int64
}

type choiceView struct {
	Index                            int64
	FinishReason, Role               string
	Content, Refusal                 string
	ToolCalls                        [][4]string
	ContentLogprobs, RefusalLogprobs int
}

func viewOf(c openai.ChatCompletion) completionView {
	v := completionView{ID: c.ID, Model: c.Model, SystemFingerprint: c.SystemFingerprint, Created: c.Created,
		Usage: [3]int64{c.Usage.PromptTokens, c.Usage.CompletionTokens, c.Usage.TotalTokens}}
	for _, ch := range c.Choices {
		cv := choiceView{Index: ch.Index, FinishReason: ch.FinishReason, Role: string(ch.Message.Role),
			Content: ch.Message.Content, Refusal: ch.Message.Refusal,
			ContentLogprobs: len(ch.Logprobs.Content), RefusalLogprobs: len(ch.Logprobs.Refusal)}
		for _, tc := range ch.Message.ToolCalls {
			cv.ToolCalls = append(cv.ToolCalls, [4]string{tc.ID, tc.Type, tc.Function.Name, tc.Function.Arguments})
		}
		v.Choices = append(v.Choices, cv)
	}
	return v
}

// contentOf is the content the chunks of a client's stream carry, joined.
func contentOf(t *testing.T, stream string) string {
	t.Helper()
	var b strings.Builder
	for _, ev := range strings.Split(stream, "\n\n") {
		data, ok := strings.CutPrefix(ev, "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var c openai.ChatCompletionChunk
		require.NoError(t, json.Unmarshal([]byte(data), &c), "chunk %s", data)
		for _, ch := range c.Choices {
			b.WriteString(ch.Delta.Content)
		}
	}
	return b.String()
}

// TestEventsRelayStreamedRounds: the text and client tool calls of a round whose upstream
// answer streams reach the client's stream as they arrive, nothing of them is written again
// with the answer, and the SDK's accumulator rebuilds the plain answer from the stream.
func TestEventsRelayStreamedRounds(t *testing.T) {
	tests := []struct {
		name    string
		request string
		rounds  []round
		// wantLive is the text the client's stream has when each streamed round's upstream
		// stream was read.
		wantLive []string
		usage    bool
	}{
		{
			name:     "a code call, then a streamed answer",
			request:  streamRequest,
			rounds:   []round{{body: codeAnswer}, {body: textAnswer, stream: streamOf(t, textAnswer)}},
			wantLive: []string{longText},
			usage:    true,
		},
		{
			name:     "without include_usage",
			request:  strings.Replace(streamRequest, `"stream_options":{"include_usage":true},`, "", 1),
			rounds:   []round{{body: codeAnswer}, {body: textAnswer, stream: streamOf(t, textAnswer)}},
			wantLive: []string{longText},
		},
		{
			name:     "the first answer streams and is the answer",
			request:  streamRequest,
			rounds:   []round{{body: textAnswer, stream: streamOf(t, textAnswer)}},
			wantLive: []string{longText},
			usage:    true,
		},
		{
			name:     "the streamed answer has two choices",
			request:  streamRequest,
			rounds:   []round{{body: codeAnswer}, {body: twoChoices, stream: streamOf(t, twoChoices)}},
			wantLive: []string{"First."},
			usage:    true,
		},
		{
			name:     "both rounds stream; the last calls the code function and a client function",
			request:  streamRequest,
			rounds:   []round{{body: codeAnswer, stream: streamOf(t, codeAnswer)}, {body: upstreamAnswer, stream: upstreamSSE}},
			wantLive: []string{"", "Let me check ✓."},
			usage:    true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stream, live := runStream(t, tt.request, tt.rounds)
			require.Len(t, live, len(tt.wantLive), "streamed rounds")
			for i, n := range live {
				assert.Equal(t, tt.wantLive[i], contentOf(t, stream[:n]), "%s: the text relayed while streamed round %d was read", tt.name, i)
			}
			got, want := viewOf(accumulate(t, stream)), viewOf(plainAnswer(t, tt.rounds))
			if !tt.usage {
				want.Usage = [3]int64{}
			}
			assert.Equal(t, want, got, "%s: the accumulated stream is the plain answer", tt.name)
		})
	}
}

// TestEventsStreamedClientCall: a client tool call streams at the client's index, its
// arguments in the model's fragments, and the answer writes none of it again.
func TestEventsStreamedClientCall(t *testing.T) {
	stream, live := runStream(t, streamRequest, []round{{body: codeAnswer}, {body: upstreamAnswer, stream: upstreamSSE}})
	require.Len(t, live, 1)
	assert.Contains(t, stream[:live[0]], `"tool_calls":[{"index":0,"id":"call_w","type":"function","function":{"name":"weather","arguments":"{\"ci"}}]`,
		"the client's call, relayed at index 0")
	assert.NotContains(t, stream, "call_c", "the code call is never shown")
	assert.Equal(t, 1, strings.Count(stream, `"id":"call_w"`), "the client's call is written once")
	assert.Equal(t, 1, strings.Count(stream, `"role":"assistant"`), "one role chunk")
	acc := accumulate(t, stream)
	require.Len(t, acc.Choices, 1)
	require.Len(t, acc.Choices[0].Message.ToolCalls, 1)
	assert.Equal(t, `{"city": "Paris"}`, acc.Choices[0].Message.ToolCalls[0].Function.Arguments, "the client's call's arguments")
	assert.Equal(t, "tool_calls", acc.Choices[0].FinishReason, "finish_reason")
	assert.Equal(t, int64(28), acc.Usage.TotalTokens, "usage summed over the rounds")
}
