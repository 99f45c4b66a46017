package remote

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/codeinterp/codeinterp/pkg/sandbox"
	"github.com/codeinterp/codeinterp/pkg/sandbox/sandboxtest"
)

// spanRecorder is a TracerProvider whose ended spans are kept in memory.
type spanRecorder struct {
	tp  *sdktrace.TracerProvider
	exp *tracetest.InMemoryExporter
}

func newSpanRecorder(t *testing.T) *spanRecorder {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { assert.NoError(t, tp.Shutdown(context.Background()), "shut the tracer provider down") })
	return &spanRecorder{tp: tp, exp: exp}
}

// span waits for the span of kind whose name ends with suffix to have ended, and returns it.
func (r *spanRecorder) span(t *testing.T, kind trace.SpanKind, suffix string) tracetest.SpanStub {
	t.Helper()
	var found tracetest.SpanStub
	require.Eventually(t, func() bool {
		for _, s := range r.exp.GetSpans() {
			if s.SpanKind == kind && strings.HasSuffix(s.Name, suffix) {
				found = s
				return true
			}
		}
		return false
	}, 5*time.Second, 5*time.Millisecond, "a %v span named *%s", kind, suffix)
	return found
}

// TestTraceContinuesOnTheNode: the spans of the calls a node serves are children of the
// caller's: of the client's span of the call, or, with a client that makes no spans, of the
// span in the call's ctx (the loop's).
func TestTraceContinuesOnTheNode(t *testing.T) {
	for _, clientSpans := range []bool{true, false} {
		name := map[bool]string{true: "client spans", false: "no client spans"}[clientSpans]
		t.Run(name, func(t *testing.T) {
			loop, node := newSpanRecorder(t), newSpanRecorder(t)
			co := ClientOptions{}
			if clientSpans {
				co.TracerProvider = loop.tp
			}
			s := serve(t, newManager(t, &sandboxtest.Provider{}), ServerOptions{TracerProvider: node.tp}, co)

			ctx, parent := loop.tp.Tracer("loop").Start(t.Context(), "execute_tool")
			l, err := s.client.Acquire(ctx, sandbox.AcquireRequest{Identity: "alice"})
			require.NoError(t, err, "Acquire")
			_, err = l.Run(ctx, "x = 1", 0)
			require.NoError(t, err, "Run")
			l.Release()
			parent.End()

			for _, method := range []string{"/Acquire", "/Run"} {
				served := node.span(t, trace.SpanKindServer, method)
				assert.Equal(t, parent.SpanContext().TraceID(), served.Parent.TraceID(), "the trace of the node's %s span", method)
				assert.True(t, served.Parent.IsRemote(), "the node's %s span's parent is the caller's", method)
				want := parent.SpanContext().SpanID()
				if clientSpans {
					called := loop.span(t, trace.SpanKindClient, method)
					assert.Equal(t, parent.SpanContext().SpanID(), called.Parent.SpanID(), "the parent of the client's %s span", method)
					want = called.SpanContext.SpanID()
				}
				assert.Equal(t, want, served.Parent.SpanID(), "the parent of the node's %s span", method)
			}
		})
	}
}

// ctxService is a Service that records the span context its Create calls see.
type ctxService struct {
	sandbox.Service

	// mu guards seen.
	mu   sync.Mutex
	seen trace.SpanContext
}

func (s *ctxService) Create(ctx context.Context, r sandbox.CreateRequest) (sandbox.ContainerInfo, error) {
	s.mu.Lock()
	s.seen = trace.SpanContextFromContext(ctx)
	s.mu.Unlock()
	return s.Service.Create(ctx, r)
}

// TestTraceContextWithoutSpans: with no TracerProvider on either side, the node's Service
// still sees the caller's trace context in its ctx.
func TestTraceContextWithoutSpans(t *testing.T) {
	loop := newSpanRecorder(t)
	svc := &ctxService{Service: newManager(t, &sandboxtest.Provider{})}
	s := serve(t, svc, ServerOptions{}, ClientOptions{})
	ctx, parent := loop.tp.Tracer("loop").Start(t.Context(), "execute_tool")
	defer parent.End()
	_, err := s.client.Create(ctx, sandbox.CreateRequest{Identity: "alice", Name: "c"})
	require.NoError(t, err, "Create")
	svc.mu.Lock()
	defer svc.mu.Unlock()
	assert.Equal(t, parent.SpanContext().TraceID(), svc.seen.TraceID(), "the trace the node's Create sees")
	assert.Equal(t, parent.SpanContext().SpanID(), svc.seen.SpanID(), "the span the node's Create sees")
	assert.True(t, svc.seen.IsRemote(), "the node's Create sees a remote span context")
}

// TestTraceOfARefusedCall: a call without the secret does not join the trace it names: its
// span on the node starts a new trace, linked to the one it sent.
func TestTraceOfARefusedCall(t *testing.T) {
	loop, node := newSpanRecorder(t), newSpanRecorder(t)
	s := serve(t, newManager(t, &sandboxtest.Provider{}), ServerOptions{TracerProvider: node.tp}, ClientOptions{})
	c, err := Dial(s.addr, ClientOptions{Secret: []byte("another secret of at least 32 bytes, not the one")})
	require.NoError(t, err, "Dial")
	defer func() { assert.NoError(t, c.Close(), "Close") }()
	ctx, parent := loop.tp.Tracer("loop").Start(t.Context(), "execute_tool")
	defer parent.End()
	_, err = c.Create(ctx, sandbox.CreateRequest{Identity: "alice"})
	require.Error(t, err, "Create with a wrong secret")

	served := node.span(t, trace.SpanKindServer, "/Create")
	assert.False(t, served.Parent.IsValid(), "the refused call's span has no parent")
	assert.NotEqual(t, parent.SpanContext().TraceID(), served.SpanContext.TraceID(), "the refused call's trace")
	require.Len(t, served.Links, 1, "the refused call's span links what it sent")
	assert.Equal(t, parent.SpanContext().SpanID(), served.Links[0].SpanContext.SpanID(), "the refused call's link")
}
