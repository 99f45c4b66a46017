package chat

import (
	"testing"

	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/schema/internal/jsonscan"
	"github.com/codeinterp/codeinterp/pkg/schema/internal/schematest"
)

func BenchmarkFinalChat(b *testing.B) {
	body := `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"gpt-4.1","choices":[{"index":0,"message":{` +
		`"role":"assistant","content":` + string(jsonscan.AppendString(nil, schematest.BenchText(100<<10))) + `,"refusal":null},"finish_reason":"stop"}],` +
		`"usage":{"prompt_tokens":10,"completion_tokens":20,"total_tokens":30}}`
	in := schema.FinalInput{FunctionName: "code_interpreter", Rounds: []schema.Round{
		{Body: []byte(`{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}`)},
		{Body: []byte(body)},
	}}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Final(in); err != nil {
			b.Fatalf("Final: %v", err)
		}
	}
}

func BenchmarkChatSSE(b *testing.B) {
	final := []byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"gpt-4.1","choices":[{"index":0,"message":{` +
		`"role":"assistant","content":` + string(jsonscan.AppendString(nil, schematest.BenchText(100<<10))) + `,"refusal":null},"finish_reason":"stop"}],` +
		`"usage":{"prompt_tokens":10,"completion_tokens":20,"total_tokens":30}}`)
	opts := []byte(`{"include_usage":true}`)
	stream, err := SSE(final, opts)
	if err != nil {
		b.Fatalf("ChatSSE: %v", err)
	}
	b.SetBytes(int64(len(final)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := SSE(final, opts); err != nil {
			b.Fatalf("ChatSSE: %v", err)
		}
	}
	b.ReportMetric(float64(len(stream))/float64(len(final)), "stream/body")
}
