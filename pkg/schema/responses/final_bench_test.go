package responses

import (
	"strconv"
	"strings"
	"testing"

	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/schema/internal/jsonscan"
	"github.com/codeinterp/codeinterp/pkg/schema/internal/schematest"
)

// finalBenchCode returns about n bytes of Python.
func finalBenchCode(n int) string {
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		b.WriteString("rolls_" + strconv.Itoa(i) + " = [random.randint(1, 6) + random.randint(1, 6) for _ in range(1000)]\n")
	}
	return b.String()
}

// finalBenchInput is a two-round Responses loop whose final answer is about 100 KB: a reasoning
// item and a 20 KB code call in round 1 (10 KB of logs), and a 60 KB message in round 2.
func finalBenchInput() schema.FinalInput {
	code := finalBenchCode(20 << 10)
	round1 := `{"id":"resp_1","object":"response","created_at":1757603567,"status":"completed","model":"gpt-5","output":[` +
		`{"id":"rs_1","type":"reasoning","summary":[],"encrypted_content":"` + strings.Repeat("gAAAAB", 400) + `"},` +
		`{"id":"fc_1","type":"function_call","status":"completed","call_id":"call_1","name":"code_interpreter","arguments":` +
		string(jsonscan.AppendString(nil, `{"code":`+string(jsonscan.AppendString(nil, code))+`}`)) + `}],` +
		`"tool_choice":"auto","tools":[{"type":"function","name":"code_interpreter","parameters":{"type":"object"}}],` +
		`"usage":{"input_tokens":1000,"input_tokens_details":{"cached_tokens":0},"output_tokens":5000,"output_tokens_details":{"reasoning_tokens":100},"total_tokens":6000}}`
	round2 := `{"id":"resp_2","object":"response","created_at":1757603567,"status":"completed","model":"gpt-5","output":[` +
		`{"id":"msg_2","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","annotations":[` +
		`{"type":"container_file_citation","container_id":"cntr_1","file_id":"cfile_1","filename":"rolls.csv","start_index":0,"end_index":10}],` +
		`"logprobs":[],"text":` + string(jsonscan.AppendString(nil, schematest.BenchText(60<<10))) + `}]}],` +
		`"tool_choice":"auto","tools":[{"type":"function","name":"code_interpreter","parameters":{"type":"object"}}],` +
		`"usage":{"input_tokens":7000,"input_tokens_details":{"cached_tokens":1000},"output_tokens":15000,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":22000}}`
	return schema.FinalInput{
		FunctionName: "code_interpreter",
		Tool:         []byte(`{"type":"code_interpreter","container":{"type":"auto"}}`),
		Rounds: []schema.Round{
			{Body: []byte(round1), Calls: []schema.CodeCall{{
				ID: "ci_1", Status: "completed", Code: code, ContainerID: "cntr_1",
				Outputs: []schema.CodeOutput{{Type: schema.CodeOutputLogs, Logs: schematest.BenchText(10 << 10)}},
			}}},
			{Body: []byte(round2)},
		},
	}
}

func BenchmarkFinal(b *testing.B) {
	in := finalBenchInput()
	out, err := Final(in)
	if err != nil {
		b.Fatalf("Final: %v", err)
	}
	b.SetBytes(int64(len(out)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Final(in); err != nil {
			b.Fatalf("Final: %v", err)
		}
	}
}

func BenchmarkResponsesSSE(b *testing.B) {
	final, err := Final(finalBenchInput())
	if err != nil {
		b.Fatalf("Final: %v", err)
	}
	stream, err := SSE(final)
	if err != nil {
		b.Fatalf("ResponsesSSE: %v", err)
	}
	b.SetBytes(int64(len(final)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := SSE(final); err != nil {
			b.Fatalf("ResponsesSSE: %v", err)
		}
	}
	b.ReportMetric(float64(len(stream))/float64(len(final)), "stream/body")
}
