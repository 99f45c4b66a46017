package envoy

import (
	"strings"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/codeinterp/codeinterp/pkg/config"
)

// TestServerConfigMatchesBootstrap checks that codeinterp.yaml (the server configuration that
// `make run` uses) and envoy.yaml work together.
func TestServerConfigMatchesBootstrap(t *testing.T) {
	cfg, err := config.Load("codeinterp.yaml")
	require.NoError(t, err, "load codeinterp.yaml")
	config.ApplyDefaults(cfg)
	require.NoError(t, config.Validate(cfg), "validate codeinterp.yaml")

	b := loadShipped(t)
	in, err := FindIngress(b)
	require.NoError(t, err)
	maxTimeout := in.ExtProc.GetMaxMessageTimeout().AsDuration()

	// Nothing moves on the client's stream while the loop runs: the connection manager's stream
	// idle timeout must outlast it too.
	idle := in.HCM.GetStreamIdleTimeout().AsDuration()
	for name, p := range config.Profiles(cfg) {
		assert.LessOrEqual(t, p.LoopDeadline, maxTimeout, "profile %q: loop_deadline must fit under max_message_timeout", name)
		assert.Less(t, p.LoopDeadline, idle, "profile %q: loop_deadline must be shorter than stream_idle_timeout", name)
		// A progressive stream is silent at most keep_alive_interval: well under the idle
		// timers of the path (the connection manager's and any route's idle_timeout).
		assert.Less(t, 2*p.KeepAlive, idle, "profile %q: keep_alive_interval must be well under stream_idle_timeout", name)
	}
	for _, vh := range in.HCM.GetRouteConfig().GetVirtualHosts() {
		for _, r := range vh.GetRoutes() {
			if d := r.GetRoute().GetIdleTimeout(); d != nil && d.AsDuration() > 0 {
				for name, p := range config.Profiles(cfg) {
					assert.Less(t, 2*p.KeepAlive, d.AsDuration(), "route %s idle_timeout vs profile %q keep_alive_interval", r.GetMatch().GetPrefix(), name)
				}
			}
		}
	}
	// The switch to FULL_DUPLEX_STREAMED is a mode_override: the filter must allow it, and must
	// not be configured with a mode that makes Envoy ignore overrides (docs/envoy-rules.md FD §5).
	assert.True(t, in.ExtProc.GetAllowModeOverride(), "allow_mode_override")
	assert.False(t, in.ExtProc.GetSendBodyWithoutWaitingForHeaderResponse(), "send_body_without_waiting_for_header_response disables overrides")
	assert.NotEqual(t, extprocv3.ProcessingMode_FULL_DUPLEX_STREAMED, in.ExtProc.GetProcessingMode().GetResponseBodyMode(), "a configured FULL_DUPLEX_STREAMED disables overrides")
	if allowed := in.ExtProc.GetAllowedOverrideModes(); len(allowed) > 0 {
		found := false
		for _, m := range allowed {
			found = found || m.GetResponseBodyMode() == extprocv3.ProcessingMode_FULL_DUPLEX_STREAMED
		}
		assert.True(t, found, "allowed_override_modes must list the FULL_DUPLEX_STREAMED response mode")
	}
	assert.Contains(t, in.ExtProc.GetGrpcService().GetEnvoyGrpc().GetClusterName(), "codeinterp")
	assert.Contains(t, cfg.GetListen(), "50051", "listen matches the ext_proc cluster's port")
	assert.GreaterOrEqual(t, cfg.GetMaxRequestBytes(), uint64(in.Listener.GetPerConnectionBufferLimitBytes().GetValue()),
		"max_request_bytes holds a body as large as Envoy buffers")

	rc := in.HCM.GetRouteConfig()
	require.NotNil(t, rc, "the bootstrap has an inline route config")
	seen := 0
	for _, vh := range rc.GetVirtualHosts() {
		for _, r := range vh.GetRoutes() {
			prefix := r.GetMatch().GetPrefix()
			if rw := r.GetRoute().GetPrefixRewrite(); rw != "" && strings.HasSuffix(prefix, "/v1/") && prefix != "/v1/" {
				assert.Contains(t, cfg.GetPathPrefixes(), strings.TrimSuffix(prefix, "/v1/"),
					"route %s rewrites its path: the server must serve its prefix", prefix)
			}
			a := r.GetTypedPerFilterConfig()[ExtProcFilterName]
			if a == nil {
				continue
			}
			per := &extprocv3.ExtProcPerRoute{}
			require.NoError(t, a.UnmarshalTo(per), "route %s: decode ExtProcPerRoute", prefix)
			for _, md := range per.GetOverrides().GetGrpcInitialMetadata() {
				if md.GetKey() != cfg.GetProfileMetadataKey() {
					continue
				}
				seen++
				name := md.GetValue()
				if name == "" {
					name = string(md.GetRawValue())
				}
				assert.Contains(t, cfg.GetProfiles(), name, "route %s names profile %q", prefix, name)
			}
		}
	}
	assert.Positive(t, seen, "the bootstrap shows a route choosing a profile")
}
