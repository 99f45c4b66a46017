package messages

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/pkg/schema"
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

// FuzzWriteSSE: for any final answer, writeSSE either refuses it or writes events whose data
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
		if err := writeSSE(&buf, final); err != nil {
			return
		}
		for _, line := range bytes.Split(buf.Bytes(), []byte("\n")) {
			if data, ok := bytes.CutPrefix(line, []byte("data: ")); ok && !json.Valid(data) {
				t.Fatalf("writeSSE(%q): data line %q is not JSON", final, data)
			}
		}
	})
}

// FuzzUpstreamStream: for any upstream event stream, the reader either refuses it or builds a
// JSON answer; what it relays goes through the client's progressive stream, and with the
// answer's round, its calls and the final answer the client's stream is well formed: every
// data line JSON, the blocks started in index order, as many as the final answer has.
func FuzzUpstreamStream(f *testing.F) {
	f.Add([]byte(upstreamSSE))
	var b bytes.Buffer
	if err := writeSSE(&b, []byte(streamAnswer2)); err != nil {
		f.Fatal(err)
	}
	f.Add(b.Bytes())
	f.Add([]byte("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"content\":[]}}\n\ndata: {\"type\":\"message_stop\"}\n\n"))
	f.Fuzz(fuzzBody)
}

// fuzzBody is FuzzUpstreamStream's check of one stream.
func fuzzBody(t *testing.T, body []byte) {
	sx, err := Surface{}.NewExchange([]byte(streamRequest), schema.Options{})
	if err != nil {
		t.Fatal(err)
	}
	x := sx.(*exchange)
	var out bytes.Buffer
	sink := x.Events(&out)
	if err := sink.Event(schema.Event{Kind: schema.EventRound, Body: []byte(answer2)}); err != nil {
		t.Fatalf("first round: %v", err)
	}
	answer, err := schema.ReadEventStream(bytes.NewReader(body), 1<<16, x.ReadStream(), func(d []byte) error {
		if !json.Valid(d) {
			t.Fatalf("relayed %q: not JSON", d)
		}
		return sink.Event(schema.Event{Kind: schema.EventDelta, Round: 1, Body: d})
	})
	if err != nil {
		return
	}
	if !json.Valid(answer) {
		t.Fatalf("stream %q built %q: not JSON", body, answer)
	}
	turn, err := x.ParseTurn(answer)
	if err != nil {
		t.Fatalf("stream %q built %q: %v", body, answer, err)
	}
	if err := sink.Event(schema.Event{Kind: schema.EventRound, Round: 1, Body: answer}); err != nil {
		t.Fatalf("stream %q, round of %q: %v", body, answer, err)
	}
	calls := make([]schema.CodeCall, len(turn.Calls))
	for i := range calls {
		calls[i] = schema.CodeCall{ID: "ci", Status: "incomplete"}
		for _, k := range []schema.EventKind{schema.EventCallStarted, schema.EventCallDone} {
			if err := sink.Event(schema.Event{Kind: k, Round: 1, Call: &calls[i]}); err != nil {
				t.Fatalf("stream %q, call %d of %q: %v", body, i, answer, err)
			}
		}
	}
	final, err := x.Final([]schema.Round{{Body: []byte(answer2)}, {Body: answer, Calls: calls}}, "")
	if err != nil {
		t.Fatalf("final of %q: %v", answer, err)
	}
	if err := sink.Event(schema.Event{Kind: schema.EventDone, Body: final}); err != nil {
		t.Fatalf("done %q: %v", final, err)
	}
	starts := 0
	for _, line := range bytes.Split(out.Bytes(), []byte("\n")) {
		data, ok := bytes.CutPrefix(line, []byte("data: "))
		if !ok {
			continue
		}
		if !json.Valid(data) {
			t.Fatalf("stream %q: the client's data line %q is not JSON", body, data)
		}
		if gjson.GetBytes(data, "type").String() == "content_block_start" {
			if i := gjson.GetBytes(data, "index").Int(); i != int64(starts) {
				t.Fatalf("stream %q: block %d started at index %d:\n%s", body, starts, i, out.Bytes())
			}
			starts++
		}
	}
	if n := len(gjson.GetBytes(final, "content").Array()); n != starts {
		t.Fatalf("stream %q: %d blocks streamed, the answer has %d:\n%s\n%s", body, starts, n, out.Bytes(), final)
	}
}
