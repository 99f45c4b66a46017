package e2e

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	configv1 "github.com/codeinterp/codeinterp/api/codeinterp/config/v1"
	"github.com/codeinterp/codeinterp/test/e2e/fakemodel"
)

// messagesPath is the Anthropic Messages API's path.
const messagesPath = "/v1/messages"

// messagesAPIKey is the x-api-key the Anthropic client sends: the caller's identity.
const messagesAPIKey = "sk-ant-e2e"

// anthropicClient returns an anthropic-sdk-go client of the stack's front with
// messagesAPIKey in x-api-key (the SDK's WithAPIKey sends it as a bearer token), no retries,
// and the stack's HTTP transport.
func (s *Stack) anthropicClient() anthropic.Client {
	return anthropic.NewClient(
		option.WithBaseURL(s.Front.URL()+"/"),
		option.WithHeader("x-api-key", messagesAPIKey),
		option.WithMaxRetries(0),
		option.WithHTTPClient(&http.Client{Transport: s.transport}),
	)
}

// askMessages is a Messages request with the code_execution_20250522 tool.
func askMessages(text string) anthropic.MessageNewParams {
	return anthropic.MessageNewParams{
		Model:     "claude-e2e",
		MaxTokens: 1024,
		Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(text))},
		Tools:     []anthropic.ToolUnionParam{{OfCodeExecutionTool20250522: &anthropic.CodeExecutionTool20250522Param{}}},
	}
}

// TestMessages runs the Anthropic Messages surface with the code_execution_20250522 tool
// through both fronts, driven by anthropic-sdk-go: the model's tool_use of the tool the rewrite
// gave it runs in the sandbox, the model gets its real output, and the client gets the native
// server_tool_use and code_execution_tool_result blocks, plainly and as a stream.
func TestMessages(t *testing.T) {
	env := NewEnv(t, EnvOptions{})
	env.Fronts(t, func(t *testing.T, s *Stack) {
		var plain *anthropic.Message
		t.Run("plain", func(t *testing.T) {
			plain = testMessagesRun(t, s, false)
		})
		t.Run("stream", func(t *testing.T) {
			streamed := testMessagesRun(t, s, true)
			if plain == nil || streamed == nil {
				return
			}
			assert.Equal(t, blockSummary(plain), blockSummary(streamed), "the accumulated stream has the plain answer's blocks")
			assert.Equal(t, plain.Usage.InputTokens, streamed.Usage.InputTokens, "input tokens")
			assert.Equal(t, plain.Usage.OutputTokens, streamed.Usage.OutputTokens, "output tokens")
			assert.Equal(t, plain.StopReason, streamed.StopReason, "stop reason")
		})
		t.Run("client mistakes", func(t *testing.T) { testMessagesClientErrors(t, s) })
		t.Run("continued in its container", func(t *testing.T) { testMessagesContinued(t, s) })
		t.Run("an upstream error in the loop", func(t *testing.T) { testMessagesUpstreamError(t, s) })
		t.Run("a turn that also calls a client tool", func(t *testing.T) { testMessagesClientTool(t, s) })
	})
}

// testMessagesClientTool has the model call the code tool and a client tool in one turn: the
// client gets the run and its own tool_use at once, and answers with its tool_result after
// replaying the turn; the model then sees its call, the run's output and the client's result.
func testMessagesClientTool(t *testing.T, s *Stack) {
	mark := len(s.Model.RequestsTo(messagesPath))
	s.Model.Enqueue(messagesPath,
		fakemodel.JSON(fakemodel.AnthropicMessage("claude-e2e", fakemodel.Usage{Input: 10, Output: 5},
			fakemodel.ToolUse("toolu_m1", "code_execution", map[string]any{"code": "print(6 * 7)"}),
			fakemodel.ToolUse("toolu_w1", "weather", map[string]any{"city": "Paris"}))),
		fakemodel.JSON(fakemodel.AnthropicMessage("claude-e2e", fakemodel.Usage{Input: 20, Output: 3}, fakemodel.Text("42, and sunny."))),
	)
	t.Cleanup(func() { assert.Zero(t, s.Model.Pending(), "every scripted answer was used") })
	client := s.anthropicClient()
	params := askMessages("6*7, and the weather in Paris?")
	params.Tools = append(params.Tools, anthropic.ToolUnionParam{OfTool: &anthropic.ToolParam{
		Name: "weather", InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{"city": map[string]any{"type": "string"}}},
	}})
	first, err := client.Messages.New(context.Background(), params)
	require.NoError(t, err, "the first request")
	require.Len(t, first.Content, 3, "server_tool_use, result, the client's tool_use: %s", first.RawJSON())
	assert.Equal(t, "42\n", first.Content[1].AsCodeExecutionToolResult().Content.Stdout, "the run")
	assert.Equal(t, "tool_use", first.Content[2].Type, "the client's call")
	assert.Equal(t, "toolu_w1", first.Content[2].ID, "as the model made it")
	assert.Equal(t, anthropic.StopReasonToolUse, first.StopReason, "stop reason")

	params.Messages = append(params.Messages, first.ToParam(),
		anthropic.NewUserMessage(anthropic.NewToolResultBlock("toolu_w1", "sunny", false)))
	second, err := client.Messages.New(context.Background(), params)
	require.NoError(t, err, "the client's answer")
	assert.Equal(t, "42, and sunny.", second.Content[0].Text, "the final text")

	sent := s.Model.RequestsTo(messagesPath)[mark:]
	require.Len(t, sent, 2, "one round each: the loop stops for the client's call")
	var roles, types []string
	for _, m := range gjson.GetBytes(sent[1].Body, "messages").Array() {
		roles = append(roles, m.Get("role").String())
		types = append(types, m.Get("content.0.type").String())
	}
	assert.Equal(t, []string{"user", "assistant", "user", "assistant", "user"}, roles, "turns alternate: %s", sent[1].Body)
	assert.Equal(t, []string{"text", "tool_use", "tool_result", "tool_use", "tool_result"}, types, "the code call, its output, the client's call, its result")
	assert.Equal(t, "42\n", gjson.GetBytes(sent[1].Body, "messages.2.content.0.content").String(), "the run's output for the model")
}

// testMessagesUpstreamError has the model fail the follow-up with Anthropic's error: the plain
// client gets it as it is (status, type, retry-after), the streaming client as an error event
// the SDK raises with the same type.
func testMessagesUpstreamError(t *testing.T, s *Stack) {
	script := func() {
		overloaded := fakemodel.AnthropicError(529, "overloaded_error", "Overloaded")
		overloaded.Header = http.Header{"Retry-After": {"7"}}
		s.Model.Enqueue(messagesPath,
			fakemodel.JSON(fakemodel.AnthropicMessage("claude-e2e", fakemodel.Usage{Input: 10, Output: 5},
				fakemodel.ToolUse("toolu_u1", "code_execution", map[string]any{"code": "print(1)"}))),
			overloaded)
	}
	t.Cleanup(func() { assert.Zero(t, s.Model.Pending(), "every scripted answer was used") })
	client := s.anthropicClient()
	var apiErr *anthropic.Error

	script()
	_, err := client.Messages.New(context.Background(), askMessages("print 1"))
	require.True(t, errors.As(err, &apiErr), "an API error, got %v", err)
	assert.Equal(t, 529, apiErr.StatusCode, "the upstream's status")
	assert.EqualValues(t, "overloaded_error", apiErr.Type(), "its type")
	assert.Equal(t, "Overloaded", apiErr.Message, "its message")
	assert.Equal(t, "7", apiErr.Response.Header.Get("Retry-After"), "its retry-after")

	script()
	st := client.Messages.NewStreaming(context.Background(), askMessages("print 1"))
	for st.Next() {
	}
	require.True(t, errors.As(st.Err(), &apiErr), "a streamed API error, got %v", st.Err())
	assert.EqualValues(t, "overloaded_error", apiErr.Type(), "its type")
	assert.Equal(t, "Overloaded", apiErr.Message, "its message")
	_ = st.Close()
}

// testMessagesContinued continues a conversation as the SDK's users do: the answer replayed as
// the assistant turn, its container named. The model gets its earlier call and output as a
// tool_use / tool_result pair, and the code runs in the same Python process.
func testMessagesContinued(t *testing.T, s *Stack) {
	mark := len(s.Model.RequestsTo(messagesPath))
	s.Model.Enqueue(messagesPath,
		fakemodel.JSON(fakemodel.AnthropicMessage("claude-e2e", fakemodel.Usage{Input: 10, Output: 5},
			fakemodel.ToolUse("toolu_c1", "code_execution", map[string]any{"code": "x = 40 + 2\nprint(x)"}))),
		fakemodel.JSON(fakemodel.AnthropicMessage("claude-e2e", fakemodel.Usage{Input: 20, Output: 3}, fakemodel.Text("x is 42."))),
		fakemodel.JSON(fakemodel.AnthropicMessage("claude-e2e", fakemodel.Usage{Input: 30, Output: 5},
			fakemodel.ToolUse("toolu_c2", "code_execution", map[string]any{"code": "print(x * 2)"}))),
		fakemodel.JSON(fakemodel.AnthropicMessage("claude-e2e", fakemodel.Usage{Input: 40, Output: 3}, fakemodel.Text("Doubled: 84."))),
	)
	t.Cleanup(func() { assert.Zero(t, s.Model.Pending(), "every scripted answer was used") })
	client := s.anthropicClient()
	ctx := context.Background()
	params := askMessages("Set x to 40 + 2.")
	first, err := client.Messages.New(ctx, params)
	require.NoError(t, err, "the first request")
	require.NotEmpty(t, first.Container.ID, "the first answer names its container")

	params.Messages = append(params.Messages, first.ToParam(), anthropic.NewUserMessage(anthropic.NewTextBlock("Double it.")))
	params.Container = anthropic.MessageCreateParamsContainerUnion{OfString: anthropic.String(first.Container.ID)}
	second, err := client.Messages.New(ctx, params)
	require.NoError(t, err, "the continuation")

	sent := s.Model.RequestsTo(messagesPath)[mark:]
	require.Len(t, sent, 4, "two requests of two rounds each")
	msgs := gjson.GetBytes(sent[2].Body, "messages").Array()
	require.Len(t, msgs, 5, "user, the replayed call, its result, the replayed text, user: %s", sent[2].Body)
	assert.Equal(t, "tool_use", msgs[1].Get("content.0.type").String(), "the replayed call is a tool_use")
	assert.Equal(t, "code_execution", msgs[1].Get("content.0.name").String(), "of the model's tool")
	assert.Equal(t, "tool_result", msgs[2].Get("content.0.type").String(), "its result a tool_result")
	assert.Equal(t, "42\n", msgs[2].Get("content.0.content").String(), "with its output")
	assert.False(t, gjson.GetBytes(sent[2].Body, "container").Exists(), "the container is not sent upstream")

	require.Len(t, second.Content, 3, "server_tool_use, result, text: %s", second.RawJSON())
	assert.Equal(t, "84\n", second.Content[1].AsCodeExecutionToolResult().Content.Stdout, "x lived on in the container")
	assert.Equal(t, first.Container.ID, second.Container.ID, "the same container")
}

// TestMessagesReplayedStream streams a Messages answer replayed once the loop is over
// (stream_mode "replay"), through both fronts.
func TestMessagesReplayedStream(t *testing.T) {
	env := NewEnv(t, EnvOptions{Configure: func(c *configv1.Config) {
		if c.DefaultProfile == nil {
			c.DefaultProfile = &configv1.Profile{}
		}
		c.DefaultProfile.StreamMode = "replay"
	}})
	env.Fronts(t, func(t *testing.T, s *Stack) { testMessagesRun(t, s, true) })
}

// testMessagesRun scripts a code call and its answer, asks, and checks what the model and the
// client got; it returns the client's message.
func testMessagesRun(t *testing.T, s *Stack, stream bool) *anthropic.Message {
	mark := len(s.Model.RequestsTo(messagesPath))
	s.Model.Enqueue(messagesPath,
		fakemodel.JSON(fakemodel.AnthropicMessage("claude-e2e", fakemodel.Usage{Input: 30, Output: 12},
			fakemodel.Text("Let me compute that."),
			fakemodel.ToolUse("toolu_e2e1", "code_execution", map[string]any{"code": "import sys\nprint(40 + 2)\nprint('careful', file=sys.stderr)"}))),
		fakemodel.JSON(fakemodel.AnthropicMessage("claude-e2e", fakemodel.Usage{Input: 50, Output: 7},
			fakemodel.Text("40 + 2 is 42."))),
	)
	t.Cleanup(func() { assert.Zero(t, s.Model.Pending(), "every scripted answer was used") })

	client := s.anthropicClient()
	ctx := context.Background()
	var msg *anthropic.Message
	if stream {
		st := client.Messages.NewStreaming(ctx, askMessages("What is 40 + 2?"))
		acc := anthropic.Message{}
		for st.Next() {
			require.NoError(t, acc.Accumulate(st.Current()), "accumulate %s", st.Current().Type)
		}
		require.NoError(t, st.Err(), "the stream")
		require.NoError(t, st.Close(), "close the stream")
		msg = &acc
	} else {
		var err error
		msg, err = client.Messages.New(ctx, askMessages("What is 40 + 2?"))
		require.NoError(t, err, "POST /v1/messages")
	}

	sent := s.Model.RequestsTo(messagesPath)[mark:]
	require.Len(t, sent, 2, "the first request and one follow-up")
	first := gjson.ParseBytes(sent[0].Body)
	assert.Equal(t, "code_execution", first.Get("tools.0.name").String(), "the model sees the tool as code_execution")
	assert.False(t, first.Get("tools.0.type").Exists(), "as a plain tool")
	assert.False(t, first.Get("stream").Bool(), "the model is asked for a whole answer")
	follow := gjson.ParseBytes(sent[1].Body)
	last := follow.Get("messages.@reverse.0")
	assert.Equal(t, "user", last.Get("role").String(), "the follow-up ends with a user turn")
	assert.Equal(t, "tool_result", last.Get("content.0.type").String(), "carrying the tool_result")
	assert.Equal(t, "toolu_e2e1", last.Get("content.0.tool_use_id").String(), "of the model's call")
	assert.Contains(t, last.Get("content.0.content").String(), "42", "with the real stdout")
	assert.Contains(t, last.Get("content.0.content").String(), "careful", "and stderr")
	assert.Equal(t, messagesAPIKey, sent[1].Header.Get("x-api-key"), "the follow-up carries the credential")
	assert.NotEmpty(t, sent[1].Header.Get("anthropic-version"), "and anthropic-version")

	require.Len(t, msg.Content, 4, "text, server_tool_use, result, text: %s", msg.RawJSON())
	assert.Equal(t, "Let me compute that.", msg.Content[0].Text, "the model's first text")
	use := msg.Content[1]
	assert.Equal(t, "server_tool_use", use.Type, "a server tool use")
	assert.Equal(t, "srvtoolu_e2e1", use.ID, "its id")
	assert.Equal(t, "code_execution", use.Name, "its name")
	assert.Equal(t, "import sys\nprint(40 + 2)\nprint('careful', file=sys.stderr)", gjson.GetBytes(use.Input, "code").String(), "its code")
	res := msg.Content[2]
	require.Equal(t, "code_execution_tool_result", res.Type, "the result block")
	assert.Equal(t, "srvtoolu_e2e1", res.ToolUseID, "of the call")
	out := res.AsCodeExecutionToolResult().Content
	assert.Equal(t, "code_execution_result", out.Type, "a result")
	assert.Equal(t, "42\n", out.Stdout, "the real stdout")
	assert.Equal(t, "careful\n", out.Stderr, "the real stderr")
	assert.Equal(t, int64(0), out.ReturnCode, "return code")
	assert.Equal(t, "40 + 2 is 42.", msg.Content[3].Text, "the final text")
	assert.Equal(t, int64(80), msg.Usage.InputTokens, "input tokens summed")
	assert.Equal(t, int64(19), msg.Usage.OutputTokens, "output tokens summed")
	assert.Equal(t, anthropic.StopReasonEndTurn, msg.StopReason, "stop reason")
	assert.NotEmpty(t, msg.Container.ID, "the container is named")
	return msg
}

// blockSummary is what two answers of the same script share: each block's type, text, code
// and output (the container's id and expiry differ).
func blockSummary(m *anthropic.Message) []string {
	var out []string
	for _, b := range m.Content {
		out = append(out, b.Type+"|"+b.Text+"|"+b.ID+"|"+string(b.Input)+"|"+b.AsCodeExecutionToolResult().Content.Stdout)
	}
	return out
}

// testMessagesClientErrors checks that a client's mistakes are answered 400 in Anthropic's
// error shape, which the SDK reads as its error type, without the model being asked.
func testMessagesClientErrors(t *testing.T, s *Stack) {
	client := s.anthropicClient()
	mark := len(s.Model.RequestsTo(messagesPath))

	clash := askMessages("hi")
	clash.Tools = append(clash.Tools, anthropic.ToolUnionParam{OfTool: &anthropic.ToolParam{
		Name: "code_execution", InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{}},
	}})
	_, err := client.Messages.New(context.Background(), clash)
	var apiErr *anthropic.Error
	require.True(t, errors.As(err, &apiErr), "a client tool named code_execution: an API error, got %v", err)
	assert.Equal(t, http.StatusBadRequest, apiErr.StatusCode, "status")
	assert.EqualValues(t, "invalid_request_error", apiErr.Type(), "error type")
	assert.Contains(t, apiErr.Message, "reserved", "message")

	err = client.Post(context.Background(), "v1/messages", nil, nil, option.WithRequestBody("application/json", []byte(`{"model":"claude-e2e","messages":[`)))
	require.True(t, errors.As(err, &apiErr), "invalid JSON: an API error, got %v", err)
	assert.Equal(t, http.StatusBadRequest, apiErr.StatusCode, "status")
	assert.EqualValues(t, "invalid_request_error", apiErr.Type(), "error type")
	assert.Equal(t, "error", gjson.Get(apiErr.RawJSON(), "type").String(), "Anthropic's error shape: %s", apiErr.RawJSON())

	assert.Len(t, s.Model.RequestsTo(messagesPath), mark, "the model is not asked")
}
