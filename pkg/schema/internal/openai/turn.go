package openai

import (
	"fmt"

	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/schema/internal/jsonscan"
)

// ParseTurn reads the calls of the function named name in a model turn: the answer body,
// whose top-level members it also returns. It fails only when body is not a JSON object.
func (d *Dialect) ParseTurn(body []byte, name string) (schema.Turn, jsonscan.TopLevel, error) {
	t, err := TopKeys.TopObject(body, "parse turn")
	if err != nil {
		return schema.Turn{}, jsonscan.TopLevel{}, err
	}
	return d.readTurn(t, name), t, nil
}

// readTurn reads a validated turn whose top-level members are t. A call without a call id, or
// with the id of an earlier call, is marked as one that must not run.
func (d *Dialect) readTurn(t jsonscan.TopLevel, name string) schema.Turn {
	turn := d.ReadTurn(t, name)
	seen := make(map[string]bool, len(turn.Calls))
	for i := range turn.Calls {
		c := &turn.Calls[i]
		switch {
		case c.CallID == "":
			c.ArgsErr = schema.ErrMissingCallID
		case seen[c.CallID]:
			c.ArgsErr = fmt.Errorf("call id %q: %w", c.CallID, schema.ErrDuplicateCallID)
		}
		seen[c.CallID] = true
	}
	return turn
}

// NewCall builds a Call from its ids and the span of its arguments.
func NewCall(b []byte, itemID, callID string, args jsonscan.Span) schema.Call {
	c := schema.Call{ItemID: itemID, CallID: callID}
	switch {
	case !args.OK():
		c.ArgsErr = &schema.ArgumentsError{Reason: "no arguments"}
		return c
	case b[args.Start] == '"':
		c.Arguments, _ = jsonscan.Str(b, args)
	default:
		// Some backends send the arguments as a JSON object rather than a string.
		c.Arguments = string(b[args.Start:args.End])
	}
	c.Code, c.ArgsErr = ParseArguments(c.Arguments)
	return c
}

// ParseArguments returns the "code" of arguments, which must be exactly one JSON object
// (whitespace around it allowed) with one string "code" property; other properties are ignored.
func ParseArguments(arguments string) (string, error) {
	b := []byte(arguments)
	members, isObject, err := jsonscan.ScanTop(b)
	switch {
	case err != nil:
		return "", &schema.ArgumentsError{Reason: "not valid JSON: " + err.Error()}
	case !isObject:
		return "", &schema.ArgumentsError{Reason: "not a JSON object"}
	}
	t := TopKeys.Index(b, members)
	switch t.Count("code") {
	case 0:
		return "", &schema.ArgumentsError{Reason: `no "code" property`}
	case 1:
	default:
		return "", &schema.ArgumentsError{Reason: `more than one "code" property`}
	}
	code, ok := jsonscan.Str(b, t.Span("code"))
	if !ok {
		return "", &schema.ArgumentsError{Reason: `"code" is not a string`}
	}
	return code, nil
}
