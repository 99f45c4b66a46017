package responses

import (
	"encoding/json"
	"testing"
	"unicode/utf8"

	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/schema/internal/schematest"
	"github.com/openai/openai-go/v3/responses"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
)

func FuzzResponsesSSE(f *testing.F) {
	schematest.SSEFuzzSeeds(f, func(a, b, c string) { f.Add(a, b, c) })
	f.Fuzz(func(t *testing.T, code, text, args string) {
		round1 := `{"id":"resp_1","object":"response","status":"completed","output":[` +
			`{"id":"rs_1","type":"reasoning","summary":[{"type":"summary_text","text":` + schematest.RawJSONString(text) + `}]},` +
			`{"id":"fc_1","type":"function_call","status":"completed","call_id":"call_1","name":"code_interpreter","arguments":"{}"}],` +
			`"tools":[{"type":"function","name":"code_interpreter"}],"usage":{"input_tokens":1,"output_tokens":2,"total_tokens":3}}`
		round2 := `{"id":"resp_2","object":"response","status":"completed","output":[` +
			`{"id":"fc_2","type":"function_call","status":"completed","call_id":"call_2","name":"get_weather","arguments":` + schematest.RawJSONString(args) + `},` +
			`{"id":"msg_2","type":"message","status":"completed","role":"assistant","content":[` +
			`{"type":"output_text","annotations":[],"logprobs":[],"text":` + schematest.RawJSONString(text) + `},` +
			`{"type":"refusal","refusal":` + schematest.RawJSONString(args) + `}]}],` +
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
			assert.Equal(t, schematest.Decoded(t, want), r.Deltas[key], "deltas %s", key)
			if utf8.ValidString(want) {
				assert.Equal(t, want, r.Deltas[key], "deltas %s of valid UTF-8", key)
			}
		}
	})
}
