// Package schema holds what the LLM API surfaces codeinterp serves share: the Surface and
// Exchange interfaces a request is served through, the neutral types the loop and the surfaces
// pass each other (Request, Turn, Call, CallOutput, CodeCall, Round, Event), the text a run's
// outputs become for the model (RenderRun, RenderCodeOutputs), and the reading of an upstream
// event stream. Each surface is a package below it: responses and chat (OpenAI's Responses and
// Chat Completions, which share internal/openai) and messages (Anthropic's Messages); they
// detect the hosted tool, rewrite it into a function tool, read the model's calls of that
// function, build follow-up requests, and assemble the final answer (JSON or SSE) in the shape
// the native API returns. internal/jsonscan is the byte-level JSON scanner they edit bodies
// with, sse the bounded event-stream reader.
//
// Bodies are taken and returned as bytes and edited by splicing, leaving every byte that need
// not change as the client sent it. Nothing here knows about gRPC, Envoy or the network.
//
// How much of a request is checked: the OpenAI surfaces' RewriteRequest (and FollowUp, on the
// request it extends) fully checks the JSON it reads or changes — the top-level keys, tools,
// tool_choice, stream, stream_options, metadata and replayed code_interpreter_call items — and
// checks the structure of everything else (brackets, commas, colons, quoted keys, numbers,
// literals, terminated strings, nesting depth). Inside other strings (the conversation text,
// instructions, ...) it only looks for the closing quote, so a raw control character or a
// malformed escape there is left for the upstream API to refuse with its own 400. On valid JSON
// it sees exactly what a JSON parser sees.
package schema

import (
	"fmt"
	"net/http"
	"strings"
)

// RequestError is a mistake in the client's request. It becomes an HTTP answer in the API's
// error shape, with Status and a JSON body from [ErrorBody].
type RequestError struct {
	// Status is the HTTP status to answer with; zero means 400.
	Status int
	// Message is the human-readable explanation sent to the client.
	Message string
	// Param names the offending request field (for example "tools[2].name"), or is empty.
	Param string
	// Code is a short machine-readable code (for example "invalid_json"), or is empty.
	Code string
}

func (e *RequestError) Error() string {
	if e.Param != "" {
		return fmt.Sprintf("invalid request: %s (param %s)", e.Message, e.Param)
	}
	return "invalid request: " + e.Message
}

// HTTPStatus returns the status the error is answered with.
func (e *RequestError) HTTPStatus() int {
	if e.Status == 0 {
		return http.StatusBadRequest
	}
	return e.Status
}

// UpstreamErrorMessage is the message of the error answer a client gets for an upstream error
// answer with status and body that is not an error object of the surface's own shape: it names
// the status and quotes the start of what the upstream said (at most 512 bytes, valid UTF-8).
func UpstreamErrorMessage(status int, body []byte) string {
	snippet := strings.TrimSpace(string(body))
	if len(snippet) > 512 {
		snippet = strings.ToValidUTF8(snippet[:512], "") + "…"
	}
	msg := fmt.Sprintf("The model's upstream answered %d %s.", status, http.StatusText(status))
	if snippet != "" {
		msg += " It said: " + snippet
	}
	return msg
}
