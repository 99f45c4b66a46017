package processor

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	configv1 "github.com/codeinterp/codeinterp/api/codeinterp/config/v1"
	"github.com/codeinterp/codeinterp/pkg/loop"
	"github.com/codeinterp/codeinterp/pkg/sandbox"
)

// ServiceOptions configure a Service.
type ServiceOptions struct {
	// Config is the server configuration with defaults applied and validated. Required.
	Config *configv1.Config
	// Secret keys follow-up signatures and identity hashes; if empty, a random one is made.
	Secret []byte
	// Log receives the logs. If nil, nothing is logged.
	Log *zap.Logger
	// Provider, if set, is the sandbox backend to use; the caller owns it and closes it after
	// Shutdown. If nil, the backend Config names is made, and the Service owns it.
	Provider sandbox.Provider
}

// Service is a whole codeinterp server: the sandbox backend and manager, the loop engine, the
// ext_proc Server and a gRPC server carrying it and the gRPC health service. Serve it on a
// listener; Shutdown stops everything it started and deletes every sandbox.
type Service struct {
	grpc     *grpc.Server
	health   *health.Server
	manager  *sandbox.Manager
	engine   *loop.Engine
	metrics  *Metrics
	owned    *sandbox.Local // the backend made by NewService, closed by Shutdown
	log      *zap.Logger
	shutdown sync.Once
}

// NewService wires a Service from o. It starts the sandbox manager (and its warm pool), but
// serves nothing until Serve.
func NewService(o ServiceOptions) (*Service, error) {
	cfg := o.Config
	log := o.Log
	if log == nil {
		log = zap.NewNop()
	}
	sb := cfg.GetSandbox()
	s := &Service{log: log}
	provider := o.Provider
	if provider == nil {
		local, err := sandbox.NewLocal(LocalSandboxConfig(cfg), log)
		if err != nil {
			return nil, fmt.Errorf("sandbox: %w", err)
		}
		if sb.GetLocal().GetUnsafeNoIsolation() {
			log.Warn("sandbox isolation is OFF (sandbox.local.unsafe_no_isolation): code runs with the server's rights; never use this in production")
		}
		s.owned, provider = local, local
	}
	s.manager = sandbox.NewManager(provider, sandbox.ManagerConfig{
		WarmPool:                 int(sb.GetWarmPoolSize()),
		SessionIdleTTL:           sb.GetSessionIdleTtl().AsDuration(),
		MaxSessionsPerIdentity:   int(sb.GetMaxSessionsPerIdentity()),
		MaxContainers:            int(sb.GetMaxContainers()),
		MaxContainersPerIdentity: int(sb.GetMaxContainersPerIdentity()),
		RunTimeout:               cfg.GetDefaultProfile().GetRunTimeout().AsDuration(),
	}, log)
	s.engine = loop.New(s.manager, loop.Config{Log: log})
	s.metrics = NewMetrics()
	srv, err := New(Options{
		Config:     cfg,
		Loop:       s.engine,
		Containers: s.manager,
		Secret:     o.Secret,
		Log:        log,
		Metrics:    s.metrics,
	})
	if err != nil {
		s.closeParts()
		return nil, err
	}
	s.grpc = grpc.NewServer(
		// Envoy sends whole BUFFERED bodies in one message; grpc-go's 4 MiB default would fail them.
		grpc.MaxRecvMsgSize(int(cfg.GetMaxRequestBytes())),
		grpc.MaxSendMsgSize(int(cfg.GetMaxRequestBytes())),
	)
	s.health = health.NewServer()
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(s.grpc, s.health)
	extprocv3.RegisterExternalProcessorServer(s.grpc, srv)
	return s, nil
}

// LocalSandboxConfig maps the configuration's sandbox section onto the local backend's settings.
func LocalSandboxConfig(cfg *configv1.Config) sandbox.LocalConfig {
	sb := cfg.GetSandbox()
	l := sb.GetLocal()
	return sandbox.LocalConfig{
		Python:             l.GetPython(),
		Bwrap:              l.GetBwrap(),
		WorkDir:            l.GetWorkDir(),
		CPUSeconds:         int(l.GetCpuSeconds()),
		MaxProcesses:       int(l.GetMaxProcesses()),
		MaxFileBytes:       int64(l.GetMaxFileBytes()),
		OutputLimit:        int(sb.GetOutputLimitBytes()),
		DefaultMemoryLimit: sb.GetDefaultMemoryLimit(),
		UnsafeNoIsolation:  l.GetUnsafeNoIsolation(),
		DataBytes:          int64(l.GetDataBytes()),
		TmpBytes:           int64(l.GetTmpBytes()),
		Cgroups:            l.GetCgroups(),
		InterruptGrace:     l.GetInterruptGrace().AsDuration(),
		ReadOnlyPaths:      l.GetReadOnlyPaths(),
		Preload:            true,
	}
}

// Serve serves ext_proc and gRPC health on lis, reporting SERVING once it accepts streams, until
// Shutdown. It returns nil after Shutdown.
func (s *Service) Serve(lis net.Listener) error {
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	if err := s.grpc.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return err
	}
	return nil
}

// Serving reports whether the health service says SERVING.
func (s *Service) Serving(ctx context.Context) bool {
	resp, err := s.health.Check(ctx, &healthpb.HealthCheckRequest{})
	return err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING
}

// Shutdown reports NOT_SERVING, lets open streams finish for up to grace, then closes the rest
// (grpc-go's GracefulStop has no bound of its own, grpc-go #2448), and then deletes every
// sandbox and closes the backend it owns. It returns when all of that is done. Idempotent.
func (s *Service) Shutdown(grace time.Duration) error {
	var err error
	s.shutdown.Do(func() {
		s.health.Shutdown()
		stopped := make(chan struct{})
		go func() {
			s.grpc.GracefulStop()
			close(stopped)
		}()
		timer := time.NewTimer(grace)
		select {
		case <-stopped:
			timer.Stop()
		case <-timer.C:
			s.log.Warn("grace period over; closing open streams", zap.Duration("grace", grace))
			s.grpc.Stop()
			<-stopped
		}
		err = s.closeParts()
	})
	return err
}

// closeParts deletes every sandbox, closes the engine's connections and the owned backend.
func (s *Service) closeParts() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var errs []error
	if err := s.manager.Close(ctx); err != nil {
		errs = append(errs, err)
	}
	s.engine.Close()
	if s.owned != nil {
		if err := s.owned.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close sandbox backend: %w", err))
		}
	}
	return errors.Join(errs...)
}

// Manager returns the Service's sandbox manager.
func (s *Service) Manager() *sandbox.Manager { return s.manager }

// Collectors returns every Prometheus metric of the Service, for registration.
func (s *Service) Collectors() []prometheus.Collector {
	var out []prometheus.Collector
	out = append(out, s.metrics.Collectors()...)
	out = append(out, s.engine.Collectors()...)
	out = append(out, s.manager.Collectors()...)
	return out
}
