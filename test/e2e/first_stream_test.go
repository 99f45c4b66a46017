package e2e

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/test/e2e/fakemodel"
)

// TestMessagesFirstAnswerStreams: for a client that streams, the request's own upstream call
// (the one Envoy makes) asks for a stream, and the model's first answer reaches the client as
// the model writes it, through both fronts: a first answer without code delta by delta while the
// model still holds the rest; a first answer that calls code runs it and goes on, and the SDK's
// accumulator reads the same blocks as from a plain answer.
func TestMessagesFirstAnswerStreams(t *testing.T) {
	env := NewEnv(t, EnvOptions{})
	pieces := []string{"No ", "code ", "needed."}
	env.Fronts(t, func(t *testing.T, s *Stack) {
		t.Run("no code", func(t *testing.T) {
			mark := len(s.Model.RequestsTo(messagesPath))
			held := newLiveRelease(t)
			s.Model.Enqueue(messagesPath, fakemodel.SSE(anthropicTextStream(t, "claude-e2e", fakemodel.Usage{Input: 10, Output: 4}, held.ch, pieces...)...))
			body := `{"model":"claude-e2e","max_tokens":100,"stream":true,"tools":[{"type":"code_execution_20250825","name":"code_execution"}],` +
				`"messages":[{"role":"user","content":"Hello."}]}`
			got := readStream(t, s, t.Context(), "sk-ant-first", messagesPath, body, true, func(line string) bool {
				if strings.HasPrefix(line, `data: {"type":"content_block_delta"`) && strings.Contains(line, `"text":"No "`) {
					held.read()
				}
				return false
			})
			sent := s.Model.RequestsTo(messagesPath)[mark:]
			require.Len(t, sent, 1, "one model call")
			assert.True(t, gjson.GetBytes(sent[0].Body, "stream").Bool(), "the first call asks the model for a stream")
			assert.True(t, held.byClient.Load(), "the client read the first text delta while the model held the rest of its stream")
			var deltas []string
			for _, a := range got {
				if strings.HasPrefix(a.line, `data: {"type":"content_block_delta","index":0,`) {
					deltas = append(deltas, gjson.Get(strings.TrimPrefix(a.line, "data: "), "delta.text").String())
				}
			}
			assert.Equal(t, pieces, deltas, "the text arrives in the model's deltas")
			msg := accumulateMessages(t, got)
			require.Len(t, msg.Content, 1, "one text block: %s", msg.RawJSON())
			assert.Equal(t, strings.Join(pieces, ""), msg.Content[0].Text, "the text")
			assert.Equal(t, "msg_streamed", msg.ID, "the model's message id")
			assert.Equal(t, int64(10), msg.Usage.InputTokens, "input tokens")
			assert.Equal(t, int64(4), msg.Usage.OutputTokens, "output tokens")
			assert.Equal(t, anthropic.StopReasonEndTurn, msg.StopReason, "stop reason")
		})

		t.Run("code", func(t *testing.T) {
			ev := func(name string, v map[string]any) fakemodel.Event {
				data, err := json.Marshal(v)
				require.NoError(t, err, "event %s", name)
				return fakemodel.Event{Name: name, Data: string(data)}
			}
			delta := func(i int, d map[string]any) fakemodel.Event {
				return ev("content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": d})
			}
			mark := len(s.Model.RequestsTo(messagesPath))
			rel := newLiveRelease(t)
			held := delta(1, map[string]any{"type": "input_json_delta", "partial_json": `print(6 * 7)"}`})
			held.Wait = rel.ch
			s.Model.Enqueue(messagesPath,
				fakemodel.SSE(
					ev("message_start", map[string]any{"type": "message_start", "message": map[string]any{"id": "msg_f1", "type": "message", "role": "assistant",
						"model": "claude-e2e", "content": []any{}, "stop_reason": nil, "stop_sequence": nil, "usage": map[string]any{"input_tokens": 20, "output_tokens": 1}}}),
					ev("content_block_start", map[string]any{"type": "content_block_start", "index": 0, "content_block": map[string]any{"type": "text", "text": ""}}),
					delta(0, map[string]any{"type": "text_delta", "text": "Let me compute."}),
					ev("content_block_stop", map[string]any{"type": "content_block_stop", "index": 0}),
					ev("content_block_start", map[string]any{"type": "content_block_start", "index": 1, "content_block": map[string]any{
						"type": "tool_use", "id": "toolu_f1", "name": "code_execution", "input": map[string]any{}}}),
					delta(1, map[string]any{"type": "input_json_delta", "partial_json": `{"code": "`}),
					held,
					ev("content_block_stop", map[string]any{"type": "content_block_stop", "index": 1}),
					ev("message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": "tool_use", "stop_sequence": nil},
						"usage": map[string]any{"output_tokens": 9}}),
					ev("message_stop", map[string]any{"type": "message_stop"})),
				fakemodel.JSON(fakemodel.AnthropicMessage("claude-e2e", fakemodel.Usage{Input: 30, Output: 3}, fakemodel.Text("It is 42."))),
			)
			t.Cleanup(func() { assert.Zero(t, s.Model.Pending(), "every scripted answer was used") })
			body := `{"model":"claude-e2e","max_tokens":100,"stream":true,"tools":[{"type":"code_execution_20250522","name":"code_execution"}],` +
				`"messages":[{"role":"user","content":"Six times seven?"}]}`
			got := readStream(t, s, t.Context(), "sk-ant-first", messagesPath, body, true, func(line string) bool {
				if strings.Contains(line, `"text":"Let me compute."`) {
					rel.read()
				}
				return false
			})
			sent := s.Model.RequestsTo(messagesPath)[mark:]
			require.Len(t, sent, 2, "the first call and one follow-up")
			assert.True(t, gjson.GetBytes(sent[0].Body, "stream").Bool(), "the first call asks the model for a stream")
			assert.Contains(t, gjson.GetBytes(sent[1].Body, "messages.@reverse.0.content.0.content").String(), "42", "the streamed call ran")
			assert.True(t, rel.byClient.Load(), "the client read the model's first text while the model held the rest of its call")
			msg := accumulateMessages(t, got)
			require.Len(t, msg.Content, 4, "text, server_tool_use, result, text: %s", msg.RawJSON())
			assert.Equal(t, "Let me compute.", msg.Content[0].Text, "the first text")
			assert.Equal(t, "srvtoolu_f1", msg.Content[1].ID, "the call")
			assert.JSONEq(t, `{"code":"print(6 * 7)"}`, string(msg.Content[1].Input), "with the input the stream built")
			assert.Equal(t, "42\n", msg.Content[2].AsCodeExecutionToolResult().Content.Stdout, "its output")
			assert.Equal(t, "It is 42.", msg.Content[3].Text, "the answer")
			assert.Equal(t, "msg_f1", msg.ID, "named after the first answer")
			assert.Equal(t, int64(50), msg.Usage.InputTokens, "input tokens summed")
			assert.Equal(t, int64(12), msg.Usage.OutputTokens, "output tokens summed")
			assert.NotEmpty(t, msg.Container.ID, "the container")
		})
	})
}

// accumulateMessages rebuilds, with anthropic-sdk-go's accumulator, the message of the event
// stream lines got.
func accumulateMessages(t *testing.T, got []arrival) anthropic.Message {
	t.Helper()
	var msg anthropic.Message
	for _, a := range got {
		if !strings.HasPrefix(a.line, "data: ") {
			continue
		}
		var ev anthropic.MessageStreamEventUnion
		require.NoError(t, ev.UnmarshalJSON([]byte(strings.TrimPrefix(a.line, "data: "))), "event %s", a.line)
		require.NoError(t, msg.Accumulate(ev), "accumulate %s", ev.Type)
	}
	return msg
}
