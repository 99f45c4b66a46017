package chat_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"

	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/schema/chat"
)

// FuzzUpstreamStream: the chunk stream of any answer (its text, refusal, a code call and a
// client call, in the API's shape) reads back through the UpstreamStream as that answer: the
// SDK sees the same completion, and the loop the same turn. And the client's stream of a loop
// whose last round streamed accumulates to the plain answer.
func FuzzUpstreamStream(f *testing.F) {
	f.Add("It printed 42.", "", `{"code":"print(42)"}`, "", "stop")
	f.Add("", "", `{"code":"print(1)"}`, `{"city": "Paris"}`, "tool_calls")
	f.Add(strings.Repeat("ünïcode \u2028 ", 40), "no", "{", "{}", "length")
	f.Add("a\xffb", "\x00", `{"code":"x = \"\\u2029\""}`, "\n", "")
	f.Fuzz(func(t *testing.T, content, refusal, codeArgs, clientArgs, finish string) {
		msg := map[string]any{"role": "assistant", "content": nil, "refusal": nil}
		if content != "" {
			msg["content"] = content
		}
		if refusal != "" {
			msg["refusal"] = refusal
		}
		var calls []any
		if codeArgs != "" {
			calls = append(calls, map[string]any{"id": "call_c", "type": "function", "function": map[string]any{"name": "code_interpreter", "arguments": codeArgs}})
		}
		if clientArgs != "" {
			calls = append(calls, map[string]any{"id": "call_w", "type": "function", "function": map[string]any{"name": "weather", "arguments": clientArgs}})
		}
		if calls != nil {
			msg["tool_calls"] = calls
		}
		choice := map[string]any{"index": 0, "message": msg, "logprobs": nil, "finish_reason": nil}
		if finish != "" {
			choice["finish_reason"] = finish
		}
		body, err := json.Marshal(map[string]any{"id": "cc-f", "object": "chat.completion", "created": 9, "model": "m",
			"choices": []any{choice}, "usage": map[string]any{"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}})
		if err != nil {
			t.Fatal(err)
		}
		stream, err := chat.SSE(body, []byte(`{"include_usage":true}`))
		if err != nil {
			t.Fatalf("SSE(%s): %v", body, err)
		}
		x, err := chat.Surface{}.NewExchange([]byte(streamRequest), schema.Options{})
		if err != nil {
			t.Fatal(err)
		}
		answer, err := schema.ReadEventStream(bytes.NewReader(stream), 1<<22, x.(schema.StreamReader).ReadStream(), func(d []byte) error {
			if !json.Valid(d) {
				t.Fatalf("relayed %q: not JSON", d)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("read the stream of %s: %v", body, err)
		}
		var want, got openai.ChatCompletion
		if err := json.Unmarshal(body, &want); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(answer, &got); err != nil {
			t.Fatalf("the stream of %s built %s: %v", body, answer, err)
		}
		if w, g := viewOf(want), viewOf(got); !equalViews(w, g) {
			t.Fatalf("the stream of %s built %s:\nwant %+v\ngot  %+v", body, answer, w, g)
		}
		wantTurn, err := chat.ParseTurn(body, "")
		if err != nil {
			t.Fatal(err)
		}
		gotTurn, err := x.ParseTurn(answer)
		if err != nil {
			t.Fatalf("the loop reads %s: %v", answer, err)
		}
		if len(wantTurn.Calls) != len(gotTurn.Calls) || wantTurn.ClientCalls != gotTurn.ClientCalls ||
			(len(wantTurn.Calls) == 1 && wantTurn.Calls[0].Code != gotTurn.Calls[0].Code) {
			t.Fatalf("turn of %s: want %+v, got %+v", answer, wantTurn, gotTurn)
		}
		if codeArgs == "" || clientArgs != "" {
			// The answer is the loop's last: its client's stream is the plain answer.
			rounds := []round{{body: codeAnswer}, {body: string(body), stream: string(stream)}}
			client, _ := runStream(t, streamRequest, rounds)
			if w, g := viewOf(plainAnswer(t, rounds)), viewOf(accumulate(t, client)); !equalViews(w, g) {
				t.Fatalf("client stream of %s:\nwant %+v\ngot  %+v", body, w, g)
			}
		}
	})
}

// equalViews reports whether two views are the same.
func equalViews(a, b completionView) bool {
	ja, _ := json.Marshal(a) // views marshal always
	jb, _ := json.Marshal(b)
	return bytes.Equal(ja, jb)
}

// FuzzUpstreamStreamBody: whatever an upstream streams, reading it fails or builds a JSON
// answer the loop reads, and every chunk the client's stream gets meanwhile is JSON.
func FuzzUpstreamStreamBody(f *testing.F) {
	f.Add([]byte(upstreamSSE))
	f.Add([]byte(delta(`{"content":"a"}`) + "data: [DONE]\n\n"))
	f.Add([]byte(`data: {"choices":[{"index":0,"delta":{"tool_calls":[{"id":"x","function":{"name":"code_interpreter"}},{"function":{"arguments":"{}"}}]}}]}` + "\n\ndata: [DONE]\n\n"))
	f.Add([]byte(`data: {"error":{"message":"m"}}` + "\n\n"))
	f.Fuzz(func(t *testing.T, body []byte) {
		x, err := chat.Surface{}.NewExchange([]byte(streamRequest), schema.Options{})
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		sink := x.Events(&out)
		answer, err := schema.ReadEventStream(bytes.NewReader(body), 1<<16, x.(schema.StreamReader).ReadStream(), func(d []byte) error {
			if !json.Valid(d) {
				t.Fatalf("relayed %q: not JSON", d)
			}
			return sink.Event(schema.Event{Kind: schema.EventDelta, Round: 0, Body: d})
		})
		if err != nil {
			return
		}
		if !json.Valid(answer) {
			t.Fatalf("stream %q built %q: not JSON", body, answer)
		}
		if _, err := x.ParseTurn(answer); err != nil {
			t.Fatalf("stream %q built %q: %v", body, answer, err)
		}
		for _, ev := range strings.Split(out.String(), "\n\n") {
			if data, ok := strings.CutPrefix(ev, "data: "); ok && !json.Valid([]byte(data)) {
				t.Fatalf("stream %q: the client got %q", body, data)
			}
			if strings.ContainsAny(strings.TrimPrefix(ev, "\n"), "\n\r\u2028\u2029") {
				t.Fatalf("stream %q: an event of several lines %q", body, ev)
			}
		}
	})
}
