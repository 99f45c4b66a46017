package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/codeinterp/codeinterp/test/e2e/harness"
)

// RequireCollectorEnv names the environment variable that makes a missing collector binary a
// failure instead of a skip; `make test` sets it once it has built the collector.
const RequireCollectorEnv = "CODEINTERP_REQUIRE_OTELCOL"

// collectorBinary finds the OpenTelemetry Collector `make otelcol` builds
// (test/e2e/otelcol/builder.yaml): $OTELCOL_BIN, else bin/tools/otelcol-codeinterp under the
// module root.
func collectorBinary() (string, error) {
	if p := os.Getenv("OTELCOL_BIN"); p != "" {
		return exec.LookPath(p)
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil && !strings.HasSuffix(dir, "otelcol") {
			p := filepath.Join(dir, "bin", "tools", "otelcol-codeinterp")
			if _, err := os.Stat(p); err != nil {
				return "", fmt.Errorf("no collector at %s (run `make otelcol`)", p)
			}
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no module root above the working directory")
		}
		dir = parent
	}
}

// collector is a running OpenTelemetry Collector: OTLP in (gRPC and HTTP), a file out.
type collector struct {
	grpcAddr, httpAddr string
	file               string
}

// startCollector runs the collector with an OTLP receiver on two free loopback ports and a
// file exporter writing OTLP JSON lines; t.Cleanup stops it. Without a collector binary the
// test is skipped, or failed when $CODEINTERP_REQUIRE_OTELCOL is set.
func startCollector(t *testing.T) *collector {
	t.Helper()
	bin, err := collectorBinary()
	if err != nil {
		if os.Getenv(RequireCollectorEnv) != "" {
			t.Fatalf("OpenTelemetry Collector required ($%s is set): %v", RequireCollectorEnv, err)
		}
		t.Skipf("OpenTelemetry Collector missing: %v", err)
	}
	dir := t.TempDir()
	// freeAddr (failures_test.go) picks ports no outgoing connection takes meanwhile.
	c := &collector{grpcAddr: freeAddr(t), httpAddr: freeAddr(t), file: filepath.Join(dir, "otlp.jsonl")}
	cfg := fmt.Sprintf(`receivers:
  otlp:
    protocols:
      grpc: {endpoint: %q}
      http: {endpoint: %q}
exporters:
  file: {path: %q, flush_interval: 100ms}
service:
  telemetry:
    metrics: {level: none}
  pipelines:
    traces: {receivers: [otlp], exporters: [file]}
    metrics: {receivers: [otlp], exporters: [file]}
`, c.grpcAddr, c.httpAddr, c.file)
	cfgPath := filepath.Join(dir, "collector.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatalf("write collector config: %v", err)
	}
	logs := &harness.SyncBuffer{}
	cmd := exec.Command(bin, "--config", cfgPath)
	cmd.Stdout, cmd.Stderr = logs, logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start collector: %v", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("collector output:\n%s", logs.String())
		}
	})
	// Ready when both receivers accept connections.
	deadline := time.Now().Add(30 * time.Second)
	for _, addr := range []string{c.grpcAddr, c.httpAddr} {
		for {
			conn, err := net.DialTimeout("tcp", addr, time.Second)
			if err == nil {
				conn.Close()
				break
			}
			select {
			case <-done:
				t.Fatalf("collector exited:\n%s", logs.String())
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("collector not listening on %s:\n%s", addr, logs.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return c
}

// otlpSpan is a span as the file exporter writes it (OTLP JSON: ids in hex).
type otlpSpan struct {
	TraceID      string     `json:"traceId"`
	SpanID       string     `json:"spanId"`
	ParentSpanID string     `json:"parentSpanId"`
	Name         string     `json:"name"`
	Kind         int        `json:"kind"`
	Attributes   []otlpAttr `json:"attributes"`
	// Service is the service.name of the span's resource.
	Service string `json:"-"`
}

type otlpAttr struct {
	Key   string          `json:"key"`
	Value json.RawMessage `json:"value"`
}

// attr returns the value of the span's attribute key as text ("" when absent): a string as
// is, anything else as its JSON.
func (s otlpSpan) attr(key string) string {
	for _, a := range s.Attributes {
		if a.Key != key {
			continue
		}
		var v struct {
			StringValue *string `json:"stringValue"`
			IntValue    *string `json:"intValue"`
		}
		_ = json.Unmarshal(a.Value, &v)
		switch {
		case v.StringValue != nil:
			return *v.StringValue
		case v.IntValue != nil:
			return *v.IntValue
		}
		return string(a.Value)
	}
	return ""
}

// otlpExport is one line of the file exporter's output.
type otlpExport struct {
	ResourceSpans []struct {
		Resource struct {
			Attributes []otlpAttr `json:"attributes"`
		} `json:"resource"`
		ScopeSpans []struct {
			Spans []otlpSpan `json:"spans"`
		} `json:"scopeSpans"`
	} `json:"resourceSpans"`
	ResourceMetrics []struct {
		ScopeMetrics []struct {
			Metrics []struct {
				Name string `json:"name"`
			} `json:"metrics"`
		} `json:"scopeMetrics"`
	} `json:"resourceMetrics"`
}

// read returns the spans and the metric names the collector has written so far, and the raw
// output.
func (c *collector) read(t *testing.T) ([]otlpSpan, map[string]bool, []byte) {
	t.Helper()
	raw, err := os.ReadFile(c.file)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		t.Fatalf("read collector output: %v", err)
	}
	var spans []otlpSpan
	metrics := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		var e otlpExport
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			continue // a line being written
		}
		for _, rs := range e.ResourceSpans {
			service := otlpSpan{Attributes: rs.Resource.Attributes}.attr("service.name")
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					s.Service = service
					spans = append(spans, s)
				}
			}
		}
		for _, rm := range e.ResourceMetrics {
			for _, sm := range rm.ScopeMetrics {
				for _, m := range sm.Metrics {
					metrics[m.Name] = true
				}
			}
		}
	}
	return spans, metrics, raw
}

// waitFor polls the collector's output until done accepts it or ctx ends; it returns the last
// output read.
func (c *collector) waitFor(ctx context.Context, t *testing.T, done func(spans []otlpSpan, metrics map[string]bool) bool) ([]otlpSpan, map[string]bool, []byte) {
	t.Helper()
	for {
		spans, metrics, raw := c.read(t)
		if done(spans, metrics) {
			return spans, metrics, raw
		}
		select {
		case <-ctx.Done():
			return spans, metrics, raw
		case <-time.After(200 * time.Millisecond):
		}
	}
}
