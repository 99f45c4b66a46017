package processor

import (
	"sync"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// maxChunk bounds one streamed_response body: Envoy recommends chunks of at most 64 KiB
// (see the FULL_DUPLEX_STREAMED notes of
// https://www.envoyproxy.io/docs/envoy/latest/api-v3/extensions/filters/http/ext_proc/v3/processing_mode.proto).
const maxChunk = 64 << 10

// defaultKeepAlive is the keep-alive interval of a Route that sets none.
const defaultKeepAlive = 15 * time.Second

// keepAliveComment is the SSE comment a progressive stream sends when it has been silent too
// long; clients ignore it.
var keepAliveComment = []byte(": keep-alive\n\n")

// emitter sends a response body to Envoy as FULL_DUPLEX_STREAMED chunks while the loop runs:
// each Write becomes one or more streamed_response messages, injected into the client's
// response at once. While nothing else is sent for the keep-alive interval it sends an SSE
// comment, so that no idle timer on the path fires. It is safe for concurrent use: the loop
// writes events, its own goroutine writes keep-alives. Its owner calls start, then stop before
// it sends anything else on the stream. A Send that blocks (a client that does not read, and
// Envoy's buffers full) holds the loop until the stream ends: Envoy's stream_idle_timeout, or
// the server's hard stop.
type emitter struct {
	send     func(*extprocv3.ProcessingResponse) error
	interval time.Duration
	now      func() time.Time
	// onPanic, if set, is told of a panic of the keep-alive goroutine, which then stops (and
	// the stream goes on without keep-alives). It may be set before start.
	onPanic func(v any)

	mu   sync.Mutex
	last time.Time // when something was last sent
	sent int       // bytes sent
	err  error     // the first send failure: the stream is gone

	quit chan struct{}
	done chan struct{}
}

func newEmitter(send func(*extprocv3.ProcessingResponse) error, interval time.Duration, now func() time.Time) *emitter {
	if interval <= 0 {
		interval = defaultKeepAlive
	}
	return &emitter{send: send, interval: interval, now: now, last: now()}
}

// start starts the keep-alive goroutine.
func (e *emitter) start() {
	e.quit, e.done = make(chan struct{}), make(chan struct{})
	go e.keepAlive()
}

// stop stops the keep-alive goroutine and waits for it. It may be called again.
func (e *emitter) stop() {
	if e.quit == nil {
		return
	}
	close(e.quit)
	<-e.done
	e.quit = nil
}

// keepAlive sends a comment whenever the stream has been silent for most of the interval.
func (e *emitter) keepAlive() {
	defer close(e.done)
	defer func() {
		if v := recover(); v != nil && e.onPanic != nil {
			e.onPanic(v)
		}
	}()
	tick := time.NewTicker(e.interval / 4)
	defer tick.Stop()
	for {
		select {
		case <-e.quit:
			return
		case <-tick.C:
			e.mu.Lock()
			idle := e.now().Sub(e.last) >= e.interval*3/4
			e.mu.Unlock()
			if idle {
				if _, err := e.Write(keepAliveComment); err != nil {
					return
				}
			}
		}
	}
}

// Write sends p as streamed_response chunks of at most maxChunk bytes.
func (e *emitter) Write(p []byte) (int, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.err != nil {
		return 0, e.err
	}
	for n := 0; n < len(p); {
		end := min(n+maxChunk, len(p))
		// The message keeps its body: it is not reused, and p is the caller's.
		if err := e.send(streamedChunk(append([]byte(nil), p[n:end]...), false)); err != nil {
			e.err = err
			return n, err
		}
		e.sent += end - n
		e.last = e.now()
		n = end
	}
	return len(p), nil
}

// failure returns the error of the send that failed (the stream is gone), or nil.
func (e *emitter) failure() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.err
}

// bytesSent reports how many body bytes have reached Envoy.
func (e *emitter) bytesSent() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.sent
}

// streamedChunk is a response_body answer that injects body into the client's response.
func streamedChunk(body []byte, end bool) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{
		ResponseBody: &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{
			BodyMutation: &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_StreamedResponse{
				StreamedResponse: &extprocv3.StreamedBodyResponse{Body: body, EndOfStream: end},
			}},
		}},
	}}
}
