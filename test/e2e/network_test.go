package e2e

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"google.golang.org/protobuf/proto"

	configv1 "github.com/codeinterp/codeinterp/api/codeinterp/config/v1"
	"github.com/codeinterp/codeinterp/internal/app"
	"github.com/codeinterp/codeinterp/pkg/config"
	"github.com/codeinterp/codeinterp/pkg/egress"
	"github.com/codeinterp/codeinterp/pkg/sandbox/local"
	"github.com/codeinterp/codeinterp/test/e2e/fakemodel"
	"github.com/codeinterp/codeinterp/test/e2e/harness"
)

// Issue 31 end to end, through the Envoy harness and a real Envoy: a code_interpreter tool
// whose auto container has a network_policy reaches its allowed domain through the
// container's proxy, over HTTP, and over HTTPS with a domain secret put in by the proxy (the
// server sees the secret; the code, the model and the client only ever see its placeholder);
// a domain off the list is refused, and so is a request outside the operator's allowlist
// (a 400). A container made through the Containers API echoes its policy without secrets.
//
// The destinations are loopback test servers named "example.com" (the name httptest's
// certificate carries): the proxy resolves names through its test hook (egress.Options'
// Resolve, and UpstreamRoots to trust the test certificate), given by a local backend the
// test makes and hands to the App (app.Options.Provider), as no name of the host resolves to
// loopback but "localhost", and no system file is touched. The operator's allow_networks
// opens 127.0.0.0/8, which the proxy refuses otherwise.
func TestNetworkPolicy(t *testing.T) {
	const secret = "s3cr3t-e2e-value-31"
	var (
		mu   sync.Mutex
		seen []string // the Authorization headers the HTTPS server received
	)
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = fmt.Fprintf(w, "hello from %s", r.Host)
	}))
	t.Cleanup(plain.Close)
	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("Authorization"))
		mu.Unlock()
		if r.Header.Get("Authorization") == "Bearer "+secret {
			_, _ = fmt.Fprint(w, "authorized")
			return
		}
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = fmt.Fprint(w, "unauthorized")
	}))
	t.Cleanup(tlsSrv.Close)
	plainPort, tlsPort := portOf(t, plain.URL), portOf(t, tlsSrv.URL)
	roots := x509.NewCertPool()
	roots.AddCert(tlsSrv.Certificate())

	env := NewEnv(t, EnvOptions{Configure: func(c *configv1.Config) {
		c.Network = &configv1.Network{
			Enabled:        true,
			AllowedDomains: []string{"example.com", "example.net"},
			AllowNetworks:  []string{"127.0.0.0/8"},
			Ports:          []uint32{uint32(plainPort), uint32(tlsPort)},
		}
	}})
	harness.Fronts(t, env.HarnessOptions(), func(t *testing.T, front harness.Front) {
		s := env.serveNetwork(t, front, egress.Options{Resolve: loopbackResolve, UpstreamRoots: roots})
		m := newModel(t, s.Model)

		t.Run("allowed, refused and a domain secret", func(t *testing.T) {
			mu.Lock()
			seen = nil
			mu.Unlock()
			code := fmt.Sprintf(`import os, urllib.request, urllib.error
tok = os.environ["API_TOKEN"]
print("token:", tok)
print(urllib.request.urlopen("http://example.com:%[1]d/hello", timeout=10).read().decode())
req = urllib.request.Request("https://example.com:%[2]d/secret", headers={"Authorization": "Bearer " + tok})
print("https:", urllib.request.urlopen(req, timeout=10).read().decode())
try:
    urllib.request.urlopen("http://example.net:%[1]d/hello", timeout=10)
    print("other: reached")
except urllib.error.HTTPError as e:
    print("other: refused", e.code)
except Exception as e:
    print("other: failed", type(e).__name__)
try:
    import socket
    socket.create_connection(("127.0.0.1", %[1]d), timeout=3)
    print("raw: reached")
except OSError as e:
    print("raw: failed", type(e).__name__)
`, plainPort, tlsPort)
			m.script(responsesPath, responsesReply(usage(10, 5), runCode("call_net", code)), responsesReply(usage(20, 5), fakemodel.Message("Fetched.")))
			c := s.Client("sk-net-" + front.Name())
			resp, err := c.Responses.New(t.Context(), responses.ResponseNewParams{
				Model: testModel,
				Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("fetch it")},
				Tools: []responses.ToolUnionParam{{OfCodeInterpreter: &responses.ToolCodeInterpreterParam{
					Container: responses.ToolCodeInterpreterContainerUnionParam{OfCodeInterpreterToolAuto: &responses.ToolCodeInterpreterContainerCodeInterpreterContainerAutoParam{
						NetworkPolicy: responses.ResponseToolSearchOutputItemParamToolCodeInterpreterContainerCodeInterpreterToolAutoNetworkPolicyUnion{
							OfAllowlist: &responses.ContainerNetworkPolicyAllowlistParam{
								AllowedDomains: []string{"example.com"},
								DomainSecrets:  []responses.ContainerNetworkPolicyDomainSecretParam{{Domain: "example.com", Name: "API_TOKEN", Value: secret}},
							},
						},
					}},
				}}},
				Include: []responses.ResponseIncludable{responses.ResponseIncludableCodeInterpreterCallOutputs},
			})
			require.NoError(t, err, "the request with a network policy")
			raw := resp.RawJSON()
			call := codeCall(t, *resp, 0)
			require.NotEmpty(t, call.Outputs, "the call's outputs: %s", raw)
			logs := call.Outputs[0].Logs
			assert.Contains(t, logs, "hello from example.com:"+strconv.Itoa(plainPort), "the allowed domain over HTTP: %s", logs)
			assert.Contains(t, logs, "https: authorized", "the allowed domain over HTTPS, with the secret put in: %s", logs)
			assert.Contains(t, logs, "other: refused 403", "a domain off the list is refused: %s", logs)
			assert.Contains(t, logs, "raw: failed", "a socket bypassing the proxy reaches nothing: %s", logs)
			assert.Regexp(t, `token: \S+`, logs, "the code sees a placeholder")
			assert.NotContains(t, raw, secret, "the answer never holds the secret")
			for i, r := range s.Model.Requests() {
				assert.NotContains(t, string(r.Body), secret, "model request %d never holds the secret", i)
			}
			tool := gjson.Get(raw, `tools.#(type=="code_interpreter")`)
			assert.Equal(t, `["example.com"]`, tool.Get("container.network_policy.allowed_domains").Raw, "the tool is echoed with its allowlist: %s", tool.Raw)
			assert.False(t, tool.Get("container.network_policy.domain_secrets").Exists(), "the tool is echoed without its secrets: %s", tool.Raw)
			mu.Lock()
			assert.Equal(t, []string{"Bearer " + secret}, seen, "the server received the secret, once")
			mu.Unlock()
		})

		t.Run("outside the operator's allowlist: a 400", func(t *testing.T) {
			before := len(s.Model.Requests())
			c := s.Client("sk-net-" + front.Name())
			_, err := c.Responses.New(t.Context(), responses.ResponseNewParams{
				Model: testModel,
				Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("fetch it")},
				Tools: []responses.ToolUnionParam{{OfCodeInterpreter: &responses.ToolCodeInterpreterParam{
					Container: responses.ToolCodeInterpreterContainerUnionParam{OfCodeInterpreterToolAuto: &responses.ToolCodeInterpreterContainerCodeInterpreterContainerAutoParam{
						NetworkPolicy: responses.ResponseToolSearchOutputItemParamToolCodeInterpreterContainerCodeInterpreterToolAutoNetworkPolicyUnion{
							OfAllowlist: &responses.ContainerNetworkPolicyAllowlistParam{AllowedDomains: []string{"api.elsewhere.org"}},
						},
					}},
				}}},
			})
			var apiErr *openai.Error
			require.True(t, errors.As(err, &apiErr), "an API error: %v", err)
			assert.Equal(t, http.StatusBadRequest, apiErr.StatusCode, "status: %s", apiErr.RawJSON())
			assert.Equal(t, "tools[0].container.network_policy", apiErr.Param, "param: %s", apiErr.RawJSON())
			assert.Equal(t, before, len(s.Model.Requests()), "nothing went to the model")
		})

		t.Run("a container of the Containers API echoes its policy", func(t *testing.T) {
			key := "sk-net-cntr-" + front.Name()
			s.Model.AddKey(key)
			c := s.Client(key)
			made, err := c.Containers.New(t.Context(), openai.ContainerNewParams{
				Name: "net",
				NetworkPolicy: openai.ContainerNewParamsNetworkPolicyUnion{OfAllowlist: &responses.ContainerNetworkPolicyAllowlistParam{
					AllowedDomains: []string{"example.com"},
					DomainSecrets:  []responses.ContainerNetworkPolicyDomainSecretParam{{Domain: "example.com", Name: "API_TOKEN", Value: secret}},
				}},
			})
			require.NoError(t, err, "create")
			got, err := c.Containers.Get(t.Context(), made.ID)
			require.NoError(t, err, "retrieve")
			assert.JSONEq(t, `{"type":"allowlist","allowed_domains":["example.com"]}`, got.NetworkPolicy.RawJSON(), "retrieve echoes the policy")
			assert.NotContains(t, got.RawJSON(), secret, "retrieve holds no secret")
			page, err := c.Containers.List(t.Context(), openai.ContainerListParams{})
			require.NoError(t, err, "list")
			require.Len(t, page.Data, 1, "the key's one container")
			assert.JSONEq(t, `{"type":"allowlist","allowed_domains":["example.com"]}`, page.Data[0].NetworkPolicy.RawJSON(), "list echoes the policy")
			assert.NotContains(t, page.RawJSON(), secret, "list holds no secret")
		})
	})
}

// TestNetworkPolicyOff: a server that has not enabled network access (the default) refuses a
// code_interpreter tool asking for an allowlist with a native 400 naming the member, before
// anything reaches the model; a disabled policy is no policy.
func TestNetworkPolicyOff(t *testing.T) {
	env := NewEnv(t, EnvOptions{})
	env.Fronts(t, func(t *testing.T, s *Stack) {
		m := newModel(t, s.Model)
		c := s.Client("sk-net-off-" + s.Front.Name())
		ask := func(policy responses.ResponseToolSearchOutputItemParamToolCodeInterpreterContainerCodeInterpreterToolAutoNetworkPolicyUnion) (*responses.Response, error) {
			return c.Responses.New(t.Context(), responses.ResponseNewParams{
				Model: testModel,
				Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("fetch it")},
				Tools: []responses.ToolUnionParam{{OfCodeInterpreter: &responses.ToolCodeInterpreterParam{
					Container: responses.ToolCodeInterpreterContainerUnionParam{OfCodeInterpreterToolAuto: &responses.ToolCodeInterpreterContainerCodeInterpreterContainerAutoParam{
						NetworkPolicy: policy,
					}},
				}}},
			})
		}
		before := len(s.Model.Requests())
		_, err := ask(responses.ResponseToolSearchOutputItemParamToolCodeInterpreterContainerCodeInterpreterToolAutoNetworkPolicyUnion{
			OfAllowlist: &responses.ContainerNetworkPolicyAllowlistParam{AllowedDomains: []string{"api.example.com"}},
		})
		var apiErr *openai.Error
		require.True(t, errors.As(err, &apiErr), "an API error: %v", err)
		assert.Equal(t, http.StatusBadRequest, apiErr.StatusCode, "status: %s", apiErr.RawJSON())
		assert.Equal(t, "tools[0].container.network_policy", apiErr.Param, "param: %s", apiErr.RawJSON())
		assert.Contains(t, apiErr.Message, "network access is not enabled on this server", "message: %s", apiErr.RawJSON())
		assert.Equal(t, before, len(s.Model.Requests()), "nothing went to the model")

		m.script(responsesPath, responsesReply(usage(10, 5), fakemodel.Message("No code needed.")))
		resp, err := ask(responses.ResponseToolSearchOutputItemParamToolCodeInterpreterContainerCodeInterpreterToolAutoNetworkPolicyUnion{
			OfDisabled: &responses.ContainerNetworkPolicyDisabledParam{},
		})
		require.NoError(t, err, "a disabled policy is served")
		assert.Equal(t, "No code needed.", resp.OutputText(), "the answer")
	})
}

// loopbackResolve is the proxies' resolver in TestNetworkPolicy: the test servers' names are
// on loopback, and nothing else exists.
func loopbackResolve(_ context.Context, host string) ([]netip.Addr, error) {
	switch strings.ToLower(strings.TrimSuffix(host, ".")) {
	case "example.com", "example.net":
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func portOf(t *testing.T, u string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(strings.TrimPrefix(strings.TrimPrefix(u, "https://"), "http://"))
	require.NoError(t, err, "port of %s", u)
	n, err := strconv.Atoi(p)
	require.NoError(t, err, "port of %s", u)
	return n
}

// serveNetwork is [Env.Serve] with a local backend of the test's own, whose proxies take
// proxy's test hooks (resolver, upstream roots) besides the configuration's network section.
func (e *Env) serveNetwork(t *testing.T, front harness.Front, proxy egress.Options) *Stack {
	t.Helper()
	cfg := DefaultConfig()
	e.opts.Configure(cfg)
	cfg.Listen = e.Addr()
	cfg.ApiListen = proto.String(e.APIAddr())
	cfg.Upstream = front.URL()
	config.ApplyDefaults(cfg)
	require.NoError(t, app.Validate(cfg), "the configuration")
	log := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
	n := cfg.GetNetwork()
	proxy.Ports = nil
	for _, p := range n.GetPorts() {
		proxy.Ports = append(proxy.Ports, int(p))
	}
	for _, c := range n.GetAllowNetworks() {
		proxy.AllowNetworks = append(proxy.AllowNetworks, netip.MustParsePrefix(c))
	}
	l, err := local.New(local.Config{
		Preload: true,
		Network: local.NetworkConfig{Enabled: n.GetEnabled(), AllowedDomains: n.GetAllowedDomains(), Proxy: proxy},
	}, log)
	require.NoError(t, err, "the local backend with network access")
	svc, err := app.New(app.Options{Config: cfg, Log: log, Provider: l})
	require.NoError(t, err, "the server")
	served := make(chan error, 1)
	go func() { served <- svc.Serve(e.lis.view()) }()
	apiServed := make(chan error, 1)
	go func() { apiServed <- svc.ServeAPI(e.api.view()) }()
	transport := &http.Transport{MaxIdleConnsPerHost: 16}
	t.Cleanup(func() {
		transport.CloseIdleConnections()
		stopCtx, cancel := context.WithTimeout(context.Background(), stopGrace)
		defer cancel()
		if err := svc.Shutdown(stopCtx); err != nil {
			t.Errorf("e2e: stop the server: %v", err)
		}
		if err := <-served; err != nil {
			t.Errorf("e2e: serve: %v", err)
		}
		if err := <-apiServed; err != nil {
			t.Errorf("e2e: serve the Containers API: %v", err)
		}
		if err := l.Close(); err != nil {
			t.Errorf("e2e: close the local backend: %v", err)
		}
	})
	return &Stack{Front: front, Model: e.Model, Config: cfg, Manager: svc.Manager(), transport: transport}
}
