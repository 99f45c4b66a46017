package local

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"sync"
	"unicode/utf8"
)

// capture collects one of a container's output streams (stdout or stderr) run by run. The
// driver ends each run's output with a marker chosen by the server for that run; capture keeps
// at most limit bytes of a run and counts the rest, so a run printing gigabytes costs no memory.
// Output that arrives between runs (from threads or processes the code left behind) is kept for
// the next run. Safe for concurrent use by one feeding goroutine and the running goroutine.
type capture struct {
	limit int

	// mu guards the fields below.
	mu       sync.Mutex
	cur      []byte        // output of the open run (between runs: for the next run)
	dropped  int64         // bytes of cur's run beyond limit
	pending  []byte        // held back from cur: they may be the start of the marker
	marker   []byte        // the open run's end marker; nil when none is awaited
	found    chan struct{} // closed when marker is seen or the stream ends
	finished bool          // the open run's marker was seen; its output is in done
	done     []byte
	doneDrop int64
	eof      bool
}

func newCapture(limit int) *capture {
	return &capture{limit: limit}
}

// readFrom feeds r into the capture until r fails or ends. It is the stream's one feeding
// goroutine.
func (c *capture) readFrom(r io.Reader) {
	buf := make([]byte, 64<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			c.feed(buf[:n])
		}
		if err != nil {
			c.mu.Lock()
			c.eof = true
			if c.found != nil {
				close(c.found)
				c.found = nil
			}
			c.mu.Unlock()
			return
		}
	}
}

func (c *capture) feed(p []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.marker == nil {
		c.appendLocked(p)
		return
	}
	data := append(c.pending, p...)
	c.pending = nil
	if i := bytes.Index(data, c.marker); i >= 0 {
		c.appendLocked(data[:i])
		rest := data[i+len(c.marker):]
		c.done, c.doneDrop, c.finished = c.cur, c.dropped, true
		c.cur, c.dropped = nil, 0
		c.marker = nil
		close(c.found)
		c.found = nil
		c.appendLocked(rest)
		return
	}
	keep := min(len(c.marker)-1, len(data))
	c.appendLocked(data[:len(data)-keep])
	c.pending = append([]byte(nil), data[len(data)-keep:]...)
}

func (c *capture) appendLocked(p []byte) {
	room := c.limit - len(c.cur)
	if room >= len(p) {
		c.cur = append(c.cur, p...)
		return
	}
	if room > 0 {
		c.cur = append(c.cur, p[:room]...)
		p = p[room:]
	}
	c.dropped += int64(len(p))
}

// begin opens a run whose output ends with marker and returns a channel closed when the
// marker has been seen or the stream has ended.
func (c *capture) begin(marker []byte) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.done, c.doneDrop, c.finished = nil, 0, false
	ch := make(chan struct{})
	if c.eof {
		close(ch)
		return ch
	}
	c.marker = bytes.Clone(marker)
	c.found = ch
	return ch
}

// end closes the open run and returns its output as valid UTF-8, cut at the limit with a
// visible note. If the run's marker was not seen (the run was cut short), end returns what
// has arrived so far.
func (c *capture) end() (text string, truncated bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []byte
	var dropped int64
	if c.finished {
		out, dropped = c.done, c.doneDrop
	} else {
		c.appendLocked(c.pending)
		c.pending = nil
		out, dropped = c.cur, c.dropped
		c.cur, c.dropped = nil, 0
		c.marker = nil
		if c.found != nil {
			close(c.found)
			c.found = nil
		}
	}
	c.done, c.doneDrop, c.finished = nil, 0, false
	return cutText(out, dropped, c.limit)
}

// cutText returns out as valid UTF-8 text. When bytes were dropped, or out exceeds limit, the
// text is cut at a rune boundary and ends with a visible truncation note.
func cutText(out []byte, dropped int64, limit int) (string, bool) {
	if len(out) > limit {
		dropped += int64(len(out) - limit)
		out = out[:limit]
	}
	if dropped == 0 {
		return strings.ToValidUTF8(string(out), "\uFFFD"), false
	}
	// Do not leave half a rune at the cut.
	cut := len(out)
	for i := cut - 1; i >= 0 && i >= cut-utf8.UTFMax; i-- {
		if utf8.RuneStart(out[i]) {
			if !utf8.FullRune(out[i:cut]) {
				dropped += int64(cut - i)
				cut = i
			}
			break
		}
	}
	return strings.ToValidUTF8(string(out[:cut]), "\uFFFD") + truncationNote(dropped), true
}

// truncationNote is the visible end of a cut text.
func truncationNote(dropped int64) string {
	return fmt.Sprintf("\n[output truncated: %d more bytes]", dropped)
}
