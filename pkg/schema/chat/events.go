package chat

import (
	"errors"
	"fmt"
	"io"

	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/schema/internal/openai"
)

// Events implements [schema.Exchange]: a comment when the first upstream answer is in (so that
// the client has the stream's headers at once); while a round's upstream answer streams, the
// content, refusal and client tool call deltas of its choice 0 as they arrive; when the loop is
// done, the rest of the answer as the chunk stream (the other choices, the finish_reason, the
// usage chunk when the client asked for one); or a failure as an error chunk. Chat has no place
// for code calls: the stream carries the final message only, as the plain answer does, so the
// SDKs' accumulators rebuild the plain answer from it.
func (x *exchange) Events(w io.Writer) schema.Sink {
	return &events{x: x, w: w, streamOptions: x.Request().StreamOptions, tail: chunkTail(x.Request().StreamOptions), live: -1}
}

// startComment opens a stream before its first chunk; clients ignore SSE comments.
const startComment = ": codeinterp is running the model's code\n\n"

// events writes a loop's answer as a chunk stream. It is used by one goroutine at a time.
type events struct {
	x             *exchange
	w             io.Writer
	streamOptions []byte
	tail          string
	// started reports that something was written; ended that the stream's last chunks (the
	// answer, or an error) were.
	started, ended bool
	// rel is what the stream carries of the round live streamed (its envelope and role chunk
	// for all rounds): the answer does not repeat it.
	rel relayed
	// live is the round whose deltas rel counts, -1 before any; last is the last round whose
	// answer arrived.
	live, last int
	buf        []byte
}

// Ended reports whether the stream's last chunks (the answer, or an error) were written.
func (s *events) Ended() bool { return s.ended }

// Event implements [schema.Sink].
func (s *events) Event(ev schema.Event) error {
	var (
		out []byte
		err error
	)
	switch ev.Kind {
	case schema.EventDelta:
		if out, err = s.delta(ev); err != nil {
			return err
		}
	case schema.EventRound:
		s.last = ev.Round
		if s.started {
			return nil
		}
		out = []byte(startComment)
	case schema.EventDone:
		skip := &relayed{head: s.rel.head, role: s.rel.role}
		if s.live == s.last {
			skip = &s.rel
		}
		if out, err = appendSSE(s.buf[:0], ev.Body, s.streamOptions, skip); err != nil {
			return fmt.Errorf("encode event stream: %w", err)
		}
		s.ended = true
	case schema.EventFailed:
		if e := s.x.upstreamErr; e != nil {
			// The upstream's stream reported the error: the client's stream ends with it, as
			// the native stream would have.
			out = append(append([]byte("data: "), e...), "\n\n"...)
		} else {
			out = errorSSE(openai.ErrorFields(ev.Body))
		}
		s.ended = true
	default:
		return nil
	}
	if len(out) == 0 {
		return nil
	}
	s.started = true
	_, err = s.w.Write(out)
	return err
}

// delta writes the chunk of a delta an upstreamStream passed on (see relayDelta.encode): the
// role chunk first when the stream has none yet, all in the stream's envelope, which the first
// delta sets when no chunk was written before it.
func (s *events) delta(ev schema.Event) ([]byte, error) {
	d := gjson.ParseBytes(ev.Body)
	delta := d.Get("delta")
	if !delta.IsObject() {
		return nil, errors.New("relay chat stream: a delta without its delta object")
	}
	if s.rel.head == nil {
		s.rel.head = chunkHead(d)
	}
	if s.live != ev.Round {
		s.live = ev.Round
		s.rel.content, s.rel.refusal, s.rel.calls = 0, 0, nil
	}
	out := s.buf[:0]
	chunk := func(delta string) {
		out = append(out, "data: "...)
		out = append(out, s.rel.head...)
		out = append(out, `,"choices":[{"index":0,"delta":`...)
		out = append(out, delta...)
		out = append(out, `,"logprobs":null,"finish_reason":null}]`...)
		out = append(out, s.tail...)
		out = append(out, "\n\n"...)
	}
	if !s.rel.role {
		s.rel.role = true
		chunk(`{"role":"assistant","content":""}`)
	}
	chunk(delta.Raw)
	s.rel.content += len(delta.Get("content").String())
	s.rel.refusal += len(delta.Get("refusal").String())
	for _, tc := range delta.Get("tool_calls").Array() {
		k := int(tc.Get("index").Int())
		args := len(tc.Get("function.arguments").String())
		switch {
		case tc.Get("id").Exists() && k == len(s.rel.calls):
			s.rel.calls = append(s.rel.calls, args)
		case k >= 0 && k < len(s.rel.calls):
			s.rel.calls[k] += args
		default:
			return nil, fmt.Errorf("relay chat stream: a tool call fragment at index %d", k)
		}
	}
	s.buf = out
	return out, nil
}
