package chat

import (
	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/schema/internal/jsonscan"
	"github.com/codeinterp/codeinterp/pkg/schema/internal/openai"
)

// turnReadChat reads the function calls among the tool_calls of choices[0].message.
func turnReadChat(t jsonscan.TopLevel, name string) schema.Turn {
	var turn schema.Turn
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
		turn.Calls = append(turn.Calls, openai.NewCall(b, id, id, jsonscan.Field(b, fn.Start, "arguments")))
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
