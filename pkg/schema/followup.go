package schema

import (
	"errors"
)

// CallOutput is the text fed back to the model for one call.
type CallOutput struct {
	// CallID is the call's [Call.CallID].
	CallID string
	// Output is the text the model reads as the call's result.
	Output string
}

// FollowUpOptions tunes FollowUp. The zero value uses DefaultFunctionName and keeps tool_choice.
type FollowUpOptions struct {
	// FunctionName is the function's name; empty means DefaultFunctionName.
	FunctionName string
	// DropToolChoice removes tool_choice: a forced choice applies to the first round only.
	DropToolChoice bool
	// ToolChoice, when non-nil, is the raw tool_choice to send instead (for example a forced
	// allowed_tools relaxed to mode "auto"); it wins over DropToolChoice.
	ToolChoice []byte
	// ToolChoiceNone sets tool_choice to "none" (the loop's last round, so the model must answer
	// in text); it wins over the other two.
	ToolChoiceNone bool
	// Stream sets stream to true: the upstream answers with an event stream, which only an
	// Exchange that is a [StreamReader] can read.
	Stream bool
}

// ErrRewriteTooLarge is returned by a rewrite that would add more bytes to a request than its
// limit allows; the request is then left as it was.
var ErrRewriteTooLarge = errors.New("the rewrite would add more than its limit to the request")
