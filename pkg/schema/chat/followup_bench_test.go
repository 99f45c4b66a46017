package chat

import (
	"testing"

	"github.com/codeinterp/codeinterp/pkg/schema"
)

// BenchmarkFollowUp measures one round's body work on a 100 KB conversation: reading the model's
// turn and building the follow-up from the previous request, the turn and the call's output.
func BenchmarkFollowUp(b *testing.B) {
	resp := []byte(`{"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"finish_reason":"tool_calls",` +
		`"message":{"role":"assistant","content":null,"refusal":null,"annotations":[],"tool_calls":[` +
		`{"id":"call_1","type":"function","function":{"name":"code_interpreter","arguments":"{\"code\":\"import pandas as pd\\nprint(pd.Series([1,2,3]).mean())\"}"}}]}}],` +
		`"usage":{"prompt_tokens":25000,"completion_tokens":40,"total_tokens":25040}}`)
	rw, err := RewriteRequest(reqBenchBody(100<<10), schema.Options{})
	if err != nil {
		b.Fatalf("RewriteRequest: %v", err)
	}
	b.Run("chat_completions/100KB", func(b *testing.B) {
		b.SetBytes(int64(len(rw.Body)))
		b.ReportAllocs()
		for b.Loop() {
			turn, err := ParseTurn(resp, "")
			if err != nil || len(turn.Calls) != 1 || turn.Calls[0].ArgsErr != nil {
				b.Fatalf("ParseTurn: %+v, %v", turn, err)
			}
			next, err := FollowUp(rw.Body, resp, []schema.CallOutput{{CallID: turn.Calls[0].CallID, Output: "2.0\n"}}, schema.FollowUpOptions{DropToolChoice: true})
			if err != nil || len(next) <= len(rw.Body) {
				b.Fatalf("FollowUp: %d bytes, %v", len(next), err)
			}
		}
	})
}
