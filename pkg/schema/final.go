package schema

import (
	"fmt"

	"github.com/codeinterp/codeinterp/pkg/schema/internal/jsonscan"
)

// Output types of a [CodeOutput].
const (
	// CodeOutputLogs is the type of a text output: {"type":"logs","logs":…}.
	CodeOutputLogs = "logs"
	// CodeOutputImage is the type of an image output: {"type":"image","url":…}.
	CodeOutputImage = "image"
)

// CodeCall is one code_interpreter_call output item: one run of the model's code in the
// sandbox, in the shape the native tool returns it. Its zero value renders as an item with
// empty strings and "outputs": [].
type CodeCall struct {
	// ID is the item's id ("ci_…").
	ID string
	// Status is "completed", "failed" or "incomplete"; it is rendered as given.
	Status string
	// Code is the Python source that was run.
	Code string
	// ContainerID is the id of the container the code ran in ("cntr_…").
	ContainerID string
	// Outputs are the run's logs and images. They are rendered as an array, [] when empty;
	// AppendItem without outputs renders null instead.
	Outputs []CodeOutput
	// Run is what the code's run gave, its streams apart, for the surfaces whose result shows
	// stdout, stderr and the return code separately (Messages); nil when the code did not run
	// to a result. It is not part of the item's JSON.
	Run *CodeRun
	// Files are the files under /mnt/data the code created or changed, by path, as container
	// files the surfaces can name (citations, *_output entries). They are not part of the
	// item's JSON.
	Files []CodeFile
}

// CodeFile is a file under /mnt/data a call's code created or changed: a container file.
type CodeFile struct {
	// ID is the container file's id ("cfile_…").
	ID string
	// Path is its absolute path in the container, for example "/mnt/data/chart.png".
	Path string
	// Bytes is its size.
	Bytes int64
}

// CodeRun is one run's result as a script's: what it wrote to each stream, and how it ended.
type CodeRun struct {
	// Stdout is what the code printed, with the value of its last expression, if any, on its
	// own line at the end (as a notebook shows it). It is capped as the logs are.
	Stdout string
	// Stderr is what the code wrote to stderr, followed by the traceback of an exception it
	// raised. It is capped as the logs are.
	Stderr string
	// ReturnCode is 1 when the code raised, else 0.
	ReturnCode int
	// TimedOut reports whether the run was interrupted at its time limit; Stdout and Stderr
	// are then what it wrote before.
	TimedOut bool
}

// CodeOutput is one output of a [CodeCall]: {"type":"logs","logs":…} or
// {"type":"image","url":"data:image/png;base64,…"}.
type CodeOutput struct {
	// Type is [CodeOutputLogs] or [CodeOutputImage].
	Type string
	// Logs is the text of a logs output.
	Logs string
	// URL is the image of an image output, usually a data: URL.
	URL string
}

// MarshalJSON renders exactly the native keys in the native order:
// {"id","type":"code_interpreter_call","status","code","container_id","outputs"}, each output
// with only its own keys ({"type","logs"} or {"type","url"}). It fails on an output of another
// type.
func (c CodeCall) MarshalJSON() ([]byte, error) {
	return c.AppendJSON(make([]byte, 0, 128+len(c.Code)))
}

// AppendJSON appends the item's JSON, as MarshalJSON renders it, to dst.
func (c CodeCall) AppendJSON(dst []byte) ([]byte, error) { return c.AppendItem(dst, true) }

// AppendItem appends the item's JSON to dst, with its outputs when outputs is set and with
// "outputs": null otherwise (a request whose include does not ask for them).
func (c CodeCall) AppendItem(dst []byte, outputs bool) ([]byte, error) {
	dst = append(dst, `{"id":`...)
	dst = jsonscan.AppendString(dst, c.ID)
	dst = append(dst, `,"type":"code_interpreter_call","status":`...)
	dst = jsonscan.AppendString(dst, c.Status)
	dst = append(dst, `,"code":`...)
	dst = jsonscan.AppendString(dst, c.Code)
	dst = append(dst, `,"container_id":`...)
	dst = jsonscan.AppendString(dst, c.ContainerID)
	if !outputs {
		return append(dst, `,"outputs":null}`...), nil
	}
	dst = append(dst, `,"outputs":[`...)
	for i, o := range c.Outputs {
		if i > 0 {
			dst = append(dst, ',')
		}
		switch o.Type {
		case CodeOutputLogs:
			dst = append(dst, `{"type":"logs","logs":`...)
			dst = jsonscan.AppendString(dst, o.Logs)
		case CodeOutputImage:
			dst = append(dst, `{"type":"image","url":`...)
			dst = jsonscan.AppendString(dst, o.URL)
		default:
			return nil, fmt.Errorf("marshal code_interpreter_call %q: output %d has unknown type %q", c.ID, i, o.Type)
		}
		dst = append(dst, '}')
	}
	return append(dst, "]}"...), nil
}

// Round is one upstream round of the loop.
type Round struct {
	// Body is the upstream answer of this round: a complete, non-streaming JSON body.
	Body []byte
	// Calls are the calls run from this round's internal function calls, one for each, in the
	// order of those calls; none when the loop did not run them.
	Calls []CodeCall
}

// FinalInput is everything a surface's Final needs to build the answer the client receives.
type FinalInput struct {
	// Rounds are the loop's upstream rounds in chronological order; the last is the model's
	// final answer.
	Rounds []Round
	// FunctionName is the name of the internal function the code_interpreter tool was
	// rewritten into.
	FunctionName string
	// Tool is the client's original code_interpreter tool object, echoed in "tools" where the
	// internal function tool was (Responses). Nil removes the function tool instead.
	Tool []byte
	// ToolChoice is the client's original tool_choice, echoed in "tool_choice" (Responses): the
	// upstream saw a rewritten one, and later rounds may have relaxed it or set "none". Nil means
	// the client sent none, and the API's default "auto" is echoed.
	ToolChoice []byte
	// NullOutputs renders every code_interpreter_call item with "outputs": null (Responses: the
	// request's include did not ask for them); the zero value renders them.
	NullOutputs bool
}
