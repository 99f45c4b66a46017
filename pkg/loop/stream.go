package loop

import (
	"fmt"
	"io"
	"mime"
	"net/http"

	"github.com/codeinterp/codeinterp/pkg/schema"
)

// errBadStream marks an upstream answer stream that could not be read to its answer.
var errBadStream = schema.ErrBadStream

// isEventStream reports whether h is the header of an event stream (text/event-stream).
func isEventStream(h http.Header) bool {
	mt, _, err := mime.ParseMediaType(h.Get("Content-Type"))
	return err == nil && mt == "text/event-stream"
}

// readStream reads a streamed upstream answer of round from body, at most limit bytes in all,
// through the exchange's UpstreamStream: what it passes on reaches the Sink as EventDelta as it
// arrives, and the answer it ends with is returned, for the loop to read as a JSON answer. It
// stops when the Sink fails (the client is gone).
func (lr *loopRun) readStream(body io.Reader, limit int64, round int) ([]byte, error) {
	sr, ok := lr.r.Exchange.(schema.StreamReader)
	if !ok {
		return nil, fmt.Errorf("%w: the surface reads no event streams", errBadStream)
	}
	return schema.ReadEventStream(body, limit, sr.ReadStream(), func(delta []byte) error {
		lr.emit(schema.Event{Kind: schema.EventDelta, Round: round, Body: delta})
		return lr.sinkErr
	})
}
