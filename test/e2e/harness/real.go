package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/codeinterp/codeinterp/envoy"
)

// Front is an Envoy a scenario runs against: the harness ([Envoy]) or a real Envoy
// ([RealEnvoy]).
type Front interface {
	// URL is the listener's base URL, e.g. "http://127.0.0.1:41234".
	URL() string
	// Name is "harness" or "real-envoy".
	Name() string
}

// Fronts runs fn as two subtests: "harness" against [Start], always, and "real-envoy" against
// [StartReal] (see [RequireEnvoy] for what happens without an envoy binary).
func Fronts(t *testing.T, o Options, fn func(t *testing.T, front Front)) {
	t.Helper()
	EachFront(t, func(t *testing.T, start func(Options) Front) { fn(t, start(o)) })
}

// EachFront is [Fronts] for scenarios that must start their servers around the front: fn
// runs as the subtests "harness" and "real-envoy" (skipped, saying so, without an envoy
// binary) and gets the matching start function. Neither front connects to the ext_proc
// server before the first request, so a scenario can listen on an address, start the front
// with it, and then start the ext_proc server on that listener with the front's URL as its
// follow-up upstream.
func EachFront(t *testing.T, fn func(t *testing.T, start func(Options) Front)) {
	t.Helper()
	t.Run("harness", func(t *testing.T) {
		fn(t, func(o Options) Front { return Start(t, o) })
	})
	t.Run("real-envoy", func(t *testing.T) {
		RequireEnvoy(t)
		fn(t, func(o Options) Front { return StartReal(t, o) })
	})
}

// RequireEnvoyEnv names the environment variable that makes a missing Envoy a failure instead
// of a skip; `make test` sets it once `make deps` has installed Envoy.
const RequireEnvoyEnv = "CODEINTERP_REQUIRE_ENVOY"

// EnvoyBinary finds the envoy binary: $ENVOY_BIN, else the project's .venv/bin/envoy (found by
// walking up from the working directory to the module root), else envoy on PATH.
func EnvoyBinary() (string, error) {
	if p := os.Getenv("ENVOY_BIN"); p != "" {
		return exec.LookPath(p)
	}
	if dir, err := os.Getwd(); err == nil {
		for {
			if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
				if p, err := exec.LookPath(filepath.Join(dir, ".venv", "bin", "envoy")); err == nil {
					return p, nil
				}
				break
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				break
			}
			dir = parent
		}
	}
	p, err := exec.LookPath("envoy")
	if err != nil {
		return "", errors.New("no envoy binary: not in $ENVOY_BIN, .venv/bin or PATH (run `make deps`)")
	}
	return p, nil
}

// RequireEnvoy returns the envoy binary, or ends the test when there is none: a failure when
// $CODEINTERP_REQUIRE_ENVOY is set (as `make test` sets it), a skip saying so otherwise.
func RequireEnvoy(t testing.TB) string {
	t.Helper()
	bin, err := EnvoyBinary()
	if err == nil {
		return bin
	}
	if os.Getenv(RequireEnvoyEnv) != "" {
		t.Fatalf("real Envoy required ($%s is set): %v", RequireEnvoyEnv, err)
	}
	t.Skipf("real Envoy variant skipped: %v", err)
	return ""
}

// EnvoyLogLevelEnv names the environment variable that sets the real Envoy's --log-level
// (default warn); a failing test logs Envoy's output, so "debug" shows why it failed.
const EnvoyLogLevelEnv = "CODEINTERP_ENVOY_LOG_LEVEL"

// RealEnvoy is an envoy process running a copy of the filter config's bootstrap pointed at
// the test's servers.
type RealEnvoy struct {
	url   string
	admin string
}

// URL is the listener's base URL.
func (r *RealEnvoy) URL() string { return r.url }

// Admin is the admin endpoint's base URL, e.g. "http://127.0.0.1:41235" (/clusters, /stats).
func (r *RealEnvoy) Admin() string { return r.admin }

// Name is "real-envoy", as a [Front].
func (r *RealEnvoy) Name() string { return "real-envoy" }

// realStartTimeout bounds Envoy's start-up (it usually takes well under a second).
const realStartTimeout = 30 * time.Second

// StartReal runs a real Envoy ([EnvoyBinary]) with o's config; without one it skips or fails
// the test as [RequireEnvoy] does. It writes a copy of the bootstrap with the listener on a free port, every
// upstream cluster pointed at o.Upstream and the ext_proc cluster at o.ExtProcAddr, applies
// o's knobs (timeouts, buffer limit, ...), runs "envoy -c <copy> --base-id <random>
// --concurrency 1", and waits until the admin endpoint reports ready. The process is stopped
// (SIGTERM, then SIGKILL) and waited for by t.Cleanup, unless o.Pool is set: then the Envoy
// comes from the pool, which runs one per distinct bootstrap until [RealPool.Close]. Either
// way a failing test logs what Envoy printed while it ran.
func StartReal(t testing.TB, o Options) *RealEnvoy {
	t.Helper()
	bin, js := bootstrapJSON(t, o, nil)
	if o.Pool != nil {
		p, err := o.Pool.get(bin, js)
		if err != nil {
			t.Fatalf("real envoy: %v", err)
		}
		mark := p.logs.Len()
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("real envoy output (shared process; this test's part):\n%s", p.logs.From(mark))
			}
		})
		return &RealEnvoy{url: p.url, admin: p.admin}
	}
	p, err := launchReal(bin, t.TempDir(), js)
	if err != nil {
		t.Fatalf("real envoy: %v", err)
	}
	return owned(t, p)
}

// bootstrapJSON returns the Envoy binary and the bootstrap StartReal writes for o, changed by
// edit when it is not nil; it fails t as StartReal does.
func bootstrapJSON(t testing.TB, o Options, edit func(*bootstrapv3.Bootstrap) error) (string, []byte) {
	t.Helper()
	bin := RequireEnvoy(t)
	cfg, err := o.resolve(t)
	if err != nil {
		t.Fatalf("real envoy: %v", err)
	}
	b, err := realBootstrap(cfg, o)
	if err != nil {
		t.Fatalf("real envoy: %v", err)
	}
	if edit != nil {
		if err := edit(b); err != nil {
			t.Fatalf("real envoy: %v", err)
		}
	}
	js, err := protojson.Marshal(b)
	if err != nil {
		t.Fatalf("real envoy: encode bootstrap: %v", err)
	}
	return bin, js
}

// owned returns the RealEnvoy of p, a process t owns: t's cleanup stops it and, when t
// failed, logs what it printed.
func owned(t testing.TB, p *RealProcess) *RealEnvoy {
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			t.Logf("real envoy output:\n%s", p.logs.String())
		}
	})
	return &RealEnvoy{url: p.url, admin: p.admin}
}

// PrepareReal is [StartReal] started ahead: it checks o and writes the bootstrap at once (failing
// t as StartReal does), starts Envoy on its own goroutine, and returns the function that waits
// until it is ready and returns it, failing the test it is given if Envoy did not start. A
// scenario starts its real Envoy this way while its harness variant runs. t.Cleanup stops the
// process (if the waiting test has not already); a failing waiting test logs Envoy's output.
// o.Pool is not supported.
func PrepareReal(t testing.TB, o Options) func(testing.TB) *RealEnvoy {
	t.Helper()
	if o.Pool != nil {
		t.Fatal("real envoy: PrepareReal does not take a pool")
	}
	bin, js := bootstrapJSON(t, o, nil)
	dir := t.TempDir()
	type launched struct {
		p   *RealProcess
		err error
	}
	ready := make(chan launched, 1)
	go func() {
		p, err := launchReal(bin, dir, js)
		ready <- launched{p, err}
	}()
	var got *launched
	wait := func() *launched {
		if got == nil {
			l := <-ready
			got = &l
		}
		return got
	}
	t.Cleanup(func() {
		if l := wait(); l.p != nil {
			l.p.stop()
		}
	})
	return func(t testing.TB) *RealEnvoy {
		t.Helper()
		l := wait()
		if l.err != nil {
			t.Fatalf("real envoy: %v", l.err)
		}
		return owned(t, l.p)
	}
}

// RealPool shares real Envoys between the [StartReal] calls that set Options.Pool: one
// process per distinct bootstrap (the bytes StartReal would write are the key, so equal knobs
// and equal test servers share one), started on first use and stopped by [RealPool.Close]. A
// test makes one for its subtests, or a package one in TestMain, and closes it at the end. A
// shared Envoy keeps its connections to the ext_proc server and the upstream between uses. Its
// methods are safe for concurrent use.
type RealPool struct {
	dir string

	// mu guards the fields below.
	mu     sync.Mutex
	procs  map[string]*RealProcess
	closed bool
}

// NewRealPool returns an empty pool; its Envoys' files live under a temporary directory that
// Close removes.
func NewRealPool() (*RealPool, error) {
	dir, err := os.MkdirTemp("", "codeinterp-envoy-pool-")
	if err != nil {
		return nil, fmt.Errorf("make pool directory: %w", err)
	}
	return &RealPool{dir: dir, procs: map[string]*RealProcess{}}, nil
}

// get returns the pool's running Envoy for the bootstrap js, starting it (again, if it
// exited) when needed.
func (p *RealPool) get(bin string, js []byte) (*RealProcess, error) {
	key := bin + "\x00" + string(js)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, errors.New("get from pool: closed")
	}
	if rp, ok := p.procs[key]; ok {
		if rp.alive() {
			return rp, nil
		}
		delete(p.procs, key)
		rp.stop()
	}
	dir, err := os.MkdirTemp(p.dir, "envoy-")
	if err != nil {
		return nil, fmt.Errorf("make envoy directory: %w", err)
	}
	rp, err := launchReal(bin, dir, js)
	if err != nil {
		return nil, err
	}
	p.procs[key] = rp
	return rp, nil
}

// Len is the number of Envoys the pool has started and not lost.
func (p *RealPool) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.procs)
}

// Close stops the pool's Envoys, waits for them and removes their files; later StartReal
// calls with the pool fail the test.
func (p *RealPool) Close() error {
	p.mu.Lock()
	procs := p.procs
	p.procs, p.closed = nil, true
	p.mu.Unlock()
	var wg sync.WaitGroup
	for _, rp := range procs {
		wg.Go(rp.stop)
	}
	wg.Wait()
	if err := os.RemoveAll(p.dir); err != nil {
		return fmt.Errorf("close pool: %w", err)
	}
	return nil
}

// RealProcess is one envoy process, started by [StartReal], a [RealPool] or [LaunchReal]. Its
// methods are safe for concurrent use.
type RealProcess struct {
	cmd   *exec.Cmd
	url   string
	admin string
	logs  *SyncBuffer
	// done is closed once the process exited and was waited for; waitErr is cmd.Wait's result,
	// set before done is closed.
	done     chan struct{}
	waitErr  error
	stopOnce sync.Once
}

// LaunchReal is [StartReal] for callers that are not tests (test/e2e/cmd/stack): it runs bin
// with cfg's bootstrap (cfg as [LoadFilterConfig] returns it; [Options] knobs are not applied
// here) rewritten as StartReal rewrites it, the ext_proc cluster at extProcAddr, the clusters
// of clusters at their base URLs (as [Options].Clusters) and every other cluster at upstream,
// writes its files in dir (which the caller owns and removes), and returns once the admin
// endpoint reports ready. The caller must call [RealProcess.Stop]. Envoy gets SIGKILL if the
// calling process dies first, so no Envoy outlives its starter.
func LaunchReal(bin string, cfg FilterConfig, extProcAddr, upstream string, clusters map[string]string, dir string) (*RealProcess, error) {
	b, err := realBootstrap(cfg, Options{ExtProcAddr: extProcAddr, Upstream: upstream, Clusters: clusters})
	if err != nil {
		return nil, err
	}
	js, err := protojson.Marshal(b)
	if err != nil {
		return nil, fmt.Errorf("encode bootstrap: %w", err)
	}
	return launchReal(bin, dir, js)
}

// launchReal writes the bootstrap js into dir, starts envoy on it and returns once it is
// ready. The goroutine waiting for the process ends with it; Stop ensures that.
func launchReal(bin, dir string, js []byte) (*RealProcess, error) {
	cfgPath := filepath.Join(dir, "envoy.json")
	if err := os.WriteFile(cfgPath, js, 0o600); err != nil {
		return nil, fmt.Errorf("write bootstrap: %w", err)
	}
	adminPath := filepath.Join(dir, "admin-address")
	level := os.Getenv(EnvoyLogLevelEnv)
	if level == "" {
		level = "warn"
	}
	cmd := exec.Command(bin, "-c", cfgPath,
		"--base-id", strconv.Itoa(1+rand.IntN(1<<20)),
		"--concurrency", "1",
		"--admin-address-path", adminPath,
		"--log-level", level)
	// Envoy dies with the process that started it, so none outlives a crashed test.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	rp := &RealProcess{cmd: cmd, logs: &SyncBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = rp.logs, rp.logs
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	go func() {
		rp.waitErr = cmd.Wait()
		close(rp.done)
	}()
	addr, admin, err := waitReady(adminPath, rp.done, func() error { return rp.waitErr })
	if err != nil {
		rp.stop()
		return nil, fmt.Errorf("%w\n%s", err, rp.logs.String())
	}
	rp.url, rp.admin = "http://"+addr, admin
	return rp, nil
}

// URL is the listener's base URL, e.g. "http://127.0.0.1:41234".
func (rp *RealProcess) URL() string { return rp.url }

// Done is closed when the process has ended, for whatever reason.
func (rp *RealProcess) Done() <-chan struct{} { return rp.done }

// Logs returns what Envoy wrote so far (stdout and stderr).
func (rp *RealProcess) Logs() string { return rp.logs.String() }

// alive reports whether the process still runs.
func (rp *RealProcess) alive() bool {
	select {
	case <-rp.done:
		return false
	default:
		return true
	}
}

// Stop sends SIGTERM, then SIGKILL after 10 seconds, and waits for the process to end. It
// returns nil when Envoy exited on the signal or with status 0, else how it ended. Later calls
// only wait.
func (rp *RealProcess) Stop() error {
	rp.stopOnce.Do(func() {
		_ = rp.cmd.Process.Signal(syscall.SIGTERM)
		timer := time.NewTimer(10 * time.Second)
		defer timer.Stop()
		select {
		case <-rp.done:
		case <-timer.C:
			_ = rp.cmd.Process.Kill()
			<-rp.done
		}
	})
	<-rp.done
	var exit *exec.ExitError
	if errors.As(rp.waitErr, &exit) {
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGTERM {
			return nil
		}
	}
	if rp.waitErr != nil {
		return fmt.Errorf("envoy: %w", rp.waitErr)
	}
	return nil
}

// stop is Stop for callers that have nothing to do with how it ended.
func (rp *RealProcess) stop() { _ = rp.Stop() }

// waitReady polls the admin endpoint until Envoy is ready, then returns the ingress
// listener's bound address and the admin endpoint's base URL.
func waitReady(adminPath string, exited <-chan struct{}, waitErr func() error) (string, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), realStartTimeout)
	defer cancel()
	client := &http.Client{Timeout: time.Second}
	defer client.CloseIdleConnections()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-exited:
			return "", "", fmt.Errorf("envoy exited during start-up: %v", waitErr())
		case <-ctx.Done():
			return "", "", errors.New("envoy not ready in time")
		case <-tick.C:
		}
		admin, err := os.ReadFile(adminPath)
		if err != nil || len(bytes.TrimSpace(admin)) == 0 {
			continue
		}
		base := "http://" + strings.TrimSpace(string(admin))
		resp, err := client.Get(base + "/ready")
		if err != nil {
			continue
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			continue
		}
		addr, err := listenerAddress(client, base)
		return addr, base, err
	}
}

// listenerAddress reads the ingress listener's bound address from /listeners.
func listenerAddress(client *http.Client, admin string) (string, error) {
	resp, err := client.Get(admin + "/listeners?format=json")
	if err != nil {
		return "", fmt.Errorf("read listeners: %w", err)
	}
	defer resp.Body.Close()
	var out struct {
		ListenerStatuses []struct {
			LocalAddress struct {
				SocketAddress struct {
					Address   string `json:"address"`
					PortValue int    `json:"port_value"`
				} `json:"socket_address"`
			} `json:"local_address"`
		} `json:"listener_statuses"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return "", fmt.Errorf("decode listeners: %w", err)
	}
	if len(out.ListenerStatuses) != 1 {
		return "", fmt.Errorf("want one listener, got %d", len(out.ListenerStatuses))
	}
	sa := out.ListenerStatuses[0].LocalAddress.SocketAddress
	return net.JoinHostPort(sa.Address, strconv.Itoa(sa.PortValue)), nil
}

// realBootstrap is cfg's bootstrap rewritten for a test run: admin and listener on
// 127.0.0.1:0, the filter config and routes as cfg has them (knobs applied), the ext_proc
// cluster at o.ExtProcAddr and every other cluster at o.Upstream (plain HTTP, static).
func realBootstrap(cfg FilterConfig, o Options) (*bootstrapv3.Bootstrap, error) {
	if cfg.Bootstrap == nil {
		return nil, errors.New("the filter config has no bootstrap to run")
	}
	if o.ExtProcAddr == "" || o.Upstream == "" {
		return nil, errors.New("options: ExtProcAddr and Upstream are required")
	}
	b := envoy.Clone(cfg.Bootstrap)
	b.Admin = &bootstrapv3.Admin{Address: socketAddress("127.0.0.1", 0)}
	in, err := envoy.FindIngress(b)
	if err != nil {
		return nil, err
	}
	in.Listener.Address = socketAddress("127.0.0.1", 0)
	in.Listener.PerConnectionBufferLimitBytes = wrapperspb.UInt32(uint32(cfg.BufferLimit))

	// The filter as configured for this run (ExtProcAny is inside HCM), and the routes'
	// timeouts and per-route configs.
	a, err := anypb.New(cfg.Filter)
	if err != nil {
		return nil, fmt.Errorf("pack ext_proc config: %w", err)
	}
	in.ExtProcAny.TypeUrl, in.ExtProcAny.Value = a.GetTypeUrl(), a.GetValue()
	routes := in.HCM.GetRouteConfig().GetVirtualHosts()[0].GetRoutes()
	if len(routes) != len(cfg.Routes) {
		return nil, fmt.Errorf("the bootstrap has %d routes, the filter config %d", len(routes), len(cfg.Routes))
	}
	for i, r := range routes {
		r.GetRoute().Timeout = durationpb.New(cfg.Routes[i].Timeout)
		delete(r.TypedPerFilterConfig, envoy.ExtProcFilterName)
		if pr := cfg.Routes[i].PerRoute; pr != nil {
			a, err := anypb.New(pr)
			if err != nil {
				return nil, fmt.Errorf("pack per-route config: %w", err)
			}
			if r.TypedPerFilterConfig == nil {
				r.TypedPerFilterConfig = map[string]*anypb.Any{}
			}
			r.TypedPerFilterConfig[envoy.ExtProcFilterName] = a
		}
	}
	in.HCM.StreamIdleTimeout = durationpb.New(cfg.StreamIdleTimeout)
	hcm, err := anypb.New(in.HCM)
	if err != nil {
		return nil, fmt.Errorf("pack connection manager: %w", err)
	}
	in.HCMAny.TypeUrl, in.HCMAny.Value = hcm.GetTypeUrl(), hcm.GetValue()

	extProcCluster := cfg.Filter.GetGrpcService().GetEnvoyGrpc().GetClusterName()
	var extProcAddrs []*corev3.Address
	for _, a := range append([]string{o.ExtProcAddr}, o.ExtProcReplicas...) {
		addr, err := envoyAddress(a)
		if err != nil {
			return nil, fmt.Errorf("ext_proc address %q: %w", a, err)
		}
		extProcAddrs = append(extProcAddrs, addr)
	}
	u, err := url.Parse(o.Upstream)
	if err != nil || u.Scheme != "http" {
		return nil, fmt.Errorf("upstream %q: only plain http upstreams are supported", o.Upstream)
	}
	upAddr, err := envoyAddress(u.Host)
	if err != nil {
		return nil, fmt.Errorf("upstream address: %w", err)
	}
	own := map[string]*corev3.Address{}
	for name, base := range o.Clusters {
		cu, err := url.Parse(base)
		if err != nil || cu.Scheme != "http" {
			return nil, fmt.Errorf("cluster %s %q: only plain http is supported", name, base)
		}
		if own[name], err = envoyAddress(cu.Host); err != nil {
			return nil, fmt.Errorf("cluster %s address: %w", name, err)
		}
	}
	for _, c := range b.GetStaticResources().GetClusters() {
		addrs := []*corev3.Address{upAddr}
		if c.GetName() == extProcCluster {
			addrs = extProcAddrs
		} else {
			c.TransportSocket = nil
			if a, ok := own[c.GetName()]; ok {
				addrs = []*corev3.Address{a}
			}
		}
		c.ClusterDiscoveryType = &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC}
		c.DnsLookupFamily = clusterv3.Cluster_AUTO
		var eps []*endpointv3.LbEndpoint
		for _, addr := range addrs {
			eps = append(eps, &endpointv3.LbEndpoint{
				HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{Address: addr}},
			})
		}
		c.LoadAssignment = &endpointv3.ClusterLoadAssignment{
			ClusterName: c.GetName(),
			Endpoints:   []*endpointv3.LocalityLbEndpoints{{LbEndpoints: eps}},
		}
	}
	if err := envoy.Validate(b); err != nil {
		return nil, fmt.Errorf("validate the test bootstrap: %w", err)
	}
	return b, nil
}

// envoyAddress turns "host:port" (host an IP) or "unix:///path" into an Envoy address.
func envoyAddress(s string) (*corev3.Address, error) {
	if p, ok := strings.CutPrefix(s, "unix://"); ok {
		return &corev3.Address{Address: &corev3.Address_Pipe{Pipe: &corev3.Pipe{Path: p}}}, nil
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return nil, err
	}
	if net.ParseIP(host) == nil {
		return nil, fmt.Errorf("%q: a static cluster needs an IP address", host)
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("port %q: %w", port, err)
	}
	return socketAddress(host, uint32(n)), nil
}

func socketAddress(host string, port uint32) *corev3.Address {
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address: host, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port},
	}}}
}

// SyncBuffer collects a process's output: os/exec writes to it from its copying goroutines
// while a test reads it. Its methods are safe for concurrent use; the zero value is empty.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Len is the number of bytes written so far.
func (b *SyncBuffer) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Len()
}

// From returns what was written after the first n bytes.
func (b *SyncBuffer) From(n int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf.Bytes()[min(n, b.buf.Len()):])
}
