package schema_test

import (
	"bytes"
	"encoding/json"
	"errors"
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

// reqUpdateGolden rewrites the want files of the request, turn and follow-up golden tests from
// what the code produces; review the diff before committing it.
var reqUpdateGolden = flag.Bool("update-rewrite-golden", false, "rewrite the golden want files of RewriteRequest, ParseTurn and FollowUp")

// reqReadFile returns testdata/<path>.
func reqReadFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", path))
	require.NoError(t, err, "read testdata/%s", path)
	return b
}

// reqCheckGolden compares got with testdata/<path>, or writes it there under -update-rewrite-golden.
func reqCheckGolden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *reqUpdateGolden {
		require.NoError(t, os.WriteFile(filepath.Join("testdata", path), got, 0o644), "write testdata/%s", path)
		return
	}
	want := reqReadFile(t, path)
	assert.Equal(t, string(want), string(got), "body differs from testdata/%s", path)
}

const reqTestTool = `{"type":"code_interpreter","container":{"type":"auto"}}`

func TestRewriteRequestGolden(t *testing.T) {
	tests := []struct {
		name    string
		surface Surface
		opts    schema.Options
		want    schema.Request // Body is compared with testdata/request/<name>.want.json instead
	}{
		{
			name: "responses_tool_first", surface: Responses,
			want: schema.Request{Found: true, Tool: []byte(`{"type": "code_interpreter", "container": "cntr_68c2e6f380d8"}`), ContainerID: "cntr_68c2e6f380d8", ToolChoice: []byte(`"auto"`)},
		},
		{
			name: "responses_tool_middle", surface: Responses,
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
			name: "responses_tool_last", surface: Responses,
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
			name: "responses_allowed_tools_required", surface: Responses,
			want: schema.Request{
				Found:        true,
				Tool:         []byte(reqTestTool),
				ToolChoice:   []byte(`{"type":"allowed_tools","mode":"required","tools":[{"type":"function","name":"lookup"},{"type":"code_interpreter"}]}`),
				ForcedChoice: true,
				LaterChoice:  []byte(`{"type":"allowed_tools","mode":"auto","tools":[{"type":"function","name":"lookup"},{"type":"function","name":"code_interpreter"}]}`),
			},
		},
		{
			name: "responses_allowed_tools_auto", surface: Responses,
			want: schema.Request{
				Found:      true,
				Tool:       []byte(reqTestTool),
				ToolChoice: []byte(`{"type":"allowed_tools","mode":"auto","tools":[{"type":"hosted_tool","name":"code_interpreter"}, {"type":"web_search"}]}`),
			},
		},
		{
			name: "responses_choice_client_function", surface: Responses,
			want: schema.Request{Found: true, Tool: []byte(reqTestTool), ToolChoice: []byte(`{"type":"function","name":"get_weather"}`)},
		},
		{
			name: "responses_choice_none", surface: Responses,
			want: schema.Request{Found: true, Tool: []byte(reqTestTool), ToolChoice: []byte(`"none"`)},
		},
		{
			name: "responses_choice_required", surface: Responses,
			want: schema.Request{Found: true, Tool: []byte(reqTestTool), ToolChoice: []byte(`"required"`), ForcedChoice: true},
		},
		{
			name: "responses_choice_our_function", surface: Responses,
			want: schema.Request{Found: true, Tool: []byte(reqTestTool), ToolChoice: []byte(`{"type":"function","name":"code_interpreter"}`), ForcedChoice: true},
		},
		{
			name: "responses_replay", surface: Responses,
			want: schema.Request{
				Found:                true,
				Tool:                 []byte(`{"type": "code_interpreter", "container": {"type": "auto"}}`),
				ReplayedContainerIDs: []string{"cntr_1", "cntr_2"},
				IncludeOutputs:       true,
			},
		},
		{
			name: "responses_custom_name", surface: Responses,
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
			name: "responses_escaped_type", surface: Responses,
			want: schema.Request{
				Found:        true,
				Tool:         []byte(`{"t\u0079pe":"code\u005finterpreter","container":{"type":"auto","memory_limit":"16g"}}`),
				MemoryLimit:  "16g",
				ToolChoice:   []byte(`{"type":"code_interpreter"}`),
				ForcedChoice: true,
			},
		},
		{
			name: "responses_stream_options_first", surface: Responses,
			want: schema.Request{Found: true, Tool: []byte(`{"type": "code_interpreter", "container": {"type": "auto"}}`), StreamOptions: []byte(`{"include_obfuscation": false}`)},
		},
		{
			name: "chat_tool_first", surface: Chat,
			want: schema.Request{Found: true, Tool: []byte(reqTestTool), ToolChoice: []byte(`{"type":"code_interpreter"}`), ForcedChoice: true},
		},
		{
			name: "chat_tool_middle", surface: Chat,
			want: schema.Request{
				Found:         true,
				Tool:          []byte(`{"type": "code_interpreter"}`),
				ToolChoice:    []byte(`"required"`),
				ForcedChoice:  true,
				Stream:        true,
				StreamOptions: []byte(`{"include_usage": true}`),
			},
		},
		{
			name: "chat_tool_last", surface: Chat,
			want: schema.Request{
				Found:        true,
				Tool:         []byte(`{"type":"code_interpreter","container":"cntr_9"}`),
				ContainerID:  "cntr_9",
				ToolChoice:   []byte(`{"type":"allowed_tools","allowed_tools":{"mode":"required","tools":[{"type":"function","function":{"name":"a"}},{"type":"code_interpreter"}]}}`),
				ForcedChoice: true,
				LaterChoice:  []byte(`{"type":"allowed_tools","allowed_tools":{"mode":"auto","tools":[{"type":"function","function":{"name":"a"}},{"type":"function","function":{"name":"code_interpreter"}}]}}`),
				SessionID:    "s-1",
			},
		},
		{
			name: "chat_choice_client_function", surface: Chat,
			want: schema.Request{Found: true, Tool: []byte(`{"type":"code_interpreter"}`), ToolChoice: []byte(`{"type":"function","function":{"name":"a"}}`)},
		},
		{
			name: "chat_choice_auto", surface: Chat,
			want: schema.Request{Found: true, Tool: []byte(`{"type":"code_interpreter"}`), ToolChoice: []byte(`"auto"`)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			give := reqReadFile(t, "request/"+tt.name+".give.json")
			got, err := RewriteRequest(tt.surface, give, tt.opts)
			require.NoError(t, err, "RewriteRequest(%s)", tt.name)
			reqCheckGolden(t, "request/"+tt.name+".want.json", got.Body)
			assert.True(t, json.Valid(got.Body), "RewriteRequest(%s) body is not valid JSON", tt.name)
			got.Body = nil
			assert.Equal(t, tt.want, got, "RewriteRequest(%s)", tt.name)
		})
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
			got, err := RewriteRequest(Responses, []byte(tt.give), schema.Options{})
			require.NoError(t, err, "RewriteRequest(%s)", tt.give)
			assert.Equal(t, tt.wantFiles, got.FileIDs, "FileIDs of %s", tt.give)
			assert.Equal(t, tt.wantInclude, got.IncludeOutputs, "IncludeOutputs of %s", tt.give)
		})
	}
}

func TestRewriteRequestUnchanged(t *testing.T) {
	tests := []struct {
		name    string
		surface Surface
		give    []byte
	}{
		{"responses file, replayed item and hosted choice without the tool", Responses, reqReadFile(t, "request/responses_no_tool.give.json")},
		{"chat file, a client function named like ours", Chat, reqReadFile(t, "request/chat_no_tool.give.json")},
		{"no tools", Responses, []byte(`{"input":"hi","stream":true,"stream_options":{"include_obfuscation":false}}`)},
		{"tools null", Chat, []byte(`{"messages":[],"tools":null}`)},
		{"tools not a list", Responses, []byte(`{"tools":{"type":"code_interpreter"}}`)},
		{"tool type nested deeper", Responses, []byte(`{"tools":[{"function":{"type":"code_interpreter"}}]}`)},
		{"tool type not a string", Responses, []byte(`{"tools":[{"type":["code_interpreter"]}]}`)},
		{"top level array", Responses, []byte(` [{"tools":[{"type":"code_interpreter"}]}] `)},
		{"top level string", Chat, []byte(`"code_interpreter"`)},
		{"chat surface ignores nothing but tools", Chat, []byte("{\n\"messages\" : [ ] ,\"x\":1e5}\n")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := RewriteRequest(tt.surface, tt.give, schema.Options{})
			require.NoError(t, err, "RewriteRequest(%s, %s)", tt.surface, tt.give)
			assert.Equal(t, schema.Request{Body: tt.give}, got, "RewriteRequest(%s, %s)", tt.surface, tt.give)
			assert.Same(t, &tt.give[0], &got.Body[0], "RewriteRequest(%s, %s) copied the body", tt.surface, tt.give)
		})
	}
}

func TestRewriteRequestErrors(t *testing.T) {
	tests := []struct {
		name      string
		surface   Surface
		give      string
		wantParam string
		wantCode  string
	}{
		{"empty body", Responses, ``, "", "invalid_json"},
		{"whitespace only", Chat, " \n", "", "invalid_json"},
		{"truncated", Responses, `{"tools":[{"type":"code_interpreter"}]`, "", "invalid_json"},
		{"trailing comma", Chat, `{"tools":[],}`, "", "invalid_json"},
		{"trailing data", Responses, `{"tools":[]} {}`, "", "invalid_json"},
		{"single quotes", Responses, `{'tools':[]}`, "", "invalid_json"},
		{"bad escape in a tool", Responses, `{"tools":[{"type":"code_interpreter","container":"\x"}]}`, "", "invalid_json"},
		{"short unicode escape in tool_choice", Responses, `{"tool_choice":"\u12"}`, "", "invalid_json"},
		{"raw newline in metadata", Chat, "{\"metadata\":{\"session_id\":\"a\nb\"}}", "", "invalid_json"},
		{"raw tab in stream_options", Chat, "{\"stream_options\":{\"x\":\"\t\"}}", "", "invalid_json"},
		{"bad escape in a top-level key", Chat, `{"mod\el":"x"}`, "", "invalid_json"},
		{"raw control character in a top-level key", Responses, "{\"in\x01put\":[]}", "", "invalid_json"},
		{"bad escape in a tools array without our tool", Chat, `{"tools":[{"type":"function","function":{"name":"\q"}}]}`, "", "invalid_json"},
		{"bad escape in a replayed item", Responses, `{"input":[{"type":"code_interpreter_call","code":"\x"}]}`, "", "invalid_json"},
		{"raw newline in a replayed item", Responses, "{\"input\":[{\"type\":\"code_interpreter_call\",\"outputs\":[{\"logs\":\"a\nb\"}]}]}", "", "invalid_json"},
		{"unterminated string in the conversation", Responses, `{"input":[{"content":"abc\"}]}`, "", "invalid_json"},
		{"unbalanced brackets in the conversation", Chat, `{"messages":[{"content":"a"]}`, "", "invalid_json"},
		{"missing comma in the conversation", Chat, `{"messages":[{"role":"user" "content":"a"}]}`, "", "invalid_json"},
		{"bad number in the conversation", Responses, `{"input":[{"n":1.}]}`, "", "invalid_json"},
		{"bad literal in the conversation", Responses, `{"input":[nul]}`, "", "invalid_json"},
		{"unquoted key in the conversation", Responses, `{"input":[{role:"user"}]}`, "", "invalid_json"},
		{"leading zero", Responses, `{"temperature":01}`, "", "invalid_json"},
		{"bare minus", Responses, `{"temperature":-}`, "", "invalid_json"},
		{"bad literal", Responses, `{"stream":tru}`, "", "invalid_json"},
		{"missing colon", Responses, `{"stream" true}`, "", "invalid_json"},
		{"unquoted key", Responses, `{stream:true}`, "", "invalid_json"},
		{"nesting too deep", Responses, `{"a":` + strings.Repeat("[", jsonscan.MaxDepth) + strings.Repeat("]", jsonscan.MaxDepth) + `}`, "", "invalid_json"},
		{
			"two code_interpreter tools", Responses,
			`{"tools":[{"type":"code_interpreter","container":{"type":"auto"}},{"type":"function","name":"f"},{"type":"code_interpreter","container":"cntr_1"}]}`,
			"tools[2]", "",
		},
		{
			"responses function named like ours", Responses,
			`{"tools":[{"type":"function","name":"f"},{"type":"function","name":"code_interpreter"},{"type":"code_interpreter","container":{"type":"auto"}}]}`,
			"tools[1].name", "",
		},
		{
			"responses custom tool named like ours", Responses,
			`{"tools":[{"type":"code_interpreter","container":{"type":"auto"}},{"type":"custom","name":"code_interpreter"}]}`,
			"tools[1].name", "",
		},
		{
			"chat function named like ours", Chat,
			`{"messages":[],"tools":[{"type":"code_interpreter"},{"type":"function","function":{"name":"code_\u0069nterpreter"}}]}`,
			"tools[1].function.name", "",
		},
		{
			"chat custom tool named like ours", Chat,
			`{"messages":[],"tools":[{"type":"custom","custom":{"name":"code_interpreter"}},{"type":"code_interpreter"}]}`,
			"tools[0].custom.name", "",
		},
		{
			"chat function named like ours, past eight members", Chat,
			`{"messages":[],"tools":[{"type":"code_interpreter"},{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"type":"function","function":{"name":"code_interpreter"}}]}`,
			"tools[1].function.name", "",
		},
		{
			"responses function named like ours, past eight members", Responses,
			`{"tools":[{"type":"code_interpreter"},{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"type":"function","name":"x","name":"code_interpreter"}]}`,
			"tools[1].name", "",
		},
		{"tools given twice", Responses, `{"tools":[],"tools":[{"type":"code_interpreter"}]}`, "tools", ""},
		{"tool_choice given twice", Chat, `{"tools":[{"type":"code_interpreter"}],"tool_choice":"auto","tool_choice":"none"}`, "tool_choice", ""},
		{"stream given twice", Responses, `{"stream":false,"tools":[{"type":"code_interpreter"}],"stream":true}`, "stream", ""},
		{"input given twice", Responses, `{"input":[],"tools":[{"type":"code_interpreter"}],"input":"x"}`, "input", ""},
		{"51 file_ids", Responses, `{"tools":[{"type":"function","name":"f"},{"type":"code_interpreter","container":{"type":"auto","file_ids":[` +
			strings.TrimSuffix(strings.Repeat(`"file-x",`, 51), ",") + `]}}]}`, "tools[1].container.file_ids", "array_above_max_length"},
		{"file_ids not an array", Responses, `{"tools":[{"type":"code_interpreter","container":{"type":"auto","file_ids":"file-1"}}]}`, "tools[0].container.file_ids", "invalid_type"},
		{"file id not a string", Chat, `{"tools":[{"type":"code_interpreter","container":{"type":"auto","file_ids":["file-1",2]}}]}`, "tools[0].container.file_ids[1]", "invalid_type"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := RewriteRequest(tt.surface, []byte(tt.give), schema.Options{})
			var re *schema.RequestError
			require.True(t, errors.As(err, &re), "RewriteRequest(%s, %q) error = %v, want a *RequestError", tt.surface, tt.give, err)
			assert.Equal(t, 400, re.HTTPStatus(), "RewriteRequest(%s, %q) status", tt.surface, tt.give)
			assert.Equal(t, tt.wantParam, re.Param, "RewriteRequest(%s, %q) param", tt.surface, tt.give)
			assert.Equal(t, tt.wantCode, re.Code, "RewriteRequest(%s, %q) code", tt.surface, tt.give)
			assert.NotEmpty(t, re.Message, "RewriteRequest(%s, %q) message", tt.surface, tt.give)
		})
	}
}

// TestRewriteRequestLooseStrings pins down what RewriteRequest lets through: raw control
// characters and malformed escapes inside strings it does not read. The body goes upstream with
// those bytes as they were and only the rewritten values changed.
func TestRewriteRequestLooseStrings(t *testing.T) {
	tool := `{"type":"code_interpreter"}`
	tests := []struct {
		name    string
		surface Surface
		give    string // TOOL stands for the code_interpreter tool
	}{
		{"raw newline in a message", Chat, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\nb\"}],\"tools\":[TOOL]}"},
		{"raw control characters in an input item", Responses, "{\"input\":[{\"role\":\"user\",\"content\":\"\x00\x1f\"}],\"tools\":[TOOL]}"},
		{"bad escape in the input string", Responses, `{"input":"\x","tools":[TOOL]}`},
		{"short unicode escape in a message key", Chat, `{"messages":[{"\u12":"x"}],"tools":[TOOL]}`},
		{"bad escape in instructions", Responses, `{"instructions":"\a\u00zz","tools":[TOOL]}`},
		{"bad escape in an item that is not a call", Responses, `{"input":[{"type":"message","content":"\q"}],"tools":[TOOL]}`},
		{"escaped quote after a bad escape", Responses, `{"input":[{"content":"\q\"\\"}],"tools":[TOOL]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			give := []byte(strings.Replace(tt.give, "TOOL", tool, 1))
			require.False(t, json.Valid(give), "%s is valid JSON; the case needs a malformed string", give)
			want := strings.Replace(tt.give, "TOOL", string(FunctionTool(tt.surface, schema.DefaultFunctionName, schema.DefaultFunctionDescription)), 1)
			got, err := RewriteRequest(tt.surface, give, schema.Options{})
			require.NoError(t, err, "RewriteRequest(%s, %q)", tt.surface, give)
			assert.True(t, got.Found, "RewriteRequest(%s, %q) found", tt.surface, give)
			assert.Equal(t, want, string(got.Body), "RewriteRequest(%s, %q)", tt.surface, give)

			withoutTool := bytes.Replace(give, []byte(tool), nil, 1)
			got, err = RewriteRequest(tt.surface, withoutTool, schema.Options{})
			require.NoError(t, err, "RewriteRequest(%s, %q)", tt.surface, withoutTool)
			assert.Equal(t, schema.Request{Body: withoutTool}, got, "RewriteRequest(%s, %q)", tt.surface, withoutTool)
		})
	}
}

func TestReqObject(t *testing.T) {
	many := `{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"type":"x","t\u0079pe":"y","x":{"k":[1,"}"]}}`
	tests := []struct {
		name      string
		give      string
		key       string
		wantValue string // "" when absent
	}{
		{"first", `{"type":"function","name":"f"}`, "type", `"function"`},
		{"last of repeats", `{"type":"a","name":"f","type":"b"}`, "type", `"b"`},
		{"escaped key", `{"t\u0079pe" : "a" }`, "type", `"a"`},
		{"absent", `{"name":"f"}`, "type", ""},
		{"empty", `{ }`, "type", ""},
		{"nested value", `{"function":{"name":"f","parameters":{"a":"}"}}}`, "function", `{"name":"f","parameters":{"a":"}"}}`},
		{"past the kept members", many, "type", `"y"`},
		{"past the kept members, nested", many, "x", `{"k":[1,"}"]}`},
		{"kept member of a long object", many, "c", `3`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := []byte(tt.give + `,"tail"]`)
			var o jsonscan.Object
			end := o.Read(b, 0)
			assert.Equal(t, len(tt.give), end, "Object.read(%s) end", tt.give)
			var got, gotRaw string
			if sp := o.Field(tt.key); sp.OK() {
				got = string(b[sp.Start:sp.End])
			}
			if sp := o.FieldRaw(jsonscan.AppendString(nil, tt.key)); sp.OK() {
				gotRaw = string(b[sp.Start:sp.End])
			}
			assert.Equal(t, tt.wantValue, got, "Object(%s).field(%q)", tt.give, tt.key)
			assert.Equal(t, tt.wantValue, gotRaw, "Object(%s).fieldRaw(%q)", tt.give, tt.key)
		})
	}
}

func TestRewriteRequestNameClashMessageNamesTheName(t *testing.T) {
	give := `{"tools":[{"type":"code_interpreter"},{"type":"function","name":"py"}]}`
	_, err := RewriteRequest(Responses, []byte(give), schema.Options{FunctionName: "py"})
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
		{give: `{"type":"code_interpreter","container":{"type":"auto"}}`, want: string(FunctionTool(Responses, schema.DefaultFunctionName, schema.DefaultFunctionDescription))},
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
	got, err := RewriteRequest(Responses, []byte(give.String()), schema.Options{})
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
		surface    Surface
		wantChoice string // "function", "allowed" or "" (left as the client sent it)
	}{
		{"responses_tool_first", Responses, ""},
		{"responses_tool_middle", Responses, "function"},
		{"responses_tool_last", Responses, "function"},
		{"responses_allowed_tools_required", Responses, "allowed"},
		{"responses_replay", Responses, ""},
		{"chat_tool_first", Chat, "function"},
		{"chat_tool_middle", Chat, ""},
		{"chat_tool_last", Chat, "allowed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			give := reqReadFile(t, "request/"+tt.name+".give.json")
			got, err := RewriteRequest(tt.surface, give, schema.Options{})
			require.NoError(t, err, "RewriteRequest(%s)", tt.name)
			var names []string
			if tt.surface == Responses {
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
			} else {
				var p openai.ChatCompletionNewParams
				require.NoError(t, json.Unmarshal(got.Body, &p), "unmarshal RewriteRequest(%s) as ChatCompletionNewParams", tt.name)
				require.NotEmpty(t, p.Messages, "RewriteRequest(%s) messages", tt.name)
				for _, tool := range p.Tools {
					if tool.OfFunction != nil {
						names = append(names, tool.OfFunction.Function.Name)
					}
				}
				// A stream is sent upstream asking for usage, whatever the client's stream_options.
				var stream struct {
					Stream bool `json:"stream"`
				}
				require.NoError(t, json.Unmarshal(got.Body, &stream), "unmarshal RewriteRequest(%s) stream", tt.name)
				assert.Equal(t, stream.Stream, p.StreamOptions.IncludeUsage.Value, "RewriteRequest(%s) stream_options", tt.name)
			}
			assert.Contains(t, names, schema.DefaultFunctionName, "RewriteRequest(%s) function names", tt.name)

			// The SDK's param unions do not tell tool_choice forms apart when decoding, so the
			// choice is checked as plain JSON.
			var top map[string]any
			require.NoError(t, json.Unmarshal(got.Body, &top), "unmarshal RewriteRequest(%s)", tt.name)
			fn := map[string]any{"type": "function", "name": schema.DefaultFunctionName}
			if tt.surface == Chat {
				fn = map[string]any{"type": "function", "function": map[string]any{"name": schema.DefaultFunctionName}}
			}
			switch choice, _ := top["tool_choice"].(map[string]any); tt.wantChoice {
			case "function":
				assert.Equal(t, fn, choice, "RewriteRequest(%s) tool_choice", tt.name)
			case "allowed":
				holder := choice
				if tt.surface == Chat {
					holder, _ = choice["allowed_tools"].(map[string]any)
				}
				require.NotNil(t, holder, "RewriteRequest(%s) tool_choice %v", tt.name, choice)
				assert.Contains(t, holder["tools"], fn, "RewriteRequest(%s) allowed tools", tt.name)
				assert.NotContains(t, holder["tools"], map[string]any{"type": "code_interpreter"}, "RewriteRequest(%s) allowed tools", tt.name)
			}
		})
	}
}

func TestRewriteRequestReplayParsesWithSDK(t *testing.T) {
	got, err := RewriteRequest(Responses, reqReadFile(t, "request/responses_replay.give.json"), schema.Options{})
	require.NoError(t, err, "RewriteRequest(responses_replay)")
	items := reqSDKInput(t, got.Body)
	require.Len(t, items, 12, "RewriteRequest(responses_replay) input items")
	for _, i := range []int{2, 8, 10} {
		require.NotNil(t, items[i], "RewriteRequest(responses_replay) input[%d]", i)
		require.NotNil(t, items[i].OfFunctionCall, "RewriteRequest(responses_replay) input[%d] is a function_call", i)
		require.NotNil(t, items[i+1].OfFunctionCallOutput, "RewriteRequest(responses_replay) input[%d] is a function_call_output", i+1)
		assert.Equal(t, items[i].OfFunctionCall.CallID, items[i+1].OfFunctionCallOutput.CallID.Value, "RewriteRequest(responses_replay) input[%d] pair", i)
		code, err := shared.ParseArguments(items[i].OfFunctionCall.Arguments)
		assert.NoError(t, err, "RewriteRequest(responses_replay) input[%d] arguments", i)
		assert.NotContains(t, code, "\\", "RewriteRequest(responses_replay) input[%d] code", i)
	}
	assert.Equal(t, "mean 7.0123\n[1 image was shown to the user]", items[3].OfFunctionCallOutput.Output.OfString.Value, "RewriteRequest(responses_replay) rendered output")
}

// TestScanTopAgreesWithEncodingJSON checks the validator against encoding/json on tricky inputs.
func TestScanTopAgreesWithEncodingJSON(t *testing.T) {
	gives := []string{
		`{}`, `[]`, `""`, `0`, `-0`, `-0.5e+10`, `1E5`, `1.`, `.5`, `+1`, `01`, `-`, `1e`, `1e+`,
		`true`, `false`, `null`, `nul`, `truex`, `[1,]`, `[,1]`, `{"a":1,}`, `{"a"}`, `{"a":}`,
		`{"a":1 "b":2}`, `["\u00e9\ud83d\ude00"]`, `["\uZZZZ"]`, `["\a"]`, "[\"\x01\"]", "[\"\x7f\xff\"]",
		`[[[[]]]]`, `[[[[]]]`, `{"a":{"b":{"c":[]}}}`, ` {"a" : [ 1 , { } ] } `, "\t[]\r\n", `[] []`,
		`{"a":"\\"}`, `{"a":"\\\"}`, `{"\"":1}`, `"\/"`, `[1.5e-3,-2]`, `[1.e3]`, `[-01]`,
	}
	for _, give := range gives {
		_, _, err := jsonscan.ScanTop([]byte(give))
		assert.Equal(t, json.Valid([]byte(give)), err == nil, "ScanTop(%q) error = %v", give, err)
	}
}

func TestScanTopMembers(t *testing.T) {
	give := []byte(` { "a" : 1 , "b\u0021":{"x":[1,{"y":2}]},"c":"s" , "d":[] } `)
	members, isObject, err := jsonscan.ScanTop(give)
	require.NoError(t, err, "ScanTop(%s)", give)
	require.True(t, isObject, "ScanTop(%s) isObject", give)
	var got []string
	for _, m := range members {
		key, ok := jsonscan.DecodeString(give[m.KeyStart:m.KeyEnd])
		require.True(t, ok, "ScanTop(%s) key %s", give, give[m.KeyStart:m.KeyEnd])
		got = append(got, key+"="+string(give[m.ValStart:m.ValEnd]))
	}
	assert.Equal(t, []string{`a=1`, `b!={"x":[1,{"y":2}]}`, `c="s"`, `d=[]`}, got, "ScanTop(%s) members", give)
}

func TestDecodeStringAgreesWithEncodingJSON(t *testing.T) {
	gives := []string{
		`""`, `"plain"`, `"caf\u00e9"`, `"\ud83d\ude00"`, `"\ud83d"`, `"\ude00"`, `"\ud83dx"`, `"\ud83d\u0041"`,
		`"\ud83d\ud83d\ude00"`, `"\"\\\/\b\f\n\r\t"`, "\"\xff\xfe\"", "\"a\xe2\x82\"", `"\u0000"`, `"\uD83D\uDE00"`,
		"\"\xed\xa0\x80\"", `"\u00"`,
	}
	for _, give := range gives {
		var want string
		wantErr := json.Unmarshal([]byte(give), &want)
		got, ok := jsonscan.DecodeString([]byte(give))
		if wantErr != nil {
			assert.False(t, ok, "DecodeString(%q) = %q, encoding/json refuses it: %v", give, got, wantErr)
			continue
		}
		assert.True(t, ok, "DecodeString(%q)", give)
		assert.Equal(t, want, got, "DecodeString(%q)", give)
	}
}

func TestScanTopDepthLimit(t *testing.T) {
	for _, depth := range []int{jsonscan.MaxDepth - 1, jsonscan.MaxDepth, jsonscan.MaxDepth + 1} {
		give := []byte(strings.Repeat("[", depth) + strings.Repeat("]", depth))
		_, _, err := jsonscan.ScanTop(give)
		assert.Equal(t, json.Valid(give), err == nil, "ScanTop(depth %d) error = %v", depth, err)
		assert.Equal(t, depth <= jsonscan.MaxDepth, err == nil, "ScanTop(depth %d) error = %v", depth, err)
	}
}

func TestValueEnd(t *testing.T) {
	gives := []string{`"a\\"`, `"a\\\"b"`, `"\\\\"`, `{"a":"}\"]"}`, `[1,"]",[{}]]`, `-1.5e3`, `true`, `null`, `"\u0022"`}
	for _, give := range gives {
		b := []byte(give + ` , "tail"]`)
		assert.Equal(t, len(give), jsonscan.ValueEnd(b, 0), "ValueEnd(%s)", give)
	}
}

func TestAppendString(t *testing.T) {
	gives := []string{"", "plain", "q\"b\\s/", "\x00\x01\x1f\n\r\t", "<&>", "é☕😀", "bad\xffutf8\xe2\x82", "\u2028"}
	for _, give := range gives {
		got := jsonscan.AppendString(nil, give)
		require.True(t, json.Valid(got), "AppendString(%q) = %s is not valid JSON", give, got)
		var back string
		require.NoError(t, json.Unmarshal(got, &back), "unmarshal AppendString(%q)", give)
		want, _ := json.Marshal(give)
		var wantBack string
		require.NoError(t, json.Unmarshal(want, &wantBack), "unmarshal json.Marshal(%q)", give)
		assert.Equal(t, wantBack, back, "AppendString(%q) round trip", give)
		assert.False(t, bytes.Contains(got, []byte("\n")), "AppendString(%q) has a raw newline", give)
	}
}

func TestRewriteRequestEscapedKeys(t *testing.T) {
	give := `{"t\u006fols":[{"type":"code_interpreter"}],"str\u0065am":true,"\u0073tream_options":{},"metadata":{"session\u005fid":"s\u0031"}}`
	want := `{"t\u006fols":[` + string(FunctionTool(Responses, schema.DefaultFunctionName, schema.DefaultFunctionDescription)) + `],"str\u0065am":true,"\u0073tream_options":{},"metadata":{"session\u005fid":"s\u0031"}}`
	got, err := RewriteRequest(Responses, []byte(give), schema.Options{})
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
			sc, err := jsonscan.Scan([]byte(tt.give), &requestItemsSpec, nil)
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
		surface          Surface
		give             string
		wantPrev, wantCv string
	}{
		{"previous response", Responses, `{"previous_response_id":"resp_9","input":"x","tools":[{"type":"code_interpreter"}]}`, "resp_9", ""},
		{"conversation string", Responses, `{"conversation":"conv_1","input":"x"}`, "", "conv_1"},
		{"conversation object", Responses, `{"conversation":{"id":"conv_2"},"input":"x","tools":[{"type":"code_interpreter"}]}`, "", "conv_2"},
		{"null", Responses, `{"conversation":null,"previous_response_id":null}`, "", ""},
		{"chat has neither", Chat, `{"previous_response_id":"resp_9","messages":[]}`, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := RewriteRequest(tt.surface, []byte(tt.give), schema.Options{})
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
		got, err := RewriteRequest(Responses, give, schema.Options{WholeFirst: tt.whole})
		require.NoError(t, err)
		assert.True(t, got.Stream, "the client streams")
		assert.Equal(t, tt.want, gjson.GetBytes(got.Body, "stream").Bool(), "WholeFirst %v: %s", tt.whole, got.Body)
		assert.Equal(t, !tt.whole, gjson.GetBytes(got.Body, "stream_options").Exists(), "the client's stream_options with a stream only: %s", got.Body)
	}
}
