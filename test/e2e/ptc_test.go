package e2e

import (
	"context"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/test/e2e/fakemodel"
)

// askMessagesREPL is a Messages request with the code_execution_20260521 tool (Python with
// REPL state, bash and the text editor) and a client tool.
func askMessagesREPL(text string) anthropic.MessageNewParams {
	p := askMessages(text)
	p.Tools = []anthropic.ToolUnionParam{
		{OfCodeExecutionTool20260521: &anthropic.CodeExecutionTool20260521Param{}},
		{OfTool: &anthropic.ToolParam{Name: "weather", InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{"city": map[string]any{"type": "string"}}}}},
	}
	return p
}

// TestMessagesREPLState runs code_execution_20260521 through both fronts: the model is offered
// Python beside bash and the text editor, with the per-cell time limit in Python's
// description; what a cell defines lives on for the next request that names the container,
// whose answer (plain, then streamed) shows code_execution_tool_result and the client's own
// tool_use with a direct caller.
func TestMessagesREPLState(t *testing.T) {
	env := NewEnv(t, EnvOptions{})
	env.Fronts(t, func(t *testing.T, s *Stack) {
		t.Run("plain", func(t *testing.T) { testMessagesREPLState(t, s, false) })
		t.Run("stream", func(t *testing.T) { testMessagesREPLState(t, s, true) })
	})
}

func testMessagesREPLState(t *testing.T, s *Stack, stream bool) {
	mark := len(s.Model.RequestsTo(messagesPath))
	s.Model.Enqueue(messagesPath,
		fakemodel.JSON(fakemodel.AnthropicMessage("claude-e2e", fakemodel.Usage{Input: 10, Output: 5},
			fakemodel.ToolUse("toolu_p1", "code_execution", map[string]any{"code": "import math\ncities = ['Paris']\nx = 41"}),
			fakemodel.ToolUse("toolu_p2", "bash_code_execution", map[string]any{"command": "echo from bash"}))),
		fakemodel.JSON(fakemodel.AnthropicMessage("claude-e2e", fakemodel.Usage{Input: 20, Output: 3}, fakemodel.Text("Defined."))),
		fakemodel.JSON(fakemodel.AnthropicMessage("claude-e2e", fakemodel.Usage{Input: 30, Output: 5},
			fakemodel.ToolUse("toolu_p3", "code_execution", map[string]any{"code": "print(x + 1, math.floor(math.pi), cities[0])"}))),
		fakemodel.JSON(fakemodel.AnthropicMessage("claude-e2e", fakemodel.Usage{Input: 40, Output: 5},
			fakemodel.Text("Now the weather."), fakemodel.ToolUse("toolu_w1", "weather", map[string]any{"city": "Paris"}))),
	)
	t.Cleanup(func() { assert.Zero(t, s.Model.Pending(), "every scripted answer was used") })
	client := s.anthropicClient()
	ctx := context.Background()
	params := askMessagesREPL("Define some things.")
	first, err := client.Messages.New(ctx, params)
	require.NoError(t, err, "the first request")
	require.Len(t, first.Content, 5, "2 × (server_tool_use, result), text: %s", first.RawJSON())
	assert.Equal(t, "code_execution", first.Content[0].Name, "Python's server_tool_use")
	assert.Equal(t, "direct", first.Content[0].AsServerToolUse().Caller.Type, "its caller")
	assert.Equal(t, int64(0), first.Content[1].AsCodeExecutionToolResult().Content.ReturnCode, "the cell ran: %s", first.Content[1].RawJSON())
	assert.Equal(t, "from bash\n", first.Content[3].AsBashCodeExecutionToolResult().Content.Stdout, "bash beside it")
	require.NotEmpty(t, first.Container.ID, "the first answer names its container")

	params.Messages = append(params.Messages, first.ToParam(), anthropic.NewUserMessage(anthropic.NewTextBlock("Use them.")))
	params.Container = anthropic.MessageCreateParamsContainerUnion{OfString: anthropic.String(first.Container.ID)}
	var second *anthropic.Message
	if stream {
		st := client.Messages.NewStreaming(ctx, params)
		acc := anthropic.Message{}
		for st.Next() {
			require.NoError(t, acc.Accumulate(st.Current()), "accumulate %s", st.Current().Type)
		}
		require.NoError(t, st.Err(), "the stream")
		require.NoError(t, st.Close(), "close the stream")
		second = &acc
	} else {
		second, err = client.Messages.New(ctx, params)
		require.NoError(t, err, "the continuation")
	}
	require.Len(t, second.Content, 4, "server_tool_use, result, text, tool_use: %s", second.RawJSON())
	assert.Equal(t, "42 3 Paris\n", second.Content[1].AsCodeExecutionToolResult().Content.Stdout,
		"the variables and the import of the first request's cell lived on")
	use := second.Content[3].AsToolUse()
	assert.Equal(t, "weather", use.Name, "the client's tool")
	assert.Equal(t, "direct", use.Caller.Type, "called directly: %s", second.Content[3].RawJSON())
	assert.Equal(t, anthropic.StopReasonToolUse, second.StopReason, "stop reason")
	assert.Equal(t, first.Container.ID, second.Container.ID, "the same container")

	sent := s.Model.RequestsTo(messagesPath)[mark:]
	require.Len(t, sent, 4, "two requests of two rounds each")
	tools := gjson.GetBytes(sent[0].Body, "tools.#.name").Array()
	require.Len(t, tools, 4, "Python, bash, the text editor and the client's tool: %s", sent[0].Body)
	assert.Equal(t, "code_execution", tools[0].String(), "Python first")
	assert.Contains(t, gjson.GetBytes(sent[0].Body, "tools.0.description").String(), "Each cell may run for at most", "the per-cell time limit told")
	replayed := gjson.GetBytes(sent[2].Body, "messages.1.content.0")
	assert.Equal(t, "code_execution", replayed.Get("name").String(), "the replayed cell is the model's Python call: %s", sent[2].Body)
}
