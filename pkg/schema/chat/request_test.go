package chat

import (
	"encoding/json"
	"flag"
	"testing"

	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/schema/internal/schematest"
	"github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
			name: "chat_tool_first",
			want: schema.Request{Found: true, Tool: []byte(reqTestTool), ToolChoice: []byte(`{"type":"code_interpreter"}`), ForcedChoice: true},
		},
		{
			name: "chat_tool_middle",
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
			name: "chat_tool_last",
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
			name: "chat_choice_client_function",
			want: schema.Request{Found: true, Tool: []byte(`{"type":"code_interpreter"}`), ToolChoice: []byte(`{"type":"function","function":{"name":"a"}}`)},
		},
		{
			name: "chat_choice_auto",
			want: schema.Request{Found: true, Tool: []byte(`{"type":"code_interpreter"}`), ToolChoice: []byte(`"auto"`)},
		},
	}
	for _, tt := range tests {
		schematest.RunRewriteGolden(t, RewriteRequest, tt.name, tt.opts, tt.want, *reqUpdateGolden)
	}
}

func TestRewriteRequestUnchanged(t *testing.T) {
	tests := []struct {
		name string
		give []byte
	}{
		{"chat file, a client function named like ours", schematest.ReadFile(t, "request/chat_no_tool.give.json")},
		{"tools null", []byte(`{"messages":[],"tools":null}`)},
		{"top level string", []byte(`"code_interpreter"`)},
		{"chat surface ignores nothing but tools", []byte("{\n\"messages\" : [ ] ,\"x\":1e5}\n")},
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
		{"whitespace only", " \n", "", "invalid_json"},
		{"trailing comma", `{"tools":[],}`, "", "invalid_json"},
		{"raw newline in metadata", "{\"metadata\":{\"session_id\":\"a\nb\"}}", "", "invalid_json"},
		{"raw tab in stream_options", "{\"stream_options\":{\"x\":\"\t\"}}", "", "invalid_json"},
		{"bad escape in a top-level key", `{"mod\el":"x"}`, "", "invalid_json"},
		{"bad escape in a tools array without our tool", `{"tools":[{"type":"function","function":{"name":"\q"}}]}`, "", "invalid_json"},
		{"unbalanced brackets in the conversation", `{"messages":[{"content":"a"]}`, "", "invalid_json"},
		{"missing comma in the conversation", `{"messages":[{"role":"user" "content":"a"}]}`, "", "invalid_json"},
		{
			"chat function named like ours",
			`{"messages":[],"tools":[{"type":"code_interpreter"},{"type":"function","function":{"name":"code_\u0069nterpreter"}}]}`,
			"tools[1].function.name", "",
		},
		{
			"chat custom tool named like ours",
			`{"messages":[],"tools":[{"type":"custom","custom":{"name":"code_interpreter"}},{"type":"code_interpreter"}]}`,
			"tools[0].custom.name", "",
		},
		{
			"chat function named like ours, past eight members",
			`{"messages":[],"tools":[{"type":"code_interpreter"},{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"type":"function","function":{"name":"code_interpreter"}}]}`,
			"tools[1].function.name", "",
		},
		{"tool_choice given twice", `{"tools":[{"type":"code_interpreter"}],"tool_choice":"auto","tool_choice":"none"}`, "tool_choice", ""},
		{"file id not a string", `{"tools":[{"type":"code_interpreter","container":{"type":"auto","file_ids":["file-1",2]}}]}`, "tools[0].container.file_ids[1]", "invalid_type"},
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
		{"raw newline in a message", "{\"messages\":[{\"role\":\"user\",\"content\":\"a\nb\"}],\"tools\":[TOOL]}"},
		{"short unicode escape in a message key", `{"messages":[{"\u12":"x"}],"tools":[TOOL]}`},
	}
	for _, tt := range tests {
		schematest.RunRewriteLooseStrings(t, RewriteRequest, tt.name, tt.give, tool, dialect.FunctionTool(schema.DefaultFunctionName, schema.DefaultFunctionDescription))
	}
}

// TestRewriteRequestParsesWithSDK checks that the rewritten bodies parse as the SDK's request
// params with the function tool in the code_interpreter tool's place.
func TestRewriteRequestParsesWithSDK(t *testing.T) {
	tests := []struct {
		name       string
		wantChoice string // "function", "allowed" or "" (left as the client sent it)
	}{
		{"chat_tool_first", "function"},
		{"chat_tool_middle", ""},
		{"chat_tool_last", "allowed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			give := schematest.ReadFile(t, "request/"+tt.name+".give.json")
			got, err := RewriteRequest(give, schema.Options{})
			require.NoError(t, err, "RewriteRequest(%s)", tt.name)
			var names []string
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
			assert.Contains(t, names, schema.DefaultFunctionName, "RewriteRequest(%s) function names", tt.name)

			// The SDK's param unions do not tell tool_choice forms apart when decoding, so the
			// choice is checked as plain JSON.
			var top map[string]any
			require.NoError(t, json.Unmarshal(got.Body, &top), "unmarshal RewriteRequest(%s)", tt.name)
			fn := map[string]any{"type": "function", "name": schema.DefaultFunctionName}
			fn = map[string]any{"type": "function", "function": map[string]any{"name": schema.DefaultFunctionName}}
			switch choice, _ := top["tool_choice"].(map[string]any); tt.wantChoice {
			case "function":
				assert.Equal(t, fn, choice, "RewriteRequest(%s) tool_choice", tt.name)
			case "allowed":
				holder := choice
				holder, _ = choice["allowed_tools"].(map[string]any)
				require.NotNil(t, holder, "RewriteRequest(%s) tool_choice %v", tt.name, choice)
				assert.Contains(t, holder["tools"], fn, "RewriteRequest(%s) allowed tools", tt.name)
				assert.NotContains(t, holder["tools"], map[string]any{"type": "code_interpreter"}, "RewriteRequest(%s) allowed tools", tt.name)
			}
		})
	}
}

func TestRewriteRequestContinuation(t *testing.T) {
	tests := []struct {
		name             string
		give             string
		wantPrev, wantCv string
	}{
		{"chat has neither", `{"previous_response_id":"resp_9","messages":[]}`, "", ""},
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
