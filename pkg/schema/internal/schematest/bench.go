package schematest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/codeinterp/codeinterp/pkg/schema"
)

// RewriteFunc is a surface's RewriteRequest.
type RewriteFunc func(body []byte, o schema.Options) (schema.Request, error)

// benchSizes returns the body sizes the rewrite benchmarks run at.
func benchSizes() []struct {
	name string
	size int
} {
	return []struct {
		name string
		size int
	}{{"10KB", 10 << 10}, {"100KB", 100 << 10}, {"1MB", 1 << 20}}
}

// BenchLiveHeap is the live heap the LiveHeap benchmarks hold while they run. It stands for
// what a serving process keeps: the bodies of the requests in flight, buffered by Envoy's
// ext_proc stream and by the loop. A benchmark process otherwise holds almost nothing, so at the
// default GOGC the collector starts a cycle every few megabyte-sized operations, and the runtime
// hands the freed pages back to the kernel and faults them in again; with 64 MiB live a cycle
// comes about once per 64 MiB allocated, as in the server.
const BenchLiveHeap = 64 << 20

// BenchSizes runs one sub-benchmark, named surface+"/"+size, per body size (10KB, 100KB, 1MB):
// each builds its body with body(size) and runs op(body) b.N times, holding BenchLiveHeap of
// live memory when live is set.
func BenchSizes(b *testing.B, surface string, body func(size int) []byte, live bool, op func(body []byte) func() error) {
	for _, sz := range benchSizes() {
		body := body(sz.size)
		b.Run(surface+"/"+sz.name, func(b *testing.B) {
			benchLoop(b, body, live, op(body))
		})
	}
}

// benchLoop runs op b.N times over body, holding BenchLiveHeap of live memory when live is
// set.
func benchLoop(b *testing.B, body []byte, live bool, op func() error) {
	var heap []byte
	if live {
		heap = make([]byte, BenchLiveHeap)
		runtime.GC() // the next cycle's goal counts the live heap
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if err := op(); err != nil {
			b.Fatal(err)
		}
	}
	runtime.KeepAlive(heap)
}

// BenchRewrite returns one rewrite of body that must find the tool (found) or must not.
func BenchRewrite(rewrite RewriteFunc, found bool) func(body []byte) func() error {
	return func(body []byte) func() error {
		return func() error {
			r, err := rewrite(body, schema.Options{})
			if err != nil || r.Found != found {
				return fmt.Errorf("RewriteRequest: found %v, error %v", r.Found, err)
			}
			return nil
		}
	}
}

// BenchBaseline returns one BaselineRewrite of body with the function tool fnTool.
func BenchBaseline(fnTool func() []byte) func(body []byte) func() error {
	return func(body []byte) func() error {
		return func() error {
			if _, err := BaselineRewrite(body, fnTool); err != nil {
				return fmt.Errorf("baseline rewrite: %w", err)
			}
			return nil
		}
	}
}

// BenchCopy returns one bytes.Clone of body.
func BenchCopy(body []byte) func() error {
	return func() error {
		if len(bytes.Clone(body)) != len(body) {
			return fmt.Errorf("bytes.Clone lost bytes")
		}
		return nil
	}
}

// PassThroughBody returns body without the code_interpreter tool and tool_choice (of
// either surface's bench body).
func PassThroughBody(body []byte) []byte {
	for _, cut := range []string{
		`{"type":"code_interpreter","container":{"type":"auto"}},`,
		`{"type":"code_interpreter","container":{"type":"auto","memory_limit":"4g"}},`,
		`"tool_choice":{"type":"code_interpreter"},`,
	} {
		body = bytes.Replace(body, []byte(cut), nil, 1)
	}
	return body
}

// BaselineRewrite is the rewrite done the obvious way, with encoding/json: unmarshal the whole
// body into maps, swap the tool (for what fnTool returns, built on each call as the rewrite
// builds it), the choice and the stream fields, marshal. It is the reference the byte-level
// rewrite is compared with.
func BaselineRewrite(body []byte, fnTool func() []byte) ([]byte, error) {
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, err
	}
	var fn map[string]any
	if err := json.Unmarshal(fnTool(), &fn); err != nil {
		return nil, err
	}
	tools, _ := m["tools"].([]any)
	for i, t := range tools {
		if tm, ok := t.(map[string]any); ok && tm["type"] == "code_interpreter" {
			tools[i] = fn
		}
	}
	if tc, ok := m["tool_choice"].(map[string]any); ok && tc["type"] == "code_interpreter" {
		m["tool_choice"] = map[string]any{"type": "function", "name": schema.DefaultFunctionName}
	}
	if m["stream"] == true {
		m["stream"] = false
	}
	delete(m, "stream_options")
	return json.Marshal(m)
}

// BenchText returns about n bytes of prose with newlines and non-ASCII text.
func BenchText(n int) string {
	const para = "The sums of two dice cluster around seven — 世界 🎲, as the histogram shows. "
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		b.WriteString(para)
		if i%8 == 7 {
			b.WriteString("\n\n")
		}
	}
	return b.String()
}
