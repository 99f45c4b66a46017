package e2e

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"google.golang.org/protobuf/proto"

	configv1 "github.com/codeinterp/codeinterp/api/codeinterp/config/v1"
	"github.com/codeinterp/codeinterp/internal/app"
	"github.com/codeinterp/codeinterp/pkg/config"
	"github.com/codeinterp/codeinterp/pkg/store/redis/redistest"
	"github.com/codeinterp/codeinterp/test/e2e/fakemodel"
	"github.com/codeinterp/codeinterp/test/e2e/harness"
)

// FleetOptions shapes a [Fleet]: how many gateway replicas (each behind its own real Envoy)
// and sandbox nodes share one Redis.
type FleetOptions struct {
	// Gateways is the number of gateway replicas; default 3.
	Gateways int
	// SandboxNodes is the number of sandbox nodes; default 2.
	SandboxNodes int
	// Replicas, if set, makes the fleet replicas of role all sharing Redis (each runs its own
	// sandboxes and serves the sandbox service to the others) instead of gateways and sandbox
	// nodes: SandboxNodes is then ignored.
	Replicas bool
	// Configure, if set, edits every process's configuration after [DefaultConfig] and the
	// fleet settings, before defaults are applied.
	Configure func(*configv1.Config)
}

// Fleet is the production topology on loopback: gateway replicas (role gateway, no sandbox),
// each the ext_proc server and Containers API of its own real Envoy, sandbox nodes (role
// sandbox) serving the sandbox service, one real Redis (the store of all of them), the fake
// model, and a front that sends each client request to the next Envoy in turn, as a load
// balancer would.
type Fleet struct {
	Model    *fakemodel.Server
	Redis    *redistest.Server
	Gateways []*FleetProcess
	Nodes    []*FleetProcess

	front *roundRobin
	// secret is the fleet secret's file.
	secret string
}

// FleetProcess is one codeinterp process of a [Fleet].
type FleetProcess struct {
	App    *app.App
	Config *configv1.Config
	// Envoy is the gateway's Envoy; nil for a sandbox node.
	Envoy *harness.RealEnvoy

	stopOnce sync.Once
	stop     func(ctx context.Context)
}

// Stop shuts the process down (gracefully, bounded) and waits for it. Idempotent; the test's
// cleanup stops what is left.
func (p *FleetProcess) Stop() {
	p.stopOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), stopGrace)
		defer cancel()
		p.stop(ctx)
	})
}

// Kill stops the process as a crash would, as far as its peers can tell: no grace, its
// connections cut, the calls in progress on it ended.
func (p *FleetProcess) Kill() {
	p.stopOnce.Do(func() {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		p.stop(ctx)
	})
}

// NewFleet starts a fleet for t; t.Cleanup stops all of it.
func NewFleet(t *testing.T, o FleetOptions) *Fleet {
	t.Helper()
	if o.Gateways == 0 {
		o.Gateways = 3
	}
	if o.SandboxNodes == 0 {
		o.SandboxNodes = 2
	}
	harness.RequireEnvoy(t)
	f := &Fleet{Model: fakemodel.New(t), Redis: redistest.Start(t)}
	f.secret = filepath.Join(t.TempDir(), "fleet-secret")
	if err := os.WriteFile(f.secret, []byte(strings.Repeat("fleet-secret-", 4)), 0o600); err != nil {
		t.Fatalf("fleet: write the secret: %v", err)
	}
	for i := range o.SandboxNodes {
		if o.Replicas {
			break
		}
		f.Nodes = append(f.Nodes, f.startNode(t, o, i))
	}
	var urls []string
	for i := range o.Gateways {
		g := f.startGateway(t, o, i)
		f.Gateways = append(f.Gateways, g)
		urls = append(urls, g.Envoy.URL())
	}
	f.front = newRoundRobin(t, urls)
	return f
}

// Stack is a [Stack] whose front is the fleet's round robin: every request a test sends goes to
// the next gateway.
func (f *Fleet) Stack() *Stack {
	return &Stack{Front: f.front, Model: f.Model, Config: f.Gateways[0].Config, transport: &http.Transport{MaxIdleConnsPerHost: 16}}
}

// Served returns how many requests the front sent to each gateway.
func (f *Fleet) Served() []int64 { return f.front.counts() }

// config is a fleet process's configuration: [DefaultConfig], the fleet's store and secret,
// role, then o.Configure.
func (f *Fleet) config(o FleetOptions, role, nodeID string) *configv1.Config {
	cfg := DefaultConfig()
	cfg.Store = config.StoreRedis
	cfg.Redis = &configv1.Redis{Addresses: []string{f.Redis.Addr()}}
	cfg.FleetSecretFile = f.secret
	cfg.Role = role
	cfg.NodeId = nodeID
	if o.Configure != nil {
		o.Configure(cfg)
	}
	return cfg
}

func (f *Fleet) startNode(t *testing.T, o FleetOptions, i int) *FleetProcess {
	t.Helper()
	sbLis := listenLoopback(t)
	grpcLis := listenLoopback(t)
	cfg := f.config(o, config.RoleSandbox, "sandbox-"+string(rune('a'+i)))
	cfg.Listen = grpcLis.Addr().String()
	cfg.SandboxListen = sbLis.Addr().String()
	cfg.ApiListen = proto.String("")
	p := &FleetProcess{Config: cfg}
	p.App, p.stop = serveFleetProcess(t, cfg, "sandbox node "+cfg.NodeId, grpcLis, nil, sbLis)
	t.Cleanup(p.Stop)
	return p
}

func (f *Fleet) startGateway(t *testing.T, o FleetOptions, i int) *FleetProcess {
	t.Helper()
	grpcLis := listenLoopback(t)
	apiLis := listenLoopback(t)
	envoy := harness.StartReal(t, harness.Options{
		ExtProcAddr: grpcLis.Addr().String(),
		Upstream:    f.Model.URL(),
		Clusters:    map[string]string{APICluster: "http://" + apiLis.Addr().String()},
	})
	role, name := config.RoleGateway, "gateway-"+string(rune('a'+i))
	var sbLis net.Listener
	if o.Replicas {
		role, name = config.RoleAll, "replica-"+string(rune('a'+i))
		sbLis = listenLoopback(t)
	}
	cfg := f.config(o, role, name)
	cfg.Listen = grpcLis.Addr().String()
	cfg.ApiListen = proto.String(apiLis.Addr().String())
	cfg.Upstream = envoy.URL()
	if sbLis != nil {
		cfg.SandboxListen = sbLis.Addr().String()
	}
	p := &FleetProcess{Config: cfg, Envoy: envoy}
	p.App, p.stop = serveFleetProcess(t, cfg, role+" "+cfg.NodeId, grpcLis, apiLis, sbLis)
	t.Cleanup(p.Stop)
	return p
}

// serveFleetProcess builds an App for cfg and serves it on the listeners given; the returned
// stop shuts it down and waits for every Serve.
func serveFleetProcess(t *testing.T, cfg *configv1.Config, name string, grpcLis, apiLis, sbLis net.Listener) (*app.App, func(context.Context)) {
	t.Helper()
	config.ApplyDefaults(cfg)
	if err := config.Validate(cfg); err != nil {
		t.Fatalf("fleet: %s: invalid configuration: %v", name, err)
	}
	log := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)).Named(name)
	svc, err := app.New(app.Options{Config: cfg, Log: log})
	if err != nil {
		t.Fatalf("fleet: %s: %v", name, err)
	}
	var served sync.WaitGroup
	serve := func(what string, f func(net.Listener) error, l net.Listener) {
		if l == nil {
			return
		}
		served.Add(1)
		go func() {
			defer served.Done()
			if err := f(l); err != nil {
				t.Errorf("fleet: %s: serve %s: %v", name, what, err)
			}
		}()
	}
	serve("ext_proc", svc.Serve, grpcLis)
	serve("the Containers API", svc.ServeAPI, apiLis)
	serve("the sandbox service", svc.ServeSandbox, sbLis)
	return svc, func(ctx context.Context) {
		if err := svc.Shutdown(ctx); err != nil && ctx.Err() == nil {
			t.Errorf("fleet: %s: stop: %v", name, err)
		}
		served.Wait()
	}
}

// roundRobin is a front that sends each request to the next of its targets, streaming the
// answers through, as a load balancer in front of several Envoys does.
type roundRobin struct {
	srv     *httptest.Server
	targets []*url.URL
	next    atomic.Uint64
	served  []atomic.Int64
}

func newRoundRobin(t testing.TB, targets []string) *roundRobin {
	t.Helper()
	rr := &roundRobin{served: make([]atomic.Int64, len(targets))}
	for _, s := range targets {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatalf("fleet: front target %q: %v", s, err)
		}
		rr.targets = append(rr.targets, u)
	}
	transport := &http.Transport{MaxIdleConnsPerHost: 64}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			i := int((rr.next.Add(1) - 1) % uint64(len(rr.targets)))
			rr.served[i].Add(1)
			r.SetURL(rr.targets[i])
			r.Out.Host = r.In.Host
		},
		Transport:     transport,
		FlushInterval: -1,
	}
	rr.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// A load balancer reads the request and writes the answer independently; Go's HTTP/1
		// server would otherwise close the request body at the answer's first write, failing
		// a proxied request whose body the transport is still copying (the transport then
		// closes its connection to Envoy under the answer being read).
		_ = http.NewResponseController(w).EnableFullDuplex()
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		rr.srv.Close()
		transport.CloseIdleConnections()
	})
	return rr
}

func (rr *roundRobin) URL() string  { return rr.srv.URL }
func (rr *roundRobin) Name() string { return "fleet" }

// nextTarget returns the index of the target the next request goes to.
func (rr *roundRobin) nextTarget() int { return int(rr.next.Load() % uint64(len(rr.targets))) }

func (rr *roundRobin) counts() []int64 {
	out := make([]int64, len(rr.served))
	for i := range rr.served {
		out[i] = rr.served[i].Load()
	}
	return out
}
