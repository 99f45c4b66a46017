package processor

import (
	"bytes"
	"context"
	"io"
	"sync"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// This file streams a rewritten request's answer whose body was switched to
// FULL_DUPLEX_STREAMED at its response headers (see switchToFullDuplex): the client gets each
// event of the loop as it happens, as streamed_response chunks. Until something has been sent
// the client has no headers yet, so an answer with nothing to stream (the model's answer was
// not JSON, say) is still an ordinary error answer; once something was, the loop ends the
// stream with its last event (done or failed), and the server ends the body.

// switchedLive is the delivery of an answer the upstream streams as events the server reads as
// they come: the loop starts with the answer's first chunk and runs in its own goroutine while
// the stream's goroutine hands it the answer's chunks as Envoy sends them, so the client sees
// the model's first tokens as they arrive. The stream's goroutine waits for it (finish, or
// close when the stream ends first).
type switchedLive struct {
	// first is the running loop, nil before the first chunk and once it is over.
	first *firstStream
	// done reports that the answer was streamed: Envoy may send the last chunk again, and
	// nothing after it is answered.
	done bool
}

func (d *switchedLive) body(st *streamState, msg *extprocv3.ProcessingRequest, b *extprocv3.HttpBody) error {
	if d.done {
		return nil
	}
	if d.first == nil {
		// Started by the first chunk: a streamed_response before one would be spurious.
		d.first = st.startFirstStream()
	}
	d.first.pipe.Write(b.GetBody())
	if !b.GetEndOfStream() {
		return nil
	}
	_, err := d.finish(st, msg, true)
	return err
}

func (d *switchedLive) trailers(st *streamState, msg *extprocv3.ProcessingRequest) (bool, error) {
	if d.done {
		return false, nil
	}
	if d.first == nil {
		// The body ended with its trailers before any chunk: the loop reads an empty answer.
		d.first = st.startFirstStream()
	}
	// The upstream body ended with trailers: the answer is streamed, and the trailers answer
	// ends it.
	return d.finish(st, msg, false)
}

// finish waits for the loop over the streamed first answer, whose body Envoy has sent whole,
// and answers its end (with end, the body's end; without, the trailers answer that follows
// ends it). msg is Envoy's message that ended the body. It reports whether the stream's last
// answer was sent (an immediate answer, or the answer to a panic): nothing follows it then.
func (d *switchedLive) finish(st *streamState, msg *extprocv3.ProcessingRequest, end bool) (bool, error) {
	d.done = true
	fs := d.first
	d.first = nil
	fs.pipe.Close(io.EOF)
	<-fs.done
	fs.cancel()
	switch {
	case fs.panicked:
		return true, st.answerPanic(msg)
	case fs.err != nil:
		return true, fs.err
	case fs.resp != nil:
		return true, st.send(fs.resp)
	case end:
		return true, st.send(streamedChunk(nil, true))
	}
	return false, nil
}

// close stops the loop over a streamed first answer when the stream ends before the answer
// did (the client or Envoy went away), and waits for it.
func (d *switchedLive) close() {
	if fs := d.first; fs != nil {
		fs.cancel()
		fs.pipe.Close(context.Canceled)
		<-fs.done
		d.first = nil
	}
}

// switchedCollected is the delivery of a switched answer the server must have whole before
// the loop reads it (a JSON answer, or one it must decode first): its chunks are collected,
// then the loop runs and its events are streamed.
type switchedCollected struct {
	collecting
}

func (d *switchedCollected) body(st *streamState, _ *extprocv3.ProcessingRequest, b *extprocv3.HttpBody) error {
	return d.collectBody(st, b, d.answer)
}

func (d *switchedCollected) trailers(st *streamState, _ *extprocv3.ProcessingRequest) (bool, error) {
	return false, d.collectTrailers(st, d.answer)
}

func (d *switchedCollected) close() {}

// answer answers the collected answer, body: the loop runs over it and its events are
// streamed; with end, the body's end goes after them (without, the trailers answer that
// follows ends it).
func (d *switchedCollected) answer(st *streamState, body []byte, end bool) error {
	var stream io.Reader
	if d.a.eventStream {
		body, stream = nil, bytes.NewReader(body)
	}
	resp, err := st.runStreamed(st.ctx, body, stream)
	switch {
	case err != nil:
		return err
	case resp != nil:
		return st.send(resp)
	case end:
		return st.send(streamedChunk(nil, true))
	}
	return nil
}

// firstStream is the loop of a switchedLive answer, running in its own goroutine.
type firstStream struct {
	pipe   *chunkPipe
	cancel context.CancelFunc
	done   chan struct{}
	// After done: the answer that ends the body when nothing was streamed (else nil), the
	// error that ends the stream, and whether the loop panicked (it was logged).
	resp     *extprocv3.ProcessingResponse
	err      error
	panicked bool
}

// startFirstStream starts the loop over a streamed first answer.
func (st *streamState) startFirstStream() *firstStream {
	ctx, cancel := context.WithCancel(st.ctx)
	fs := &firstStream{pipe: newChunkPipe(st.route.MaxResponseBytes), cancel: cancel, done: make(chan struct{})}
	log := st.logger() // made here: the logger is not safe for concurrent use
	go func() {
		defer close(fs.done)
		defer fs.pipe.discard()
		defer func() {
			if v := recover(); v != nil {
				st.srv.reportPanic(log, v)
				fs.panicked = true
			}
		}()
		fs.resp, fs.err = st.runStreamed(ctx, nil, fs.pipe)
	}()
	return fs
}

// runStreamed runs the loop over a rewritten request's switched answer — first, or read from
// stream as it arrives — sending each event of the client's stream to Envoy as it happens. It
// returns the immediate answer to send when nothing was streamed, else nil: the body's end is
// the caller's to send.
func (st *streamState) runStreamed(ctx context.Context, first []byte, stream io.Reader) (*extprocv3.ProcessingResponse, error) {
	req := st.loopRequest(first)
	req.FirstStream = stream
	em := newEmitter(st.send, st.route.KeepAlive, st.srv.now)
	log := st.logger() // the keep-alive goroutine's, made here: logger is not safe for concurrent use
	em.onPanic = func(v any) { st.srv.reportPanic(log, v) }
	sink := st.exchange.Events(em)
	req.Sink = sink
	// No message timer runs for a FULL_DUPLEX_STREAMED direction: nothing to extend.
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, st.route.LoopDeadline-st.route.LoopMargin)
	defer cancel()
	if p, ok := stream.(*chunkPipe); ok {
		// The answer's reader gives up with the loop: at its deadline, or when the stream ends.
		defer context.AfterFunc(ctx, func() { p.Close(context.Cause(ctx)) })()
	}
	started := st.srv.now()
	em.start()
	defer em.stop()
	st.live = &liveAnswer{em: em, sink: sink}
	res := st.srv.loop.Run(ctx, req)
	st.afterLoop(res, started, em.bytesSent())
	if err := parent.Err(); err != nil {
		// The client or Envoy went away, or the stream's goroutine stopped the loop (a panic
		// there answers the client's stream with st.live): nothing more to send here.
		return nil, err
	}
	st.live = nil
	if err := em.failure(); err != nil {
		return nil, err
	}
	if em.bytesSent() == 0 {
		em.stop()
		return answer{status: res.Status, header: res.Header, body: res.Body, stop: res.Stop}.immediate(), nil
	}
	return nil, nil
}

// chunkPipe carries the chunks of an upstream answer, as Envoy sends them, to the loop that
// reads them: Write never blocks (the stream's goroutine must go on receiving), and at most
// limit+1 bytes are kept, after which the reader sees the end (and its own limit reports
// the answer too large). It is safe for concurrent use by one writer and one reader.
type chunkPipe struct {
	mu     sync.Mutex
	ready  chan struct{} // closed and replaced when something arrives
	chunks [][]byte
	err    error // what Read returns once the chunks are read: io.EOF or the reason for the end
	room   int64 // bytes still taken
}

func newChunkPipe(limit int64) *chunkPipe {
	return &chunkPipe{ready: make(chan struct{}), room: limit + 1}
}

// Write hands p to the reader; p is not copied and must not be changed afterwards.
func (p *chunkPipe) Write(b []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil || len(b) == 0 {
		return
	}
	if int64(len(b)) >= p.room {
		b = b[:p.room]
		p.err = io.EOF
	}
	p.room -= int64(len(b))
	p.chunks = append(p.chunks, b)
	p.wake()
}

// Close ends the answer with err (io.EOF: its end).
func (p *chunkPipe) Close(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err == nil {
		p.err = err
		p.wake()
	}
}

// discard drops what was not read, and whatever Write is given from now on: the reader is done.
func (p *chunkPipe) discard() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.chunks = nil
	if p.err == nil {
		p.err = io.ErrClosedPipe
		p.wake()
	}
}

func (p *chunkPipe) wake() {
	close(p.ready)
	p.ready = make(chan struct{})
}

// Read implements io.Reader.
func (p *chunkPipe) Read(b []byte) (int, error) {
	for {
		p.mu.Lock()
		if len(p.chunks) > 0 {
			n := copy(b, p.chunks[0])
			if n == len(p.chunks[0]) {
				p.chunks[0] = nil
				p.chunks = p.chunks[1:]
			} else {
				p.chunks[0] = p.chunks[0][n:]
			}
			p.mu.Unlock()
			return n, nil
		}
		if p.err != nil {
			err := p.err
			p.mu.Unlock()
			return 0, err
		}
		ready := p.ready
		p.mu.Unlock()
		<-ready
	}
}
