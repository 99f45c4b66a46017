package e2e

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/codeinterp/codeinterp/test/e2e/fakemodel"
	"github.com/codeinterp/codeinterp/test/e2e/harness"
)

// TestStaticFullDuplex runs with the filter's own processing_mode FULL_DUPLEX_STREAMED (design
// A of docs/envoy-rules.md FD §1): the response body (trailers SEND), and in a second variant the
// request body too. Envoy then ignores every mode_override, so the server answers each message
// in that mode's shape: the loop answers plain and streaming clients alike, and everything it
// does not handle (a request without the tool, a path it does not serve, an upstream error)
// passes through unchanged, echoed chunk by chunk.
func TestStaticFullDuplex(t *testing.T) {
	t.Run("response", func(t *testing.T) { testStaticFullDuplex(t, false) })
	t.Run("request and response", func(t *testing.T) { testStaticFullDuplex(t, true) })
}

func testStaticFullDuplex(t *testing.T, request bool) {
	cfg := harness.ShippedConfig(t)
	pm := cfg.Filter.GetProcessingMode()
	pm.ResponseBodyMode, pm.ResponseTrailerMode = extprocv3.ProcessingMode_FULL_DUPLEX_STREAMED, extprocv3.ProcessingMode_SEND
	if request {
		pm.RequestBodyMode, pm.RequestTrailerMode = extprocv3.ProcessingMode_FULL_DUPLEX_STREAMED, extprocv3.ProcessingMode_SEND
	}
	env := NewEnv(t, EnvOptions{Harness: harness.Options{Config: cfg}})
	env.Fronts(t, func(t *testing.T, s *Stack) {
		m := newModel(t, s.Model)
		views := map[bool]string{}
		for _, v := range variants {
			t.Run("compute 40+2 (responses)/"+v.String(), func(t *testing.T) {
				m.clear()
				views[v.stream] = scenarioComputeResponses(t, &scene{s: s, m: m, v: v, mark: len(m.Requests())})
				assert.Zero(t, m.pending(), "responses (%s): every scripted answer was used", v)
			})
			t.Run("compute 40+2 (chat)/"+v.String(), func(t *testing.T) {
				m.clear()
				scenarioComputeChat(t, &scene{s: s, m: m, v: v, mark: len(m.Requests())})
				assert.Zero(t, m.pending(), "chat (%s): every scripted answer was used", v)
			})
		}
		assert.Equal(t, views[false], views[true], "the streamed answer accumulates to the plain one")
		t.Run("a request without the tool passes through", func(t *testing.T) { testStaticFDPlain(t, s) })
		t.Run("a path not served passes through", func(t *testing.T) { testStaticFDOtherPath(t, s) })
		t.Run("an upstream 4xx passes through", func(t *testing.T) { testStaticFDUpstreamError(t, s) })
		t.Run("a client mistake is answered in the API's shape", func(t *testing.T) { testStaticFDClientError(t, s) })
		t.Run("a large conversation", func(t *testing.T) {
			m.clear()
			testStaticFDLargeRequest(t, &scene{s: s, m: m, mark: len(m.Requests())})
		})
		if h := s.Harness(); h != nil {
			for _, r := range h.Records() {
				for _, msg := range r.Messages {
					assert.Nil(t, msg.Received.GetModeOverride(), "%s %s: no mode_override is sent (Envoy ignores them)", r.Method, r.Path)
				}
			}
		}
	})
}

func testStaticFDPlain(t *testing.T, s *Stack) {
	give := `{"model":"gpt-e2e","input":"hi","tools":[{"type":"function","name":"lookup","parameters":{"type":"object","properties":{}}}]}`
	answer := `{"id":"resp_plain","object":"response","created_at":1700000000,"status":"completed","model":"gpt-e2e",` +
		`"output":[{"type":"message","id":"msg_1","status":"completed","role":"assistant","content":[{"type":"output_text","text":"plain \u00e9","annotations":[]}]}],` +
		`"tools":[],"tool_choice":"auto","parallel_tool_calls":true,"usage":{"input_tokens":1,"output_tokens":1,"total_tokens":2}}`
	mark := len(s.Model.Requests())
	s.Model.Enqueue(responsesPath, fakemodel.Response{Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(answer)})
	client := s.Client("sk-plain")
	resp, err := client.Responses.New(t.Context(), responses.ResponseNewParams{}, option.WithRequestBody("application/json", []byte(give)))
	require.NoError(t, err, "plain: request")
	assert.Equal(t, "plain é", resp.OutputText(), "plain: answer text")
	assert.Equal(t, answer, resp.RawJSON(), "plain: the client got the model's answer byte for byte")
	reqs := s.Model.Requests()[mark:]
	require.Len(t, reqs, 1, "plain: requests the model got")
	assert.Equal(t, give, string(reqs[0].Body), "plain: the model got the client's body byte for byte")
}

func testStaticFDOtherPath(t *testing.T, s *Stack) {
	mark := len(s.Model.Requests())
	s.Model.Enqueue("/v1/moderations", fakemodel.JSON(map[string]any{
		"id": "modr-1", "model": "omni-moderation-latest",
		"results": []any{map[string]any{"flagged": false, "categories": map[string]any{}, "category_scores": map[string]any{}}},
	}))
	client := s.Client("sk-other")
	resp, err := client.Moderations.New(t.Context(), openai.ModerationNewParams{
		Input: openai.ModerationNewParamsInputUnion{OfString: openai.String("hello")},
	})
	require.NoError(t, err, "moderations request")
	assert.Equal(t, "modr-1", resp.ID, "moderations: the model's answer")
	reqs := s.Model.Requests()[mark:]
	require.Len(t, reqs, 1, "moderations: requests the model got")
	assert.Equal(t, "/v1/moderations", reqs[0].Path)
	assert.JSONEq(t, `{"input":"hello"}`, string(reqs[0].Body), "moderations: the client's body")
}

func testStaticFDUpstreamError(t *testing.T, s *Stack) {
	for _, v := range variants {
		mark := len(s.Model.Requests())
		s.Model.Enqueue(responsesPath, fakemodel.Error(http.StatusTooManyRequests, "slow down"))
		_, err := responsesCall(t, v, s.Client("sk-4xx"), ask("compute 40+2"))
		var apiErr *openai.Error
		require.True(t, errors.As(err, &apiErr), "4xx (%s): an API error, got %v", v, err)
		assert.Equal(t, http.StatusTooManyRequests, apiErr.StatusCode, "4xx (%s): the upstream's status", v)
		assert.Contains(t, apiErr.Message, "slow down", "4xx (%s): the upstream's error", v)
		assert.Len(t, s.Model.Requests()[mark:], 1, "4xx (%s): one model call", v)
	}
}

func testStaticFDClientError(t *testing.T, s *Stack) {
	mark := len(s.Model.Requests())
	client := s.Client("sk-bad")
	_, err := client.Responses.New(t.Context(), responses.ResponseNewParams{},
		option.WithRequestBody("application/json", []byte(`{"model":"gpt-e2e","tools":[{"type":"code_interpreter","container":{"type":"auto"}}],"input":`)))
	var apiErr *openai.Error
	require.True(t, errors.As(err, &apiErr), "malformed JSON: an API error, got %v", err)
	assert.Equal(t, http.StatusBadRequest, apiErr.StatusCode, "malformed JSON: 400")
	assert.Equal(t, "invalid_request_error", apiErr.Type, "malformed JSON: the API's error shape")
	assert.Empty(t, s.Model.Requests()[mark:], "malformed JSON: the model is not called")
}

// testStaticFDLargeRequest: a request body of many chunks (a FULL_DUPLEX_STREAMED request
// reaches the server as the codec reads it) is rewritten whole and the loop runs.
func testStaticFDLargeRequest(t *testing.T, x *scene) {
	long := strings.Repeat("0123456789abcdef", 40<<10) // 640 KiB
	x.m.script(responsesPath,
		responsesReply(usage(10, 5), runCode("call_1", "print(len('"+long[:64]+"'))")),
		responsesReply(usage(20, 7), fakemodel.Message("64")))
	resp := x.responses(t, "sk-large", ask(long))
	assert.Equal(t, "64", resp.OutputText(), "large: the answer")
	reqs := x.sent()
	require.Len(t, reqs, 2, "large: requests the model got")
	assert.Contains(t, string(reqs[0].Body), long, "large: the conversation reached the model whole")
	assert.Contains(t, string(reqs[0].Body), `"type":"function","name":"code_interpreter"`, "large: the tool is rewritten")
	assert.Equal(t, "64\n", outputOf(t, reqs[1], "call_1"), "large: the code ran")
}
