package telemetry

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"
	"google.golang.org/grpc/metadata"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// recorded is a GenAI over an in-memory span recorder and a manual metric reader.
type recorded struct {
	g       *GenAI
	spans   *tracetest.SpanRecorder
	metrics *sdkmetric.ManualReader
}

func newRecorded(t *testing.T, content Content) recorded {
	t.Helper()
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() {
		_ = tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	g, err := NewGenAI(tp, mp, propagation.TraceContext{}, content)
	require.NoError(t, err)
	return recorded{g: g, spans: spans, metrics: reader}
}

func attrs(s sdktrace.ReadOnlySpan) map[string]attribute.Value {
	out := map[string]attribute.Value{}
	for _, kv := range s.Attributes() {
		out[string(kv.Key)] = kv.Value
	}
	return out
}

func byName(t *testing.T, spans []sdktrace.ReadOnlySpan, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	for _, s := range spans {
		if s.Name() == name {
			return s
		}
	}
	names := make([]string, len(spans))
	for i, s := range spans {
		names[i] = s.Name()
	}
	require.Failf(t, "span missing", "no span %q among %v", name, names)
	return nil
}

const envoyTraceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

// One loop's spans: invoke_agent under Envoy's span (from the stream's metadata), a chat span
// per round (the follow-up's traceparent naming it), an execute_tool span with its error type
// and our attributes, the acquire step, and the metrics of each.
func TestGenAISpanTree(t *testing.T) {
	r := newRecorded(t, Content{})
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("traceparent", envoyTraceparent))
	ctx = r.g.FromIncoming(ctx)
	ctx, agent := r.g.StartAgent(ctx, "responses", []byte(`{"model":"gpt-4.1","input":"hi"}`))
	_, chat0 := agent.StartChat(ctx, 0, time.Now().Add(-time.Second), false)
	chat0.End(http.StatusOK, []byte(`{"id":"resp_1","model":"gpt-4.1-2025","status":"completed","usage":{"input_tokens":10,"output_tokens":3,"input_tokens_details":{"cached_tokens":2}}}`), nil)
	sctx, step := agent.StartStep(ctx, StepAcquire)
	step.End(nil)
	_ = sctx
	agent.Conversation("cntr_1", "new")
	_, tool := agent.StartTool(ctx, "call_1", "", "print(secret)")
	tool.End(Container{ID: "cntr_1", Node: "node-a", Origin: "new", StartMode: "fork",
		Started: time.Now().Add(-200 * time.Millisecond), StartDuration: 150 * time.Millisecond}, ToolErrorTimeout, "the output")
	cctx, chat1 := agent.StartChat(ctx, 1, time.Time{}, true)
	h := http.Header{}
	chat1.Inject(h)
	chat1.FirstChunk()
	chat1.End(http.StatusOK, []byte(`{"id":"resp_2","model":"gpt-4.1-2025","status":"completed","usage":{"input_tokens":20,"output_tokens":5}}`), nil)
	agent.End("done", http.StatusOK, 1, 1)

	spans := r.spans.Ended()
	require.Len(t, spans, 6, "spans of one loop")
	inv := byName(t, spans, "invoke_agent codeinterp")
	assert.Equal(t, "0af7651916cd43dd8448eb211c80319c", inv.SpanContext().TraceID().String(), "invoke_agent continues Envoy's trace")
	assert.Equal(t, "b7ad6b7169203331", inv.Parent().SpanID().String(), "invoke_agent's parent is Envoy's ext_proc span")
	assert.True(t, inv.Parent().IsRemote(), "the parent is remote")
	a := attrs(inv)
	assert.Equal(t, "invoke_agent", a["gen_ai.operation.name"].AsString())
	assert.Equal(t, "openai", a["gen_ai.provider.name"].AsString())
	assert.Equal(t, "gpt-4.1", a["gen_ai.request.model"].AsString())
	assert.Equal(t, "cntr_1", a["gen_ai.conversation.id"].AsString())
	assert.Equal(t, int64(30), a["gen_ai.usage.input_tokens"].AsInt64(), "invoke_agent sums the rounds' usage")
	assert.Equal(t, int64(8), a["gen_ai.usage.output_tokens"].AsInt64())
	assert.Equal(t, trace.SpanKindInternal, inv.SpanKind())

	var chats []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Name() == "chat gpt-4.1" {
			chats = append(chats, s)
		}
	}
	require.Len(t, chats, 2, "a chat span per round")
	for _, c := range chats {
		assert.Equal(t, inv.SpanContext().SpanID(), c.Parent().SpanID(), "chat is a child of invoke_agent")
		assert.Equal(t, trace.SpanKindClient, c.SpanKind(), "chat is a CLIENT span")
	}
	c0 := attrs(chats[0])
	assert.Equal(t, "resp_1", c0["gen_ai.response.id"].AsString())
	assert.Equal(t, "gpt-4.1-2025", c0["gen_ai.response.model"].AsString())
	assert.Equal(t, []string{"completed"}, c0["gen_ai.response.finish_reasons"].AsStringSlice())
	assert.Equal(t, int64(2), c0["gen_ai.usage.cache_read.input_tokens"].AsInt64())
	assert.False(t, c0["gen_ai.request.stream"].AsBool())
	_, hasTTFC := c0["gen_ai.response.time_to_first_chunk"]
	assert.False(t, hasTTFC, "a JSON answer has no time to first chunk")
	c1 := attrs(chats[1])
	assert.True(t, c1["gen_ai.request.stream"].AsBool())
	assert.GreaterOrEqual(t, c1["gen_ai.response.time_to_first_chunk"].AsFloat64(), 0.0, "a streamed answer's time to first chunk")
	assert.Equal(t, "00-"+chats[1].SpanContext().TraceID().String()+"-"+chats[1].SpanContext().SpanID().String()+"-01", h.Get("traceparent"),
		"the follow-up carries its chat span as traceparent")
	_ = cctx

	tl := byName(t, spans, "execute_tool code_interpreter")
	ta := attrs(tl)
	assert.Equal(t, "execute_tool", ta["gen_ai.operation.name"].AsString())
	assert.Equal(t, "code_interpreter", ta["gen_ai.tool.name"].AsString())
	assert.Equal(t, "extension", ta["gen_ai.tool.type"].AsString())
	assert.Equal(t, "call_1", ta["gen_ai.tool.call.id"].AsString())
	assert.Equal(t, "timeout", ta["error.type"].AsString())
	assert.Equal(t, "cntr_1", ta["codeinterp.container.id"].AsString())
	assert.Equal(t, "node-a", ta["codeinterp.sandbox.node"].AsString())
	assert.Equal(t, "new", ta["codeinterp.container.origin"].AsString())
	assert.Equal(t, "fork", ta["codeinterp.sandbox.start_mode"].AsString())
	st := byName(t, spans, StepStartContainer)
	assert.Equal(t, tl.SpanContext().SpanID(), st.Parent().SpanID(), "start_container is a child of execute_tool")
	assert.Equal(t, 150*time.Millisecond, st.EndTime().Sub(st.StartTime()), "start_container lasts the start's duration")
	assert.False(t, st.StartTime().Before(tl.StartTime()), "start_container begins within execute_tool")
	assert.Equal(t, "fork", attrs(st)["codeinterp.sandbox.start_mode"].AsString())
	_, hasArgs := ta["gen_ai.tool.call.arguments"]
	_, hasResult := ta["gen_ai.tool.call.result"]
	assert.False(t, hasArgs || hasResult, "no content unless enabled")
	assert.Equal(t, inv.SpanContext().SpanID(), byName(t, spans, StepAcquire).Parent().SpanID(), "the acquire step is under invoke_agent")

	var rm metricdata.ResourceMetrics
	require.NoError(t, r.metrics.Collect(context.Background(), &rm))
	got := map[string]int{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					got[m.Name] += int(p.Count)
				}
			case metricdata.Histogram[int64]:
				for _, p := range d.DataPoints {
					got[m.Name] += int(p.Count)
				}
			}
		}
	}
	assert.Equal(t, map[string]int{
		"gen_ai.client.operation.duration":    2,
		"gen_ai.client.token.usage":           4, // input and output of two rounds
		"gen_ai.execute_tool.duration":        1,
		"codeinterp.sandbox.acquire.duration": 1,
		"codeinterp.sandbox.start.duration":   1,
	}, got, "the metrics' observation counts")
}

// With content on, the code and the result are on the execute_tool span, cut at the limit.
func TestGenAIContent(t *testing.T) {
	r := newRecorded(t, Content{Tools: true, MaxBytes: 8})
	ctx, agent := r.g.StartAgent(context.Background(), "messages", nil)
	_, tool := agent.StartTool(ctx, "srvtoolu_1", "", "print('héllo world')")
	tool.End(Container{ID: "cntr_1"}, "", "héllo world")
	_, bash := agent.StartTool(ctx, "srvtoolu_2", "bash_code_execution", "ls")
	bash.End(Container{ID: "cntr_1", Origin: "reused"}, "", "")
	agent.End("done", http.StatusOK, 1, 1)
	assert.Equal(t, "bash_code_execution", attrs(byName(t, r.spans.Ended(), "execute_tool bash_code_execution"))["gen_ai.tool.name"].AsString(),
		"a call of another hosted tool is named after it")
	tl := byName(t, r.spans.Ended(), "execute_tool code_execution")
	a := attrs(tl)
	assert.Equal(t, "print('h…", a["gen_ai.tool.call.arguments"].AsString(), "code cut at 8 bytes on a rune boundary")
	assert.Equal(t, "héllo w…", a["gen_ai.tool.call.result"].AsString())
	_, hasErr := a["error.type"]
	assert.False(t, hasErr, "a run that succeeded has no error.type")
	assert.Equal(t, "anthropic", attrs(byName(t, r.spans.Ended(), "invoke_agent codeinterp"))["gen_ai.provider.name"].AsString())
}

// A nil GenAI is off: nothing panics and the context is unchanged.
func TestGenAIOff(t *testing.T) {
	var g *GenAI
	ctx := context.Background()
	assert.Equal(t, ctx, g.FromIncoming(ctx))
	actx, agent := g.StartAgent(ctx, "responses", []byte(`{}`))
	assert.Nil(t, agent)
	assert.Equal(t, ctx, actx)
	_, chat := agent.StartChat(ctx, 0, time.Time{}, false)
	h := http.Header{}
	chat.Inject(h)
	chat.FirstChunk()
	chat.End(http.StatusOK, nil, nil)
	_, tool := agent.StartTool(ctx, "c", "", "code")
	tool.End(Container{Started: time.Now()}, "", "")
	_, step := agent.StartStep(ctx, StepAcquire)
	step.End(nil)
	agent.Conversation("x", "new")
	agent.End("done", http.StatusOK, 0, 0)
	assert.Empty(t, h, "no traceparent when off")
}

func TestSummarize(t *testing.T) {
	tests := []struct {
		name string
		give string
		want Summary
	}{
		{"responses", `{"id":"resp_1","model":"m","status":"incomplete","usage":{"input_tokens":5,"output_tokens":7,"output_tokens_details":{"reasoning_tokens":3}}}`,
			Summary{ID: "resp_1", Model: "m", FinishReasons: []string{"incomplete"}, Usage: true, InputTokens: 5, OutputTokens: 7, ReasoningTokens: 3}},
		{"chat", `{"id":"chatcmpl-1","model":"m","choices":[{"finish_reason":"tool_calls"},{"finish_reason":"stop"}],"usage":{"prompt_tokens":4,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":1}}}`,
			Summary{ID: "chatcmpl-1", Model: "m", FinishReasons: []string{"tool_calls", "stop"}, Usage: true, InputTokens: 4, OutputTokens: 2, CacheReadTokens: 1}},
		{"messages", `{"id":"msg_1","model":"claude","stop_reason":"end_turn","usage":{"input_tokens":9,"output_tokens":1,"cache_read_input_tokens":6,"cache_creation_input_tokens":2}}`,
			Summary{ID: "msg_1", Model: "claude", FinishReasons: []string{"end_turn"}, Usage: true, InputTokens: 9, OutputTokens: 1, CacheReadTokens: 6, CacheCreationTokens: 2}},
		{"no usage", `{"id":"x"}`, Summary{ID: "x"}},
		{"not JSON", `garbage`, Summary{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, Summarize([]byte(tt.give)), "Summarize(%s)", tt.give)
		})
	}
}

func TestEndpointRefused(t *testing.T) {
	for _, give := range []string{"collector:4317", "ftp://x", "http://"} {
		_, err := Start(context.Background(), Config{Endpoint: give})
		assert.Error(t, err, "Start with endpoint %q", give)
	}
	_, err := Start(context.Background(), Config{Protocol: "thrift"})
	assert.True(t, err != nil && strings.Contains(err.Error(), "protocol"), "Start with protocol thrift: %v", err)
}
