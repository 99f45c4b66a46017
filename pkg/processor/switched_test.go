package processor

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/codeinterp/codeinterp/pkg/loop"
	"github.com/codeinterp/codeinterp/pkg/schema"
)

// streamReadingLoop is a loop that reads a streamed first answer as the real one does: it
// starts the client's stream once the answer's first bytes are in, then reads the rest.
type streamReadingLoop struct {
	final []byte
	// got receives what Run read of the first answer, and whether it had First instead.
	got chan []byte
	// ended is closed when Run returns.
	ended chan struct{}
	// panics makes Run panic once it has read the answer.
	panics bool
}

func (l *streamReadingLoop) Run(_ context.Context, r loop.Request) loop.Response {
	defer close(l.ended)
	if r.FirstStream == nil {
		l.got <- nil
		return loop.Response{Status: http.StatusBadGateway, Header: http.Header{}, Body: []byte(`{}`), Stop: loop.StopUpstreamError}
	}
	buf := make([]byte, 64)
	n, err := r.FirstStream.Read(buf)
	if err != nil {
		l.got <- nil
		return loop.Response{Status: 499, Stop: loop.StopCanceled}
	}
	// The first answer's first bytes start the client's stream.
	_ = r.Sink.Event(schema.Event{Kind: schema.EventRound, Body: []byte(`{"id":"resp_0","object":"response","status":"in_progress","output":[]}`)})
	rest, err := io.ReadAll(r.FirstStream)
	l.got <- append(buf[:n], rest...)
	if err != nil {
		return loop.Response{Status: 499, Stop: loop.StopCanceled}
	}
	if l.panics {
		panic("loop bug")
	}
	_ = r.Sink.Event(schema.Event{Kind: schema.EventDone, Body: l.final})
	return loop.Response{Status: http.StatusOK, Header: http.Header{"Content-Type": {"application/json"}}, Body: l.final, Stop: loop.StopDone}
}

// streamedSSE opens a streaming request whose upstream answers with an event stream, which
// the server switches to FULL_DUPLEX_STREAMED.
func streamedSSE(t *testing.T, l *streamReadingLoop) *exchange {
	t.Helper()
	ts := newTestServerWith(t, func(o *testOptions) { o.Loop = l }, nil, nil, nil)
	ex := ts.open(t)
	ex.send(postHeaders("/v1/responses"))
	ex.send(reqBody(streamBody))
	resp := ex.send(respHeaders(":status", "200", "content-type", "text/event-stream"))
	require.Equal(t, filterv3.ProcessingMode_FULL_DUPLEX_STREAMED, resp.GetModeOverride().GetResponseBodyMode(), "the response body is switched")
	return ex
}

// A streamed first answer is read while Envoy sends it: the client's stream starts with its
// first chunk, before Envoy has sent the rest; the loop reads every byte of it, in order, and the
// body ends after the answer's events.
func TestFirstAnswerStreamsLive(t *testing.T) {
	l := &streamReadingLoop{final: []byte(`{"id":"resp_0","object":"response","status":"completed","output":[]}`),
		got: make(chan []byte, 1), ended: make(chan struct{})}
	ex := streamedSSE(t, l)
	require.NoError(t, ex.stream.Send(fdChunk("event: response.created\n", false)))
	resp, err := ex.stream.Recv()
	require.NoError(t, err)
	sr := resp.GetResponseBody().GetResponse().GetBodyMutation().GetStreamedResponse()
	require.NotNil(t, sr, "a streamed_response before the answer's end: %v", resp)
	assert.Contains(t, string(sr.GetBody()), "event: response.created", "the client's stream started with the first chunk")
	assert.False(t, sr.GetEndOfStream(), "not its end")

	require.NoError(t, ex.stream.Send(fdChunk("data: {}\n\n", false)))
	require.NoError(t, ex.stream.Send(fdChunk("", true)))
	body, last := readChunks(t, ex)
	assert.Contains(t, body, "event: response.completed", "the answer's last event")
	assert.True(t, last.GetResponseBody().GetResponse().GetBodyMutation().GetStreamedResponse().GetEndOfStream(), "the body ends")
	assert.Equal(t, "event: response.created\ndata: {}\n\n", string(<-l.got), "the loop read the whole answer, in order")
	ex.close()
}

// A client that goes away while the first answer streams stops the loop reading it.
func TestFirstAnswerStreamClientGone(t *testing.T) {
	l := &streamReadingLoop{got: make(chan []byte, 1), ended: make(chan struct{})}
	ex := streamedSSE(t, l)
	require.NoError(t, ex.stream.Send(fdChunk("event: response.created\n", false)))
	_, err := ex.stream.Recv()
	require.NoError(t, err, "the stream started")
	ex.close()
	select {
	case <-l.ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the loop still reads the first answer after the client went away")
	}
	assert.Equal(t, "event: response.created\n", string(<-l.got), "what had come")
}

func newStreamReadingLoop(panics bool) *streamReadingLoop {
	return &streamReadingLoop{final: []byte(`{"id":"resp_0","object":"response","status":"completed","output":[]}`),
		got: make(chan []byte, 1), ended: make(chan struct{}), panics: panics}
}

// A streamed first answer that ends with trailers: the answer's events, then one trailers
// answer ends the body; a loop that panics gives the client's stream its failure event and
// its end, once.
func TestFirstAnswerStreamEnds(t *testing.T) {
	trailers := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseTrailers{
		ResponseTrailers: &extprocv3.HttpTrailers{}}}
	for _, tt := range []struct {
		name     string
		panics   bool
		trailers bool
		want     string
	}{
		{name: "trailers", trailers: true, want: "event: response.completed"},
		{name: "panic", panics: true, want: `"code":"server_error"`},
		{name: "panic at trailers", panics: true, trailers: true, want: `"code":"server_error"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l := newStreamReadingLoop(tt.panics)
			ex := streamedSSE(t, l)
			require.NoError(t, ex.stream.Send(fdChunk("event: response.created\n", false)))
			_, err := ex.stream.Recv()
			require.NoError(t, err, "the stream started")
			if tt.trailers {
				require.NoError(t, ex.stream.Send(trailers))
			} else {
				require.NoError(t, ex.stream.Send(fdChunk("", true)))
			}
			body, last := readChunks(t, ex)
			assert.Contains(t, body, tt.want)
			if tt.trailers {
				assert.NotNil(t, last.GetResponseTrailers(), "the trailers answer ends the body")
			} else {
				assert.True(t, last.GetResponseBody().GetResponse().GetBodyMutation().GetStreamedResponse().GetEndOfStream(), "the body ends")
			}
			// Nothing more is answered: the next message Envoy sends is Envoy's repeated end.
			require.NoError(t, ex.stream.Send(fdChunk("", true)))
			ex.close()
			_, err = ex.stream.Recv()
			assert.Error(t, err, "no second end")
		})
	}
}
