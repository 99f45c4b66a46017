package schema

import (
	"errors"
	"fmt"
	"io"

	"github.com/codeinterp/codeinterp/pkg/schema/sse"
)

// ErrBadStream marks an upstream answer stream that could not be read to its answer: it is
// malformed, too large, reports an error, or ends before its answer.
var ErrBadStream = errors.New("bad upstream answer stream")

// ReadEventStream reads a streamed upstream answer from body, at most limit bytes in all,
// event by event through us: what us passes on goes to relay as it arrives (an error from
// relay, the client gone, stops the reading), and the answer us ends with is returned, to be
// read as a JSON answer.
func ReadEventStream(body io.Reader, limit int64, us UpstreamStream, relay func(delta []byte) error) ([]byte, error) {
	lim := &io.LimitedReader{R: body, N: limit + 1}
	maxLine := int(min(limit, 1<<30))
	rd := sse.NewReader(lim, maxLine, maxLine)
	for {
		ev, err := rd.Next()
		if lim.N <= 0 {
			return nil, fmt.Errorf("%w: it exceeds %d bytes", ErrBadStream, limit)
		}
		switch {
		case errors.Is(err, io.EOF):
			return nil, fmt.Errorf("%w: it ended before its answer", ErrBadStream)
		case errors.Is(err, sse.ErrLineTooLong), errors.Is(err, sse.ErrEventTooLarge):
			return nil, fmt.Errorf("%w: %w", ErrBadStream, err)
		case err != nil:
			return nil, fmt.Errorf("read answer stream: %w", err)
		}
		delta, answer, err := us.Event(ev.Name, ev.Data)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrBadStream, err)
		}
		if delta != nil {
			if err := relay(delta); err != nil {
				return nil, fmt.Errorf("relay answer stream: %w", err)
			}
		}
		if answer != nil {
			return answer, nil
		}
	}
}
