package processor

import (
	"context"
	"errors"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/codeinterp/codeinterp/pkg/loop"
)

// blockingLoop is a loop that runs until its context ends (or release is closed), then says
// why it stopped on causes.
type blockingLoop struct {
	started chan struct{} // closed when Run starts
	release chan struct{} // closing it ends Run with a normal answer
	causes  chan error    // size 1: the cause Run saw, once
}

func newBlockingLoop() *blockingLoop {
	return &blockingLoop{started: make(chan struct{}), release: make(chan struct{}), causes: make(chan error, 1)}
}

func (b *blockingLoop) Run(ctx context.Context, r loop.Request) loop.Response {
	if r.OnLoop != nil {
		r.OnLoop()
	}
	close(b.started)
	select {
	case <-ctx.Done():
		b.causes <- context.Cause(ctx)
		return loop.Response{Status: 499, Stop: loop.StopCanceled}
	case <-b.release:
		b.causes <- nil
		return loop.Response{Status: http.StatusOK, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"output":[]}`), Stop: loop.StopDone}
	}
}

// openLoop drives a stream to the loop (request, first answer) and waits until the loop runs.
func openLoop(t *testing.T, ts *testServer, bl *blockingLoop) *exchange {
	t.Helper()
	ex := ts.open(t)
	ex.send(postHeaders("/v1/responses"))
	ex.send(reqBody(toolBody))
	ex.send(respHeaders(":status", "200", "content-type", "application/json"))
	require.NoError(t, ex.stream.Send(respBody([]byte(`{"id":"resp_0","output":[]}`))), "send the first answer")
	override, err := ex.stream.Recv()
	require.NoError(t, err, "receive the message timeout override")
	require.NotNil(t, override.GetOverrideMessageTimeout(), "the loop started")
	select {
	case <-bl.started:
	case <-time.After(10 * time.Second):
		require.Fail(t, "the loop never started")
	}
	return ex
}

func TestDrainWaitsForLiveStreams(t *testing.T) {
	bl := newBlockingLoop()
	ts := newTestServer(t, nil, nil, nil)
	ts.srv.loop = bl
	ex := openLoop(t, ts, bl)
	assert.Equal(t, 1, ts.srv.Live(), "one stream in its loop is live")

	short, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	assert.ErrorIs(t, ts.srv.Drain(short), context.DeadlineExceeded, "Drain with a stream in its loop ends with its ctx")

	// A new stream during the drain is served: a loop's follow-up calls come in as streams.
	other := ts.open(t)
	resp := other.send(postHeaders("/v1/embeddings"))
	assert.NotNil(t, resp.GetRequestHeaders(), "a stream opened while draining is answered")
	other.close()

	close(bl.release)
	final, err := ex.stream.Recv()
	require.NoError(t, err, "the drained stream's answer")
	assert.Equal(t, `{"output":[]}`, string(final.GetResponseBody().GetResponse().GetBodyMutation().GetBody()), "the loop's answer reaches Envoy")
	assert.NoError(t, <-bl.causes, "the loop ended normally")
	ex.close()
	assert.NoError(t, ts.srv.Drain(t.Context()), "Drain returns once the streams have ended")
	assert.Zero(t, ts.srv.Live(), "no stream is live after the drain")
}

func TestCloseEndsLiveStreams(t *testing.T) {
	bl := newBlockingLoop()
	ts := newTestServer(t, nil, nil, nil)
	ts.srv.loop = bl
	ex := openLoop(t, ts, bl)

	ts.srv.Close()
	assert.True(t, errors.Is(<-bl.causes, ErrShuttingDown), "the loop's context is cancelled with ErrShuttingDown")
	_, err := ex.stream.Recv()
	assert.Equal(t, codes.Unavailable, status.Code(err), "the stream fails with Unavailable, nothing else sent: %v", err)
	assert.NoError(t, ts.srv.Drain(t.Context()), "the ended stream's handler returns")

	late := ts.open(t)
	// The server may have refused the stream before the send: gRPC then reports io.EOF on
	// Send, and the stream's status on Recv.
	if err := late.stream.Send(postHeaders("/v1/responses")); err != nil {
		require.ErrorIs(t, err, io.EOF, "send on a stream opened after Close")
	}
	_, err = late.stream.Recv()
	assert.Equal(t, codes.Unavailable, status.Code(err), "a stream opened after Close is refused: %v", err)
}
