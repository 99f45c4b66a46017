// Package telemetry is codeinterp's OpenTelemetry side: the tracer and meter providers that
// export over OTLP (gRPC or HTTP), and [GenAI], the spans and metrics of the GenAI semantic
// conventions (semconv v1.41.0, the last release that has them) that the loop and the
// processor emit. Tracing is off unless configured; a nil *GenAI is the off switch, and each of
// its methods then returns at once.
//
// Spans, per request the loop runs (docs/operations.md, "Tracing"):
//
//	invoke_agent codeinterp        INTERNAL  (child of Envoy's ext_proc span, from the stream's traceparent)
//	 ├─ chat {model}               CLIENT    one per upstream round; follow-ups carry its traceparent
//	 └─ execute_tool {tool}        INTERNAL  one per code run
//	     ├─ acquire_sandbox        INTERNAL  the request's first call
//	     ├─ copy_files             INTERNAL  container.file_ids copied in
//	     ├─ start_container        INTERNAL  the call started a new container
//	     └─ …/Sandbox/Run          CLIENT    in a fleet: the run forwarded to the container's node
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"
)

// The OTLP protocols an exporter speaks.
const (
	ProtocolGRPC = "grpc"
	ProtocolHTTP = "http/protobuf"
)

// DefaultMaxContentBytes bounds one content attribute (code, output) when content capture is on.
const DefaultMaxContentBytes = 4 << 10

// Config holds the exporter and sampling settings; the zero value exports over OTLP gRPC to
// what the standard OTEL_EXPORTER_OTLP_* variables name (the exporters read them), or to
// localhost:4317, sampling as OTEL_TRACES_SAMPLER says (parent-based always-on by default).
type Config struct {
	// Endpoint is the collector's URL ("http://collector:4317", "https://…:4318"); an http
	// scheme means no TLS. Empty leaves it to OTEL_EXPORTER_OTLP_[TRACES_|METRICS_]ENDPOINT.
	// For ProtocolHTTP a URL without a path gets the standard /v1/traces and /v1/metrics.
	Endpoint string
	// Protocol is ProtocolGRPC (when empty) or ProtocolHTTP.
	Protocol string
	// Headers are sent with every export (an API key of a hosted backend); nil leaves them to
	// OTEL_EXPORTER_OTLP_HEADERS.
	Headers map[string]string
	// SampleRatio, when set, samples that share of the traces that start here, and follows the
	// parent's decision (Envoy's) otherwise; nil leaves the sampler to OTEL_TRACES_SAMPLER.
	SampleRatio *float64
	// ServiceName is the resource's service.name; empty means OTEL_SERVICE_NAME or "codeinterp".
	ServiceName string
	// Metrics reports whether the GenAI metrics are exported too (every MetricInterval).
	Metrics bool
	// MetricInterval is how often metrics are exported; zero means OTEL_METRIC_EXPORT_INTERVAL,
	// else a minute.
	MetricInterval time.Duration
	// CaptureContent reports whether spans carry content: the code a tool call runs and the
	// text it returned, truncated at MaxContentBytes. Off by default: content is the tenant's.
	CaptureContent bool
	// CaptureMessages reports whether chat spans carry each round's prompt and the model's
	// answer (gen_ai.input.messages, gen_ai.system_instructions, gen_ai.output.messages), each
	// bounded by MaxContentBytes. Off by default.
	CaptureMessages bool
	// MaxContentBytes bounds each content attribute; zero means DefaultMaxContentBytes.
	MaxContentBytes int
}

// Providers are the SDK's tracer and meter providers and the GenAI instruments over them.
// Shutdown flushes and stops them.
type Providers struct {
	// GenAI emits the spans and metrics.
	GenAI  *GenAI
	tracer *sdktrace.TracerProvider
	meter  *sdkmetric.MeterProvider
}

// TracerProvider is the tracer provider the spans are made with, for the instrumentation of
// other parts (the sandbox service's gRPC calls); nil on a nil Providers.
func (p *Providers) TracerProvider() trace.TracerProvider {
	if p == nil {
		return nil
	}
	return p.tracer
}

// Start builds the exporters and providers of cfg. It connects lazily: a collector that is
// down loses spans (the batch exporter drops them), never requests.
func Start(ctx context.Context, cfg Config) (*Providers, error) {
	res, err := newResource(ctx, cfg.ServiceName)
	if err != nil {
		return nil, err
	}
	spans, err := traceExporter(ctx, cfg)
	if err != nil {
		return nil, err
	}
	topts := []sdktrace.TracerProviderOption{sdktrace.WithBatcher(spans), sdktrace.WithResource(res)}
	if cfg.SampleRatio != nil {
		topts = append(topts, sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(*cfg.SampleRatio))))
	}
	p := &Providers{tracer: sdktrace.NewTracerProvider(topts...)}
	if cfg.Metrics {
		metrics, err := metricExporter(ctx, cfg)
		if err != nil {
			_ = p.tracer.Shutdown(ctx)
			return nil, err
		}
		var ropts []sdkmetric.PeriodicReaderOption
		if cfg.MetricInterval > 0 {
			ropts = append(ropts, sdkmetric.WithInterval(cfg.MetricInterval))
		}
		p.meter = sdkmetric.NewMeterProvider(sdkmetric.WithResource(res),
			sdkmetric.WithReader(sdkmetric.NewPeriodicReader(metrics, ropts...)))
	}
	var mp metric.MeterProvider // nil, not a nil *MeterProvider, when metrics are off
	if p.meter != nil {
		mp = p.meter
	}
	g, err := NewGenAI(p.tracer, mp, propagation.TraceContext{},
		Content{Tools: cfg.CaptureContent, Messages: cfg.CaptureMessages, MaxBytes: cfg.MaxContentBytes})
	if err != nil {
		_ = p.Shutdown(ctx)
		return nil, err
	}
	p.GenAI = g
	return p, nil
}

// Shutdown exports what is buffered and stops the providers, within ctx.
func (p *Providers) Shutdown(ctx context.Context) error {
	err := p.tracer.Shutdown(ctx)
	if p.meter != nil {
		err = errors.Join(err, p.meter.Shutdown(ctx))
	}
	return err
}

// newResource describes the process: service.name is name, else OTEL_SERVICE_NAME, else
// "codeinterp"; OTEL_RESOURCE_ATTRIBUTES and the SDK's attributes are added. (Of resource.New's
// detectors, a later one wins.)
func newResource(ctx context.Context, name string) (*resource.Resource, error) {
	opts := []resource.Option{resource.WithAttributes(semconv.ServiceName("codeinterp")), resource.WithFromEnv(), resource.WithTelemetrySDK()}
	if name != "" {
		opts = append(opts, resource.WithAttributes(semconv.ServiceName(name)))
	}
	res, err := resource.New(ctx, opts...)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("telemetry resource: %w", err)
	}
	return res, nil
}

// endpoint splits cfg.Endpoint into what the exporters take: the URL, and whether it is plain
// text (http).
func endpoint(cfg Config) (*url.URL, bool, error) {
	if cfg.Endpoint == "" {
		return nil, false, nil
	}
	u, err := url.Parse(cfg.Endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, false, fmt.Errorf("telemetry endpoint %q: want http(s)://host:port", cfg.Endpoint)
	}
	return u, u.Scheme == "http", nil
}

func traceExporter(ctx context.Context, cfg Config) (sdktrace.SpanExporter, error) {
	u, insecure, err := endpoint(cfg)
	if err != nil {
		return nil, err
	}
	switch cfg.Protocol {
	case "", ProtocolGRPC:
		var opts []otlptracegrpc.Option
		if u != nil {
			opts = append(opts, otlptracegrpc.WithEndpoint(u.Host))
			if insecure {
				opts = append(opts, otlptracegrpc.WithInsecure())
			}
		}
		if cfg.Headers != nil {
			opts = append(opts, otlptracegrpc.WithHeaders(cfg.Headers))
		}
		return otlptracegrpc.New(ctx, opts...)
	case ProtocolHTTP:
		var opts []otlptracehttp.Option
		if u != nil {
			opts = append(opts, otlptracehttp.WithEndpointURL(withPath(u, "/v1/traces")))
		}
		if cfg.Headers != nil {
			opts = append(opts, otlptracehttp.WithHeaders(cfg.Headers))
		}
		return otlptracehttp.New(ctx, opts...)
	default:
		return nil, fmt.Errorf("telemetry protocol %q: want %q or %q", cfg.Protocol, ProtocolGRPC, ProtocolHTTP)
	}
}

func metricExporter(ctx context.Context, cfg Config) (sdkmetric.Exporter, error) {
	u, insecure, err := endpoint(cfg)
	if err != nil {
		return nil, err
	}
	switch cfg.Protocol {
	case "", ProtocolGRPC:
		var opts []otlpmetricgrpc.Option
		if u != nil {
			opts = append(opts, otlpmetricgrpc.WithEndpoint(u.Host))
			if insecure {
				opts = append(opts, otlpmetricgrpc.WithInsecure())
			}
		}
		if cfg.Headers != nil {
			opts = append(opts, otlpmetricgrpc.WithHeaders(cfg.Headers))
		}
		return otlpmetricgrpc.New(ctx, opts...)
	case ProtocolHTTP:
		var opts []otlpmetrichttp.Option
		if u != nil {
			opts = append(opts, otlpmetrichttp.WithEndpointURL(withPath(u, "/v1/metrics")))
		}
		if cfg.Headers != nil {
			opts = append(opts, otlpmetrichttp.WithHeaders(cfg.Headers))
		}
		return otlpmetrichttp.New(ctx, opts...)
	default:
		return nil, fmt.Errorf("telemetry protocol %q: want %q or %q", cfg.Protocol, ProtocolGRPC, ProtocolHTTP)
	}
}

// withPath returns u as a string, with path when u has none (the OTLP/HTTP signal's path).
func withPath(u *url.URL, path string) string {
	c := *u
	if strings.Trim(c.Path, "/") == "" {
		c.Path = path
	}
	return c.String()
}
