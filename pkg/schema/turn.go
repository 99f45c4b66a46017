package schema

import (
	"errors"
	"fmt"
	"github.com/codeinterp/codeinterp/pkg/schema/internal/jsonscan"
	"strings"
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

// ParseTurn reads the calls of the function named functionName (empty means
// DefaultFunctionName) in a model turn of surface s. On Responses it reads the items of
// "output"; on Chat the tool_calls of choices[0].message (other choices are ignored). It returns
// an error only when body is not a JSON object.
func ParseTurn(s Surface, body []byte, functionName string) (Turn, error) {
	t, err := topKeys.TopObject(body, "parse turn")
	if err != nil {
		return Turn{}, err
	}
	return turnRead(s, t, Options{FunctionName: functionName}.Name())
}

// turnRead reads a validated turn whose top-level members are t.
func turnRead(s Surface, t jsonscan.TopLevel, name string) (Turn, error) {
	var turn Turn
	switch s {
	case Responses:
		turn = turnReadResponses(t, name)
	case Chat:
		turn = turnReadChat(t, name)
	default:
		return Turn{}, fmt.Errorf("parse turn: unknown surface %v", s)
	}
	seen := make(map[string]bool, len(turn.Calls))
	for i := range turn.Calls {
		c := &turn.Calls[i]
		switch {
		case c.CallID == "":
			c.ArgsErr = ErrMissingCallID
		case seen[c.CallID]:
			c.ArgsErr = fmt.Errorf("call id %q: %w", c.CallID, ErrDuplicateCallID)
		}
		seen[c.CallID] = true
	}
	return turn, nil
}

// turnIsClientCall reports whether a Responses output item of type typ asks the client to act.
func turnIsClientCall(typ string) bool {
	switch typ {
	case "function_call", "custom_tool_call", "computer_call", "local_shell_call", "shell_call",
		"apply_patch_call", "mcp_approval_request":
		return true
	}
	return false
}

// turnReadResponses reads the function calls among the items of a Responses "output".
func turnReadResponses(t jsonscan.TopLevel, name string) Turn {
	var turn Turn
	b := t.B
	out := t.Span("output")
	if !out.OK() || b[out.Start] != '[' {
		return turn
	}
	var (
		pending []string        // call ids of client calls
		done    map[string]bool // call ids the upstream answered itself (*_output items)
	)
	jsonscan.EachElem(b, out.Start, func(_, st, _ int) bool {
		if b[st] != '{' {
			return true
		}
		var typ, fn, itemID, callID string
		args := jsonscan.Span{}
		jsonscan.EachMember(b, st, func(rawKey []byte, vs, ve int) bool {
			sp := jsonscan.Span{Start: vs, End: ve}
			switch k, _ := jsonscan.DecodeString(rawKey); k {
			case "type":
				typ, _ = jsonscan.Str(b, sp)
			case "name":
				fn, _ = jsonscan.Str(b, sp)
			case "id":
				itemID, _ = jsonscan.Str(b, sp)
			case "call_id":
				callID, _ = jsonscan.Str(b, sp)
			case "arguments":
				args = sp
			}
			return true
		})
		switch {
		case typ == "function_call" && fn == name:
			turn.Calls = append(turn.Calls, turnCall(b, itemID, callID, args))
		case turnIsClientCall(typ):
			if callID == "" {
				callID = itemID
			}
			pending = append(pending, callID)
		case strings.HasSuffix(typ, "_output") && callID != "":
			if done == nil {
				done = make(map[string]bool)
			}
			done[callID] = true
		}
		return true
	})
	for _, id := range pending {
		if id == "" || !done[id] {
			turn.ClientCalls++
		}
	}
	return turn
}

// turnReadChat reads the function calls among the tool_calls of choices[0].message.
func turnReadChat(t jsonscan.TopLevel, name string) Turn {
	var turn Turn
	b := t.B
	msg := turnChatMessage(t)
	if !msg.OK() {
		return turn
	}
	if fc := jsonscan.Field(b, msg.Start, "function_call"); fc.OK() && b[fc.Start] == '{' {
		turn.ClientCalls++ // the legacy functions API: always the client's
	}
	calls := jsonscan.Field(b, msg.Start, "tool_calls")
	if !calls.OK() || b[calls.Start] != '[' {
		return turn
	}
	jsonscan.EachElem(b, calls.Start, func(_, st, _ int) bool {
		if b[st] != '{' {
			return true
		}
		typ, hasType := jsonscan.Str(b, jsonscan.Field(b, st, "type"))
		fn := jsonscan.Field(b, st, "function")
		var n string
		if fn.OK() {
			n, _ = jsonscan.Str(b, jsonscan.Field(b, fn.Start, "name"))
		}
		if (typ != "function" && hasType) || n != name {
			turn.ClientCalls++
			if id, _ := jsonscan.Str(b, jsonscan.Field(b, st, "id")); id != "" {
				turn.ClientCallIDs = append(turn.ClientCallIDs, id)
			}
			return true
		}
		id, _ := jsonscan.Str(b, jsonscan.Field(b, st, "id"))
		turn.Calls = append(turn.Calls, turnCall(b, id, id, jsonscan.Field(b, fn.Start, "arguments")))
		return true
	})
	return turn
}

// turnChatMessage returns the span of choices[0].message when it is an object.
func turnChatMessage(t jsonscan.TopLevel) jsonscan.Span {
	b := t.B
	choices := t.Span("choices")
	if !choices.OK() || b[choices.Start] != '[' {
		return jsonscan.Span{}
	}
	var msg jsonscan.Span
	jsonscan.EachElem(b, choices.Start, func(_, st, _ int) bool {
		if m := jsonscan.Field(b, st, "message"); m.OK() && b[m.Start] == '{' {
			msg = m
		}
		return false
	})
	return msg
}

// turnCall builds a Call from its ids and the span of its arguments.
func turnCall(b []byte, itemID, callID string, args jsonscan.Span) Call {
	c := Call{ItemID: itemID, CallID: callID}
	switch {
	case !args.OK():
		c.ArgsErr = &ArgumentsError{Reason: "no arguments"}
		return c
	case b[args.Start] == '"':
		c.Arguments, _ = jsonscan.Str(b, args)
	default:
		// Some backends send the arguments as a JSON object rather than a string.
		c.Arguments = string(b[args.Start:args.End])
	}
	c.Code, c.ArgsErr = turnParseArguments(c.Arguments)
	return c
}

// turnParseArguments returns the "code" of arguments, which must be exactly one JSON object
// (whitespace around it allowed) with one string "code" property; other properties are ignored.
func turnParseArguments(arguments string) (string, error) {
	b := []byte(arguments)
	members, isObject, err := jsonscan.ScanTop(b)
	switch {
	case err != nil:
		return "", &ArgumentsError{Reason: "not valid JSON: " + err.Error()}
	case !isObject:
		return "", &ArgumentsError{Reason: "not a JSON object"}
	}
	t := topKeys.Index(b, members)
	switch t.Count("code") {
	case 0:
		return "", &ArgumentsError{Reason: `no "code" property`}
	case 1:
	default:
		return "", &ArgumentsError{Reason: `more than one "code" property`}
	}
	code, ok := jsonscan.Str(b, t.Span("code"))
	if !ok {
		return "", &ArgumentsError{Reason: `"code" is not a string`}
	}
	return code, nil
}
