package harness

import (
	"flag"
	"net"
	"net/http"
	"regexp"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	"github.com/codeinterp/codeinterp/envoy"
)

// TestRealBootstrap: the config StartReal writes is the shipped one pointed at the test's
// servers, with the knobs applied, and still valid.
func TestRealBootstrap(t *testing.T) {
	o := Options{
		ExtProcAddr: "127.0.0.1:7001", Upstream: "http://127.0.0.1:7002",
		Clusters:       map[string]string{"codeinterp_api": "http://127.0.0.1:7003"},
		MessageTimeout: 50 * time.Millisecond, BufferLimit: 1234, FailureModeAllow: ptr(true),
		StreamIdleTimeout: 3 * time.Second,
	}
	cfg, err := o.resolve(t)
	require.NoError(t, err, "resolve")
	last := len(cfg.Routes) - 1 // the catch-all /v1/
	cfg.Routes[last].Timeout = 5 * time.Second
	b, err := realBootstrap(cfg, o)
	require.NoError(t, err, "realBootstrap")
	require.NoError(t, envoy.Validate(b), "validate the written bootstrap")

	in, err := envoy.FindIngress(b)
	require.NoError(t, err, "find ingress")
	assert.Equal(t, "127.0.0.1", in.Listener.GetAddress().GetSocketAddress().GetAddress(), "listener address")
	assert.Equal(t, uint32(0), in.Listener.GetAddress().GetSocketAddress().GetPortValue(), "listener on a free port")
	assert.Equal(t, uint32(0), b.GetAdmin().GetAddress().GetSocketAddress().GetPortValue(), "admin on a free port")
	assert.Equal(t, uint32(1234), in.Listener.GetPerConnectionBufferLimitBytes().GetValue(), "buffer limit")
	assert.Equal(t, 50*time.Millisecond, in.ExtProc.GetMessageTimeout().AsDuration(), "message_timeout knob")
	assert.True(t, in.ExtProc.GetFailureModeAllow(), "failure_mode_allow knob")
	assert.Equal(t, 3*time.Second, in.HCM.GetStreamIdleTimeout().AsDuration(), "stream_idle_timeout knob")
	assert.Equal(t, extprocv3.ProcessingMode_BUFFERED, in.ExtProc.GetProcessingMode().GetRequestBodyMode(), "processing mode kept")

	routes := in.HCM.GetRouteConfig().GetVirtualHosts()[0].GetRoutes()
	assert.Equal(t, 5*time.Second, routes[last].GetRoute().GetTimeout().AsDuration(), "route timeout from the filter config")
	pr := &extprocv3.ExtProcPerRoute{}
	require.NoError(t, routes[0].GetTypedPerFilterConfig()[envoy.ExtProcFilterName].UnmarshalTo(pr), "per-route config kept")
	assert.True(t, pr.GetDisabled(), "embeddings route still disabled")

	for name, want := range map[string]uint32{"codeinterp_ext_proc": 7001, "llm": 7002, "openai": 7002, "codeinterp_api": 7003} {
		c := envoy.Cluster(b, name)
		require.NotNil(t, c, "cluster %s", name)
		sa := c.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress()
		assert.Equal(t, want, sa.GetPortValue(), "cluster %s port", name)
		assert.Equal(t, "127.0.0.1", sa.GetAddress(), "cluster %s address", name)
	}
	assert.Nil(t, envoy.Cluster(b, "openai").GetTransportSocket(), "upstream clusters speak plain HTTP to the fake")
	assert.NotNil(t, envoy.Cluster(b, "codeinterp_ext_proc").GetTypedExtensionProtocolOptions(), "ext_proc cluster keeps HTTP/2")

	_, err = realBootstrap(cfg, Options{ExtProcAddr: "unix:///tmp/x.sock", Upstream: "http://127.0.0.1:7002"})
	assert.NoError(t, err, "unix socket ext_proc address")
	_, err = realBootstrap(cfg, Options{ExtProcAddr: "localhost:1", Upstream: "http://127.0.0.1:7002"})
	assert.Error(t, err, "a hostname cannot be a static endpoint")
}

// TestFronts runs a pass-through request on both fronts; the real one skips without envoy.
func TestFronts(t *testing.T) {
	proc := newFakeProc(t, passThrough)
	up := newUpstream(t, nil)
	var names []string
	Fronts(t, Options{ExtProcAddr: proc.addr, Upstream: up.srv.URL}, func(t *testing.T, front Front) {
		names = append(names, front.Name())
		resp, err := http.Post(front.URL()+"/v1/responses", "application/json", nil)
		require.NoError(t, err, "POST through %s", front.Name())
		defer resp.Body.Close()
		assert.Equal(t, http.StatusOK, resp.StatusCode, "status through %s", front.Name())
	})
	want := []string{"harness"}
	if _, err := EnvoyBinary(); err == nil {
		want = append(want, "real-envoy")
	}
	assert.Equal(t, selected(t, want), names, "fronts run")
	http.DefaultClient.CloseIdleConnections()
}

// TestFrontConnectsLazily: the ext_proc server may start after the front (EachFront's
// pattern), because the front connects on the first request.
func TestFrontConnectsLazily(t *testing.T) {
	up := newUpstream(t, nil)
	EachFront(t, func(t *testing.T, start func(Options) Front) {
		// One listener per front: stopping the gRPC server closes it.
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err, "listen for the ext_proc server")
		front := start(Options{ExtProcAddr: lis.Addr().String(), Upstream: up.srv.URL})
		srv := grpc.NewServer()
		extprocsvc.RegisterExternalProcessorServer(srv, &fakeProc{t: t, script: passThrough})
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = srv.Serve(lis)
		}()
		t.Cleanup(func() {
			srv.Stop()
			<-done
		})
		resp, err := http.Post(front.URL()+"/v1/responses", "application/json", nil)
		require.NoError(t, err, "POST through %s", front.Name())
		resp.Body.Close()
		assert.Equal(t, http.StatusOK, resp.StatusCode, "status through %s", front.Name())
		http.DefaultClient.CloseIdleConnections()
	})
}

// TestRealPool: StartReal with a pool reuses the running Envoy for an equal bootstrap and
// starts another for a different one; Close stops them.
func TestRealPool(t *testing.T) {
	RequireEnvoy(t)
	proc := newFakeProc(t, passThrough)
	up := newUpstream(t, nil)
	pool, err := NewRealPool()
	require.NoError(t, err, "new pool")
	o := Options{ExtProcAddr: proc.addr, Upstream: up.srv.URL, Pool: pool}
	a := StartReal(t, o)
	b := StartReal(t, o)
	assert.Equal(t, a.URL(), b.URL(), "equal options share one Envoy")
	assert.Equal(t, 1, pool.Len(), "Envoys after two equal starts")
	o.MessageTimeout = time.Second
	c := StartReal(t, o)
	assert.NotEqual(t, a.URL(), c.URL(), "another message_timeout is another Envoy")
	assert.Equal(t, 2, pool.Len(), "Envoys after a different start")
	resp, err := http.Post(c.URL()+"/v1/responses", "application/json", nil)
	require.NoError(t, err, "POST through the pooled Envoy")
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode, "status through the pooled Envoy")
	http.DefaultClient.CloseIdleConnections()
	require.NoError(t, pool.Close(), "close the pool")
	_, err = http.Post(c.URL()+"/v1/responses", "application/json", nil)
	assert.Error(t, err, "the pool's Envoy is stopped")
	assert.Equal(t, 0, pool.Len(), "Envoys after Close")
}

// selected returns the subtests of the running test, among names, that -test.run and
// -test.skip let run (`make test-envoy` runs only the real-envoy ones), matched as the testing
// package matches them: alternatives split at top-level bars, levels at slashes.
func selected(t *testing.T, names []string) []string {
	t.Helper()
	pattern := func(name string) string {
		if f := flag.Lookup(name); f != nil {
			return f.Value.String()
		}
		return ""
	}
	run, skip := pattern("test.run"), pattern("test.skip")
	var out []string
	for _, n := range names {
		if (run == "" || matches(t, run, t.Name(), n)) && (skip == "" || !matches(t, skip, t.Name(), n)) {
			out = append(out, n)
		}
	}
	return out
}

// matches reports whether the test top/sub matches pattern: one of its alternatives matches
// each level it has.
func matches(t *testing.T, pattern, top, sub string) bool {
	for _, alt := range splitTop(pattern, '|') {
		levels := splitTop(alt, '/')
		ok := true
		for i, name := range []string{top, sub} {
			if i >= len(levels) {
				break
			}
			re, err := regexp.Compile(levels[i])
			require.NoError(t, err, "pattern %q", pattern)
			ok = ok && re.MatchString(name)
		}
		if ok {
			return true
		}
	}
	return false
}

// splitTop splits s at sep outside brackets and parentheses.
func splitTop(s string, sep byte) []string {
	var out []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '(', '[':
			depth++
		case ')', ']':
			depth--
		case sep:
			if depth == 0 {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	return append(out, s[start:])
}
