package deploy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/codeinterp/codeinterp/envoy"
	"github.com/codeinterp/codeinterp/internal/demo"
)

// front is a real Envoy on the host (the shipped envoy/envoy.yaml on free loopback ports) in front
// of the demo model, its ext_proc filter pointed at a codeinterp container's address.
type front struct {
	listen string // the Envoy listener the clients call
	host   string // the requests' Host header; "" is listen
}

// startFront starts the demo model and Envoy listening on listen, its ext_proc and Containers API
// clusters pointed at grpcAddr and apiAddr. Both stop when t ends. The server's follow-up model
// calls go back through the listener (--upstream http://listen), as with make run.
func startFront(t *testing.T, listen, grpcAddr, apiAddr string) *front {
	t.Helper()
	model := httptest.NewServer(&demo.Model{})
	t.Cleanup(model.Close)

	b, err := envoy.Load("../../envoy/envoy.yaml")
	require.NoError(t, err)
	require.NoError(t, envoy.PointCluster(b, "llm", model.URL))
	f := &front{listen: listen}
	in, err := envoy.FindIngress(b)
	require.NoError(t, err)
	in.Listener.Address = socketAddress(t, f.listen)
	b.Admin.Address = socketAddress(t, freeAddr(t))
	pointStatic(t, b, "codeinterp_ext_proc", grpcAddr)
	pointStatic(t, b, "codeinterp_api", apiAddr)
	runEnvoy(t, b, listen)
	return f
}

// runEnvoy runs the real Envoy with bootstrap b until t ends, and waits until it listens on listen.
func runEnvoy(t *testing.T, b *bootstrapv3.Bootstrap, listen string) {
	t.Helper()
	data, err := protojson.Marshal(b)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "envoy.json")
	require.NoError(t, os.WriteFile(path, data, 0o644))

	bin := envoyBin()
	var logs lockedBuffer
	cmd := exec.Command(bin, "-c", path, "--log-level", "warn", "--use-dynamic-base-id",
		"--base-id-path", filepath.Join(t.TempDir(), "base-id"))
	cmd.Stdout, cmd.Stderr = &logs, &logs
	require.NoError(t, cmd.Start(), "start Envoy %s (make deps installs it)", bin)
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("Envoy's log:\n%s", logs.String())
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", listen, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Envoy did not listen on %s: %s", listen, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// lockedBuffer is a bytes.Buffer safe for a process's output copier writing while the test reads.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// socketAddress is addr ("127.0.0.1:port") as an Envoy address.
func socketAddress(t *testing.T, addr string) *corev3.Address {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	p, err := strconv.ParseUint(port, 10, 32)
	require.NoError(t, err)
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address: host, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(p)},
	}}}
}

// pointStatic points every endpoint of the static cluster name at addr.
func pointStatic(t *testing.T, b *bootstrapv3.Bootstrap, name, addr string) {
	t.Helper()
	c := envoy.Cluster(b, name)
	require.NotNil(t, c, "cluster %s in envoy/envoy.yaml", name)
	n := 0
	for _, le := range c.GetLoadAssignment().GetEndpoints() {
		for _, ep := range le.GetLbEndpoints() {
			ep.GetEndpoint().Address = socketAddress(t, addr)
			n++
		}
	}
	require.Positive(t, n, "cluster %s has endpoints", name)
}

// codeCall is the first output item of a Responses answer: a code_interpreter_call.
type codeCall struct {
	Type    string `json:"type"`
	Code    string `json:"code"`
	Outputs []struct {
		Type string `json:"type"`
		Logs string `json:"logs"`
		URL  string `json:"url"`
	} `json:"outputs"`
}

// ask sends input to the front as a Responses request with the code_interpreter tool and returns
// the answer's code call (its first item) and how long the answer took.
func (f *front) ask(t *testing.T, input string) (codeCall, time.Duration) {
	t.Helper()
	in, err := json.Marshal(input)
	require.NoError(t, err)
	body := `{"model":"gpt-4.1","tools":[{"type":"code_interpreter","container":{"type":"auto"}}],` +
		`"include":["code_interpreter_call.outputs"],"input":` + string(in) + `}`
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+f.listen+"/v1/responses", bytes.NewBufferString(body))
	require.NoError(t, err)
	req.Header.Set("content-type", "application/json")
	if f.host != "" {
		req.Host = f.host
	}
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	took := time.Since(start)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "answer to %q: %s", input, raw)
	var answer struct {
		Output []codeCall `json:"output"`
	}
	require.NoError(t, json.Unmarshal(raw, &answer), "answer to %q: %s", input, raw)
	require.NotEmpty(t, answer.Output, "answer to %q: %s", input, raw)
	require.Equal(t, "code_interpreter_call", answer.Output[0].Type, "answer to %q: %s", input, raw)
	return answer.Output[0], took
}

// askSixTimesSeven sends the README's first conversation (the demo model runs print(6*7)) and
// returns the code call's logs and how long the answer took.
func (f *front) askSixTimesSeven(t *testing.T) (logs string, took time.Duration) {
	t.Helper()
	call, took := f.ask(t, "What is 6*7? Use Python.")
	require.Equal(t, "print(6*7)", call.Code)
	require.Len(t, call.Outputs, 1, "outputs of print(6*7)")
	return call.Outputs[0].Logs, took
}

// askMessagesBash sends an Anthropic Messages request with the code_execution_20250825 tool whose
// user message is a bash block (the demo model runs it) and returns the answer's raw JSON.
func (f *front) askMessagesBash(t *testing.T, script string) string {
	t.Helper()
	msg, err := json.Marshal("```bash\n" + script + "\n```")
	require.NoError(t, err)
	body := `{"model":"claude-sonnet-4-5","max_tokens":1024,"tools":[{"type":"code_execution_20250825","name":"code_execution"}],` +
		`"messages":[{"role":"user","content":` + string(msg) + `}]}`
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+f.listen+"/v1/messages", bytes.NewBufferString(body))
	require.NoError(t, err)
	req.Header.Set("content-type", "application/json")
	req.Header.Set("anthropic-version", "2023-06-01")
	req.Header.Set("x-api-key", "demo")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "answer: %s", raw)
	var answer struct {
		Content []struct {
			Type string `json:"type"`
		} `json:"content"`
	}
	require.NoError(t, json.Unmarshal(raw, &answer), "answer: %s", raw)
	var types []string
	for _, b := range answer.Content {
		types = append(types, b.Type)
	}
	require.Contains(t, types, "bash_code_execution_tool_result", "answer: %s", raw)
	return string(raw)
}
