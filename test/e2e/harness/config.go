package harness

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	"google.golang.org/protobuf/proto"

	"github.com/codeinterp/codeinterp/envoy"
)

// Envoy's defaults for what the bootstrap may leave unset.
const (
	defaultBufferLimit     = 1 << 20 // listener per_connection_buffer_limit_bytes
	defaultRouteTimeout    = 15 * time.Second
	defaultMessageTimeout  = 200 * time.Millisecond
	defaultMaxHeadersCount = 100
	defaultMaxHeadersKB    = 60
	// defaultStreamIdleTimeout is the connection manager's stream_idle_timeout when unset.
	defaultStreamIdleTimeout = 5 * time.Minute
)

// FilterConfig is what the harness takes from the ext_proc filter in envoy/envoy.yaml. Every
// [LoadFilterConfig] call returns fresh copies, so a test may change the messages freely.
type FilterConfig struct {
	// Filter is the typed config of the ext_proc filter as shipped.
	Filter *extprocv3.ExternalProcessor
	// BufferLimit is the per-stream buffer limit: the listener's
	// per_connection_buffer_limit_bytes, which governs HTTP/1.1 downstreams such as the
	// harness's front door (§1.6). Envoy's default is 1 MiB.
	BufferLimit int
	// Routes are the routes of the listener's single virtual host, in match order.
	Routes []Route
	// MaxHeadersCount and MaxRequestHeadersKB are the connection manager's header limits, used
	// for the header-mutation checks (§3.1). Defaults 100 and 60.
	MaxHeadersCount     int
	MaxRequestHeadersKB int
	// StreamIdleTimeout is the connection manager's stream_idle_timeout (default 5m; 0
	// disables it): how long a request may go without activity on the client's or the
	// upstream's side (§7.12).
	StreamIdleTimeout time.Duration
	// Bootstrap is the whole parsed bootstrap; [StartReal] writes Envoy's config from it.
	Bootstrap *bootstrapv3.Bootstrap
}

// Route is one route of the listener: a path match, where it goes, and the ext_proc per-route
// config (ExtProcPerRoute) when it has one.
type Route struct {
	// Prefix is match.prefix; Path is match.path (an exact match on the path without the
	// query). Exactly one is set.
	Prefix, Path string
	// Cluster is the upstream cluster. The harness sends every cluster to Options.Upstream.
	Cluster string
	// PrefixRewrite replaces the matched prefix on the upstream request (route.prefix_rewrite).
	PrefixRewrite string
	// HostRewrite replaces the upstream Host (route.host_rewrite_literal).
	HostRewrite string
	// Timeout is the route timeout, counted from the end of the (processed) request; 0
	// disables it. Envoy's default when unset is 15s.
	Timeout time.Duration
	// PerRoute is the route's typed_per_filter_config for the ext_proc filter, or nil.
	PerRoute *extprocv3.ExtProcPerRoute
}

// matches reports whether the route matches the request path (with its query).
func (r Route) matches(path string) bool {
	if r.Path != "" {
		p, _, _ := strings.Cut(path, "?")
		return p == r.Path
	}
	return strings.HasPrefix(path, r.Prefix)
}

// name is the route's match for records and messages.
func (r Route) name() string {
	if r.Path != "" {
		return r.Path
	}
	return r.Prefix
}

// rewrite applies prefix_rewrite to the request path.
func (r Route) rewrite(path string) string {
	if r.PrefixRewrite == "" || r.Path != "" {
		return path
	}
	return r.PrefixRewrite + strings.TrimPrefix(path, r.Prefix)
}

// matchRoute returns the first route matching path, as Envoy does, or false.
func (c FilterConfig) matchRoute(path string) (Route, bool) {
	for _, r := range c.Routes {
		if r.matches(path) {
			return r, true
		}
	}
	return Route{}, false
}

// LoadFilterConfig parses the bootstrap at path with the envoy package (the parsing the
// envoy/ tests validate) and extracts the ext_proc listener's filter config, buffer limit and
// routes. It refuses a bootstrap that uses routing features the harness does not model, so
// that the shipped config cannot silently outgrow the tests.
func LoadFilterConfig(path string) (FilterConfig, error) {
	b, err := envoy.Load(path)
	if err != nil {
		return FilterConfig{}, fmt.Errorf("load filter config: %w", err)
	}
	if err := envoy.Validate(b); err != nil {
		return FilterConfig{}, fmt.Errorf("load filter config: %w", err)
	}
	return filterConfigFrom(b)
}

func filterConfigFrom(b *bootstrapv3.Bootstrap) (FilterConfig, error) {
	in, err := envoy.FindIngress(b)
	if err != nil {
		return FilterConfig{}, err
	}
	c := FilterConfig{
		Filter:              proto.Clone(in.ExtProc).(*extprocv3.ExternalProcessor),
		BufferLimit:         defaultBufferLimit,
		MaxHeadersCount:     defaultMaxHeadersCount,
		MaxRequestHeadersKB: defaultMaxHeadersKB,
		StreamIdleTimeout:   defaultStreamIdleTimeout,
		Bootstrap:           envoy.Clone(b),
	}
	if v := in.HCM.GetStreamIdleTimeout(); v != nil {
		c.StreamIdleTimeout = v.AsDuration()
	}
	if v := in.Listener.GetPerConnectionBufferLimitBytes(); v != nil {
		c.BufferLimit = int(v.GetValue())
	}
	if v := in.HCM.GetCommonHttpProtocolOptions().GetMaxHeadersCount(); v != nil {
		c.MaxHeadersCount = int(v.GetValue())
	}
	if v := in.HCM.GetMaxRequestHeadersKb(); v != nil {
		c.MaxRequestHeadersKB = int(v.GetValue())
	}
	rc := in.HCM.GetRouteConfig()
	if rc == nil {
		return FilterConfig{}, errors.New("load filter config: only an inline route_config is modelled")
	}
	if len(rc.GetVirtualHosts()) != 1 || len(rc.GetVirtualHosts()[0].GetDomains()) != 1 || rc.GetVirtualHosts()[0].GetDomains()[0] != "*" {
		return FilterConfig{}, errors.New(`load filter config: only one virtual host with domains ["*"] is modelled`)
	}
	vh := rc.GetVirtualHosts()[0]
	if len(vh.GetTypedPerFilterConfig()) > 0 || len(rc.GetTypedPerFilterConfig()) > 0 {
		return FilterConfig{}, errors.New("load filter config: typed_per_filter_config above the route level is not modelled")
	}
	for _, r := range vh.GetRoutes() {
		route, err := routeFrom(r)
		if err != nil {
			return FilterConfig{}, fmt.Errorf("load filter config: route %q: %w", r.GetName()+r.GetMatch().GetPrefix()+r.GetMatch().GetPath(), err)
		}
		c.Routes = append(c.Routes, route)
	}
	return c, nil
}

func routeFrom(r *routev3.Route) (Route, error) {
	m := r.GetMatch()
	if len(m.GetHeaders()) > 0 || len(m.GetQueryParameters()) > 0 || m.GetRuntimeFraction() != nil || m.GetGrpc() != nil ||
		m.GetTlsContext() != nil || len(m.GetDynamicMetadata()) > 0 || (m.GetCaseSensitive() != nil && !m.GetCaseSensitive().GetValue()) {
		return Route{}, errors.New("only case-sensitive prefix and path matches are modelled")
	}
	var out Route
	switch ps := m.GetPathSpecifier().(type) {
	case *routev3.RouteMatch_Prefix:
		out.Prefix = ps.Prefix
	case *routev3.RouteMatch_Path:
		out.Path = ps.Path
	default:
		return Route{}, errors.New("only prefix and path matches are modelled")
	}
	ra := r.GetRoute()
	if ra == nil || ra.GetCluster() == "" {
		return Route{}, errors.New("only route actions to a named cluster are modelled")
	}
	if ra.GetRegexRewrite() != nil || ra.GetPathRewritePolicy() != nil || len(r.GetRequestHeadersToAdd()) > 0 ||
		len(r.GetResponseHeadersToAdd()) > 0 || len(r.GetRequestHeadersToRemove()) > 0 || len(r.GetResponseHeadersToRemove()) > 0 {
		return Route{}, errors.New("header and regex rewrites are not modelled")
	}
	out.Cluster = ra.GetCluster()
	out.PrefixRewrite = ra.GetPrefixRewrite()
	out.HostRewrite = ra.GetHostRewriteLiteral()
	out.Timeout = defaultRouteTimeout
	if ra.GetTimeout() != nil {
		out.Timeout = ra.GetTimeout().AsDuration()
	}
	for name, a := range r.GetTypedPerFilterConfig() {
		if name != envoy.ExtProcFilterName {
			return Route{}, fmt.Errorf("typed_per_filter_config for %s is not modelled", name)
		}
		pr := &extprocv3.ExtProcPerRoute{}
		if err := a.UnmarshalTo(pr); err != nil {
			return Route{}, fmt.Errorf("decode ExtProcPerRoute: %w", err)
		}
		out.PerRoute = pr
	}
	return out, nil
}

// ShippedConfigPath returns the path of envoy/envoy.yaml in this module, found by walking up
// from the working directory (a test's package directory) to go.mod.
func ShippedConfigPath() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find envoy.yaml: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, "envoy", "envoy.yaml"), nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("find envoy.yaml: no go.mod above the working directory")
		}
		dir = parent
	}
}

// ShippedConfig loads the FilterConfig of the shipped envoy/envoy.yaml, failing the test if it
// cannot.
func ShippedConfig(t testing.TB) FilterConfig {
	t.Helper()
	path, err := ShippedConfigPath()
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	c, err := LoadFilterConfig(path)
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	return c
}

// notModelled returns why the harness cannot play Envoy for this filter config, or nil. The
// harness refuses such configs rather than approximating them.
func notModelled(f *extprocv3.ExternalProcessor, routes []Route) error {
	var why []string
	gs := f.GetGrpcService()
	switch {
	case gs == nil:
		why = append(why, "http_service (only grpc_service is modelled)")
	case gs.GetEnvoyGrpc() == nil:
		why = append(why, "google_grpc (only envoy_grpc is modelled)")
	}
	if f.GetObservabilityMode() {
		why = append(why, "observability_mode")
	}
	if f.GetSendBodyWithoutWaitingForHeaderResponse() {
		why = append(why, "send_body_without_waiting_for_header_response")
	}
	if len(f.GetRequestAttributes()) > 0 || len(f.GetResponseAttributes()) > 0 {
		why = append(why, "request_attributes/response_attributes (CEL)")
	}
	if f.GetForwardRules() != nil {
		why = append(why, "forward_rules")
	}
	if f.GetProcessingRequestModifier() != nil || f.GetOnProcessingResponse() != nil {
		why = append(why, "processing_request_modifier/on_processing_response")
	}
	if f.GetAllowContentLengthHeader() {
		why = append(why, "allow_content_length_header (Envoy 1.38+)")
	}
	if err := bodyModesModelled(f.GetProcessingMode(), true); err != nil {
		why = append(why, err.Error())
	}
	for _, m := range f.GetAllowedOverrideModes() {
		if err := bodyModesModelled(m, false); err != nil {
			why = append(why, "allowed_override_modes: "+err.Error())
		}
	}
	for _, r := range routes {
		o := r.PerRoute.GetOverrides()
		if o == nil {
			continue
		}
		if o.GetGrpcService() != nil || len(o.GetRequestAttributes()) > 0 || len(o.GetResponseAttributes()) > 0 ||
			o.GetAsyncMode() || o.GetProcessingRequestModifier() != nil {
			why = append(why, fmt.Sprintf("route %s: overrides other than processing_mode, grpc_initial_metadata, metadata_options and failure_mode_allow", r.name()))
		}
		if err := bodyModesModelled(o.GetProcessingMode(), false); err != nil {
			why = append(why, fmt.Sprintf("route %s: %v", r.name(), err))
		}
	}
	if len(why) == 0 {
		return nil
	}
	return fmt.Errorf("not modelled by the harness: %s", strings.Join(why, "; "))
}

// bodyModesModelled returns why the harness cannot play m's body modes, or nil:
// FULL_DUPLEX_STREAMED is modelled for the response, and for the request only as the filter's
// configured mode (filterLevel), which disables mode_override (FD §5): a
// request reaching it by a per-route mode or a mode_override (such as the standalone one of
// Envoy 1.40, FD §6) is not modelled. BUFFERED_PARTIAL is not modelled at all.
func bodyModesModelled(m *extprocv3.ProcessingMode, filterLevel bool) error {
	switch bm := m.GetRequestBodyMode(); {
	case bm == extprocv3.ProcessingMode_NONE, bm == extprocv3.ProcessingMode_BUFFERED, bm == extprocv3.ProcessingMode_STREAMED:
	case bm == extprocv3.ProcessingMode_FULL_DUPLEX_STREAMED && filterLevel:
	default:
		return fmt.Errorf("request body mode %s", bm)
	}
	switch bm := m.GetResponseBodyMode(); bm {
	case extprocv3.ProcessingMode_NONE, extprocv3.ProcessingMode_BUFFERED, extprocv3.ProcessingMode_STREAMED,
		extprocv3.ProcessingMode_FULL_DUPLEX_STREAMED:
	default:
		return fmt.Errorf("response body mode %s", bm)
	}
	return nil
}

// checkTrailerModes is Envoy's config check (FD §5): a filter-level
// FULL_DUPLEX_STREAMED body mode needs the direction's trailer mode SEND. Per-route modes and
// mode_override are not checked.
func checkTrailerModes(m *extprocv3.ProcessingMode) error {
	if m.GetRequestBodyMode() == extprocv3.ProcessingMode_FULL_DUPLEX_STREAMED && m.GetRequestTrailerMode() != extprocv3.ProcessingMode_SEND {
		return errors.New("if the ext_proc filter has the request_body_mode set to FULL_DUPLEX_STREAMED, then the request_trailer_mode has to be set to SEND")
	}
	if m.GetResponseBodyMode() == extprocv3.ProcessingMode_FULL_DUPLEX_STREAMED && m.GetResponseTrailerMode() != extprocv3.ProcessingMode_SEND {
		return errors.New("if the ext_proc filter has the response_body_mode set to FULL_DUPLEX_STREAMED, then the response_trailer_mode has to be set to SEND")
	}
	return nil
}
