package e2e

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	configv1 "github.com/codeinterp/codeinterp/api/codeinterp/config/v1"
	"github.com/codeinterp/codeinterp/test/e2e/fakemodel"
	"github.com/codeinterp/codeinterp/test/e2e/harness"
)

// The span of Envoy's ext_proc gRPC client, whose context Envoy injects into the stream's
// metadata (reference otel-genai.md §5.2).
const extProcClientSpan = "async envoy.service.ext_proc.v3.ExternalProcessor.Process egress"

// Issue 27: a Responses conversation with two code rounds through a real Envoy 1.40 whose
// OpenTelemetry tracer exports to a real OpenTelemetry Collector, and codeinterp exporting to
// the same collector (over OTLP/HTTP; Envoy uses OTLP/gRPC). Read back from the collector's
// file output: one trace, with Envoy's spans, invoke_agent under Envoy's ext_proc span, three
// chat spans (Envoy's first call and the two follow-ups) and two execute_tool spans under it,
// the follow-up calls' Envoy spans under their chat spans; the GenAI attributes; no credential
// and no content (capture_content is off); the GenAI metrics.
func TestTracingThroughEnvoyAndCollector(t *testing.T) {
	harness.RequireEnvoy(t)
	col := startCollector(t)
	// Export at once rather than every 5 s (spans) and every minute (metrics).
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
	t.Setenv("OTEL_METRIC_EXPORT_INTERVAL", "500")
	env := NewEnv(t, EnvOptions{Configure: func(c *configv1.Config) {
		c.Tracing = &configv1.Tracing{Enabled: true, Endpoint: "http://" + col.httpAddr, Protocol: "http/protobuf", ServiceName: "codeinterp-e2e"}
	}})
	s := env.Serve(t, harness.StartRealTraced(t, env.HarnessOptions(), col.grpcAddr))

	const secret = "sk-trace-secret-123"
	s.Model.Enqueue("/v1/responses",
		fakemodel.JSON(fakemodel.Responses(testModel, usage(10, 5), fakemodel.FunctionCall("code_interpreter", "call_1", codeArgs("print(6*7)")))),
		fakemodel.JSON(fakemodel.Responses(testModel, usage(20, 5), fakemodel.FunctionCall("code_interpreter", "call_2", codeArgs("raise ValueError('nope')")))),
		fakemodel.JSON(fakemodel.Responses(testModel, usage(30, 5), fakemodel.Message("It is 42."))))
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, s.Front.URL()+"/v1/responses",
		strings.NewReader(`{"model":"`+testModel+`","input":"compute","tools":[{"type":"code_interpreter","container":{"type":"auto"}}]}`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+secret)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "answer: %s", body)
	assert.Contains(t, string(body), "It is 42.")

	upstream := s.Model.RequestsTo("/v1/responses")
	require.Len(t, upstream, 3, "the first call and two follow-ups reach the model")
	for i, r := range upstream {
		assert.NotEmpty(t, r.Header.Get("Traceparent"), "upstream call %d carries a traceparent (Envoy's upstream span)", i)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 45*time.Second)
	defer cancel()
	count := func(spans []otlpSpan, name string) int {
		n := 0
		for _, sp := range spans {
			if sp.Name == name {
				n++
			}
		}
		return n
	}
	spans, metrics, raw := col.waitFor(ctx, t, func(spans []otlpSpan, metrics map[string]bool) bool {
		return count(spans, "invoke_agent codeinterp") == 1 && count(spans, "chat "+testModel) == 3 &&
			count(spans, "execute_tool code_interpreter") == 2 && count(spans, extProcClientSpan) >= 3 &&
			metrics["gen_ai.client.token.usage"] && metrics["gen_ai.execute_tool.duration"] &&
			envoyChildrenOf(spans, "chat "+testModel) >= 2
	})
	t.Logf("spans: %s", names(spans))
	byID := map[string]otlpSpan{}
	for _, sp := range spans {
		byID[sp.SpanID] = sp
	}
	var agent otlpSpan
	var chats, tools []otlpSpan
	for _, sp := range spans {
		switch sp.Name {
		case "invoke_agent codeinterp":
			agent = sp
		case "chat " + testModel:
			chats = append(chats, sp)
		case "execute_tool code_interpreter":
			tools = append(tools, sp)
		}
	}
	require.NotEmpty(t, agent.SpanID, "an invoke_agent span reached the collector; spans: %s", names(spans))
	require.Len(t, chats, 3, "chat spans; spans: %s", names(spans))
	require.Len(t, tools, 2, "execute_tool spans; spans: %s", names(spans))

	// One trace: Envoy's ingress span at the root, its ext_proc client span the parent of
	// invoke_agent, every span of ours and the follow-ups' Envoy spans in it.
	parent, ok := byID[agent.ParentSpanID]
	require.True(t, ok, "invoke_agent's parent %s reached the collector; spans: %s", agent.ParentSpanID, names(spans))
	assert.Equal(t, extProcClientSpan, parent.Name, "invoke_agent is a child of Envoy's ext_proc span")
	assert.Equal(t, harness.EnvoyServiceName, parent.Service)
	root := parent
	for root.ParentSpanID != "" {
		next, ok := byID[root.ParentSpanID]
		require.True(t, ok, "span %q's parent reached the collector", root.Name)
		root = next
	}
	assert.Equal(t, harness.EnvoyServiceName, root.Service, "the trace's root is Envoy's (%s)", root.Name)
	trace := agent.TraceID
	inTrace := 0
	for _, sp := range spans {
		if sp.TraceID == trace {
			inTrace++
		}
	}
	for _, sp := range append(append([]otlpSpan{}, chats...), tools...) {
		assert.Equal(t, trace, sp.TraceID, "%s is in the request's trace", sp.Name)
		assert.Equal(t, agent.SpanID, sp.ParentSpanID, "%s is a child of invoke_agent", sp.Name)
		assert.Equal(t, "codeinterp-e2e", sp.Service)
	}
	assert.GreaterOrEqual(t, envoyChildrenOf(spans, "chat "+testModel), 2, "each follow-up's Envoy span hangs under its chat span")
	assert.Greater(t, inTrace, 10, "Envoy's spans of every round are in the one trace")

	// Attributes.
	assert.Equal(t, "invoke_agent", agent.attr("gen_ai.operation.name"))
	assert.Equal(t, "openai", agent.attr("gen_ai.provider.name"))
	assert.Equal(t, testModel, agent.attr("gen_ai.request.model"))
	assert.True(t, strings.HasPrefix(agent.attr("gen_ai.conversation.id"), "cntr_"), "conversation id %q", agent.attr("gen_ai.conversation.id"))
	assert.Equal(t, "60", agent.attr("gen_ai.usage.input_tokens"), "the rounds' input tokens summed")
	assert.Equal(t, "done", agent.attr("codeinterp.outcome"))
	for _, c := range chats {
		assert.Equal(t, "chat", c.attr("gen_ai.operation.name"))
		assert.Equal(t, 3, c.Kind, "chat is a CLIENT span") // SPAN_KIND_CLIENT
		assert.NotEmpty(t, c.attr("gen_ai.response.id"))
		assert.Equal(t, testModel, c.attr("gen_ai.response.model"))
	}
	callIDs := map[string]string{}
	for _, tl := range tools {
		assert.Equal(t, "execute_tool", tl.attr("gen_ai.operation.name"))
		assert.Equal(t, "code_interpreter", tl.attr("gen_ai.tool.name"))
		assert.Equal(t, agent.attr("gen_ai.conversation.id"), tl.attr("codeinterp.container.id"))
		callIDs[tl.attr("gen_ai.tool.call.id")] = tl.attr("error.type")
	}
	assert.Equal(t, map[string]string{"call_1": "", "call_2": "exception"}, callIDs, "call ids and error types")

	// Nothing of the caller's: no credential, no code, no output.
	for _, leak := range []string{secret, "print(6*7)", "ValueError", "gen_ai.tool.call.arguments", "gen_ai.tool.call.result"} {
		assert.False(t, bytes.Contains(raw, []byte(leak)), "the collector's output has no %q", leak)
	}
	assert.True(t, metrics["gen_ai.client.operation.duration"], "metric gen_ai.client.operation.duration exported; got %v", metrics)
	assert.True(t, metrics["gen_ai.client.token.usage"], "metric gen_ai.client.token.usage exported; got %v", metrics)
	assert.True(t, metrics["gen_ai.execute_tool.duration"], "metric gen_ai.execute_tool.duration exported; got %v", metrics)
}

// envoyChildrenOf counts Envoy's spans whose parent is a span named name.
func envoyChildrenOf(spans []otlpSpan, name string) int {
	ids := map[string]bool{}
	for _, sp := range spans {
		if sp.Name == name {
			ids[sp.SpanID] = true
		}
	}
	n := 0
	for _, sp := range spans {
		if sp.Service == harness.EnvoyServiceName && ids[sp.ParentSpanID] {
			n++
		}
	}
	return n
}

// names lists the spans as "service/name" for failure messages.
func names(spans []otlpSpan) string {
	out := make([]string, len(spans))
	for i, sp := range spans {
		out[i] = sp.Service + "/" + sp.Name
	}
	return strings.Join(out, ", ")
}
