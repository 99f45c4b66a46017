package egress

import (
	"errors"
	"io"
	"net"
	"sync/atomic"
	"time"
)

// errByteLimit means the container moved as many bytes through its proxy as it may.
var errByteLimit = errors.New("egress byte limit reached")

// meteredConn is a connection whose bytes, both ways, count against the proxy's budget, and
// whose reads fail after idle without data.
type meteredConn struct {
	net.Conn
	used *atomic.Int64
	max  int64
	idle time.Duration
}

func (c *meteredConn) Read(b []byte) (int, error) {
	if c.used.Load() >= c.max {
		return 0, errByteLimit
	}
	if c.idle > 0 {
		_ = c.Conn.SetReadDeadline(time.Now().Add(c.idle))
	}
	n, err := c.Conn.Read(b)
	if c.used.Add(int64(n)) > c.max && err == nil {
		err = errByteLimit
	}
	return n, err
}

func (c *meteredConn) Write(b []byte) (int, error) {
	if c.used.Load()+int64(len(b)) > c.max {
		return 0, errByteLimit
	}
	n, err := c.Conn.Write(b)
	c.used.Add(int64(n))
	return n, err
}

// headLimit reads from r while n > 0, then returns io.EOF: it bounds a request's head; set n
// to -1 to read the body unbounded.
type headLimit struct {
	r io.Reader
	n int64
}

func (h *headLimit) Read(b []byte) (int, error) {
	if h.n < 0 {
		return h.r.Read(b)
	}
	if h.n == 0 {
		return 0, io.EOF
	}
	if int64(len(b)) > h.n {
		b = b[:h.n]
	}
	n, err := h.r.Read(b)
	h.n -= int64(n)
	return n, err
}
