package processor

import (
	"net/http"
	"strings"
	"testing"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	configv1 "github.com/codeinterp/codeinterp/api/codeinterp/config/v1"
	"github.com/codeinterp/codeinterp/pkg/config"
	"github.com/codeinterp/codeinterp/pkg/loop"
)

const streamBody = `{"model":"m","stream":true,"input":"compute 40+2","tools":[{"type":"code_interpreter","container":{"type":"auto"}}]}`

// streamed opens a streaming request whose 200 answer the server switched to
// FULL_DUPLEX_STREAMED.
func streamed(t *testing.T, ts *testServer) *exchange {
	t.Helper()
	ex := ts.open(t)
	ex.send(postHeaders("/v1/responses"))
	ex.send(reqBody(streamBody))
	resp := ex.send(respHeaders(":status", "200", "content-type", "application/json", "content-length", "42"))
	mo := resp.GetModeOverride()
	require.Equal(t, filterv3.ProcessingMode_FULL_DUPLEX_STREAMED, mo.GetResponseBodyMode(), "the response body is switched")
	assert.Equal(t, filterv3.ProcessingMode_SEND, mo.GetResponseTrailerMode(), "trailers SEND, as that mode wants")
	assert.Equal(t, filterv3.ProcessingMode_BUFFERED, mo.GetRequestBodyMode(), "merged, the filter's own mode but for the response")
	hm := resp.GetResponseHeaders().GetResponse().GetHeaderMutation()
	assert.ElementsMatch(t, []string{"content-length", "content-encoding"}, hm.GetRemoveHeaders())
	set := map[string]string{}
	for _, h := range hm.GetSetHeaders() {
		set[h.GetHeader().GetKey()] = string(h.GetHeader().GetRawValue())
	}
	assert.Equal(t, "text/event-stream; charset=utf-8", set["content-type"])
	return ex
}

func fdChunk(b string, eos bool) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
		ResponseBody: &extprocv3.HttpBody{Body: []byte(b), EndOfStream: eos}}}
}

// readChunks reads streamed_response answers until one ends the body or a trailers answer
// comes, and returns the bodies and the last answer.
func readChunks(t *testing.T, ex *exchange) (string, *extprocv3.ProcessingResponse) {
	t.Helper()
	var body strings.Builder
	for {
		resp, err := ex.stream.Recv()
		require.NoError(t, err)
		if resp.GetResponseTrailers() != nil {
			return body.String(), resp
		}
		sr := resp.GetResponseBody().GetResponse().GetBodyMutation().GetStreamedResponse()
		require.NotNil(t, sr, "every body answer in FULL_DUPLEX_STREAMED is a streamed_response: %v", resp)
		body.Write(sr.GetBody())
		if sr.GetEndOfStream() {
			return body.String(), resp
		}
	}
}

// The upstream answer arrives in chunks; the loop runs once it is whole, its events go out as
// streamed_response chunks, and the body ends after them; a repeated last chunk (Envoy may
// send it again) is not answered.
func TestFullDuplexAnswer(t *testing.T) {
	final := []byte(`{"id":"resp_1","object":"response","status":"completed","output":[]}`)
	fl := &fakeLoop{resp: loop.Response{Status: 200, Header: http.Header{"Content-Type": {"application/json"}}, Body: final, Stop: loop.StopDone}}
	ts := newTestServer(t, nil, fl, nil)
	ex := streamed(t, ts)
	first := `{"id":"resp_0","object":"response","status":"completed","output":[]}`
	require.NoError(t, ex.stream.Send(fdChunk(first[:10], false)), "a chunk is not answered")
	require.NoError(t, ex.stream.Send(fdChunk(first[10:], true)))
	body, _ := readChunks(t, ex)
	assert.Contains(t, body, "event: response.completed", "the answer's events")
	reqs := fl.requests()
	require.Len(t, reqs, 1)
	assert.Equal(t, first, string(reqs[0].First), "the loop got the whole upstream answer")

	require.NoError(t, ex.stream.Send(fdChunk("", true)), "Envoy sends the last chunk again")
	ex.close()
	assert.Len(t, fl.requests(), 1, "the loop ran once")
}

// An upstream answer that ends with trailers: the loop runs at the trailers, and the trailers
// answer ends the body (headers, body, trailers in order).
func TestFullDuplexTrailers(t *testing.T) {
	fl := &fakeLoop{resp: loop.Response{Status: 200, Header: http.Header{"Content-Type": {"application/json"}},
		Body: []byte(`{"id":"resp_1","object":"response","status":"completed","output":[]}`), Stop: loop.StopDone}}
	ts := newTestServer(t, nil, fl, nil)
	ex := streamed(t, ts)
	require.NoError(t, ex.stream.Send(fdChunk(`{"id":"resp_0","object":"response","output":[]}`, false)))
	require.NoError(t, ex.stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseTrailers{
		ResponseTrailers: &extprocv3.HttpTrailers{}}}))
	body, last := readChunks(t, ex)
	assert.NotNil(t, last.GetResponseTrailers(), "the trailers answer ends the body")
	assert.Contains(t, body, "event: response.completed")
	assert.Len(t, fl.requests(), 1)
}

// Before anything was streamed the answer may still be an ordinary error: an upstream answer
// that is not JSON the loop could read gives an immediate answer in the surface's shape.
func TestFullDuplexErrorBeforeFirstChunk(t *testing.T) {
	fl := &fakeLoop{resp: loop.Response{Status: http.StatusBadGateway, Header: http.Header{"Content-Type": {"application/json"}},
		Body: []byte(`{"error":{"message":"The model's answer is not a JSON object.","type":"server_error","code":"upstream_invalid_json"}}`), Stop: loop.StopUpstreamError}}
	ts := newTestServer(t, nil, fl, nil)
	ex := streamed(t, ts)
	resp := ex.send(fdChunk(`not json`, true))
	ir := resp.GetImmediateResponse()
	require.NotNil(t, ir, "nothing was sent: an immediate answer")
	assert.EqualValues(t, http.StatusBadGateway, ir.GetStatus().GetCode())
}

// A bodyless 200 gives Envoy nothing to switch on: it stays as it was.
func TestFullDuplexNotForABodylessAnswer(t *testing.T) {
	ts := newTestServer(t, nil, &fakeLoop{}, nil)
	ex := ts.open(t)
	ex.send(postHeaders("/v1/responses"))
	ex.send(reqBody(streamBody))
	h := respHeaders(":status", "200")
	h.GetResponseHeaders().EndOfStream = true
	resp := ex.send(h)
	assert.NotEqual(t, filterv3.ProcessingMode_FULL_DUPLEX_STREAMED, resp.GetModeOverride().GetResponseBodyMode())
}

// stream_mode replay keeps the buffered answer, replayed once the loop is over.
func TestReplayProfile(t *testing.T) {
	ts := newTestServer(t, func(c *configv1.Config) { c.DefaultProfile.StreamMode = config.StreamReplay }, &fakeLoop{}, nil)
	ex := ts.open(t)
	ex.send(postHeaders("/v1/responses"))
	ex.send(reqBody(streamBody))
	resp := ex.send(respHeaders(":status", "200"))
	assert.Equal(t, filterv3.ProcessingMode_BUFFERED, resp.GetModeOverride().GetResponseBodyMode())
}
