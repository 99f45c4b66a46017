package fakemodel

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func client(s *Server) openai.Client {
	return openai.NewClient(option.WithBaseURL(s.URL()+"/v1/"), option.WithAPIKey("sk-test"),
		option.WithMaxRetries(0), option.WithHTTPClient(s.Client()))
}

func post(t *testing.T, s *Server, path, body string) (int, string) {
	t.Helper()
	url := s.URL() + path
	resp, err := s.Client().Post(url, "application/json", strings.NewReader(body))
	require.NoError(t, err, "POST %s", url)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err, "read %s", url)
	return resp.StatusCode, string(b)
}

func TestScriptAndRecord(t *testing.T) {
	s := New(t)
	s.Enqueue("/v1/a", JSON(map[string]any{"n": 1}), Response{Status: 202, Body: []byte("raw")})
	s.Enqueue("/v1/b", Error(http.StatusTooManyRequests, "slow down"))

	tests := []struct {
		name       string
		givePath   string
		wantStatus int
		wantBody   string
	}{
		{name: "first queued answer", givePath: "/v1/a", wantStatus: 200, wantBody: `{"n":1}`},
		{name: "second queued answer", givePath: "/v1/a", wantStatus: 202, wantBody: "raw"},
		{name: "queue of another path", givePath: "/v1/b", wantStatus: 429, wantBody: `{"error":{"code":null,"message":"slow down","param":null,"type":"invalid_request_error"}}`},
		{name: "script ran out", givePath: "/v1/a?x=1", wantStatus: 500, wantBody: `{"error":{"code":null,"message":"fakemodel: no scripted answer for POST /v1/a (request 4)","param":null,"type":"invalid_request_error"}}`},
	}
	for _, tt := range tests {
		status, body := post(t, s, tt.givePath, `{"q":"`+tt.name+`"}`)
		assert.Equal(t, tt.wantStatus, status, "status of %s", tt.name)
		assert.Equal(t, tt.wantBody, body, "body of %s", tt.name)
	}
	assert.Equal(t, 0, s.Pending(), "all queued answers served")

	reqs := s.Requests()
	require.Len(t, reqs, 4, "requests recorded")
	assert.Equal(t, "POST", reqs[3].Method, "method")
	assert.Equal(t, "/v1/a", reqs[3].Path, "path")
	assert.Equal(t, "x=1", reqs[3].Query, "query")
	assert.Equal(t, "application/json", reqs[3].Header.Get("Content-Type"), "header")
	var got map[string]string
	require.NoError(t, reqs[3].Decode(&got), "decode the body")
	assert.Equal(t, "script ran out", got["q"], "body")
	assert.Len(t, s.RequestsTo("/v1/a"), 3, "requests to /v1/a")
}

func TestHandleAfterQueue(t *testing.T) {
	s := New(t)
	s.Enqueue("/v1/x", Response{Body: []byte("queued")})
	s.Handle("/v1/x", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		_, _ = io.WriteString(w, "handled "+string(b))
	})
	_, first := post(t, s, "/v1/x", "1")
	_, second := post(t, s, "/v1/x", "2")
	assert.Equal(t, "queued", first, "queued answers come first")
	assert.Equal(t, "handled 2", second, "then the handler, which can read the body")
}

func TestConcurrentRequests(t *testing.T) {
	s := New(t)
	const n = 20
	for range n {
		s.Enqueue("/v1/c", Response{Body: []byte("ok")})
	}
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			resp, err := s.Client().Post(s.URL()+"/v1/c", "text/plain", nil)
			if assert.NoError(t, err, "concurrent POST") {
				resp.Body.Close()
				assert.Equal(t, 200, resp.StatusCode, "concurrent status")
			}
		})
	}
	wg.Wait()
	assert.Len(t, s.Requests(), n, "requests recorded")
	assert.Equal(t, 0, s.Pending(), "queue drained")
}

// TestSSEHeldEvent: an event with Wait is only written once released, and what came before
// is already flushed to the client.
func TestSSEHeldEvent(t *testing.T) {
	s := New(t)
	release := make(chan struct{})
	s.Enqueue("/v1/s", SSE(Event{Name: "one", Data: `{"a":1}`}, Event{Data: "line1\nline2", Wait: release}))
	resp, err := s.Client().Post(s.URL()+"/v1/s", "application/json", nil)
	require.NoError(t, err, "POST /v1/s")
	defer resp.Body.Close()
	assert.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"), "content-type")
	br := bufio.NewReader(resp.Body)
	var first []string
	for range 3 {
		line, err := br.ReadString('\n')
		require.NoError(t, err, "read the first event before the release")
		first = append(first, line)
	}
	assert.Equal(t, []string{"event: one\n", "data: {\"a\":1}\n", "\n"}, first, "first event")
	close(release)
	rest, err := io.ReadAll(br)
	require.NoError(t, err, "read the rest")
	assert.Equal(t, "data: line1\ndata: line2\n\n", string(rest), "multi-line data")
}

// TestResponsesBuilders: the Responses API answers decode with the openai-go SDK.
func TestResponsesBuilders(t *testing.T) {
	s := New(t)
	items := []Item{FunctionCall("code_interpreter", "call_1", `{"code":"print(1)"}`), Message("done")}
	s.Enqueue("/v1/responses", JSON(Responses("gpt-test", Usage{Input: 10, Output: 5}, items...)))
	s.Enqueue("/v1/responses", SSE(ResponsesStream("gpt-test", Usage{Input: 10, Output: 5}, items...)...))
	c := client(s)
	ctx := context.Background()

	resp, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: "gpt-test", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}})
	require.NoError(t, err, "Responses.New")
	checkResponse(t, resp, "non-streaming")

	stream := c.Responses.NewStreaming(ctx, responses.ResponseNewParams{Model: "gpt-test", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}})
	defer stream.Close()
	var types []string
	var args, text string
	var completed *responses.Response
	for i := 0; stream.Next(); i++ {
		ev := stream.Current()
		types = append(types, ev.Type)
		assert.EqualValues(t, i, ev.SequenceNumber, "sequence_number of event %d", i)
		switch ev.Type {
		case "response.function_call_arguments.done":
			args = ev.AsResponseFunctionCallArgumentsDone().Arguments
		case "response.output_text.done":
			text = ev.AsResponseOutputTextDone().Text
		case "response.completed":
			r := ev.AsResponseCompleted().Response
			completed = &r
		}
	}
	require.NoError(t, stream.Err(), "stream")
	assert.Equal(t, []string{
		"response.created", "response.in_progress",
		"response.output_item.added", "response.function_call_arguments.delta", "response.function_call_arguments.done", "response.output_item.done",
		"response.output_item.added", "response.content_part.added", "response.output_text.delta", "response.output_text.done", "response.content_part.done", "response.output_item.done",
		"response.completed",
	}, types, "event order")
	assert.Equal(t, `{"code":"print(1)"}`, args, "streamed arguments")
	assert.Equal(t, "done", text, "streamed text")
	require.NotNil(t, completed, "response.completed")
	checkResponse(t, completed, "streaming")
}

func checkResponse(t *testing.T, resp *responses.Response, name string) {
	t.Helper()
	assert.Equal(t, "gpt-test", string(resp.Model), "model (%s)", name)
	assert.EqualValues(t, "completed", resp.Status, "status (%s)", name)
	require.Len(t, resp.Output, 2, "output items (%s)", name)
	fc := resp.Output[0].AsFunctionCall()
	assert.Equal(t, "code_interpreter", fc.Name, "function name (%s)", name)
	assert.Equal(t, "call_1", fc.CallID, "call_id (%s)", name)
	assert.Equal(t, `{"code":"print(1)"}`, fc.Arguments, "arguments (%s)", name)
	msg := resp.Output[1].AsMessage()
	require.Len(t, msg.Content, 1, "message content (%s)", name)
	assert.Equal(t, "done", msg.Content[0].Text, "message text (%s)", name)
	assert.EqualValues(t, 10, resp.Usage.InputTokens, "input tokens (%s)", name)
	assert.EqualValues(t, 5, resp.Usage.OutputTokens, "output tokens (%s)", name)
	assert.EqualValues(t, 15, resp.Usage.TotalTokens, "total tokens (%s)", name)
	assert.Equal(t, "done", resp.OutputText(), "output text (%s)", name)
}

// TestChatBuilders: the Chat Completions answers decode with the openai-go SDK, and the
// stream accumulates into the same message.
func TestChatBuilders(t *testing.T) {
	s := New(t)
	calls := []ToolCall{{ID: "call_1", Name: "code_interpreter", Arguments: `{"code":"1+1"}`}}
	s.Enqueue("/v1/chat/completions",
		JSON(Chat("gpt-test", Usage{Input: 7, Output: 3}, "", calls...)),
		SSE(ChatStream("gpt-test", Usage{Input: 7, Output: 3}, "", calls...)...),
		JSON(Chat("gpt-test", Usage{Input: 1, Output: 1}, "two")))
	c := client(s)
	ctx := context.Background()
	params := openai.ChatCompletionNewParams{Model: "gpt-test", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}}

	cc, err := c.Chat.Completions.New(ctx, params)
	require.NoError(t, err, "Chat.Completions.New")
	require.Len(t, cc.Choices, 1, "choices")
	assert.Equal(t, "tool_calls", cc.Choices[0].FinishReason, "finish_reason")
	require.Len(t, cc.Choices[0].Message.ToolCalls, 1, "tool calls")
	tc := cc.Choices[0].Message.ToolCalls[0]
	assert.Equal(t, "call_1", tc.ID, "tool call id")
	assert.Equal(t, "code_interpreter", tc.Function.Name, "tool call name")
	assert.Equal(t, `{"code":"1+1"}`, tc.Function.Arguments, "tool call arguments")
	assert.EqualValues(t, 10, cc.Usage.TotalTokens, "usage")

	stream := c.Chat.Completions.NewStreaming(ctx, params)
	defer stream.Close()
	var acc openai.ChatCompletionAccumulator
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	require.NoError(t, stream.Err(), "stream")
	require.Len(t, acc.Choices, 1, "accumulated choices")
	assert.Equal(t, "tool_calls", acc.Choices[0].FinishReason, "accumulated finish_reason")
	require.Len(t, acc.Choices[0].Message.ToolCalls, 1, "accumulated tool calls")
	assert.Equal(t, `{"code":"1+1"}`, acc.Choices[0].Message.ToolCalls[0].Function.Arguments, "accumulated arguments")
	assert.Equal(t, "code_interpreter", acc.Choices[0].Message.ToolCalls[0].Function.Name, "accumulated name")
	assert.EqualValues(t, 10, acc.Usage.TotalTokens, "accumulated usage")

	cc, err = c.Chat.Completions.New(ctx, params)
	require.NoError(t, err, "text answer")
	assert.Equal(t, "two", cc.Choices[0].Message.Content, "content")
	assert.Equal(t, "stop", cc.Choices[0].FinishReason, "finish_reason")

	reqs := s.RequestsTo("/v1/chat/completions")
	require.Len(t, reqs, 3, "requests")
	assert.Equal(t, "Bearer sk-test", reqs[0].Header.Get("Authorization"), "authorization recorded")
}
