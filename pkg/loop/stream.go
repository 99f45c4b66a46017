package loop

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"

	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/schema/sse"
)

// errBadStream marks an upstream answer stream that could not be read to its answer: it is
// malformed, too large, reports an error, or ends before its answer.
var errBadStream = errors.New("bad upstream answer stream")

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
	us := sr.ReadStream()
	lim := &io.LimitedReader{R: body, N: limit + 1}
	maxLine := int(min(limit, 1<<30))
	rd := sse.NewReader(lim, maxLine, maxLine)
	for {
		ev, err := rd.Next()
		if lim.N <= 0 {
			return nil, fmt.Errorf("%w: it exceeds %d bytes", errBadStream, limit)
		}
		switch {
		case errors.Is(err, io.EOF):
			return nil, fmt.Errorf("%w: it ended before its answer", errBadStream)
		case errors.Is(err, sse.ErrLineTooLong), errors.Is(err, sse.ErrEventTooLarge):
			return nil, fmt.Errorf("%w: %w", errBadStream, err)
		case err != nil:
			return nil, fmt.Errorf("read answer stream: %w", err)
		}
		delta, answer, err := us.Event(ev.Name, ev.Data)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errBadStream, err)
		}
		if delta != nil {
			lr.emit(schema.Event{Kind: schema.EventDelta, Round: round, Body: delta})
			if lr.sinkErr != nil {
				return nil, fmt.Errorf("relay answer stream: %w", lr.sinkErr)
			}
		}
		if answer != nil {
			return answer, nil
		}
	}
}
