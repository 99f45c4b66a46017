package schema

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
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

// reqBenchBody returns a request body of surface s of at least size bytes: a conversation of
// user and assistant turns (with escapes and non-ASCII text), four tools one of which is
// code_interpreter, a hosted tool_choice, and stream:true with stream_options.
func reqBenchBody(s Surface, size int) []byte {
	var msgs []string
	turn := 0
	text := strings.Repeat(`Some text with \"quotes\", a tab\t, caf\u00e9 and 😀 and numbers 12345. `, 8)
	for n := 0; n < size; turn++ {
		var m string
		switch {
		case turn%2 == 0:
			m = fmt.Sprintf(`{"role":"user","content":"Question %d: %s"}`, turn, text)
		case s == Responses && turn%4 == 1:
			m = fmt.Sprintf(`{"type":"function_call","id":"fc_%d","call_id":"call_%d","name":"lookup","arguments":"{\"q\":\"%d\"}"},`+
				`{"type":"function_call_output","call_id":"call_%d","output":"%s"}`, turn, turn, turn, turn, text)
		default:
			m = fmt.Sprintf(`{"role":"assistant","content":"Answer %d: %s"}`, turn, text)
		}
		msgs = append(msgs, m)
		n += len(m) + 1
	}
	list := "[" + strings.Join(msgs, ",") + "]"
	if s == Chat {
		return []byte(`{"model":"gpt-4.1","messages":` + list + `,"tools":[` +
			`{"type":"function","function":{"name":"lookup","parameters":{"type":"object","properties":{"q":{"type":"string"}}}}},` +
			`{"type":"code_interpreter","container":{"type":"auto"}},` +
			`{"type":"function","function":{"name":"a","parameters":{}}},{"type":"function","function":{"name":"b","parameters":{}}}],` +
			`"tool_choice":{"type":"code_interpreter"},"stream":true,"stream_options":{"include_usage":true},"temperature":0.2}`)
	}
	return []byte(`{"model":"gpt-5","input":` + list + `,"tools":[` +
		`{"type":"function","name":"lookup","parameters":{"type":"object","properties":{"q":{"type":"string"}}}},` +
		`{"type":"code_interpreter","container":{"type":"auto","memory_limit":"4g"}},` +
		`{"type":"web_search"},{"type":"function","name":"b","parameters":{}}],` +
		`"tool_choice":{"type":"code_interpreter"},"stream":true,"stream_options":{"include_obfuscation":false},` +
		`"metadata":{"session_id":"s1"},"temperature":0.2}`)
}

// BenchmarkRewriteRequest measures RewriteRequest on conversations of 10 KB to 1 MB.
func BenchmarkRewriteRequest(b *testing.B) {
	for _, s := range []Surface{Responses, Chat} {
		for _, sz := range reqBenchSizes() {
			body := reqBenchBody(s, sz.size)
			b.Run(s.String()+"/"+sz.name, func(b *testing.B) {
				b.SetBytes(int64(len(body)))
				b.ReportAllocs()
				for b.Loop() {
					r, err := RewriteRequest(s, body, Options{})
					if err != nil || !r.Found {
						b.Fatalf("RewriteRequest: found %v, error %v", r.Found, err)
					}
				}
			})
		}
	}
}

// BenchmarkRewriteRequestBaseline does the same rewrite the obvious way, with encoding/json:
// unmarshal the whole body into maps, swap the tool, the choice and the stream fields, marshal.
// It is the reference the byte-level rewrite is compared with.
func BenchmarkRewriteRequestBaseline(b *testing.B) {
	for _, s := range []Surface{Responses, Chat} {
		for _, sz := range reqBenchSizes() {
			body := reqBenchBody(s, sz.size)
			b.Run(s.String()+"/"+sz.name, func(b *testing.B) {
				b.SetBytes(int64(len(body)))
				b.ReportAllocs()
				for b.Loop() {
					if _, err := reqBaselineRewrite(s, body); err != nil {
						b.Fatalf("baseline rewrite: %v", err)
					}
				}
			})
		}
	}
}

// reqBaselineRewrite is the encoding/json rewrite BenchmarkRewriteRequestBaseline measures.
func reqBaselineRewrite(s Surface, body []byte) ([]byte, error) {
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, err
	}
	var fn map[string]any
	if err := json.Unmarshal(reqFunctionTool(s, DefaultFunctionName, DefaultFunctionDescription), &fn); err != nil {
		return nil, err
	}
	tools, _ := m["tools"].([]any)
	for i, t := range tools {
		if tm, ok := t.(map[string]any); ok && tm["type"] == "code_interpreter" {
			tools[i] = fn
		}
	}
	if tc, ok := m["tool_choice"].(map[string]any); ok && tc["type"] == "code_interpreter" {
		m["tool_choice"] = map[string]any{"type": "function", "name": DefaultFunctionName}
	}
	if m["stream"] == true {
		m["stream"] = false
	}
	delete(m, "stream_options")
	return json.Marshal(m)
}
