package messages

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
)

// FuzzRewrite: for any body, Rewrite either refuses it as the client's mistake or returns a
// body; a body it rewrote is valid JSON without the server tool, and one it did not touch is
// the input itself.
func FuzzRewrite(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","max_tokens":1,"tools":[{"type":"code_execution_20250522","name":"code_execution"}],"messages":[{"role":"user","content":"q"}]}`,
		`{"tools":[{"type":"code_execution_20250825","name":"code_execution"}],"tool_choice":{"type":"tool","name":"code_execution"},"container":"c","stream":true,"messages":[]}`,
		`{"tools":[{"type":"code_execution_20250825","name":"code_execution"}],"messages":[{"role":"assistant","content":[{"type":"server_tool_use","id":"srvtoolu_1","name":"bash_code_execution","input":{"command":"ls"}},{"type":"bash_code_execution_tool_result","tool_use_id":"srvtoolu_1","content":{"type":"bash_code_execution_result","stdout":"a","stderr":"","return_code":0,"content":[]}}]}]}`,
		`{"tools":[{"name":"code_execution","input_schema":{}},{"type":"code_execution_20250522","name":"code_execution"}]}`,
		`{"messages":[]}`, `[]`, `{`, `{"tools":"x"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		in := bytes.Clone(body)
		rq, err := Rewrite(body, Options{})
		if !bytes.Equal(in, body) {
			t.Fatalf("Rewrite modified its input")
		}
		if err != nil {
			var re *RequestError
			if !errors.As(err, &re) {
				t.Fatalf("Rewrite(%q): an error that is not the client's: %v", body, err)
			}
			return
		}
		if !rq.Found {
			if !bytes.Equal(rq.Body, body) {
				t.Fatalf("Rewrite(%q) changed a body without the tool: %q", body, rq.Body)
			}
			return
		}
		if !json.Valid(rq.Body) {
			t.Fatalf("Rewrite(%q) = %q: not valid JSON", body, rq.Body)
		}
		if bytes.Contains(rq.Body, []byte(`"`+rq.Version+`"`)) {
			t.Fatalf("Rewrite(%q) = %q: the server tool %s is still there", body, rq.Body, rq.Version)
		}
	})
}

// FuzzWriteSSE: for any final answer, WriteSSE either refuses it or writes events whose data
// lines are each valid JSON.
func FuzzWriteSSE(f *testing.F) {
	for _, s := range []string{
		`{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"hi"},{"type":"server_tool_use","id":"srvtoolu_1","name":"code_execution","input":{"code":"print(1)"}},{"type":"code_execution_tool_result","tool_use_id":"srvtoolu_1","content":{"type":"code_execution_result","stdout":"1\n","stderr":"","return_code":0,"content":[]}}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":1,"output_tokens":1},"container":{"id":"c","expires_at":"2026-12-01T00:00:00Z"}}`,
		`{"content":[]}`, `{}`, `[]`, `{"content":[{"type":"tool_use","id":"t","name":"n","input":{"a":"\u2028"}}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, final []byte) {
		var buf bytes.Buffer
		if err := WriteSSE(&buf, final); err != nil {
			return
		}
		for _, line := range bytes.Split(buf.Bytes(), []byte("\n")) {
			if data, ok := bytes.CutPrefix(line, []byte("data: ")); ok && !json.Valid(data) {
				t.Fatalf("WriteSSE(%q): data line %q is not JSON", final, data)
			}
		}
	})
}
