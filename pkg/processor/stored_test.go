package processor

import (
	"net/http"
	"testing"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/codeinterp/codeinterp/pkg/loop"
	"github.com/codeinterp/codeinterp/pkg/store/memory"
)

// A GET or DELETE of an answer the loop gave is answered at its request headers, for its
// caller, under every path prefix; anything else passes through as before.
func TestStoredAnswerAtRequestHeaders(t *testing.T) {
	final := []byte(`{"id":"resp_7","object":"response","output":[]}`)
	fl := &fakeLoop{calls: true, resp: loop.Response{Status: 200, Header: http.Header{"Content-Type": {"application/json"}}, Body: final, Stop: loop.StopDone}}
	ts := newTestServerWith(t, func(o *testOptions) { o.Stored = memory.NewPending(nil) }, nil, fl, nil)
	ex := ts.open(t)
	ex.send(postHeaders("/v1/responses"))
	ex.send(reqBody(toolBody))
	ex.send(respHeaders(":status", "200", "content-type", "application/json"))
	require.NoError(t, ex.stream.Send(respBody([]byte(`{"id":"resp_0","output":[]}`))))
	for range 2 { // the message timeout's override, then the answer
		_, err := ex.stream.Recv()
		require.NoError(t, err)
	}

	get := func(method, path, key string) *extprocv3.ProcessingResponse {
		return ts.open(t).send(reqHeaders(true, ":authority", "llm.local", ":path", path, ":method", method, ":scheme", "http", "authorization", "Bearer "+key))
	}
	resp := get(http.MethodGet, "/v1/responses/resp_7", "sk-one")
	im := resp.GetImmediateResponse()
	require.NotNil(t, im, "GET of the caller's looped answer is answered here")
	assert.Equal(t, int32(200), int32(im.GetStatus().GetCode()))
	assert.JSONEq(t, string(final), string(im.GetBody()))
	assert.Equal(t, "codeinterp_stored_answer", im.GetDetails())

	im = get(http.MethodGet, "/openai/v1/responses/resp_7/input_items?order=asc", "sk-one").GetImmediateResponse()
	require.NotNil(t, im, "input_items under a path prefix")
	assert.Contains(t, string(im.GetBody()), `"compute 40+2"`)

	for _, tt := range []struct{ name, method, path, key string }{
		{"another key", http.MethodGet, "/v1/responses/resp_7", "sk-two"},
		{"an id never looped", http.MethodGet, "/v1/responses/resp_8", "sk-one"},
		{"cancel", http.MethodPost, "/v1/responses/resp_7/cancel", "sk-one"},
		{"another surface", http.MethodGet, "/v1/chat/completions/resp_7", "sk-one"},
	} {
		resp := get(tt.method, tt.path, tt.key)
		assert.Nil(t, resp.GetImmediateResponse(), "%s passes through", tt.name)
		assert.NotNil(t, resp.GetRequestHeaders(), "%s passes through", tt.name)
	}

	// openai-go sends retrieve's stream: true as a JSON body: the body is asked for, then answered.
	gx := ts.open(t)
	resp = gx.send(reqHeaders(false, ":authority", "llm.local", ":path", "/v1/responses/resp_7", ":method", http.MethodGet, ":scheme", "http", "authorization", "Bearer sk-one"))
	require.NotNil(t, resp.GetRequestHeaders(), "a GET with a body: its headers go on")
	assert.Equal(t, filterv3.ProcessingMode_BUFFERED, resp.GetModeOverride().GetRequestBodyMode(), "a GET with a body: the body is asked for")
	assert.Equal(t, filterv3.ProcessingMode_SEND, resp.GetModeOverride().GetResponseHeaderMode(),
		"a GET with a body: its response headers come (a running response's stream is switched at them)")
	assert.Equal(t, filterv3.ProcessingMode_NONE, resp.GetModeOverride().GetResponseBodyMode(), "a GET with a body: no response body")
	im = gx.send(reqBody(`{"stream":true}`)).GetImmediateResponse()
	require.NotNil(t, im, "a GET with stream true in its body is answered here")
	assert.Contains(t, string(im.GetBody()), "event: response.created\n", "the answer's events")
	var ct string
	for _, h := range im.GetHeaders().GetSetHeaders() {
		if h.GetHeader().GetKey() == "content-type" {
			ct = string(h.GetHeader().GetRawValue())
		}
	}
	assert.Equal(t, "text/event-stream; charset=utf-8", ct)

	im = get(http.MethodDelete, "/v1/responses/resp_7", "sk-one").GetImmediateResponse()
	require.NotNil(t, im, "DELETE of the caller's looped answer is answered here")
	assert.JSONEq(t, `{"id":"resp_7","object":"response.deleted","deleted":true}`, string(im.GetBody()))
	im = get(http.MethodGet, "/v1/responses/resp_7", "sk-one").GetImmediateResponse()
	require.NotNil(t, im, "a deleted answer is answered here")
	assert.Equal(t, int32(404), int32(im.GetStatus().GetCode()))
}
