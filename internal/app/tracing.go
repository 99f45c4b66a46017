package app

import (
	"context"
	"fmt"
	"os"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	configv1 "github.com/codeinterp/codeinterp/api/codeinterp/config/v1"
	"github.com/codeinterp/codeinterp/pkg/telemetry"
)

// tracing is the OpenTelemetry export of an App (the tracing section of the configuration).
// A nil *tracing is off: its methods do nothing.
type tracing struct {
	providers *telemetry.Providers
}

// tracingFlush bounds the export of the spans left at shutdown.
const tracingFlush = 5 * time.Second

// startTracing starts the export the configuration asks for: nil when tracing is off.
func startTracing(t *configv1.Tracing, log *zap.Logger) (*tracing, error) {
	if !t.GetEnabled() {
		return nil, nil
	}
	cfg := tracingConfig(t, os.Getenv)
	p, err := telemetry.Start(context.Background(), cfg)
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	log.Info("tracing on", zap.String("endpoint", cfg.Endpoint), zap.String("protocol", cfg.Protocol),
		zap.Bool("metrics", cfg.Metrics), zap.Bool("capture_content", cfg.CaptureContent), zap.Bool("capture_messages", cfg.CaptureMessages))
	return &tracing{providers: p}, nil
}

// tracingConfig maps the tracing section onto the telemetry package's config. The protocol,
// when unset, comes from OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or OTEL_EXPORTER_OTLP_PROTOCOL
// (the exporters read the other OTEL_* variables themselves, but which exporter to make is
// ours to choose).
func tracingConfig(t *configv1.Tracing, getenv func(string) string) telemetry.Config {
	protocol := t.GetProtocol()
	for _, v := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if protocol == "" {
			protocol = getenv(v)
		}
	}
	if protocol == "" {
		protocol = telemetry.ProtocolGRPC
	}
	return telemetry.Config{
		Endpoint:        t.GetEndpoint(),
		Protocol:        protocol,
		Headers:         t.GetHeaders(),
		SampleRatio:     t.SampleRatio,
		ServiceName:     t.GetServiceName(),
		Metrics:         t.GetMetrics(),
		CaptureContent:  t.GetCaptureContent(),
		CaptureMessages: t.GetCaptureMessages(),
		MaxContentBytes: int(t.GetMaxContentBytes()),
	}
}

// genAI returns the span and metric instruments, nil when tracing is off.
func (t *tracing) genAI() *telemetry.GenAI {
	if t == nil {
		return nil
	}
	return t.providers.GenAI
}

// tracerProvider is the tracer provider of the spans, nil when tracing is off.
func (t *tracing) tracerProvider() trace.TracerProvider {
	if t == nil {
		return nil
	}
	return t.providers.TracerProvider()
}

// shutdown exports what is left and stops the export, within tracingFlush.
func (t *tracing) shutdown() error {
	if t == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), tracingFlush)
	defer cancel()
	if err := t.providers.Shutdown(ctx); err != nil {
		return fmt.Errorf("tracing: flush: %w", err)
	}
	return nil
}
