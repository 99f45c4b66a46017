// Package messages is the Anthropic Messages API surface (POST /v1/messages): it turns the
// server tool code_execution into ordinary tools any Messages-compatible model can call, reads
// the model's calls of them, builds the follow-up turns, and assembles the answer the native API
// gives — server_tool_use blocks each followed by its *_tool_result block, the top-level
// container, usage summed over the rounds — as JSON or as the native event stream.
//
// Tool versions: code_execution_20250522 (Python only) becomes one tool, code_execution
// {code}; code_execution_20250825 becomes the two tools the native one exposes,
// bash_code_execution {command} and text_editor_code_execution {command: view|create|
// str_replace, path, file_text?, old_str?, new_str?}; code_execution_20260120 and _20260521 (the
// REPL-state versions) become the three: code_execution {code} beside bash and the text editor.
// Their Python runs in the container's one Python process, whose variables and imports persist
// across calls and across the requests that name the same container; _20260521's description
// tells the model the per-cell time limit. Every server_tool_use and, with the REPL-state
// versions, every tool_use block the client gets carries a caller, as natively.
//
// A client that asks for a stream gets the native event stream as the loop goes: each code call's
// server_tool_use when it starts, its result block when it ends, the model's text as each round
// ends, or delta by delta when the round's answer streams: the loop's follow-ups for such a client
// ask the upstream for a stream, which is read as it arrives (see upstreamStream).
//
// bash keeps a shell session per container: what a command leaves (working directory, variables,
// functions) is kept by the container's interpreter and restored for the next command.
//
// Every function takes and returns bytes and edits them by splicing: what it does not need to
// change stays as the client sent it. Everything here is safe for concurrent use, but for an
// Exchange, which one request uses at a time.
package messages

import (
	"encoding/json"
	"net/http"
	"strings"
)

// The tool versions of code_execution.
const (
	Version20250522 = "code_execution_20250522"
	Version20250825 = "code_execution_20250825"
	Version20260120 = "code_execution_20260120"
	Version20260521 = "code_execution_20260521"
)

// Kind is what a call of one of the tools asks for.
type Kind int

const (
	// Python runs Python code ({code}); the legacy tool's one call.
	Python Kind = iota + 1
	// Bash runs a shell command ({command}) in the container.
	Bash
	// Editor views, creates or edits a file ({command, path, ...}).
	Editor
)

// nativeName is the server tool name the client sees for a kind.
func (k Kind) nativeName() string {
	switch k {
	case Python:
		return "code_execution"
	case Bash:
		return "bash_code_execution"
	default:
		return "text_editor_code_execution"
	}
}

// resultType is the type of the result block that follows a kind's server_tool_use.
func (k Kind) resultType() string { return k.nativeName() + "_tool_result" }

// Names are the names of the tools the model sees, by kind. The zero value uses the native
// names (code_execution, bash_code_execution, text_editor_code_execution).
type Names struct {
	Python, Bash, Editor string
}

func (n Names) withDefaults() Names {
	if n.Python == "" {
		n.Python = Python.nativeName()
	}
	if n.Bash == "" {
		n.Bash = Bash.nativeName()
	}
	if n.Editor == "" {
		n.Editor = Editor.nativeName()
	}
	return n
}

// kindOf returns the kind of an internal tool name, or 0.
func (n Names) kindOf(name string, version string) Kind {
	if name == n.Python && (version == Version20250522 || replState(version)) {
		return Python
	}
	if version == Version20250522 {
		return 0
	}
	switch name {
	case n.Bash:
		return Bash
	case n.Editor:
		return Editor
	}
	return 0
}

// RequestError is a mistake in the client's request, answered with Status and [ErrorBody].
type RequestError struct {
	// Status is the HTTP status; zero means 400.
	Status int
	// Message is what the client reads.
	Message string
}

func (e *RequestError) Error() string { return "invalid request: " + e.Message }

// HTTPStatus returns the status the error is answered with.
func (e *RequestError) HTTPStatus() int {
	if e.Status == 0 {
		return http.StatusBadRequest
	}
	return e.Status
}

func badRequest(format string, args ...any) *RequestError {
	return &RequestError{Message: sprintf(format, args...)}
}

// errorTypes maps an HTTP status to the Messages API's error type.
var errorTypes = map[int]string{
	400: "invalid_request_error",
	401: "authentication_error",
	403: "permission_error",
	404: "not_found_error",
	413: "request_too_large",
	429: "rate_limit_error",
	500: "api_error",
	502: "api_error",
	503: "api_error",
	504: "api_error",
	529: "overloaded_error",
}

// ErrorBody is the Messages API's error body for status: {"type":"error","error":{"type",
// "message"}}.
func ErrorBody(status int, message string) []byte {
	typ, ok := errorTypes[status]
	if !ok {
		typ = "api_error"
		if status >= 400 && status < 500 {
			typ = "invalid_request_error"
		}
	}
	return ErrorBodyOf(typ, message)
}

// ErrorBodyOf is the Messages API's error body of an error type and message.
func ErrorBodyOf(typ, message string) []byte {
	js, _ := json.Marshal(map[string]any{"type": "error", "error": map[string]string{"type": typ, "message": message}})
	return js
}

// isCodeExecution reports whether a tool type is one of the code_execution versions.
func isCodeExecution(typ string) bool {
	switch typ {
	case Version20250522, Version20250825, Version20260120, Version20260521:
		return true
	}
	return strings.HasPrefix(typ, "code_execution_")
}
