package schema_test

import (
	"testing"

	"github.com/codeinterp/codeinterp/pkg/schema/internal/jsonscan"
)

func BenchmarkResponsesSSE(b *testing.B) {
	final, err := Final(finalBenchInput())
	if err != nil {
		b.Fatalf("Final: %v", err)
	}
	stream, err := ResponsesSSE(final)
	if err != nil {
		b.Fatalf("ResponsesSSE: %v", err)
	}
	b.SetBytes(int64(len(final)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ResponsesSSE(final); err != nil {
			b.Fatalf("ResponsesSSE: %v", err)
		}
	}
	b.ReportMetric(float64(len(stream))/float64(len(final)), "stream/body")
}

func BenchmarkChatSSE(b *testing.B) {
	final := []byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"gpt-4.1","choices":[{"index":0,"message":{` +
		`"role":"assistant","content":` + string(jsonscan.AppendString(nil, finalBenchText(100<<10))) + `,"refusal":null},"finish_reason":"stop"}],` +
		`"usage":{"prompt_tokens":10,"completion_tokens":20,"total_tokens":30}}`)
	opts := []byte(`{"include_usage":true}`)
	stream, err := ChatSSE(final, opts)
	if err != nil {
		b.Fatalf("ChatSSE: %v", err)
	}
	b.SetBytes(int64(len(final)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ChatSSE(final, opts); err != nil {
			b.Fatalf("ChatSSE: %v", err)
		}
	}
	b.ReportMetric(float64(len(stream))/float64(len(final)), "stream/body")
}
