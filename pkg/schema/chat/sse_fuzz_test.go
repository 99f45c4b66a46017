package chat

import (
	"encoding/json"
	"testing"
	"unicode/utf8"

	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/schema/internal/schematest"
	"github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func FuzzChatSSE(f *testing.F) {
	schematest.SSEFuzzSeeds(f, func(a, b, c string) { f.Add(a, b, c, true) })
	f.Add("only content", "", "", false)
	f.Fuzz(func(t *testing.T, content, args, refusal string, includeUsage bool) {
		body := `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{` +
			`"role":"assistant","content":` + schematest.RawJSONString(content) + `,"refusal":` + schematest.RawJSONString(refusal) + `,"tool_calls":[` +
			`{"id":"call_1","type":"function","function":{"name":"code_interpreter","arguments":"{}"}},` +
			`{"id":"call_2","type":"function","function":{"name":"get_weather","arguments":` + schematest.RawJSONString(args) + `}}]},` +
			`"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}`
		final, err := Final(schema.FinalInput{FunctionName: "code_interpreter", Rounds: []schema.Round{{
			Body:  []byte(body),
			Calls: []schema.CodeCall{{ID: "ci_1"}},
		}}})
		require.NoError(t, err, "Final")
		opts := []byte(`{"include_usage":false}`)
		if includeUsage {
			opts = []byte(`{"include_usage":true}`)
		}
		stream, err := SSE(final, opts)
		require.NoError(t, err, "ChatSSE")
		frames := schematest.SSEFrames(t, stream, false)
		require.Equal(t, "[DONE]", frames[len(frames)-1].Data, "last data line")
		for i, fr := range frames[:len(frames)-1] {
			require.True(t, json.Valid([]byte(fr.Data)), "chunk %d is not JSON: %.300q", i, fr.Data)
		}

		var acc openai.ChatCompletionAccumulator
		for i, c := range schematest.SSESDKEvents[openai.ChatCompletionChunk](t, stream) {
			require.True(t, acc.AddChunk(c), "accumulate chunk %d", i)
		}
		require.Len(t, acc.Choices, 1, "accumulated choices")
		msg := acc.Choices[0].Message
		require.Len(t, msg.ToolCalls, 1, "accumulated tool calls")
		assert.Equal(t, "get_weather", msg.ToolCalls[0].Function.Name, "accumulated tool call name")
		assert.Equal(t, "tool_calls", acc.Choices[0].FinishReason, "accumulated finish_reason")
		for _, c := range []struct{ name, give, got string }{
			{"content", content, msg.Content},
			{"refusal", refusal, msg.Refusal},
			{"arguments", args, msg.ToolCalls[0].Function.Arguments},
		} {
			assert.Equal(t, schematest.Decoded(t, c.give), c.got, "accumulated %s", c.name)
			if utf8.ValidString(c.give) {
				assert.Equal(t, c.give, c.got, "accumulated %s of valid UTF-8", c.name)
			}
		}
		assert.Equal(t, map[bool]int64{true: 7}[includeUsage], acc.Usage.TotalTokens, "accumulated usage")
	})
}
