package chat

import (
	"bytes"
	"fmt"
	"io"
	"slices"

	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/schema/internal/openai"
	"github.com/codeinterp/codeinterp/pkg/store"
)

// Surface is Chat Completions. Its zero value is ready to use.
type Surface struct{}

var _ schema.Surface = Surface{}

// Name implements [schema.Surface].
func (Surface) Name() string { return "chat_completions" }

// Paths implements [schema.Surface].
func (Surface) Paths() []string { return []string{"/v1/chat/completions"} }

// ErrorBody implements [schema.Surface]: OpenAI's error shape.
func (Surface) ErrorBody(e *schema.RequestError) []byte { return openai.ErrorBody(e) }

// NewExchange implements [schema.Surface].
func (Surface) NewExchange(body []byte, o schema.Options) (schema.Exchange, error) {
	x, err := dialect.NewExchange(body, o)
	if err != nil {
		return nil, err
	}
	return &exchange{Exchange: x}, nil
}

// kindCall is the [store.Key] kind of a Chat answer's pending calls: the id of the answer's
// first client tool call, by which the client's replay of the message is found.
const kindCall = "chat.call"

// exchange is one Chat Completions request.
type exchange struct {
	*openai.Exchange
}

// Continue implements [schema.Exchange]. The client replays the assistant message with its own
// tool calls only, in this and every later request; ours are put back next to them so that the
// model sees its code and what it printed. Entries stay until they expire.
func (x *exchange) Continue(p store.Continuations, identity func() string) (bool, error) {
	// Most requests replay none of the messages the store knows: a look for the ids is
	// cheaper than reading the messages, and the identity is needed only then.
	if !p.Holds(kindCall) {
		return false, nil
	}
	id := identity()
	body := x.Request().Body
	ids := p.IDs(id, kindCall)
	if !slices.ContainsFunc(ids, func(c string) bool { return bytes.Contains(body, []byte(`"`+c+`"`)) }) {
		return false, nil
	}
	out, err := InsertCalls(body, x.FunctionName(), store.MaxContinuationBytes, func(callID string) []store.PendingCall {
		return p.Get(id, store.Key{Kind: kindCall, ID: callID})
	})
	if err != nil || out == nil {
		return false, err
	}
	x.SetBody(out)
	return true, nil
}

// Accepted implements [schema.Exchange]: Chat keeps nothing only until then.
func (x *exchange) Accepted(store.Continuations, string) {}

// Remember implements [schema.Exchange]: the calls are kept for the requests that replay the
// message, found by its first client tool call.
func (x *exchange) Remember(p store.Continuations, identity string, _ []byte, pending []store.PendingCall) {
	if ids := x.Turn().ClientCallIDs; len(ids) > 0 {
		p.Put(identity, pending, store.Key{Kind: kindCall, ID: ids[0]})
	}
}

// Final implements [schema.Exchange]; an incomplete answer gets finish_reason "length".
func (x *exchange) Final(rounds []schema.Round, incomplete string) ([]byte, error) {
	body, err := Final(schema.FinalInput{Rounds: rounds, FunctionName: x.FunctionName()})
	if err == nil && incomplete != "" {
		body, err = MarkIncomplete(body)
	}
	return body, err
}

// Events implements [schema.Exchange]: a comment when the first upstream answer is in (so that
// the client has the stream's headers at once), then the answer as the chunk stream when the
// loop is done, or a failure as an error chunk. Chat has no place for code calls: the stream
// carries the final message only, as the plain answer does.
func (x *exchange) Events(w io.Writer) schema.Sink {
	return &events{w: w, streamOptions: x.Request().StreamOptions}
}

// startComment opens a stream before its first chunk; clients ignore SSE comments.
const startComment = ": codeinterp is running the model's code\n\n"

// events writes a loop's answer as a chunk stream.
type events struct {
	w             io.Writer
	streamOptions []byte
	started       bool
	ended         bool
}

// Ended reports whether the stream's last chunks (the answer, or an error) were written.
func (s *events) Ended() bool { return s.ended }

func (s *events) Event(ev schema.Event) error {
	var (
		out []byte
		err error
	)
	switch ev.Kind {
	case schema.EventRound:
		if s.started {
			return nil
		}
		s.started = true
		out = []byte(startComment)
	case schema.EventDone:
		if out, err = SSE(ev.Body, s.streamOptions); err != nil {
			return fmt.Errorf("encode event stream: %w", err)
		}
		s.ended = true
	case schema.EventFailed:
		out = ErrorSSE(openai.ErrorFields(ev.Body))
		s.ended = true
	default:
		return nil
	}
	_, err = s.w.Write(out)
	return err
}
