package app

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
	"google.golang.org/protobuf/proto"

	configv1 "github.com/codeinterp/codeinterp/api/codeinterp/config/v1"
	"github.com/codeinterp/codeinterp/pkg/config"
	"github.com/codeinterp/codeinterp/pkg/telemetry"
)

func TestTracingConfig(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	tests := []struct {
		name         string
		give         *configv1.Tracing
		env          map[string]string
		wantProtocol string
	}{
		{"default", &configv1.Tracing{}, nil, telemetry.ProtocolGRPC},
		{"configured", &configv1.Tracing{Protocol: "http/protobuf"}, map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, telemetry.ProtocolHTTP},
		{"OTEL_EXPORTER_OTLP_PROTOCOL", &configv1.Tracing{}, map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, telemetry.ProtocolHTTP},
		{"the traces' own variable first", &configv1.Tracing{}, map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc"}, telemetry.ProtocolGRPC},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.wantProtocol, tracingConfig(tt.give, env(tt.env)).Protocol, "protocol of %v with %v", tt.give, tt.env)
		})
	}
	ratio := 0.25
	got := tracingConfig(&configv1.Tracing{Endpoint: "http://c:4317", Headers: map[string]string{"a": "b"}, SampleRatio: &ratio,
		ServiceName: "s", Metrics: proto.Bool(true), CaptureContent: true, CaptureMessages: true, MaxContentBytes: 100}, env(nil))
	assert.Equal(t, telemetry.Config{Endpoint: "http://c:4317", Protocol: telemetry.ProtocolGRPC, Headers: map[string]string{"a": "b"},
		SampleRatio: &ratio, ServiceName: "s", Metrics: true, CaptureContent: true, CaptureMessages: true, MaxContentBytes: 100}, got, "every field is mapped")
}

// Tracing is off by default: no export, no instruments, and an App that builds with it.
func TestTracingOffByDefault(t *testing.T) {
	cfg := &configv1.Config{}
	config.ApplyDefaults(cfg)
	require.NoError(t, config.Validate(cfg))
	tr, err := startTracing(cfg.GetTracing(), zaptest.NewLogger(t))
	require.NoError(t, err)
	assert.Nil(t, tr, "off by default")
	assert.Nil(t, tr.genAI())
	assert.NoError(t, tr.shutdown())
	assert.True(t, cfg.GetTracing().GetMetrics(), "metrics default to on, for when tracing is")
	assert.Equal(t, uint32(config.DefaultMaxContentBytes), cfg.GetTracing().GetMaxContentBytes())
}

// On, it starts the export and flushes it at shutdown (to a collector that is not there: the
// spans are lost, the server is not held up beyond the flush bound).
func TestTracingStartsAndStops(t *testing.T) {
	tr, err := startTracing(&configv1.Tracing{Enabled: true, Endpoint: "http://127.0.0.1:9", Metrics: proto.Bool(false)}, zaptest.NewLogger(t))
	require.NoError(t, err)
	require.NotNil(t, tr.genAI())
	_ = tr.shutdown() // nothing was recorded: nothing to fail on
}
