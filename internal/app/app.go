// Package app wires a whole codeinterp server: the sandbox backend and its manager, the loop
// engine, the ext_proc server and the gRPC server carrying it with gRPC health, the Containers
// API's HTTP server over the same manager, and the admin HTTP handler. It is the one place that
// maps the configuration onto the packages' configs, checks what only the packages know of it
// ([Validate]), makes the server's secret, and names a concrete sandbox backend or store;
// cmd/extproc and the end-to-end tests build their servers with it.
package app

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"sync"
	"time"

	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/schema/chat"
	"github.com/codeinterp/codeinterp/pkg/schema/messages"
	"github.com/codeinterp/codeinterp/pkg/schema/responses"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	configv1 "github.com/codeinterp/codeinterp/api/codeinterp/config/v1"
	"github.com/codeinterp/codeinterp/pkg/admission"
	"github.com/codeinterp/codeinterp/pkg/config"
	"github.com/codeinterp/codeinterp/pkg/identity"
	"github.com/codeinterp/codeinterp/pkg/loop"
	"github.com/codeinterp/codeinterp/pkg/processor"
	"github.com/codeinterp/codeinterp/pkg/sandbox"
	"github.com/codeinterp/codeinterp/pkg/sandbox/local"
)

// Options configure an App.
type Options struct {
	// Config is the server configuration with defaults applied (config.ApplyDefaults). New
	// validates it. Required.
	Config *configv1.Config
	// Secret keys follow-up signatures and identity hashes (of the ext_proc server and the
	// Containers API alike). If empty, the contents of Config's followup_secret_file are the
	// secret, or, without one, a key derived from the fleet secret (store redis), or New makes
	// a random one.
	Secret []byte
	// Log receives the logs. If nil, nothing is logged.
	Log *zap.Logger
	// Provider, if set, is the sandbox backend to use; the caller owns it and closes it after
	// Shutdown. If nil, the backend Config names is made, and the App owns it.
	Provider sandbox.Provider
}

// App is a whole codeinterp server: the sandbox backend and manager, the loop engine, the
// ext_proc server and a gRPC server carrying it and the gRPC health service, and the
// Containers API. Serve it on a listener (and ServeAPI on another); Shutdown stops everything
// it started and deletes every sandbox.
type App struct {
	grpc    *grpc.Server
	srv     *processor.Server
	health  *health.Server
	manager *sandbox.Manager // this process's containers; nil on a gateway
	// sandboxes is what the loop, admission and the Containers API use: the Manager in one
	// process, the Fleet in a fleet.
	sandboxes sandbox.Service
	stores    *stores
	fleet     *fleetParts // nil with store memory
	engine    *loop.Engine
	metrics   *processor.Metrics
	api       *apiServer
	owned     *local.Local // the backend made by New, closed by Shutdown
	tracing   *tracing     // the OpenTelemetry export, nil when off (tracing.go)
	pprof     bool         // admin_pprof: the admin listener serves /debug/pprof/
	log       *zap.Logger
	shutdown  sync.Once
}

// New wires an App from o. It validates o.Config (see [Validate]), starts the sandbox manager
// (and its warm pool), but serves nothing until Serve.
func New(o Options) (*App, error) {
	cfg := o.Config
	if cfg == nil {
		return nil, errors.New("new app: Config is required")
	}
	if err := Validate(cfg); err != nil {
		return nil, fmt.Errorf("invalid configuration:\n%w", err)
	}
	log := o.Log
	if log == nil {
		log = zap.NewNop()
	}
	given := o.Secret
	if len(given) == 0 && cfg.GetFollowupSecretFile() == "" && cfg.GetStore() == config.StoreRedis {
		// Every replica of a fleet must hash a credential to the same identity (the
		// containers and continuations in Redis are keyed by it) and may check another's
		// follow-up signatures: the key comes from the secret they share.
		key, err := fleetKey(cfg.GetFleetSecretFile())
		if err != nil {
			return nil, err
		}
		given = key
	}
	secret, err := secretOf(given, cfg.GetFollowupSecretFile())
	if err != nil {
		return nil, err
	}
	sb := cfg.GetSandbox()
	s := &App{log: log, pprof: cfg.GetAdminPprof()}
	if s.tracing, err = startTracing(cfg.GetTracing(), log); err != nil {
		return nil, err
	}
	if s.stores, err = newStores(cfg, log); err != nil {
		_ = s.closeParts(context.Background())
		return nil, err
	}
	if cfg.GetRole() != config.RoleGateway {
		provider := o.Provider
		if provider == nil {
			// local.New warns, once, when the configuration turns isolation off.
			l, err := local.New(localConfig(cfg), log)
			if err != nil {
				_ = s.closeParts(context.Background())
				return nil, fmt.Errorf("sandbox: %w", err)
			}
			s.owned, provider = l, l
		}
		s.manager = sandbox.NewManager(provider, managerConfig(cfg, s.stores.registry), log)
		s.sandboxes = s.manager
	}
	if cfg.GetStore() == config.StoreRedis {
		if s.fleet, err = newFleet(cfg, s.stores, s.manager, s.tracing.tracerProvider(), log); err != nil {
			_ = s.closeParts(context.Background())
			return nil, err
		}
		s.sandboxes = s.fleet.fleet
	}
	uploads, err := uploadsOf(cfg)
	if err != nil {
		_ = s.closeParts(context.Background())
		return nil, err
	}
	accepted := modelCalls(cfg, s.stores.accepted)
	// One skill store: the Skills API's, which the shell tool's container_auto skills name.
	skillSt := skillStore(cfg, s.stores.redis)
	s.api = newAPIServer(cfg, s.sandboxes, secret, uploads, accepted, skillSt, log)
	s.engine = loop.New(s.sandboxes, loop.Config{Log: log, Telemetry: s.tracing.genAI()})
	s.metrics = processor.NewMetrics()
	acfg := admission.Config{
		MaxInputFileBytes: int64(min(cfg.GetMaxUploadBytes(), math.MaxInt64)),
		Stored:            s.stores.stored,
		ResolveSkills:     resolveSkills(skillSt, skillLimits(cfg)),
		ContainerSkills:   containerSkills(skillSt),
		AttachSkills:      attachSkills(skillSt, log),
		SkillStore:        skillSt,
	}
	if uploads != nil {
		// container_upload blocks name files this process keeps.
		acfg.NewFiles = newUploadFiles(uploads, identity.New(secret, identity.Config{CredentialHeaders: cfg.GetCredentialHeaders()}))
	}
	adm := admission.New(s.sandboxes, s.stores.continuations, acfg)
	srv, err := processor.New(processor.Options{
		Routes:            processorRoutes(cfg),
		ProfileKey:        cfg.GetProfileMetadataKey(),
		PathPrefixes:      cfg.GetPathPrefixes(),
		CredentialHeaders: cfg.GetCredentialHeaders(),
		MaxRequestBytes:   int64(min(cfg.GetMaxRequestBytes(), math.MaxInt64)),
		Loop:              s.engine,
		Admission:         adm,
		Telemetry:         s.tracing.genAI(),
		// The API surfaces served: adding one is a package under pkg/schema and a line here.
		Surfaces: []schema.Surface{responses.Surface{}, chat.Surface{}, messages.Surface{ContainerIdle: sb.GetSessionIdleTtl().AsDuration()}},
		Secret:   secret,
		Log:      log,
		Metrics:  s.metrics,
		Accepted: acceptances(accepted),
		// Background responses: bounded runs this server owns (StopBackground in Shutdown).
		Background: backgroundBounds(cfg),
	})
	if err != nil {
		_ = s.closeParts(context.Background())
		return nil, err
	}
	s.srv = srv
	s.grpc = grpc.NewServer(
		// Envoy sends whole BUFFERED bodies in one message; grpc-go's 4 MiB default would fail them.
		grpc.MaxRecvMsgSize(int(cfg.GetMaxRequestBytes())),
		grpc.MaxSendMsgSize(int(cfg.GetMaxRequestBytes())),
	)
	s.health = health.NewServer()
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(s.grpc, s.health)
	if cfg.GetRole() != config.RoleSandbox {
		// A sandbox node serves the sandbox service (ServeSandbox) and health only.
		extprocv3.RegisterExternalProcessorServer(s.grpc, srv)
	}
	return s, nil
}

// processorRoutes maps the configuration's profiles (defaults applied) onto the processor's
// routes.
func processorRoutes(cfg *configv1.Config) map[string]*processor.Route {
	out := map[string]*processor.Route{}
	for name, p := range config.Profiles(cfg) {
		out[name] = &processor.Route{
			Name:                   p.Name,
			Disabled:               p.Disabled,
			FunctionName:           p.FunctionName,
			FunctionDescription:    p.FunctionDescription,
			IdentityHeader:         p.IdentityHeader,
			SessionHeader:          p.SessionHeader,
			AllowAnonymousSessions: p.AllowAnonymousSessions,
			ForwardHeaders:         p.ForwardHeaders,
			Upstream:               p.Upstream,
			LoopDeadline:           p.LoopDeadline,
			LoopMargin:             config.LoopDeadlineMargin,
			MaxRounds:              p.MaxRounds,
			RunTimeout:             p.RunTimeout,
			OutputLimit:            p.OutputLimit,
			MaxOutputBytes:         p.MaxOutputBytes,
			MaxImages:              p.MaxImages,
			MaxCallsPerTurn:        p.MaxCallsPerTurn,
			Progressive:            p.Progressive,
			KeepAlive:              p.KeepAlive,
			MaxResponseBytes:       p.MaxResponseBytes,
			MaxAnswerBytes:         p.MaxAnswerBytes,
		}
	}
	return out
}

// Serve serves ext_proc and gRPC health on lis, reporting SERVING once it accepts streams, until
// Shutdown. It returns nil after Shutdown.
func (s *App) Serve(lis net.Listener) error {
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	if err := s.grpc.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return err
	}
	return nil
}

// ServeSandbox serves the sandbox service (for the other replicas of a fleet) on lis until
// Shutdown. It fails at once in a process that holds no containers or is not part of a fleet.
func (s *App) ServeSandbox(lis net.Listener) error {
	if s.fleet == nil {
		return errors.New("serve the sandbox service: only a process with store redis serves one")
	}
	return s.fleet.serve(lis)
}

// Serving reports whether the health service says SERVING.
func (s *App) Serving(ctx context.Context) bool {
	resp, err := s.health.Check(ctx, &healthpb.HealthCheckRequest{})
	return err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING
}

// Shutdown stops the App in order, bounded by ctx (the configured shutdown_grace):
//
//  1. gRPC health reports NOT_SERVING at once, so a health-checking Envoy stops sending new
//     requests here (envoy/envoy.yaml's ext_proc cluster checks every few seconds);
//  2. the live ext_proc streams are let finish while the server keeps accepting streams: a
//     loop's follow-up model calls come back through Envoy as new streams, and refusing them
//     (as grpc-go's GracefulStop does) would fail the very loops being let finish;
//  3. once no stream is live, GracefulStop closes the listener and the connections;
//  4. if ctx ends first, every live stream is ended (its loop cancelled, its sandbox run
//     interrupted; Envoy gets codes.Unavailable and fails the request) and the gRPC server is
//     stopped hard (GracefulStop has no bound of its own, grpc-go #2448), and Shutdown waits a
//     bounded time for the streams' handlers to return;
//  5. meanwhile, from step 1 on, the Containers API takes no new call and lets the calls in
//     progress (uploads, downloads) finish until ctx ends, when their connections are closed
//     and Shutdown waits a bounded time for their handlers;
//  6. every sandbox is deleted and the backend the App owns is closed.
//
// It returns when all of that is done, with an error if the grace ran out (ctx's error, wrapped)
// or cleaning up failed. Idempotent: later calls return nil at once.
func (s *App) Shutdown(ctx context.Context) error {
	var err error
	s.shutdown.Do(func() { err = s.shutdownOnce(ctx) })
	return err
}

// drainQuiet is how long no stream may be live before the server stops taking new ones.
const drainQuiet = 500 * time.Millisecond

// handlerWait bounds how long Shutdown waits, after the hard stop, for stream handlers to
// return: a cancelled loop ends within the sandbox's interrupt grace.
const handlerWait = 10 * time.Second

func (s *App) shutdownOnce(ctx context.Context) error {
	s.health.Shutdown()
	// Background responses run detached from any stream: they are ended first (recorded as
	// failed), so that no loop of theirs keeps the drain waiting.
	var errs []error
	if err := s.srv.StopBackground(ctx); err != nil {
		errs = append(errs, fmt.Errorf("shutdown: %w", err))
	}
	// The Containers API takes no new call from now on; the transfers in progress go on for
	// the grace, as the streams do, and end before the manager closes.
	apiDone := make(chan error, 1)
	go func() { apiDone <- s.api.shutdown(ctx) }()
	if !s.stopGracefully(ctx) {
		errs = append(errs, fmt.Errorf("shutdown: grace over with %d streams live: %w", s.srv.Live(), ctx.Err()))
		s.log.Warn("grace period over; ending open streams", zap.Int("streams", s.srv.Live()))
		s.srv.Close()
		s.grpc.Stop()
		wait, cancel := context.WithTimeout(context.Background(), handlerWait)
		err := s.srv.Drain(wait)
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("shutdown: stream handlers still running: %w", err))
		}
	}
	if err := <-apiDone; err != nil {
		errs = append(errs, err)
	}
	if err := s.closeParts(ctx); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// stopGracefully lets the live streams finish, then stops the gRPC server gracefully, and
// reports whether that was done before ctx ended. If ctx ends during the GracefulStop, it ends
// the streams and stops the server hard itself, so no goroutine of its own is left when it
// reports false.
func (s *App) stopGracefully(ctx context.Context) bool {
	// Drain again until no stream is live drainQuiet after the last drain ended: a client
	// stream that arrived just as the last one ended would start a loop whose follow-ups
	// GracefulStop refuses. Envoy stops sending once its health check sees NOT_SERVING (a few
	// seconds); until then requests keep coming. A grace that ends meanwhile with nothing
	// live still stops gracefully.
	for {
		if err := s.srv.Drain(ctx); err != nil {
			return false
		}
		quiet := time.NewTimer(drainQuiet)
		select {
		case <-quiet.C:
		case <-ctx.Done():
			quiet.Stop()
		}
		if s.srv.Live() == 0 {
			break
		}
	}
	stopped := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		close(stopped)
	}()
	// Nothing is live: GracefulStop has no stream to wait for, unless one arrived this instant.
	select {
	case <-stopped:
		return true
	case <-ctx.Done():
		if s.srv.Live() == 0 {
			// Give it a moment (a health check in flight); a stream that will not end is
			// stopped hard below.
			t := time.NewTimer(time.Second)
			select {
			case <-stopped:
				t.Stop()
				return true
			case <-t.C:
			}
		}
	}
	// Stop closes every connection, which makes the pending GracefulStop return.
	s.srv.Close()
	s.grpc.Stop()
	<-stopped
	return false
}

// closeParts stops the fleet's parts (the node leaves the fleet, its sandbox service ends),
// deletes every sandbox, closes the engine's connections, the owned backend and the stores.
// It closes what New made so far, so New calls it on a failure half-way. The sandbox
// service's calls in progress may finish until grace ends (at once when it has ended).
func (s *App) closeParts(grace context.Context) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var errs []error
	if s.fleet != nil {
		if err := s.fleet.stop(grace); err != nil {
			errs = append(errs, err)
		}
	}
	if s.manager != nil {
		if err := s.manager.Close(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if s.engine != nil {
		s.engine.Close()
	}
	errs = append(errs, s.tracing.shutdown())
	if s.owned != nil {
		if err := s.owned.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close sandbox backend: %w", err))
		}
	}
	if s.stores != nil {
		if err := s.stores.close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Manager returns the App's sandbox manager; nil on a gateway (role gateway).
func (s *App) Manager() *sandbox.Manager { return s.manager }

// Collectors returns every Prometheus metric of the App, for registration.
func (s *App) Collectors() []prometheus.Collector {
	var out []prometheus.Collector
	out = append(out, s.metrics.Collectors()...)
	out = append(out, s.engine.Collectors()...)
	if s.manager != nil {
		out = append(out, s.manager.Collectors()...)
	}
	if s.owned != nil {
		out = append(out, s.owned.Collectors()...)
	}
	return out
}
