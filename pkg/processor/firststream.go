package processor

import (
	"context"
	"io"
	"sync"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

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

// firstStream is the loop of a rewritten request whose first upstream answer is an event
// stream switched to FULL_DUPLEX_STREAMED: it starts with the answer's first chunk and runs
// in its own goroutine while the stream's goroutine hands it the answer's chunks as Envoy
// sends them, so the client sees the model's first tokens as they come. The stream's
// goroutine waits for it (finish, or close when the stream ends first).
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

// startFirstStream starts the loop over the streamed first answer.
func (st *streamState) startFirstStream() {
	ctx, cancel := context.WithCancel(st.ctx)
	fs := &firstStream{pipe: newChunkPipe(st.profile.MaxResponseBytes), cancel: cancel, done: make(chan struct{})}
	st.first = fs
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
}

// finishFirstStream waits for the loop over the streamed first answer, whose body Envoy has
// sent whole, and answers its end (with end, the body's end; without, the trailers answer that
// follows ends it). req is Envoy's message that ended the body. It reports whether the stream's
// last answer was sent (an immediate answer, or the answer to a panic): nothing follows it then.
func (st *streamState) finishFirstStream(req *extprocv3.ProcessingRequest, end bool) (bool, error) {
	fs := st.first
	fs.pipe.Close(io.EOF)
	<-fs.done
	fs.cancel()
	st.first = nil
	switch {
	case fs.panicked:
		return true, st.answerPanic(req)
	case fs.err != nil:
		return true, fs.err
	case fs.resp != nil:
		return true, st.send(fs.resp)
	case end:
		return true, st.send(streamedChunk(nil, true))
	}
	return false, nil
}

// closeFirstStream stops the loop over a streamed first answer when the stream ends before the
// answer did (the client or Envoy went away), and waits for it.
func (st *streamState) closeFirstStream() {
	if fs := st.first; fs != nil {
		fs.cancel()
		fs.pipe.Close(context.Canceled)
		<-fs.done
		st.first = nil
	}
}
