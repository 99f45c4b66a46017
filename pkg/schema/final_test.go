package schema_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/codeinterp/codeinterp/pkg/schema"
	shared "github.com/codeinterp/codeinterp/pkg/schema/internal/openai"

	"github.com/codeinterp/codeinterp/pkg/schema/internal/jsonscan"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
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

// finalLoadCase reads testdata/final/<name>/input.json as a FinalInput.
func finalLoadCase(t testing.TB, name string) FinalInput {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "final", name, "input.json"))
	require.NoError(t, err, "read case %s", name)
	var c finalCase
	require.NoError(t, json.Unmarshal(b, &c), "decode case %s", name)
	in := FinalInput{FunctionName: c.FunctionName, Tool: c.Tool, ToolChoice: c.ToolChoice}
	switch c.Surface {
	case "responses":
		in.Surface = Responses
	case "chat":
		in.Surface = Chat
	default:
		require.Failf(t, "bad case", "case %s: surface %q", name, c.Surface)
	}
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

// finalItemLabels lists a Responses output as "type:id" labels.
func finalItemLabels(r responses.Response) []string {
	var labels []string
	for _, item := range r.Output {
		labels = append(labels, item.Type+":"+item.ID)
	}
	return labels
}

func TestFinalResponsesGolden(t *testing.T) {
	tests := []struct {
		name        string
		wantItems   []string
		wantUsage   [5]int64 // input, cached, output, reasoning, total
		wantTools   []string // tool types in order
		wantChoice  string   // tool_choice raw JSON
		wantResID   string
		wantCIs     int
		wantLogs    map[string]string // ci id → logs of its first output
		wantImageOf string            // a ci id whose first output is an image
	}{
		{
			name:       "responses_one_round",
			wantItems:  []string{"reasoning:rs_1", "message:msg_1"},
			wantUsage:  [5]int64{80, 0, 40, 16, 120},
			wantTools:  []string{"code_interpreter"},
			wantChoice: `"auto"`,
			wantResID:  "resp_r1",
		},
		{
			name:       "responses_two_rounds",
			wantItems:  []string{"reasoning:rs_1", "code_interpreter_call:ci_1", "message:msg_2"},
			wantUsage:  [5]int64{380, 128, 90, 32, 470},
			wantTools:  []string{"code_interpreter"},
			wantChoice: `"auto"`,
			wantResID:  "resp_r2",
			wantCIs:    1,
			wantLogs:   map[string]string{"ci_1": "6.9868\n"},
		},
		{
			name: "responses_three_rounds",
			wantItems: []string{
				"reasoning:rs_1", "code_interpreter_call:ci_1", "code_interpreter_call:ci_2",
				"reasoning:rs_2", "code_interpreter_call:ci_3", "reasoning:rs_3", "message:msg_3",
			},
			wantUsage:   [5]int64{840, 376, 210, 70, 1050},
			wantTools:   []string{"code_interpreter"},
			wantChoice:  `"auto"`,
			wantResID:   "resp_r3",
			wantCIs:     3,
			wantLogs:    map[string]string{"ci_1": "6.9868", "ci_2": "10000"},
			wantImageOf: "ci_3",
		},
		{
			name:       "responses_mixed_turn",
			wantItems:  []string{"message:msg_1", "code_interpreter_call:ci_1", "function_call:fc_2"},
			wantUsage:  [5]int64{150, 0, 45, 0, 195},
			wantTools:  []string{"function", "code_interpreter"},
			wantChoice: `"auto"`,
			wantResID:  "resp_r1",
			wantCIs:    1,
			wantLogs:   map[string]string{"ci_1": "1024"},
		},
		{
			name:       "responses_stopped",
			wantItems:  []string{"code_interpreter_call:ci_1", "reasoning:rs_2"},
			wantUsage:  [5]int64{240, 64, 45, 12, 285},
			wantTools:  []string{"code_interpreter"},
			wantChoice: `"auto"`,
			wantResID:  "resp_r2",
			wantCIs:    1,
			wantLogs:   map[string]string{"ci_1": "Execution timed out after 30 seconds."},
		},
		{
			name:       "responses_tool_choice",
			wantItems:  []string{"code_interpreter_call:ci_1", "message:msg_2"},
			wantUsage:  [5]int64{500, 100, 25, 5, 525},
			wantTools:  []string{"function", "code_interpreter", "web_search"},
			wantChoice: `{"type":"allowed_tools","mode":"required","tools":[{"type":"code_interpreter"}]}`,
			wantResID:  "resp_r2",
			wantCIs:    1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := finalLoadCase(t, tt.name)
			got, err := Final(in)
			require.NoError(t, err, "Final(%s)", tt.name)
			finalGolden(t, filepath.Join("testdata", "final", tt.name, "want.json"), got)

			var r responses.Response
			require.NoError(t, json.Unmarshal(got, &r), "SDK parse of Final(%s)", tt.name)
			assert.Equal(t, tt.wantResID, r.ID, "id of Final(%s)", tt.name)
			assert.Equal(t, tt.wantItems, finalItemLabels(r), "output of Final(%s)", tt.name)
			assert.Equal(t, tt.wantUsage, [5]int64{
				r.Usage.InputTokens, r.Usage.InputTokensDetails.CachedTokens, r.Usage.OutputTokens,
				r.Usage.OutputTokensDetails.ReasoningTokens, r.Usage.TotalTokens,
			}, "usage of Final(%s)", tt.name)
			var tools []string
			for _, tool := range r.Tools {
				tools = append(tools, tool.Type)
			}
			assert.Equal(t, tt.wantTools, tools, "tools of Final(%s)", tt.name)
			assert.JSONEq(t, tt.wantChoice, gjson.GetBytes(got, "tool_choice").Raw, "tool_choice of Final(%s)", tt.name)
			assert.Equal(t, "[]", gjson.GetBytes(got, `output.#(name=="`+in.FunctionName+`")#`).Raw,
				"internal function call left in output of Final(%s)", tt.name)

			cis := 0
			for _, item := range r.Output {
				if item.Type != "code_interpreter_call" {
					continue
				}
				cis++
				ci := item.AsCodeInterpreterCall()
				assert.Equal(t, "cntr_68c2e6f380d8", ci.ContainerID, "container of %s in Final(%s)", ci.ID, tt.name)
				assert.NotEmpty(t, ci.Code, "code of %s in Final(%s)", ci.ID, tt.name)
				assert.True(t, ci.JSON.Outputs.Valid(), "outputs of %s in Final(%s) must be an array, not null", ci.ID, tt.name)
				if want, ok := tt.wantLogs[ci.ID]; ok {
					require.NotEmpty(t, ci.Outputs, "outputs of %s in Final(%s)", ci.ID, tt.name)
					assert.Equal(t, want, ci.Outputs[0].AsLogs().Logs, "logs of %s in Final(%s)", ci.ID, tt.name)
				}
				if ci.ID == tt.wantImageOf {
					require.NotEmpty(t, ci.Outputs, "outputs of %s in Final(%s)", ci.ID, tt.name)
					assert.Equal(t, "image", ci.Outputs[0].Type, "output type of %s in Final(%s)", ci.ID, tt.name)
					assert.True(t, strings.HasPrefix(ci.Outputs[0].AsImage().URL, "data:image/png;base64,"),
						"image URL of %s in Final(%s)", ci.ID, tt.name)
				}
			}
			assert.Equal(t, tt.wantCIs, cis, "code_interpreter_call items in Final(%s)", tt.name)
		})
	}
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
		{name: "one round, nothing to replace", give: "responses_one_round"},
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
	for _, name := range []string{"responses_three_rounds", "responses_tool_choice", "chat_stopped", "chat_mixed_turn"} {
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

// Calls are placed by position among the round's internal calls, so calls that share a call_id
// or have none (the model's mistake, answered without running) still each get their item.
func TestFinalPlacesCallsByPosition(t *testing.T) {
	body := `{"id":"resp_1","output":[` +
		`{"type":"function_call","name":"f","call_id":"x"},{"type":"message","id":"m"},` +
		`{"type":"function_call","name":"f","call_id":"x"},{"type":"function_call","name":"f"}],"tools":[]}`
	got, err := Final(FinalInput{Surface: Responses, FunctionName: "f", Rounds: []schema.Round{{
		Body:  []byte(body),
		Calls: []schema.CodeCall{{ID: "ci_1"}, {ID: "ci_2"}, {ID: "ci_3"}},
	}}})
	require.NoError(t, err, "Final of %s", body)
	var ids []string
	for _, it := range gjson.GetBytes(got, "output").Array() {
		ids = append(ids, it.Get("id").String())
	}
	assert.Equal(t, []string{"ci_1", "m", "ci_2", "ci_3"}, ids, "output of %s", got)
}

func TestFinalEchoesClientToolChoice(t *testing.T) {
	tests := []struct {
		name         string
		giveUpstream string // the tool_choice the last upstream answer echoes; empty: none
		giveClient   string // the client's tool_choice; empty: none
		wantChoice   string
	}{
		{
			name:         "hosted tool named",
			giveUpstream: `{"type":"function","name":"code_interpreter"}`,
			giveClient:   `{"type":"code_interpreter"}`,
			wantChoice:   `{"type":"code_interpreter"}`,
		},
		{
			name:         "allowed tools relaxed in later rounds",
			giveUpstream: `{"type":"allowed_tools","mode":"auto","tools":[{"type":"function","name":"get_weather"},{"type":"function","name":"code_interpreter"}]}`,
			giveClient:   `{"type":"allowed_tools","mode":"required","tools":[{"type":"function","name":"get_weather"},{"type":"code_interpreter"}]}`,
			wantChoice:   `{"type":"allowed_tools","mode":"required","tools":[{"type":"function","name":"get_weather"},{"type":"code_interpreter"}]}`,
		},
		{name: "required dropped in later rounds", giveUpstream: `"auto"`, giveClient: `"required"`, wantChoice: `"required"`},
		{name: "finishing round without a client choice", giveUpstream: `"none"`, wantChoice: `"auto"`},
		{name: "client function untouched", giveUpstream: `{"type":"function","name":"get_weather"}`, giveClient: `{"type":"function","name":"get_weather"}`, wantChoice: `{"type":"function","name":"get_weather"}`},
		{name: "absent upstream", giveClient: `"none"`, wantChoice: `"none"`},
		{name: "absent everywhere", wantChoice: `"auto"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := `{"id":"resp_1","output":[],"tools":[]}`
			if tt.giveUpstream != "" {
				body = `{"id":"resp_1","output":[],"tool_choice":` + tt.giveUpstream + `,"tools":[]}`
			}
			in := FinalInput{Surface: Responses, FunctionName: "code_interpreter", Rounds: []schema.Round{{Body: []byte(body)}}}
			if tt.giveClient != "" {
				in.ToolChoice = []byte(tt.giveClient)
			}
			got, err := Final(in)
			require.NoError(t, err, "Final with tool_choice %s from %s", tt.giveUpstream, tt.giveClient)
			assert.JSONEq(t, tt.wantChoice, gjson.GetBytes(got, "tool_choice").Raw, "tool_choice echoed for %s / %s", tt.giveUpstream, tt.giveClient)
		})
	}
}

func TestFinalTools(t *testing.T) {
	fn := `{"type":"function","name":"code_interpreter","parameters":{}}`
	tests := []struct {
		name      string
		giveTools string
		giveTool  string
		wantTools string
	}{
		{
			name:      "replaced in place",
			giveTools: `[{"type":"web_search"},` + fn + `,{"type":"function","name":"f"}]`,
			giveTool:  `{"type":"code_interpreter","container":"cntr_1"}`,
			wantTools: `[{"type":"web_search"},{"type":"code_interpreter","container":"cntr_1"},{"type":"function","name":"f"}]`,
		},
		{
			name:      "removed without a client tool",
			giveTools: `[` + fn + `,{"type":"function","name":"f"}]`,
			wantTools: `[{"type":"function","name":"f"}]`,
		},
		{
			name:      "duplicates removed",
			giveTools: `[` + fn + `,` + fn + `]`,
			giveTool:  `{"type":"code_interpreter"}`,
			wantTools: `[{"type":"code_interpreter"}]`,
		},
		{
			name:      "a hosted tool of the same name kept",
			giveTools: `[{"type":"code_interpreter","name":"code_interpreter"}]`,
			giveTool:  `{"type":"code_interpreter"}`,
			wantTools: `[{"type":"code_interpreter","name":"code_interpreter"}]`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := FinalInput{
				Surface:      Responses,
				FunctionName: "code_interpreter",
				Rounds:       []schema.Round{{Body: []byte(`{"output":[],"tools":` + tt.giveTools + `}`)}},
			}
			if tt.giveTool != "" {
				in.Tool = []byte(tt.giveTool)
			}
			got, err := Final(in)
			require.NoError(t, err, "Final with tools %s", tt.giveTools)
			assert.JSONEq(t, tt.wantTools, gjson.GetBytes(got, "tools").Raw, "tools from %s", tt.giveTools)
		})
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
			got, err := Final(FinalInput{Surface: Chat, FunctionName: "code_interpreter", Rounds: []schema.Round{{Body: []byte(tt.give)}}})
			require.NoError(t, err, "Final(%s)", tt.give)
			assert.JSONEq(t, tt.want, string(got), "Final(%s)", tt.give)
		})
	}
}

func TestFinalErrors(t *testing.T) {
	okRound := schema.Round{Body: []byte(`{"output":[]}`)}
	tests := []struct {
		name    string
		give    FinalInput
		wantErr string
	}{
		{name: "no rounds", give: FinalInput{Surface: Responses, FunctionName: "f"}, wantErr: "no rounds"},
		{name: "no function name", give: FinalInput{Surface: Responses, Rounds: []schema.Round{okRound}}, wantErr: "empty function name"},
		{
			name:    "invalid JSON",
			give:    FinalInput{Surface: Responses, FunctionName: "f", Rounds: []schema.Round{okRound, {Body: []byte(`{"output":[`)}}},
			wantErr: "round 2: body is not a JSON object",
		},
		{
			name:    "not an object",
			give:    FinalInput{Surface: Chat, FunctionName: "f", Rounds: []schema.Round{{Body: []byte(`[]`)}}},
			wantErr: "round 1: body is not a JSON object",
		},
		{
			name:    "output not an array",
			give:    FinalInput{Surface: Responses, FunctionName: "f", Rounds: []schema.Round{{Body: []byte(`{"output":{}}`)}}},
			wantErr: "round 1: output is not an array",
		},
		{
			name: "more calls than internal calls",
			give: FinalInput{Surface: Responses, FunctionName: "f", Rounds: []schema.Round{{
				Body:  []byte(`{"output":[{"type":"function_call","name":"f","call_id":"a"}]}`),
				Calls: []schema.CodeCall{{ID: "ci_1"}, {ID: "ci_2"}},
			}}},
			wantErr: `round 1: 2 calls for 1 internal function calls`,
		},
		{
			name: "fewer calls than internal calls",
			give: FinalInput{Surface: Responses, FunctionName: "f", Rounds: []schema.Round{{
				Body:  []byte(`{"output":[{"type":"function_call","name":"f","call_id":"a"},{"type":"function_call","name":"f","call_id":"b"}]}`),
				Calls: []schema.CodeCall{{ID: "ci_1"}},
			}}},
			wantErr: `round 1: 1 calls for 2 internal function calls`,
		},
		{
			name: "unknown output type",
			give: FinalInput{Surface: Responses, FunctionName: "f", Rounds: []schema.Round{{
				Body:  []byte(`{"output":[{"type":"function_call","name":"f","call_id":"a"}]}`),
				Calls: []schema.CodeCall{{ID: "ci_1", Outputs: []schema.CodeOutput{{Type: "files"}}}},
			}}},
			wantErr: `unknown type "files"`,
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

func TestFinalAppendStringMatchesEncodingJSON(t *testing.T) {
	tests := []struct {
		name string
		give string
	}{
		{name: "empty", give: ""},
		{name: "ascii", give: "hello world"},
		{name: "controls", give: "a\x00b\x1f\n\r\t\b\f"},
		{name: "quotes", give: `"\/`},
		{name: "unicode", give: "héllo 世界 🎲"},
		{name: "line separators", give: "a\u2028b\u2029c"},
		{name: "invalid utf8", give: "a\xffb\xe2\x82c\xed\xa0\x80"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := jsonscan.AppendString(nil, tt.give)
			var decoded string
			require.NoError(t, json.Unmarshal(got, &decoded), "decode AppendString(%q) = %s", tt.give, got)
			want, err := json.Marshal(tt.give)
			require.NoError(t, err, "json.Marshal(%q)", tt.give)
			var wantDecoded string
			require.NoError(t, json.Unmarshal(want, &wantDecoded), "decode json.Marshal(%q)", tt.give)
			assert.Equal(t, wantDecoded, decoded, "decoded AppendString(%q)", tt.give)
			assert.NotContains(t, string(got), "\n", "raw newline in AppendString(%q)", tt.give)
		})
	}
}

func TestFinalSumJSON(t *testing.T) {
	tests := []struct {
		name string
		give []string
		want string
	}{
		{
			name: "nested leaves",
			give: []string{
				`{"input_tokens":1,"input_tokens_details":{"cached_tokens":2},"total_tokens":3}`,
				`{"input_tokens":10,"input_tokens_details":{"cached_tokens":20},"total_tokens":30}`,
			},
			want: `{"input_tokens":11,"input_tokens_details":{"cached_tokens":22},"total_tokens":33}`,
		},
		{
			name: "last order first, then earlier-only keys",
			give: []string{`{"a":1,"x":{"y":1},"b":2}`, `{"b":3,"a":4}`},
			want: `{"b":5,"a":5,"x":{"y":1}}`,
		},
		{
			name: "object beats null",
			give: []string{`{"d":{"n":1}}`, `{"d":null}`, `{"d":{"n":2,"m":1}}`},
			want: `{"d":{"n":3,"m":1}}`,
		},
		{
			name: "floats",
			give: []string{`{"cost":0.25,"n":1}`, `{"cost":0.5,"n":2.5}`},
			want: `{"cost":0.75,"n":3.5}`,
		},
		{
			name: "non-numbers from the last round",
			give: []string{`{"unit":"a","tokens":1}`, `{"unit":"b","tokens":1}`},
			want: `{"unit":"b","tokens":2}`,
		},
		{
			name: "escaped keys",
			give: []string{`{"a.b":1,"q\"":2}`, `{"a.b":1,"q\"":2}`},
			want: `{"a.b":2,"q\"":4}`,
		},
		{
			name: "int64 overflow falls back to float",
			give: []string{`{"n":9223372036854775807}`, `{"n":1}`},
			want: `{"n":9.223372036854776e+18}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var vals []gjson.Result
			for _, g := range tt.give {
				vals = append(vals, gjson.Parse(g))
			}
			got := shared.SumJSON(nil, vals)
			assert.Equal(t, tt.want, string(got), "sum of %v", tt.give)
		})
	}
}
