package processor

import (
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
)

// A panic while a stream's answer is built does not end the server: the client gets a 500 in
// the surface's shape, naming nothing of the panic, and the next stream is served.
func TestPanicIsServerError(t *testing.T) {
	fl := &fakeLoop{panics: runtimeErrorOf(t)}
	ts := newTestServer(t, nil, fl, nil)
	for i := range 2 {
		ex := ts.open(t)
		ex.send(postHeaders("/v1/responses"))
		ex.send(reqBody(toolBody))
		ex.send(respHeaders(":status", "200", "content-type", "application/json"))
		resp := ex.send(respBody([]byte(`{"id":"resp_0","object":"response","output":[]}`)))
		ir := resp.GetImmediateResponse()
		require.NotNil(t, ir, "stream %d: an immediate answer: %v", i, resp)
		assert.EqualValues(t, http.StatusInternalServerError, ir.GetStatus().GetCode(), "stream %d", i)
		body := string(ir.GetBody())
		assert.Equal(t, "server_error", gjson.Get(body, "error.code").String(), "stream %d: %s", i, body)
		assert.Equal(t, "server_error", gjson.Get(body, "error.type").String(), "stream %d: %s", i, body)
		assert.NotContains(t, body, "index out of range", "stream %d: the panic stays in the log", i)
		ex.close()
	}
	assert.Equal(t, 2.0, testutil.ToFloat64(ts.srv.metrics.panics), "each panic is counted")
}

// runtimeErrorOf returns the value of an index-out-of-range panic.
func runtimeErrorOf(t *testing.T) (v any) {
	t.Helper()
	defer func() { v = recover() }()
	var s []int
	i := 3
	_ = s[i]
	return nil
}

// A panic once the client's stream has started ends it with the stream's failure event.
func TestPanicAfterTheStreamStartedIsFailureEvent(t *testing.T) {
	fl := &fakeLoop{panics: "loop bug"}
	ts := newTestServer(t, nil, fl, nil)
	ex := streamed(t, ts)
	require.NoError(t, ex.stream.Send(fdChunk(`{"id":"resp_0","object":"response","status":"completed","output":[]}`, true)))
	body, last := readChunks(t, ex)
	assert.True(t, last.GetResponseBody().GetResponse().GetBodyMutation().GetStreamedResponse().GetEndOfStream(), "the body ends")
	assert.Contains(t, body, "event: response.created", "the stream had started: %s", body)
	assert.Contains(t, body, "event: error\ndata: {\"type\":\"error\",\"sequence_number\":2,\"code\":\"server_error\"", "its failure event: %s", body)
	assert.NotContains(t, body, "loop bug", "the panic stays in the log")
	assert.Equal(t, 1.0, testutil.ToFloat64(ts.srv.metrics.panics))
}
