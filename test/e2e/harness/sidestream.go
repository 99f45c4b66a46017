package harness

import (
	"context"
	"errors"
	"io"
	"sync"

	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/metadata"
)

// sideEvent is what the receiver hands the filter: a response, or the end of the stream.
type sideEvent struct {
	resp *extprocsvc.ProcessingResponse
	// end reports that the server ended the stream; err is nil for an OK close.
	end bool
	err error
}

// sideStream is the filter's gRPC stream to the ext_proc server. Envoy sends asynchronously,
// so sends go through a queue drained by a sender goroutine: a server that stops reading
// cannot block the filter's timers. A receiver goroutine hands responses to the filter in
// order. Both goroutines end when the stream ends, when close is called, or when the parent
// context is cancelled; wg waits for them.
type sideStream struct {
	stream extprocsvc.ExternalProcessor_ProcessClient
	cancel context.CancelFunc
	// events delivers responses and the stream's end to the filter; unbuffered.
	events chan sideEvent
	// done is closed by close: the receiver stops delivering.
	done chan struct{}

	// notify wakes the sender; size 1, a pending wake-up is enough.
	notify chan struct{}
	// mu guards the fields below.
	mu      sync.Mutex
	pending []*extprocsvc.ProcessingRequest
	closing bool
}

// openSideStream opens a stream with the given initial metadata. ctx bounds the stream's
// whole life (the filter cancels it when the HTTP request ends).
func openSideStream(ctx context.Context, client extprocsvc.ExternalProcessorClient, md metadata.MD, wg *sync.WaitGroup) (*sideStream, error) {
	sctx, cancel := context.WithCancel(metadata.NewOutgoingContext(ctx, md))
	stream, err := client.Process(sctx)
	if err != nil {
		cancel()
		return nil, err
	}
	s := &sideStream{
		stream: stream,
		cancel: cancel,
		events: make(chan sideEvent),
		done:   make(chan struct{}),
		notify: make(chan struct{}, 1),
	}
	wg.Go(func() { s.receive(sctx) })
	wg.Go(func() { s.sendLoop(sctx) })
	return s, nil
}

// send queues req; it never blocks.
func (s *sideStream) send(req *extprocsvc.ProcessingRequest) {
	s.mu.Lock()
	s.pending = append(s.pending, req)
	s.mu.Unlock()
	s.wake()
}

// close is Envoy's non-graceful closeStream (§0): the queued messages are sent, then the
// stream is half-closed (END_STREAM) and then reset (the server sees io.EOF and/or
// codes.Canceled). Nothing the server sends afterwards is delivered.
func (s *sideStream) close() {
	s.mu.Lock()
	s.closing = true
	s.mu.Unlock()
	close(s.done)
	s.wake()
}

func (s *sideStream) wake() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

func (s *sideStream) sendLoop(ctx context.Context) {
	for {
		s.mu.Lock()
		batch, closing := s.pending, s.closing
		s.pending = nil
		s.mu.Unlock()
		for _, req := range batch {
			if err := s.stream.Send(req); err != nil {
				// The server ended the stream; the receiver reports its status. Cancelling
				// here could hide that status from the receiver.
				return
			}
		}
		if closing {
			// Half-close, then reset.
			_ = s.stream.CloseSend()
			s.cancel()
			return
		}
		if len(batch) > 0 {
			continue
		}
		select {
		case <-s.notify:
		case <-ctx.Done():
			return
		}
	}
}

// receive hands the filter every response and then the stream's end, until close was called
// or the filter is gone.
func (s *sideStream) receive(ctx context.Context) {
	for {
		resp, err := s.stream.Recv()
		ev := sideEvent{resp: resp}
		if err != nil {
			ev = sideEvent{end: true}
			if !errors.Is(err, io.EOF) {
				ev.err = err
			}
		}
		select {
		case s.events <- ev:
		case <-s.done:
			return
		case <-ctx.Done():
			return
		}
		if ev.end {
			return
		}
	}
}
