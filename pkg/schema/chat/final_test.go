package chat

import (
	"encoding/json"
	"flag"
	"path/filepath"
	"testing"

	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/schema/internal/schematest"
	"github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
)

// finalUpdate rewrites the golden files of the final-answer and SSE tests from the current output.
var finalUpdate = flag.Bool("update-output", false, "rewrite testdata/final and testdata/sse golden files")

// finalLoadCase reads testdata/final/<name>/input.json as a schema.FinalInput.
func finalLoadCase(t testing.TB, name string) schema.FinalInput {
	t.Helper()
	return schematest.LoadFinalCase(t, "chat", name)
}

// finalGolden compares got with the golden file at path (rewriting it with -update-output).
func finalGolden(t *testing.T, path string, got []byte) {
	t.Helper()
	schematest.CheckGolden(t, path, got, *finalUpdate)
}

func TestFinalChatGolden(t *testing.T) {
	tests := []struct {
		name          string
		wantID        string
		wantContent   string
		wantFinish    string
		wantToolCalls []string // function names
		wantUsage     [4]int64 // prompt, cached, completion, total
	}{
		{
			name:        "chat_one_round",
			wantID:      "chatcmpl-1",
			wantContent: "Hello! \u2028 How can I help?",
			wantFinish:  "stop",
			wantUsage:   [4]int64{20, 0, 9, 29},
		},
		{
			name:        "chat_two_rounds",
			wantID:      "chatcmpl-2",
			wantContent: "The average is 6.9868.",
			wantFinish:  "stop",
			wantUsage:   [4]int64{320, 64, 72, 392},
		},
		{
			name:          "chat_mixed_turn",
			wantID:        "chatcmpl-1",
			wantContent:   "Checking.",
			wantFinish:    "tool_calls",
			wantToolCalls: []string{"get_weather"},
			wantUsage:     [4]int64{100, 0, 40, 140},
		},
		{
			name:       "chat_stopped",
			wantID:     "chatcmpl-2",
			wantFinish: "stop",
			wantUsage:  [4]int64{230, 100, 42, 272},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := finalLoadCase(t, tt.name)
			got, err := Final(in)
			require.NoError(t, err, "Final(%s)", tt.name)
			finalGolden(t, filepath.Join("testdata", "final", tt.name, "want.json"), got)

			var c openai.ChatCompletion
			require.NoError(t, json.Unmarshal(got, &c), "SDK parse of Final(%s)", tt.name)
			require.Len(t, c.Choices, 1, "choices of Final(%s)", tt.name)
			msg := c.Choices[0].Message
			assert.Equal(t, tt.wantID, c.ID, "id of Final(%s)", tt.name)
			assert.Equal(t, tt.wantContent, msg.Content, "content of Final(%s)", tt.name)
			assert.Equal(t, tt.wantFinish, c.Choices[0].FinishReason, "finish_reason of Final(%s)", tt.name)
			var names []string
			for _, tc := range msg.ToolCalls {
				names = append(names, tc.Function.Name)
			}
			assert.Equal(t, tt.wantToolCalls, names, "tool calls of Final(%s)", tt.name)
			assert.Equal(t, len(tt.wantToolCalls) > 0, gjson.GetBytes(got, "choices.0.message.tool_calls").Exists(),
				"tool_calls key present in Final(%s)", tt.name)
			assert.Equal(t, tt.wantUsage, [4]int64{
				c.Usage.PromptTokens, c.Usage.PromptTokensDetails.CachedTokens, c.Usage.CompletionTokens, c.Usage.TotalTokens,
			}, "usage of Final(%s)", tt.name)
			assert.NotContains(t, string(got), in.FunctionName, "internal call left in Final(%s)", tt.name)
		})
	}
}

func TestFinalKeepsUntouchedBytes(t *testing.T) {
	tests := []schematest.FinalKeepsCase{
		{Name: "chat one round", Give: "chat_one_round"},
	}
	schematest.RunFinalKeepsUntouchedBytes(t, Final, "chat", tests)
}

func TestFinalDoesNotModifyInput(t *testing.T) {
	schematest.CheckFinalDoesNotModifyInput(t, Final, "chat", []string{"chat_stopped", "chat_mixed_turn"})
}

func TestFinalChatChoices(t *testing.T) {
	tests := []struct {
		name string
		give string // last round body
		want string
	}{
		{
			name: "two choices, one with our call only",
			give: `{"choices":[` +
				`{"index":0,"message":{"role":"assistant","content":"a"},"finish_reason":"stop"},` +
				`{"index":1,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"code_interpreter","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}`,
			want: `{"choices":[` +
				`{"index":0,"message":{"role":"assistant","content":"a"},"finish_reason":"stop"},` +
				`{"index":1,"message":{"role":"assistant","content":null},"finish_reason":"stop"}]}`,
		},
		{
			name: "legacy function_call of ours",
			give: `{"choices":[{"index":0,"message":{"role":"assistant","content":null,"function_call":{"name":"code_interpreter","arguments":"{}"}},"finish_reason":"function_call"}]}`,
			want: `{"choices":[{"index":0,"message":{"role":"assistant","content":null},"finish_reason":"stop"}]}`,
		},
		{
			name: "client calls only, untouched",
			give: `{"choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}`,
			want: `{"choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}`,
		},
		{
			name: "finish_reason length kept",
			give: `{"choices":[{"index":0,"message":{"role":"assistant","content":"x","tool_calls":[{"id":"c1","type":"function","function":{"name":"code_interpreter","arguments":"{"}}]},"finish_reason":"length"}]}`,
			want: `{"choices":[{"index":0,"message":{"role":"assistant","content":"x"},"finish_reason":"length"}]}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Final(schema.FinalInput{FunctionName: "code_interpreter", Rounds: []schema.Round{{Body: []byte(tt.give)}}})
			require.NoError(t, err, "Final(%s)", tt.give)
			assert.JSONEq(t, tt.want, string(got), "Final(%s)", tt.give)
		})
	}
}

func TestFinalErrors(t *testing.T) {
	tests := []schematest.FinalErrorCase{
		{
			Name:    "not an object",
			Give:    schema.FinalInput{FunctionName: "f", Rounds: []schema.Round{{Body: []byte(`[]`)}}},
			WantErr: "round 1: body is not a JSON object",
		},
	}
	schematest.RunFinalErrors(t, Final, tests)
}
