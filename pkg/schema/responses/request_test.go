package responses

import (
	"encoding/json"
	"errors"
	"flag"
	"strings"
	"testing"

	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/schema/internal/jsonscan"
	"github.com/codeinterp/codeinterp/pkg/schema/internal/openai"
	"github.com/codeinterp/codeinterp/pkg/schema/internal/schematest"
	"github.com/openai/openai-go/v3/responses"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
)

// reqUpdateGolden rewrites the want files of the request, turn and follow-up golden tests from
// what the code produces; review the diff before committing it.
var reqUpdateGolden = flag.Bool("update-rewrite-golden", false, "rewrite the golden want files of RewriteRequest, ParseTurn and FollowUp")

const reqTestTool = `{"type":"code_interpreter","container":{"type":"auto"}}`

func TestRewriteRequestGolden(t *testing.T) {
	tests := []struct {
		name string
		opts schema.Options
		want schema.Request // Body is compared with testdata/request/<name>.want.json instead
	}{
		{
			name: "responses_tool_first",
			want: schema.Request{Found: true, Tool: []byte(`{"type": "code_interpreter", "container": "cntr_68c2e6f380d8"}`), ContainerID: "cntr_68c2e6f380d8", ToolChoice: []byte(`"auto"`)},
		},
		{
			name: "responses_tool_middle",
			want: schema.Request{
				Found:         true,
				Tool:          []byte(`{"type":"code_interpreter","container":{"type":"auto","memory_limit":"4g","file_ids":["file-1","file-2"]}}`),
				MemoryLimit:   "4g",
				FileIDs:       []string{"file-1", "file-2"},
				ToolChoice:    []byte(`{"type":"code_interpreter"}`),
				ForcedChoice:  true,
				Stream:        true,
				StreamOptions: []byte(`{"include_obfuscation":false}`),
			},
		},
		{
			name: "responses_tool_last",
			want: schema.Request{
				Found:         true,
				Tool:          []byte(`{ "type" : "code_interpreter" , "container" : { "type" : "auto" } }`),
				ToolChoice:    []byte(`{ "type" : "hosted_tool" , "name" : "code_interpreter" }`),
				ForcedChoice:  true,
				Stream:        true,
				StreamOptions: []byte(`{ "include_obfuscation" : true }`),
				SessionID:     "conv-abc-123",
			},
		},
		{
			name: "responses_allowed_tools_required",
			want: schema.Request{
				Found:        true,
				Tool:         []byte(reqTestTool),
				ToolChoice:   []byte(`{"type":"allowed_tools","mode":"required","tools":[{"type":"function","name":"lookup"},{"type":"code_interpreter"}]}`),
				ForcedChoice: true,
				LaterChoice:  []byte(`{"type":"allowed_tools","mode":"auto","tools":[{"type":"function","name":"lookup"},{"type":"function","name":"code_interpreter"}]}`),
			},
		},
		{
			name: "responses_allowed_tools_auto",
			want: schema.Request{
				Found:      true,
				Tool:       []byte(reqTestTool),
				ToolChoice: []byte(`{"type":"allowed_tools","mode":"auto","tools":[{"type":"hosted_tool","name":"code_interpreter"}, {"type":"web_search"}]}`),
			},
		},
		{
			name: "responses_choice_client_function",
			want: schema.Request{Found: true, Tool: []byte(reqTestTool), ToolChoice: []byte(`{"type":"function","name":"get_weather"}`)},
		},
		{
			name: "responses_choice_none",
			want: schema.Request{Found: true, Tool: []byte(reqTestTool), ToolChoice: []byte(`"none"`)},
		},
		{
			name: "responses_choice_required",
			want: schema.Request{Found: true, Tool: []byte(reqTestTool), ToolChoice: []byte(`"required"`), ForcedChoice: true},
		},
		{
			name: "responses_choice_our_function",
			want: schema.Request{Found: true, Tool: []byte(reqTestTool), ToolChoice: []byte(`{"type":"function","name":"code_interpreter"}`), ForcedChoice: true},
		},
		{
			name: "responses_replay",
			want: schema.Request{
				Found:                true,
				Tool:                 []byte(`{"type": "code_interpreter", "container": {"type": "auto"}}`),
				ReplayedContainerIDs: []string{"cntr_1", "cntr_2"},
				IncludeOutputs:       true,
			},
		},
		{
			name: "responses_custom_name",
			opts: schema.Options{FunctionName: "python", FunctionDescription: "Runs \"Python\" — <code> & more.\n"},
			want: schema.Request{
				Found:        true,
				Tool:         []byte(`{"type":"code_interpreter","container":"cntr_x"}`),
				ContainerID:  "cntr_x",
				ToolChoice:   []byte(`{"type":"code_interpreter"}`),
				ForcedChoice: true,
			},
		},
		{
			name: "responses_escaped_type",
			want: schema.Request{
				Found:        true,
				Tool:         []byte(`{"t\u0079pe":"code\u005finterpreter","container":{"type":"auto","memory_limit":"16g"}}`),
				MemoryLimit:  "16g",
				ToolChoice:   []byte(`{"type":"code_interpreter"}`),
				ForcedChoice: true,
			},
		},
		{
			name: "responses_stream_options_first",
			want: schema.Request{Found: true, Tool: []byte(`{"type": "code_interpreter", "container": {"type": "auto"}}`), StreamOptions: []byte(`{"include_obfuscation": false}`)},
		},
	}
	for _, tt := range tests {
		schematest.RunRewriteGolden(t, RewriteRequest, tt.name, tt.opts, tt.want, *reqUpdateGolden)
	}
}

// file_ids are read in order without repeats, up to the native limit; include is read
// whether or not it comes before the tools.
func TestRewriteRequestFileIDsAndInclude(t *testing.T) {
	tests := []struct {
		name        string
		give        string
		wantFiles   []string
		wantInclude bool
	}{
		{"fifty", `{"tools":[{"type":"code_interpreter","container":{"type":"auto","file_ids":[` + strings.TrimSuffix(strings.Repeat(`"file-x",`, 50), ",") + `]}}]}`, []string{"file-x"}, false},
		{"repeats", `{"include":["file_search_call.results","code_interpreter_call.outputs"],"tools":[{"type":"code_interpreter","container":{"type":"auto","file_ids":["file-b","file-a","file-b"]}}]}`, []string{"file-b", "file-a"}, true},
		{"null", `{"tools":[{"type":"code_interpreter","container":{"type":"auto","file_ids":null}}],"include":[]}`, nil, false},
		{"container id", `{"tools":[{"type":"code_interpreter","container":"cntr_1"}],"include":["code_interpreter_call.outputs"]}`, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := RewriteRequest([]byte(tt.give), schema.Options{})
			require.NoError(t, err, "RewriteRequest(%s)", tt.give)
			assert.Equal(t, tt.wantFiles, got.FileIDs, "FileIDs of %s", tt.give)
			assert.Equal(t, tt.wantInclude, got.IncludeOutputs, "IncludeOutputs of %s", tt.give)
		})
	}
}

func TestRewriteRequestUnchanged(t *testing.T) {
	tests := []struct {
		name string
		give []byte
	}{
		{"responses file, replayed item and hosted choice without the tool", schematest.ReadFile(t, "request/responses_no_tool.give.json")},
		{"no tools", []byte(`{"input":"hi","stream":true,"stream_options":{"include_obfuscation":false}}`)},
		{"tools not a list", []byte(`{"tools":{"type":"code_interpreter"}}`)},
		{"tool type nested deeper", []byte(`{"tools":[{"function":{"type":"code_interpreter"}}]}`)},
		{"tool type not a string", []byte(`{"tools":[{"type":["code_interpreter"]}]}`)},
		{"top level array", []byte(` [{"tools":[{"type":"code_interpreter"}]}] `)},
	}
	for _, tt := range tests {
		schematest.RunRewriteUnchanged(t, RewriteRequest, tt.name, tt.give)
	}
}

func TestRewriteRequestErrors(t *testing.T) {
	tests := []struct {
		name      string
		give      string
		wantParam string
		wantCode  string
	}{
		{"empty body", ``, "", "invalid_json"},
		{"truncated", `{"tools":[{"type":"code_interpreter"}]`, "", "invalid_json"},
		{"trailing data", `{"tools":[]} {}`, "", "invalid_json"},
		{"single quotes", `{'tools':[]}`, "", "invalid_json"},
		{"bad escape in a tool", `{"tools":[{"type":"code_interpreter","container":"\x"}]}`, "", "invalid_json"},
		{"short unicode escape in tool_choice", `{"tool_choice":"\u12"}`, "", "invalid_json"},
		{"raw control character in a top-level key", "{\"in\x01put\":[]}", "", "invalid_json"},
		{"bad escape in a replayed item", `{"input":[{"type":"code_interpreter_call","code":"\x"}]}`, "", "invalid_json"},
		{"raw newline in a replayed item", "{\"input\":[{\"type\":\"code_interpreter_call\",\"outputs\":[{\"logs\":\"a\nb\"}]}]}", "", "invalid_json"},
		{"unterminated string in the conversation", `{"input":[{"content":"abc\"}]}`, "", "invalid_json"},
		{"bad number in the conversation", `{"input":[{"n":1.}]}`, "", "invalid_json"},
		{"bad literal in the conversation", `{"input":[nul]}`, "", "invalid_json"},
		{"unquoted key in the conversation", `{"input":[{role:"user"}]}`, "", "invalid_json"},
		{"leading zero", `{"temperature":01}`, "", "invalid_json"},
		{"bare minus", `{"temperature":-}`, "", "invalid_json"},
		{"bad literal", `{"stream":tru}`, "", "invalid_json"},
		{"missing colon", `{"stream" true}`, "", "invalid_json"},
		{"unquoted key", `{stream:true}`, "", "invalid_json"},
		{"nesting too deep", `{"a":` + strings.Repeat("[", jsonscan.MaxDepth) + strings.Repeat("]", jsonscan.MaxDepth) + `}`, "", "invalid_json"},
		{
			"two code_interpreter tools",
			`{"tools":[{"type":"code_interpreter","container":{"type":"auto"}},{"type":"function","name":"f"},{"type":"code_interpreter","container":"cntr_1"}]}`,
			"tools[2]", "",
		},
		{
			"responses function named like ours",
			`{"tools":[{"type":"function","name":"f"},{"type":"function","name":"code_interpreter"},{"type":"code_interpreter","container":{"type":"auto"}}]}`,
			"tools[1].name", "",
		},
		{
			"responses custom tool named like ours",
			`{"tools":[{"type":"code_interpreter","container":{"type":"auto"}},{"type":"custom","name":"code_interpreter"}]}`,
			"tools[1].name", "",
		},
		{
			"responses function named like ours, past eight members",
			`{"tools":[{"type":"code_interpreter"},{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"type":"function","name":"x","name":"code_interpreter"}]}`,
			"tools[1].name", "",
		},
		{"tools given twice", `{"tools":[],"tools":[{"type":"code_interpreter"}]}`, "tools", ""},
		{"background with the tool", `{"background":true,"tools":[{"type":"code_interpreter"}],"input":"x"}`, "background", "unsupported_parameter"},
		{"stream given twice", `{"stream":false,"tools":[{"type":"code_interpreter"}],"stream":true}`, "stream", ""},
		{"input given twice", `{"input":[],"tools":[{"type":"code_interpreter"}],"input":"x"}`, "input", ""},
		{"51 file_ids", `{"tools":[{"type":"function","name":"f"},{"type":"code_interpreter","container":{"type":"auto","file_ids":[` +
			strings.TrimSuffix(strings.Repeat(`"file-x",`, 51), ",") + `]}}]}`, "tools[1].container.file_ids", "array_above_max_length"},
		{"file_ids not an array", `{"tools":[{"type":"code_interpreter","container":{"type":"auto","file_ids":"file-1"}}]}`, "tools[0].container.file_ids", "invalid_type"},
	}
	for _, tt := range tests {
		schematest.RunRewriteError(t, RewriteRequest, tt.name, tt.give, tt.wantParam, tt.wantCode)
	}
}

// TestRewriteRequestLooseStrings pins down what RewriteRequest lets through: raw control
// characters and malformed escapes inside strings it does not read. The body goes upstream with
// those bytes as they were and only the rewritten values changed.
func TestRewriteRequestLooseStrings(t *testing.T) {
	tool := `{"type":"code_interpreter"}`
	tests := []struct {
		name string
		give string // TOOL stands for the code_interpreter tool
	}{
		{"raw control characters in an input item", "{\"input\":[{\"role\":\"user\",\"content\":\"\x00\x1f\"}],\"tools\":[TOOL]}"},
		{"bad escape in the input string", `{"input":"\x","tools":[TOOL]}`},
		{"bad escape in instructions", `{"instructions":"\a\u00zz","tools":[TOOL]}`},
		{"bad escape in an item that is not a call", `{"input":[{"type":"message","content":"\q"}],"tools":[TOOL]}`},
		{"escaped quote after a bad escape", `{"input":[{"content":"\q\"\\"}],"tools":[TOOL]}`},
	}
	for _, tt := range tests {
		schematest.RunRewriteLooseStrings(t, RewriteRequest, tt.name, tt.give, tool, dialect.FunctionTool(schema.DefaultFunctionName, schema.DefaultFunctionDescription))
	}
}

func TestRewriteRequestNameClashMessageNamesTheName(t *testing.T) {
	give := `{"tools":[{"type":"code_interpreter"},{"type":"function","name":"py"}]}`
	_, err := RewriteRequest([]byte(give), schema.Options{FunctionName: "py"})
	var re *schema.RequestError
	require.True(t, errors.As(err, &re), "RewriteRequest(%s) error = %v", give, err)
	assert.Contains(t, re.Message, `"py"`, "RewriteRequest(%s) message", give)
	assert.Equal(t, "tools[1].name", re.Param, "RewriteRequest(%s) param", give)
}

// TestRewriteRequestEditsOnlyItsSpans builds a body from pieces with unusual formatting and
// checks that the output is exactly the same pieces with only the rewritten values replaced.
func TestRewriteRequestEditsOnlyItsSpans(t *testing.T) {
	pieces := []struct{ give, want string }{
		{give: "{\r\n  \"model\"\t:\t\"gpt-\\u0035\" ,\n  \"n\": -0.0e-00, \"big\": 123456789012345678901234567890,\n  \"tools\" : [ {\"type\":\"function\",\"name\":\"f\",\"x\":\"\\/\\\"\"}, "},
		{give: `{"type":"code_interpreter","container":{"type":"auto"}}`, want: string(dialect.FunctionTool(schema.DefaultFunctionName, schema.DefaultFunctionDescription))},
		{give: " ] ,\n  \"tool_choice\" :  "},
		{give: `{"type":"code_interpreter"}`, want: `{"type":"function","name":"code_interpreter"}`},
		{give: ",\n  \"stream\":  "},
		{give: "true"}, // the upstream's answer streams through
		{give: ",\n  \"input\" : [ {\"role\":\"user\",\"content\":\"caf\\u00e9 \xe2\x98\x95 \\ud83d\\ude00\"},\n    "},
		{
			give: `{"type":"code_interpreter_call","id":"ci_1","code":"print(\"\u00e9\")\n","container_id":"cntr_1","outputs":[{"type":"logs","logs":"\u00e9\n"}]}`,
			want: `{"type":"function_call","call_id":"ci_1","name":"code_interpreter","arguments":"{\"code\":\"print(\\\"é\\\")\\n\"}"},{"type":"function_call_output","call_id":"ci_1","output":"é\n"}`,
		},
		{give: " ]\n}\n"},
	}
	var give, want strings.Builder
	for _, p := range pieces {
		give.WriteString(p.give)
		if p.want == "" {
			want.WriteString(p.give)
		} else {
			want.WriteString(p.want)
		}
	}
	got, err := RewriteRequest([]byte(give.String()), schema.Options{})
	require.NoError(t, err, "RewriteRequest(%s)", give.String())
	assert.Equal(t, want.String(), string(got.Body), "RewriteRequest(%s)", give.String())
}

// reqSDKInput parses each item of a Responses body's input list with the SDK, one at a time: the
// SDK silently drops a whole list when one item has no "type". Items without a type must be
// role/content messages; they come back as nil.
func reqSDKInput(t *testing.T, body []byte) []*responses.ResponseInputItemUnionParam {
	t.Helper()
	var top struct {
		Input json.RawMessage `json:"input"`
	}
	require.NoError(t, json.Unmarshal(body, &top), "unmarshal %s", body)
	if len(top.Input) == 0 || top.Input[0] != '[' {
		return nil
	}
	var list []json.RawMessage
	require.NoError(t, json.Unmarshal(top.Input, &list), "unmarshal input of %s", body)
	items := make([]*responses.ResponseInputItemUnionParam, len(list))
	for i, raw := range list {
		var probe struct {
			Type *string `json:"type"`
			Role *string `json:"role"`
		}
		require.NoError(t, json.Unmarshal(raw, &probe), "unmarshal input[%d] %s", i, raw)
		if probe.Type == nil {
			require.NotNil(t, probe.Role, "input[%d] %s has neither type nor role", i, raw)
			continue
		}
		var item responses.ResponseInputItemUnionParam
		require.NoError(t, json.Unmarshal(raw, &item), "unmarshal input[%d] %s as ResponseInputItemUnionParam", i, raw)
		items[i] = &item
	}
	return items
}

// TestRewriteRequestParsesWithSDK checks that the rewritten bodies parse as the SDK's request
// params with the function tool in the code_interpreter tool's place.
func TestRewriteRequestParsesWithSDK(t *testing.T) {
	tests := []struct {
		name       string
		wantChoice string // "function", "allowed" or "" (left as the client sent it)
	}{
		{"responses_tool_first", ""},
		{"responses_tool_middle", "function"},
		{"responses_tool_last", "function"},
		{"responses_allowed_tools_required", "allowed"},
		{"responses_replay", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			give := schematest.ReadFile(t, "request/"+tt.name+".give.json")
			got, err := RewriteRequest(give, schema.Options{})
			require.NoError(t, err, "RewriteRequest(%s)", tt.name)
			var names []string
			var p responses.ResponseNewParams
			require.NoError(t, json.Unmarshal(got.Body, &p), "unmarshal RewriteRequest(%s) as ResponseNewParams", tt.name)
			for _, tool := range p.Tools {
				assert.Nil(t, tool.OfCodeInterpreter, "RewriteRequest(%s) kept a code_interpreter tool", tt.name)
				if tool.OfFunction != nil {
					names = append(names, tool.OfFunction.Name)
					if tool.OfFunction.Name == schema.DefaultFunctionName {
						assert.Equal(t, []any{"code"}, tool.OfFunction.Parameters["required"], "RewriteRequest(%s) parameters", tt.name)
					}
				}
			}
			// A call that streams keeps the client's stream_options, one that does not has none.
			want := ""
			if gjson.GetBytes(give, "stream").Bool() {
				want = gjson.GetBytes(give, "stream_options").Raw
			}
			assert.Equal(t, want, gjson.GetBytes(got.Body, "stream_options").Raw, "RewriteRequest(%s) stream_options", tt.name)
			for i, item := range reqSDKInput(t, got.Body) {
				assert.True(t, item == nil || item.OfCodeInterpreterCall == nil, "RewriteRequest(%s) kept code_interpreter_call input[%d]", tt.name, i)
			}
			assert.Contains(t, names, schema.DefaultFunctionName, "RewriteRequest(%s) function names", tt.name)

			// The SDK's param unions do not tell tool_choice forms apart when decoding, so the
			// choice is checked as plain JSON.
			var top map[string]any
			require.NoError(t, json.Unmarshal(got.Body, &top), "unmarshal RewriteRequest(%s)", tt.name)
			fn := map[string]any{"type": "function", "name": schema.DefaultFunctionName}
			switch choice, _ := top["tool_choice"].(map[string]any); tt.wantChoice {
			case "function":
				assert.Equal(t, fn, choice, "RewriteRequest(%s) tool_choice", tt.name)
			case "allowed":
				holder := choice
				require.NotNil(t, holder, "RewriteRequest(%s) tool_choice %v", tt.name, choice)
				assert.Contains(t, holder["tools"], fn, "RewriteRequest(%s) allowed tools", tt.name)
				assert.NotContains(t, holder["tools"], map[string]any{"type": "code_interpreter"}, "RewriteRequest(%s) allowed tools", tt.name)
			}
		})
	}
}

func TestRewriteRequestReplayParsesWithSDK(t *testing.T) {
	got, err := RewriteRequest(schematest.ReadFile(t, "request/responses_replay.give.json"), schema.Options{})
	require.NoError(t, err, "RewriteRequest(responses_replay)")
	items := reqSDKInput(t, got.Body)
	require.Len(t, items, 12, "RewriteRequest(responses_replay) input items")
	for _, i := range []int{2, 8, 10} {
		require.NotNil(t, items[i], "RewriteRequest(responses_replay) input[%d]", i)
		require.NotNil(t, items[i].OfFunctionCall, "RewriteRequest(responses_replay) input[%d] is a function_call", i)
		require.NotNil(t, items[i+1].OfFunctionCallOutput, "RewriteRequest(responses_replay) input[%d] is a function_call_output", i+1)
		assert.Equal(t, items[i].OfFunctionCall.CallID, items[i+1].OfFunctionCallOutput.CallID.Value, "RewriteRequest(responses_replay) input[%d] pair", i)
		code, err := openai.ParseArguments(items[i].OfFunctionCall.Arguments)
		assert.NoError(t, err, "RewriteRequest(responses_replay) input[%d] arguments", i)
		assert.NotContains(t, code, "\\", "RewriteRequest(responses_replay) input[%d] code", i)
	}
	assert.Equal(t, "mean 7.0123\n[1 image was shown to the user]", items[3].OfFunctionCallOutput.Output.OfString.Value, "RewriteRequest(responses_replay) rendered output")
}

func TestRewriteRequestEscapedKeys(t *testing.T) {
	give := `{"t\u006fols":[{"type":"code_interpreter"}],"str\u0065am":true,"\u0073tream_options":{},"metadata":{"session\u005fid":"s\u0031"}}`
	want := `{"t\u006fols":[` + string(dialect.FunctionTool(schema.DefaultFunctionName, schema.DefaultFunctionDescription)) + `],"str\u0065am":true,"\u0073tream_options":{},"metadata":{"session\u005fid":"s\u0031"}}`
	got, err := RewriteRequest([]byte(give), schema.Options{})
	require.NoError(t, err, "RewriteRequest(%s)", give)
	assert.Equal(t, want, string(got.Body), "RewriteRequest(%s)", give)
	assert.True(t, got.Found && got.Stream, "RewriteRequest(%s) found %v, stream %v", give, got.Found, got.Stream)
	assert.Equal(t, "s1", got.SessionID, "RewriteRequest(%s) session", give)
	assert.Equal(t, "{}", string(got.StreamOptions), "RewriteRequest(%s) stream_options", give)
}

func TestScanRequestItems(t *testing.T) {
	tests := []struct {
		name string
		give string
		want []int // indexes of the reported input items
	}{
		{"plain call", `{"input":[{"type":"message"},{"type":"code_interpreter_call","id":"ci"}]}`, []int{1}},
		{"escaped type value", `{"input":[{"type":"code\u005finterpreter_call"}]}`, []int{0}},
		{"escaped key", `{"input":[{"t\u0079pe":"code_interpreter_call"}]}`, []int{0}},
		{"escaped key, other type", `{"input":[{"t\u0079pe":"x"}]}`, nil},
		{"escaped other key", `{"input":[{"r\u006fle":"code_interpreter_call"}]}`, nil},
		{"malformed escape in the type", `{"input":[{"type":"code_interpreter_cal\u6c"}]}`, nil},
		{"other escapes", `{"input":[{"type":"message","content":"caf\u00e9 \u2014 \u0041"}]}`, nil},
		{"escaped backslash then text", `{"input":["\\u0063"]}`, nil},
		{"type of a nested object", `{"input":[{"content":{"type":"code_interpreter_call"}}]}`, nil},
		{"type as a value", `{"input":[{"role":"type","content":"code_interpreter_call"}]}`, nil},
		{"type not a string", `{"input":[{"type":["code_interpreter_call"]}]}`, nil},
		{"scalars and arrays counted", `{"input":[1,"x",[{"type":"code_interpreter_call"}],{},{"type":"code_interpreter_call"}]}`, []int{4}},
		{"a later type still counts", `{"input":[{"type":"message","type":"code_interpreter_call"}]}`, []int{0}},
		{"input not at top level", `{"x":{"input":[{"type":"code_interpreter_call"}]}}`, nil},
		{"input an object", `{"input":{"a":{"type":"code_interpreter_call"}}}`, nil},
		{"input a string", `{"input":"code_interpreter_call"}`, nil},
		{"escaped input key", `{"in\u0070ut":[{"type":"code_interpreter_call"}]}`, []int{0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sc, err := jsonscan.Scan([]byte(tt.give), dialect.Spec, nil)
			require.NoError(t, err, "Scan(%s)", tt.give)
			var got []int
			for _, it := range sc.Items {
				got = append(got, it.Index)
				assert.True(t, json.Valid([]byte(tt.give)[it.Start:it.End]), "Scan(%s) item %d span %d:%d", tt.give, it.Index, it.Start, it.End)
			}
			assert.Equal(t, tt.want, got, "Scan(%s) items", tt.give)
		})
	}
}

func TestRewriteRequestContinuation(t *testing.T) {
	tests := []struct {
		name             string
		give             string
		wantPrev, wantCv string
	}{
		{"previous response", `{"previous_response_id":"resp_9","input":"x","tools":[{"type":"code_interpreter"}]}`, "resp_9", ""},
		{"conversation string", `{"conversation":"conv_1","input":"x"}`, "", "conv_1"},
		{"conversation object", `{"conversation":{"id":"conv_2"},"input":"x","tools":[{"type":"code_interpreter"}]}`, "", "conv_2"},
		{"null", `{"conversation":null,"previous_response_id":null}`, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := RewriteRequest([]byte(tt.give), schema.Options{})
			require.NoError(t, err, "RewriteRequest(%s)", tt.give)
			assert.Equal(t, tt.wantPrev, got.PreviousResponseID, "PreviousResponseID of %s", tt.give)
			assert.Equal(t, tt.wantCv, got.ConversationID, "ConversationID of %s", tt.give)
		})
	}
}

// A client's stream is kept for the first call unless its answer is replayed (WholeFirst).
func TestRewriteRequestWholeFirst(t *testing.T) {
	give := []byte(`{"model":"m","stream":true,"stream_options":{"include_obfuscation":false},"tools":[{"type":"code_interpreter"}]}`)
	for _, tt := range []struct {
		whole bool
		want  bool
	}{{whole: false, want: true}, {whole: true, want: false}} {
		got, err := RewriteRequest(give, schema.Options{WholeFirst: tt.whole})
		require.NoError(t, err)
		assert.True(t, got.Stream, "the client streams")
		assert.Equal(t, tt.want, gjson.GetBytes(got.Body, "stream").Bool(), "WholeFirst %v: %s", tt.whole, got.Body)
		assert.Equal(t, !tt.whole, gjson.GetBytes(got.Body, "stream_options").Exists(), "the client's stream_options with a stream only: %s", got.Body)
	}
}
