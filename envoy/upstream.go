package envoy

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// SystemCAFile is where Debian (and most Linux distributions) keep the system's CA roots, which
// a TLS upstream is verified against.
const SystemCAFile = "/etc/ssl/certs/ca-certificates.crt"

// PointCluster rewrites the static cluster name of b to send to the model API at base, an
// "http://host[:port]" or "https://host[:port]" URL without a path: one endpoint at that host
// (STATIC for an IP address, STRICT_DNS for a name), and for https a TLS transport with SNI and
// certificate checks against [SystemCAFile] and the host name. Every route to the cluster then
// rewrites the Host header to the upstream's (auto_host_rewrite), which hosted APIs require.
func PointCluster(b *bootstrapv3.Bootstrap, name, base string) error {
	u, err := url.Parse(base)
	if err != nil {
		return fmt.Errorf("upstream %q: %w", base, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("upstream %q: the scheme must be http or https", base)
	}
	if u.Path != "" && u.Path != "/" || u.RawQuery != "" || u.User != nil {
		return fmt.Errorf("upstream %q: give the base URL only (scheme, host, port); request paths are kept as the client sends them", base)
	}
	host := u.Hostname()
	if host == "" {
		return fmt.Errorf("upstream %q: no host", base)
	}
	port := uint64(80)
	if u.Scheme == "https" {
		port = 443
	}
	if p := u.Port(); p != "" {
		if port, err = strconv.ParseUint(p, 10, 16); err != nil || port == 0 {
			return fmt.Errorf("upstream %q: bad port %q", base, p)
		}
	}
	c := Cluster(b, name)
	if c == nil {
		return fmt.Errorf("upstream: the bootstrap has no cluster %q", name)
	}
	kind := clusterv3.Cluster_STATIC
	if net.ParseIP(host) == nil {
		kind = clusterv3.Cluster_STRICT_DNS
	}
	c.ClusterDiscoveryType = &clusterv3.Cluster_Type{Type: kind}
	c.DnsLookupFamily = clusterv3.Cluster_V4_PREFERRED
	c.LoadAssignment = &endpointv3.ClusterLoadAssignment{
		ClusterName: name,
		Endpoints: []*endpointv3.LocalityLbEndpoints{{LbEndpoints: []*endpointv3.LbEndpoint{{
			HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
				Address:  socketAddress(host, uint32(port)),
				Hostname: host,
			}},
		}}}},
	}
	c.TransportSocket = nil
	if u.Scheme == "https" {
		tls := &tlsv3.UpstreamTlsContext{
			Sni: host,
			CommonTlsContext: &tlsv3.CommonTlsContext{
				ValidationContextType: &tlsv3.CommonTlsContext_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
					TrustedCa: &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: SystemCAFile}},
					MatchTypedSubjectAltNames: []*tlsv3.SubjectAltNameMatcher{{
						SanType: tlsv3.SubjectAltNameMatcher_DNS,
						Matcher: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: host}},
					}},
				}},
			},
		}
		a, err := anypb.New(tls)
		if err != nil {
			return fmt.Errorf("upstream: pack tls context: %w", err)
		}
		c.TransportSocket = &corev3.TransportSocket{Name: "envoy.transport_sockets.tls", ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: a}}
	}
	return rewriteHostForCluster(b, name)
}

// rewriteHostForCluster sets auto_host_rewrite on every route of the ingress that sends to the
// cluster name.
func rewriteHostForCluster(b *bootstrapv3.Bootstrap, name string) error {
	in, err := FindIngress(b)
	if err != nil {
		return err
	}
	n := 0
	for _, vh := range in.HCM.GetRouteConfig().GetVirtualHosts() {
		for _, r := range vh.GetRoutes() {
			ra := r.GetRoute()
			if ra.GetCluster() != name {
				continue
			}
			ra.HostRewriteSpecifier = &routev3.RouteAction_AutoHostRewrite{AutoHostRewrite: wrapperspb.Bool(true)}
			n++
		}
	}
	if n == 0 {
		return errors.New("upstream: no route sends to the cluster " + name)
	}
	a, err := anypb.New(in.HCM)
	if err != nil {
		return fmt.Errorf("upstream: pack connection manager: %w", err)
	}
	in.HCMAny.TypeUrl, in.HCMAny.Value = a.GetTypeUrl(), a.GetValue()
	return nil
}

func socketAddress(host string, port uint32) *corev3.Address {
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address: host, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port},
	}}}
}
