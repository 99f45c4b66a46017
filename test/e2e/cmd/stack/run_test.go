package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/codeinterp/codeinterp/test/e2e/harness"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// startRun runs the stack in a goroutine and returns its ready line, the writer of its stdin
// and the channel of run's result.
func startRun(t *testing.T, ctx context.Context) (Ready, *io.PipeWriter, <-chan error, *harness.SyncBuffer) {
	t.Helper()
	harness.RequireEnvoy(t)
	stdinR, stdinW := io.Pipe()
	stdoutR, stdoutW := io.Pipe()
	var stderr harness.SyncBuffer
	done := make(chan error, 1)
	go func() {
		err := run(ctx, nil, stdinR, stdoutW, &stderr)
		_ = stdoutW.CloseWithError(io.EOF)
		done <- err
	}()
	line, err := bufio.NewReader(stdoutR).ReadString('\n')
	if err != nil {
		_ = stdinW.Close()
		t.Fatalf("no ready line: %v (run: %v)\n%s", err, <-done, stderr.String())
	}
	var ready Ready
	require.NoError(t, json.Unmarshal([]byte(line), &ready), "ready line %q", line)
	go func() { _, _ = io.Copy(io.Discard, stdoutR) }() // nothing more is written; ends at close
	return ready, stdinW, done, &stderr
}

// post sends a JSON POST and returns the status and body.
func post(t *testing.T, url, auth, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(body))
	require.NoError(t, err, "POST %s", url)
	req.Header.Set("Content-Type", "application/json")
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	resp, err := client.Do(req)
	require.NoError(t, err, "POST %s", url)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err, "read %s", url)
	return resp.StatusCode, string(b)
}

// TestStack: the stack serves one loop through Envoy as scripted through the control API, and
// stops cleanly, leaving no process, when its stdin ends.
func TestStack(t *testing.T) {
	ready, stdin, done, stderr := startRun(t, t.Context())
	for name, u := range map[string]string{"envoy_url": ready.EnvoyURL, "control_url": ready.ControlURL, "model_url": ready.ModelURL} {
		assert.True(t, strings.HasPrefix(u, "http://127.0.0.1:"), "%s is a loopback URL: %q", name, u)
	}

	status, body := post(t, ready.ControlURL+"/enqueue", "", `{"path":"/v1/responses","answers":[
		{"json":{"id":"resp_1","object":"response","status":"completed","output":[
			{"type":"function_call","id":"fc_1","call_id":"call_1","name":"code_interpreter","arguments":"{\"code\":\"print(40+2)\"}","status":"completed"}]}},
		{"json":{"id":"resp_2","object":"response","status":"completed","output":[
			{"type":"message","id":"msg_1","role":"assistant","status":"completed","content":[{"type":"output_text","text":"42","annotations":[]}]}]}}]}`)
	require.Equal(t, http.StatusOK, status, "enqueue: %s", body)
	status, body = post(t, ready.EnvoyURL+"/v1/responses", "Bearer sk-stack",
		`{"model":"m","input":"compute","include":["code_interpreter_call.outputs"],"tools":[{"type":"code_interpreter","container":{"type":"auto"}}]}`)
	require.Equal(t, http.StatusOK, status, "the loop through Envoy: %s", body)
	var resp struct {
		Output []struct {
			Type    string `json:"type"`
			Code    string `json:"code"`
			Outputs []struct {
				Logs string `json:"logs"`
			} `json:"outputs"`
		} `json:"output"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &resp), "decode the answer %s", body)
	require.Len(t, resp.Output, 2, "output items: %s", body)
	assert.Equal(t, "code_interpreter_call", resp.Output[0].Type, "first item: %s", body)
	require.Len(t, resp.Output[0].Outputs, 1, "outputs: %s", body)
	assert.Equal(t, "42\n", resp.Output[0].Outputs[0].Logs, "the sandbox ran the code: %s", body)

	require.NoError(t, stdin.Close(), "close stdin")
	assert.NoError(t, <-done, "run after stdin ended:\n%s", stderr.String())
}

// TestStackStopsOnSignal: a done context (SIGTERM or SIGINT in main) stops the stack cleanly
// while its stdin stays open.
func TestStackStopsOnSignal(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	_, stdin, done, stderr := startRun(t, ctx)
	defer stdin.Close()
	cancel()
	assert.NoError(t, <-done, "run after the signal:\n%s", stderr.String())
}

func TestStackRefusesArguments(t *testing.T) {
	tests := []struct {
		name    string
		give    []string
		wantErr string
	}{
		{name: "extra argument", give: []string{"extra"}, wantErr: "unexpected arguments: extra"},
		{name: "bad log level", give: []string{"--log-level", "loud"}, wantErr: "log level"},
		{name: "bad start mode", give: []string{"--start", "spawn"}, wantErr: `start mode "spawn"`},
		{name: "missing envoy", give: []string{"--envoy", "/nonexistent/envoy"}, wantErr: "/nonexistent/envoy"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr harness.SyncBuffer
			err := run(t.Context(), tt.give, nil, &stdout, &stderr)
			require.Error(t, err, "run %v", tt.give)
			assert.Contains(t, err.Error(), tt.wantErr, "run %v", tt.give)
			assert.Empty(t, stdout.String(), "run %v: no ready line", tt.give)
		})
	}
}
