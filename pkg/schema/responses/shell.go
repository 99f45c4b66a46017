package responses

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/schema/internal/bashrun"
	"github.com/codeinterp/codeinterp/pkg/schema/internal/jsonscan"
	"github.com/codeinterp/codeinterp/pkg/schema/internal/openai"
)

// OpenAI's hosted shell tool ({"type":"shell","environment":{"type":"container_auto"|
// "container_reference",…}}) is served as the code_interpreter tool is: it becomes a function
// tool of the model, ShellFunctionName, whose calls run as shell commands in the request's
// container — the one a code_interpreter call of the same request uses — and come back to the
// client as the native shell_call and shell_call_output items. A shell tool whose environment is
// local (or absent) is the client's own: it passes through untouched.

// ShellFunctionName is the name of the function tool the hosted shell tool becomes.
const ShellFunctionName = "shell"

// shellDescription describes the shell function to the model.
const shellDescription = "Run shell commands (bash) in a persistent, sandboxed Linux container, one after the other. " +
	"The working directory is /mnt/data; files there persist between calls and are shared with the code_interpreter " +
	"tool when it is present. Python 3 with numpy, pandas and matplotlib is installed. There is no internet access. " +
	"The output shows each command's stdout, stderr and exit code."

// shellParameters is the shell function's JSON schema: the native action's fields.
const shellParameters = `{"type":"object","properties":{` +
	`"commands":{"type":"array","items":{"type":"string"},"description":"The shell commands to run, in order."},` +
	`"timeout_ms":{"type":"integer","description":"Optional time limit of each command, in milliseconds."},` +
	`"max_output_length":{"type":"integer","description":"Optional maximum number of characters to return of each command's stdout and stderr together."}},` +
	`"required":["commands"]}`

// shellFunctionTool is the function tool the hosted shell tool becomes.
var shellFunctionTool = []byte(`{"type":"function","name":` + strconv.Quote(ShellFunctionName) +
	`,"description":` + strconv.Quote(shellDescription) + `,"parameters":` + shellParameters + `}`)

// shellFunctionChoice is the tool_choice that names the shell function.
var shellFunctionChoice = []byte(`{"type":"function","name":` + strconv.Quote(ShellFunctionName) + `}`)

// maxShellCommands bounds the commands of one call (ours: the native API documents none).
const maxShellCommands = 64

// shellRequest is what the shell rewrite learned of a request with a hosted shell tool.
type shellRequest struct {
	// tool is the client's shell tool, raw, echoed in the answer's tools.
	tool []byte
	// containerID is a container_reference environment's container; memoryLimit and fileIDs
	// are a container_auto environment's.
	containerID, memoryLimit string
	fileIDs                  []string
	// networkPolicy is a container_auto environment's network_policy, raw, secrets included
	// (tool has them removed), and networkParam its name in errors.
	networkPolicy []byte
	networkParam  string
	// skills is a container_auto environment's non-empty skills array, raw, and skillsParam its
	// name in errors.
	skills      []byte
	skillsParam string
	// choice is the client's tool_choice when it names the shell tool ({"type":"shell"}).
	choice []byte
	// allowedChoice is the client's tool_choice when it is an allowed_tools choice whose
	// tools name the shell tool.
	allowedChoice []byte
	// replayed are the container ids of the replayed shell_call items, in input order.
	replayed []string
	// codeTool reports whether the request has a code_interpreter tool too.
	codeTool bool
}

// noCodeFunction is the code function's name in a request with the shell tool and no
// code_interpreter tool: not valid UTF-8, so no function of a JSON body has it, and a client's
// function that has the configured name stays the client's.
const noCodeFunction = "\xff(no code_interpreter tool)"

// shellAction is a shell call's action: what the model asked to run.
type shellAction struct {
	Commands        []string `json:"commands"`
	TimeoutMS       *int64   `json:"timeout_ms"`
	MaxOutputLength *int64   `json:"max_output_length"`
}

// shellOutput is what one command of a shell call gave.
type shellOutput struct {
	Stdout, Stderr string
	ExitCode       int
	TimedOut       bool
}

// rewriteShell rewrites the hosted shell tool of body, if it has one, into the shell function:
// the tool, a tool_choice naming it, and the replayed shell_call and shell_call_output input
// items (function_call and function_call_output pairs, as the model saw them). It returns body
// itself and nil when there is no hosted shell tool, or when body is not a JSON object (the
// rewrite that follows refuses it).
func rewriteShell(body []byte) ([]byte, *shellRequest, error) {
	if !bytes.Contains(body, []byte(`"shell"`)) {
		return body, nil, nil
	}
	t, err := openai.TopKeys.TopObject(body, "rewrite shell")
	if err != nil {
		return body, nil, nil
	}
	tools := t.Span("tools")
	if !tools.OK() || body[tools.Start] != '[' {
		return body, nil, nil
	}
	var (
		sh       *shellRequest
		edits    []jsonscan.Edit
		clash    = -1
		rqErr    error
		second   = -1
		codeTool bool
	)
	jsonscan.EachElem(body, tools.Start, func(i, st, en int) bool {
		if body[st] != '{' {
			return true
		}
		typ, _ := jsonscan.Str(body, jsonscan.Field(body, st, "type"))
		if typ == "function" && jsonscan.FieldIs(body, st, "name", ShellFunctionName) {
			clash = i
		}
		codeTool = codeTool || typ == "code_interpreter"
		if typ != "shell" {
			return true
		}
		env := jsonscan.Field(body, st, "environment")
		if !env.OK() || body[env.Start] != '{' {
			return true // local: the client's own
		}
		envType, _ := jsonscan.Str(body, jsonscan.Field(body, env.Start, "type"))
		if envType != "container_auto" && envType != "container_reference" {
			return true
		}
		if sh != nil {
			second = i
			return false
		}
		sh = &shellRequest{tool: bytes.Clone(body[st:en])}
		rqErr = sh.readEnvironment(body, env, envType, i)
		edits = append(edits, jsonscan.Edit{Start: st, End: en, Repl: shellFunctionTool})
		return rqErr == nil
	})
	switch {
	case sh == nil:
		return body, nil, nil
	case rqErr != nil:
		return nil, nil, rqErr
	case second >= 0:
		return nil, nil, &schema.RequestError{Message: "Only one hosted shell tool is supported per request.", Param: fmt.Sprintf("tools[%d]", second)}
	case clash >= 0:
		return nil, nil, &schema.RequestError{
			Message: fmt.Sprintf("The tool name %q is reserved for the shell tool, which is provided to the model as a function of that name; rename your tool.", ShellFunctionName),
			Param:   fmt.Sprintf("tools[%d].name", clash),
		}
	}
	sh.codeTool = codeTool
	if tc := t.Span("tool_choice"); tc.OK() && body[tc.Start] == '{' {
		switch typ, _ := jsonscan.Str(body, jsonscan.Field(body, tc.Start, "type")); typ {
		case "shell":
			sh.choice = bytes.Clone(body[tc.Start:tc.End])
			edits = append(edits, jsonscan.Edit{Start: tc.Start, End: tc.End, Repl: shellFunctionChoice})
		case "allowed_tools":
			edits = append(edits, sh.rewriteAllowedTools(body, tc)...)
		}
	}
	if in := t.Span("input"); in.OK() && body[in.Start] == '[' {
		e, err := sh.rewriteReplays(body, in)
		if err != nil {
			return nil, nil, err
		}
		edits = append(edits, e...)
	}
	out, err := jsonscan.Apply(body, edits)
	if err != nil {
		return nil, nil, fmt.Errorf("rewrite shell: %w", err)
	}
	return out, sh, nil
}

// rewriteAllowedTools returns the edits that make the entries {"type":"shell"} of the
// allowed_tools tool_choice at tc name the shell function, and keeps the client's choice to
// echo. Whether the choice forces a call (mode "required") is read afterwards, on the rewritten
// body, by the code_interpreter rewrite, as for an allowed_tools choice naming that tool.
func (sh *shellRequest) rewriteAllowedTools(b []byte, tc jsonscan.Span) []jsonscan.Edit {
	list := jsonscan.Field(b, tc.Start, "tools")
	if !list.OK() || b[list.Start] != '[' {
		return nil
	}
	var edits []jsonscan.Edit
	jsonscan.EachElem(b, list.Start, func(_, st, en int) bool {
		if b[st] == '{' && jsonscan.FieldIs(b, st, "type", "shell") {
			edits = append(edits, jsonscan.Edit{Start: st, End: en, Repl: shellFunctionChoice})
		}
		return true
	})
	if len(edits) > 0 {
		sh.allowedChoice = bytes.Clone(b[tc.Start:tc.End])
	}
	return edits
}

// readEnvironment reads the hosted environment at env, of type typ, of the shell tool tools[i].
func (sh *shellRequest) readEnvironment(b []byte, env jsonscan.Span, typ string, i int) error {
	param := fmt.Sprintf("tools[%d].environment", i)
	if typ == "container_reference" {
		id, ok := jsonscan.Str(b, jsonscan.Field(b, env.Start, "container_id"))
		if !ok || id == "" {
			return &schema.RequestError{Message: fmt.Sprintf("Missing required parameter: '%s.container_id'.", param),
				Param: param + ".container_id", Code: "missing_required_parameter"}
		}
		sh.containerID = id
		return nil
	}
	if sk := jsonscan.Field(b, env.Start, "skills"); sk.OK() && b[sk.Start] != 'n' {
		if b[sk.Start] != '[' {
			return &schema.RequestError{Message: fmt.Sprintf("Invalid '%s.skills': expected an array of skills.", param),
				Param: param + ".skills", Code: "invalid_type"}
		}
		if jsonscan.SkipWS(b, sk.Start+1) < sk.End-1 {
			sh.skills, sh.skillsParam = bytes.Clone(b[sk.Start:sk.End]), param+".skills"
		}
	}
	if ml := jsonscan.Field(b, env.Start, "memory_limit"); ml.OK() {
		sh.memoryLimit, _ = jsonscan.Str(b, ml)
	}
	if np := jsonscan.Field(b, env.Start, "network_policy"); np.OK() {
		sh.networkPolicy, sh.networkParam = bytes.Clone(b[np.Start:np.End]), param+".network_policy"
		sh.tool = openai.WithoutSecrets(sh.tool, "environment")
	}
	var err error
	sh.fileIDs, err = openai.ReqFileIDs(b, env, param+".file_ids")
	return err
}

// rewriteReplays returns the edits that turn the replayed shell_call and shell_call_output items
// of the input array at in into function_call and function_call_output items.
func (sh *shellRequest) rewriteReplays(b []byte, in jsonscan.Span) ([]jsonscan.Edit, error) {
	var (
		edits []jsonscan.Edit
		err   error
	)
	jsonscan.EachElem(b, in.Start, func(i, st, en int) bool {
		if b[st] != '{' {
			return true
		}
		switch typ, _ := jsonscan.Str(b, jsonscan.Field(b, st, "type")); typ {
		case "shell_call":
			var a shellAction
			act := jsonscan.Field(b, st, "action")
			if !act.OK() || json.Unmarshal(b[act.Start:act.End], &a) != nil || len(a.Commands) == 0 {
				err = &schema.RequestError{Message: fmt.Sprintf("Invalid 'input[%d].action': expected an object with a non-empty array of strings 'commands'.", i),
					Param: fmt.Sprintf("input[%d].action", i), Code: "invalid_value"}
				return false
			}
			callID, _ := jsonscan.Str(b, jsonscan.Field(b, st, "call_id"))
			if env := jsonscan.Field(b, st, "environment"); env.OK() && b[env.Start] == '{' {
				if id, ok := jsonscan.Str(b, jsonscan.Field(b, env.Start, "container_id")); ok && id != "" {
					sh.replayed = append(sh.replayed, id)
				}
			}
			edits = append(edits, jsonscan.Edit{Start: st, End: en, Repl: functionCallItem(callID, ShellFunctionName, a.arguments())})
		case "shell_call_output":
			callID, _ := jsonscan.Str(b, jsonscan.Field(b, st, "call_id"))
			var outs []shellOutput
			if o := jsonscan.Field(b, st, "output"); o.OK() {
				outs = parseShellOutputs(b[o.Start:o.End])
			}
			edits = append(edits, jsonscan.Edit{Start: st, End: en, Repl: functionCallOutputItem(callID, renderShell(outs))})
		}
		return true
	})
	return edits, err
}

// functionCallItem is a function_call input item.
func functionCallItem(callID, name, arguments string) []byte {
	out := []byte(`{"type":"function_call","call_id":`)
	out = jsonscan.AppendString(out, callID)
	out = append(out, `,"name":`...)
	out = jsonscan.AppendString(out, name)
	out = append(out, `,"arguments":`...)
	out = jsonscan.AppendString(out, arguments)
	return append(out, '}')
}

// functionCallOutputItem is a function_call_output input item.
func functionCallOutputItem(callID, output string) []byte {
	out := []byte(`{"type":"function_call_output","call_id":`)
	out = jsonscan.AppendString(out, callID)
	out = append(out, `,"output":`...)
	out = jsonscan.AppendString(out, output)
	return append(out, '}')
}

// arguments is the action as the shell function's arguments, as the model writes them.
func (a shellAction) arguments() string {
	raw, _ := json.Marshal(a) // strings and ints always marshal
	return string(raw)
}

// parseShellArguments reads a call of the shell function: its arguments must be a JSON object
// with a non-empty array of strings "commands" (at most maxShellCommands), and, optionally,
// positive integers (or null) "timeout_ms" and "max_output_length".
func parseShellArguments(arguments string) (shellAction, error) {
	var a shellAction
	dec := json.NewDecoder(strings.NewReader(arguments))
	if err := dec.Decode(&a); err != nil {
		return a, &schema.ArgumentsError{Reason: "not a JSON object with an array of strings \"commands\": " + err.Error()}
	}
	if dec.More() {
		return a, &schema.ArgumentsError{Reason: "trailing data after the object"}
	}
	switch {
	case len(a.Commands) == 0:
		return a, &schema.ArgumentsError{Reason: `"commands" is missing or empty`}
	case len(a.Commands) > maxShellCommands:
		return a, &schema.ArgumentsError{Reason: fmt.Sprintf(`more than %d "commands"`, maxShellCommands)}
	case a.TimeoutMS != nil && *a.TimeoutMS <= 0:
		return a, &schema.ArgumentsError{Reason: `"timeout_ms" must be a positive integer`}
	case a.MaxOutputLength != nil && *a.MaxOutputLength < 0:
		return a, &schema.ArgumentsError{Reason: `"max_output_length" must not be negative`}
	}
	return a, nil
}

// program is the Python program that runs the action's commands in the container and prints
// their outputs after mark (see bashrun.OpShell).
func (a shellAction) program(mark string) string {
	in := map[string]any{"commands": a.Commands, "timeout": nil, "max_chars": nil}
	if a.TimeoutMS != nil {
		in["timeout"] = float64(*a.TimeoutMS) / 1000
	}
	if a.MaxOutputLength != nil {
		in["max_chars"] = *a.MaxOutputLength
	}
	return bashrun.Program(bashrun.OpShell, in, mark)
}

// shellResult reads the outputs a shell program printed after mark in out, the run's stdout,
// and reports whether it found them.
func shellResult(mark, out string) ([]shellOutput, bool) {
	line, ok := bashrun.Line(mark, out)
	if !ok {
		return nil, false
	}
	// The texts are base64, which encoding/json decodes into []byte.
	var p struct {
		K string `json:"k"`
		R []struct {
			Out []byte `json:"out"`
			Err []byte `json:"err"`
			RC  int    `json:"rc"`
			TO  bool   `json:"to"`
		} `json:"r"`
	}
	if err := json.Unmarshal([]byte(line), &p); err != nil || p.K != "shell" {
		return nil, false
	}
	outs := make([]shellOutput, len(p.R))
	for i, r := range p.R {
		outs[i] = shellOutput{Stdout: string(r.Out), Stderr: string(r.Err), ExitCode: r.RC, TimedOut: r.TO}
	}
	return outs, true
}

// renderShell is the text the model reads for a shell call's outputs: for each command, a line
// with its number and how it ended, then its stdout, then its stderr after "[stderr]". The
// replay of a shell_call_output item renders its outputs with it, as the loop rendered the run.
func renderShell(outs []shellOutput) string {
	if len(outs) == 0 {
		return "[no command ran]"
	}
	var b strings.Builder
	for i, o := range outs {
		if i > 0 && !strings.HasSuffix(b.String(), "\n") {
			b.WriteByte('\n')
		}
		if o.TimedOut {
			fmt.Fprintf(&b, "[command %d: timed out]\n", i+1)
		} else {
			fmt.Fprintf(&b, "[command %d: exit code %d]\n", i+1, o.ExitCode)
		}
		b.WriteString(o.Stdout)
		if o.Stderr != "" {
			if o.Stdout != "" && !strings.HasSuffix(o.Stdout, "\n") {
				b.WriteByte('\n')
			}
			b.WriteString("[stderr]\n")
			b.WriteString(o.Stderr)
		}
	}
	return b.String()
}

// parseShellOutputs reads the output array of a shell_call_output item: {stdout, stderr,
// outcome:{type:"exit",exit_code}|{type:"timeout"}} entries; anything else reads as none.
func parseShellOutputs(raw []byte) []shellOutput {
	var entries []struct {
		Stdout  string `json:"stdout"`
		Stderr  string `json:"stderr"`
		Outcome struct {
			Type     string `json:"type"`
			ExitCode int    `json:"exit_code"`
		} `json:"outcome"`
	}
	if json.Unmarshal(raw, &entries) != nil {
		return nil
	}
	outs := make([]shellOutput, len(entries))
	for i, e := range entries {
		outs[i] = shellOutput{Stdout: e.Stdout, Stderr: e.Stderr, ExitCode: e.Outcome.ExitCode, TimedOut: e.Outcome.Type == "timeout"}
	}
	return outs
}

// apply puts what the shell tool gives into the request r the rewrite made: the client's
// tool_choice when it named the shell tool (forcing the first round's call), and the container
// when the code_interpreter tool does not name one. A code_interpreter tool and a shell tool
// naming two different containers are refused: the calls of a request share one.
func (sh *shellRequest) apply(r *schema.Request) error {
	switch {
	case sh.choice != nil:
		r.ToolChoice, r.ForcedChoice, r.LaterChoice = sh.choice, true, nil
	case sh.allowedChoice != nil:
		// The rewrite read the forcing of the rewritten choice; the answer echoes the client's.
		r.ToolChoice = sh.allowedChoice
	}
	switch {
	case sh.containerID != "" && r.ContainerID != "" && sh.containerID != r.ContainerID:
		return &schema.RequestError{
			Message: "The shell tool's container_reference and the code_interpreter tool's container name different containers; the tools of a request share one container.",
			Param:   "tools",
		}
	case sh.containerID != "":
		r.ContainerID = sh.containerID
	}
	if r.MemoryLimit == "" {
		r.MemoryLimit = sh.memoryLimit
	}
	if r.NetworkPolicy == nil {
		r.NetworkPolicy, r.NetworkPolicyParam = sh.networkPolicy, sh.networkParam
	}
	r.Skills, r.SkillsParam = sh.skills, sh.skillsParam
	for _, id := range sh.fileIDs {
		if len(r.FileIDs) < openai.MaxFileIDs && !slices.Contains(r.FileIDs, id) {
			r.FileIDs = append(r.FileIDs, id)
		}
	}
	r.ReplayedContainerIDs = append(r.ReplayedContainerIDs, sh.replayed...)
	return nil
}

// AnnounceSkills appends text, which names the skills mounted in the container, to the shell
// function's description in the body sent upstream, as OpenAI adds each skill's name,
// description and path to the model's context.
func (x *exchange) AnnounceSkills(text string) {
	rq := x.Request()
	desc := []byte(`"name":` + strconv.Quote(ShellFunctionName) + `,"description":` + strconv.Quote(shellDescription))
	i := bytes.Index(rq.Body, desc)
	if i < 0 {
		return
	}
	repl := []byte(`"name":` + strconv.Quote(ShellFunctionName) + `,"description":` + strconv.Quote(shellDescription+text))
	rq.Body = slices.Concat(rq.Body[:i], repl, rq.Body[i+len(desc):])
}
