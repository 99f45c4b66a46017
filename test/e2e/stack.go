// Package e2e runs codeinterp end to end: the real ext_proc server wired as cmd/extproc wires it
// (real gRPC server over loopback TCP, real processor, loop engine, sandbox manager and local
// bubblewrap backend), behind the Envoy harness (or a real Envoy when one is on PATH), in front
// of the scripted fake model, driven by the official openai-go client.
//
// [NewEnv] prepares what one top-level test shares (the fake model and the gRPC listener);
// [Env.Fronts] runs a test function once per front with a [Stack] serving it.
package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	configv1 "github.com/codeinterp/codeinterp/api/codeinterp/config/v1"
	"github.com/codeinterp/codeinterp/pkg/config"
	"github.com/codeinterp/codeinterp/pkg/loop"
	"github.com/codeinterp/codeinterp/pkg/processor"
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
// every route) and a loopback TCP listener that each front's server serves in turn.
type Env struct {
	// Model is the scripted upstream model.
	Model *fakemodel.Server

	opts EnvOptions
	lis  *loopback
}

// NewEnv starts the fake model and opens the gRPC listener; t.Cleanup closes both.
func NewEnv(t *testing.T, o EnvOptions) *Env {
	t.Helper()
	lis, err := newLoopback()
	if err != nil {
		t.Fatalf("e2e: listen for the ext_proc server: %v", err)
	}
	t.Cleanup(func() { _ = lis.l.Close() })
	return &Env{Model: fakemodel.New(t), opts: o, lis: lis}
}

// Addr is the gRPC address of the ext_proc server, "127.0.0.1:port".
func (e *Env) Addr() string { return e.lis.l.Addr().String() }

// HarnessOptions are the front options: the Env's harness knobs with the ext_proc address and
// the fake model as upstream.
func (e *Env) HarnessOptions() harness.Options {
	o := e.opts.Harness
	o.ExtProcAddr = e.Addr()
	o.Upstream = e.Model.URL()
	return o
}

// Fronts runs fn through [harness.Fronts] (the harness always; a real Envoy when one is on
// PATH), each time with a fresh [Stack] serving that front.
func (e *Env) Fronts(t *testing.T, fn func(t *testing.T, s *Stack)) {
	t.Helper()
	harness.Fronts(t, e.HarnessOptions(), func(t *testing.T, front harness.Front) {
		fn(t, e.Serve(t, front))
	})
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

// Serve builds the server as cmd/extproc does, with the front's URL as the upstream of the
// loop's follow-up calls (so they pass through "Envoy" with the signed header, as in
// production), and serves it on the Env's listener. t.Cleanup stops the gRPC server (graceful,
// then hard after a bound), closes the sandbox manager, the engine and the sandbox backend,
// and waits for all of it.
func (e *Env) Serve(t *testing.T, front harness.Front) *Stack {
	t.Helper()
	cfg := DefaultConfig()
	if e.opts.Configure != nil {
		e.opts.Configure(cfg)
	}
	cfg.Listen = e.Addr()
	cfg.Upstream = front.URL()
	config.ApplyDefaults(cfg)
	if err := config.Validate(cfg); err != nil {
		t.Fatalf("e2e: invalid configuration: %v", err)
	}
	log := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
	provider, err := NewLocalProvider(cfg, log)
	if err != nil {
		t.Fatalf("e2e: %v", err)
	}
	srv, err := startServer(e.lis.view(), cfg, provider, log)
	if err != nil {
		_ = provider.Close()
		t.Fatalf("e2e: %v", err)
	}
	transport := &http.Transport{MaxIdleConnsPerHost: 16}
	t.Cleanup(func() {
		transport.CloseIdleConnections()
		if err := srv.stop(); err != nil {
			t.Errorf("e2e: stop the server: %v", err)
		}
		if err := provider.Close(); err != nil {
			t.Errorf("e2e: close the sandbox backend: %v", err)
		}
	})
	return &Stack{Front: front, Model: e.Model, Config: cfg, Manager: srv.manager, transport: transport}
}

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

// NewLocalProvider is the local bubblewrap backend configured from cfg exactly as
// cmd/extproc configures it (numpy, pandas and matplotlib preloaded). The caller closes it
// after the manager using it.
func NewLocalProvider(cfg *configv1.Config, log *zap.Logger) (*sandbox.Local, error) {
	sb := cfg.GetSandbox()
	p, err := sandbox.NewLocal(sandbox.LocalConfig{
		Python:             sb.GetLocal().GetPython(),
		Bwrap:              sb.GetLocal().GetBwrap(),
		WorkDir:            sb.GetLocal().GetWorkDir(),
		CPUSeconds:         int(sb.GetLocal().GetCpuSeconds()),
		MaxProcesses:       int(sb.GetLocal().GetMaxProcesses()),
		MaxFileBytes:       int64(sb.GetLocal().GetMaxFileBytes()),
		OutputLimit:        int(sb.GetOutputLimitBytes()),
		DefaultMemoryLimit: sb.GetDefaultMemoryLimit(),
		UnsafeNoIsolation:  sb.GetLocal().GetUnsafeNoIsolation(),
		Preload:            true,
	}, log)
	if err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	return p, nil
}

// server is a running ext_proc gRPC server and what it owns.
type server struct {
	gs      *grpc.Server
	manager *sandbox.Manager
	engine  *loop.Engine
	served  chan error
}

// stopGrace bounds the graceful stop of a test server before it is stopped hard.
const stopGrace = 10 * time.Second

// startServer wires a server over provider as cmd/extproc's run does (sandbox manager → loop
// engine → processor → gRPC server with the receive limit raised, health service) and serves
// it on lis. cfg must have defaults applied. The caller stops it with stop, then closes the
// provider.
func startServer(lis net.Listener, cfg *configv1.Config, provider sandbox.Provider, log *zap.Logger) (*server, error) {
	sb := cfg.GetSandbox()
	manager := sandbox.NewManager(provider, sandbox.ManagerConfig{
		WarmPool:               int(sb.GetWarmPoolSize()),
		SessionIdleTTL:         sb.GetSessionIdleTtl().AsDuration(),
		MaxSessionsPerIdentity: int(sb.GetMaxSessionsPerIdentity()),
		MaxContainers:          int(sb.GetMaxContainers()),
		RunTimeout:             cfg.GetDefaultProfile().GetRunTimeout().AsDuration(),
	}, log)
	engine := loop.New(manager, loop.Config{Log: log})
	srv, err := processor.New(processor.Options{
		Config:     cfg,
		Loop:       engine,
		Containers: manager,
		Log:        log,
		Metrics:    processor.NewMetrics(),
	})
	if err != nil {
		engine.Close()
		_ = closeManager(manager)
		return nil, fmt.Errorf("new processor: %w", err)
	}
	gs := grpc.NewServer(
		grpc.MaxRecvMsgSize(int(cfg.GetMaxRequestBytes())),
		grpc.MaxSendMsgSize(int(cfg.GetMaxRequestBytes())),
	)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	extprocv3.RegisterExternalProcessorServer(gs, srv)
	s := &server{gs: gs, manager: manager, engine: engine, served: make(chan error, 1)}
	go func() { s.served <- gs.Serve(lis) }()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	return s, nil
}

// stop stops the gRPC server (gracefully, then hard after stopGrace, as cmd/extproc does),
// waits for Serve to return, closes the sandbox manager (deleting every container) and the
// engine.
func (s *server) stop() error {
	stopped := make(chan struct{})
	go func() {
		s.gs.GracefulStop()
		close(stopped)
	}()
	timer := time.NewTimer(stopGrace)
	select {
	case <-stopped:
		timer.Stop()
	case <-timer.C:
		s.gs.Stop()
		<-stopped
	}
	var errs []error
	if err := <-s.served; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		errs = append(errs, fmt.Errorf("serve: %w", err))
	}
	if err := closeManager(s.manager); err != nil {
		errs = append(errs, err)
	}
	s.engine.Close()
	return errors.Join(errs...)
}

func closeManager(m *sandbox.Manager) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return m.Close(ctx)
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
