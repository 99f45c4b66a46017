package schema

import (
	"errors"
)

// ErrDuplicateCallID marks a call whose call id repeats an earlier call's in the same turn: its
// output could not be told apart, so it must not run.
var ErrDuplicateCallID = errors.New("duplicate call id")

// ErrMissingCallID marks a call without a call id: its output could not be paired with it, so it
// must not run.
var ErrMissingCallID = errors.New("missing call id")

// ArgumentsError reports why a call's arguments are not a JSON object with a string "code".
type ArgumentsError struct {
	// Reason says what is wrong, for example `no "code" property`.
	Reason string
}

func (e *ArgumentsError) Error() string {
	return `arguments must be a JSON object like {"code": "…"}: ` + e.Reason
}

// Call is one call of the function in a model turn.
type Call struct {
	// ItemID is, on Responses, the function_call item's "id" (may be empty); on Chat, the tool
	// call's id.
	ItemID string
	// CallID is, on Responses, the item's "call_id"; on Chat, the tool call's id.
	CallID string
	// Arguments is the raw arguments string as the model sent it (the raw JSON when a backend
	// sent an object instead of a string).
	Arguments string
	// Code is the "code" argument; it is meaningful only when ArgsErr is nil.
	Code string
	// Tool is the hosted tool's name as the client knows it ("bash_code_execution", "shell"),
	// for telemetry; "" for the surface's code tool (code_interpreter, code_execution).
	Tool string
	// ArgsErr is non-nil when the call must not run: its Arguments are not a JSON object with a
	// string "code" (*ArgumentsError, trailing data included), or its call id is empty
	// (ErrMissingCallID) or repeats an earlier call's (ErrDuplicateCallID).
	ArgsErr error
}

// Turn is what a model turn (an upstream response body) asks for.
type Turn struct {
	// Calls holds the calls of the function, in order.
	Calls []Call
	// ClientCalls counts the calls of the client's own tools in the same turn that the client
	// must run (function calls, custom tool calls, computer, shell and apply_patch calls, MCP
	// approval requests); calls the upstream already ran itself are not counted.
	ClientCalls int
	// ClientCallIDs holds, on Chat, the ids of the client's tool calls, in order.
	ClientCallIDs []string
}
