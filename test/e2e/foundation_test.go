package e2e

import (
	"context"
	"flag"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
	"google.golang.org/protobuf/proto"

	configv1 "github.com/codeinterp/codeinterp/api/codeinterp/config/v1"
	"github.com/codeinterp/codeinterp/pkg/config"
	"github.com/codeinterp/codeinterp/test/e2e/fakemodel"
	"github.com/codeinterp/codeinterp/test/e2e/harness"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// Issue 2 (foundation) end to end: what reaches the model, what the server sees of each
// request, and how client mistakes and forged headers are handled.
func TestFoundation(t *testing.T) {
	env := NewEnv(t, EnvOptions{})
	env.Fronts(t, func(t *testing.T, s *Stack) {
		m := newModel(t, s.Model)
		t.Run("code_interpreter requests reach the model rewritten exactly", func(t *testing.T) { testRewriteGolden(t, s, m) })
		t.Run("requests without code_interpreter pass through untouched", func(t *testing.T) { testPlainPassThrough(t, s) })
		t.Run("other paths", func(t *testing.T) { testOtherPaths(t, s) })
		t.Run("event streams without code_interpreter are not buffered", func(t *testing.T) { testSSEPassThrough(t, s) })
		t.Run("client mistakes", func(t *testing.T) { testClientMistakes(t, s) })
		t.Run("forged x-codeinterp headers", func(t *testing.T) { testForgedHeaders(t, s, m) })
	})
}

// TestAllowedOverrideModes runs with the filter's allowed_override_modes set to the list the
// docs/envoy.md gives: every mode_override the server sends must be on it (Envoy silently ignores one
// that is not), so the pass-through paths still cost what they should and the loop still runs.
func TestAllowedOverrideModes(t *testing.T) {
	t.Run("listing the streaming mode", func(t *testing.T) { testAllowedOverrideModes(t, true) })
	// A filter that does not list it must have its profile replay streams.
	t.Run("without the streaming mode, stream_mode replay", func(t *testing.T) { testAllowedOverrideModes(t, false) })
}

func testAllowedOverrideModes(t *testing.T, listStreaming bool) {
	cfg := harness.ShippedConfig(t)
	filter := proto.Clone(cfg.Filter).(*extprocv3.ExternalProcessor)
	own := proto.Clone(filter.GetProcessingMode()).(*extprocv3.ProcessingMode)
	passThrough := func(responseHeaders extprocv3.ProcessingMode_HeaderSendMode) *extprocv3.ProcessingMode {
		return &extprocv3.ProcessingMode{
			RequestHeaderMode: extprocv3.ProcessingMode_SEND, RequestBodyMode: extprocv3.ProcessingMode_NONE,
			ResponseHeaderMode: responseHeaders, ResponseBodyMode: extprocv3.ProcessingMode_NONE,
			RequestTrailerMode: extprocv3.ProcessingMode_SKIP, ResponseTrailerMode: extprocv3.ProcessingMode_SKIP,
		}
	}
	// A streaming answer switches the response body to FULL_DUPLEX_STREAMED (trailers SEND).
	streaming := proto.Clone(own).(*extprocv3.ProcessingMode)
	streaming.ResponseBodyMode, streaming.ResponseTrailerMode = extprocv3.ProcessingMode_FULL_DUPLEX_STREAMED, extprocv3.ProcessingMode_SEND
	filter.AllowedOverrideModes = []*extprocv3.ProcessingMode{own, passThrough(extprocv3.ProcessingMode_SKIP), passThrough(extprocv3.ProcessingMode_SEND)}
	configure := func(c *configv1.Config) {
		if c.DefaultProfile == nil {
			c.DefaultProfile = &configv1.Profile{}
		}
		c.DefaultProfile.StreamMode = config.StreamReplay
	}
	if listStreaming {
		filter.AllowedOverrideModes = append(filter.AllowedOverrideModes, streaming)
		configure = nil
	}
	cfg.Filter = filter
	env := NewEnv(t, EnvOptions{Harness: harness.Options{Config: cfg}, Configure: configure})
	env.Fronts(t, func(t *testing.T, s *Stack) {
		m := newModel(t, s.Model)
		t.Run("requests without code_interpreter pass through untouched", func(t *testing.T) { testPlainPassThrough(t, s) })
		t.Run("other paths", func(t *testing.T) { testOtherPaths(t, s) })
		t.Run("event streams without code_interpreter are not buffered", func(t *testing.T) { testSSEPassThrough(t, s) })
		for _, v := range variants {
			t.Run("compute 40+2/"+v.String(), func(t *testing.T) {
				m.clear()
				scenarioComputeResponses(t, &scene{s: s, m: m, v: v, mark: len(m.Requests())})
			})
		}
	})
}

// golden reads testdata/<dir>/<name>, or with -update writes got there first.
func golden(t *testing.T, name string, got []byte) []byte {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update && got != nil {
		require.NoError(t, os.WriteFile(path, got, 0o644), "write %s", path)
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "read %s", path)
	return want
}

func readGive(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	require.NoError(t, err, "read %s", name)
	return b
}

// records returns the harness records of the requests finished after the first n, or skips
// the test on a real Envoy, whose ext_proc exchange cannot be observed.
func records(t *testing.T, s *Stack, n int) []harness.Record {
	t.Helper()
	h := s.Harness()
	if h == nil {
		t.Skip("the ext_proc exchange is observable through the harness only")
	}
	return h.Records()[n:]
}

// recordCount returns how many requests the harness has recorded (0 on a real Envoy).
func recordCount(s *Stack) int {
	if h := s.Harness(); h != nil {
		return len(h.Records())
	}
	return 0
}

func testRewriteGolden(t *testing.T, s *Stack, m *model) {
	tests := []struct {
		name string
		path string
		// send sends the body with the SDK and returns the tools the client got back.
		send func(t *testing.T, client openai.Client, body []byte) string
		// reply is the model's answer.
		reply reply
		// wantTools are the tools echoed to the client: its own, as it sent them.
		wantTools string
	}{
		{
			name: "responses", path: responsesPath,
			send: func(t *testing.T, client openai.Client, body []byte) string {
				stream := client.Responses.NewStreaming(t.Context(), responses.ResponseNewParams{}, option.WithRequestBody("application/json", body))
				defer stream.Close()
				var events []responses.ResponseStreamEventUnion
				for stream.Next() {
					events = append(events, stream.Current())
				}
				require.NoError(t, stream.Err(), "responses: stream")
				final := checkResponsesEvents(t, events)
				assert.Equal(t, `{"type":"code_interpreter"}`, final.ToolChoice.RawJSON(), "responses: tool_choice echoed as the client sent it")
				return final.JSON.Tools.Raw()
			},
			reply:     responsesReply(usage(5, 2), fakemodel.Message("42")),
			wantTools: `[{"type":"function","name":"lookup","parameters":{"type":"object","properties":{}}},{"type":"code_interpreter","container":{"type":"auto","memory_limit":"4g"}},{"type":"web_search"}]`,
		},
		{
			name: "chat", path: chatPath,
			send: func(t *testing.T, client openai.Client, body []byte) string {
				resp, err := client.Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{}, option.WithRequestBody("application/json", body))
				require.NoError(t, err, "chat: request")
				require.Len(t, resp.Choices, 1, "chat: choices")
				assert.Equal(t, "2**100 = 1267650600228229401496703205376", resp.Choices[0].Message.Content, "chat: answer")
				return ""
			},
			reply: chatReply(usage(5, 2), "2**100 = 1267650600228229401496703205376"),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			give := readGive(t, "rewrite/"+tt.name+".give.json")
			mark, recMark := len(m.Requests()), recordCount(s)
			m.script(tt.path, tt.reply)
			tools := tt.send(t, s.Client("sk-golden"), give)
			if tt.wantTools != "" {
				assert.JSONEq(t, tt.wantTools, tools, "%s: tools echoed to the client", tt.name)
			}

			reqs := m.since(mark)
			require.Len(t, reqs, 1, "%s: requests the model got", tt.name)
			got := reqs[0].Body
			want := golden(t, "rewrite/"+tt.name+".want.json", got)
			assert.Equal(t, string(want), string(got), "%s: the body the model got, byte for byte", tt.name)
			assert.Empty(t, reqs[0].Header.Get("Accept-Encoding"), "%s: the model is asked for an uncompressed answer", tt.name)

			recs := records(t, s, recMark)
			require.Len(t, recs, 1, "%s: requests through the front", tt.name)
			assert.Equal(t, string(give), string(sentBody(recs[0])), "%s: the body the server got is the client's", tt.name)
		})
	}
}

// sentBody returns the request body Envoy sent on the stream.
func sentBody(r harness.Record) []byte {
	for _, m := range r.Sent() {
		if b := m.GetRequestBody(); b != nil {
			return b.GetBody()
		}
	}
	return nil
}

// plainExchange is the whole ext_proc exchange of a served request without code_interpreter:
// three messages, and the answer's body never sent to the server.
var plainExchange = []string{
	"-> request_headers", "<- request_headers",
	"-> request_body", "<- request_body",
	"-> response_headers", "<- response_headers",
}

func testPlainPassThrough(t *testing.T, s *Stack) {
	respAnswer := []byte(`{"id":"resp_plain","object":"response","created_at":1700000000,"status":"completed","model":"gpt-e2e",` +
		`"output":[{"type":"message","id":"msg_1","status":"completed","role":"assistant","content":[{"type":"output_text","text":"plain \u00e9","annotations":[]}]}],` +
		`"tools":[],"tool_choice":"auto","parallel_tool_calls":true,"usage":{"input_tokens":1,"output_tokens":1,"total_tokens":2}}`)
	chatAnswer := []byte(`{"id":"chatcmpl-plain","object":"chat.completion","created":1700000000,"model":"gpt-e2e",` +
		`"choices":[{"index":0,"message":{"role":"assistant","content":"plain"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
	tests := []struct {
		name   string
		path   string
		give   string
		answer []byte
		// send sends the body and returns the raw answer the SDK parsed.
		send func(t *testing.T, client openai.Client, body []byte) string
	}{
		{
			name: "responses", path: responsesPath, give: "rewrite/responses_plain.give.json", answer: respAnswer,
			send: func(t *testing.T, client openai.Client, body []byte) string {
				resp, err := client.Responses.New(t.Context(), responses.ResponseNewParams{}, option.WithRequestBody("application/json", body))
				require.NoError(t, err, "responses: request")
				assert.Equal(t, "plain é", resp.OutputText(), "responses: answer text")
				return resp.RawJSON()
			},
		},
		{
			name: "chat", path: chatPath, give: "rewrite/chat_plain.give.json", answer: chatAnswer,
			send: func(t *testing.T, client openai.Client, body []byte) string {
				resp, err := client.Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{}, option.WithRequestBody("application/json", body))
				require.NoError(t, err, "chat: request")
				require.Len(t, resp.Choices, 1, "chat: choices")
				assert.Equal(t, "plain", resp.Choices[0].Message.Content, "chat: answer text")
				return resp.RawJSON()
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			give := readGive(t, tt.give)
			mark, recMark := len(s.Model.Requests()), recordCount(s)
			s.Model.Enqueue(tt.path, fakemodel.Response{Header: http.Header{"Content-Type": {"application/json"}}, Body: tt.answer})
			got := tt.send(t, s.Client("sk-plain"), give)
			assert.Equal(t, string(tt.answer), got, "%s: the client got the model's answer byte for byte", tt.name)

			reqs := s.Model.Requests()[mark:]
			require.Len(t, reqs, 1, "%s: requests the model got", tt.name)
			assert.Equal(t, tt.path, reqs[0].Path, "%s: path", tt.name)
			assert.Equal(t, string(give), string(reqs[0].Body), "%s: the model got the client's body byte for byte", tt.name)

			recs := records(t, s, recMark)
			require.Len(t, recs, 1, "%s: requests through the front", tt.name)
			assert.Equal(t, plainExchange, recs[0].Exchange(), "%s: ext_proc exchange (the answer's body is never sent)", tt.name)
		})
	}
}

func testOtherPaths(t *testing.T, s *Stack) {
	t.Run("embeddings never open a stream", func(t *testing.T) {
		mark, recMark := len(s.Model.Requests()), recordCount(s)
		s.Model.Enqueue("/v1/embeddings", fakemodel.JSON(map[string]any{
			"object": "list", "model": "text-embedding-3-small",
			"data":  []any{map[string]any{"object": "embedding", "index": 0, "embedding": []float64{0.25, -0.5}}},
			"usage": map[string]any{"prompt_tokens": 2, "total_tokens": 2},
		}))
		client := s.Client("sk-embed")
		resp, err := client.Embeddings.New(t.Context(), openai.EmbeddingNewParams{
			Model: openai.EmbeddingModelTextEmbedding3Small,
			Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("hello")},
		})
		require.NoError(t, err, "embeddings request")
		require.Len(t, resp.Data, 1, "embeddings: data")
		assert.Equal(t, []float64{0.25, -0.5}, resp.Data[0].Embedding, "embeddings: vector")
		reqs := s.Model.Requests()[mark:]
		require.Len(t, reqs, 1, "embeddings: requests the model got")
		assert.Equal(t, "/v1/embeddings", reqs[0].Path, "embeddings reached the model")

		recs := records(t, s, recMark)
		require.Len(t, recs, 1, "embeddings: requests through the front")
		assert.False(t, recs[0].StreamOpened, "embeddings: no ext_proc stream (the route disables the filter)")
		assert.Empty(t, recs[0].Exchange(), "embeddings: nothing sent to the server")
	})
	t.Run("another path gets one header exchange", func(t *testing.T) {
		recMark := recordCount(s)
		s.Model.Enqueue("/v1/models", fakemodel.JSON(map[string]any{
			"object": "list", "data": []any{map[string]any{"id": "gpt-e2e", "object": "model", "created": 1700000000, "owned_by": "e2e"}},
		}))
		client := s.Client("sk-models")
		page, err := client.Models.List(t.Context())
		require.NoError(t, err, "models request")
		require.Len(t, page.Data, 1, "models: data")
		assert.Equal(t, "gpt-e2e", page.Data[0].ID, "models: id")

		recs := records(t, s, recMark)
		require.Len(t, recs, 1, "models: requests through the front")
		assert.Equal(t, []string{"-> request_headers", "<- request_headers"}, recs[0].Exchange(),
			"GET /v1/models: one message, then no bodies and no response phase")
		assert.NotNil(t, recs[0].Messages[1].Received.GetModeOverride(), "GET /v1/models: answered with a mode_override")
	})
}

// firstEventGuard bounds how long a test waits for the first event of a pass-through stream
// the model is still holding: only a broken (buffering) front makes it wait at all.
const firstEventGuard = 30 * time.Second

func testSSEPassThrough(t *testing.T, s *Stack) {
	tests := []struct {
		name   string
		path   string
		events []fakemodel.Event
		// read reads the stream: next() for the first event, then the rest after release, and
		// returns the event types (Responses) or chunk ids and contents (Chat) in order.
		read func(t *testing.T, ctx context.Context, client openai.Client, release func()) []string
		want []string
	}{
		{
			name: "responses", path: responsesPath,
			events: fakemodel.ResponsesStream(testModel, usage(3, 4), fakemodel.Message("streamed through")),
			read: func(t *testing.T, ctx context.Context, client openai.Client, release func()) []string {
				stream := client.Responses.NewStreaming(ctx, responses.ResponseNewParams{
					Model: testModel, Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("stream please")},
				})
				defer stream.Close()
				require.True(t, stream.Next(), "responses: the first event arrived while the model held the rest (err %v)", stream.Err())
				got := []string{stream.Current().Type}
				release()
				for stream.Next() {
					got = append(got, stream.Current().Type)
				}
				require.NoError(t, stream.Err(), "responses: stream")
				return got
			},
			want: []string{
				"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
				"response.output_text.delta", "response.output_text.done", "response.content_part.done",
				"response.output_item.done", "response.completed",
			},
		},
		{
			name: "chat", path: chatPath,
			events: fakemodel.ChatStream(testModel, usage(3, 4), "streamed through"),
			read: func(t *testing.T, ctx context.Context, client openai.Client, release func()) []string {
				stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
					Model:         testModel,
					Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage("stream please")},
					StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
				})
				defer stream.Close()
				require.True(t, stream.Next(), "chat: the first chunk arrived while the model held the rest (err %v)", stream.Err())
				var acc openai.ChatCompletionAccumulator
				acc.AddChunk(stream.Current())
				got := []string{"role " + string(stream.Current().Choices[0].Delta.Role)}
				release()
				for stream.Next() {
					acc.AddChunk(stream.Current())
					got = append(got, "chunk")
				}
				require.NoError(t, stream.Err(), "chat: stream")
				return append(got, acc.Choices[0].Message.Content)
			},
			want: []string{"role assistant", "chunk", "chunk", "chunk", "streamed through"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			held := make(chan struct{})
			release := sync.OnceFunc(func() { close(held) })
			defer release()
			events := append([]fakemodel.Event(nil), tt.events...)
			events[1].Wait = held // the model sends the first event, then holds the stream
			mark, recMark := len(s.Model.Requests()), recordCount(s)
			s.Model.Enqueue(tt.path, fakemodel.SSE(events...))
			ctx, cancel := context.WithTimeout(t.Context(), firstEventGuard)
			defer cancel()
			got := tt.read(t, ctx, s.Client("sk-sse"), release)
			assert.Equal(t, tt.want, got, "%s: what the client read", tt.name)

			reqs := s.Model.Requests()[mark:]
			require.Len(t, reqs, 1, "%s: requests the model got", tt.name)
			assert.True(t, gjson.GetBytes(reqs[0].Body, "stream").Bool(), "%s: the model was asked to stream", tt.name)
			recs := records(t, s, recMark)
			require.Len(t, recs, 1, "%s: requests through the front", tt.name)
			assert.Equal(t, string(sentBody(recs[0])), string(reqs[0].Body), "%s: the model got the client's body", tt.name)
			assert.Equal(t, plainExchange, recs[0].Exchange(), "%s: ext_proc exchange (the stream is never sent)", tt.name)
		})
	}
}

func testClientMistakes(t *testing.T, s *Stack) {
	tests := []struct {
		name string
		path string
		give string
		// wantStatus, wantCode and wantMessage describe the error the SDK returns.
		wantStatus  int
		wantCode    string
		wantParam   string
		wantMessage string
	}{
		{
			name: "malformed JSON (responses)", path: responsesPath,
			give:       `{"model":"gpt-e2e","tools":[{"type":"code_interpreter","container":{"type":"auto"}}],"input":"x"`,
			wantStatus: http.StatusBadRequest, wantCode: "invalid_json", wantMessage: "We could not parse the JSON body of your request",
		},
		{
			name: "malformed JSON (chat)", path: chatPath,
			give:       `{"model":"gpt-e2e","messages":[{"role":"user","content":"x"}],"tools":[{"type":"code_interpreter"}],}`,
			wantStatus: http.StatusBadRequest, wantCode: "invalid_json", wantMessage: "We could not parse the JSON body of your request",
		},
		{
			name: "malformed JSON without the tool", path: responsesPath,
			give:       `{"model":"gpt-e2e","input":"x",`,
			wantStatus: http.StatusBadRequest, wantCode: "invalid_json", wantMessage: "We could not parse the JSON body of your request",
		},
		{
			name: "a client function named like the internal one", path: responsesPath,
			give:       `{"model":"gpt-e2e","input":"x","tools":[{"type":"code_interpreter","container":{"type":"auto"}},{"type":"function","name":"code_interpreter","parameters":{}}]}`,
			wantStatus: http.StatusBadRequest, wantParam: "tools[1].name", wantMessage: "code_interpreter",
		},
		{
			name: "a memory limit containers do not have", path: responsesPath,
			give:       `{"model":"gpt-e2e","input":"x","tools":[{"type":"code_interpreter","container":{"type":"auto","memory_limit":"3g"}}]}`,
			wantStatus: http.StatusBadRequest, wantCode: "invalid_value", wantParam: "tools", wantMessage: "Invalid memory_limit '3g'",
		},
		{
			name: "a container that was never issued", path: chatPath,
			give:       `{"model":"gpt-e2e","messages":[{"role":"user","content":"x"}],"tools":[{"type":"code_interpreter","container":"cntr_00000000000000000000000000000000"}]}`,
			wantStatus: http.StatusNotFound, wantCode: "container_not_found", wantParam: "tools", wantMessage: "Container 'cntr_00000000000000000000000000000000' not found.",
		},
	}
	client := s.Client("sk-mistakes")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mark, recMark := len(s.Model.Requests()), recordCount(s)
			var res map[string]any
			err := client.Post(t.Context(), strings.TrimPrefix(tt.path, "/v1/"), nil, &res, option.WithRequestBody("application/json", []byte(tt.give)))
			apiErr := apiError(t, err, tt.name)
			assert.Equal(t, tt.wantStatus, apiErr.StatusCode, "%s: status", tt.name)
			assert.Equal(t, tt.wantCode, apiErr.Code, "%s: error code", tt.name)
			assert.Equal(t, tt.wantParam, apiErr.Param, "%s: error param", tt.name)
			assert.Equal(t, map[int]string{400: "invalid_request_error", 404: "not_found_error"}[tt.wantStatus], apiErr.Type, "%s: error type", tt.name)
			assert.Contains(t, apiErr.Message, tt.wantMessage, "%s: error message", tt.name)
			assert.Equal(t, "application/json", apiErr.Response.Header.Get("Content-Type"), "%s: content-type", tt.name)
			assert.Empty(t, s.Model.Requests()[mark:], "%s: nothing reached the model", tt.name)

			recs := records(t, s, recMark)
			require.Len(t, recs, 1, "%s: requests through the front", tt.name)
			require.NotNil(t, recs[0].LocalReply, "%s: answered by the server (ImmediateResponse)", tt.name)
			assert.Equal(t, tt.wantStatus, recs[0].LocalReply.Status, "%s: local reply status", tt.name)
		})
	}
}

func testForgedHeaders(t *testing.T, s *Stack, m *model) {
	// send sends a code_interpreter request with extra headers and checks that it was
	// processed: the model got the function tool and no x-codeinterp-* header, and the client
	// got its own tool back.
	send := func(t *testing.T, what, apiKey, path string, headers map[string]string) {
		t.Helper()
		mark := len(m.Requests())
		var opts []option.RequestOption
		for k, v := range headers {
			opts = append(opts, option.WithHeader(k, v))
		}
		client := s.Client(apiKey, opts...)
		if path == chatPath {
			m.script(chatPath, chatReply(usage(1, 1), "processed"))
			resp, err := client.Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{
				Model:    testModel,
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
			}, option.WithJSONSet("tools", []any{map[string]any{"type": "code_interpreter"}}))
			require.NoError(t, err, "%s: request", what)
			assert.Equal(t, "processed", resp.Choices[0].Message.Content, "%s: answer", what)
		} else {
			m.script(responsesPath, responsesReply(usage(1, 1), fakemodel.Message("processed")))
			resp, err := client.Responses.New(t.Context(), responses.ResponseNewParams{
				Model: testModel, Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")},
				Tools: []responses.ToolUnionParam{autoTool()},
			})
			require.NoError(t, err, "%s: request", what)
			require.Len(t, resp.Tools, 1, "%s: tools echoed", what)
			assert.Equal(t, "code_interpreter", resp.Tools[0].Type, "%s: the client's tool echoed", what)
		}
		reqs := m.since(mark)
		require.Len(t, reqs, 1, "%s: requests the model got", what)
		assert.Equal(t, "function", gjson.GetBytes(reqs[0].Body, "tools.0.type").String(), "%s: the model got the rewritten tool", what)
		for k := range reqs[0].Header {
			assert.False(t, strings.HasPrefix(strings.ToLower(k), "x-codeinterp-"), "%s: the model got header %s", what, k)
		}
	}

	send(t, "forged headers", "sk-forger", responsesPath, map[string]string{
		"x-codeinterp-followup": "v1.9999999999.forged-signature",
		"x-codeinterp-profile":  AnalystProfile,
		"x-codeinterp-debug":    "1",
	})

	t.Run("a genuine signature replayed by another identity or on another path", func(t *testing.T) {
		if s.Harness() == nil {
			t.Skip("reading a genuine signature needs the harness's records")
		}
		// A loop request makes one follow-up call, whose signed header the harness recorded.
		recMark := recordCount(s)
		m.script(responsesPath,
			responsesReply(usage(1, 1), runCode("call_sig", "print('signed')")),
			responsesReply(usage(1, 1), fakemodel.Message("done")))
		owner := s.Client("sk-owner")
		_, err := owner.Responses.New(t.Context(), responses.ResponseNewParams{
			Model: testModel, Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")},
			Tools: []responses.ToolUnionParam{autoTool()},
		})
		require.NoError(t, err, "the loop request")
		var signature string
		for _, r := range records(t, s, recMark) {
			if v := requestHeader(r, "x-codeinterp-followup"); v != "" {
				signature = v
			}
		}
		require.NotEmpty(t, signature, "the follow-up carried a signed header")

		send(t, "genuine signature, another API key", "sk-thief", responsesPath, map[string]string{"x-codeinterp-followup": signature})
		send(t, "genuine signature, another path", "sk-owner", chatPath, map[string]string{"x-codeinterp-followup": signature})
	})
}

// requestHeader returns a request header Envoy sent on the stream.
func requestHeader(r harness.Record, key string) string {
	for _, m := range r.Sent() {
		for _, h := range m.GetRequestHeaders().GetHeaders().GetHeaders() {
			if strings.EqualFold(h.GetKey(), key) {
				return string(h.GetRawValue())
			}
		}
	}
	return ""
}

// autoTool is the code_interpreter tool with an auto container, as a client sends it.
func autoTool() responses.ToolUnionParam {
	return responses.ToolUnionParam{OfCodeInterpreter: &responses.ToolCodeInterpreterParam{
		Container: responses.ToolCodeInterpreterContainerUnionParam{
			OfCodeInterpreterToolAuto: &responses.ToolCodeInterpreterContainerCodeInterpreterContainerAutoParam{},
		},
	}}
}
