package responses

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/schema/internal/jsonscan"
	"github.com/codeinterp/codeinterp/pkg/schema/internal/schematest"
	"github.com/openai/openai-go/v3/responses"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
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

func FuzzResponsesSSE(f *testing.F) {
	sseFuzzSeeds(f, func(a, b, c string) { f.Add(a, b, c) })
	f.Fuzz(func(t *testing.T, code, text, args string) {
		round1 := `{"id":"resp_1","object":"response","status":"completed","output":[` +
			`{"id":"rs_1","type":"reasoning","summary":[{"type":"summary_text","text":` + sseRawJSONString(text) + `}]},` +
			`{"id":"fc_1","type":"function_call","status":"completed","call_id":"call_1","name":"code_interpreter","arguments":"{}"}],` +
			`"tools":[{"type":"function","name":"code_interpreter"}],"usage":{"input_tokens":1,"output_tokens":2,"total_tokens":3}}`
		round2 := `{"id":"resp_2","object":"response","status":"completed","output":[` +
			`{"id":"fc_2","type":"function_call","status":"completed","call_id":"call_2","name":"get_weather","arguments":` + sseRawJSONString(args) + `},` +
			`{"id":"msg_2","type":"message","status":"completed","role":"assistant","content":[` +
			`{"type":"output_text","annotations":[],"logprobs":[],"text":` + sseRawJSONString(text) + `},` +
			`{"type":"refusal","refusal":` + sseRawJSONString(args) + `}]}],` +
			`"tools":[{"type":"function","name":"code_interpreter"}],"usage":{"input_tokens":4,"output_tokens":5,"total_tokens":9}}`
		final, err := Final(schema.FinalInput{
			FunctionName: "code_interpreter",
			Tool:         []byte(`{"type":"code_interpreter","container":{"type":"auto"}}`),
			Rounds: []schema.Round{
				{Body: []byte(round1), Calls: []schema.CodeCall{{
					ID: "ci_1", Status: "completed", Code: code, ContainerID: "cntr_1",
					Outputs: []schema.CodeOutput{{Type: schema.CodeOutputLogs, Logs: text}},
				}}},
				{Body: []byte(round2)},
			},
		})
		require.NoError(t, err, "Final")
		require.True(t, json.Valid(final), "Final output is not JSON")

		stream, err := SSE(final)
		require.NoError(t, err, "ResponsesSSE")
		frames := schematest.SSEFrames(t, stream, true)
		for i, fr := range frames {
			require.True(t, json.Valid([]byte(fr.Data)), "data of event %d is not JSON: %.300q", i, fr.Data)
			require.Equal(t, int64(i), gjson.Get(fr.Data, "sequence_number").Int(), "sequence_number of event %d", i)
			require.Equal(t, fr.Name, gjson.Get(fr.Data, "type").String(), "type of event %d", i)
		}

		events := schematest.SSESDKEvents[responses.ResponseStreamEventUnion](t, stream)
		require.Len(t, events, len(frames), "SDK events")
		r := sseReplayResponses(t, events)
		assert.Equal(t, sseOutputItems(t, final), r.Rebuilt, "items rebuilt from the events")
		assert.JSONEq(t, string(final), r.Terminal, "response.completed")

		// Output items: [rs_1, ci_1, fc_2, msg_2].
		wants := map[string]string{
			"0/response.reasoning_summary_text.delta/0":     text,
			"1/response.code_interpreter_call_code.delta/0": code,
			"2/response.function_call_arguments.delta/0":    args,
			"3/response.output_text.delta/0":                text,
			"3/response.refusal.delta/1":                    args,
		}
		for key, want := range wants {
			assert.Equal(t, sseDecoded(t, want), r.Deltas[key], "deltas %s", key)
			if utf8.ValidString(want) {
				assert.Equal(t, want, r.Deltas[key], "deltas %s of valid UTF-8", key)
			}
		}
	})
}
