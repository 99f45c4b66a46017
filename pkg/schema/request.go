package schema

import (
	"strings"

	"github.com/codeinterp/codeinterp/pkg/schema/internal/jsonscan"
)

// DefaultFunctionName is the name of the function tool the code_interpreter tool becomes when
// [Options.FunctionName] is empty.
const DefaultFunctionName = "code_interpreter"

// DefaultFunctionDescription describes the function tool to the model when
// [Options.FunctionDescription] is empty.
const DefaultFunctionDescription = "Run Python 3 code in a stateful sandbox, like a Jupyter notebook: " +
	"variables, imports and definitions persist between calls. numpy, pandas and matplotlib are installed. " +
	"Files in /mnt/data persist between calls; save files you create there. There is no internet access. " +
	"Print what you want to see: the output shows what the code printed and the value of the last " +
	"expression, and matplotlib figures are captured and shown as images."

// MaxFileIDs bounds the container.file_ids of a code_interpreter tool, as natively.
const MaxFileIDs = 50

// IncludeCodeOutputs is the include value that asks for the outputs of code_interpreter_call
// items.
const IncludeCodeOutputs = "code_interpreter_call.outputs"

// OutputImageNote stands for one image output in the text fed back to the model.
const OutputImageNote = "[image]"

// Options tunes the function tool the code_interpreter tool becomes. The zero value uses the
// defaults.
type Options struct {
	// FunctionName is the function's name; empty means DefaultFunctionName.
	FunctionName string
	// FunctionDescription is the function's description; empty means DefaultFunctionDescription.
	FunctionDescription string
	// WholeFirst asks the upstream for a whole answer on the first call even when the client
	// streams: the client's stream is replayed after the loop, where a streamed first answer
	// would only be larger.
	WholeFirst bool
}

func (o Options) Name() string {
	if o.FunctionName == "" {
		return DefaultFunctionName
	}
	return o.FunctionName
}

func (o Options) Description() string {
	if o.FunctionDescription == "" {
		return DefaultFunctionDescription
	}
	return o.FunctionDescription
}

// Request is what RewriteRequest learned and produced. When Found is false only Body is set.
type Request struct {
	// Body is the body to send upstream; it is the input itself when Found is false.
	Body []byte
	// Found reports whether a code_interpreter tool was present and rewritten.
	Found bool
	// Tool is the client's code_interpreter tool object, raw.
	Tool []byte
	// ContainerID is the tool's container when it is a string id (for example "cntr_…").
	ContainerID string
	// MemoryLimit is the tool's container.memory_limit when set.
	MemoryLimit string
	// FileIDs are the tool's container.file_ids (at most MaxFileIDs, checked by the rewrite):
	// the Files API files to copy into the container before the code runs.
	FileIDs []string
	// IncludeOutputs reports whether the request's include names
	// "code_interpreter_call.outputs": the answer's code_interpreter_call items carry their
	// outputs only then, and "outputs": null otherwise, as natively (Responses).
	IncludeOutputs bool
	// ToolChoice is the client's tool_choice, raw, as sent (Body may have it rewritten); nil when
	// the request has none.
	ToolChoice []byte
	// ForcedChoice reports whether the upstream tool_choice forces a tool call ("required", our
	// function by name, or allowed_tools with mode "required"); it applies to the first round
	// only, and later rounds send LaterChoice instead.
	ForcedChoice bool
	// LaterChoice is, when ForcedChoice is set, the upstream tool_choice for the rounds after the
	// first: allowed_tools with mode "auto" (the client's restriction kept, the forcing dropped),
	// or nil to remove tool_choice (the API's default, "auto").
	LaterChoice []byte
	// Stream reports whether the client asked for stream:true (Body has stream:false).
	Stream bool
	// StreamOptions is the client's stream_options, raw, which Body no longer has; nil when absent
	// or null.
	StreamOptions []byte
	// SessionID is metadata.session_id when it is a string; Body keeps it.
	SessionID string
	// ReplayedContainerIDs holds the container_id of each replayed code_interpreter_call input
	// item that has one, in input order.
	ReplayedContainerIDs []string
	// ContextContainerIDs are the containers the code_interpreter_call items of the earlier
	// answers the request continues from (previous_response_id, conversation) ran in, oldest
	// first, as the store remembered them; set by Exchange.Continue.
	ContextContainerIDs []string
	// PreviousResponseID is the Responses request's previous_response_id, and ConversationID its
	// conversation's id (the string, or the object's "id"): the earlier answer the request
	// continues from. They are read also when Found is false.
	PreviousResponseID, ConversationID string
}

// RenderOutputs returns the text fed back to the model for the outputs of a code_interpreter_call
// item, given as the raw JSON of its "outputs" value: an array of {"type":"logs","logs":…} and
// {"type":"image","url":…} entries. It renders them as [RenderCodeOutputs] does; null, an empty
// array or anything that is not a JSON array gives "".
func RenderOutputs(outputs []byte) string {
	if _, _, err := jsonscan.ScanTop(outputs); err != nil {
		return ""
	}
	st := jsonscan.SkipWS(outputs, 0)
	if outputs[st] != '[' {
		return ""
	}
	var outs []CodeOutput
	jsonscan.EachElem(outputs, st, func(_, es, _ int) bool {
		if outputs[es] != '{' {
			return true
		}
		var o CodeOutput
		o.Type, _ = jsonscan.Str(outputs, jsonscan.Field(outputs, es, "type"))
		o.Logs, _ = jsonscan.Str(outputs, jsonscan.Field(outputs, es, "logs"))
		outs = append(outs, o)
		return true
	})
	return RenderCodeOutputs(outs)
}

// RenderCodeOutputs returns the text fed back to the model for a run's outputs: the logs as they
// are and each image as [OutputImageNote], in order, one per line. Outputs of other types and
// empty logs are skipped; no outputs give "". The loop and the replay of code_interpreter_call
// input items both use it, so the model reads the same text for the same run.
func RenderCodeOutputs(outs []CodeOutput) string {
	var sb strings.Builder
	add := func(s string) {
		if sb.Len() > 0 && !strings.HasSuffix(sb.String(), "\n") {
			sb.WriteByte('\n')
		}
		sb.WriteString(s)
	}
	for _, o := range outs {
		switch o.Type {
		case CodeOutputLogs:
			if o.Logs != "" {
				add(o.Logs)
			}
		case CodeOutputImage:
			add(OutputImageNote)
		}
	}
	return sb.String()
}
