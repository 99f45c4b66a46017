package responses

import (
	"strings"

	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/schema/internal/bashrun"
	"github.com/codeinterp/codeinterp/pkg/store"
)

// shellCallArgs is a shell call of the answer last parsed: its action, or why its arguments
// cannot run.
type shellCallArgs struct {
	action shellAction
	err    error
}

// ParseTurn implements [schema.Exchange]. In a request with the hosted shell tool, each call
// of the shell function runs as the program of its commands (see shellAction.program).
func (x *exchange) ParseTurn(body []byte) (schema.Turn, error) {
	turn, err := x.Exchange.ParseTurn(body)
	if err != nil || x.shell == nil {
		return turn, err
	}
	x.shellCalls = make(map[string]shellCallArgs)
	gjson.GetBytes(body, "output").ForEach(func(_, item gjson.Result) bool {
		if finalIsInternalCall(item, ShellFunctionName) {
			args := item.Get("arguments")
			raw := args.Raw
			if args.Type == gjson.String {
				raw = args.Str
			}
			a, err := parseShellArguments(raw)
			x.shellCalls[item.Get("call_id").String()] = shellCallArgs{action: a, err: err}
		}
		return true
	})
	for i := range turn.Calls {
		c := &turn.Calls[i]
		if sc, ok := x.shellCalls[c.CallID]; ok && c.ArgsErr == nil && sc.err == nil {
			c.Code = sc.action.program(bashrun.Marker(x.shell.key, c.CallID))
		}
	}
	return turn, nil
}

// shellOutputs returns outputs with the text of each shell call's run replaced by what the
// model reads of it (renderShell), followed by the loop's notes on the run; a run that gave no
// result (no sandbox, a time limit, invalid arguments) keeps the loop's text, which says why.
func (x *exchange) shellOutputs(outputs []schema.CallOutput) []schema.CallOutput {
	if x.shell == nil || len(x.shellCalls) == 0 {
		return outputs
	}
	out := make([]schema.CallOutput, len(outputs))
	for i, o := range outputs {
		out[i] = o
		sc, ok := x.shellCalls[o.CallID]
		switch {
		case !ok:
		case sc.err != nil:
			out[i].Output = "[invalid shell call: " + sc.err.Error() + `; expected {"commands": ["…"], "timeout_ms": n, "max_output_length": n}. Nothing was run.]`
		default:
			outs, found := shellResult(bashrun.Marker(x.shell.key, o.CallID), o.Output)
			if !found {
				break
			}
			text := renderShell(outs)
			// What follows the result line: the loop's notes (files written, limits).
			if _, rest, _ := strings.Cut(o.Output, "\n"); strings.TrimSpace(rest) != "" {
				text = strings.TrimSuffix(text, "\n") + "\n" + strings.TrimSpace(rest)
			}
			out[i].Output = text
		}
	}
	return out
}

// shellItem reports whether item is a call of the shell function of a request with the hosted
// shell tool.
func (x *exchange) shellItem(item gjson.Result) bool {
	return x.shell != nil && finalIsInternalCall(item, ShellFunctionName)
}

// internalCall reports whether item is a call the loop runs: of the code_interpreter function,
// or of the shell function.
func (x *exchange) internalCall(item gjson.Result) bool {
	return finalIsInternalCall(item, x.FunctionName()) || x.shellItem(item)
}

// rememberShellItems keeps, for identity, the shell calls of the answer's rounds by their item
// ids (see rememberItems): the shell_call's as the function call the model made, the
// shell_call_output's as the output it read, each with the container it ran in.
func (x *exchange) rememberShellItems(p store.Continuations, identity string) {
	if x.shell == nil {
		return
	}
	for _, rd := range x.rounds {
		internal := 0
		gjson.GetBytes(rd.Body, "output").ForEach(func(_, item gjson.Result) bool {
			if !x.internalCall(item) {
				return true
			}
			k := internal
			internal++
			if !x.shellItem(item) || k >= len(rd.Calls) || !strings.HasPrefix(rd.Calls[k].ID, shellCallPrefix) {
				return true
			}
			sc := shellCallOf(item, rd.Calls[k], x.shell.key)
			call, out := store.Key{Kind: kindItem, ID: sc.id}, store.Key{Kind: kindItem, ID: shellOutputID(sc.id)}
			p.Put(identity, []store.PendingCall{{CallID: sc.callID, Arguments: sc.action.arguments()}}, call)
			p.Put(identity, []store.PendingCall{{CallID: sc.callID, Output: renderShell(sc.outputs)}}, out)
			if sc.containerID != "" {
				p.PutContainers(identity, []string{sc.containerID}, call, out)
			}
			return true
		})
	}
}
