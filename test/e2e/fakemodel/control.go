package fakemodel

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"

	"go.uber.org/zap"
)

// This file lets a test driver in another process (the Python suite, through
// test/e2e/cmd/stack) script the fake model over HTTP. Serve [Control] on a listener of its
// own: Envoy's clusters point at the model's address only, so no client request can reach it.

// Start starts a server on 127.0.0.1 for a program that is not a test. A mistake of the
// script (an answer that cannot be encoded) is logged to log. The caller must [Server.Close] it.
func Start(log *zap.Logger) (*Server, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	s := &Server{
		errorf:   func(format string, args ...any) { log.Error(fmt.Sprintf(format, args...)) },
		queues:   map[string][]Response{},
		handlers: map[string]http.HandlerFunc{},
	}
	s.srv = &httptest.Server{Listener: l, Config: &http.Server{Handler: http.HandlerFunc(s.serve)}}
	s.srv.Start()
	return s, nil
}

// Close stops the server, closing its connections, and waits for the requests in progress. It
// is for servers made by [Start]; [New]'s are closed by t.Cleanup.
func (s *Server) Close() { s.srv.Close() }

// ControlAnswer is one scripted answer in the control API's JSON. The zero value is an empty
// 200.
type ControlAnswer struct {
	// Status defaults to 200.
	Status int `json:"status,omitempty"`
	// Headers are extra response headers.
	Headers map[string]string `json:"headers,omitempty"`
	// JSON, when set, is the body, with content-type application/json.
	JSON json.RawMessage `json:"json,omitempty"`
	// Echo names top-level keys of the request's JSON body copied into the JSON answer when
	// the request has them, as a real model echoes tools, tool_choice or metadata. JSON must
	// then be an object.
	Echo []string `json:"echo,omitempty"`
	// Body is a raw body, used when JSON and Events are unset.
	Body string `json:"body,omitempty"`
	// Events, when set, make the answer a text/event-stream.
	Events []ControlEvent `json:"events,omitempty"`
}

// ControlEvent is one server-sent event of a [ControlAnswer].
type ControlEvent struct {
	// Name is the "event:" field; empty writes none.
	Name string `json:"name,omitempty"`
	// Data is the "data:" payload.
	Data string `json:"data"`
}

// ControlRequest is a request the model received, in the control API's JSON.
type ControlRequest struct {
	Method  string              `json:"method"`
	Path    string              `json:"path"`
	Query   string              `json:"query"`
	Headers map[string][]string `json:"headers"`
	// Body is the request body as received (a JSON text for the API's requests).
	Body string `json:"body"`
}

// Control is the HTTP control API of a [Server]:
//
//	POST /enqueue   {"path": "/v1/responses", "answers": [ControlAnswer, ...]}: queue answers for
//	                path, served in order by a handler of the path (so after any answer
//	                queued with [Server.Enqueue])
//	GET  /requests  {"requests": [ControlRequest, ...]}: the requests received since the last reset
//	GET  /pending   {"pending": n}: answers queued here and not served yet
//	POST /reset     drop the queued answers, forget the keys added, and start the request list
//	                afresh
//	POST /files     {"id", "filename", "purpose", "key", "content"}: serve a file of the Files
//	                API ([Server.AddFile]; content is base64)
//	POST /keys      {"key"}: a key GET /v1/models takes ([Server.AddKey])
//
// A request to a path with nothing queued gets a 500 in OpenAI's error envelope, as [Server]
// answers an unscripted request. Control is safe for concurrent use.
type Control struct {
	s *Server

	// mu guards the fields below.
	mu     sync.Mutex
	queues map[string][]ControlAnswer
	// mark is the number of requests the server had received at the last reset.
	mark int
}

// NewControl returns the control API of s. It installs a handler ([Server.Handle]) on each
// path answers are queued for.
func NewControl(s *Server) *Control {
	return &Control{s: s, queues: map[string][]ControlAnswer{}}
}

// maxControlBody bounds a control request's body.
const maxControlBody = 64 << 20

// ServeHTTP serves the control API.
func (c *Control) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/enqueue":
		c.enqueue(w, r)
	case r.Method == http.MethodPost && r.URL.Path == "/files":
		c.addFile(w, r)
	case r.Method == http.MethodPost && r.URL.Path == "/keys":
		c.addKey(w, r)
	case r.Method == http.MethodGet && r.URL.Path == "/requests":
		c.mu.Lock()
		mark := c.mark
		c.mu.Unlock()
		reqs := c.s.Requests()
		out := make([]ControlRequest, 0, len(reqs))
		for _, rq := range reqs[min(mark, len(reqs)):] {
			out = append(out, ControlRequest{Method: rq.Method, Path: rq.Path, Query: rq.Query, Headers: rq.Header, Body: string(rq.Body)})
		}
		writeControl(w, http.StatusOK, map[string]any{"requests": out})
	case r.Method == http.MethodGet && r.URL.Path == "/pending":
		c.mu.Lock()
		n := 0
		for _, q := range c.queues {
			n += len(q)
		}
		c.mu.Unlock()
		writeControl(w, http.StatusOK, map[string]any{"pending": n})
	case r.Method == http.MethodPost && r.URL.Path == "/reset":
		n := len(c.s.Requests())
		c.mu.Lock()
		clear(c.queues)
		c.mark = n
		c.mu.Unlock()
		c.s.ForgetKeys()
		writeControl(w, http.StatusOK, map[string]any{})
	default:
		writeControl(w, http.StatusNotFound, map[string]any{"error": fmt.Sprintf("no control endpoint %s %s", r.Method, r.URL.Path)})
	}
}

func (c *Control) enqueue(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Path    string          `json:"path"`
		Answers []ControlAnswer `json:"answers"`
	}
	dec := json.NewDecoder(io.LimitReader(r.Body, maxControlBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		writeControl(w, http.StatusBadRequest, map[string]any{"error": "decode enqueue: " + err.Error()})
		return
	}
	if !strings.HasPrefix(in.Path, "/") {
		writeControl(w, http.StatusBadRequest, map[string]any{"error": fmt.Sprintf("enqueue: path %q does not start with /", in.Path)})
		return
	}
	for i, a := range in.Answers {
		if len(a.Echo) > 0 && !isObject(a.JSON) {
			writeControl(w, http.StatusBadRequest, map[string]any{"error": fmt.Sprintf("enqueue: answer %d echoes %v but its json is not an object", i, a.Echo)})
			return
		}
	}
	c.mu.Lock()
	_, installed := c.queues[in.Path]
	c.queues[in.Path] = append(c.queues[in.Path], in.Answers...)
	c.mu.Unlock()
	if !installed {
		c.s.Handle(in.Path, c.answer)
	}
	writeControl(w, http.StatusOK, map[string]any{"queued": len(in.Answers)})
}

// answer serves a model request with the next answer queued for its path.
func (c *Control) answer(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body) // the server already read it whole; this reads its copy
	c.mu.Lock()
	var next *ControlAnswer
	if q := c.queues[r.URL.Path]; len(q) > 0 {
		next = &q[0]
		c.queues[r.URL.Path] = q[1:]
	}
	c.mu.Unlock()
	if next == nil {
		c.s.write(w, r, Error(http.StatusInternalServerError, "fakemodel: no scripted answer for "+r.Method+" "+r.URL.Path))
		return
	}
	resp, err := next.response(body)
	if err != nil {
		c.s.errorf("fakemodel: answer %s %s: %v", r.Method, r.URL.Path, err)
		c.s.write(w, r, Error(http.StatusInternalServerError, "fakemodel: "+err.Error()))
		return
	}
	c.s.write(w, r, resp)
}

// response is the answer as a [Response] to a request with body.
func (a ControlAnswer) response(body []byte) (Response, error) {
	resp := Response{Status: a.Status, Header: http.Header{}, Body: []byte(a.Body)}
	for k, v := range a.Headers {
		resp.Header.Set(k, v)
	}
	for _, ev := range a.Events {
		resp.Events = append(resp.Events, Event{Name: ev.Name, Data: ev.Data})
	}
	if len(a.JSON) == 0 {
		return resp, nil
	}
	if len(a.Echo) == 0 {
		resp.JSON = a.JSON
		return resp, nil
	}
	var answer, req map[string]json.RawMessage
	if err := json.Unmarshal(a.JSON, &answer); err != nil {
		return Response{}, fmt.Errorf("decode the scripted answer: %w", err)
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return Response{}, fmt.Errorf("echo %v: the request body is not a JSON object: %w", a.Echo, err)
	}
	for _, k := range a.Echo {
		if v, ok := req[k]; ok {
			answer[k] = v
		}
	}
	resp.JSON = answer
	return resp, nil
}

func isObject(raw json.RawMessage) bool {
	var m map[string]json.RawMessage
	return json.Unmarshal(raw, &m) == nil && m != nil
}

func writeControl(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":"encode the control answer"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
