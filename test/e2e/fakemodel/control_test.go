package fakemodel

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
)

// controlCall sends one control request and decodes its JSON answer.
func controlCall(t *testing.T, ctl *httptest.Server, method, path, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, ctl.URL+path, strings.NewReader(body))
	require.NoError(t, err, "control %s %s", method, path)
	resp, err := ctl.Client().Do(req)
	require.NoError(t, err, "control %s %s", method, path)
	defer resp.Body.Close()
	var out map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out), "control %s %s: decode", method, path)
	return resp.StatusCode, out
}

func TestControl(t *testing.T) {
	s, err := Start(zaptest.NewLogger(t))
	require.NoError(t, err, "Start")
	defer s.Close()
	ctl := httptest.NewServer(NewControl(s))
	defer ctl.Close()

	status, _ := controlCall(t, ctl, http.MethodPost, "/enqueue", `{"path":"/v1/responses","answers":[
		{"json":{"id":"resp_1","tools":[]},"echo":["tools","metadata"],"headers":{"x-request-id":"req_1"}},
		{"status":429,"headers":{"retry-after":"7"},"json":{"error":{"message":"slow down"}}},
		{"events":[{"name":"response.created","data":"{\"a\":1}"},{"data":"[DONE]"}]},
		{"status":202,"body":"raw"}]}`)
	require.Equal(t, http.StatusOK, status, "enqueue four answers")
	_, pending := controlCall(t, ctl, http.MethodGet, "/pending", "")
	assert.Equal(t, 4.0, pending["pending"], "pending after enqueue")

	tests := []struct {
		name       string
		giveBody   string
		wantStatus int
		wantHeader map[string]string
		wantBody   string
	}{
		{
			name: "echoing answer", giveBody: `{"tools":[{"type":"function","name":"f"}],"input":"x"}`,
			wantStatus: 200, wantHeader: map[string]string{"X-Request-Id": "req_1", "Content-Type": "application/json"},
			wantBody: `{"id":"resp_1","tools":[{"type":"function","name":"f"}]}`,
		},
		{
			name: "error with a header", giveBody: `{}`,
			wantStatus: 429, wantHeader: map[string]string{"Retry-After": "7"},
			wantBody: `{"error":{"message":"slow down"}}`,
		},
		{
			name: "event stream", giveBody: `{}`,
			wantStatus: 200, wantHeader: map[string]string{"Content-Type": "text/event-stream"},
			wantBody: "event: response.created\ndata: {\"a\":1}\n\ndata: [DONE]\n\n",
		},
		{name: "raw body", giveBody: `{}`, wantStatus: 202, wantBody: "raw"},
		{
			name: "script ran out", giveBody: `{}`, wantStatus: 500,
			wantBody: `{"error":{"code":null,"message":"fakemodel: no scripted answer for POST /v1/responses","param":null,"type":"invalid_request_error"}}`,
		},
	}
	for _, tt := range tests {
		resp, err := s.Client().Post(s.URL()+"/v1/responses", "application/json", strings.NewReader(tt.giveBody))
		require.NoError(t, err, "%s: POST", tt.name)
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err, "%s: read", tt.name)
		assert.Equal(t, tt.wantStatus, resp.StatusCode, "%s: status", tt.name)
		for k, v := range tt.wantHeader {
			assert.Equal(t, v, resp.Header.Get(k), "%s: header %s", tt.name, k)
		}
		if strings.HasPrefix(tt.wantBody, "{") {
			assert.JSONEq(t, tt.wantBody, string(b), "%s: body", tt.name)
		} else {
			assert.Equal(t, tt.wantBody, string(b), "%s: body", tt.name)
		}
	}

	_, pending = controlCall(t, ctl, http.MethodGet, "/pending", "")
	assert.Equal(t, 0.0, pending["pending"], "pending after serving")
	_, got := controlCall(t, ctl, http.MethodGet, "/requests", "")
	reqs, _ := got["requests"].([]any)
	require.Len(t, reqs, 5, "requests recorded")
	first, _ := reqs[0].(map[string]any)
	assert.Equal(t, "POST", first["method"], "method of the first request")
	assert.Equal(t, "/v1/responses", first["path"], "path of the first request")
	assert.Equal(t, tests[0].giveBody, first["body"], "body of the first request")

	// Reset drops the queue and the requests seen so far.
	controlCall(t, ctl, http.MethodPost, "/enqueue", `{"path":"/v1/chat/completions","answers":[{"json":{}}]}`)
	status, _ = controlCall(t, ctl, http.MethodPost, "/reset", "")
	require.Equal(t, http.StatusOK, status, "reset")
	_, pending = controlCall(t, ctl, http.MethodGet, "/pending", "")
	assert.Equal(t, 0.0, pending["pending"], "pending after reset")
	_, got = controlCall(t, ctl, http.MethodGet, "/requests", "")
	assert.Empty(t, got["requests"], "requests after reset")
	resp, err := s.Client().Post(s.URL()+"/v1/chat/completions", "application/json", strings.NewReader(`{}`))
	require.NoError(t, err, "POST after reset")
	resp.Body.Close()
	assert.Equal(t, http.StatusInternalServerError, resp.StatusCode, "the reset dropped the queued chat answer")
	_, got = controlCall(t, ctl, http.MethodGet, "/requests", "")
	assert.Len(t, got["requests"], 1, "requests after reset and one more")
}

func TestControlRefuses(t *testing.T) {
	ctl := httptest.NewServer(NewControl(New(t)))
	defer ctl.Close()
	tests := []struct {
		name       string
		giveMethod string
		givePath   string
		giveBody   string
		wantStatus int
		wantError  string
	}{
		{name: "malformed JSON", giveMethod: "POST", givePath: "/enqueue", giveBody: `{"path":`, wantStatus: 400, wantError: "decode enqueue"},
		{name: "unknown field", giveMethod: "POST", givePath: "/enqueue", giveBody: `{"path":"/v1/x","answer":[]}`, wantStatus: 400, wantError: "unknown field"},
		{name: "relative path", giveMethod: "POST", givePath: "/enqueue", giveBody: `{"path":"v1/x","answers":[]}`, wantStatus: 400, wantError: "does not start with /"},
		{name: "echo without an object", giveMethod: "POST", givePath: "/enqueue", giveBody: `{"path":"/v1/x","answers":[{"json":[1],"echo":["tools"]}]}`, wantStatus: 400, wantError: "not an object"},
		{name: "unknown endpoint", giveMethod: "GET", givePath: "/enqueue", wantStatus: 404, wantError: "no control endpoint GET /enqueue"},
	}
	for _, tt := range tests {
		status, out := controlCall(t, ctl, tt.giveMethod, tt.givePath, tt.giveBody)
		assert.Equal(t, tt.wantStatus, status, "%s: status", tt.name)
		assert.Contains(t, out["error"], tt.wantError, "%s: error", tt.name)
	}
}
