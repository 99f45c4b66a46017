package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"sync"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/test/e2e/fakemodel"
)

// Paths the fake model serves (the analyst route rewrites its prefix to /v1/).
const (
	responsesPath = "/v1/responses"
	chatPath      = "/v1/chat/completions"
)

// model is the test's model used for the loop scenarios: a script of answers per path, each
// built from the request it answers, as a real model's answer echoes the request's tools,
// tool_choice, metadata and parallel_tool_calls (fakemodel's static answers always echo
// "tools": [], which would hide whether the client sees its code_interpreter tool echoed).
// It answers through fakemodel's handlers, so fakemodel still records every request; answers
// queued with Enqueue go first.
type model struct {
	*fakemodel.Server
	t *testing.T

	// mu guards queue.
	mu    sync.Mutex
	queue map[string][]reply
}

// reply builds one answer from the request and its body. It runs on the model's handler
// goroutine: it must not call t.Fatal.
type reply func(r *http.Request, body []byte) (status int, answer any)

func newModel(t *testing.T, s *fakemodel.Server) *model {
	m := &model{Server: s, t: t, queue: map[string][]reply{}}
	for _, p := range []string{responsesPath, chatPath} {
		s.Handle(p, m.serve)
	}
	return m
}

// script queues answers for path.
func (m *model) script(path string, rs ...reply) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.queue[path] = append(m.queue[path], rs...)
}

// clear drops the scripted answers not used yet.
func (m *model) clear() {
	m.mu.Lock()
	defer m.mu.Unlock()
	clear(m.queue)
}

// pending returns how many scripted answers were not used.
func (m *model) pending() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, q := range m.queue {
		n += len(q)
	}
	return n
}

// since returns the requests the model received after the first n.
func (m *model) since(n int) []fakemodel.Request {
	reqs := m.Requests()
	if n > len(reqs) {
		return nil
	}
	return reqs[n:]
}

func (m *model) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	m.mu.Lock()
	var next reply
	if q := m.queue[r.URL.Path]; len(q) > 0 {
		next, m.queue[r.URL.Path] = q[0], q[1:]
	}
	m.mu.Unlock()
	status, answer := http.StatusInternalServerError, any(errorJSON("e2e model: no scripted answer for "+r.URL.Path))
	if next != nil {
		status, answer = next(r, body)
	}
	b, err := json.Marshal(answer)
	if err != nil {
		m.t.Errorf("e2e model: marshal the answer to %s: %v", r.URL.Path, err)
		status, b = http.StatusInternalServerError, []byte(`{}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

func errorJSON(message string) map[string]any {
	return map[string]any{"error": map[string]any{
		"message": message, "type": "server_error", "param": nil, "code": nil,
	}}
}

// testModel is the model name every scenario asks for.
const testModel = "gpt-e2e"

// responsesReply answers a Responses request with the items, echoing the request's tools,
// tool_choice, metadata and parallel_tool_calls as the API does.
func responsesReply(usage fakemodel.Usage, items ...fakemodel.Item) reply {
	return func(_ *http.Request, req []byte) (int, any) {
		r := fakemodel.Responses(testModel, usage, items...)
		for _, k := range []string{"tools", "tool_choice", "metadata", "parallel_tool_calls"} {
			if v := gjson.GetBytes(req, k); v.Exists() {
				r[k] = json.RawMessage(v.Raw)
			}
		}
		return http.StatusOK, r
	}
}

// chatReply answers a Chat Completions request.
func chatReply(usage fakemodel.Usage, text string, calls ...fakemodel.ToolCall) reply {
	return func(*http.Request, []byte) (int, any) {
		return http.StatusOK, fakemodel.Chat(testModel, usage, text, calls...)
	}
}

// errorReply answers with an API error.
func errorReply(status int, message string) reply {
	return func(*http.Request, []byte) (int, any) { return status, errorJSON(message) }
}

// runCode is a call of the internal function (named code_interpreter by default) with code.
func runCode(callID, code string) fakemodel.Item {
	return fakemodel.FunctionCall("code_interpreter", callID, codeArgs(code))
}

// chatRunCode is the Chat form of runCode.
func chatRunCode(callID, code string) fakemodel.ToolCall {
	return fakemodel.ToolCall{ID: callID, Name: "code_interpreter", Arguments: codeArgs(code)}
}

func codeArgs(code string) string {
	b, _ := json.Marshal(map[string]string{"code": code}) // a map of strings always marshals
	return string(b)
}

// usage is a token count shorthand.
func usage(in, out int) fakemodel.Usage { return fakemodel.Usage{Input: in, Output: out} }
