package responses

import (
	"bytes"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/schema/internal/jsonscan"
)

// reqBenchSizes returns the body sizes the rewrite benchmarks run at.
func reqBenchSizes() []struct {
	name string
	size int
} {
	return []struct {
		name string
		size int
	}{{"10KB", 10 << 10}, {"100KB", 100 << 10}, {"1MB", 1 << 20}}
}

// reqBenchBody returns a request body of at least size bytes: a conversation of
// user and assistant turns (with escapes and non-ASCII text), four tools one of which is
// code_interpreter, a hosted tool_choice, and stream:true with stream_options.
func reqBenchBody(size int) []byte {
	var msgs []string
	turn := 0
	text := strings.Repeat(`Some text with \"quotes\", a tab\t, caf\u00e9 and 😀 and numbers 12345. `, 8)
	for n := 0; n < size; turn++ {
		var m string
		switch {
		case turn%2 == 0:
			m = fmt.Sprintf(`{"role":"user","content":"Question %d: %s"}`, turn, text)
		case turn%4 == 1:
			m = fmt.Sprintf(`{"type":"function_call","id":"fc_%d","call_id":"call_%d","name":"lookup","arguments":"{\"q\":\"%d\"}"},`+
				`{"type":"function_call_output","call_id":"call_%d","output":"%s"}`, turn, turn, turn, turn, text)
		default:
			m = fmt.Sprintf(`{"role":"assistant","content":"Answer %d: %s"}`, turn, text)
		}
		msgs = append(msgs, m)
		n += len(m) + 1
	}
	list := "[" + strings.Join(msgs, ",") + "]"
	return []byte(`{"model":"gpt-5","input":` + list + `,"tools":[` +
		`{"type":"function","name":"lookup","parameters":{"type":"object","properties":{"q":{"type":"string"}}}},` +
		`{"type":"code_interpreter","container":{"type":"auto","memory_limit":"4g"}},` +
		`{"type":"web_search"},{"type":"function","name":"b","parameters":{}}],` +
		`"tool_choice":{"type":"code_interpreter"},"stream":true,"stream_options":{"include_obfuscation":false},` +
		`"metadata":{"session_id":"s1"},"temperature":0.2}`)
}

// reqBenchLiveHeap is the live heap the LiveHeap benchmarks hold while they run. It stands for
// what a serving process keeps: the bodies of the requests in flight, buffered by Envoy's
// ext_proc stream and by the loop. A benchmark process otherwise holds almost nothing, so at the
// default GOGC the collector starts a cycle every few megabyte-sized operations, and the runtime
// hands the freed pages back to the kernel and faults them in again; with 64 MiB live a cycle
// comes about once per 64 MiB allocated, as in the server.
const reqBenchLiveHeap = 64 << 20

// reqBenchLoop runs op b.N times over body, holding reqBenchLiveHeap of live memory when live is
// set.
func reqBenchLoop(b *testing.B, body []byte, live bool, op func() error) {
	var heap []byte
	if live {
		heap = make([]byte, reqBenchLiveHeap)
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

// reqBenchRewrite is one RewriteRequest of body that must find the tool.
func reqBenchRewrite(body []byte) func() error {
	return func() error {
		r, err := RewriteRequest(body, schema.Options{})
		if err != nil || !r.Found {
			return fmt.Errorf("RewriteRequest: found %v, error %v", r.Found, err)
		}
		return nil
	}
}

// reqBenchBaseline is one reqBaselineRewrite of body.
func reqBenchBaseline(body []byte) func() error {
	return func() error {
		if _, err := reqBaselineRewrite(body); err != nil {
			return fmt.Errorf("baseline rewrite: %w", err)
		}
		return nil
	}
}

// BenchmarkRewriteRequest measures RewriteRequest on conversations of 10 KB to 1 MB at the
// default GOGC, in a process that holds almost no other memory: the collector runs every few
// operations on the large sizes. BenchmarkRewriteRequestLiveHeap is the same work in a process
// that holds what a server holds.
func BenchmarkRewriteRequest(b *testing.B) {
	for _, sz := range reqBenchSizes() {
		body := reqBenchBody(sz.size)
		b.Run("responses/"+sz.name, func(b *testing.B) {
			reqBenchLoop(b, body, false, reqBenchRewrite(body))
		})
	}
}

// BenchmarkRewriteRequestLiveHeap is BenchmarkRewriteRequest with reqBenchLiveHeap of live
// memory held, still at the default GOGC.
func BenchmarkRewriteRequestLiveHeap(b *testing.B) {
	for _, sz := range reqBenchSizes() {
		body := reqBenchBody(sz.size)
		b.Run("responses/"+sz.name, func(b *testing.B) {
			reqBenchLoop(b, body, true, reqBenchRewrite(body))
		})
	}
}

// BenchmarkRewriteRequestScan measures the scan RewriteRequest makes of a body alone, without
// building the new body: the part of the rewrite that does not depend on the collector.
func BenchmarkRewriteRequestScan(b *testing.B) {
	spec := dialect.Spec
	for _, sz := range reqBenchSizes() {
		body := reqBenchBody(sz.size)
		b.Run("responses/"+sz.name, func(b *testing.B) {
			reqBenchLoop(b, body, false, func() error {
				_, err := jsonscan.Scan(body, spec, nil)
				return err
			})
		})
	}
}

// BenchmarkRewriteRequestPassThrough measures RewriteRequest on bodies without a
// code_interpreter tool (but with other tools), which come back as they are: a served request
// that does not use the tool pays only this.
func BenchmarkRewriteRequestPassThrough(b *testing.B) {
	for _, sz := range reqBenchSizes() {
		body := reqBenchPassThroughBody(sz.size)
		b.Run("responses/"+sz.name, func(b *testing.B) {
			reqBenchLoop(b, body, false, func() error {
				r, err := RewriteRequest(body, schema.Options{})
				if err != nil || r.Found {
					return fmt.Errorf("RewriteRequest: found %v, error %v", r.Found, err)
				}
				return nil
			})
		})
	}
}

// reqBenchPassThroughBody is reqBenchBody without the code_interpreter tool and tool_choice.
func reqBenchPassThroughBody(size int) []byte {
	body := reqBenchBody(size)
	for _, cut := range []string{
		`{"type":"code_interpreter","container":{"type":"auto"}},`,
		`{"type":"code_interpreter","container":{"type":"auto","memory_limit":"4g"}},`,
		`"tool_choice":{"type":"code_interpreter"},`,
	} {
		body = bytes.Replace(body, []byte(cut), nil, 1)
	}
	return body
}

// BenchmarkRewriteRequestBaseline does the same rewrite the obvious way, with encoding/json:
// unmarshal the whole body into maps, swap the tool, the choice and the stream fields, marshal.
// It is the reference the byte-level rewrite is compared with, at the default GOGC like
// BenchmarkRewriteRequest.
func BenchmarkRewriteRequestBaseline(b *testing.B) {
	for _, sz := range reqBenchSizes() {
		body := reqBenchBody(sz.size)
		b.Run("responses/"+sz.name, func(b *testing.B) {
			reqBenchLoop(b, body, false, reqBenchBaseline(body))
		})
	}
}

// BenchmarkRewriteRequestBaselineLiveHeap is BenchmarkRewriteRequestBaseline with
// reqBenchLiveHeap of live memory held, the reference for BenchmarkRewriteRequestLiveHeap.
func BenchmarkRewriteRequestBaselineLiveHeap(b *testing.B) {
	for _, sz := range reqBenchSizes() {
		body := reqBenchBody(sz.size)
		b.Run("responses/"+sz.name, func(b *testing.B) {
			reqBenchLoop(b, body, true, reqBenchBaseline(body))
		})
	}
}

// reqBaselineRewrite is the encoding/json rewrite BenchmarkRewriteRequestBaseline measures.
func reqBaselineRewrite(body []byte) ([]byte, error) {
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, err
	}
	var fn map[string]any
	if err := json.Unmarshal(dialect.FunctionTool(schema.DefaultFunctionName, schema.DefaultFunctionDescription), &fn); err != nil {
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

// BenchmarkRewriteRequestCopy measures bytes.Clone of the same bodies at the default GOGC: the
// floor for any rewrite that returns its result in new memory, which RewriteRequest must (its
// caller owns and may modify the result).
func BenchmarkRewriteRequestCopy(b *testing.B) {
	for _, sz := range reqBenchSizes() {
		body := reqBenchBody(sz.size)
		b.Run("responses/"+sz.name, func(b *testing.B) {
			reqBenchLoop(b, body, false, func() error {
				if len(bytes.Clone(body)) != len(body) {
					return fmt.Errorf("bytes.Clone lost bytes")
				}
				return nil
			})
		})
	}
}
