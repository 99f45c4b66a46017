package envoy

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/codeinterp/codeinterp/pkg/config"
)

const shipped = "envoy.yaml"

// apiCluster is the cluster of the server's Containers API.
const apiCluster = "codeinterp_api"

// The server's loop deadline (default config.DefaultLoopDeadline) is announced to Envoy with one
// override_message_timeout, which Envoy ignores above max_message_timeout (docs/envoy-rules.md §5.2).
const serverLoopDeadline = config.DefaultLoopDeadline

// The server's default gRPC receive limit (Config.max_request_bytes); the buffer limit must not
// exceed what the server accepts, and LLM bodies need at least this much.
const serverMaxRequestBytes = config.DefaultMaxRequestBytes

func loadShipped(t *testing.T) *bootstrapv3.Bootstrap {
	t.Helper()
	b, err := Load(shipped)
	require.NoError(t, err, "load %s", shipped)
	return b
}

func TestShippedBootstrapIsValid(t *testing.T) {
	b := loadShipped(t)
	require.NoError(t, Validate(b), "validate %s", shipped)

	// Every typed_config the file uses is resolved to its registered type, not left opaque.
	got := map[string]bool{}
	collectAnyTypes(b.ProtoReflect(), got)
	want := map[string]bool{
		typeName(&hcmv3.HttpConnectionManager{}):        true,
		typeName(&extprocv3.ExternalProcessor{}):        true,
		typeName(&extprocv3.ExtProcPerRoute{}):          true,
		typeName(&routerv3.Router{}):                    true,
		typeName(&tlsv3.UpstreamTlsContext{}):           true,
		typeName(&upstreamhttpv3.HttpProtocolOptions{}): true,
	}
	assert.Equal(t, want, got, "typed_config types in %s", shipped)
}

func TestBootstrapRejectsBrokenConfigs(t *testing.T) {
	base, err := os.ReadFile(shipped)
	require.NoError(t, err, "read %s", shipped)

	tests := []struct {
		name    string
		give    func(string) string
		wantErr string
	}{
		{
			name: "misspelled body mode",
			give: func(s string) string {
				return replaceOnce(t, s, "request_body_mode: BUFFERED", "request_body_mode: BUFERED")
			},
			wantErr: "BUFERED",
		},
		{
			name:    "message_timeout over 3600s",
			give:    func(s string) string { return replaceOnce(t, s, "message_timeout: 30s", "message_timeout: 4000s") },
			wantErr: "MessageTimeout",
		},
		{
			name: "unknown typed_config type",
			give: func(s string) string {
				return replaceOnce(t, s, "envoy.extensions.filters.http.router.v3.Router", "envoy.extensions.filters.http.router.v3.Ruoter")
			},
			wantErr: "Ruoter",
		},
		{
			name: "unknown field in a typed_config",
			give: func(s string) string {
				return replaceOnce(t, s, "allow_mode_override: true", "allow_mode_overide: true")
			},
			wantErr: "allow_mode_overide",
		},
		{
			name:    "listener without a port",
			give:    func(s string) string { return replaceOnce(t, s, "port_value: 10000", "port_value: 99999") },
			wantErr: "PortValue",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := Parse([]byte(tt.give(string(base))))
			if err == nil {
				err = Validate(b)
			}
			require.Error(t, err, "config with %s must be rejected", tt.name)
			assert.Contains(t, err.Error(), tt.wantErr, "error for %s", tt.name)
		})
	}
}

// TestShippedBootstrapInvariants checks what the codeinterp server relies on (docs/architecture.md "Envoy's modes",
// docs/envoy-rules.md §1.1, §1.6, §2, §5.2, §5.3).
func TestShippedBootstrapInvariants(t *testing.T) {
	b := loadShipped(t)
	in, err := FindIngress(b)
	require.NoError(t, err, "find the ext_proc listener in %s", shipped)
	ep := in.ExtProc

	// §1.1: both bodies BUFFERED, headers SEND, no trailers.
	pm := ep.GetProcessingMode()
	assert.Equal(t, extprocv3.ProcessingMode_SEND, pm.GetRequestHeaderMode(), "request_header_mode")
	assert.Equal(t, extprocv3.ProcessingMode_BUFFERED, pm.GetRequestBodyMode(), "request_body_mode")
	assert.Equal(t, extprocv3.ProcessingMode_SKIP, pm.GetRequestTrailerMode(), "request_trailer_mode")
	assert.Equal(t, extprocv3.ProcessingMode_SEND, pm.GetResponseHeaderMode(), "response_header_mode")
	assert.Equal(t, extprocv3.ProcessingMode_BUFFERED, pm.GetResponseBodyMode(), "response_body_mode")
	assert.Equal(t, extprocv3.ProcessingMode_SKIP, pm.GetResponseTrailerMode(), "response_trailer_mode")

	// §2: the server turns bodies off with mode_override; Envoy ignores it without this.
	assert.True(t, ep.GetAllowModeOverride(), "allow_mode_override")
	assert.False(t, ep.GetSendBodyWithoutWaitingForHeaderResponse(), "send_body_without_waiting_for_header_response disables mode_override")
	assert.Empty(t, ep.GetAllowedOverrideModes(), "allowed_override_modes would restrict the server's overrides")
	assert.False(t, ep.GetFailureModeAllow(), "failure_mode_allow")
	assert.False(t, ep.GetObservabilityMode(), "observability_mode")

	// §5.2: the loop deadline is announced with override_message_timeout, bounded by
	// max_message_timeout.
	assert.Equal(t, 30*time.Second, ep.GetMessageTimeout().AsDuration(), "message_timeout")
	assert.GreaterOrEqual(t, ep.GetMaxMessageTimeout().AsDuration(), serverLoopDeadline, "max_message_timeout must fit the server's loop deadline")
	assert.Equal(t, 300*time.Second, ep.GetMaxMessageTimeout().AsDuration(), "max_message_timeout")

	// §1.6: per-stream buffer limit of HTTP/1 (listener) and HTTP/2 (stream window) downstreams.
	assert.GreaterOrEqual(t, in.Listener.GetPerConnectionBufferLimitBytes().GetValue(), uint32(serverMaxRequestBytes), "listener per_connection_buffer_limit_bytes")
	assert.GreaterOrEqual(t, in.HCM.GetHttp2ProtocolOptions().GetInitialStreamWindowSize().GetValue(), uint32(serverMaxRequestBytes), "HTTP/2 initial_stream_window_size")
	assert.Equal(t, uint32(10000), in.Listener.GetAddress().GetSocketAddress().GetPortValue(), "listener port")
	assert.Equal(t, 600*time.Second, in.HCM.GetStreamIdleTimeout().AsDuration(), "stream_idle_timeout")

	// §5.3: the ext_proc cluster speaks HTTP/2 and is the server's default address.
	extProcCluster := ep.GetGrpcService().GetEnvoyGrpc().GetClusterName()
	require.NotEmpty(t, extProcCluster, "ext_proc grpc_service.envoy_grpc.cluster_name")
	assert.Nil(t, ep.GetGrpcService().GetTimeout(), "grpc_service.timeout must stay unset: message_timeout governs")
	c := Cluster(b, extProcCluster)
	require.NotNil(t, c, "cluster %s", extProcCluster)
	opts := &upstreamhttpv3.HttpProtocolOptions{}
	a := c.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
	require.NotNil(t, a, "cluster %s typed_extension_protocol_options", extProcCluster)
	require.NoError(t, a.UnmarshalTo(opts), "decode HttpProtocolOptions of %s", extProcCluster)
	assert.NotNil(t, opts.GetExplicitHttpConfig().GetHttp2ProtocolOptions(), "cluster %s must be explicit HTTP/2", extProcCluster)
	sa := c.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress()
	assert.Equal(t, "127.0.0.1:50051", sa.GetAddress()+":"+itoa(sa.GetPortValue()), "ext_proc server address")

	// The ext_proc cluster is health checked over gRPC, so Envoy stops sending to a replica
	// that reports NOT_SERVING (codeinterp does from SIGTERM on) well within the server's
	// shutdown_grace, and to one that is gone.
	hcs := c.GetHealthChecks()
	require.Len(t, hcs, 1, "cluster %s health_checks", extProcCluster)
	hc := hcs[0]
	require.NotNil(t, hc.GetGrpcHealthCheck(), "cluster %s health check is grpc_health_check", extProcCluster)
	assert.Empty(t, hc.GetGrpcHealthCheck().GetServiceName(), "grpc_health_check service_name: codeinterp reports the server-wide status \"\"")
	interval, timeout := hc.GetInterval().AsDuration(), hc.GetTimeout().AsDuration()
	assert.Positive(t, timeout, "health check timeout")
	assert.Less(t, timeout, interval, "health check timeout under its interval")
	assert.Positive(t, hc.GetNoTrafficInterval().AsDuration(), "no_traffic_interval set (default 60s)")
	assert.LessOrEqual(t, hc.GetNoTrafficInterval().AsDuration(), interval, "no_traffic_interval: a fresh replica is checked as often as a used one")
	unhealthy := hc.GetUnhealthyThreshold().GetValue()
	assert.GreaterOrEqual(t, unhealthy, uint32(2), "unhealthy_threshold: one lost check does not eject a replica")
	assert.Equal(t, uint32(1), hc.GetHealthyThreshold().GetValue(), "healthy_threshold: one passing check brings a replica back")
	// Worst case from NOT_SERVING to out of the load balancing: unhealthy_threshold checks,
	// each up to interval plus jitter apart. It must fit the server's default grace.
	ejection := time.Duration(unhealthy) * (interval + hc.GetIntervalJitter().AsDuration() + timeout)
	assert.Less(t, ejection, config.DefaultShutdownGrace/2, "health checks eject a draining replica well within shutdown_grace")
	assert.Nil(t, c.GetCommonLbConfig().GetHealthyPanicThreshold(), "healthy_panic_threshold stays the default: a lone draining replica is still used")

	// The upstream model and the routes.
	llm := Cluster(b, "llm")
	require.NotNil(t, llm, "cluster llm")
	sa = llm.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress()
	assert.Equal(t, "127.0.0.1:8080", sa.GetAddress()+":"+itoa(sa.GetPortValue()), "llm upstream address")

	vhs := in.HCM.GetRouteConfig().GetVirtualHosts()
	require.Len(t, vhs, 1, "virtual hosts")
	routes := map[string]*routev3.Route{}
	order := map[string]int{}
	for i, r := range vhs[0].GetRoutes() {
		routes[r.GetMatch().GetPrefix()] = r
		order[r.GetMatch().GetPrefix()] = i
		if r.GetRoute().GetCluster() != apiCluster {
			assert.Equal(t, 600*time.Second, r.GetRoute().GetTimeout().AsDuration(), "route %s timeout", r.GetMatch().GetPrefix())
		}
		assert.NotNil(t, Cluster(b, r.GetRoute().GetCluster()), "route %s cluster %s exists", r.GetMatch().GetPrefix(), r.GetRoute().GetCluster())
	}
	require.Contains(t, routes, "/v1/", "catch-all API route")
	assert.Nil(t, perRoute(t, routes["/v1/"]), "/v1/ uses the filter's own config")

	require.Contains(t, routes, "/v1/embeddings", "embeddings route")
	assert.True(t, perRoute(t, routes["/v1/embeddings"]).GetDisabled(), "ext_proc disabled on /v1/embeddings")

	require.Contains(t, routes, "/analyst/v1/", "profile route")
	md := perRoute(t, routes["/analyst/v1/"]).GetOverrides().GetGrpcInitialMetadata()
	require.Len(t, md, 1, "grpc_initial_metadata of /analyst/v1/")
	assert.Equal(t, "x-codeinterp-profile", md[0].GetKey(), "profile metadata key")
	assert.Equal(t, "analyst", md[0].GetValue(), "profile name")
	assert.Equal(t, "/v1/", routes["/analyst/v1/"].GetRoute().GetPrefixRewrite(), "profile route rewrites to the API path")

	// The Containers API goes to the server's HTTP listener, unbuffered and untimed, under the
	// plain and the profile prefix alike, matched before the routes to the model.
	api := Cluster(b, apiCluster)
	require.NotNil(t, api, "cluster %s", apiCluster)
	sa = api.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress()
	assert.Equal(t, config.DefaultAPIListen, sa.GetAddress()+":"+itoa(sa.GetPortValue()), "Containers API address")
	assert.Nil(t, api.GetTypedExtensionProtocolOptions(), "the Containers API speaks HTTP/1.1")
	for _, tt := range []struct{ prefix, before string }{
		{"/v1/containers", "/v1/"},
		{"/analyst/v1/containers", "/analyst/v1/"},
		{"/v1/files/cfile_", "/v1/"},
		{"/analyst/v1/files/cfile_", "/analyst/v1/"},
		{"/v1/skills", "/v1/"},
		{"/analyst/v1/skills", "/analyst/v1/"},
	} {
		require.Contains(t, routes, tt.prefix, "Containers API route")
		r := routes[tt.prefix]
		assert.Equal(t, apiCluster, r.GetRoute().GetCluster(), "route %s cluster", tt.prefix)
		assert.True(t, perRoute(t, r).GetDisabled(), "ext_proc disabled on %s: no exchange, no buffered body", tt.prefix)
		require.NotNil(t, r.GetRoute().GetTimeout(), "route %s timeout set (the default 15s would cut a transfer)", tt.prefix)
		assert.Zero(t, r.GetRoute().GetTimeout().AsDuration(), "route %s: no timeout", tt.prefix)
		assert.GreaterOrEqual(t, r.GetRoute().GetIdleTimeout().AsDuration(), 600*time.Second, "route %s idle_timeout: a 512 MiB copy by file_id sends nothing until it is in", tt.prefix)
		assert.Empty(t, r.GetRoute().GetPrefixRewrite(), "route %s: the server sees the path as sent (path_prefixes)", tt.prefix)
		assert.Less(t, order[tt.prefix], order[tt.before], "route %s before %s", tt.prefix, tt.before)
	}

	// The catch-all route must come last, or it would shadow the others.
	last := vhs[0].GetRoutes()[len(vhs[0].GetRoutes())-1]
	assert.Equal(t, "/v1/", last.GetMatch().GetPrefix(), "last route")
}

func TestFindIngressErrors(t *testing.T) {
	b := loadShipped(t)
	none := Clone(b)
	none.GetStaticResources().Listeners = nil
	_, err := FindIngress(none)
	assert.ErrorContains(t, err, "no listener", "bootstrap without listeners")

	two := Clone(b)
	two.GetStaticResources().Listeners = append(two.GetStaticResources().Listeners, proto.Clone(two.GetStaticResources().Listeners[0]).(*listenerv3.Listener))
	_, err = FindIngress(two)
	assert.ErrorContains(t, err, "2 ext_proc filters", "bootstrap with two ext_proc listeners")
}

func perRoute(t *testing.T, r *routev3.Route) *extprocv3.ExtProcPerRoute {
	t.Helper()
	a, ok := r.GetTypedPerFilterConfig()[ExtProcFilterName]
	if !ok {
		return nil
	}
	pr := &extprocv3.ExtProcPerRoute{}
	require.NoError(t, a.UnmarshalTo(pr), "decode ExtProcPerRoute of %s", r.GetMatch().GetPrefix())
	return pr
}

func collectAnyTypes(m protoreflect.Message, got map[string]bool) {
	if a, ok := m.Interface().(*anypb.Any); ok {
		inner, err := a.UnmarshalNew()
		if err != nil {
			return
		}
		got[string(inner.ProtoReflect().Descriptor().FullName())] = true
		collectAnyTypes(inner.ProtoReflect(), got)
		return
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList() && fd.Message() != nil:
			for i := range v.List().Len() {
				collectAnyTypes(v.List().Get(i).Message(), got)
			}
		case fd.IsMap() && fd.MapValue().Message() != nil:
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				collectAnyTypes(mv.Message(), got)
				return true
			})
		case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
			collectAnyTypes(v.Message(), got)
		}
		return true
	})
}

func typeName(m proto.Message) string { return string(m.ProtoReflect().Descriptor().FullName()) }

func replaceOnce(t *testing.T, s, old, new string) string {
	t.Helper()
	require.Equal(t, 1, strings.Count(s, old), "%q must occur once in %s", old, shipped)
	return strings.Replace(s, old, new, 1)
}

func itoa(v uint32) string { return strconv.Itoa(int(v)) }
