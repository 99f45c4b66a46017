package chat

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/schema/internal/jsonscan"
	"github.com/codeinterp/codeinterp/pkg/schema/internal/schematest"
	"github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sseRawJSONString encodes s as a JSON string escaping only what JSON requires (quote,
// backslash, control characters): invalid UTF-8, U+2028 and U+2029 stay raw, as an upstream may
// send them.
func sseRawJSONString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20:
			b.WriteString(`\u00`)
			b.WriteByte(jsonscan.HexDigits[c>>4])
			b.WriteByte(jsonscan.HexDigits[c&0xF])
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// sseDecoded is what a JSON decoder makes of s: s itself when it is valid UTF-8, else s with each
// invalid byte replaced by U+FFFD.
func sseDecoded(t testing.TB, s string) string {
	t.Helper()
	var out string
	require.NoError(t, json.Unmarshal([]byte(sseRawJSONString(s)), &out), "decode %q", s)
	return out
}

// sseFuzzSeeds adds the shared seed strings: unicode, control characters, invalid UTF-8, JS line
// terminators, SSE-significant text and very long lines.
func sseFuzzSeeds(f *testing.F, add func(a, b, c string)) {
	long := strings.Repeat("0123456789abcdef", 4096) // a 64 KiB line without a newline or space
	add("print(1 + 1)\n", "The answer is 2.", `{"city":"Paris"}`)
	add("x = 'héllo 世界 🎲'\nprint(x)", "Ünïcödé — 世界 🎲", `{"q":"ü"}`)
	add("a\x00b\x01\x1f\x7f\tc\r\nd", "ctrl\x00\x08\x0c\x1b", "\x00")
	add("bad \xff\xfe utf8 \xe2\x82", "trunc \xe2\x82\xac\xe2\x82", "\xed\xa0\x80")
	add("ls = '\u2028'\nps = '\u2029'", "line\u2028sep\u2029para", "\u2028")
	add("data: [DONE]\n\nevent: error\n", "data: {\"error\":1}\n\n", "\n\ndata: x")
	add(long, long+" "+long, strings.Repeat("é", 40000))
	add("", "", "")
}

func FuzzChatSSE(f *testing.F) {
	sseFuzzSeeds(f, func(a, b, c string) { f.Add(a, b, c, true) })
	f.Add("only content", "", "", false)
	f.Fuzz(func(t *testing.T, content, args, refusal string, includeUsage bool) {
		body := `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{` +
			`"role":"assistant","content":` + sseRawJSONString(content) + `,"refusal":` + sseRawJSONString(refusal) + `,"tool_calls":[` +
			`{"id":"call_1","type":"function","function":{"name":"code_interpreter","arguments":"{}"}},` +
			`{"id":"call_2","type":"function","function":{"name":"get_weather","arguments":` + sseRawJSONString(args) + `}}]},` +
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
			assert.Equal(t, sseDecoded(t, c.give), c.got, "accumulated %s", c.name)
			if utf8.ValidString(c.give) {
				assert.Equal(t, c.give, c.got, "accumulated %s of valid UTF-8", c.name)
			}
		}
		assert.Equal(t, map[bool]int64{true: 7}[includeUsage], acc.Usage.TotalTokens, "accumulated usage")
	})
}
