package local

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var testMarker = []byte("\x1e[end 0123]\x1e")

// feedChunks feeds data to c cut into pieces of size n.
func feedChunks(c *capture, data []byte, n int) {
	for len(data) > 0 {
		k := min(n, len(data))
		c.feed(data[:k])
		data = data[k:]
	}
}

func TestCaptureRuns(t *testing.T) {
	tests := []struct {
		name      string
		before    string // arrives between runs, before begin
		give      string // arrives during the run (the marker is appended)
		after     string // arrives after the marker
		chunk     int
		limit     int
		want      string
		wantTrunc bool
		wantNext  string // the next run's output, when it prints nothing itself
	}{
		{name: "whole", give: "hello\n", chunk: 1 << 10, limit: 100, want: "hello\n"},
		{name: "byte by byte", give: "hello\n", chunk: 1, limit: 100, want: "hello\n"},
		{name: "marker split", give: "abcdefgh", chunk: 5, limit: 100, want: "abcdefgh"},
		{name: "empty", give: "", chunk: 3, limit: 100, want: ""},
		{name: "output between runs goes to the next", before: "late\n", give: "now\n", chunk: 4, limit: 100, want: "late\nnow\n"},
		{name: "output after the marker waits", give: "a", after: "b", chunk: 2, limit: 100, want: "a", wantNext: "b"},
		{name: "cut at the limit", give: strings.Repeat("x", 50), chunk: 7, limit: 10,
			want: strings.Repeat("x", 10) + truncationNote(40), wantTrunc: true},
		{name: "partial marker is output", give: "\x1e[end 01", chunk: 3, limit: 100, want: "\x1e[end 01"},
	}
	for _, tt := range tests {
		c := newCapture(tt.limit)
		c.feed([]byte(tt.before))
		done := c.begin(testMarker)
		feedChunks(c, append(append([]byte(tt.give), testMarker...), tt.after...), tt.chunk)
		select {
		case <-done:
		default:
			t.Errorf("%s: marker not seen", tt.name)
		}
		got, trunc := c.end()
		assert.Equal(t, tt.want, got, "%s: output", tt.name)
		assert.Equal(t, tt.wantTrunc, trunc, "%s: truncated", tt.name)

		next := c.begin(testMarker)
		c.feed(testMarker)
		<-next
		got, _ = c.end()
		assert.Equal(t, tt.wantNext, got, "%s: next run", tt.name)
	}
}

func TestCaptureCutShort(t *testing.T) {
	c := newCapture(100)
	c.begin(testMarker)
	c.feed([]byte("partial\x1e[en"))
	got, trunc := c.end()
	assert.Equal(t, "partial\x1e[en", got, "a run without its marker returns what arrived, held-back bytes included")
	assert.False(t, trunc, "not truncated")

	c = newCapture(100)
	done := c.begin(testMarker)
	go c.readFrom(strings.NewReader("x")) // ends: EOF
	<-done
	got, _ = c.end()
	assert.Equal(t, "x", got, "output before the stream ended")
	done = c.begin(testMarker)
	select {
	case <-done:
	default:
		t.Error("a run on an ended stream is done at once")
	}
}

func TestCutText(t *testing.T) {
	tests := []struct {
		name      string
		give      string
		dropped   int64
		limit     int
		want      string
		wantTrunc bool
	}{
		{"fits", "abc", 0, 10, "abc", false},
		{"invalid UTF-8 replaced", "a\xffb", 0, 10, "a\uFFFDb", false},
		{"over the limit", "abcdef", 0, 4, "abcd" + truncationNote(2), true},
		{"dropped before", "abc", 5, 10, "abc" + truncationNote(5), true},
		{"no half rune", "ab✓", 0, 4, "ab" + truncationNote(3), true},
	}
	for _, tt := range tests {
		got, trunc := cutText([]byte(tt.give), tt.dropped, tt.limit)
		assert.Equal(t, tt.want, got, "%s: cutText(%q, %d, %d)", tt.name, tt.give, tt.dropped, tt.limit)
		assert.Equal(t, tt.wantTrunc, trunc, "%s: truncated", tt.name)
		assert.True(t, utf8.ValidString(got), "%s: valid UTF-8", tt.name)
	}
}

func FuzzCapture(f *testing.F) {
	f.Add([]byte("hello\n"), []byte("late"), uint8(3), uint16(100))
	f.Add([]byte(strings.Repeat("x", 300)), []byte(""), uint8(1), uint16(10))
	f.Add([]byte("\x1e[end 01\x1e"), []byte("\x1e"), uint8(2), uint16(5))
	f.Fuzz(func(t *testing.T, out, after []byte, chunk uint8, limit uint16) {
		// The marker ends the output: output that forms it (with the marker's own first bytes)
		// cannot be told apart, which is why the driver's marker is random per run.
		if bytes.Index(append(bytes.Clone(out), testMarker...), testMarker) != len(out) || chunk == 0 || limit == 0 {
			return
		}
		c := newCapture(int(limit))
		done := c.begin(testMarker)
		r, w := io.Pipe()
		go func() {
			feedChunksTo(w, append(append(bytes.Clone(out), testMarker...), after...), int(chunk))
			w.Close()
		}()
		c.readFrom(r)
		<-done
		got, trunc := c.end()
		want, wantTrunc := cutText(out, 0, int(limit))
		require.Equal(t, want, got, "output of %q in chunks of %d, limit %d", out, chunk, limit)
		require.Equal(t, wantTrunc, trunc, "truncated")
	})
}

func feedChunksTo(w io.Writer, data []byte, n int) {
	for len(data) > 0 {
		k := min(n, len(data))
		_, _ = w.Write(data[:k])
		data = data[k:]
	}
}
