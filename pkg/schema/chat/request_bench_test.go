package chat

import (
	"fmt"
	"strings"
	"testing"

	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/schema/internal/jsonscan"
	"github.com/codeinterp/codeinterp/pkg/schema/internal/schematest"
)

// reqBenchSurface prefixes the name of each sub-benchmark: the surface, then the size.
const reqBenchSurface = "chat_completions"

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
		default:
			m = fmt.Sprintf(`{"role":"assistant","content":"Answer %d: %s"}`, turn, text)
		}
		msgs = append(msgs, m)
		n += len(m) + 1
	}
	list := "[" + strings.Join(msgs, ",") + "]"
	return []byte(`{"model":"gpt-4.1","messages":` + list + `,"tools":[` +
		`{"type":"function","function":{"name":"lookup","parameters":{"type":"object","properties":{"q":{"type":"string"}}}}},` +
		`{"type":"code_interpreter","container":{"type":"auto"}},` +
		`{"type":"function","function":{"name":"a","parameters":{}}},{"type":"function","function":{"name":"b","parameters":{}}}],` +
		`"tool_choice":{"type":"code_interpreter"},"stream":true,"stream_options":{"include_usage":true},"temperature":0.2}`)
}

// reqBenchPassThroughBody is reqBenchBody without the code_interpreter tool and tool_choice.
func reqBenchPassThroughBody(size int) []byte {
	return schematest.PassThroughBody(reqBenchBody(size))
}

// reqBenchFunctionTool is the function tool the baseline puts in place of code_interpreter.
func reqBenchFunctionTool() []byte {
	return dialect.FunctionTool(schema.DefaultFunctionName, schema.DefaultFunctionDescription)
}

// BenchmarkRewriteRequest measures RewriteRequest on conversations of 10 KB to 1 MB at the
// default GOGC, in a process that holds almost no other memory: the collector runs every few
// operations on the large sizes. BenchmarkRewriteRequestLiveHeap is the same work in a process
// that holds what a server holds.
func BenchmarkRewriteRequest(b *testing.B) {
	schematest.BenchSizes(b, reqBenchSurface, reqBenchBody, false, schematest.BenchRewrite(RewriteRequest, true))
}

// BenchmarkRewriteRequestLiveHeap is BenchmarkRewriteRequest with schematest.BenchLiveHeap of
// live memory held, still at the default GOGC.
func BenchmarkRewriteRequestLiveHeap(b *testing.B) {
	schematest.BenchSizes(b, reqBenchSurface, reqBenchBody, true, schematest.BenchRewrite(RewriteRequest, true))
}

// BenchmarkRewriteRequestScan measures the scan RewriteRequest makes of a body alone, without
// building the new body: the part of the rewrite that does not depend on the collector.
func BenchmarkRewriteRequestScan(b *testing.B) {
	spec := dialect.Spec
	schematest.BenchSizes(b, reqBenchSurface, reqBenchBody, false, func(body []byte) func() error {
		return func() error {
			_, err := jsonscan.Scan(body, spec, nil)
			return err
		}
	})
}

// BenchmarkRewriteRequestPassThrough measures RewriteRequest on bodies without a
// code_interpreter tool (but with other tools), which come back as they are: a served request
// that does not use the tool pays only this.
func BenchmarkRewriteRequestPassThrough(b *testing.B) {
	schematest.BenchSizes(b, reqBenchSurface, reqBenchPassThroughBody, false, schematest.BenchRewrite(RewriteRequest, false))
}

// BenchmarkRewriteRequestBaseline does the same rewrite the obvious way, with encoding/json
// (schematest.BaselineRewrite): unmarshal the whole body into maps, swap the tool, the choice
// and the stream fields, marshal. It is the reference the byte-level rewrite is compared with,
// at the default GOGC like BenchmarkRewriteRequest.
func BenchmarkRewriteRequestBaseline(b *testing.B) {
	schematest.BenchSizes(b, reqBenchSurface, reqBenchBody, false, schematest.BenchBaseline(reqBenchFunctionTool))
}

// BenchmarkRewriteRequestBaselineLiveHeap is BenchmarkRewriteRequestBaseline with
// schematest.BenchLiveHeap of live memory held, the reference for BenchmarkRewriteRequestLiveHeap.
func BenchmarkRewriteRequestBaselineLiveHeap(b *testing.B) {
	schematest.BenchSizes(b, reqBenchSurface, reqBenchBody, true, schematest.BenchBaseline(reqBenchFunctionTool))
}

// BenchmarkRewriteRequestCopy measures bytes.Clone of the same bodies at the default GOGC: the
// floor for any rewrite that returns its result in new memory, which RewriteRequest must (its
// caller owns and may modify the result).
func BenchmarkRewriteRequestCopy(b *testing.B) {
	schematest.BenchSizes(b, reqBenchSurface, reqBenchBody, false, schematest.BenchCopy)
}
