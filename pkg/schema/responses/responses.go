// Package responses is OpenAI's Responses API surface (POST /v1/responses): the rewrite of its
// requests, the reading of its answers' function calls, its follow-up requests, its final
// answers with code_interpreter_call items (and shell_call and shell_call_output items for the
// hosted shell tool, see shell.go), its event streams and its continuations
// (previous_response_id, conversations).
package responses

import (
	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/schema/internal/jsonscan"
	"github.com/codeinterp/codeinterp/pkg/schema/internal/openai"
)

// dialect is what the Responses API does its own way among OpenAI's surfaces.
var dialect = openai.Dialect{
	Spec:         &jsonscan.Spec{Strict: openai.RequestSpec.Strict, Items: "input", ItemType: "code_interpreter_call"},
	Previous:     "previous_response_id",
	Conversation: "conversation",
	Rewrite:      rewriteReplays,
	ReadTurn:     turnReadResponses,
	Extend:       followUpResponses,
	KeepStream:   true,
}

// shellDialect is dialect for a request with the hosted shell tool, which rewriteShell rewrote
// first: the request is served also without a code_interpreter tool, and the calls of the shell
// function are read too.
var shellDialect = func() openai.Dialect {
	d := dialect
	d.OwnHosted = true
	d.ReadTurn = turnReadShell
	return d
}()

// RewriteRequest rewrites a client request body for the upstream model: the code_interpreter
// tool becomes a function tool in the same position, a tool_choice naming it names the
// function, stream:true stays (the upstream's answer streams through) without stream_options, and replayed
// code_interpreter_call input items become function_call and function_call_output pairs.
// Every other byte stays as the client sent it. A body without a code_interpreter tool comes
// back unchanged with Found false; previous_response_id and the conversation are read either
// way. See [openai.Dialect.RewriteRequest] for what is checked. The hosted shell tool is
// rewritten by [Surface.NewExchange] only.
func RewriteRequest(body []byte, o schema.Options) (schema.Request, error) {
	return dialect.RewriteRequest(body, o)
}

// rewriteReplays returns the edits that turn the replayed code_interpreter_call items of the
// input into function call pairs, and their container ids.
func rewriteReplays(t jsonscan.TopLevel, items []jsonscan.Item, name string) ([]jsonscan.Edit, []string) {
	sp := t.Span("input")
	if !sp.OK() || t.B[sp.Start] != '[' {
		return nil, nil
	}
	return reqReplayInput(t.B, sp, items, name)
}

// ParseTurn reads the calls of the function named functionName (empty means
// schema.DefaultFunctionName) among the items of an answer's "output". It returns an error
// only when body is not a JSON object.
func ParseTurn(body []byte, functionName string) (schema.Turn, error) {
	turn, _, err := dialect.ParseTurn(body, schema.Options{FunctionName: functionName}.Name())
	return turn, err
}

// FollowUp builds the next upstream request from the previous request body req (what was last
// sent upstream), the model's answer resp, and the outputs of the calls run from it: input (a
// string becomes [{"role":"user","content":s}], an absent input an empty list) + every item of
// resp.output in order (reasoning items, messages, the function calls) + one
// function_call_output per output. Two exceptions: with store:false a reasoning item without
// encrypted_content is left out (the upstream kept no copy to resolve it by id), and when req
// names a conversation, input becomes the function_call_outputs alone (the conversation
// already holds the earlier input and resp.output). See [openai.Dialect.FollowUp].
func FollowUp(req, resp []byte, outputs []schema.CallOutput, o schema.FollowUpOptions) ([]byte, error) {
	return dialect.FollowUp(req, resp, outputs, o)
}

// Final builds the body the client receives from all the loop's rounds: exactly what the
// native API would have returned.
//
// The last round's body, byte for byte except where it must change. Its "output" is the
// concatenation, round by round, of each round's output items, where every function_call item
// of the internal function is replaced in place by the round's [schema.CodeCall] at the same
// position among those calls, or removed when the round has none (the loop did not run them).
// The client's own function calls, messages and reasoning items stay where they were. "usage"
// is the sum of all rounds' usage (every numeric leaf at the same path). In "tools" the
// internal function tool is replaced by in.Tool; "tool_choice" is set to in.ToolChoice (the
// client's), or to the API's default "auto" when the client sent none.
//
// Final fails when there are no rounds or no function name, when a body is not a JSON object
// or its output not an array, when a round has calls but not one for each of its internal
// function calls, and when a CodeCall has an output of unknown type. It does not modify in,
// and the body it returns shares no memory with it.
func Final(in schema.FinalInput) ([]byte, error) {
	views, err := openai.Views(in)
	if err != nil {
		return nil, err
	}
	return finalResponses(in, views, nil)
}
