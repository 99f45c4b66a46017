package harness

import (
	"fmt"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	tracev3 "github.com/envoyproxy/go-control-plane/envoy/config/trace/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/codeinterp/codeinterp/envoy"
)

// TracerCluster is the cluster of the bootstrap [StartRealTraced] runs that reaches the
// OpenTelemetry collector.
const TracerCluster = "otel_collector"

// EnvoyServiceName is the service.name of the spans of the Envoy [StartRealTraced] runs.
const EnvoyServiceName = "envoy-codeinterp"

// StartRealTraced is [StartReal] (never pooled) with Envoy's OpenTelemetry tracer on, as
// docs/operations.md configures it: every request sampled, an upstream span per request
// (spawn_upstream_span), spans exported over OTLP/gRPC to collector ("host:port"). Envoy
// then injects its ext_proc client span's context as traceparent into each ext_proc stream's
// gRPC metadata, and its upstream spans' into the requests it forwards.
func StartRealTraced(t testing.TB, o Options, collector string) *RealEnvoy {
	t.Helper()
	bin, js := bootstrapJSON(t, o, func(b *bootstrapv3.Bootstrap) error { return addTracer(b, collector) })
	p, err := launchReal(bin, t.TempDir(), js)
	if err != nil {
		t.Fatalf("real envoy: %v", err)
	}
	return owned(t, p)
}

// addTracer turns on the OpenTelemetry tracer of b's ingress connection manager, exporting to
// a new cluster at collector.
func addTracer(b *bootstrapv3.Bootstrap, collector string) error {
	in, err := envoy.FindIngress(b)
	if err != nil {
		return err
	}
	otel, err := anypb.New(&tracev3.OpenTelemetryConfig{
		GrpcService: &corev3.GrpcService{
			TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: TracerCluster}},
			Timeout:         durationpb.New(time.Second),
		},
		ServiceName: EnvoyServiceName,
	})
	if err != nil {
		return fmt.Errorf("pack tracer config: %w", err)
	}
	in.HCM.Tracing = &hcmv3.HttpConnectionManager_Tracing{
		RandomSampling:    &typev3.Percent{Value: 100},
		SpawnUpstreamSpan: wrapperspb.Bool(true),
		Provider: &tracev3.Tracing_Http{
			Name:       "envoy.tracers.opentelemetry",
			ConfigType: &tracev3.Tracing_Http_TypedConfig{TypedConfig: otel},
		},
	}
	hcm, err := anypb.New(in.HCM)
	if err != nil {
		return fmt.Errorf("pack connection manager: %w", err)
	}
	in.HCMAny.TypeUrl, in.HCMAny.Value = hcm.GetTypeUrl(), hcm.GetValue()

	addr, err := envoyAddress(collector)
	if err != nil {
		return fmt.Errorf("collector address %q: %w", collector, err)
	}
	h2, err := anypb.New(&httpv3.HttpProtocolOptions{
		UpstreamProtocolOptions: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_{ExplicitHttpConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig{
			ProtocolConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{Http2ProtocolOptions: &corev3.Http2ProtocolOptions{}},
		}},
	})
	if err != nil {
		return fmt.Errorf("pack protocol options: %w", err)
	}
	b.StaticResources.Clusters = append(b.StaticResources.Clusters, &clusterv3.Cluster{
		Name:                          TracerCluster,
		ConnectTimeout:                durationpb.New(time.Second),
		ClusterDiscoveryType:          &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC},
		TypedExtensionProtocolOptions: map[string]*anypb.Any{"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": h2},
		LoadAssignment: &endpointv3.ClusterLoadAssignment{
			ClusterName: TracerCluster,
			Endpoints: []*endpointv3.LocalityLbEndpoints{{LbEndpoints: []*endpointv3.LbEndpoint{{
				HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{Address: addr}},
			}}}},
		},
	})
	if err := envoy.Validate(b); err != nil {
		return fmt.Errorf("validate the traced bootstrap: %w", err)
	}
	return nil
}
