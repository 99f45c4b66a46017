package processor

import (
	"net/http"
	"strconv"
	"strings"
	"testing"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	configv1 "github.com/codeinterp/codeinterp/api/codeinterp/config/v1"
	"github.com/codeinterp/codeinterp/pkg/config"
	"github.com/codeinterp/codeinterp/pkg/loop"
)

// withProtocol returns req (Envoy's first message) carrying protocol_config with the body modes.
func withProtocol(req *extprocv3.ProcessingRequest, reqMode, respMode filterv3.ProcessingMode_BodySendMode) *extprocv3.ProcessingRequest {
	req.ProtocolConfig = &extprocv3.ProtocolConfiguration{RequestBodyMode: reqMode, ResponseBodyMode: respMode}
	return req
}

const (
	fd       = filterv3.ProcessingMode_FULL_DUPLEX_STREAMED
	buffered = filterv3.ProcessingMode_BUFFERED
)

func reqChunk(b string, eos bool) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
		RequestBody: &extprocv3.HttpBody{Body: []byte(b), EndOfStream: eos}}}
}

// recv receives the next answer.
func (ex *exchange) recv() *extprocv3.ProcessingResponse {
	ex.t.Helper()
	resp, err := ex.stream.Recv()
	require.NoError(ex.t, err)
	return resp
}

// readRequestChunks reads request streamed_response answers until one ends the body or a
// trailers answer comes, and returns the bodies and the last answer.
func readRequestChunks(t *testing.T, ex *exchange) (string, *extprocv3.ProcessingResponse) {
	t.Helper()
	var body strings.Builder
	for {
		resp := ex.recv()
		if resp.GetRequestTrailers() != nil {
			return body.String(), resp
		}
		sr := resp.GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse()
		require.NotNil(t, sr, "every request body answer in FULL_DUPLEX_STREAMED is a streamed_response: %v", resp)
		body.Write(sr.GetBody())
		if sr.GetEndOfStream() {
			return body.String(), resp
		}
	}
}

func setHeadersOf(hm *extprocv3.HeaderMutation) map[string]string {
	set := map[string]string{}
	for _, h := range hm.GetSetHeaders() {
		set[h.GetHeader().GetKey()] = string(h.GetHeader().GetRawValue())
	}
	return set
}

// A configured FULL_DUPLEX_STREAMED response: no mode_override is sent (Envoy ignores them), a
// request the server does not handle has its response echoed chunk by chunk with Envoy's end
// of stream, and the stream is counted once.
func TestConfiguredFullDuplexResponsePassThrough(t *testing.T) {
	tests := []struct {
		name  string
		open  []*extprocv3.ProcessingRequest
		give  *extprocv3.ProcessingRequest
		trail bool
	}{
		{name: "a path not served", open: []*extprocv3.ProcessingRequest{postHeaders("/v1/embeddings")}},
		{name: "a request without the tool", open: []*extprocv3.ProcessingRequest{postHeaders("/v1/responses"), reqBody(plainBody)}},
		{name: "a rewritten request's non-200 answer", open: []*extprocv3.ProcessingRequest{postHeaders("/v1/responses"), reqBody(toolBody)}},
		{name: "an answer ended by trailers", open: []*extprocv3.ProcessingRequest{postHeaders("/v1/embeddings")}, trail: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := newTestServer(t, nil, nil, nil)
			ex := ts.open(t)
			withProtocol(tt.open[0], buffered, fd)
			for _, m := range tt.open {
				resp := ex.send(m)
				assert.Nil(t, resp.GetModeOverride(), "%s: no mode_override: Envoy ignores it", tt.name)
			}
			status := "200"
			if strings.Contains(tt.name, "non-200") {
				status = "429"
			}
			resp := ex.send(respHeaders(":status", status, "content-type", "application/json"))
			require.NotNil(t, resp.GetResponseHeaders(), "%s: headers answered at once", tt.name)
			assert.Nil(t, resp.GetModeOverride(), "%s", tt.name)

			resp = ex.send(fdChunk(`{"a":`, false))
			sr := resp.GetResponseBody().GetResponse().GetBodyMutation().GetStreamedResponse()
			require.NotNil(t, sr, "%s: echoed as a streamed_response: %v", tt.name, resp)
			assert.Equal(t, `{"a":`, string(sr.GetBody()))
			assert.False(t, sr.GetEndOfStream())
			if tt.trail {
				resp = ex.send(fdChunk(`1}`, false))
				assert.False(t, resp.GetResponseBody().GetResponse().GetBodyMutation().GetStreamedResponse().GetEndOfStream())
				resp = ex.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseTrailers{ResponseTrailers: &extprocv3.HttpTrailers{}}})
				assert.NotNil(t, resp.GetResponseTrailers(), "%s: trailers answered", tt.name)
			} else {
				resp = ex.send(fdChunk(`1}`, true))
				sr = resp.GetResponseBody().GetResponse().GetBodyMutation().GetStreamedResponse()
				assert.Equal(t, `1}`, string(sr.GetBody()))
				assert.True(t, sr.GetEndOfStream(), "%s: Envoy's end of stream", tt.name)
			}
			ex.close()
			assert.Equal(t, 1.0, testutil.ToFloat64(ts.srv.metrics.fullDuplex.WithLabelValues("response")), "%s: counted once", tt.name)
		})
	}
}

// A configured FULL_DUPLEX_STREAMED response of a non-streaming rewritten request: the server
// holds the response_headers answer, collects the answer, runs the loop (without extending a
// message timer: none runs), then answers the headers with the answer's and sends the answer as
// streamed_response chunks, the last ending the body.
func TestConfiguredFullDuplexResponseLoop(t *testing.T) {
	final := []byte(`{"id":"resp_1","object":"response","status":"completed","output":[]}`)
	fl := &fakeLoop{calls: true, resp: loop.Response{Status: 200, Header: http.Header{"Content-Type": {"application/json"}}, Body: final, Stop: loop.StopDone}}
	ts := newTestServer(t, nil, fl, nil)
	ex := ts.open(t)
	assert.Nil(t, ex.send(withProtocol(postHeaders("/v1/responses"), buffered, fd)).GetModeOverride())
	resp := ex.send(reqBody(toolBody))
	assert.NotNil(t, resp.GetRequestBody().GetResponse().GetBodyMutation().GetBody(), "the request is rewritten (BUFFERED)")

	require.NoError(t, ex.stream.Send(respHeaders(":status", "200", "content-type", "application/json", "content-length", "60")), "the headers answer is held")
	first := `{"id":"resp_0","object":"response","status":"completed","output":[]}`
	require.NoError(t, ex.stream.Send(fdChunk(first[:10], false)), "a chunk is collected")
	require.NoError(t, ex.stream.Send(fdChunk(first[10:], true)))

	resp = ex.recv()
	require.NotNil(t, resp.GetResponseHeaders(), "the headers answer first (no override_message_timeout: no timer runs): %v", resp)
	assert.Nil(t, resp.GetModeOverride())
	hm := resp.GetResponseHeaders().GetResponse().GetHeaderMutation()
	assert.Equal(t, map[string]string{"content-type": "application/json", "content-length": strconv.Itoa(len(final))}, setHeadersOf(hm),
		"the answer's headers; content-length is dropped by Envoy unless allow_content_length_header keeps it")
	assert.Contains(t, hm.GetRemoveHeaders(), "content-encoding")
	body, _ := readChunks(t, ex)
	assert.Equal(t, string(final), body)
	reqs := fl.requests()
	require.Len(t, reqs, 1)
	assert.Equal(t, first, string(reqs[0].First), "the loop got the whole answer")

	require.NoError(t, ex.stream.Send(fdChunk("", true)), "Envoy sends the last chunk again")
	ex.close()
	assert.Len(t, fl.requests(), 1)
}

// The loop's error answer keeps its status: an immediate answer, the client has nothing yet.
func TestConfiguredFullDuplexResponseLoopError(t *testing.T) {
	fl := &fakeLoop{resp: loop.Response{Status: http.StatusBadGateway, Header: http.Header{"Content-Type": {"application/json"}},
		Body: []byte(`{"error":{"message":"The model's answer is not a JSON object."}}`), Stop: loop.StopUpstreamError}}
	ts := newTestServer(t, nil, fl, nil)
	ex := ts.open(t)
	ex.send(withProtocol(postHeaders("/v1/responses"), buffered, fd))
	ex.send(reqBody(toolBody))
	require.NoError(t, ex.stream.Send(respHeaders(":status", "200")))
	resp := ex.send(fdChunk("not json", true))
	ir := resp.GetImmediateResponse()
	require.NotNil(t, ir, "an immediate answer: %v", resp)
	assert.EqualValues(t, http.StatusBadGateway, ir.GetStatus().GetCode())
}

// A streaming rewritten request streams as over a switched response; the headers answer sets
// the event-stream headers itself, with no mode_override.
func TestConfiguredFullDuplexResponseStreams(t *testing.T) {
	final := []byte(`{"id":"resp_1","object":"response","status":"completed","output":[]}`)
	fl := &fakeLoop{resp: loop.Response{Status: 200, Header: http.Header{"Content-Type": {"application/json"}}, Body: final, Stop: loop.StopDone}}
	ts := newTestServer(t, nil, fl, nil)
	ex := ts.open(t)
	ex.send(withProtocol(postHeaders("/v1/responses"), buffered, fd))
	ex.send(reqBody(streamBody))
	resp := ex.send(respHeaders(":status", "200", "content-type", "application/json"))
	assert.Nil(t, resp.GetModeOverride())
	hm := resp.GetResponseHeaders().GetResponse().GetHeaderMutation()
	assert.Equal(t, "text/event-stream; charset=utf-8", setHeadersOf(hm)["content-type"])
	require.NoError(t, ex.stream.Send(fdChunk(`{"id":"resp_0","object":"response","status":"completed","output":[]}`, true)))
	body, _ := readChunks(t, ex)
	assert.Contains(t, body, "event: response.completed")
	assert.Equal(t, 1.0, testutil.ToFloat64(ts.srv.metrics.streamModes.WithLabelValues("progressive")))
}

// A configured FULL_DUPLEX_STREAMED request: a served request's headers answer waits for its
// body, which is rewritten and sent as streamed_response chunks after the headers answer
// that carries what a BUFFERED body answer would (accept-encoding and reserved headers
// removed, the new content-length); the response is BUFFERED, so a streaming answer is
// replayed (no switch).
func TestConfiguredFullDuplexRequestServed(t *testing.T) {
	ts := newTestServer(t, nil, nil, nil)
	ex := ts.open(t)
	require.NoError(t, ex.stream.Send(withProtocol(postHeaders("/v1/responses", "x-codeinterp-x", "1"), fd, buffered)), "the headers answer is held")
	require.NoError(t, ex.stream.Send(reqChunk(streamBody[:20], false)))
	require.NoError(t, ex.stream.Send(reqChunk(streamBody[20:], true)))
	resp := ex.recv()
	require.NotNil(t, resp.GetRequestHeaders(), "the headers answer once the body is in: %v", resp)
	assert.Nil(t, resp.GetModeOverride())
	hm := resp.GetRequestHeaders().GetResponse().GetHeaderMutation()
	assert.ElementsMatch(t, []string{"x-codeinterp-x", "accept-encoding"}, hm.GetRemoveHeaders())
	body, _ := readRequestChunks(t, ex)
	assert.Contains(t, body, `"type":"function"`, "the tool is rewritten")
	assert.Equal(t, strconv.Itoa(len(body)), setHeadersOf(hm)["content-length"])

	require.NoError(t, ex.stream.Send(reqChunk("", true)), "Envoy sends the last chunk again: not answered")
	resp = ex.send(respHeaders(":status", "200", "content-type", "text/event-stream"))
	assert.Nil(t, resp.GetModeOverride(), "no switch: the answer comes BUFFERED")
	assert.Nil(t, resp.GetResponseHeaders().GetResponse().GetHeaderMutation())
	ex.close()
	assert.Equal(t, 1.0, testutil.ToFloat64(ts.srv.metrics.streamModes.WithLabelValues("replay_filter_no_override")))
	assert.Equal(t, 1.0, testutil.ToFloat64(ts.srv.metrics.fullDuplex.WithLabelValues("request")))
}

// A body ended by trailers: the headers answer and the body go at the trailers, whose answer
// ends the body.
func TestConfiguredFullDuplexRequestTrailers(t *testing.T) {
	ts := newTestServer(t, nil, nil, nil)
	ex := ts.open(t)
	require.NoError(t, ex.stream.Send(withProtocol(postHeaders("/v1/responses"), fd, fd)))
	require.NoError(t, ex.stream.Send(reqChunk(plainBody, false)))
	require.NoError(t, ex.stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestTrailers{RequestTrailers: &extprocv3.HttpTrailers{}}}))
	resp := ex.recv()
	require.NotNil(t, resp.GetRequestHeaders(), "%v", resp)
	body, last := readRequestChunks(t, ex)
	assert.Equal(t, plainBody, body, "a request without the tool goes on as it was")
	assert.NotNil(t, last.GetRequestTrailers(), "the trailers answer ends the body")
	ex.close()
	assert.Equal(t, 1.0, testutil.ToFloat64(ts.srv.metrics.fullDuplex.WithLabelValues("both")))
}

// A request the server does not handle is echoed at once; a client error in a held request
// is an immediate answer in the surface's shape, as is a body beyond max_request_bytes.
func TestConfiguredFullDuplexRequestOthers(t *testing.T) {
	t.Run("not served", func(t *testing.T) {
		ts := newTestServer(t, nil, nil, nil)
		ex := ts.open(t)
		resp := ex.send(withProtocol(postHeaders("/v1/embeddings"), fd, fd))
		require.NotNil(t, resp.GetRequestHeaders(), "answered at once")
		assert.Nil(t, resp.GetModeOverride())
		resp = ex.send(reqChunk(`{"input":"x"}`, true))
		sr := resp.GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse()
		require.NotNil(t, sr, "%v", resp)
		assert.Equal(t, `{"input":"x"}`, string(sr.GetBody()))
		assert.True(t, sr.GetEndOfStream())
	})
	t.Run("malformed JSON", func(t *testing.T) {
		ts := newTestServer(t, nil, nil, nil)
		ex := ts.open(t)
		require.NoError(t, ex.stream.Send(withProtocol(postHeaders("/v1/responses"), fd, fd)))
		resp := ex.send(reqChunk(`{"model":`, true))
		ir := resp.GetImmediateResponse()
		require.NotNil(t, ir, "%v", resp)
		assert.EqualValues(t, http.StatusBadRequest, ir.GetStatus().GetCode())
	})
	t.Run("too large", func(t *testing.T) {
		ts := newTestServer(t, nil, nil, nil)
		ts.srv.maxRequestBody = 16
		ex := ts.open(t)
		require.NoError(t, ex.stream.Send(withProtocol(postHeaders("/v1/responses"), fd, fd)))
		require.NoError(t, ex.stream.Send(reqChunk(toolBody[:10], false)))
		resp := ex.send(reqChunk(toolBody[10:], true))
		ir := resp.GetImmediateResponse()
		require.NotNil(t, ir, "%v", resp)
		assert.EqualValues(t, http.StatusRequestEntityTooLarge, ir.GetStatus().GetCode())
		assert.Contains(t, string(ir.GetBody()), "request_too_large")
	})
}

// A profile that replays streams, in a configured FULL_DUPLEX_STREAMED response: the answer is
// collected, the loop's events replayed after it, behind a held headers answer that gives the
// event-stream headers.
func TestConfiguredFullDuplexResponseReplay(t *testing.T) {
	final := []byte(`{"id":"resp_1","object":"response","status":"completed","output":[]}`)
	fl := &fakeLoop{resp: loop.Response{Status: 200, Header: http.Header{"Content-Type": {"application/json"}}, Body: final, Stop: loop.StopDone}}
	ts := newTestServer(t, func(c *configv1.Config) { c.DefaultProfile.StreamMode = config.StreamReplay }, fl, nil)
	ex := ts.open(t)
	ex.send(withProtocol(postHeaders("/v1/responses"), buffered, fd))
	ex.send(reqBody(streamBody))
	require.NoError(t, ex.stream.Send(respHeaders(":status", "200", "content-type", "application/json")))
	require.NoError(t, ex.stream.Send(fdChunk(`{"id":"resp_0","object":"response","status":"completed","output":[]}`, true)))
	resp := ex.recv()
	require.NotNil(t, resp.GetResponseHeaders(), "%v", resp)
	assert.Equal(t, "text/event-stream; charset=utf-8", setHeadersOf(resp.GetResponseHeaders().GetResponse().GetHeaderMutation())["content-type"])
	body, last := readChunks(t, ex)
	assert.Contains(t, body, "event: response.completed")
	assert.True(t, last.GetResponseBody().GetResponse().GetBodyMutation().GetStreamedResponse().GetEndOfStream())
	assert.Equal(t, 1.0, testutil.ToFloat64(ts.srv.metrics.streamModes.WithLabelValues("replay_configured")))
}

// A configured FULL_DUPLEX_STREAMED request with a response body mode that does not send the
// answer (NONE): Envoy ignores the override that would ask for it, so a code_interpreter
// request is refused with a server error rather than its internal call passing to the client.
func TestConfiguredFullDuplexRequestUnreadableAnswer(t *testing.T) {
	ts := newTestServer(t, nil, nil, nil)
	ex := ts.open(t)
	require.NoError(t, ex.stream.Send(withProtocol(postHeaders("/v1/responses"), fd, filterv3.ProcessingMode_NONE)))
	resp := ex.send(reqChunk(toolBody, true))
	ir := resp.GetImmediateResponse()
	require.NotNil(t, ir, "%v", resp)
	assert.EqualValues(t, http.StatusInternalServerError, ir.GetStatus().GetCode())
	assert.Contains(t, string(ir.GetBody()), "mode_unsupported")

	ex = ts.open(t)
	require.NoError(t, ex.stream.Send(withProtocol(postHeaders("/v1/responses"), fd, filterv3.ProcessingMode_NONE)))
	resp = ex.send(reqChunk(plainBody, true))
	require.NotNil(t, resp.GetRequestHeaders(), "a request without the tool still passes: %v", resp)
}
