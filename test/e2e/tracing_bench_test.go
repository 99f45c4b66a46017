package e2e

import (
	"context"
	"net/http"
	"runtime"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	configv1 "github.com/codeinterp/codeinterp/api/codeinterp/config/v1"
	"github.com/codeinterp/codeinterp/internal/app"
	"github.com/codeinterp/codeinterp/pkg/config"
	"github.com/codeinterp/codeinterp/pkg/loop"
	"github.com/codeinterp/codeinterp/pkg/sandbox"
	"github.com/codeinterp/codeinterp/pkg/telemetry"
)

// BenchmarkLoopRoundTracing is BenchmarkLoopRound's "responses" case (one round on a 100 KB
// conversation, instant sandbox and model) with tracing off (no Telemetry: compare with
// BenchmarkLoopRound of the commit before tracing), on and sampled (the SDK's batch span
// processor over an exporter that drops the spans, and a metric reader: what a request pays,
// the export itself runs off the request path), and on but not sampled (sample_ratio 0).
func BenchmarkLoopRoundTracing(b *testing.B) {
	cases := []struct {
		name string
		tel  func(b *testing.B) *telemetry.GenAI
	}{
		{"off", func(*testing.B) *telemetry.GenAI { return nil }},
		{"on-sampled", func(b *testing.B) *telemetry.GenAI { return benchGenAI(b, sdktrace.AlwaysSample()) }},
		{"on-unsampled", func(b *testing.B) *telemetry.GenAI { return benchGenAI(b, sdktrace.NeverSample()) }},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			fx := newRoundFixture(b, false)
			mgr := sandbox.NewManager(instantProvider{}, sandbox.ManagerConfig{}, zap.NewNop())
			b.Cleanup(func() { _ = mgr.Close(context.Background()) })
			engine := loop.New(mgr, loop.Config{Client: memoryModel{status: http.StatusOK, body: fx.final}, Telemetry: c.tel(b)})
			b.Cleanup(engine.Close)
			request := func() loop.Request {
				return loop.Request{
					Exchange: fx.exchange(b),
					URL:      "http://model.invalid/v1/responses",
					Header:   http.Header{"Authorization": {"Bearer sk-bench"}, "X-Codeinterp-Followup": {"v1.signed"}},
					First:    fx.first,
					Sandbox:  sandbox.AcquireRequest{Identity: "bench"},
					Surface:  "responses",
				}
			}
			res := engine.Run(b.Context(), request())
			if res.Status != http.StatusOK || res.Rounds != 1 || res.Stop != loop.StopDone {
				b.Fatalf("one round: status %d, rounds %d, stop %s: %.300s", res.Status, res.Rounds, res.Stop, res.Body)
			}
			b.SetBytes(int64(len(fx.rewrite.Body)))
			b.ReportAllocs()
			var took []time.Duration
			var batch []loop.Request
			for b.Loop() {
				if len(batch) == 0 {
					b.StopTimer()
					for range 128 {
						batch = append(batch, request())
					}
					runtime.GC()
					b.StartTimer()
				}
				req := batch[len(batch)-1]
				batch = batch[:len(batch)-1]
				start := time.Now()
				engine.Run(b.Context(), req)
				took = append(took, time.Since(start))
			}
			reportPercentiles(b, took)
		})
	}
}

// benchGenAI is a GenAI over the SDK with sampler, a batch span processor whose exporter
// drops the spans, and a manual metric reader.
func benchGenAI(b *testing.B, sampler sdktrace.Sampler) *telemetry.GenAI {
	b.Helper()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sampler), sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	b.Cleanup(func() {
		_ = tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	g, err := telemetry.NewGenAI(tp, mp, propagation.TraceContext{}, telemetry.Content{})
	if err != nil {
		b.Fatalf("telemetry: %v", err)
	}
	return g
}

// BenchmarkPassThroughTracing is BenchmarkPassThrough with tracing on in the configuration
// (spans are made only for looped requests: a pass-through pays the stream's trace context
// lookup alone).
func BenchmarkPassThroughTracing(b *testing.B) {
	lis, err := newLoopback()
	if err != nil {
		b.Fatalf("listen: %v", err)
	}
	b.Cleanup(func() { _ = lis.l.Close() })
	cfg := &configv1.Config{Sandbox: &configv1.Sandbox{WarmPoolSize: proto.Uint32(0)},
		Tracing: &configv1.Tracing{Enabled: true, Endpoint: "http://127.0.0.1:9", Metrics: proto.Bool(false)}}
	config.ApplyDefaults(cfg)
	if err := config.Validate(cfg); err != nil {
		b.Fatalf("config: %v", err)
	}
	svc, err := app.New(app.Options{Config: cfg, Provider: instantProvider{}})
	if err != nil {
		b.Fatalf("new service: %v", err)
	}
	served := make(chan error, 1)
	go func() { served <- svc.Serve(lis.view()) }()
	b.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), stopGrace)
		defer cancel()
		if err := svc.Shutdown(stopCtx); err != nil {
			b.Errorf("stop server: %v", err)
		}
		if err := <-served; err != nil {
			b.Errorf("serve: %v", err)
		}
	})
	c := dialEnvoy(b, lis.l.Addr().String())
	runExchanges(b, c, passThroughMessages(passThroughBody(10<<10)))
}
