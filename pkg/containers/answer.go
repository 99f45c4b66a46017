package containers

import (
	"io"
	"net/http"
	"time"
)

// guardAnswer keeps an answer from waiting on the rest of its request's body. Go's server,
// answering a call whose body was not read to its end (a refusal before the body, a file part
// followed by more), first reads up to 256 KiB of what is left, to keep the connection; a
// client that stalled, or is still sending a large body, would hold the answer (a 429 for a
// sixth upload, say) for as long. At the answer's first write, if the body has not ended, the
// connection's read deadline is set to now: what has already arrived is still read, and what
// has not ends that wait at once, and the connection is closed after the answer.
func guardAnswer(w http.ResponseWriter, r *http.Request) http.ResponseWriter {
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		return w
	}
	b := &endSeen{ReadCloser: r.Body}
	r.Body = b
	return &answerGuard{ResponseWriter: w, body: b, rc: http.NewResponseController(w)}
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
	rc      *http.ResponseController
	guarded bool
}

func (g *answerGuard) guard() {
	if g.guarded {
		return
	}
	g.guarded = true
	if !g.body.ended {
		_ = g.rc.SetReadDeadline(time.Now())
	}
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
