package messages

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/codeinterp/codeinterp/pkg/schema"
)

// ContainerIDPrefix is the prefix of the ids of the containers this surface creates, as
// Anthropic's: "container_".
const ContainerIDPrefix = "container_"

// DefaultContainerIdle is the idle expiry an answer's container.expires_at counts from when
// [Surface.ContainerIdle] is zero: the sandbox manager's default.
const DefaultContainerIdle = 20 * time.Minute

// Surface is the Messages API (POST /v1/messages) with the code execution tool: Python for
// code_execution_20250522, bash and the text editor for code_execution_20250825, and all three
// for the REPL-state versions code_execution_20260120 and _20260521. Its
// zero value is ready to use; it is safe for concurrent use.
type Surface struct {
	// ContainerIdle is how long a container lives idle, for the expires_at of the container an
	// answer names; zero means DefaultContainerIdle.
	ContainerIdle time.Duration
}

var _ schema.Surface = Surface{}

// Name implements [schema.Surface].
func (Surface) Name() string { return "messages" }

// Paths implements [schema.Surface].
func (Surface) Paths() []string { return []string{"/v1/messages"} }

// ErrorBody implements [schema.Surface]: Anthropic's error shape.
func (Surface) ErrorBody(e *schema.RequestError) []byte { return ErrorBody(e.HTTPStatus(), e.Message) }

// NewExchange implements [schema.Surface]. The model sees the native tools' names and inputs
// ({code}, or {command} and {command, path, ...}); the profile's function name and description
// are for OpenAI's surfaces. A bash or text editor call runs as a Python program that performs
// it in the request's container (see program), so the same container, limits and /mnt/data
// serve every version.
func (s Surface) NewExchange(body []byte, o schema.Options) (schema.Exchange, error) {
	rq, err := Rewrite(body, Options{WholeFirst: o.WholeFirst, CellLimit: o.RunTimeout})
	if err != nil {
		var re *RequestError
		if errors.As(err, &re) {
			return nil, &schema.RequestError{Status: re.Status, Message: re.Message}
		}
		return nil, err
	}
	idle := s.ContainerIdle
	if idle <= 0 {
		idle = DefaultContainerIdle
	}
	x := &exchange{
		rq: rq,
		req: schema.Request{
			Body: rq.Body, Found: rq.Found, Stream: rq.Stream, ContainerID: rq.ContainerID,
			ForcedChoice: rq.ForcedChoice, LaterChoice: rq.LaterChoice, FileIDs: rq.FileIDs, CodeTools: rq.CodeTools,
			Resume: rq.Resume,
			// Anthropic's containers: "container_…" ids, hibernated when idle and restorable
			// for their lifetime (see sandbox.HibernationConfig), unknown (404) once gone.
			Hibernate: true, IDPrefix: ContainerIDPrefix,
		},
		sent:       rq.Body,
		sentStream: rq.Stream && !o.WholeFirst,
		idle:       idle,
		now:        time.Now,
		key:        make([]byte, 16),
	}
	_, _ = rand.Read(x.key) // crypto/rand.Read never fails
	if rq.Found && rq.ContainerID == "" {
		// The native API keeps every container it names, for the client to send back as
		// "container": a session of its own (the manager's per-identity cap and idle expiry
		// bound them) keeps it alive past the reply. An anonymous caller's container is still
		// ephemeral: the processor gives no session to a caller without an identity.
		x.req.SessionID = newSessionName()
	}
	return x, nil
}

// newSessionName is a fresh session name for a request's container.
func newSessionName() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return "messages-" + hex.EncodeToString(b)
}

// exchange is one Messages request. It is used by one goroutine at a time. It is no
// [schema.Continuation]: the Messages API keeps nothing between requests; the client sends the
// whole conversation back, the answer's server_tool_use and result blocks included (an answer
// that leaves the client's own calls pending shows ours in full), and Rewrite turns them back
// into the model's tool_use / tool_result pairs.
type exchange struct {
	rq  Request
	req schema.Request
	// sent is the last request sent upstream, answer the last answer read.
	sent, answer []byte
	// sentStream reports whether sent asks for a stream.
	sentStream bool
	// upstreamErr is the error body of the error event a streamed answer ended with, nil when
	// none did.
	upstreamErr []byte
	idle        time.Duration
	// now is the clock of the container's expiry.
	now func() time.Time
	// key makes the markers of the results of the bash and text editor programs (see program).
	key []byte
}

// Request implements [schema.Exchange].
func (x *exchange) Request() *schema.Request { return &x.req }

// ParseTurn implements [schema.Exchange]: each call of the code_execution tool is a Call whose
// CallID is its tool_use id.
func (x *exchange) ParseTurn(body []byte) (schema.Turn, error) {
	t, err := ParseTurn(body, x.rq)
	if err != nil {
		return schema.Turn{}, err
	}
	x.answer = body
	out := schema.Turn{ClientCalls: len(t.ClientCallIDs), ClientCallIDs: t.ClientCallIDs}
	seen := make(map[string]bool, len(t.Calls))
	for _, c := range t.Calls {
		sc := schema.Call{ItemID: c.ID, CallID: c.ID, Arguments: string(c.Input), Code: c.Code, Tool: c.Kind.nativeName()}
		if c.Kind != Python && c.InputErr == nil {
			sc.Code = program(c, marker(x.key, c.ID))
		}
		switch {
		case c.InputErr != nil:
			sc.ArgsErr = &schema.ArgumentsError{Reason: c.InputErr.Error()}
		case c.ID == "":
			sc.ArgsErr = schema.ErrMissingCallID
		case seen[c.ID]:
			sc.ArgsErr = schema.ErrDuplicateCallID
		}
		seen[c.ID] = true
		out.Calls = append(out.Calls, sc)
	}
	return out, nil
}

// FollowUp implements [schema.Exchange]: the last request sent with the answer last read as an
// assistant turn and a user turn of tool_result blocks carrying the loop's texts for the runs;
// with o.Stream, it asks for an event stream.
func (x *exchange) FollowUp(outputs []schema.CallOutput, o schema.FollowUpOptions) ([]byte, error) {
	if x.answer == nil {
		return nil, errors.New("follow up: no answer has been read")
	}
	t, err := ParseTurn(x.answer, x.rq)
	if err != nil {
		return nil, fmt.Errorf("follow up: %w", err)
	}
	calls := make(map[string]Call, len(t.Calls))
	for _, c := range t.Calls {
		calls[c.ID] = c
	}
	results := make([]CallResult, len(outputs))
	for i, out := range outputs {
		results[i] = CallResult{ID: out.CallID, Result: Result{Kind: Python}, Text: out.Output}
		c, ok := calls[out.CallID]
		if !ok || c.Kind == Python {
			continue
		}
		// A bash or text editor call: the model reads what the native tool gives it. A call
		// that did not run to a result (no sandbox, a timeout, a limit) keeps the loop's text,
		// which says why.
		r, ok := Result{Kind: c.Kind, ErrorCode: ErrInvalidInput}, true
		if c.InputErr != nil {
			r.ErrorMessage = c.InputErr.Error()
		} else {
			r, ok = programResult(c.Kind, marker(x.key, c.ID), out.Output)
		}
		if ok {
			results[i].Result, results[i].Text = r, ""
		}
	}
	// The resumed cell's call (schema.Resume.Turn) is already the history's last assistant
	// turn: only its result follows.
	resumed := x.req.Resume != nil && bytes.Equal(x.answer, x.req.Resume.Turn)
	body, err := FollowUp(x.sent, x.answer, results, FollowUpOptions{ToolChoice: o.ToolChoice, ToolChoiceNone: o.ToolChoiceNone, ResultsOnly: resumed})
	if err != nil {
		return nil, err
	}
	if o.Stream != x.sentStream {
		// A streaming client's follow-ups stream (see ReadStream); the rewrite asked for a whole
		// first answer.
		if body, err = sjson.SetBytes(body, "stream", o.Stream); err != nil {
			return nil, fmt.Errorf("follow up: set stream: %w", err)
		}
		x.sentStream = o.Stream
	}
	x.sent = body
	return body, nil
}

// Final implements [schema.Exchange]: each run shows as the native server_tool_use and
// code_execution_tool_result blocks; an answer cut short (incomplete) stops with
// "pause_turn", so that the client may send it back to go on.
func (x *exchange) Final(rounds []schema.Round, incomplete string) ([]byte, error) {
	in := FinalInput{Request: x.rq, Rounds: make([]Round, len(rounds)), Paused: incomplete != "", Resumed: x.req.Resume != nil}
	for i, rd := range rounds {
		in.Rounds[i] = Round{Body: rd.Body}
		if len(rd.Calls) == 0 {
			continue
		}
		t, err := ParseTurn(rd.Body, x.rq)
		if err != nil {
			return nil, fmt.Errorf("final: round %d: %w", i+1, err)
		}
		in.Rounds[i].Results = make(map[string]Result, len(rd.Calls))
		// The loop ran one CodeCall for each of the turn's calls, in order.
		for j, cc := range rd.Calls {
			if j >= len(t.Calls) {
				break
			}
			if cc.ContainerID != "" {
				in.Container = &Container{ID: cc.ContainerID, ExpiresAt: x.now().Add(x.idle), Skills: x.rq.Skills}
			}
			in.Rounds[i].Results[t.Calls[j].ID] = result(t.Calls[j], cc, x.key)
		}
	}
	out, err := Final(in)
	if err == nil && x.req.Stream && len(rounds) > 1 {
		// A stream names its message with the first answer's id (message_start): the answer
		// keeps that name.
		if first := gjson.GetBytes(rounds[0].Body, "id"); first.Type == gjson.String {
			out, err = sjson.SetBytes(out, "id", first.String())
		}
	}
	return out, err
}

// result is the native result of a call the loop ran as cc. A bash or text editor call's
// result is the one its program printed (see program), under a marker made with key. A call
// that did not run gets the error code of why: the loop's deadline came first
// (execution_time_exceeded), the turn had more calls than the loop runs (too_many_requests),
// or no sandbox could run it (unavailable).
func result(c Call, cc schema.CodeCall, key []byte) Result {
	r := Result{Kind: c.Kind}
	switch {
	case len(cc.ToolCalls) > 0:
		r.ToolCalls = cc.ToolCalls
		return r
	case c.InputErr != nil:
		r.ErrorCode, r.NotRun = ErrInvalidInput, true
		if c.Kind == Editor {
			r.ErrorMessage = c.InputErr.Error()
		}
	case cc.Status == schema.CodeCallIncomplete:
		r.ErrorCode, r.NotRun = ErrTimeExceeded, true
		if c.Kind == Editor {
			r.ErrorMessage = "The request's time ran out before the text editor ran."
		}
	case cc.Run == nil && callLimited(cc):
		r.ErrorCode, r.NotRun = ErrTooManyRequests, true
	case cc.Run == nil:
		// Not run: no sandbox, the sandbox lost, a repeat.
		r.ErrorCode, r.NotRun = ErrUnavailable, true
	case cc.Run.TimedOut:
		r.ErrorCode = ErrTimeExceeded
	case c.Kind != Python:
		if pr, ok := programResult(c.Kind, marker(key, c.ID), cc.Run.Stdout); ok {
			if pr.Kind == Bash && pr.ErrorCode == "" {
				pr.FileIDs = fileIDs(cc)
			}
			return pr
		}
		// The program did not get to print its result (its output was cut short).
		r.ErrorCode = ErrUnavailable
	default:
		r.Stdout, r.Stderr, r.ReturnCode = cc.Run.Stdout, cc.Run.Stderr, cc.Run.ReturnCode
		r.FileIDs = fileIDs(cc)
	}
	if r.Kind == Editor && r.ErrorMessage == "" {
		// The text editor's error block always carries a message.
		r.ErrorMessage = editorErrorMessages[r.ErrorCode]
	}
	return r
}

// fileIDs are the container file ids of the files cc's run wrote, for the result's *_output
// entries; files the sandbox gave no id are left out.
func fileIDs(cc schema.CodeCall) []string {
	var ids []string
	for _, f := range cc.Files {
		if f.ID != "" {
			ids = append(ids, f.ID)
		}
	}
	return ids
}

// callLimitText starts the loop's text for a call beyond the turn's call limit (the loop's
// documented TextCallLimit), which is the call's output.
const callLimitText = "[not run: one turn may run at most "

// callLimited reports whether the loop did not run cc because its turn had too many calls.
func callLimited(cc schema.CodeCall) bool {
	return len(cc.Outputs) > 0 && strings.HasPrefix(cc.Outputs[0].Logs, callLimitText)
}

// editorErrorMessages are the messages of the text editor's errors that its program did not
// report itself.
var editorErrorMessages = map[string]string{
	ErrUnavailable:     "The text editor could not run in the container.",
	ErrTimeExceeded:    "The text editor's run exceeded the container's time limit.",
	ErrTooManyRequests: "The turn made more code calls than one turn may run; make this call in a later turn.",
}

// ErrorBody implements [schema.Exchange].
func (x *exchange) ErrorBody(e *schema.RequestError) []byte {
	return ErrorBody(e.HTTPStatus(), e.Message)
}

// UpstreamErrorBody implements [schema.Exchange]: an upstream body that already is an
// Anthropic error passes as it is; anything else becomes one quoting its start.
func (x *exchange) UpstreamErrorBody(status int, body []byte) []byte {
	if gjson.ValidBytes(body) && gjson.GetBytes(body, "type").String() == "error" && gjson.GetBytes(body, "error").IsObject() {
		return body
	}
	return ErrorBody(status, schema.UpstreamErrorMessage(status, body))
}

// Events implements [schema.Exchange]: the answer is written to w as the native event stream,
// each event as it happens (see events).
func (x *exchange) Events(w io.Writer) schema.Sink { return &events{x: x, w: w} }
