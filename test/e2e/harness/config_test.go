package harness

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"
)

func TestShippedConfig(t *testing.T) {
	cfg := ShippedConfig(t)
	f := cfg.Filter
	assert.Equal(t, extprocv3.ProcessingMode_BUFFERED, f.GetProcessingMode().GetRequestBodyMode(), "request_body_mode")
	assert.Equal(t, extprocv3.ProcessingMode_BUFFERED, f.GetProcessingMode().GetResponseBodyMode(), "response_body_mode")
	assert.True(t, f.GetAllowModeOverride(), "allow_mode_override")
	assert.Equal(t, 30*time.Second, f.GetMessageTimeout().AsDuration(), "message_timeout")
	assert.Equal(t, 300*time.Second, f.GetMaxMessageTimeout().AsDuration(), "max_message_timeout")
	assert.Equal(t, 64<<20, cfg.BufferLimit, "buffer limit")
	assert.Equal(t, 100, cfg.MaxHeadersCount, "max headers count")
	assert.Equal(t, 60, cfg.MaxRequestHeadersKB, "max request headers kb")
	assert.Equal(t, 600*time.Second, cfg.StreamIdleTimeout, "stream_idle_timeout")
	require.Len(t, cfg.Routes, 9, "routes")
	assert.Equal(t, Route{Prefix: "/v1/embeddings", Cluster: "llm", Timeout: 600 * time.Second, PerRoute: cfg.Routes[0].PerRoute}, cfg.Routes[0], "embeddings route")
	assert.True(t, cfg.Routes[0].PerRoute.GetDisabled(), "embeddings route disabled")
	for i, prefix := range []string{"/v1/containers", "/analyst/v1/containers", "/v1/files/cfile_", "/analyst/v1/files/cfile_", "/v1/skills", "/analyst/v1/skills"} {
		r := cfg.Routes[1+i]
		assert.Equal(t, Route{Prefix: prefix, Cluster: "codeinterp_api", PerRoute: r.PerRoute}, r, "Containers API route %s", prefix)
		assert.True(t, r.PerRoute.GetDisabled(), "Containers API route %s disabled", prefix)
	}
	assert.Equal(t, "/v1/", cfg.Routes[7].PrefixRewrite, "analyst route rewrite")
	assert.Equal(t, "/v1/", cfg.Routes[8].Prefix, "catch-all route")
	assert.Nil(t, cfg.Routes[8].PerRoute, "catch-all route per-route config")

	r, ok := cfg.matchRoute("/v1/embeddings?x=1")
	assert.True(t, ok, "match /v1/embeddings")
	assert.Equal(t, "/v1/embeddings", r.Prefix, "route of /v1/embeddings")
	r, _ = cfg.matchRoute("/analyst/v1/responses")
	assert.Equal(t, "/v1/responses", r.rewrite("/analyst/v1/responses"), "rewrite of /analyst/v1/responses")
	// Only the container file ids codeinterp mints go to its Files API; the model's own files
	// and the list stay with the upstream.
	for path, want := range map[string]string{
		"/v1/files/cfile_0123/content": "codeinterp_api", "/v1/files/cfile_0123": "codeinterp_api",
		"/v1/files/file_011C": "llm", "/v1/files": "llm", "/v1/files?limit=5": "llm",
		"/analyst/v1/files/cfile_0123/content": "codeinterp_api",
	} {
		r, ok := cfg.matchRoute(path)
		assert.True(t, ok, "match %s", path)
		assert.Equal(t, want, r.Cluster, "cluster of %s", path)
	}
	_, ok = cfg.matchRoute("/v2/x")
	assert.False(t, ok, "no route for /v2/x")

	// Every call returns fresh copies.
	cfg.Filter.FailureModeAllow = true
	assert.False(t, ShippedConfig(t).Filter.GetFailureModeAllow(), "a changed copy does not leak")
}

// TestLoadFilterConfigRefusesUnmodelledRouting: a bootstrap using routing the harness cannot
// play is an error, not an approximation.
func TestLoadFilterConfigRefusesUnmodelledRouting(t *testing.T) {
	path, err := ShippedConfigPath()
	require.NoError(t, err, "find envoy.yaml")
	base, err := os.ReadFile(path)
	require.NoError(t, err, "read envoy.yaml")
	tests := []struct {
		name    string
		old     string
		new     string
		wantErr string
	}{
		{
			name:    "header matcher",
			old:     `- match: { prefix: "/v1/" }`,
			new:     `- match: { prefix: "/v1/", headers: [ { name: x-a, string_match: { exact: b } } ] }`,
			wantErr: "only case-sensitive prefix and path matches",
		},
		{
			name:    "regex match",
			old:     `- match: { prefix: "/v1/" }`,
			new:     `- match: { safe_regex: { regex: "/v1/.*" } }`,
			wantErr: "only prefix and path matches",
		},
		{
			name:    "two virtual hosts",
			old:     "            - name: llm\n              domains: [\"*\"]\n",
			new:     "            - name: other\n              domains: [\"other\"]\n              routes: [ { match: { prefix: \"/\" }, route: { cluster: llm } } ]\n            - name: llm\n              domains: [\"*\"]\n",
			wantErr: "one virtual host",
		},
		{
			name:    "invalid config",
			old:     "message_timeout: 30s",
			new:     "message_timeout: 4000s",
			wantErr: "MessageTimeout",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, 1, strings.Count(string(base), tt.old), "%q occurs once in envoy.yaml", tt.old)
			p := filepath.Join(t.TempDir(), "envoy.yaml")
			require.NoError(t, os.WriteFile(p, []byte(strings.Replace(string(base), tt.old, tt.new, 1)), 0o600), "write %s", p)
			_, err := LoadFilterConfig(p)
			require.Error(t, err, "load with %s", tt.name)
			assert.Contains(t, err.Error(), tt.wantErr, "error with %s", tt.name)
		})
	}
}

// TestResolveOptions: the knobs override the config; invalid and unmodelled configs are
// refused.
func TestResolveOptions(t *testing.T) {
	cfg, err := Options{
		FailureModeAllow: ptr(true), AllowModeOverride: ptr(false), MessageTimeout: time.Second,
		MaxMessageTimeout: 2 * time.Second, BufferLimit: 7, StatusOnError: 503,
		ProcessingMode: mode(extprocv3.ProcessingMode_STREAMED, extprocv3.ProcessingMode_NONE),
	}.resolve(t)
	require.NoError(t, err, "resolve knobs")
	assert.True(t, cfg.Filter.GetFailureModeAllow(), "failure_mode_allow")
	assert.False(t, cfg.Filter.GetAllowModeOverride(), "allow_mode_override")
	assert.Equal(t, time.Second, cfg.Filter.GetMessageTimeout().AsDuration(), "message_timeout")
	assert.Equal(t, 2*time.Second, cfg.Filter.GetMaxMessageTimeout().AsDuration(), "max_message_timeout")
	assert.Equal(t, 7, cfg.BufferLimit, "buffer limit")
	assert.EqualValues(t, 503, cfg.Filter.GetStatusOnError().GetCode(), "status_on_error")
	assert.Equal(t, extprocv3.ProcessingMode_STREAMED, cfg.Filter.GetProcessingMode().GetRequestBodyMode(), "processing_mode")

	tests := []struct {
		name    string
		give    func(*FilterConfig)
		wantErr string
	}{
		{name: "message_timeout over 3600s", give: func(c *FilterConfig) { c.Filter.MessageTimeout = durationpb.New(4000 * time.Second) }, wantErr: "invalid ext_proc config"},
		{name: "FULL_DUPLEX_STREAMED request without trailer mode SEND", give: func(c *FilterConfig) {
			c.Filter.ProcessingMode.RequestBodyMode = extprocv3.ProcessingMode_FULL_DUPLEX_STREAMED
		}, wantErr: "the request_trailer_mode has to be set to SEND"},
		{name: "FULL_DUPLEX_STREAMED response without trailer mode SEND", give: func(c *FilterConfig) {
			c.Filter.ProcessingMode.ResponseBodyMode = extprocv3.ProcessingMode_FULL_DUPLEX_STREAMED
		}, wantErr: "the response_trailer_mode has to be set to SEND"},
		{name: "FULL_DUPLEX_STREAMED request in allowed_override_modes", give: func(c *FilterConfig) {
			c.Filter.AllowedOverrideModes = []*extprocv3.ProcessingMode{{RequestBodyMode: extprocv3.ProcessingMode_FULL_DUPLEX_STREAMED}}
		}, wantErr: "allowed_override_modes: request body mode FULL_DUPLEX_STREAMED"},
		{name: "per-route FULL_DUPLEX_STREAMED request", give: func(c *FilterConfig) {
			c.Routes[len(c.Routes)-1].PerRoute = &extprocv3.ExtProcPerRoute{Override: &extprocv3.ExtProcPerRoute_Overrides{Overrides: &extprocv3.ExtProcOverrides{
				ProcessingMode: &extprocv3.ProcessingMode{RequestBodyMode: extprocv3.ProcessingMode_FULL_DUPLEX_STREAMED},
			}}}
		}, wantErr: "route /v1/: request body mode FULL_DUPLEX_STREAMED"},
		{name: "BUFFERED_PARTIAL", give: func(c *FilterConfig) {
			c.Filter.ProcessingMode.ResponseBodyMode = extprocv3.ProcessingMode_BUFFERED_PARTIAL
		}, wantErr: "body mode BUFFERED_PARTIAL"},
		{name: "observability mode", give: func(c *FilterConfig) { c.Filter.ObservabilityMode = true }, wantErr: "observability_mode"},
		{name: "send_body_without_waiting_for_header_response", give: func(c *FilterConfig) { c.Filter.SendBodyWithoutWaitingForHeaderResponse = true }, wantErr: "send_body_without_waiting"},
		{name: "attributes", give: func(c *FilterConfig) { c.Filter.RequestAttributes = []string{"request.path"} }, wantErr: "attributes"},
		{name: "google_grpc", give: func(c *FilterConfig) {
			c.Filter.GrpcService = &corev3.GrpcService{TargetSpecifier: &corev3.GrpcService_GoogleGrpc_{GoogleGrpc: &corev3.GrpcService_GoogleGrpc{TargetUri: "x", StatPrefix: "x"}}}
		}, wantErr: "google_grpc"},
		{name: "per-route grpc_service", give: func(c *FilterConfig) {
			c.Routes[len(c.Routes)-1].PerRoute = &extprocv3.ExtProcPerRoute{Override: &extprocv3.ExtProcPerRoute_Overrides{Overrides: &extprocv3.ExtProcOverrides{
				GrpcService: c.Filter.GetGrpcService(),
			}}}
		}, wantErr: "route /v1/: overrides"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := ShippedConfig(t)
			tt.give(&cfg)
			_, err := Options{Config: cfg}.resolve(t)
			require.Error(t, err, "resolve with %s", tt.name)
			assert.Contains(t, err.Error(), tt.wantErr, "error with %s", tt.name)
		})
	}
}
