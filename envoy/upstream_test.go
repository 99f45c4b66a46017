package envoy_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/codeinterp/codeinterp/envoy"
	"github.com/codeinterp/codeinterp/test/e2e/harness"
)

func TestPointCluster(t *testing.T) {
	tests := []struct {
		name     string
		give     string
		wantType clusterv3.Cluster_DiscoveryType
		wantHost string
		wantPort uint32
		wantTLS  bool
	}{
		{name: "local http by IP", give: "http://127.0.0.1:8080", wantType: clusterv3.Cluster_STATIC, wantHost: "127.0.0.1", wantPort: 8080},
		{name: "http by name, default port", give: "http://vllm.internal", wantType: clusterv3.Cluster_STRICT_DNS, wantHost: "vllm.internal", wantPort: 80},
		{name: "https, default port", give: "https://api.openai.com", wantType: clusterv3.Cluster_STRICT_DNS, wantHost: "api.openai.com", wantPort: 443, wantTLS: true},
		{name: "https, trailing slash and port", give: "https://llm.example.com:8443/", wantType: clusterv3.Cluster_STRICT_DNS, wantHost: "llm.example.com", wantPort: 8443, wantTLS: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := envoy.Load("envoy.yaml")
			require.NoError(t, err, "load envoy.yaml")
			require.NoError(t, envoy.PointCluster(b, "llm", tt.give), "point llm at %s", tt.give)
			require.NoError(t, envoy.Validate(b), "validate after pointing at %s", tt.give)
			c := envoy.Cluster(b, "llm")
			assert.Equal(t, tt.wantType, c.GetType(), "cluster type for %s", tt.give)
			sa := c.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress()
			assert.Equal(t, tt.wantHost, sa.GetAddress(), "endpoint host for %s", tt.give)
			assert.Equal(t, tt.wantPort, sa.GetPortValue(), "endpoint port for %s", tt.give)
			if !tt.wantTLS {
				assert.Nil(t, c.GetTransportSocket(), "no TLS for %s", tt.give)
				return
			}
			tls := &tlsv3.UpstreamTlsContext{}
			require.NoError(t, c.GetTransportSocket().GetTypedConfig().UnmarshalTo(tls), "TLS context for %s", tt.give)
			assert.Equal(t, tt.wantHost, tls.GetSni(), "SNI for %s", tt.give)
			assert.Equal(t, envoy.SystemCAFile, tls.GetCommonTlsContext().GetValidationContext().GetTrustedCa().GetFilename(), "CA roots for %s", tt.give)
			in, err := envoy.FindIngress(b)
			require.NoError(t, err, "ingress")
			for _, r := range in.HCM.GetRouteConfig().GetVirtualHosts()[0].GetRoutes() {
				// Only the routes to the model cluster: the Containers API's stays the server's.
				toLLM := r.GetRoute().GetCluster() == "llm"
				assert.Equal(t, toLLM, r.GetRoute().GetAutoHostRewrite().GetValue(), "route %s (cluster %s) rewrites Host for %s", r.GetMatch().GetPrefix(), r.GetRoute().GetCluster(), tt.give)
			}
		})
	}
}

func TestPointClusterRejects(t *testing.T) {
	for _, give := range []string{"ftp://host", "http://host/v1", "https://", "http://host:0", "http://host:99999", "http://u:p@host", "http://host?x=1"} {
		b, err := envoy.Load("envoy.yaml")
		require.NoError(t, err, "load envoy.yaml")
		assert.Error(t, envoy.PointCluster(b, "llm", give), "upstream %q", give)
	}
	b, err := envoy.Load("envoy.yaml")
	require.NoError(t, err, "load envoy.yaml")
	assert.Error(t, envoy.PointCluster(b, "nope", "http://127.0.0.1:1"), "an unknown cluster")
}

// TestRealEnvoyAcceptsBootstraps runs `envoy --mode validate` on the shipped bootstrap and on the
// ones `make run` writes for http and https upstreams: the real Envoy 1.40 is the judge of what
// the protos above allow.
func TestRealEnvoyAcceptsBootstraps(t *testing.T) {
	bin := harness.RequireEnvoy(t)
	dir := t.TempDir()
	validate := func(name, path string) {
		out, err := exec.Command(bin, "--mode", "validate", "-c", path, "--log-level", "error").CombinedOutput()
		assert.NoError(t, err, "envoy --mode validate %s:\n%s", name, out)
	}
	validate("envoy.yaml", "envoy.yaml")
	for _, up := range []string{"http://127.0.0.1:8080", "https://api.openai.com"} {
		b, err := envoy.Load("envoy.yaml")
		require.NoError(t, err, "load envoy.yaml")
		require.NoError(t, envoy.PointCluster(b, "llm", up), "point llm at %s", up)
		js, err := protojson.Marshal(b)
		require.NoError(t, err, "encode for %s", up)
		path := filepath.Join(dir, "bootstrap.json")
		require.NoError(t, os.WriteFile(path, js, 0o600), "write bootstrap for %s", up)
		validate(up, path)
	}
}
