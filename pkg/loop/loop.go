// Package loop is the agentic loop: it runs the model's calls of the internal code function in a
// sandbox, feeds the output back, re-issues the upstream call over HTTP, and repeats until the model
// is done, then assembles the answer the client receives in the native API's shape.
//
// The loop knows nothing about Envoy nor about any API's JSON: it gets the first upstream answer
// and the request's [schema.Exchange] from the processor, reads turns, builds follow-ups and the
// final answer through the exchange, reports what happens to a [schema.Sink] as it happens, and
// returns the final HTTP answer.
package loop

import (
	"context"
	"io"
	"net/http"
	"time"

	"github.com/codeinterp/codeinterp/pkg/sandbox"
	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/store"
)

// Request is one client request whose first upstream answer asks for code to run.
type Request struct {
	// Exchange is the request's exchange on its API surface: what the request phase learned,
	// and how turns, follow-ups and the final answer are read and written.
	Exchange schema.Exchange
	// Sink, if set, receives the loop's events as they happen (for a client that asked for a
	// stream).
	Sink schema.Sink
	// URL is the full URL of follow-up calls: the upstream base URL plus the original path.
	URL string
	// Header holds the headers sent on every follow-up call: the client's credentials, the
	// forwarded API headers and the signed follow-up marker. The loop sets content-type and
	// content-length itself.
	Header http.Header
	// First is the upstream's first answer (status 200), when it was a JSON answer.
	First []byte
	// FirstStream, when set, is the upstream's first answer as an event stream
	// (text/event-stream), read as it arrives as a streamed follow-up is (First is then
	// unused): what the client's stream may show of it reaches the Sink at once. Its Read
	// fails once the answer cannot come any more (the client or Envoy went away).
	FirstStream io.Reader
	// FirstRequest, when set (and First and FirstStream are not), is the body of the first
	// round, which the loop sends itself, to URL with Header as it sends the follow-ups: a
	// background response runs detached from the client's request, which never went upstream.
	// An answer other than 200 ends the loop with the upstream's error, as a follow-up's does.
	//
	// A request that resumes a paused run (the exchange's Request().Resume) needs neither
	// First, FirstStream nor FirstRequest: the loop resumes the run first, and its first model
	// call, if the run ends, is the follow-up that carries the run's output (see resume.go).
	FirstRequest []byte
	// MaxRounds bounds the sandbox rounds; zero means DefaultMaxRounds.
	MaxRounds int
	// RunTimeout is the wall-clock limit of one code run. When the loop has a deadline, a run
	// gets at most half of the time left before it (the rest is for the follow-up call); zero
	// means that half, or the sandbox default when there is no deadline.
	RunTimeout time.Duration
	// OutputLimit bounds the text of one run fed back to the model; zero means
	// DefaultOutputLimit.
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
	// InputFiles are copied from Files into the container, as /mnt/data/<Name>, when the lease
	// is first acquired, before the first run (the tool's container.file_ids). A copy that
	// fails fails the calls of the request with TextFilesUnavailable, as an unavailable
	// sandbox does.
	InputFiles []InputFile
	// Files fetches InputFiles with the caller's credentials; required when there are any.
	Files Fetcher
	// MaxInputFileBytes bounds each of InputFiles, checked while it is copied; zero means
	// DefaultMaxInputFileBytes.
	MaxInputFileBytes int64
	// OnLoop, if set, is called once, before the first code run, when the answer does need the
	// loop (the processor extends Envoy's message timeout there).
	OnLoop func()
	// Surface names the request's API surface ([schema.Surface.Name]), for telemetry: the
	// provider and tool names of its spans.
	Surface string
	// FirstSent is when the request went upstream (its first round), for telemetry: the first
	// round's chat span starts there. Zero means when Run starts.
	FirstSent time.Time
}

// InputFile is a Files API file a request copies into its container.
type InputFile struct {
	// ID is the file's id in the Files API ("file-…").
	ID string
	// Name is its base name, as the Files API gave it when it was looked up.
	Name string
	// Bytes is its size then.
	Bytes int64
}

// Fetcher reads a Files API file with the caller's credentials.
type Fetcher interface {
	// Fetch returns the file's base name and its content, which the caller closes.
	Fetch(ctx context.Context, fileID string) (name string, content io.ReadCloser, err error)
}

// Response is the answer the client receives.
type Response struct {
	// Status is the HTTP status.
	Status int
	// Header holds content-type; an upstream error's answer also carries the upstream's retry,
	// request-id and rate-limit headers.
	Header http.Header
	// Body is the complete JSON body: the final answer, or an error in the surface's shape.
	// (A client that asked for a stream gets it from the Sink's events.)
	Body []byte
	// Rounds is the number of sandbox rounds run, Calls the number of code runs.
	Rounds, Calls int
	// Stop tells why the loop ended.
	Stop StopReason
	// Pending is set when the answer leaves the client's own calls pending (StopClientCall): the
	// internal calls of that same turn, with their outputs, which the answer does not show as
	// calls. The request that continues from the answer must carry them again (see
	// [schema.Continuation.Remember]).
	Pending []store.PendingCall
}

// Defaults of a Request's bounds, used where a field is zero. The configuration's defaults
// (pkg/config) are these.
const (
	DefaultMaxRounds       = 8
	DefaultOutputLimit     = 16 << 10
	DefaultMaxOutputBytes  = 8 << 20
	DefaultMaxImages       = 32
	DefaultMaxCallsPerTurn = 16
	// DefaultMaxResponseBytes bounds one follow-up answer when Config.MaxResponseBytes is zero.
	DefaultMaxResponseBytes = 64 << 20
	// DefaultMaxInputFileBytes bounds one file copied in from the Files API, as the Containers
	// API bounds an upload.
	DefaultMaxInputFileBytes = 512 << 20
)

// StopReason tells why the loop ended.
type StopReason string

// The reasons a loop ends.
const (
	StopDone          StopReason = "done"           // the model answered without an internal call
	StopClientCall    StopReason = "client_call"    // the turn also called a client function
	StopToolCalls     StopReason = "tool_calls"     // the code paused on calls of the client's tools
	StopMaxRounds     StopReason = "max_rounds"     // the round limit was reached
	StopRepeat        StopReason = "repeat"         // the model repeated a call it had made
	StopDeadline      StopReason = "deadline"       // the loop's deadline passed
	StopUpstreamError StopReason = "upstream_error" // a follow-up call failed
	StopCanceled      StopReason = "canceled"       // the client or Envoy went away
	// StopNotPaused: the request answers a paused run that is no longer there (a 400).
	StopNotPaused StopReason = "not_paused"
	// StopAnswerTooLarge: the assembled answer exceeded Request.MaxAnswerBytes (a 502).
	StopAnswerTooLarge StopReason = "answer_too_large"
)
