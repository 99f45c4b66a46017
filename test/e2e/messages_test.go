package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/ssestream"
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
			plain = testMessagesRun(t, s, false, false)
		})
		t.Run("stream", func(t *testing.T) {
			streamed := testMessagesRun(t, s, true, false)
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

	// The follow-up's stream itself reports the error, after it began.
	s.Model.Enqueue(messagesPath,
		fakemodel.JSON(fakemodel.AnthropicMessage("claude-e2e", fakemodel.Usage{Input: 10, Output: 5},
			fakemodel.ToolUse("toolu_u2", "code_execution", map[string]any{"code": "print(2)"}))),
		fakemodel.SSE(
			fakemodel.Event{Name: "message_start", Data: `{"type":"message_start","message":{"id":"msg_u","type":"message","role":"assistant","model":"claude-e2e","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":1,"output_tokens":1}}}`},
			fakemodel.Event{Name: "error", Data: `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded mid-stream"}}`}))
	st = client.Messages.NewStreaming(context.Background(), askMessages("print 2"))
	for st.Next() {
	}
	require.True(t, errors.As(st.Err(), &apiErr), "a streamed API error, got %v", st.Err())
	assert.EqualValues(t, "overloaded_error", apiErr.Type(), "the upstream stream's error type")
	assert.Equal(t, "Overloaded mid-stream", apiErr.Message, "and message")
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
	env.Fronts(t, func(t *testing.T, s *Stack) { testMessagesRun(t, s, true, true) })
}

// testMessagesRun scripts a code call and its answer, asks (as a stream when stream; replayed
// when the profile replays streams), and checks what the model and the client got; it returns
// the client's message.
func testMessagesRun(t *testing.T, s *Stack, stream, replayed bool) *anthropic.Message {
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
	assert.Equal(t, stream && !replayed, first.Get("stream").Bool(), "the model is asked for a stream when the client asked for one, unless it is replayed")
	follow := gjson.ParseBytes(sent[1].Body)
	// A streaming client's follow-up asks for a stream; the model answers JSON, which does too.
	assert.Equal(t, stream, follow.Get("stream").Bool(), "the follow-up streams for a streaming client")
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

// anthropicTextStream is a Messages event stream of one text answer whose text comes in the
// given pieces; every piece after the first waits for release.
func anthropicTextStream(t *testing.T, model string, u fakemodel.Usage, release <-chan struct{}, pieces ...string) []fakemodel.Event {
	t.Helper()
	ev := func(name string, v any) fakemodel.Event {
		data, err := json.Marshal(v)
		require.NoError(t, err, "event %s", name)
		return fakemodel.Event{Name: name, Data: string(data)}
	}
	out := []fakemodel.Event{
		ev("message_start", map[string]any{"type": "message_start", "message": map[string]any{
			"id": "msg_streamed", "type": "message", "role": "assistant", "model": model, "content": []any{},
			"stop_reason": nil, "stop_sequence": nil, "usage": map[string]any{"input_tokens": u.Input, "output_tokens": 1},
		}}),
		ev("ping", map[string]any{"type": "ping"}),
		ev("content_block_start", map[string]any{"type": "content_block_start", "index": 0, "content_block": map[string]any{"type": "text", "text": ""}}),
	}
	for i, p := range pieces {
		d := ev("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]any{"type": "text_delta", "text": p}})
		if i > 0 {
			d.Wait, d.Delay = release, 50*time.Millisecond
		}
		out = append(out, d)
	}
	return append(out,
		ev("content_block_stop", map[string]any{"type": "content_block_stop", "index": 0}),
		ev("message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": "end_turn", "stop_sequence": nil},
			"usage": map[string]any{"output_tokens": u.Output}}),
		ev("message_stop", map[string]any{"type": "message_stop"}))
}

// TestMessagesStreamsAsItHappens: a streaming Messages answer reaches the client as the loop
// goes, through both fronts: the server_tool_use block before its command has run (the
// follow-up is sent after the run), its result when the run is over; the follow-up asks the
// model for a stream, and its text reaches the client delta by delta while the model still
// holds the rest of its stream. The SDK's accumulator reads the whole.
func TestMessagesStreamsAsItHappens(t *testing.T) {
	env := NewEnv(t, EnvOptions{})
	pieces := []string{"It ", "slept, ", "then printed."}
	env.Fronts(t, func(t *testing.T, s *Stack) {
		mark := len(s.Model.RequestsTo(messagesPath))
		// The model holds the rest of its stream until the client has read the first delta.
		held := newLiveRelease(t)
		var useBeforeRun atomic.Bool
		s.Model.Enqueue(messagesPath,
			fakemodel.JSON(fakemodel.AnthropicMessage("claude-e2e", fakemodel.Usage{Input: 10, Output: 5},
				fakemodel.Text("Sleeping first."),
				fakemodel.ToolUse("toolu_p1", "bash_code_execution", map[string]any{"command": "sleep 1; echo done"}))),
			fakemodel.SSE(anthropicTextStream(t, "claude-e2e", fakemodel.Usage{Input: 20, Output: 6}, held.ch, pieces...)...))
		t.Cleanup(func() { assert.Zero(t, s.Model.Pending(), "every scripted answer was used") })

		body := `{"model":"claude-e2e","max_tokens":100,"stream":true,"tools":[{"type":"code_execution_20250825","name":"code_execution"}],` +
			`"messages":[{"role":"user","content":"Sleep, then print."}]}`
		got := readStream(t, s, t.Context(), "sk-ant-progressive", messagesPath, body, true, func(line string) bool {
			switch {
			case strings.Contains(line, `"content_block":{"type":"server_tool_use"`):
				useBeforeRun.Store(len(s.Model.RequestsTo(messagesPath)) == mark+1)
			case strings.HasPrefix(line, `data: {"type":"content_block_delta"`) && strings.Contains(line, `"text":"It "`):
				held.read()
			}
			return false
		})

		sent := s.Model.RequestsTo(messagesPath)[mark:]
		require.Len(t, sent, 2, "the first call and one follow-up")
		assert.True(t, gjson.GetBytes(sent[1].Body, "stream").Bool(), "the follow-up asks the model for a stream")
		assert.True(t, useBeforeRun.Load(), "the server_tool_use reached the client before the command had run")
		assert.True(t, held.byClient.Load(), "the client read the first text delta while the model held the rest of its stream")
		assert.Less(t, first(t, got, `data: {"type":"content_block_start","index":1,"content_block":{"type":"server_tool_use"`).at,
			first(t, got, `data: {"type":"content_block_start","index":2,"content_block":{"type":"bash_code_execution_tool_result"`).at, "the call, then its result")
		var deltas []string
		for _, a := range got {
			if strings.HasPrefix(a.line, `data: {"type":"content_block_delta","index":3,`) {
				deltas = append(deltas, gjson.Get(strings.TrimPrefix(a.line, "data: "), "delta.text").String())
			}
		}
		assert.Equal(t, pieces, deltas, "the follow-up's text arrives in the model's deltas")

		var sse strings.Builder
		for _, a := range got {
			sse.WriteString(a.line + "\n")
			if strings.HasPrefix(a.line, "data: ") {
				sse.WriteString("\n")
			}
		}
		res := &http.Response{Header: http.Header{"Content-Type": {"text/event-stream"}}, Body: io.NopCloser(strings.NewReader(sse.String()))}
		st := ssestream.NewStream[anthropic.MessageStreamEventUnion](ssestream.NewDecoder(res), nil)
		var msg anthropic.Message
		for st.Next() {
			require.NoError(t, msg.Accumulate(st.Current()), "accumulate %s", st.Current().Type)
		}
		require.NoError(t, st.Err(), "the stream")
		require.Len(t, msg.Content, 4, "text, server_tool_use, result, text: %s", msg.RawJSON())
		assert.Equal(t, "Sleeping first.", msg.Content[0].Text, "the first text")
		assert.Equal(t, "done\n", msg.Content[2].AsBashCodeExecutionToolResult().Content.Stdout, "the command's output")
		assert.Equal(t, strings.Join(pieces, ""), msg.Content[3].Text, "the follow-up's text")
		assert.Equal(t, int64(30), msg.Usage.InputTokens, "input tokens summed")
		assert.Equal(t, int64(11), msg.Usage.OutputTokens, "output tokens summed")
		assert.Equal(t, anthropic.StopReasonEndTurn, msg.StopReason, "stop reason")
		assert.NotEmpty(t, msg.Container.ID, "the container")
	})
}

// TestMessagesStreamedCall: a follow-up the model streams may call the code tools itself, its
// input in pieces: the loop runs the call the stream built, and the client gets the text before
// it, the call and its result in order; the SDK's accumulator reads the plain answer's blocks.
func TestMessagesStreamedCall(t *testing.T) {
	env := NewEnv(t, EnvOptions{})
	env.Fronts(t, func(t *testing.T, s *Stack) {
		ev := func(name string, v map[string]any) fakemodel.Event {
			data, err := json.Marshal(v)
			require.NoError(t, err, "event %s", name)
			return fakemodel.Event{Name: name, Data: string(data)}
		}
		delta := func(i int, d map[string]any) fakemodel.Event {
			return ev("content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": d})
		}
		script := func() {
			s.Model.Enqueue(messagesPath,
				fakemodel.JSON(fakemodel.AnthropicMessage("claude-e2e", fakemodel.Usage{Input: 10, Output: 5},
					fakemodel.ToolUse("toolu_q1", "bash_code_execution", map[string]any{"command": "echo one > one.txt"}))),
				fakemodel.SSE(
					ev("message_start", map[string]any{"type": "message_start", "message": map[string]any{"id": "msg_q2", "type": "message", "role": "assistant",
						"model": "claude-e2e", "content": []any{}, "stop_reason": nil, "stop_sequence": nil, "usage": map[string]any{"input_tokens": 20, "output_tokens": 1}}}),
					ev("content_block_start", map[string]any{"type": "content_block_start", "index": 0, "content_block": map[string]any{"type": "text", "text": ""}}),
					delta(0, map[string]any{"type": "text_delta", "text": "Now "}),
					delta(0, map[string]any{"type": "text_delta", "text": "read it."}),
					ev("content_block_stop", map[string]any{"type": "content_block_stop", "index": 0}),
					ev("content_block_start", map[string]any{"type": "content_block_start", "index": 1, "content_block": map[string]any{
						"type": "tool_use", "id": "toolu_q2", "name": "bash_code_execution", "input": map[string]any{}}}),
					delta(1, map[string]any{"type": "input_json_delta", "partial_json": `{"comm`}),
					delta(1, map[string]any{"type": "input_json_delta", "partial_json": `and": "cat one.txt"}`}),
					ev("content_block_stop", map[string]any{"type": "content_block_stop", "index": 1}),
					ev("message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": "tool_use", "stop_sequence": nil},
						"usage": map[string]any{"output_tokens": 9}}),
					ev("message_stop", map[string]any{"type": "message_stop"})),
				fakemodel.JSON(fakemodel.AnthropicMessage("claude-e2e", fakemodel.Usage{Input: 30, Output: 3}, fakemodel.Text("It says one."))),
			)
		}
		t.Cleanup(func() { assert.Zero(t, s.Model.Pending(), "every scripted answer was used") })
		mark := len(s.Model.RequestsTo(messagesPath))
		script()
		client := s.anthropicClient()
		st := client.Messages.NewStreaming(context.Background(), askMessagesTools("Write and read."))
		var msg anthropic.Message
		for st.Next() {
			require.NoError(t, msg.Accumulate(st.Current()), "accumulate %s", st.Current().Type)
		}
		require.NoError(t, st.Err(), "the stream")
		require.NoError(t, st.Close(), "close the stream")

		sent := s.Model.RequestsTo(messagesPath)[mark:]
		require.Len(t, sent, 3, "three rounds")
		assert.Equal(t, "one\n", gjson.GetBytes(sent[2].Body, "messages.@reverse.0.content.0.content").String(), "the streamed call ran")
		require.Len(t, msg.Content, 6, "use, result, text, use, result, text: %s", msg.RawJSON())
		assert.Equal(t, "Now read it.", msg.Content[2].Text, "the streamed text")
		assert.Equal(t, "srvtoolu_q2", msg.Content[3].ID, "the streamed call")
		assert.JSONEq(t, `{"command":"cat one.txt"}`, string(msg.Content[3].Input), "with the input the stream built")
		assert.Equal(t, "one\n", msg.Content[4].AsBashCodeExecutionToolResult().Content.Stdout, "its result")
		assert.Equal(t, "It says one.", msg.Content[5].Text, "the answer")
		assert.Equal(t, int64(60), msg.Usage.InputTokens, "input tokens summed")
		assert.Equal(t, int64(17), msg.Usage.OutputTokens, "output tokens summed, the stream's from its message_delta")
	})
}
