package chat

import (
	"bytes"
	"slices"

	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/schema/internal/openai"
	"github.com/codeinterp/codeinterp/pkg/store"
)

// Surface is Chat Completions. Its zero value is ready to use.
type Surface struct{}

var (
	_ schema.Surface      = Surface{}
	_ schema.Continuation = (*exchange)(nil)
)

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
	// upstreamErr is the error an upstream chunk stream reported, compact, for the client's
	// stream; nil when none did.
	upstreamErr []byte
}

// Continue implements [schema.Continuation]. The client replays the assistant message with its own
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
	out, err := insertCalls(body, x.FunctionName(), store.MaxContinuationBytes, func(callID string) []store.PendingCall {
		return p.Get(id, store.Key{Kind: kindCall, ID: callID})
	})
	if err != nil || out == nil {
		return false, err
	}
	x.SetBody(out)
	return true, nil
}

// Accepted implements [schema.Continuation]: Chat keeps nothing only until then.
func (x *exchange) Accepted(store.Continuations, string) {}

// Remember implements [schema.Continuation]: the calls are kept for the requests that replay the
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
		body, err = markIncomplete(body)
	}
	return body, err
}
