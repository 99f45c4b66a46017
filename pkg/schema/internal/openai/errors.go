package openai

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/codeinterp/codeinterp/pkg/schema"

	"github.com/tidwall/gjson"
)

// apiError is OpenAI's error object, the same on the Responses and Chat Completions surfaces.
type apiError struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// ErrorBody returns the JSON error body for e:
// {"error":{"message":…,"type":"invalid_request_error","param":…,"code":…}}.
func ErrorBody(e *schema.RequestError) []byte {
	return ErrorJSON(e.Message, ErrorType(e.HTTPStatus()), e.Param, e.Code)
}

// ServerErrorBody returns the JSON error body for a failure that is not the client's: status
// picks the error type (for example "server_error" for 5xx), code may be empty.
func ServerErrorBody(status int, message, code string) []byte {
	return ErrorJSON(message, ErrorType(status), "", code)
}

func ErrorJSON(message, typ, param, code string) []byte {
	e := apiError{Message: message, Type: typ}
	if param != "" {
		e.Param = &param
	}
	if code != "" {
		e.Code = &code
	}
	b, err := json.Marshal(struct {
		Error apiError `json:"error"`
	}{e})
	if err != nil {
		// Marshalling strings cannot fail.
		panic(err)
	}
	return b
}

// ErrorType maps a status to OpenAI's error type names.
func ErrorType(status int) string {
	switch {
	case status == http.StatusUnauthorized:
		return "authentication_error"
	case status == http.StatusForbidden:
		return "permission_error"
	case status == http.StatusNotFound:
		return "not_found_error"
	case status == http.StatusTooManyRequests:
		return "rate_limit_error"
	case status >= 500:
		return "server_error"
	default:
		return "invalid_request_error"
	}
}

// UpstreamErrorBody returns the body the client gets for an upstream error answer with status: the
// upstream's own body when it already is an API error object ({"error":{…}}), else an error in the
// API's shape that quotes the start of what the upstream said.
func UpstreamErrorBody(status int, body []byte) []byte {
	if gjson.ValidBytes(body) && gjson.GetBytes(body, "error").IsObject() {
		return body
	}
	return ErrorJSON(schema.UpstreamErrorMessage(status, body), ErrorType(status), "", "upstream_error")
}

// ErrorFields returns the code and message of an API error body ({"error":{"code","message"}}); a
// missing code is "server_error".
func ErrorFields(body []byte) (code, message string) {
	e := gjson.GetBytes(body, "error")
	code = e.Get("code").String()
	if code == "" {
		code = "server_error"
	}
	message = e.Get("message").String()
	if message == "" {
		message = strings.TrimSpace(string(body))
	}
	return code, message
}
