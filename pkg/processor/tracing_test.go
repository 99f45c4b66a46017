package processor

import (
	"context"
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/codeinterp/codeinterp/pkg/loop"
	"github.com/codeinterp/codeinterp/pkg/telemetry"
)

// contextLoop is a fakeLoop that keeps the span context each Run was given.
type contextLoop struct {
	*fakeLoop
	mu    sync.Mutex
	spans []trace.SpanContext
}

func (c *contextLoop) Run(ctx context.Context, r loop.Request) loop.Response {
	c.mu.Lock()
	c.spans = append(c.spans, trace.SpanContextFromContext(ctx))
	c.mu.Unlock()
	return c.fakeLoop.Run(ctx, r)
}

// Envoy's tracer injects its ext_proc client span into the stream's gRPC metadata: with
// telemetry on, the loop runs in that span's trace (its spans become the span's children); off,
// the loop's context has no span. The loop request names its surface and when the request went
// upstream.
func TestLoopContinuesEnvoysTrace(t *testing.T) {
	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	g, err := telemetry.NewGenAI(tp, nil, propagation.TraceContext{}, telemetry.Content{})
	require.NoError(t, err)
	const traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	tests := []struct {
		name      string
		tel       *telemetry.GenAI
		wantValid bool
	}{
		{"on", g, true},
		{"off", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cl := &contextLoop{fakeLoop: &fakeLoop{calls: true, resp: loop.Response{Status: http.StatusOK,
				Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"id":"resp_1","output":[]}`), Stop: loop.StopDone}}}
			ts := newTestServerWith(t, func(o *testOptions) {
				o.Loop = cl
				o.Telemetry = tt.tel
			}, nil, nil, nil)
			ex := ts.open(t, "traceparent", traceparent)
			ex.send(postHeaders("/v1/responses"))
			ex.send(reqBody(toolBody))
			ex.send(respHeaders(":status", "200", "content-type", "application/json"))
			require.NoError(t, ex.stream.Send(respBody([]byte(`{"id":"resp_0","output":[]}`))))
			for range 2 { // the message timeout's extension, then the answer
				_, err := ex.stream.Recv()
				require.NoError(t, err)
			}
			cl.mu.Lock()
			defer cl.mu.Unlock()
			require.Len(t, cl.spans, 1, "one loop")
			sc := cl.spans[0]
			assert.Equal(t, tt.wantValid, sc.IsValid(), "telemetry %s: the loop's context has Envoy's span", tt.name)
			if tt.wantValid {
				assert.Equal(t, "0af7651916cd43dd8448eb211c80319c", sc.TraceID().String())
				assert.Equal(t, "b7ad6b7169203331", sc.SpanID().String())
				assert.True(t, sc.IsRemote())
			}
			reqs := cl.requests()
			require.Len(t, reqs, 1)
			assert.Equal(t, "responses", reqs[0].Surface)
			assert.False(t, reqs[0].FirstSent.IsZero(), "the loop request says when the request went upstream")
		})
	}
}
