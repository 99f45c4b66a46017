package e2e

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
	"google.golang.org/protobuf/types/known/durationpb"

	configv1 "github.com/codeinterp/codeinterp/api/codeinterp/config/v1"
	"github.com/codeinterp/codeinterp/test/e2e/fakemodel"
)

// ptcPauseTimeout is the ptc.pause_timeout of TestProgrammaticToolCalling: short, so that an
// abandoned pause ends within the test, long enough for the client's answers in between.
const ptcPauseTimeout = 2 * time.Second

// ptcCell calls the client's roll tool twice at once, then once more after that pause, and
// prints the total of the results.
const ptcCell = "import asyncio\n" +
	"async def main():\n" +
	"    a, b = await asyncio.gather(roll({'player': 'p1'}), roll({'player': 'p2'}))\n" +
	"    c = await roll({'player': 'p3'})\n" +
	"    return int(a) + int(b) + int(c)\n" +
	"print('total', asyncio.run(main()))\n"

// askPTC is a Messages request with code_execution_20260120 and a client tool callable only
// from its code.
func askPTC(text string) anthropic.MessageNewParams {
	p := askMessages(text)
	p.Tools = []anthropic.ToolUnionParam{
		{OfCodeExecutionTool20260120: &anthropic.CodeExecutionTool20260120Param{}},
		{OfTool: &anthropic.ToolParam{Name: "roll", Description: anthropic.String("Roll a die for a player."),
			InputSchema:    anthropic.ToolInputSchemaParam{Properties: map[string]any{"player": map[string]any{"type": "string"}}},
			AllowedCallers: []string{"code_execution_20260120"}}},
	}
	return p
}

// TestProgrammaticToolCalling runs programmatic tool calling through both fronts with
// anthropic-sdk-go: a cell calls the client's tool twice in parallel, pauses, is resumed by the
// client's next request with the results (no model call), pauses on a third call, and is resumed
// again: its output, which used the results, goes to the model, and the final answer shows the
// cell's result and the model's text (plain and streamed). A tool_result for a cell that has
// ended, and one for a pause abandoned past ptc.pause_timeout, get the native 400. An anonymous
// caller's paused cell is resumed as well.
func TestProgrammaticToolCalling(t *testing.T) {
	env := NewEnv(t, EnvOptions{Configure: func(c *configv1.Config) {
		c.Ptc = &configv1.Ptc{PauseTimeout: durationpb.New(ptcPauseTimeout)}
	}})
	env.Fronts(t, func(t *testing.T, s *Stack) {
		t.Run("plain", func(t *testing.T) { testPTC(t, s, false) })
		t.Run("stream", func(t *testing.T) { testPTC(t, s, true) })
		t.Run("abandoned", func(t *testing.T) { testPTCAbandoned(t, s) })
		t.Run("anonymous", func(t *testing.T) { testPTCAnonymous(t, s) })
	})
}

// sendMessages sends params, streamed (the SDK's accumulator rebuilding the message) or not.
func sendMessages(t *testing.T, client anthropic.Client, params anthropic.MessageNewParams, stream bool) (*anthropic.Message, error) {
	t.Helper()
	ctx := context.Background()
	if !stream {
		return client.Messages.New(ctx, params)
	}
	st := client.Messages.NewStreaming(ctx, params)
	acc := anthropic.Message{}
	for st.Next() {
		if err := acc.Accumulate(st.Current()); err != nil {
			return nil, err
		}
	}
	err := errors.Join(st.Err(), st.Close())
	return &acc, err
}

// answerCalls is the user message answering each call of msg's tool_use blocks with results,
// in order.
func answerCalls(t *testing.T, msg *anthropic.Message, results ...string) anthropic.MessageParam {
	t.Helper()
	var blocks []anthropic.ContentBlockParamUnion
	for _, b := range msg.Content {
		if b.Type == "tool_use" {
			require.Less(t, len(blocks), len(results), "a result for each call: %s", msg.RawJSON())
			blocks = append(blocks, anthropic.NewToolResultBlock(b.ID, results[len(blocks)], false))
		}
	}
	require.Len(t, blocks, len(results), "a call for each result: %s", msg.RawJSON())
	return anthropic.NewUserMessage(blocks...)
}

func testPTC(t *testing.T, s *Stack, stream bool) {
	mark := len(s.Model.RequestsTo(messagesPath))
	s.Model.Enqueue(messagesPath,
		fakemodel.JSON(fakemodel.AnthropicMessage("claude-e2e", fakemodel.Usage{Input: 10, Output: 5},
			fakemodel.Text("Rolling."), fakemodel.ToolUse("toolu_c1", "code_execution", map[string]any{"code": ptcCell}))),
		fakemodel.JSON(fakemodel.AnthropicMessage("claude-e2e", fakemodel.Usage{Input: 30, Output: 4}, fakemodel.Text("The total is 12."))),
	)
	t.Cleanup(func() { assert.Zero(t, s.Model.Pending(), "every scripted answer was used") })
	client := s.anthropicClient()
	params := askPTC("Roll for three players and add up.")

	first, err := sendMessages(t, client, params, stream)
	require.NoError(t, err, "the first request")
	require.Len(t, first.Content, 4, "text, server_tool_use, two tool_use called from code: %s", first.RawJSON())
	cell := first.Content[1]
	assert.Equal(t, "server_tool_use", cell.Type, "the cell")
	for i, b := range first.Content[2:] {
		use := b.AsToolUse()
		assert.Equal(t, "roll", use.Name, "call %d", i)
		assert.Equal(t, "code_execution_20260120", use.Caller.Type, "call %d is the code's", i)
		assert.Equal(t, cell.ID, use.Caller.ToolID, "call %d is the cell's", i)
	}
	assert.JSONEq(t, `{"player":"p1"}`, string(first.Content[2].Input), "the first call's input")
	assert.Equal(t, anthropic.StopReasonToolUse, first.StopReason, "paused")
	require.NotEmpty(t, first.Container.ID, "the container")

	params.Container = anthropic.MessageCreateParamsContainerUnion{OfString: anthropic.String(first.Container.ID)}
	params.Messages = append(params.Messages, first.ToParam(), answerCalls(t, first, "3", "4"))
	second, err := sendMessages(t, client, params, stream)
	require.NoError(t, err, "the first resume")
	require.Len(t, second.Content, 1, "only the cell's next call: %s", second.RawJSON())
	use := second.Content[0].AsToolUse()
	assert.JSONEq(t, `{"player":"p3"}`, string(use.Input), "the call after the pause")
	assert.Equal(t, cell.ID, use.Caller.ToolID, "the same cell")
	assert.Equal(t, anthropic.StopReasonToolUse, second.StopReason, "paused again")
	assert.Zero(t, second.Usage.InputTokens, "no inference")
	assert.Equal(t, first.Container.ID, second.Container.ID, "the same container")
	require.Len(t, s.Model.RequestsTo(messagesPath)[mark:], 1, "no model call for the resume")

	params.Messages = append(params.Messages, second.ToParam(), answerCalls(t, second, "5"))
	final, err := sendMessages(t, client, params, stream)
	require.NoError(t, err, "the second resume")
	require.Len(t, final.Content, 2, "the cell's result, the model's text: %s", final.RawJSON())
	res := final.Content[0].AsCodeExecutionToolResult()
	assert.Equal(t, cell.ID, res.ToolUseID, "the cell's result")
	assert.Equal(t, "total 12\n", res.Content.Stdout, "the code used the results")
	assert.Equal(t, "The total is 12.", final.Content[1].Text, "the model's answer")
	assert.Equal(t, anthropic.StopReasonEndTurn, final.StopReason, "done")

	sent := s.Model.RequestsTo(messagesPath)[mark:]
	require.Len(t, sent, 2, "two model calls in all")
	msgs := gjson.GetBytes(sent[1].Body, "messages").Array()
	require.Len(t, msgs, 3, "the prompt, the cell's call, its output: %s", sent[1].Body)
	assert.Equal(t, "total 12\n", msgs[2].Get("content.0.content").String(), "the model reads the cell's output")
	assert.NotContains(t, string(sent[1].Body), `"roll"`+`,"input"`, "nothing of the calls made from code")

	// The cell has ended: its calls' results are answered natively.
	_, err = client.Messages.New(context.Background(), params)
	var apiErr *anthropic.Error
	require.ErrorAs(t, err, &apiErr, "a tool_result for a cell that ended")
	assert.Equal(t, http.StatusBadRequest, apiErr.StatusCode, "a 400")
	assert.Contains(t, apiErr.RawJSON(), "source tool `"+cell.ID+"` not found for tool use block", "the native error")
	assert.Len(t, s.Model.RequestsTo(messagesPath)[mark:], 2, "no model call")
}

// testPTCAbandoned: a pause nothing resumes within ptc.pause_timeout is ended (the calls raise
// TimeoutError in the code); its results coming later get the native 400.
func testPTCAbandoned(t *testing.T, s *Stack) {
	s.Model.Enqueue(messagesPath, fakemodel.JSON(fakemodel.AnthropicMessage("claude-e2e", fakemodel.Usage{Input: 10, Output: 5},
		fakemodel.ToolUse("toolu_c2", "code_execution", map[string]any{"code": ptcCell}))))
	t.Cleanup(func() { assert.Zero(t, s.Model.Pending(), "every scripted answer was used") })
	client := s.anthropicClient()
	params := askPTC("Roll.")
	first, err := client.Messages.New(context.Background(), params)
	require.NoError(t, err, "the first request")
	require.Equal(t, anthropic.StopReasonToolUse, first.StopReason, "paused: %s", first.RawJSON())
	time.Sleep(ptcPauseTimeout + 500*time.Millisecond)
	params.Container = anthropic.MessageCreateParamsContainerUnion{OfString: anthropic.String(first.Container.ID)}
	params.Messages = append(params.Messages, first.ToParam(), answerCalls(t, first, "1", "2"))
	_, err = client.Messages.New(context.Background(), params)
	var apiErr *anthropic.Error
	require.ErrorAs(t, err, &apiErr, "the results of an abandoned pause")
	assert.Equal(t, http.StatusBadRequest, apiErr.StatusCode, "a 400")
	assert.True(t, strings.Contains(apiErr.RawJSON(), "not found for tool use block"), "the native error: %s", apiErr.RawJSON())
}

// testPTCAnonymous: a caller without a credential, whose container is ephemeral, has it kept
// while its cell is paused: the next request resumes the cell there, and once the cell has
// ended and the answer is out the container is gone (its id unknown, a 404).
func testPTCAnonymous(t *testing.T, s *Stack) {
	s.Model.Enqueue(messagesPath,
		fakemodel.JSON(fakemodel.AnthropicMessage("claude-e2e", fakemodel.Usage{Input: 10, Output: 5},
			fakemodel.ToolUse("toolu_c3", "code_execution", map[string]any{"code": ptcCell}))),
		fakemodel.JSON(fakemodel.AnthropicMessage("claude-e2e", fakemodel.Usage{Input: 30, Output: 4}, fakemodel.Text("12."))),
	)
	t.Cleanup(func() { assert.Zero(t, s.Model.Pending(), "every scripted answer was used") })
	// The SDK insists on a credential, and sets it past its middleware: the transport drops it.
	client := anthropic.NewClient(option.WithBaseURL(s.Front.URL()+"/"), option.WithAPIKey("unsent"), option.WithMaxRetries(0),
		option.WithHTTPClient(&http.Client{Transport: withoutCredentials{s.transport}}))
	params := askPTC("Roll.")
	first, err := client.Messages.New(context.Background(), params)
	require.NoError(t, err, "the first request")
	require.Equal(t, anthropic.StopReasonToolUse, first.StopReason, "paused: %s", first.RawJSON())
	require.NotEmpty(t, first.Container.ID, "the container")

	params.Container = anthropic.MessageCreateParamsContainerUnion{OfString: anthropic.String(first.Container.ID)}
	params.Messages = append(params.Messages, first.ToParam(), answerCalls(t, first, "3", "4"))
	second, err := client.Messages.New(context.Background(), params)
	require.NoError(t, err, "the first resume")
	require.Equal(t, anthropic.StopReasonToolUse, second.StopReason, "paused again: %s", second.RawJSON())
	assert.Equal(t, first.Container.ID, second.Container.ID, "the same container")

	params.Messages = append(params.Messages, second.ToParam(), answerCalls(t, second, "5"))
	final, err := client.Messages.New(context.Background(), params)
	require.NoError(t, err, "the second resume")
	require.Len(t, final.Content, 2, "the cell's result, the model's text: %s", final.RawJSON())
	assert.Equal(t, "total 12\n", final.Content[0].AsCodeExecutionToolResult().Content.Stdout, "the code used the results")

	_, err = client.Messages.New(context.Background(), params)
	var apiErr *anthropic.Error
	require.ErrorAs(t, err, &apiErr, "a request naming the ended cell's container")
	assert.Equal(t, http.StatusNotFound, apiErr.StatusCode, "the anonymous container is gone: %s", apiErr.RawJSON())
}

// withoutCredentials is a transport sending each request without a credential header.
type withoutCredentials struct{ next http.RoundTripper }

func (w withoutCredentials) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Del("authorization")
	r.Header.Del("x-api-key")
	return w.next.RoundTrip(r)
}
