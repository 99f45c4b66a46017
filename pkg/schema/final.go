package schema

import (
	"crypto/rand"
	"encoding/hex"
)

// Statuses of a [CodeCall], in the order a call goes through them.
const (
	// CodeCallInProgress is a call the model is still writing, or whose run has not started.
	CodeCallInProgress = "in_progress"
	// CodeCallCompleted is a call whose code ran to its end.
	CodeCallCompleted = "completed"
	// CodeCallFailed is a call whose code could not run, or raised.
	CodeCallFailed = "failed"
	// CodeCallIncomplete is a call whose run was cut short (its time limit, the loop's deadline).
	CodeCallIncomplete = "incomplete"
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
	// Status is [CodeCallCompleted], [CodeCallFailed] or [CodeCallIncomplete] (or, while the
	// call streams, [CodeCallInProgress]); it is rendered as given.
	Status string
	// Code is the Python source that was run.
	Code string
	// ContainerID is the id of the container the code ran in ("cntr_…").
	ContainerID string
	// Outputs are the run's logs and images. They are rendered as an array, [] when empty, or
	// as null when the request does not ask for them.
	Outputs []CodeOutput
	// Run is what the code's run gave, its streams apart, for the surfaces whose result shows
	// stdout, stderr and the return code separately (Messages); nil when the code did not run
	// to a result. It is not part of the item's JSON.
	Run *CodeRun
	// Files are the files under /mnt/data the code created or changed, by path, as container
	// files the surfaces can name (citations, *_output entries). They are not part of the
	// item's JSON.
	Files []CodeFile
	// ToolCalls, when set, are the calls of the client's tools (Request.CodeTools) the code is
	// paused on: the run has no result yet, its Status is [CodeCallInProgress], and the answer
	// asks the client for the calls' results (programmatic tool calling). They are not part of
	// the item's JSON.
	ToolCalls []ToolCall
}

// ToolCall is a call of one of the client's tools made by paused code.
type ToolCall struct {
	// ID is the call's id as the client sees it ("toolu_…").
	ID string
	// Name is the tool's name.
	Name string
	// Input is the call's input, a JSON object's text.
	Input string
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

// NewItemID returns a new item id: prefix ("ci_") followed by 48 random hex digits, the length
// of OpenAI's item ids. It is safe for concurrent use.
func NewItemID(prefix string) string {
	b := make([]byte, 24)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return prefix + hex.EncodeToString(b)
}

// Resume is a request's answer to the calls of the client's tools that a paused run made
// (CodeCall.ToolCalls of an earlier answer): the run to resume and the calls' results.
type Resume struct {
	// CellID is the call id of the paused run's code call, as the model made it ("toolu_…").
	CellID string
	// Results are the calls' results, in the order of the calls.
	Results []ToolResult
	// Turn stands for the model's answer that made the paused run's call: a body the
	// exchange's ParseTurn reads as that one call (its CallID the one the request's history
	// gives the call). The loop takes it as its round 0, whose call it resumes instead of
	// running, and the exchange shows of that round only the call's result, or its new pause.
	Turn []byte
	// Gone is the client's error message when the paused run is no longer there to resume (it
	// ended, its pause was abandoned past its bound, or its container is gone): the request
	// is refused with it, a 400, before any model call.
	Gone string
}

// ToolResult is the client's result of one ToolCall.
type ToolResult struct {
	// CallID is the call's id ("toolu_…").
	CallID string
	// Content is what the call returns to the code.
	Content string
	// IsError makes the call raise an error in the code instead.
	IsError bool
}
