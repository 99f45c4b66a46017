package schema

import (
	"encoding/json"
	"net/http"
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
func ErrorBody(e *RequestError) []byte {
	return errorJSON(e.Message, errorType(e.HTTPStatus()), e.Param, e.Code)
}

// ServerErrorBody returns the JSON error body for a failure that is not the client's: status
// picks the error type (for example "server_error" for 5xx), code may be empty.
func ServerErrorBody(status int, message, code string) []byte {
	return errorJSON(message, errorType(status), "", code)
}

func errorJSON(message, typ, param, code string) []byte {
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

// errorType maps a status to OpenAI's error type names.
func errorType(status int) string {
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
