package schema

import (
	"io"

	"github.com/codeinterp/codeinterp/pkg/store"
)

// Surface is one API surface codeinterp serves (OpenAI's Responses, Chat Completions,
// Anthropic's Messages): the paths it owns, how a request on them is read, and the shape of its
// error answers. A Surface is safe for concurrent use; each request gets its own [Exchange].
type Surface interface {
	// Name names the surface in logs and metrics ("responses").
	Name() string
	// Paths are the request paths the surface serves, without any configured prefix
	// ("/v1/responses").
	Paths() []string
	// NewExchange reads a client request body and rewrites its hosted tool, if it has one, into
	// the function tool the model calls. A client mistake is a *RequestError. body is not kept
	// or modified.
	NewExchange(body []byte, o Options) (Exchange, error)
	// ErrorBody is the JSON body of an error answer in the surface's shape.
	ErrorBody(e *RequestError) []byte
}

// Exchange is one request of a Surface from its rewrite to its final answer, as the loop uses
// it. It carries what the request's steps learned, so no step reads again what an earlier one
// read: the rewrite's scan of the request, the last request sent upstream, the last answer
// parsed. An Exchange is used by one goroutine at a time. An Exchange whose surface keeps
// something between requests is also a [Continuation].
type Exchange interface {
	// Request is what the rewrite learned and produced. Its Body is the body to send upstream,
	// which Continuation.Continue may replace.
	Request() *Request
	// ParseTurn reads an upstream answer: the calls of the function it makes. The answer
	// becomes the one FollowUp extends.
	ParseTurn(body []byte) (Turn, error)
	// FollowUp returns the next upstream request: the last one sent, extended by the answer
	// last parsed and the outputs of its calls. That request becomes the last one sent.
	FollowUp(outputs []CallOutput, o FollowUpOptions) ([]byte, error)
	// Final builds the answer the client receives from all the loop's rounds, exactly what
	// the native API would have returned; a non-empty incomplete marks it as cut short for
	// that reason ("loop_deadline").
	Final(rounds []Round, incomplete string) ([]byte, error)
	// ErrorBody is the surface's error body for e.
	ErrorBody(e *RequestError) []byte
	// UpstreamErrorBody is the body the client gets for an upstream error answer.
	UpstreamErrorBody(status int, body []byte) []byte
	// Events returns a Sink that writes the request's answer to w as the surface's event
	// stream (text/event-stream), for a client that asked for one.
	Events(w io.Writer) Sink
}

// Continuation is the part of an [Exchange] that continues from an earlier answer of the same
// caller, through a store: admission (pkg/admission) calls Continue before the request goes
// upstream, Accepted once the upstream took it, and Remember after the loop's answer. An
// Exchange of a surface that keeps nothing between requests need not be one.
type Continuation interface {
	// Continue puts back into the request the code calls that an answer it continues from
	// left out (see [store.Pending]), and reports whether it changed Request().Body. identity
	// returns the caller's identity; it is called only when the store may hold something for
	// the request.
	Continue(p store.Continuations, identity func() string) (bool, error)
	// Accepted is called when the upstream has taken the request (a 2xx answer): what the
	// store held only until then is dropped.
	Accepted(p store.Continuations, identity string)
	// Remember stores, after an answer final that left the client's own calls pending, the
	// internal calls of that turn which the answer does not show, for the request that
	// continues from it.
	Remember(p store.Continuations, identity string, final []byte, pending []store.PendingCall)
}

// EventKind is what an [Event] reports.
type EventKind uint8

// The events of a loop, in the order they happen: a Round for each upstream answer, for each
// call it makes a CallStarted and a CallDone, and at the end Done or Failed.
const (
	// EventRound: an upstream answer arrived (Body).
	EventRound EventKind = iota + 1
	// EventCallStarted: a code call is about to run (Call: its ID, Code and ContainerID).
	EventCallStarted
	// EventCallDone: a code call ended, or paused on the client's tools (Call, with its Status and
	// Outputs, or its ToolCalls).
	EventCallDone
	// EventDone: the answer is complete (Body: the final answer, as Exchange.Final built it).
	EventDone
	// EventFailed: the loop failed (Status; Body: the error body; Partial: the answer of the
	// rounds so far, nil when there were none).
	EventFailed
	// EventDelta: part of a round's upstream answer arrived while it streams, before its
	// EventRound (Body: the upstream event an [UpstreamStream] passed on, valid only during
	// the call).
	EventDelta
)

// Event is one event of a loop.
type Event struct {
	Kind    EventKind
	Round   int // the round, from 0
	Status  int
	Body    []byte
	Partial []byte
	Call    *CodeCall
}

// StreamReader is an [Exchange] that can read an upstream answer sent as an event stream
// (text/event-stream). The loop asks for streamed follow-ups (FollowUpOptions.Stream) only of
// an Exchange that is one, and only for a client that asked for a stream.
type StreamReader interface {
	// ReadStream returns the reader of one streamed upstream answer.
	ReadStream() UpstreamStream
}

// UpstreamStream reads one streamed upstream answer, event by event. It is used by one
// goroutine at a time.
type UpstreamStream interface {
	// Event takes the stream's next event, its name and data, and keeps neither. It returns
	// what the client's stream may show of it now (nil: nothing), passed on to the Sink as an
	// EventDelta, and, when the event ends the answer, the answer's whole body, which reads as
	// the same answer sent as JSON would. An error means the stream is malformed or reports
	// an error instead of an answer.
	Event(name string, data []byte) (delta, answer []byte, err error)
}

// Sink receives a loop's events as they happen. It is used by one goroutine at a time.
type Sink interface {
	// Event takes one event. An error (the client is gone) stops the loop.
	Event(ev Event) error
}
