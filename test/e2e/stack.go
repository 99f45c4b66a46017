// Package e2e runs codeinterp end to end: the real ext_proc server wired as cmd/extproc wires it
// (real gRPC server over loopback TCP, real processor, loop engine, sandbox manager and local
// bubblewrap backend), behind the Envoy harness (or a real Envoy when one is on PATH), in front
// of the scripted fake model, driven by the official openai-go client.
//
// [NewEnv] prepares what one top-level test shares (the fake model, the gRPC listener and the
// Containers API's listener);
// [Env.Fronts] runs a test function once per front with a [Stack] serving it.
package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	configv1 "github.com/codeinterp/codeinterp/api/codeinterp/config/v1"
	"github.com/codeinterp/codeinterp/internal/app"
	"github.com/codeinterp/codeinterp/pkg/config"
	"github.com/codeinterp/codeinterp/pkg/sandbox"
	"github.com/codeinterp/codeinterp/test/e2e/fakemodel"
	"github.com/codeinterp/codeinterp/test/e2e/harness"
)

// EnvOptions tunes the stacks of an [Env]. The zero value gives [DefaultConfig] with a warm
// pool of one container.
type EnvOptions struct {
	// Configure, if set, edits the server configuration after [DefaultConfig] and before
	// defaults are applied and the result validated (as cmd/extproc does with a config file).
	// Upstream and Listen are set by the stack afterwards.
	Configure func(*configv1.Config)
	// Harness overrides harness options (timeouts, buffer limit); ExtProcAddr and Upstream are
	// set by the Env.
	Harness harness.Options
}

// DefaultConfig is the configuration the scenarios run with unless a test changes it: the
// defaults of a shipped server, a warm pool of one container, the "/analyst" path prefix of
// envoy/envoy.yaml's analyst route, and an "analyst" profile (chosen by that route's
// grpc_initial_metadata) with two rounds, a two-second run timeout and a session header.
func DefaultConfig() *configv1.Config {
	return &configv1.Config{
		PathPrefixes: []string{"/analyst"},
		Profiles: map[string]*configv1.Profile{
			AnalystProfile: {
				MaxRounds:     2,
				RunTimeout:    durationpb.New(AnalystRunTimeout),
				SessionHeader: SessionHeader,
			},
		},
		Sandbox: &configv1.Sandbox{WarmPoolSize: proto.Uint32(1)},
	}
}

// The analyst profile of [DefaultConfig].
const (
	// AnalystProfile is the profile envoy/envoy.yaml's "/analyst/v1/" route names.
	AnalystProfile = "analyst"
	// AnalystRunTimeout is the analyst profile's run timeout.
	AnalystRunTimeout = 2 * time.Second
	// SessionHeader is the analyst profile's session header.
	SessionHeader = "x-session-id"
)

// Env is what one top-level test shares between its fronts: the fake model (the upstream of
// every route but the Containers API's) and two loopback TCP listeners that each front's
// server serves in turn: gRPC (ext_proc) and HTTP (the Containers API, Envoy's cluster
// codeinterp_api).
type Env struct {
	// Model is the scripted upstream model.
	Model *fakemodel.Server

	opts EnvOptions
	lis  *loopback
	api  *loopback
}

// NewEnv starts the fake model and opens the listeners; t.Cleanup closes them.
func NewEnv(t testing.TB, o EnvOptions) *Env {
	t.Helper()
	lis, err := newLoopback()
	if err != nil {
		t.Fatalf("e2e: listen for the ext_proc server: %v", err)
	}
	t.Cleanup(func() { _ = lis.l.Close() })
	api, err := newLoopback()
	if err != nil {
		t.Fatalf("e2e: listen for the Containers API: %v", err)
	}
	t.Cleanup(func() { _ = api.l.Close() })
	return &Env{Model: fakemodel.New(t), opts: o, lis: lis, api: api}
}

// Addr is the gRPC address of the ext_proc server, "127.0.0.1:port".
func (e *Env) Addr() string { return e.lis.l.Addr().String() }

// APIAddr is the address of the server's Containers API, "127.0.0.1:port".
func (e *Env) APIAddr() string { return e.api.l.Addr().String() }

// APICluster is the cluster of envoy/envoy.yaml that sends to the server's Containers API.
const APICluster = "codeinterp_api"

// HarnessOptions are the front options: the Env's harness knobs with the ext_proc address, the
// Containers API's cluster at the server and the fake model as upstream.
func (e *Env) HarnessOptions() harness.Options {
	o := e.opts.Harness
	o.ExtProcAddr = e.Addr()
	o.Upstream = e.Model.URL()
	o.Clusters = map[string]string{APICluster: "http://" + e.APIAddr()}
	return o
}

// Fronts runs fn as the subtests "harness" and "real-envoy" (as [harness.Fronts]: the latter is
// skipped, or failed, without an envoy binary), each time with a fresh [Stack] serving that
// front. The real Envoy and its server (app.New, which starts the sandbox backend's template)
// are started while the harness variant runs; the server serves the Env's listeners only once
// the harness variant's server has stopped.
func (e *Env) Fronts(t *testing.T, fn func(t *testing.T, s *Stack)) {
	t.Helper()
	o := e.HarnessOptions()
	var real func(t *testing.T) *Stack
	if _, err := harness.EnvoyBinary(); err == nil {
		real = e.prepare(t, harness.PrepareReal(t, o))
	}
	t.Run("harness", func(t *testing.T) {
		fn(t, e.Serve(t, harness.Start(t, o)))
	})
	t.Run("real-envoy", func(t *testing.T) {
		harness.RequireEnvoy(t)
		fn(t, real(t))
	})
}

// prepare builds, on its own goroutine, the server that will serve the real Envoy front
// returns, and returns the function that waits for it and serves it as [Env.Serve] does. A
// configuration naming a hibernation directory (which one server at a time may hold) is built
// there instead, after the previous server stopped; one using the default directory gets a
// directory of its own, so that both servers keep hibernation on. t.Cleanup closes a server
// built and never served.
func (e *Env) prepare(t *testing.T, front func(testing.TB) *harness.RealEnvoy) func(t *testing.T) *Stack {
	t.Helper()
	cfg := DefaultConfig()
	if e.opts.Configure != nil {
		e.opts.Configure(cfg)
	}
	if cfg.GetHibernation().GetDir() != "" {
		return func(t *testing.T) *Stack { return e.Serve(t, front(t)) }
	}
	hibernation := filepath.Join(t.TempDir(), "hibernation")
	log := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
	type built struct {
		front *harness.RealEnvoy
		cfg   *configv1.Config
		svc   *app.App
		err   error
	}
	var (
		b  built
		ft = &frontT{TB: t}
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.front = front(ft)
		if ft.err != nil {
			b.err = ft.err
			return
		}
		b.cfg, b.err = e.config(b.front, func(c *configv1.Config) {
			if c.GetHibernation().GetEnabled() {
				c.Hibernation.Dir = hibernation
			}
		})
		if b.err == nil {
			b.svc, b.err = app.New(app.Options{Config: b.cfg, Log: log})
		}
	}()
	var served atomic.Bool
	t.Cleanup(func() {
		<-done
		if b.svc != nil && !served.Load() {
			ctx, cancel := context.WithTimeout(context.Background(), stopGrace)
			defer cancel()
			if err := b.svc.Shutdown(ctx); err != nil {
				t.Errorf("e2e: stop the server never served: %v", err)
			}
		}
	})
	return func(t *testing.T) *Stack {
		t.Helper()
		<-done
		if b.err != nil {
			t.Fatalf("e2e: %v", b.err)
		}
		// The front's process is stopped with this test, its output logged if it fails.
		_ = front(t)
		served.Store(true)
		return e.serve(t, b.front, b.cfg, b.svc)
	}
}

// frontT is the testing.TB a front is started with on a goroutine of its own: a failure is
// recorded (and the goroutine ended) for the test that waits for the front to report.
type frontT struct {
	testing.TB
	err error
}

func (f *frontT) Helper() {}

func (f *frontT) Fatalf(format string, args ...any) {
	f.err = fmt.Errorf(format, args...)
	runtime.Goexit()
}

func (f *frontT) Fatal(args ...any) {
	f.err = errors.New(fmt.Sprint(args...))
	runtime.Goexit()
}

// Stack is one running server behind one front. Its methods are safe for concurrent use.
type Stack struct {
	// Front is the Envoy the clients talk to.
	Front harness.Front
	// Model is the fake model behind it.
	Model *fakemodel.Server
	// Config is the server configuration in force (defaults applied, validated).
	Config *configv1.Config
	// Manager is the server's sandbox manager.
	Manager *sandbox.Manager

	transport *http.Transport
}

// Serve builds the server as cmd/extproc does (app.New), with the front's URL as the upstream of the
// loop's follow-up calls (so they pass through "Envoy" with the signed header, as in
// production), and serves it on the Env's listeners (ext_proc, and the Containers API). t.Cleanup stops the gRPC server (graceful,
// then hard after a bound), closes the sandbox manager, the engine and the sandbox backend,
// and waits for all of it.
func (e *Env) Serve(t testing.TB, front harness.Front) *Stack {
	t.Helper()
	cfg, err := e.config(front, nil)
	if err != nil {
		t.Fatalf("e2e: %v", err)
	}
	log := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
	svc, err := app.New(app.Options{Config: cfg, Log: log})
	if err != nil {
		t.Fatalf("e2e: %v", err)
	}
	return e.serve(t, front, cfg, svc)
}

// config is the server configuration for front: [DefaultConfig], the Env's Configure, the
// Env's listeners, the front as upstream, then edit (if set), defaults applied, validated.
func (e *Env) config(front harness.Front, edit func(*configv1.Config)) (*configv1.Config, error) {
	cfg := DefaultConfig()
	if e.opts.Configure != nil {
		e.opts.Configure(cfg)
	}
	cfg.Listen = e.Addr()
	cfg.ApiListen = proto.String(e.APIAddr())
	cfg.Upstream = front.URL()
	config.ApplyDefaults(cfg)
	if edit != nil {
		edit(cfg)
	}
	if err := config.Validate(cfg); err != nil {
		return nil, fmt.Errorf("invalid configuration: %w", err)
	}
	return cfg, nil
}

// serve serves svc (built from cfg for front) on the Env's listeners until t's end.
func (e *Env) serve(t testing.TB, front harness.Front, cfg *configv1.Config, svc *app.App) *Stack {
	t.Helper()
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
	})
	return &Stack{Front: front, Model: e.Model, Config: cfg, Manager: svc.Manager(), transport: transport}
}

// stopGrace bounds the graceful stop of a test server before it is stopped hard.
const stopGrace = 10 * time.Second

// Harness returns the front as the harness, or nil when it is a real Envoy (whose ext_proc
// exchange cannot be observed).
func (s *Stack) Harness() *harness.Envoy {
	h, _ := s.Front.(*harness.Envoy)
	return h
}

// Client returns an openai-go client of the front's "/v1/" API (or base, e.g. "/analyst/v1/")
// with apiKey, no retries, and the stack's HTTP transport (closed with the stack).
func (s *Stack) Client(apiKey string, opts ...option.RequestOption) openai.Client {
	return s.ClientAt("/v1/", apiKey, opts...)
}

// ClientAt is [Stack.Client] for another base path of the front.
func (s *Stack) ClientAt(base, apiKey string, opts ...option.RequestOption) openai.Client {
	all := []option.RequestOption{
		option.WithBaseURL(s.Front.URL() + base),
		option.WithAPIKey(apiKey),
		option.WithMaxRetries(0),
		option.WithHTTPClient(&http.Client{Transport: s.transport}),
	}
	return openai.NewClient(append(all, opts...)...)
}

// loopback is a TCP listener on 127.0.0.1 that outlives the servers serving it one after
// another (one per front), so the fronts can be given its address before any server exists.
type loopback struct {
	l *net.TCPListener
}

func newLoopback() (*loopback, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	return &loopback{l: l.(*net.TCPListener)}, nil
}

// view returns a listener for the next server. Closing it ends that server's Accept without
// closing the shared socket. Views must be used one at a time: a new view is taken only after
// the previous server has stopped.
func (lb *loopback) view() *loopbackView {
	_ = lb.l.SetDeadline(time.Time{})
	return &loopbackView{lb: lb}
}

type loopbackView struct {
	lb     *loopback
	closed atomic.Bool
}

func (v *loopbackView) Accept() (net.Conn, error) {
	if v.closed.Load() {
		return nil, net.ErrClosed
	}
	c, err := v.lb.l.Accept()
	if v.closed.Load() {
		if c != nil {
			_ = c.Close()
		}
		return nil, net.ErrClosed
	}
	return c, err
}

// Close wakes a pending Accept (with a deadline in the past) and makes it, and every later
// one, fail with net.ErrClosed.
func (v *loopbackView) Close() error {
	if v.closed.CompareAndSwap(false, true) {
		_ = v.lb.l.SetDeadline(time.Now())
	}
	return nil
}

func (v *loopbackView) Addr() net.Addr { return v.lb.l.Addr() }
