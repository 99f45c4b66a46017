package responses

import (
	"strings"

	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/schema/internal/openai"

	"github.com/codeinterp/codeinterp/pkg/schema/internal/jsonscan"
)

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
func turnReadResponses(t jsonscan.TopLevel, name string) schema.Turn {
	return turnRead(t, name, false)
}

// turnReadShell reads the function calls among the items of a Responses "output" of a request
// with the hosted shell tool: the calls of the shell function are calls too, whose Arguments
// are read by parseShellArguments; the exchange gives them their programs (see
// exchange.ParseTurn).
func turnReadShell(t jsonscan.TopLevel, name string) schema.Turn {
	return turnRead(t, name, true)
}

// turnRead reads the function calls named name, and with shell those of the shell function,
// among the items of a Responses "output".
func turnRead(t jsonscan.TopLevel, name string, shell bool) schema.Turn {
	var turn schema.Turn
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
			turn.Calls = append(turn.Calls, openai.NewCall(b, itemID, callID, args))
		case shell && typ == "function_call" && fn == ShellFunctionName:
			c := openai.NewCall(b, itemID, callID, args)
			c.Tool = "shell"
			if args.OK() {
				c.Code = ""
				_, c.ArgsErr = parseShellArguments(c.Arguments)
			}
			turn.Calls = append(turn.Calls, c)
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
