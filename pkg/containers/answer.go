package containers

import (
	"io"
	"net/http"
	"strings"
)

// guardAnswer keeps an answer from waiting on the rest of its request's body. Go's server,
// answering a call whose body was not read to its end (a refusal before the body, a file part
// followed by more), first reads up to 256 KiB of what is left, to keep the connection; a
// client that stalled, or is still sending a large body, would hold the answer (a 429 for a
// fifth upload, say) for as long. At the answer's first write, if the body has not ended, the
// server is told what http.MaxBytesReader tells it of a body cut short: the answer closes the
// connection without reading what is left first, and the server half-closes it for a moment
// before (so that a client still sending reads the answer, not a reset).
func guardAnswer(w http.ResponseWriter, r *http.Request) http.ResponseWriter {
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		return w
	}
	b := &endSeen{ReadCloser: r.Body}
	r.Body = b
	return &answerGuard{ResponseWriter: w, body: b}
}

// endSeen is a request body that reports whether it was read to its end.
type endSeen struct {
	io.ReadCloser
	ended bool
}

func (b *endSeen) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.ended = true
	}
	return n, err
}

// answerGuard is the ResponseWriter of guardAnswer.
type answerGuard struct {
	http.ResponseWriter
	body    *endSeen
	guarded bool
}

func (g *answerGuard) guard() {
	if g.guarded {
		return
	}
	g.guarded = true
	if g.body.ended {
		return
	}
	// The server's own writer, under any wrapper: http.MaxBytesReader reaches only it.
	w := g.ResponseWriter
	for {
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			break
		}
		w = u.Unwrap()
	}
	_, _ = http.MaxBytesReader(w, io.NopCloser(strings.NewReader("x")), 0).Read(make([]byte, 1))
}

func (g *answerGuard) WriteHeader(code int) {
	g.guard()
	g.ResponseWriter.WriteHeader(code)
}

func (g *answerGuard) Write(p []byte) (int, error) {
	g.guard()
	return g.ResponseWriter.Write(p)
}

// Unwrap lets a ResponseController reach the connection's writer.
func (g *answerGuard) Unwrap() http.ResponseWriter { return g.ResponseWriter }
