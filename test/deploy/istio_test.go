package deploy_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	networkingv1alpha3 "istio.io/api/networking/v1alpha3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/codeinterp/codeinterp/envoy"
	"github.com/codeinterp/codeinterp/internal/demo"
)

const istioDir = "../../deploy/istio"

// istioObject is one manifest of deploy/istio, its spec decoded strictly into the Istio API type of
// its kind (istio.io/api, pinned in go.mod).
type istioObject struct {
	kind string
	name string
	spec proto.Message
}

// loadIstio decodes every manifest of file strictly: the envelope (an unknown field is an error),
// and the spec with protojson, which refuses unknown fields too.
func loadIstio(t *testing.T, file string) []istioObject {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(istioDir, file))
	require.NoError(t, err)
	var objs []istioObject
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var env struct {
			APIVersion string            `json:"apiVersion"`
			Kind       string            `json:"kind"`
			Metadata   metav1.ObjectMeta `json:"metadata"`
			Spec       json.RawMessage   `json:"spec"`
		}
		require.NoError(t, yaml.UnmarshalStrict([]byte(doc), &env), "%s: the envelope", file)
		var spec proto.Message
		switch env.Kind {
		case "EnvoyFilter":
			require.Equal(t, "networking.istio.io/v1alpha3", env.APIVersion, "%s: EnvoyFilter's apiVersion", file)
			spec = &networkingv1alpha3.EnvoyFilter{}
		case "ServiceEntry":
			require.Contains(t, []string{"networking.istio.io/v1", "networking.istio.io/v1beta1"}, env.APIVersion, file)
			spec = &networkingv1alpha3.ServiceEntry{}
		case "DestinationRule":
			require.Contains(t, []string{"networking.istio.io/v1", "networking.istio.io/v1beta1"}, env.APIVersion, file)
			spec = &networkingv1alpha3.DestinationRule{}
		default:
			t.Fatalf("%s: unexpected kind %q", file, env.Kind)
		}
		require.NotEmpty(t, env.Metadata.Name, "%s: a %s's name", file, env.Kind)
		require.NoError(t, protojson.Unmarshal(env.Spec, spec), "%s: strict decode of %s %s's spec", file, env.Kind, env.Metadata.Name)
		objs = append(objs, istioObject{kind: env.Kind, name: env.Metadata.Name, spec: spec})
	}
	return objs
}

// istioBase is an Envoy bootstrap shaped as Istio's proxy configuration for the context: the
// plain-HTTP listener of port 80 (bound to listen here), whose route configuration has the model
// API's virtual host (named host:port, as Istio names them) and a catch-all one, both to the model
// (at modelAddr) through a cluster named the way Istio names them, with '|'.
func istioBase(t *testing.T, listen, modelAddr string) *bootstrapv3.Bootstrap {
	t.Helper()
	host, p, ok := strings.Cut(listen, ":")
	require.True(t, ok)
	mhost, mport, ok := strings.Cut(modelAddr, ":")
	require.True(t, ok)
	b, err := envoy.Parse([]byte(fmt.Sprintf(`
admin:
  address: {socket_address: {address: 127.0.0.1, port_value: 0}}
static_resources:
  listeners:
  - name: 0.0.0.0_80
    address: {socket_address: {address: %[1]s, port_value: %[2]s}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: outbound_0.0.0.0_80
          route_config:
            name: "80"
            virtual_hosts:
            - name: api.openai.com:80
              domains: [api.openai.com, "api.openai.com:80"]
              routes:
              - match: {prefix: /}
                route: {cluster: "outbound|80||api.openai.com", timeout: 600s}
            - name: allow_any
              domains: ["*"]
              routes:
              - match: {prefix: /}
                route: {cluster: "outbound|80||api.openai.com", timeout: 600s}
          http_filters:
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
  clusters:
  - name: "outbound|80||api.openai.com"
    type: STATIC
    connect_timeout: 1s
    load_assignment:
      cluster_name: "outbound|80||api.openai.com"
      endpoints:
      - lb_endpoints:
        - endpoint: {address: {socket_address: {address: %[3]s, port_value: %[4]s}}}
`, host, p, mhost, mport)))
	require.NoError(t, err)
	return b
}

// applyEnvoyFilter applies ef's patches to b the way Istio merges them into a proxy of context
// (SIDECAR_OUTBOUND or GATEWAY) whose only HTTP listener is port 80's: CLUSTER ADD appends the
// cluster; HTTP_FILTER INSERT_BEFORE inserts the filter before the one matched in every HTTP
// connection manager of the matched listener; VIRTUAL_HOST MERGE merges the value into the virtual
// host matched by name (proto.Merge, as Istio does). Any other patch fails the test, as does a
// patch that matches nothing.
func applyEnvoyFilter(t *testing.T, b *bootstrapv3.Bootstrap, ef *networkingv1alpha3.EnvoyFilter, context networkingv1alpha3.EnvoyFilter_PatchContext) {
	t.Helper()
	into := func(v *structpb.Struct, m proto.Message) {
		t.Helper()
		data, err := protojson.Marshal(v)
		require.NoError(t, err)
		require.NoError(t, protojson.Unmarshal(data, m), "a patch value as %T:\n%s", m, data)
	}
	for i, cp := range ef.GetConfigPatches() {
		require.Equal(t, context, cp.GetMatch().GetContext(), "patch %d's context", i)
		applied := 0
		switch cp.GetApplyTo() {
		case networkingv1alpha3.EnvoyFilter_CLUSTER:
			require.Equal(t, networkingv1alpha3.EnvoyFilter_Patch_ADD, cp.GetPatch().GetOperation(), "patch %d", i)
			c := &clusterv3.Cluster{}
			into(cp.GetPatch().GetValue(), c)
			assert.NotContains(t, c.GetName(), "|", "the ext_proc cluster's name is a valid :authority")
			b.StaticResources.Clusters = append(b.StaticResources.Clusters, c)
			applied++
		case networkingv1alpha3.EnvoyFilter_HTTP_FILTER:
			require.Equal(t, networkingv1alpha3.EnvoyFilter_Patch_INSERT_BEFORE, cp.GetPatch().GetOperation(), "patch %d", i)
			lm := cp.GetMatch().GetListener()
			require.EqualValues(t, 80, lm.GetPortNumber(), "patch %d: the plain-HTTP port", i)
			require.Equal(t, "envoy.filters.network.http_connection_manager", lm.GetFilterChain().GetFilter().GetName())
			before := lm.GetFilterChain().GetFilter().GetSubFilter().GetName()
			f := &hcmv3.HttpFilter{}
			into(cp.GetPatch().GetValue(), f)
			for _, l := range b.GetStaticResources().GetListeners() {
				for _, fc := range l.GetFilterChains() {
					for _, nf := range fc.GetFilters() {
						hcm := &hcmv3.HttpConnectionManager{}
						require.NoError(t, nf.GetTypedConfig().UnmarshalTo(hcm))
						at := slices.IndexFunc(hcm.HttpFilters, func(h *hcmv3.HttpFilter) bool { return h.GetName() == before })
						require.GreaterOrEqual(t, at, 0, "patch %d: no filter %s", i, before)
						hcm.HttpFilters = slices.Insert(hcm.HttpFilters, at, f)
						a, err := anypb.New(hcm)
						require.NoError(t, err)
						nf.GetTypedConfig().Value = a.Value
						applied++
					}
				}
			}
		case networkingv1alpha3.EnvoyFilter_VIRTUAL_HOST:
			require.Equal(t, networkingv1alpha3.EnvoyFilter_Patch_MERGE, cp.GetPatch().GetOperation(), "patch %d", i)
			name := cp.GetMatch().GetRouteConfiguration().GetVhost().GetName()
			v := &routev3.VirtualHost{}
			into(cp.GetPatch().GetValue(), v)
			for _, l := range b.GetStaticResources().GetListeners() {
				for _, fc := range l.GetFilterChains() {
					for _, nf := range fc.GetFilters() {
						hcm := &hcmv3.HttpConnectionManager{}
						require.NoError(t, nf.GetTypedConfig().UnmarshalTo(hcm))
						for _, vh := range hcm.GetRouteConfig().GetVirtualHosts() {
							if vh.GetName() == name {
								proto.Merge(vh, v)
								applied++
							}
						}
						a, err := anypb.New(hcm)
						require.NoError(t, err)
						nf.GetTypedConfig().Value = a.Value
					}
				}
			}
		default:
			t.Fatalf("patch %d: applyTo %v is not one this test applies", i, cp.GetApplyTo())
		}
		require.Positive(t, applied, "patch %d (%v) matches nothing", i, cp.GetApplyTo())
	}
}

// validateBootstrap runs the real Envoy 1.40's --mode validate on b.
func validateBootstrap(t *testing.T, b *bootstrapv3.Bootstrap) {
	t.Helper()
	require.NoError(t, envoy.Validate(b))
	data, err := protojson.Marshal(b)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "envoy.json")
	require.NoError(t, os.WriteFile(path, data, 0o644))
	var logs bytes.Buffer
	cmd := exec.Command(envoyBin(), "--mode", "validate", "-c", path)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	require.NoError(t, cmd.Run(), "envoy --mode validate: %s", logs.String())
}

// TestIstio decodes deploy/istio's manifests strictly with the Istio API types, applies each
// EnvoyFilter to an Istio-shaped proxy configuration of its context the way Istio merges patches,
// and validates the result with the real Envoy 1.40.
func TestIstio(t *testing.T) {
	requireDeployTest(t)
	tests := []struct {
		file    string
		context networkingv1alpha3.EnvoyFilter_PatchContext
	}{
		{file: "sidecar.yaml", context: networkingv1alpha3.EnvoyFilter_SIDECAR_OUTBOUND},
		{file: "gateway.yaml", context: networkingv1alpha3.EnvoyFilter_GATEWAY},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			objs := loadIstio(t, tt.file)
			require.Len(t, objs, 1)
			ef := objs[0].spec.(*networkingv1alpha3.EnvoyFilter)
			b := istioBase(t, freeAddr(t), freeAddr(t))
			applyEnvoyFilter(t, b, ef, tt.context)
			validateBootstrap(t, b)
		})
	}
	objs := loadIstio(t, "serviceentry.yaml")
	require.Len(t, objs, 2)
	se := objs[0].spec.(*networkingv1alpha3.ServiceEntry)
	dr := objs[1].spec.(*networkingv1alpha3.DestinationRule)
	assert.Equal(t, []string{"api.openai.com"}, se.GetHosts())
	assert.Equal(t, "api.openai.com", dr.GetHost())
	var http80 *networkingv1alpha3.ServicePort
	for _, p := range se.GetPorts() {
		if p.GetNumber() == 80 {
			http80 = p
		}
	}
	require.NotNil(t, http80, "the plain-HTTP port the sidecar's ext_proc sees")
	assert.Equal(t, "HTTP", http80.GetProtocol())
	assert.EqualValues(t, 443, http80.GetTargetPort(), "sent on to the API's TLS port")
	require.Len(t, dr.GetTrafficPolicy().GetPortLevelSettings(), 1)
	pl := dr.GetTrafficPolicy().GetPortLevelSettings()[0]
	assert.EqualValues(t, 80, pl.GetPort().GetNumber())
	assert.Equal(t, networkingv1alpha3.ClientTLSSettings_SIMPLE, pl.GetTls().GetMode(), "TLS originated by the sidecar")
}

// TestIstioSidecar runs the sidecar EnvoyFilter for real: the real Envoy 1.40 with the Istio-shaped
// configuration the filter patched (its ext_proc cluster pointed at a codeinterp container with the
// designed least privilege), in front of the demo model. A Responses request to the model API's
// virtual host runs code through codeinterp; the same request to any other host of the port-80
// listener reaches the model untouched (the filter is enabled on the model API's host only).
func TestIstioSidecar(t *testing.T) {
	requirePodman(t)
	give, args := designed(t)
	listen := freeAddr(t)
	s := startServer(t, image, give, append(args, "--upstream", "http://"+listen)...)
	serving, _ := s.wait(t, 60*time.Second)
	require.True(t, serving, "serves; logs:\n%s", s.logs(t))

	var seen toolTypes
	model := httptest.NewServer(seen.wrap(&demo.Model{}))
	t.Cleanup(model.Close)
	b := istioBase(t, listen, strings.TrimPrefix(model.URL, "http://"))
	objs := loadIstio(t, "sidecar.yaml")
	applyEnvoyFilter(t, b, objs[0].spec.(*networkingv1alpha3.EnvoyFilter), networkingv1alpha3.EnvoyFilter_SIDECAR_OUTBOUND)
	pointStatic(t, b, "codeinterp_ext_proc", s.grpc)
	runEnvoy(t, b, listen)

	f := &front{listen: listen, host: "api.openai.com"}
	logs, took := f.askSixTimesSeven(t)
	assert.Equal(t, "42\n", logs, "the code's logs through the sidecar's patched listener")
	assert.Equal(t, []string{"function"}, seen.first(), "the model API's host: the model sees the tool rewritten")

	seen.reset()
	body := `{"model":"gpt-4.1","tools":[{"type":"code_interpreter","container":{"type":"auto"}}],"input":"What is 6*7? Use Python."}`
	req, err := http.NewRequest(http.MethodPost, "http://"+listen+"/v1/responses", strings.NewReader(body))
	require.NoError(t, err)
	req.Host = "other.example"
	req.Header.Set("content-type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	assert.Equal(t, []string{"code_interpreter"}, seen.first(), "another host: the request reaches the model as the client sent it")
	t.Logf("istio sidecar filter: first conversation %v", took.Round(time.Millisecond))
}

// toolTypes records the tool types of each request a model receives.
type toolTypes struct {
	mu    sync.Mutex
	types [][]string
}

// wrap returns h recording each request's tools[].type first.
func (tt *toolTypes) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req struct {
			Tools []struct {
				Type string `json:"type"`
			} `json:"tools"`
		}
		_ = json.Unmarshal(body, &req)
		var types []string
		for _, tool := range req.Tools {
			types = append(types, tool.Type)
		}
		tt.mu.Lock()
		tt.types = append(tt.types, types)
		tt.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body))
		h.ServeHTTP(w, r)
	})
}

// first is the tool types of the first request recorded.
func (tt *toolTypes) first() []string {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	if len(tt.types) == 0 {
		return nil
	}
	return tt.types[0]
}

func (tt *toolTypes) reset() {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	tt.types = nil
}

// requireDeployTest skips the test unless CODEINTERP_DEPLOY_TEST is set.
func requireDeployTest(t *testing.T) {
	t.Helper()
	if os.Getenv("CODEINTERP_DEPLOY_TEST") == "" {
		t.Skip("the deployment tests run with CODEINTERP_DEPLOY_TEST=1 (make deploy-test)")
	}
}
