// Package chat is OpenAI's Chat Completions surface (POST /v1/chat/completions): the rewrite of
// its requests, the reading of its answers' tool calls, its follow-up requests, its final
// answers, its chunk streams (the client's, written as the loop runs, and the upstream's,
// read as they arrive) and the replay of calls an answer left out.
package chat

import (
	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/schema/internal/jsonscan"
	"github.com/codeinterp/codeinterp/pkg/schema/internal/openai"
)

// dialect is what Chat Completions does its own way among OpenAI's surfaces.
var dialect = openai.Dialect{
	Spec:            &openai.RequestSpec,
	FieldsUnderType: true,
	ReadTurn:        turnReadChat,
	Extend: func(rq, rs jsonscan.TopLevel, outs []schema.CallOutput) ([]jsonscan.Edit, []openai.AddedMember, error) {
		edits, err := followUpChat(rq, rs, outs)
		return edits, nil, err
	},
	KeepStream: true,
	// The loop sums every round's usage, and a stream carries usage only when asked.
	StreamOptions: []byte(`{"include_usage":true}`),
}

// RewriteRequest rewrites a client request body for the upstream model: the code_interpreter
// tool becomes a function tool in the same position, a tool_choice naming it names the
// function, and stream:true stays with stream_options {"include_usage":true} instead of the
// client's (the upstream's answer streams through; the client's own stream_options still shape
// its stream, see [SSE]). Every other byte
// stays as the client sent it; a body without a code_interpreter tool comes back unchanged
// with Found false. See [openai.Dialect.RewriteRequest] for what is checked.
func RewriteRequest(body []byte, o schema.Options) (schema.Request, error) {
	return dialect.RewriteRequest(body, o)
}

// ParseTurn reads the calls of the function named functionName (empty means
// schema.DefaultFunctionName) among the tool_calls of choices[0].message (other choices are
// ignored). It returns an error only when body is not a JSON object.
func ParseTurn(body []byte, functionName string) (schema.Turn, error) {
	turn, _, err := dialect.ParseTurn(body, schema.Options{FunctionName: functionName}.Name())
	return turn, err
}

// FollowUp builds the next upstream request from the previous request body req, the model's
// answer resp, and the outputs of the calls run from it: messages + the assistant message of
// choices[0] (role, content, tool_calls and the other fields a request accepts; response-only
// fields are dropped) + one {"role":"tool","tool_call_id":…,"content":…} per output. See
// [openai.Dialect.FollowUp].
func FollowUp(req, resp []byte, outputs []schema.CallOutput, o schema.FollowUpOptions) ([]byte, error) {
	return dialect.FollowUp(req, resp, outputs, o)
}

// Final builds the body the client receives from all the loop's rounds: the last round's body
// with "usage" summed over all rounds. Tool calls of the internal function left in a message
// are removed; when none remain, "tool_calls" is dropped and a finish_reason of "tool_calls"
// becomes "stop". Chat has no slot for code_interpreter_call items, so none are added. It
// fails when there are no rounds or no function name, or a body is not a JSON object.
func Final(in schema.FinalInput) ([]byte, error) {
	views, err := openai.Views(in)
	if err != nil {
		return nil, err
	}
	return finalChat(in, views)
}
