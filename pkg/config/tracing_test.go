package config

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	configv1 "github.com/codeinterp/codeinterp/api/codeinterp/config/v1"
)

func TestValidateTracingAccepts(t *testing.T) {
	tests := []struct {
		name string
		give func(*configv1.Tracing)
	}{
		{"off", func(*configv1.Tracing) {}},
		{"on with the OTEL_* variables", func(tr *configv1.Tracing) { tr.Enabled = true }},
		{"on, configured", func(tr *configv1.Tracing) {
			tr.Enabled, tr.Endpoint, tr.Protocol = true, "https://otlp.example.com:4318", TracingHTTP
			tr.Headers, tr.SampleRatio, tr.CaptureContent = map[string]string{"authorization": "Bearer k"}, proto.Float64(0.5), true
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := &configv1.Config{}
			ApplyDefaults(cfg)
			tt.give(cfg.Tracing)
			assert.NoError(t, Validate(cfg), "validate tracing %v", cfg.Tracing)
		})
	}
}

func TestValidateTracingRefuses(t *testing.T) {
	tests := []struct {
		name string
		give func(*configv1.Tracing)
		want string
	}{
		{"endpoint without scheme", func(tr *configv1.Tracing) { tr.Endpoint = "collector:4317" }, "tracing.endpoint:"},
		{"protocol", func(tr *configv1.Tracing) { tr.Protocol = "thrift" }, "tracing.protocol:"},
		{"sample ratio", func(tr *configv1.Tracing) { tr.SampleRatio = proto.Float64(1.5) }, "tracing.sample_ratio:"},
		{"header name", func(tr *configv1.Tracing) { tr.Headers = map[string]string{"bad name": "v"} }, "tracing.headers:"},
		{"content without a bound", func(tr *configv1.Tracing) { tr.CaptureContent, tr.MaxContentBytes = true, 0 }, "tracing.max_content_bytes:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := &configv1.Config{}
			ApplyDefaults(cfg)
			tt.give(cfg.Tracing)
			err := Validate(cfg)
			require.Error(t, err, "validate tracing %v", cfg.Tracing)
			assert.Contains(t, err.Error(), tt.want, "validate tracing %v", cfg.Tracing)
		})
	}
}
