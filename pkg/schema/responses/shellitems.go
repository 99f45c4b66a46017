package responses

import (
	"strconv"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/schema/internal/bashrun"
	"github.com/codeinterp/codeinterp/pkg/schema/internal/jsonscan"
	"github.com/codeinterp/codeinterp/pkg/schema/internal/openai"
)

// The item id prefixes of a shell call's two items.
const (
	shellCallPrefix   = "sh_"
	shellOutputPrefix = "sho_"
)

// Statuses of a shell_call_output item.
const (
	shellCompleted  = "completed"
	shellIncomplete = "incomplete"
)

// shellOutputID is the id of the shell_call_output item of the shell_call item id: the same
// suffix.
func shellOutputID(id string) string {
	return shellOutputPrefix + strings.TrimPrefix(id, shellCallPrefix)
}

// shellCall is one run shell call as the answer shows it: a shell_call item and its
// shell_call_output item.
type shellCall struct {
	id, callID, containerID string
	action                  shellAction
	// status is the shell_call_output's: completed, or incomplete when the commands did not
	// run to their end (the loop stopped, the sandbox failed).
	status  string
	outputs []shellOutput
}

// shellCallOf is the shell call that item, the model's call of the shell function, became when
// the loop ran it as c; key makes the marker of its program's result.
func shellCallOf(item gjson.Result, c schema.CodeCall, key []byte) shellCall {
	sc := shellCall{id: c.ID, callID: item.Get("call_id").String(), containerID: c.ContainerID, status: shellCompleted}
	sc.action, _ = parseShellArguments(item.Get("arguments").String())
	if sc.action.Commands == nil {
		sc.action.Commands = []string{}
	}
	switch {
	case c.Run != nil && c.Run.TimedOut:
		// The loop's own time limit interrupted the program: the command that ran timed out.
		sc.outputs = []shellOutput{{TimedOut: true}}
	case c.Run != nil:
		if outs, ok := shellResult(bashrun.Marker(key, sc.callID), c.Run.Stdout); ok {
			sc.outputs = outs
			break
		}
		sc.status, sc.outputs = shellIncomplete, []shellOutput{{Stderr: c.Run.Stderr, ExitCode: 1}}
	case c.Status == schema.CodeCallIncomplete:
		sc.status = shellIncomplete
	default:
		// Not run (no sandbox, invalid arguments, a limit): the reason, as the model read it.
		sc.status = shellIncomplete
		sc.outputs = []shellOutput{{Stderr: schema.RenderCodeOutputs(c.Outputs), ExitCode: 1}}
	}
	return sc
}

// appendCall appends the shell_call item to dst, with the native keys in the native order; with
// pending, as the stream first shows it (in progress, no commands yet).
func (sc *shellCall) appendCall(dst []byte, pending bool) []byte {
	dst = append(dst, `{"id":`...)
	dst = jsonscan.AppendString(dst, sc.id)
	dst = append(dst, `,"type":"shell_call","status":`...)
	if pending {
		dst = append(dst, `"in_progress"`...)
	} else {
		dst = append(dst, `"completed"`...)
	}
	dst = append(dst, `,"call_id":`...)
	dst = jsonscan.AppendString(dst, sc.callID)
	dst = append(dst, `,"action":{"commands":[`...)
	if !pending {
		for i, c := range sc.action.Commands {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = jsonscan.AppendString(dst, c)
		}
	}
	dst = append(dst, `],"max_output_length":`...)
	dst = appendOptInt(dst, sc.action.MaxOutputLength)
	dst = append(dst, `,"timeout_ms":`...)
	dst = appendOptInt(dst, sc.action.TimeoutMS)
	dst = append(dst, `},"environment":`...)
	if sc.containerID == "" {
		dst = append(dst, "null"...)
	} else {
		dst = append(dst, `{"type":"container_reference","container_id":`...)
		dst = jsonscan.AppendString(dst, sc.containerID)
		dst = append(dst, '}')
	}
	return append(dst, `,"caller":{"type":"direct"}}`...)
}

// appendOutput appends the shell_call_output item to dst, with the native keys in the native
// order; with empty, without its outputs (as the stream first shows it).
func (sc *shellCall) appendOutput(dst []byte, empty bool) []byte {
	dst = append(dst, `{"id":`...)
	dst = jsonscan.AppendString(dst, shellOutputID(sc.id))
	dst = append(dst, `,"type":"shell_call_output","status":`...)
	dst = jsonscan.AppendString(dst, sc.status)
	dst = append(dst, `,"call_id":`...)
	dst = jsonscan.AppendString(dst, sc.callID)
	dst = append(dst, `,"max_output_length":`...)
	dst = appendOptInt(dst, sc.action.MaxOutputLength)
	dst = append(dst, `,"output":[`...)
	if !empty {
		for i, o := range sc.outputs {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = o.appendJSON(dst)
		}
	}
	return append(dst, `],"caller":null}`...)
}

// appendJSON appends the output entry {stdout, stderr, outcome} of one command to dst.
func (o shellOutput) appendJSON(dst []byte) []byte {
	dst = append(dst, `{"stdout":`...)
	dst = jsonscan.AppendString(dst, o.Stdout)
	dst = append(dst, `,"stderr":`...)
	dst = jsonscan.AppendString(dst, o.Stderr)
	if o.TimedOut {
		return append(dst, `,"outcome":{"type":"timeout"}}`...)
	}
	dst = append(dst, `,"outcome":{"type":"exit","exit_code":`...)
	dst = strconv.AppendInt(dst, int64(o.ExitCode), 10)
	return append(dst, "}}"...)
}

func appendOptInt(dst []byte, v *int64) []byte {
	if v == nil {
		return append(dst, "null"...)
	}
	return strconv.AppendInt(dst, *v, 10)
}

// sseShellCall writes the events of a shell_call item, in the order the native API streams
// them: the item added (in progress, no commands), each command added, its text as deltas, and
// done, then the item done.
func sseShellCall(w *openai.Writer, idx int, added, done string, commands []string) {
	sseItemEvent(w, "response.output_item.added", idx, added)
	for i, c := range commands {
		w.Open("response.shell_call_command.added")
		w.Str("command", "")
		w.Num("command_index", i)
		w.Num("output_index", idx)
		w.Close()
		for s := c; len(s) > 0; {
			n := openai.Cut(s)
			w.Open("response.shell_call_command.delta")
			w.Num("command_index", i)
			w.Str("delta", s[:n])
			w.Num("output_index", idx)
			w.Close()
			s = s[n:]
		}
		w.Open("response.shell_call_command.done")
		w.Str("command", c)
		w.Num("command_index", i)
		w.Num("output_index", idx)
		w.Close()
	}
	sseItemEvent(w, "response.output_item.done", idx, done)
}

// sseShellOutput writes the events of a shell_call_output item, in the order the native API
// streams them: the item added (no outputs yet), for each command its stdout and stderr as a
// delta and its output done, then the item done.
func sseShellOutput(w *openai.Writer, idx int, id, added, done string, outputs []shellOutput) {
	sseItemEvent(w, "response.output_item.added", idx, added)
	for i, o := range outputs {
		if o.Stdout != "" || o.Stderr != "" {
			var delta []byte
			delta = append(delta, '{')
			if o.Stdout != "" {
				delta = append(delta, `"stdout":`...)
				delta = jsonscan.AppendString(delta, o.Stdout)
			}
			if o.Stderr != "" {
				if o.Stdout != "" {
					delta = append(delta, ',')
				}
				delta = append(delta, `"stderr":`...)
				delta = jsonscan.AppendString(delta, o.Stderr)
			}
			w.Open("response.shell_call_output_content.delta")
			w.Num("command_index", i)
			w.Raw("delta", string(append(delta, '}')))
			w.Str("item_id", id)
			w.Num("output_index", idx)
			w.Close()
		}
		w.Open("response.shell_call_output_content.done")
		w.Num("command_index", i)
		w.Str("item_id", id)
		w.Raw("output", string(append(o.appendJSON([]byte{'['}), ']')))
		w.Num("output_index", idx)
		w.Close()
	}
	sseItemEvent(w, "response.output_item.done", idx, done)
}

// sseShellCallItem writes the events of a shell_call item of a finished answer.
func sseShellCallItem(w *openai.Writer, idx int, item gjson.Result) {
	var commands []string
	item.Get("action.commands").ForEach(func(_, c gjson.Result) bool {
		commands = append(commands, c.String())
		return true
	})
	added := w.Edit(item.Raw, "status", `"in_progress"`, false)
	added = w.Edit(added, "action.commands", "[]", false)
	sseShellCall(w, idx, added, item.Raw, commands)
}

// sseShellOutputItem writes the events of a shell_call_output item of a finished answer.
func sseShellOutputItem(w *openai.Writer, idx int, item gjson.Result) {
	outs := parseShellOutputs([]byte(item.Get("output").Raw))
	sseShellOutput(w, idx, item.Get("id").String(), w.Edit(item.Raw, "output", "[]", false), item.Raw, outs)
}
