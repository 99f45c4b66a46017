package processor

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/codeinterp/codeinterp/pkg/loop"
	"github.com/codeinterp/codeinterp/pkg/store"
)

// anonymousHeaders are the request headers of a caller with no credential.
func anonymousHeaders(path string) *extprocv3.ProcessingRequest {
	return reqHeaders(false, ":authority", "llm.local", ":path", path, ":method", "POST", ":scheme", "http",
		"content-type", "application/json")
}

// Callers without a credential all have the empty identity: a pending call of one must never
// reach another's request, so none is stored for them (Chat replay and Responses
// continuation alike).
func TestAnonymousCallersGetNoContinuations(t *testing.T) {
	tests := []struct {
		name, path, first, answer, next string
		res                             loop.Response
	}{
		{
			name:  "chat replay",
			path:  "/v1/chat/completions",
			first: `{"model":"m","messages":[{"role":"user","content":"q"}],"tools":[{"type":"code_interpreter"}]}`,
			answer: `{"id":"c1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","tool_calls":[` +
				`{"id":"call_ci","type":"function","function":{"name":"code_interpreter","arguments":"{\"code\":\"print(secret)\"}"}},` +
				`{"id":"call_w","type":"function","function":{"name":"w","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}`,
			next: `{"model":"m","messages":[{"role":"user","content":"q"},{"role":"assistant","tool_calls":[{"id":"call_w","type":"function","function":{"name":"w","arguments":"{}"}}]},{"role":"tool","tool_call_id":"call_w","content":"sunny"}]}`,
			res:  loop.Response{Pending: []store.PendingCall{{CallID: "call_ci", Arguments: `{"code":"print(secret)"}`, Output: "secret of caller one\n"}}},
		},
		{
			name:   "responses continuation",
			path:   "/v1/responses",
			first:  `{"model":"m","conversation":"conv_1","input":"q","tools":[{"type":"code_interpreter"}]}`,
			answer: `{"id":"resp_mixed","object":"response","status":"completed","output":[]}`,
			next:   `{"model":"m","previous_response_id":"resp_mixed","conversation":"conv_1","input":[{"type":"function_call_output","call_id":"call_w","output":"sunny"}]}`,
			res:    loop.Response{Pending: []store.PendingCall{{CallID: "call_ci", Output: "secret of caller one\n"}}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := tt.res
			res.Status, res.Header, res.Body, res.Stop = 200, http.Header{"Content-Type": {"application/json"}}, []byte(tt.answer), loop.StopClientCall
			ts := newTestServer(t, nil, &fakeLoop{resp: res}, nil)
			ex := ts.open(t)
			ex.send(anonymousHeaders(tt.path))
			ex.send(reqBody(tt.first))
			ex.send(respHeaders(":status", "200"))
			ex.send(respBody([]byte(tt.answer)))

			ex = ts.open(t)
			ex.send(anonymousHeaders(tt.path))
			resp := ex.send(reqBody(tt.next))
			assert.NotContains(t, string(resp.GetRequestBody().GetResponse().GetBodyMutation().GetBody()), "secret",
				"%s: another anonymous caller's request %s gets nothing of the first one's", tt.name, tt.next)
			assert.Nil(t, resp.GetRequestBody().GetResponse().GetBodyMutation(), "%s: the request is left as it is", tt.name)
		})
	}
}
