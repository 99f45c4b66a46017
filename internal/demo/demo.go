// Package demo is codeinterp's built-in demo model: a small, honest stand-in for a model API
// that `make run` starts when no upstream is given, so that a newcomer can see the hosted code
// tool work without a key. It is not a language model: it follows a few plain instructions (run a
// fenced code block, compute an arithmetic expression, draw a chart, read a file back, list the
// files), calls the request's code tool for them, and reports what the code printed. Every text
// it writes starts with "[demo model]".
//
// It serves OpenAI's Responses (POST /v1/responses) and Chat Completions
// (POST /v1/chat/completions) and Anthropic's Messages (POST /v1/messages), each as JSON or as the
// API's event stream when the request asks for stream: true, and GET /v1/models.
package demo

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
)

// maxRequestBytes bounds a request body the demo model reads.
const maxRequestBytes = 8 << 20

// Model is the demo model's HTTP handler. Its zero value is ready to use and it is safe for
// concurrent use.
type Model struct {
	// Now, if set, is the clock of the answers' timestamps; nil means time.Now.
	Now func() time.Time
	ids atomic.Uint64
}

var _ http.Handler = (*Model)(nil)

// ServeHTTP answers one request.
func (m *Model) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet && r.URL.Path == "/v1/models" {
		writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []any{
			map[string]any{"id": "demo", "object": "model", "created": 0, "owned_by": "codeinterp-demo"}}})
		return
	}
	var s surface
	switch r.URL.Path {
	case "/v1/responses":
		s = responsesSurface{}
	case "/v1/chat/completions":
		s = chatSurface{}
	case "/v1/messages":
		s = messagesSurface{}
	default:
		writeJSON(w, http.StatusNotFound, openAIError("The demo model serves /v1/responses, /v1/chat/completions and /v1/messages only."))
		return
	}
	if r.Method != http.MethodPost {
		writeJSON(w, http.StatusMethodNotAllowed, s.errorBody("Use POST."))
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxRequestBytes+1))
	if err != nil || len(body) > maxRequestBytes {
		writeJSON(w, http.StatusBadRequest, s.errorBody("The request body could not be read, or is larger than 8 MiB."))
		return
	}
	var req request
	if err := json.Unmarshal(body, &req); err != nil {
		writeJSON(w, http.StatusBadRequest, s.errorBody("The request body is not valid JSON: "+err.Error()))
		return
	}
	t, err := s.read(req)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, s.errorBody(err.Error()))
		return
	}
	a := answer{
		action: decide(t),
		model:  req.Model,
		id:     m.ids.Add(1),
		now:    m.now().Unix(),
		in:     len(body) / 4,
	}
	if a.model == "" {
		a.model = "demo"
	}
	if !req.Stream {
		writeJSON(w, http.StatusOK, s.answer(a, req))
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	s.stream(&eventWriter{w: w}, a, req)
}

func (m *Model) now() time.Time {
	if m.Now != nil {
		return m.Now()
	}
	return time.Now()
}

// request is what the demo model reads of a request, on any surface.
type request struct {
	Model         string          `json:"model"`
	Stream        bool            `json:"stream"`
	Input         json.RawMessage `json:"input"`    // Responses
	Messages      json.RawMessage `json:"messages"` // Chat, Messages
	Tools         []tool          `json:"tools"`
	StreamOptions struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

// tool is a function tool in any surface's shape: Responses ({type, name, parameters}), Chat
// ({type, function: {name, parameters}}) or Messages ({name, input_schema}).
type tool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Parameters  json.RawMessage `json:"parameters"`
	InputSchema json.RawMessage `json:"input_schema"`
	Function    *struct {
		Name       string          `json:"name"`
		Parameters json.RawMessage `json:"parameters"`
	} `json:"function"`
}

// codeTools finds the request's tools that take Python code and a shell command.
func codeTools(tools []tool) (python, bash string) {
	for _, t := range tools {
		name, schema := t.Name, t.Parameters
		if t.Function != nil {
			name, schema = t.Function.Name, t.Function.Parameters
		}
		if schema == nil {
			schema = t.InputSchema
		}
		var s struct {
			Properties map[string]json.RawMessage `json:"properties"`
		}
		if name == "" || json.Unmarshal(schema, &s) != nil {
			continue
		}
		if _, ok := s.Properties["code"]; ok && python == "" {
			python = name
		}
		if _, ok := s.Properties["command"]; ok && bash == "" && len(s.Properties) == 1 {
			bash = name
		}
	}
	return python, bash
}

// answer is one answer to write: the action and what every surface's envelope needs.
type answer struct {
	action
	model string
	id    uint64
	now   int64
	in    int // input tokens, roughly
}

// out is the answer's output tokens, roughly.
func (a answer) out() int {
	n := len(a.text) / 4
	for _, v := range a.args {
		n += len(v) / 4
	}
	return n + 1
}

// arguments is the call's arguments as JSON.
func (a answer) arguments() []byte {
	b, _ := json.Marshal(a.args) // a map of strings always marshals
	return b
}

// surface reads requests and writes answers in one API's shapes.
type surface interface {
	read(req request) (turn, error)
	answer(a answer, req request) any
	stream(ew *eventWriter, a answer, req request)
	errorBody(message string) any
}

// text reads a message content: a string, or an array of parts whose text is joined.
func text(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Type    string          `json:"type"`
		Text    string          `json:"text"`
		Output  string          `json:"output"`
		Content json.RawMessage `json:"content"`
	}
	if json.Unmarshal(raw, &parts) != nil {
		return ""
	}
	var b strings.Builder
	for _, p := range parts {
		switch {
		case p.Text != "":
			b.WriteString(p.Text)
		case p.Output != "":
			b.WriteString(p.Output)
		case p.Content != nil:
			b.WriteString(text(p.Content))
		}
	}
	return b.String()
}

// chunks cuts s into a few pieces for a stream's deltas.
func chunks(s string) []string {
	var out []string
	for len(s) > 0 {
		n := min(len(s), 24)
		for n < len(s) && n < 48 && s[n-1] != ' ' && s[n-1] != '\n' {
			n++
		}
		out = append(out, s[:n])
		s = s[n:]
	}
	return out
}

// eventWriter writes server-sent events and flushes each at once.
type eventWriter struct {
	w   http.ResponseWriter
	seq int
}

// event writes one event named name (no event line when empty) with v as its JSON data.
func (ew *eventWriter) event(name string, v any) {
	b, _ := json.Marshal(v) // maps and slices of JSON values always marshal
	if name != "" {
		fmt.Fprintf(ew.w, "event: %s\n", name)
	}
	fmt.Fprintf(ew.w, "data: %s\n\n", b)
	if f, ok := ew.w.(http.Flusher); ok {
		f.Flush()
	}
}

// raw writes a data line as it is ("[DONE]").
func (ew *eventWriter) raw(data string) {
	fmt.Fprintf(ew.w, "data: %s\n\n", data)
	if f, ok := ew.w.(http.Flusher); ok {
		f.Flush()
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, _ := json.Marshal(v) // maps and slices of JSON values always marshal
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", fmt.Sprint(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

func openAIError(message string) map[string]any {
	return map[string]any{"error": map[string]any{"message": message, "type": "invalid_request_error", "param": nil, "code": nil}}
}
