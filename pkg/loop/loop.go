// Package loop is the agentic loop: it runs the model's calls of the internal code function in a
// sandbox, feeds the output back, re-issues the upstream call over HTTP, and repeats until the model
// is done, then assembles the answer the client receives in the native API's shape.
//
// The loop knows nothing about Envoy: it gets the first upstream answer and the request's context
// from the processor and returns the final HTTP answer.
package loop

import (
	"net/http"
	"time"

	"github.com/codeinterp/codeinterp/pkg/sandbox"
	"github.com/codeinterp/codeinterp/pkg/schema"
)

// Request is one client request whose first upstream answer asks for code to run.
type Request struct {
	// Surface is the API surface of the request.
	Surface schema.Surface
	// URL is the full URL of follow-up calls: the upstream base URL plus the original path.
	URL string
	// Header holds the headers sent on every follow-up call: the client's credentials, the
	// forwarded API headers and the signed follow-up marker. The loop sets content-type and
	// content-length itself.
	Header http.Header
	// Rewrite is what the request phase learned; Rewrite.Body is the body sent upstream in round 1.
	Rewrite schema.Request
	// First is the upstream's first answer (status 200).
	First []byte
	// FunctionName is the internal function's name.
	FunctionName string
	// MaxRounds bounds the sandbox rounds; zero means 8.
	MaxRounds int
	// RunTimeout is the wall-clock limit of one code run. When the loop has a deadline, a run
	// gets at most half of the time left before it (the rest is for the follow-up call); zero
	// means that half, or the sandbox default when there is no deadline.
	RunTimeout time.Duration
	// OutputLimit bounds the text of one run fed back to the model; zero means 16 KiB.
	OutputLimit int
	// MaxOutputBytes is the request's output budget: the bytes of logs and images (as the
	// data: URLs the client gets) that all its code runs together may show the client; zero
	// means DefaultMaxOutputBytes. Output beyond it is left out with a marker for the client
	// and the model.
	MaxOutputBytes int
	// MaxImages bounds the images shown to the client in all; zero means DefaultMaxImages.
	MaxImages int
	// MaxCallsPerTurn bounds the code calls of one model turn that are run; the rest are
	// answered with TextCallLimit without running. Zero means DefaultMaxCallsPerTurn.
	MaxCallsPerTurn int
	// MaxAnswerBytes bounds the answer's body: a larger one is never sent (the processor could
	// not pass it to Envoy) and the client gets a 502 "answer_too_large" instead. Zero means
	// no bound.
	MaxAnswerBytes int
	// MaxResponseBytes bounds each follow-up answer, checked while reading (after Go's
	// transparent gzip decoding); zero means the engine's Config.MaxResponseBytes.
	MaxResponseBytes int64
	// Sandbox names the sandbox the request's code runs in.
	Sandbox sandbox.AcquireRequest
	// OnLoop, if set, is called once, before the first code run, when the answer does need the
	// loop (the processor extends Envoy's message timeout there).
	OnLoop func()
}

// Response is the answer the client receives.
type Response struct {
	// Status is the HTTP status.
	Status int
	// Header holds content-type (and cache-control for event streams); an upstream error's
	// answer also carries the upstream's retry, request-id and rate-limit headers.
	Header http.Header
	// Body is the complete body: JSON, or an event stream when the client asked for stream:true.
	Body []byte
	// Rounds is the number of sandbox rounds run, Calls the number of code runs.
	Rounds, Calls int
	// Stop tells why the loop ended.
	Stop StopReason
	// Pending is set when the answer leaves the client's own calls pending (StopClientCall): the
	// internal calls of that same turn, with their outputs, which the answer does not show as
	// calls. On Responses the upstream may have stored the turn with those calls unanswered, so
	// a request that continues from it (previous_response_id = ResponseID, or the same
	// conversation) must carry their outputs (schema.PrependCallOutputs); a client that replays
	// the items needs nothing. On Chat the client's next request replays the message without
	// them, and they are put back (schema.InsertChatCalls) next to the tool calls ClientCallIDs.
	Pending []schema.PendingCall
	// ResponseID is the Responses answer's id when Pending is set.
	ResponseID string
	// ClientCallIDs are the ids of the client's tool calls of the Chat answer when Pending is set.
	ClientCallIDs []string
}

// Defaults of a Request's output bounds.
const (
	DefaultMaxOutputBytes  = 8 << 20
	DefaultMaxImages       = 32
	DefaultMaxCallsPerTurn = 16
)

// StopReason tells why the loop ended.
type StopReason string

// The reasons a loop ends.
const (
	StopDone          StopReason = "done"           // the model answered without an internal call
	StopClientCall    StopReason = "client_call"    // the turn also called a client function
	StopMaxRounds     StopReason = "max_rounds"     // the round limit was reached
	StopRepeat        StopReason = "repeat"         // the model repeated a call it had made
	StopDeadline      StopReason = "deadline"       // the loop's deadline passed
	StopUpstreamError StopReason = "upstream_error" // a follow-up call failed
	StopCanceled      StopReason = "canceled"       // the client or Envoy went away
	// StopAnswerTooLarge: the assembled answer exceeded Request.MaxAnswerBytes (a 502).
	StopAnswerTooLarge StopReason = "answer_too_large"
)
