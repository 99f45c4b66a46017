package responses

import (
	"encoding/json"
	"flag"
	"path/filepath"
	"strings"
	"testing"

	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/schema/internal/schematest"
	"github.com/openai/openai-go/v3/responses"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
)

// finalUpdate rewrites the golden files of the final-answer and SSE tests from the current output.
var finalUpdate = flag.Bool("update-output", false, "rewrite testdata/final and testdata/sse golden files")

// finalLoadCase reads testdata/final/<name>/input.json as a schema.FinalInput.
func finalLoadCase(t testing.TB, name string) schema.FinalInput {
	t.Helper()
	return schematest.LoadFinalCase(t, "responses", name)
}

// finalGolden compares got with the golden file at path (rewriting it with -update-output).
func finalGolden(t *testing.T, path string, got []byte) {
	t.Helper()
	schematest.CheckGolden(t, path, got, *finalUpdate)
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

func TestFinalKeepsUntouchedBytes(t *testing.T) {
	tests := []schematest.FinalKeepsCase{
		{Name: "one round, nothing to replace", Give: "responses_one_round"},
	}
	schematest.RunFinalKeepsUntouchedBytes(t, Final, "responses", tests)
}

func TestFinalDoesNotModifyInput(t *testing.T) {
	schematest.CheckFinalDoesNotModifyInput(t, Final, "responses", []string{"responses_three_rounds", "responses_tool_choice"})
}

// Calls are placed by position among the round's internal calls, so calls that share a call_id
// or have none (the model's mistake, answered without running) still each get their item.
func TestFinalPlacesCallsByPosition(t *testing.T) {
	body := `{"id":"resp_1","output":[` +
		`{"type":"function_call","name":"f","call_id":"x"},{"type":"message","id":"m"},` +
		`{"type":"function_call","name":"f","call_id":"x"},{"type":"function_call","name":"f"}],"tools":[]}`
	got, err := Final(schema.FinalInput{FunctionName: "f", Rounds: []schema.Round{{
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
			in := schema.FinalInput{FunctionName: "code_interpreter", Rounds: []schema.Round{{Body: []byte(body)}}}
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
			in := schema.FinalInput{
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

func TestFinalErrors(t *testing.T) {
	okRound := schema.Round{Body: []byte(`{"output":[]}`)}
	tests := []schematest.FinalErrorCase{
		{Name: "no rounds", Give: schema.FinalInput{FunctionName: "f"}, WantErr: "no rounds"},
		{Name: "no function name", Give: schema.FinalInput{Rounds: []schema.Round{okRound}}, WantErr: "empty function name"},
		{
			Name:    "invalid JSON",
			Give:    schema.FinalInput{FunctionName: "f", Rounds: []schema.Round{okRound, {Body: []byte(`{"output":[`)}}},
			WantErr: "round 2: body is not a JSON object",
		},
		{
			Name:    "output not an array",
			Give:    schema.FinalInput{FunctionName: "f", Rounds: []schema.Round{{Body: []byte(`{"output":{}}`)}}},
			WantErr: "round 1: output is not an array",
		},
		{
			Name: "more calls than internal calls",
			Give: schema.FinalInput{FunctionName: "f", Rounds: []schema.Round{{
				Body:  []byte(`{"output":[{"type":"function_call","name":"f","call_id":"a"}]}`),
				Calls: []schema.CodeCall{{ID: "ci_1"}, {ID: "ci_2"}},
			}}},
			WantErr: `round 1: 2 calls for 1 internal function calls`,
		},
		{
			Name: "fewer calls than internal calls",
			Give: schema.FinalInput{FunctionName: "f", Rounds: []schema.Round{{
				Body:  []byte(`{"output":[{"type":"function_call","name":"f","call_id":"a"},{"type":"function_call","name":"f","call_id":"b"}]}`),
				Calls: []schema.CodeCall{{ID: "ci_1"}},
			}}},
			WantErr: `round 1: 1 calls for 2 internal function calls`,
		},
		{
			Name: "unknown output type",
			Give: schema.FinalInput{FunctionName: "f", Rounds: []schema.Round{{
				Body:  []byte(`{"output":[{"type":"function_call","name":"f","call_id":"a"}]}`),
				Calls: []schema.CodeCall{{ID: "ci_1", Outputs: []schema.CodeOutput{{Type: "files"}}}},
			}}},
			WantErr: `unknown type "files"`,
		},
	}
	schematest.RunFinalErrors(t, Final, tests)
}
