package demo

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestDecide(t *testing.T) {
	tests := []struct {
		name     string
		give     turn
		wantTool string
		wantArg  string // the one argument's value, or a part of the text
	}{
		{"arithmetic", turn{userText: "What is 6*7? Use Python.", python: "run_code"}, "run_code", "print(6*7)"},
		{"fenced python", turn{userText: "run\n```python\nx = 2\nprint(x)\n```", python: "run_code"}, "run_code", "x = 2\nprint(x)"},
		{"fenced bash on bash tool", turn{userText: "```bash\nls -l\n```", python: "code_execution", bash: "bash_code_execution"}, "bash_code_execution", "ls -l"},
		{"python on bash only", turn{userText: "```py\nprint(1)\n```", bash: "bash_code_execution"}, "bash_code_execution", "python3 - <<'DEMO_PY'\nprint(1)\nDEMO_PY"},
		{"bash on python only", turn{userText: "```sh\necho hi\n```", python: "run_code"}, "run_code", `subprocess.run("echo hi"`},
		{"chart of numbers", turn{userText: "Draw a chart of 3, 1, 4", python: "run_code"}, "run_code", "values = [3, 1, 4]"},
		{"chart without numbers", turn{userText: "plot something nice", python: "run_code"}, "run_code", "np.sin(x)"},
		{"read a csv", turn{userText: "Read data.csv please", python: "run_code"}, "run_code", `pd.read_csv("/mnt/data/data.csv"`},
		{"read a text file", turn{userText: "what is in notes.txt?", python: "run_code"}, "run_code", `open("/mnt/data/notes.txt"`},
		{"list files", turn{userText: "List the files", python: "run_code"}, "run_code", "os.listdir('/mnt/data')"},
		{"nothing to do", turn{userText: "hello there", python: "run_code"}, "", "I am codeinterp's built-in demo model"},
		{"no tool", turn{userText: "What is 1+1?"}, "", "the request offers no code tool"},
		{"after a run", turn{afterTool: true, toolOutput: "42\n", python: "run_code"}, "", "Its output:\n\n```\n42\n```"},
		{"after a silent run", turn{afterTool: true, python: "run_code"}, "", "printed nothing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := decide(tt.give)
			assert.Equal(t, tt.wantTool, got.tool, "tool for %q", tt.give.userText)
			if tt.wantTool == "" {
				assert.Contains(t, got.text, tt.wantArg, "text for %q", tt.give.userText)
				assert.True(t, strings.HasPrefix(got.text, label), "text %q is labelled", got.text)
				return
			}
			require.Len(t, got.args, 1, "args for %q", tt.give.userText)
			for _, v := range got.args {
				assert.Contains(t, v, tt.wantArg, "argument for %q", tt.give.userText)
			}
		})
	}
}

func newServer(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(&Model{})
	t.Cleanup(srv.Close)
	return srv
}

func codeTool() responses.ToolUnionParam {
	return responses.ToolUnionParam{OfFunction: &responses.FunctionToolParam{
		Name:       "run_code",
		Parameters: map[string]any{"type": "object", "properties": map[string]any{"code": map[string]any{"type": "string"}}},
	}}
}

// TestResponses has the official SDK read the demo model's Responses answers, plain and
// streamed, through a conversation: a call, then the answer to its output.
func TestResponses(t *testing.T) {
	srv := newServer(t)
	client := openai.NewClient(option.WithBaseURL(srv.URL+"/v1"), option.WithAPIKey("none"))
	ctx := context.Background()
	params := responses.ResponseNewParams{
		Model: "gpt-4.1",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("What is 6*7? Use Python.")},
		Tools: []responses.ToolUnionParam{codeTool()},
	}
	r, err := client.Responses.New(ctx, params)
	require.NoError(t, err)
	require.Len(t, r.Output, 1)
	call := r.Output[0].AsFunctionCall()
	assert.Equal(t, "run_code", call.Name)
	assert.JSONEq(t, `{"code":"print(6*7)"}`, call.Arguments)

	stream := client.Responses.NewStreaming(ctx, params)
	var completed responses.Response
	var args strings.Builder
	for stream.Next() {
		ev := stream.Current()
		switch ev.Type {
		case "response.function_call_arguments.delta":
			args.WriteString(ev.Delta)
		case "response.completed":
			completed = ev.Response
		}
	}
	require.NoError(t, stream.Err())
	assert.JSONEq(t, `{"code":"print(6*7)"}`, args.String(), "streamed arguments")
	assert.Equal(t, call.Arguments, completed.Output[0].AsFunctionCall().Arguments, "streamed answer")

	follow := params
	follow.Input = responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
		responses.ResponseInputItemParamOfMessage("What is 6*7? Use Python.", responses.EasyInputMessageRoleUser),
		responses.ResponseInputItemParamOfFunctionCall(call.Arguments, call.CallID, call.Name),
		{OfFunctionCallOutput: &responses.ResponseInputItemFunctionCallOutputParam{
			CallID: openai.String(call.CallID), Output: responses.ResponseInputItemFunctionCallOutputOutputUnionParam{OfString: openai.String("42\n")}}},
	}}
	r, err = client.Responses.New(ctx, follow)
	require.NoError(t, err)
	assert.Equal(t, label+"The code ran. Its output:\n\n```\n42\n```", r.OutputText())

	stream = client.Responses.NewStreaming(ctx, follow)
	var text strings.Builder
	for stream.Next() {
		if ev := stream.Current(); ev.Type == "response.output_text.delta" {
			text.WriteString(ev.Delta)
		}
	}
	require.NoError(t, stream.Err())
	assert.Equal(t, r.OutputText(), text.String(), "streamed text")
}

// TestChat has the official SDK read the demo model's Chat answers, plain and through its
// stream accumulator.
func TestChat(t *testing.T) {
	srv := newServer(t)
	client := openai.NewClient(option.WithBaseURL(srv.URL+"/v1"), option.WithAPIKey("none"))
	ctx := context.Background()
	params := openai.ChatCompletionNewParams{
		Model:    "gpt-4.1",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("```python\nprint('hi')\n```")},
		Tools: []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{
			Name:       "run_code",
			Parameters: openai.FunctionParameters{"type": "object", "properties": map[string]any{"code": map[string]any{"type": "string"}}},
		})},
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	}
	c, err := client.Chat.Completions.New(ctx, params)
	require.NoError(t, err)
	require.Len(t, c.Choices, 1)
	assert.Equal(t, "tool_calls", c.Choices[0].FinishReason)
	require.Len(t, c.Choices[0].Message.ToolCalls, 1)
	assert.JSONEq(t, `{"code":"print('hi')"}`, c.Choices[0].Message.ToolCalls[0].Function.Arguments)

	stream := client.Chat.Completions.NewStreaming(ctx, params)
	var acc openai.ChatCompletionAccumulator
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	require.NoError(t, stream.Err())
	require.Len(t, acc.Choices, 1)
	require.Len(t, acc.Choices[0].Message.ToolCalls, 1)
	assert.Equal(t, c.Choices[0].Message.ToolCalls[0].Function.Arguments, acc.Choices[0].Message.ToolCalls[0].Function.Arguments)
	assert.Positive(t, acc.Usage.TotalTokens, "the usage chunk")

	params.Messages = append(params.Messages, c.Choices[0].Message.ToParam(), openai.ToolMessage("hi\n", c.Choices[0].Message.ToolCalls[0].ID))
	c, err = client.Chat.Completions.New(ctx, params)
	require.NoError(t, err)
	assert.Equal(t, "stop", c.Choices[0].FinishReason)
	assert.Contains(t, c.Choices[0].Message.Content, "```\nhi\n```")
}

// TestMessages has the official Anthropic SDK read the demo model's answers, plain and
// accumulated from its stream.
func TestMessages(t *testing.T) {
	srv := newServer(t)
	client := anthropic.NewClient(aoption.WithBaseURL(srv.URL), aoption.WithAPIKey("none"))
	ctx := context.Background()
	params := anthropic.MessageNewParams{
		Model:     "claude-sonnet-4-5",
		MaxTokens: 1024,
		Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("```bash\necho hello\n```"))},
		Tools: []anthropic.ToolUnionParam{{OfTool: &anthropic.ToolParam{
			Name:        "bash_code_execution",
			InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{"command": map[string]any{"type": "string"}}},
		}}},
	}
	m, err := client.Messages.New(ctx, params)
	require.NoError(t, err)
	assert.Equal(t, anthropic.StopReasonToolUse, m.StopReason)
	require.Len(t, m.Content, 1)
	use := m.Content[0].AsToolUse()
	assert.Equal(t, "bash_code_execution", use.Name)
	assert.JSONEq(t, `{"command":"echo hello"}`, string(use.Input))

	stream := client.Messages.NewStreaming(ctx, params)
	var acc anthropic.Message
	for stream.Next() {
		require.NoError(t, acc.Accumulate(stream.Current()))
	}
	require.NoError(t, stream.Err())
	require.Len(t, acc.Content, 1)
	assert.JSONEq(t, string(use.Input), string(acc.Content[0].AsToolUse().Input), "streamed input")

	params.Messages = append(params.Messages, m.ToParam(), anthropic.NewUserMessage(anthropic.NewToolResultBlock(use.ID, "hello\n", false)))
	m, err = client.Messages.New(ctx, params)
	require.NoError(t, err)
	assert.Equal(t, anthropic.StopReasonEndTurn, m.StopReason)
	assert.Contains(t, m.Content[0].Text, "```\nhello\n```")
}

func TestRefuses(t *testing.T) {
	srv := newServer(t)
	tests := []struct {
		name, method, path, body string
		want                     int
	}{
		{"unknown path", http.MethodPost, "/v1/embeddings", `{}`, http.StatusNotFound},
		{"GET on a served path", http.MethodGet, "/v1/responses", ``, http.StatusMethodNotAllowed},
		{"not JSON", http.MethodPost, "/v1/responses", `{`, http.StatusBadRequest},
		{"no input", http.MethodPost, "/v1/responses", `{"model":"m"}`, http.StatusBadRequest},
		{"no messages", http.MethodPost, "/v1/messages", `{"model":"m","messages":[]}`, http.StatusBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest(tt.method, srv.URL+tt.path, strings.NewReader(tt.body))
			require.NoError(t, err)
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			assert.Equal(t, tt.want, resp.StatusCode, "%s %s %s", tt.method, tt.path, tt.body)
			var v map[string]any
			assert.NoError(t, json.NewDecoder(resp.Body).Decode(&v), "a JSON error body")
			assert.Contains(t, v, "error")
		})
	}
}
