package loop

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/zap/zaptest"

	"github.com/codeinterp/codeinterp/pkg/sandbox"
	"github.com/codeinterp/codeinterp/pkg/telemetry"
)

// A loop with telemetry on: one invoke_agent span, a chat span per upstream round (the first,
// Envoy's, from FirstSent), an execute_tool span per call with the run's error type, and each
// follow-up call carrying its chat span as traceparent.
func TestTelemetrySpans(t *testing.T) {
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	g, err := telemetry.NewGenAI(tp, nil, propagation.TraceContext{}, telemetry.Content{})
	require.NoError(t, err)

	f := newFixture(t,
		scripted{status: 200, body: respCall("2", "raise ValueError()", 30)},
		scripted{status: 200, body: respText("3", "done")})
	f.provider.run = func(code string) (sandbox.Result, error) {
		if code == "raise ValueError()" {
			return sandbox.Result{Error: &sandbox.Error{Name: "ValueError"}}, nil
		}
		return sandbox.Result{Stdout: "1\n"}, nil
	}
	e := New(f.manager, Config{Log: zaptest.NewLogger(t), Telemetry: g})
	t.Cleanup(e.Close)
	req := f.request(t, respSurface, responsesClient, respCall("1", "print(1)", 10))
	req.Surface = "responses"
	sent := time.Now().Add(-time.Second)
	req.FirstSent = sent
	res := e.Run(context.Background(), req)
	require.Equal(t, http.StatusOK, res.Status, "body: %s", res.Body)

	ended := spans.Ended()
	byName := map[string][]sdktrace.ReadOnlySpan{}
	for _, s := range ended {
		byName[s.Name()] = append(byName[s.Name()], s)
	}
	require.Len(t, byName["invoke_agent codeinterp"], 1, "one invoke_agent span")
	agent := byName["invoke_agent codeinterp"][0]
	chats := byName["chat m"]
	require.Len(t, chats, 3, "a chat span per upstream answer")
	tools := byName["execute_tool code_interpreter"]
	require.Len(t, tools, 2, "an execute_tool span per call")
	require.Len(t, byName[telemetry.StepAcquire], 1, "the sandbox is acquired once")
	for _, s := range append(append([]sdktrace.ReadOnlySpan{}, chats...), tools...) {
		assert.Equal(t, agent.SpanContext().SpanID(), s.Parent().SpanID(), "%s is a child of invoke_agent", s.Name())
		assert.Equal(t, agent.SpanContext().TraceID(), s.SpanContext().TraceID(), "%s is in the loop's trace", s.Name())
	}
	assert.True(t, chats[0].StartTime().Equal(sent), "the first round's span starts when the request went upstream")

	errType := func(s sdktrace.ReadOnlySpan) string {
		for _, kv := range s.Attributes() {
			if kv.Key == "error.type" {
				return kv.Value.AsString()
			}
		}
		return ""
	}
	assert.Equal(t, "", errType(tools[0]), "print(1) succeeded")
	assert.Equal(t, telemetry.ToolErrorException, errType(tools[1]), "the code that raised")

	attr := func(s sdktrace.ReadOnlySpan, key string) string {
		for _, kv := range s.Attributes() {
			if string(kv.Key) == key {
				return kv.Value.Emit()
			}
		}
		return ""
	}
	for i, want := range []string{sandbox.OriginNew, sandbox.OriginReused} {
		assert.Equal(t, want, attr(tools[i], "codeinterp.container.origin"), "call %d: how its container was had", i)
		assert.Equal(t, attr(agent, "gen_ai.conversation.id"), attr(tools[i], "codeinterp.container.id"), "call %d: its container", i)
	}
	require.Len(t, byName[telemetry.StepStartContainer], 1, "the container starts once, on the first call")
	assert.Equal(t, tools[0].SpanContext().SpanID(), byName[telemetry.StepStartContainer][0].Parent().SpanID(),
		"start_container is a child of the call that started it")
	assert.Equal(t, tools[0].SpanContext().SpanID(), byName[telemetry.StepAcquire][0].Parent().SpanID(),
		"acquire_sandbox is a child of the first call")
	for _, c := range chats {
		assert.Empty(t, attr(c, "gen_ai.input.messages"), "no messages unless captured")
	}

	f.model.mu.Lock()
	headers := f.model.headers
	f.model.mu.Unlock()
	require.Len(t, headers, 2, "two follow-up calls")
	for i, h := range headers {
		c := chats[i+1].SpanContext()
		assert.Equal(t, "00-"+c.TraceID().String()+"-"+c.SpanID().String()+"-01", h.Get("Traceparent"),
			"follow-up %d carries its chat span", i+1)
	}
}

// With telemetry off, follow-ups carry no traceparent of ours.
func TestTelemetryOffAddsNoHeader(t *testing.T) {
	f := newFixture(t, scripted{status: 200, body: respText("2", "done")})
	res := f.engine.Run(context.Background(), f.request(t, respSurface, responsesClient, respCall("1", "print(1)", 10)))
	require.Equal(t, http.StatusOK, res.Status)
	require.Len(t, f.model.headers, 1)
	assert.Empty(t, f.model.headers[0].Get("Traceparent"), "no traceparent when telemetry is off")
}

// The execute_tool span's error.type follows the run's outcome.
func TestTelemetryToolErrorTypes(t *testing.T) {
	tests := []struct {
		name string
		res  sandbox.Result
		err  error
		want string
	}{
		{"ok", sandbox.Result{Stdout: "1\n"}, nil, ""},
		{"raised", sandbox.Result{Error: &sandbox.Error{Name: "ValueError"}}, nil, telemetry.ToolErrorException},
		{"out of memory", sandbox.Result{Error: &sandbox.Error{Name: "MemoryError"}}, nil, telemetry.ToolErrorOOM},
		{"output cut", sandbox.Result{Stdout: "1\n", Truncated: true}, nil, telemetry.ToolErrorOutputLimit},
		{"timed out", sandbox.Result{}, sandbox.ErrTimeout, telemetry.ToolErrorTimeout},
		{"lost", sandbox.Result{}, sandbox.ErrLost, telemetry.ToolErrorLost},
		{"failed", sandbox.Result{}, errors.New("backend down"), telemetry.ToolErrorUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spans := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
			t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
			g, err := telemetry.NewGenAI(tp, nil, propagation.TraceContext{}, telemetry.Content{})
			require.NoError(t, err)
			f := newFixture(t, scripted{status: 200, body: respText("2", "done")})
			f.provider.run = func(string) (sandbox.Result, error) { return tt.res, tt.err }
			e := New(f.manager, Config{Log: zaptest.NewLogger(t), Telemetry: g})
			t.Cleanup(e.Close)
			res := e.Run(context.Background(), f.request(t, respSurface, responsesClient, respCall("1", "print(1)", 10)))
			require.Equal(t, http.StatusOK, res.Status, "body: %s", res.Body)
			var got []string
			for _, s := range spans.Ended() {
				if s.Name() != "execute_tool code_interpreter" {
					continue
				}
				errType := ""
				for _, kv := range s.Attributes() {
					if kv.Key == "error.type" {
						errType = kv.Value.AsString()
					}
				}
				got = append(got, errType)
			}
			assert.Equal(t, []string{tt.want}, got, "error.type of a run that %s", tt.name)
		})
	}
}

// With message capture on, each chat span carries its round's prompt and answer: the
// follow-up's prompt holds the code the first round called.
func TestTelemetryMessages(t *testing.T) {
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	g, err := telemetry.NewGenAI(tp, nil, propagation.TraceContext{}, telemetry.Content{Messages: true})
	require.NoError(t, err)
	f := newFixture(t, scripted{status: 200, body: respText("2", "the answer")})
	e := New(f.manager, Config{Log: zaptest.NewLogger(t), Telemetry: g})
	t.Cleanup(e.Close)
	req := f.request(t, respSurface, responsesClient, respCall("1", "print(1)", 10))
	req.Surface = "responses"
	res := e.Run(context.Background(), req)
	require.Equal(t, http.StatusOK, res.Status, "body: %s", res.Body)
	var in, out []string
	for _, s := range spans.Ended() {
		if s.Name() != "chat m" {
			continue
		}
		for _, kv := range s.Attributes() {
			switch kv.Key {
			case "gen_ai.input.messages":
				in = append(in, kv.Value.AsString())
			case "gen_ai.output.messages":
				out = append(out, kv.Value.AsString())
			}
		}
	}
	require.Len(t, in, 2, "each round's prompt")
	require.Len(t, out, 2, "each round's answer")
	assert.Contains(t, in[1], `"print(1)"`, "the follow-up's prompt holds the call")
	assert.Contains(t, out[1], "the answer", "the follow-up's answer")
}
