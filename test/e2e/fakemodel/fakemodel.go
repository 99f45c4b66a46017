// Package fakemodel is a scripted OpenAI-compatible model server for end-to-end tests: tests
// queue the answers of each path (JSON bodies, errors, or SSE streams whose events can be
// delayed or held back), or install a handler, and read back every request the server
// received. The builders in openai.go make Responses API and Chat Completions answers that the
// openai-go SDK decodes.
package fakemodel

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// Request is a request the server received.
type Request struct {
	Method string
	// Path is the URL path, without the query.
	Path   string
	Query  string
	Header http.Header
	Body   []byte
}

// Decode unmarshals the request body (JSON) into v.
func (r Request) Decode(v any) error {
	if err := json.Unmarshal(r.Body, v); err != nil {
		return fmt.Errorf("decode %s %s body: %w", r.Method, r.Path, err)
	}
	return nil
}

// Response is one scripted answer. The zero value is an empty 200.
type Response struct {
	// Status defaults to 200.
	Status int
	// Header holds extra response headers.
	Header http.Header
	// JSON, when set, is marshalled as the body with content-type application/json.
	JSON any
	// Body is a raw body, used when JSON and Events are unset.
	Body []byte
	// Events, when set, make the answer a text/event-stream: each event is written and
	// flushed in turn.
	Events []Event
}

// Event is one server-sent event.
type Event struct {
	// Name is the "event:" field; empty writes none (as Chat Completions streams do).
	Name string
	// Data is the "data:" payload; a multi-line payload is written as several data lines.
	Data string
	// Delay is waited before the event is written.
	Delay time.Duration
	// Wait, when set, must be closed before the event is written: a test holds the stream
	// there to check what the client saw so far, without timing.
	Wait <-chan struct{}
}

// JSON is a 200 answer with v as its JSON body.
func JSON(v any) Response { return Response{JSON: v} }

// SSE is a 200 text/event-stream answer.
func SSE(events ...Event) Response { return Response{Events: events} }

// Error is an answer with OpenAI's error envelope.
func Error(status int, message string) Response {
	return Response{Status: status, JSON: map[string]any{"error": map[string]any{
		"message": message, "type": "invalid_request_error", "param": nil, "code": nil,
	}}}
}

// Server is the fake model. It is safe for concurrent use.
type Server struct {
	// errorf reports a mistake of the script (an answer that cannot be encoded): t.Errorf for
	// [New], the logger for [Start].
	errorf func(format string, args ...any)
	srv    *httptest.Server

	// mu guards the fields below.
	mu       sync.Mutex
	queues   map[string][]Response
	handlers map[string]http.HandlerFunc
	requests []Request
	files    map[string]File // the Files API's files by id (files.go)
	keys     map[string]bool // the keys GET /v1/models takes, nil for all (models.go)
}

// New starts a server on 127.0.0.1; t.Cleanup closes it.
func New(t testing.TB) *Server {
	t.Helper()
	s := &Server{errorf: t.Errorf, queues: map[string][]Response{}, handlers: map[string]http.HandlerFunc{}}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	return s
}

// URL is the server's base URL, e.g. "http://127.0.0.1:41234".
func (s *Server) URL() string { return s.srv.URL }

// Client returns an HTTP client for the server; its connections are closed with the server.
func (s *Server) Client() *http.Client { return s.srv.Client() }

// Enqueue adds answers for requests to path, served in order.
func (s *Server) Enqueue(path string, rs ...Response) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queues[path] = append(s.queues[path], rs...)
}

// Handle installs h for requests to path once its queue is empty.
func (s *Server) Handle(path string, h http.HandlerFunc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.handlers[path] = h
}

// Requests returns every request received so far, in arrival order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// RequestsTo returns the requests received on path.
func (s *Server) RequestsTo(path string) []Request {
	var out []Request
	for _, r := range s.Requests() {
		if r.Path == path {
			out = append(out, r)
		}
	}
	return out
}

// Pending returns how many queued answers were not served yet.
func (s *Server) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, q := range s.queues {
		n += len(q)
	}
	return n
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, "fakemodel: read body: "+err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	s.requests = append(s.requests, Request{
		Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Header: r.Header.Clone(), Body: body,
	})
	n := len(s.requests)
	var resp *Response
	if q := s.queues[r.URL.Path]; len(q) > 0 {
		resp = &q[0]
		s.queues[r.URL.Path] = q[1:]
	}
	h := s.handlers[r.URL.Path]
	s.mu.Unlock()

	switch {
	case resp == nil && h == nil && s.serveFile(w, r):
	case resp == nil && h == nil && s.serveModels(w, r):
	case resp != nil:
		s.write(w, r, *resp)
	case h != nil:
		r.Body = io.NopCloser(strings.NewReader(string(body)))
		h(w, r)
	default:
		msg := fmt.Sprintf("fakemodel: no scripted answer for %s %s (request %d)", r.Method, r.URL.Path, n)
		s.write(w, r, Error(http.StatusInternalServerError, msg))
	}
}

func (s *Server) write(w http.ResponseWriter, r *http.Request, resp Response) {
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	status := resp.Status
	if status == 0 {
		status = http.StatusOK
	}
	switch {
	case resp.Events != nil:
		writeSSE(w, r, status, resp.Events)
	case resp.JSON != nil:
		b, err := json.Marshal(resp.JSON)
		if err != nil {
			s.errorf("fakemodel: marshal the answer to %s %s: %v", r.Method, r.URL.Path, err)
			http.Error(w, "fakemodel: "+err.Error(), http.StatusInternalServerError)
			return
		}
		if w.Header().Get("Content-Type") == "" {
			w.Header().Set("Content-Type", "application/json")
		}
		w.WriteHeader(status)
		_, _ = w.Write(b)
	default:
		w.WriteHeader(status)
		_, _ = w.Write(resp.Body)
	}
}

func writeSSE(w http.ResponseWriter, r *http.Request, status int, events []Event) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(status)
	flush := func() {
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
	}
	flush()
	for _, ev := range events {
		if ev.Wait != nil {
			select {
			case <-ev.Wait:
			case <-r.Context().Done():
				return
			}
		}
		if ev.Delay > 0 {
			t := time.NewTimer(ev.Delay)
			select {
			case <-t.C:
			case <-r.Context().Done():
				t.Stop()
				return
			}
		}
		var b strings.Builder
		if ev.Name != "" {
			b.WriteString("event: " + ev.Name + "\n")
		}
		for _, line := range strings.Split(ev.Data, "\n") {
			b.WriteString("data: " + line + "\n")
		}
		b.WriteString("\n")
		if _, err := io.WriteString(w, b.String()); err != nil {
			return
		}
		flush()
	}
}
