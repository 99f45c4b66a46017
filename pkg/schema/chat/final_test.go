package chat

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
)

// finalUpdate rewrites the golden files of the final-answer and SSE tests from the current output.
var finalUpdate = flag.Bool("update-output", false, "rewrite testdata/final and testdata/sse golden files")

// finalCase is the input.json of a testdata/final case.
type finalCase struct {
	Surface      string          `json:"surface"`
	FunctionName string          `json:"function_name"`
	Tool         json.RawMessage `json:"tool"`
	ToolChoice   json.RawMessage `json:"tool_choice"`
	Rounds       []struct {
		Body  json.RawMessage `json:"body"`
		Calls []struct {
			ID          string `json:"id"`
			Status      string `json:"status"`
			Code        string `json:"code"`
			ContainerID string `json:"container_id"`
			Outputs     []struct {
				Type string `json:"type"`
				Logs string `json:"logs"`
				URL  string `json:"url"`
			} `json:"outputs"`
		} `json:"calls"`
	} `json:"rounds"`
}

// finalLoadCase reads testdata/final/<name>/input.json as a schema.FinalInput.
func finalLoadCase(t testing.TB, name string) schema.FinalInput {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "final", name, "input.json"))
	require.NoError(t, err, "read case %s", name)
	var c finalCase
	require.NoError(t, json.Unmarshal(b, &c), "decode case %s", name)
	in := schema.FinalInput{FunctionName: c.FunctionName, Tool: c.Tool, ToolChoice: c.ToolChoice}
	require.Equal(t, "chat", c.Surface, "surface of case %s", name)
	for _, r := range c.Rounds {
		round := schema.Round{Body: r.Body}
		for _, cc := range r.Calls {
			call := schema.CodeCall{ID: cc.ID, Status: cc.Status, Code: cc.Code, ContainerID: cc.ContainerID}
			for _, o := range cc.Outputs {
				call.Outputs = append(call.Outputs, schema.CodeOutput{Type: o.Type, Logs: o.Logs, URL: o.URL})
			}
			round.Calls = append(round.Calls, call)
		}
		in.Rounds = append(in.Rounds, round)
	}
	return in
}

// finalGolden compares got with the golden file at path (rewriting it with -update-output).
func finalGolden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *finalUpdate {
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755), "mkdir for %s", path)
		require.NoError(t, os.WriteFile(path, got, 0o644), "write %s", path)
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "read golden %s (run with -update-output to create it)", path)
	assert.Equal(t, string(want), string(got), "output differs from golden %s", path)
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
	tests := []struct {
		name string
		give string // case
	}{
		{name: "chat one round", give: "chat_one_round"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := finalLoadCase(t, tt.give)
			got, err := Final(in)
			require.NoError(t, err, "Final(%s)", tt.give)
			body := in.Rounds[0].Body
			// Every top-level member but tools is byte-identical to the upstream body.
			gjson.ParseBytes(body).ForEach(func(k, v gjson.Result) bool {
				if k.String() == "tools" {
					return true
				}
				assert.Equal(t, v.Raw, gjson.GetBytes(got, k.String()).Raw, "member %s of Final(%s)", k.String(), tt.give)
				return true
			})
		})
	}
}

func TestFinalDoesNotModifyInput(t *testing.T) {
	for _, name := range []string{"chat_stopped", "chat_mixed_turn"} {
		in := finalLoadCase(t, name)
		var before [][]byte
		for _, r := range in.Rounds {
			before = append(before, bytes.Clone(r.Body))
		}
		_, err := Final(in)
		require.NoError(t, err, "Final(%s)", name)
		for i, r := range in.Rounds {
			assert.Equal(t, string(before[i]), string(r.Body), "round %d body of %s changed by Final", i+1, name)
		}
	}
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
	tests := []struct {
		name    string
		give    schema.FinalInput
		wantErr string
	}{
		{
			name:    "not an object",
			give:    schema.FinalInput{FunctionName: "f", Rounds: []schema.Round{{Body: []byte(`[]`)}}},
			wantErr: "round 1: body is not a JSON object",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Final(tt.give)
			require.Error(t, err, "Final(%s)", tt.name)
			assert.Contains(t, err.Error(), tt.wantErr, "error of Final(%s)", tt.name)
			assert.True(t, strings.HasPrefix(err.Error(), "build final answer: "), "error prefix of Final(%s): %v", tt.name, err)
		})
	}
}
