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
	"google.golang.org/protobuf/proto"

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
		c.Sandbox.WarmPoolSize = proto.Uint32(0) // the first call starts a new container
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
			count(spans, "start_container") == 1 && count(spans, "acquire_sandbox") == 1 &&
			metrics["gen_ai.client.token.usage"] && metrics["gen_ai.execute_tool.duration"] &&
			metrics["codeinterp.sandbox.start.duration"] && metrics["codeinterp.sandbox.acquire.duration"] &&
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
	origins := map[string]string{}
	toolOf := map[string]otlpSpan{}
	for _, tl := range tools {
		assert.Equal(t, "execute_tool", tl.attr("gen_ai.operation.name"))
		assert.Equal(t, "code_interpreter", tl.attr("gen_ai.tool.name"))
		assert.Equal(t, agent.attr("gen_ai.conversation.id"), tl.attr("codeinterp.container.id"))
		assert.Contains(t, []string{"fork", "exec"}, tl.attr("codeinterp.sandbox.start_mode"), "the local backend's start mode")
		assert.Empty(t, tl.attr("codeinterp.sandbox.node"), "one process: no sandbox node")
		callIDs[tl.attr("gen_ai.tool.call.id")] = tl.attr("error.type")
		origins[tl.attr("gen_ai.tool.call.id")] = tl.attr("codeinterp.container.origin")
		toolOf[tl.attr("gen_ai.tool.call.id")] = tl
	}
	assert.Equal(t, map[string]string{"call_1": "", "call_2": "exception"}, callIDs, "call ids and error types")
	assert.Equal(t, map[string]string{"call_1": "new", "call_2": "reused"}, origins, "how each call's container was had (no warm pool)")
	for _, sp := range spans {
		switch sp.Name {
		case "start_container", "acquire_sandbox":
			assert.Equal(t, toolOf["call_1"].SpanID, sp.ParentSpanID, "%s is a child of the first call's execute_tool", sp.Name)
			assert.Equal(t, trace, sp.TraceID, "%s is in the request's trace", sp.Name)
		}
		if sp.Name == "start_container" {
			assert.Equal(t, toolOf["call_1"].attr("codeinterp.sandbox.start_mode"), sp.attr("codeinterp.sandbox.start_mode"), "start_container's start mode")
			assert.Equal(t, agent.attr("gen_ai.conversation.id"), sp.attr("codeinterp.container.id"), "start_container's container")
		}
	}

	// Nothing of the caller's: no credential, no code, no output.
	for _, leak := range []string{secret, "print(6*7)", "ValueError", "gen_ai.tool.call.arguments", "gen_ai.tool.call.result"} {
		assert.False(t, bytes.Contains(raw, []byte(leak)), "the collector's output has no %q", leak)
	}
	assert.True(t, metrics["gen_ai.client.operation.duration"], "metric gen_ai.client.operation.duration exported; got %v", metrics)
	assert.True(t, metrics["gen_ai.client.token.usage"], "metric gen_ai.client.token.usage exported; got %v", metrics)
	assert.True(t, metrics["gen_ai.execute_tool.duration"], "metric gen_ai.execute_tool.duration exported; got %v", metrics)
	assert.True(t, metrics["codeinterp.sandbox.start.duration"], "metric codeinterp.sandbox.start.duration exported; got %v", metrics)
	assert.True(t, metrics["codeinterp.sandbox.acquire.duration"], "metric codeinterp.sandbox.acquire.duration exported; got %v", metrics)
}

// Content capture on (capture_content and capture_messages), through the in-process harness
// to the real Collector: the chat spans carry the prompts and answers as the GenAI
// conventions shape them, the execute_tool span the code and its output; a key in the
// request's headers and body (its metadata, a function tool's description) is in none of it.
func TestTracingContentCapture(t *testing.T) {
	col := startCollector(t)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
	env := NewEnv(t, EnvOptions{Configure: func(c *configv1.Config) {
		c.Tracing = &configv1.Tracing{Enabled: true, Endpoint: "http://" + col.httpAddr, Protocol: "http/protobuf",
			Metrics: proto.Bool(false), CaptureContent: true, CaptureMessages: true, MaxContentBytes: 2048}
	}})
	s := env.Serve(t, harness.Start(t, env.HarnessOptions()))

	const secret = "sk-capture-secret-456"
	s.Model.Enqueue("/v1/responses",
		fakemodel.JSON(fakemodel.Responses(testModel, usage(10, 5), fakemodel.FunctionCall("code_interpreter", "call_1", codeArgs("print(6*7)")))),
		fakemodel.JSON(fakemodel.Responses(testModel, usage(20, 5), fakemodel.Message("It is 42."))))
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, s.Front.URL()+"/v1/responses",
		strings.NewReader(`{"model":"`+testModel+`","instructions":"Be exact.","input":"compute six times seven","metadata":{"key":"`+secret+`"},`+
			`"tools":[{"type":"code_interpreter","container":{"type":"auto"}},`+
			`{"type":"function","name":"lookup","description":"uses `+secret+`","parameters":{"type":"object","properties":{}}}]}`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+secret)
	req.Header.Set("X-Api-Key", secret)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "answer: %s", body)

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	chats := func(spans []otlpSpan) []otlpSpan {
		var out []otlpSpan
		for _, sp := range spans {
			if sp.Name == "chat "+testModel {
				out = append(out, sp)
			}
		}
		return out
	}
	spans, _, raw := col.waitFor(ctx, t, func(spans []otlpSpan, _ map[string]bool) bool {
		return len(chats(spans)) == 2 && strings.Contains(names(spans), "execute_tool code_interpreter")
	})
	cs := chats(spans)
	require.Len(t, cs, 2, "chat spans; spans: %s", names(spans))
	var tool otlpSpan
	for _, sp := range spans {
		if sp.Name == "execute_tool code_interpreter" {
			tool = sp
		}
	}
	require.NotEmpty(t, tool.SpanID, "an execute_tool span; spans: %s", names(spans))

	byRound := map[string]otlpSpan{}
	for _, c := range cs {
		byRound[c.attr("codeinterp.round")] = c
	}
	first, follow := byRound["0"], byRound["1"]
	assert.Equal(t, `[{"type":"text","content":"Be exact."}]`, first.attr("gen_ai.system_instructions"), "the first round's instructions")
	assert.Equal(t, `[{"role":"user","parts":[{"type":"text","content":"compute six times seven"}]}]`, first.attr("gen_ai.input.messages"),
		"the first round's prompt")
	assert.Contains(t, first.attr("gen_ai.output.messages"), `"type":"tool_call","id":"call_1","name":"code_interpreter","arguments":{"code":"print(6*7)"}`,
		"the first answer's call")
	assert.Contains(t, follow.attr("gen_ai.input.messages"), `"print(6*7)"`, "the follow-up's prompt holds the call")
	assert.Contains(t, follow.attr("gen_ai.input.messages"), `"tool_call_response","id":"call_1","result":"42`, "and its output")
	assert.Contains(t, follow.attr("gen_ai.output.messages"), "It is 42.", "the final answer")
	assert.Equal(t, `print(6*7)`, tool.attr("gen_ai.tool.call.arguments"), "the code run")
	assert.Contains(t, tool.attr("gen_ai.tool.call.result"), "42", "its output")
	assert.False(t, bytes.Contains(raw, []byte(secret)), "the collector's output has no credential")
	assert.False(t, bytes.Contains(raw, []byte("lookup")), "nor the request's tools")
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
