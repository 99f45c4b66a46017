package schema

import (
	"strconv"
	"strings"
	"time"
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
	// RunTimeout is the wall-clock limit of one code run, which a surface may tell the model
	// (the Messages API's code_execution_20260521 does); zero means not told.
	RunTimeout time.Duration
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
	// NetworkPolicy is the tool's container.network_policy (or the shell tool's container_auto
	// environment's), raw, as sent, secrets included: for admission to parse
	// (package netpolicy); nil when there is none. NetworkPolicyParam names it in errors
	// ("tools[0].container.network_policy"). Tool no longer holds its secrets.
	NetworkPolicy      []byte
	NetworkPolicyParam string
	// Skills is the shell tool's container_auto environment's skills, the raw JSON array, as
	// sent: skill references and inline zips for admission to resolve and mount; nil when there
	// are none. SkillsParam names it in errors ("tools[0].environment.skills").
	Skills      []byte
	SkillsParam string
	// FileIDs are the tool's container.file_ids (at most 50, as natively, checked by the rewrite):
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
	// first, as the store remembered them; set by Continuation.Continue.
	ContextContainerIDs []string
	// CodeTools are the names of the client's tools the code may call (programmatic tool
	// calling): each is an async function of the container's Python, whose call pauses the run
	// and ends the loop's answer with the calls (CodeCall.ToolCalls). Empty when the surface
	// serves none: a call from code is then refused in the code.
	CodeTools []string
	// Resume, when set, is the request's answer to a paused run's calls of CodeTools: the run
	// is to be resumed with them before any model call. Set only by a surface that serves
	// programmatic tool calling (the Messages API's).
	Resume *Resume
	// PreviousResponseID is the Responses request's previous_response_id, and ConversationID its
	// conversation's id (the string, or the object's "id"): the earlier answer the request
	// continues from. They are read also when Found is false.
	PreviousResponseID, ConversationID string
	// Hibernate reports whether a container created for the request lives as the surface's
	// native containers do when idle: hibernated, restorable by its id for a lifetime, and
	// unknown once gone, rather than expired (sandbox.AcquireRequest.Hibernate; Anthropic's).
	// IDPrefix is the prefix of such a container's id; "" means the sandbox's "cntr_".
	Hibernate bool
	IDPrefix  string
}

// RenderCodeOutputs returns the text fed back to the model for a run's outputs: the logs as they
// are, in order, one per line, then one note for the images ([imagesNote]). Outputs of other
// types and empty logs are skipped; no outputs give "". The replay of a code_interpreter_call
// input item renders its outputs with it, and the loop renders the run it just made with
// [RenderRun], which it calls: the model reads the same text for the same run.
func RenderCodeOutputs(outs []CodeOutput) string {
	var logs strings.Builder
	images := 0
	for _, o := range outs {
		switch o.Type {
		case CodeOutputLogs:
			if o.Logs == "" {
				continue
			}
			if logs.Len() > 0 && !strings.HasSuffix(logs.String(), "\n") {
				logs.WriteByte('\n')
			}
			logs.WriteString(o.Logs)
		case CodeOutputImage:
			images++
		}
	}
	return RenderRun(logs.String(), images)
}

// RenderRun returns the text fed back to the model for a run whose logs are logs and which
// showed images images: the logs, then, on a line of their own, [imagesNote]. A run without
// logs or images gives "".
func RenderRun(logs string, images int) string {
	if images == 0 {
		return logs
	}
	if logs == "" {
		return imagesNote(images)
	}
	if !strings.HasSuffix(logs, "\n") {
		logs += "\n"
	}
	return logs + imagesNote(images)
}

// imagesNote stands for a run's n images in the text fed back to the model:
// "[1 image was shown to the user]", "[2 images were shown to the user]".
func imagesNote(n int) string {
	if n == 1 {
		return "[1 image was shown to the user]"
	}
	return "[" + strconv.Itoa(n) + " images were shown to the user]"
}

// SkillsAnnouncer is an Exchange whose model is told of the skills mounted in its container.
// Admission calls AnnounceSkills with the text naming them (each skill's name, description and
// the path of its SKILL.md) after the rewrite: the exchange puts it where natively it would be
// (for the Responses shell tool, its function's description) in Request().Body.
type SkillsAnnouncer interface {
	AnnounceSkills(text string)
}
