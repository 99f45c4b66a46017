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
