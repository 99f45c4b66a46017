package harness

import (
	"io"
	"sync"
)

// bodyPipe is the body of an upstream request while the filter is still producing it. Unlike
// io.Pipe, write never blocks: the filter's event loop must stay responsive (timers, server
// messages) while the upstream consumes the body at its own pace, as Envoy's router buffers
// what it cannot send yet. The data held is bounded by the request body, which the tests
// bound. Read blocks until data, the end, or an error.
type bodyPipe struct {
	mu   sync.Mutex
	cond *sync.Cond
	buf  []byte
	// err is returned by Read once buf is drained: io.EOF after finish, or the abort error.
	err error
}

func newBodyPipe() *bodyPipe {
	p := &bodyPipe{}
	p.cond = sync.NewCond(&p.mu)
	return p
}

func (p *bodyPipe) write(b []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err == nil {
		p.buf = append(p.buf, b...)
		p.cond.Broadcast()
	}
}

// finish ends the body after the data written so far.
func (p *bodyPipe) finish() { p.closeWithError(io.EOF) }

// closeWithError makes Read fail with err (after the buffered data for io.EOF). The first
// error wins.
func (p *bodyPipe) closeWithError(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err == nil {
		p.err = err
		if err != io.EOF {
			p.buf = nil
		}
		p.cond.Broadcast()
	}
}

// Read implements io.Reader for the upstream transport.
func (p *bodyPipe) Read(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.buf) == 0 && p.err == nil {
		p.cond.Wait()
	}
	if len(p.buf) > 0 {
		n := copy(b, p.buf)
		p.buf = p.buf[n:]
		return n, nil
	}
	return 0, p.err
}

// Close implements io.Closer; the transport calls it when it is done with the body.
func (p *bodyPipe) Close() error {
	p.closeWithError(io.ErrClosedPipe)
	return nil
}
