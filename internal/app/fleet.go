package app

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"

	goredis "github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	configv1 "github.com/codeinterp/codeinterp/api/codeinterp/config/v1"
	"github.com/codeinterp/codeinterp/pkg/config"
	"github.com/codeinterp/codeinterp/pkg/fleet"
	"github.com/codeinterp/codeinterp/pkg/sandbox"
	"github.com/codeinterp/codeinterp/pkg/sandbox/remote"
	"github.com/codeinterp/codeinterp/pkg/store"
	"github.com/codeinterp/codeinterp/pkg/store/memory"
	storeredis "github.com/codeinterp/codeinterp/pkg/store/redis"
)

// stores are the cross-request stores of the configuration's store: this process's memory,
// or a Redis every replica shares.
type stores struct {
	registry      store.Registry
	continuations store.Continuations
	nodes         store.Nodes
	// stored keeps the assembled answers GET /v1/responses/{id} reads: a store of its own, so
	// that they do not take the continuations' room (the same bounds, counted apart).
	stored store.Pending
	// accepted keeps the identities the upstream took a model call of (accepted.go), apart
	// for the same reason.
	accepted store.Pending
	// redis is the client of store "redis", closed by close; nil for store "memory".
	redis goredis.UniversalClient
}

// newStores makes the stores of cfg's store.
func newStores(cfg *configv1.Config, log *zap.Logger) (*stores, error) {
	if cfg.GetStore() != config.StoreRedis {
		return &stores{registry: memory.NewRegistry(), continuations: memory.NewPending(nil), nodes: memory.NewNodes(), stored: memory.NewPendingLimited(nil, storedLimits(cfg)), accepted: memory.NewPending(nil)}, nil
	}
	rc := cfg.GetRedis()
	o := goredis.UniversalOptions{
		Addrs:      rc.GetAddresses(),
		MasterName: rc.GetMasterName(),
		Username:   rc.GetUsername(),
		DB:         int(rc.GetDb()),
	}
	if f := rc.GetPasswordFile(); f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("redis.password_file: %w", err)
		}
		o.Password = strings.TrimSpace(string(b))
	}
	if rc.GetTls() {
		o.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	// go-redis logs each failed dial of its pool to stderr; the store logs what fails,
	// rate-limited. Its lines go to the debug log (the logger is the library's, process-wide).
	goredis.SetLogger(redisLogger{log.Named("redis")})
	c := storeredis.NewClient(o)
	s := storeredis.New(c, storeredis.Options{
		Prefix:  rc.GetKeyPrefix(),
		Timeout: rc.GetTimeout().AsDuration(),
		Log:     log.Named("redis"),
	})
	prefix := rc.GetKeyPrefix()
	if prefix == "" {
		prefix = storeredis.DefaultPrefix
	}
	stored := storeredis.New(c, storedRedisOptions(cfg, storeredis.Options{Prefix: prefix + "stored:", Timeout: rc.GetTimeout().AsDuration(), Log: log.Named("redis")}))
	accepted := storeredis.New(c, storeredis.Options{Prefix: prefix + "accepted:", Timeout: rc.GetTimeout().AsDuration(), Log: log.Named("redis")})
	return &stores{registry: s, continuations: s, nodes: s, stored: stored, accepted: accepted, redis: c}, nil
}

// redisLogger sends go-redis's own lines to a zap logger at debug level.
type redisLogger struct{ log *zap.Logger }

func (l redisLogger) Printf(_ context.Context, format string, v ...any) {
	if ce := l.log.Check(zap.DebugLevel, "go-redis"); ce != nil {
		ce.Write(zap.String("line", fmt.Sprintf(format, v...)))
	}
}

func (s *stores) close() error {
	if s.redis == nil {
		return nil
	}
	if err := s.redis.Close(); err != nil {
		return fmt.Errorf("close redis client: %w", err)
	}
	return nil
}

// fleetParts are what a process of a fleet (store "redis") runs beside the API servers: the
// Fleet that routes container calls to their owners and announces this node, and the sandbox
// service through which the other replicas reach this node's containers.
type fleetParts struct {
	fleet   *fleet.Fleet
	service *remote.Server // nil on a gateway

	// cancel stops the heartbeats; done is closed when they have stopped (and the node has
	// left the directory).
	cancel context.CancelFunc
	done   chan struct{}
	runErr error

	stopOnce sync.Once
}

// newFleet wires the fleet parts of cfg (store "redis") around the local Manager (nil on a
// gateway) and starts the heartbeats. tp, if not nil, records the spans of the sandbox
// service's calls (the trace context crosses them either way).
func newFleet(cfg *configv1.Config, st *stores, local *sandbox.Manager, tp trace.TracerProvider, log *zap.Logger) (*fleetParts, error) {
	secret, err := fleetSecret(cfg.GetFleetSecretFile())
	if err != nil {
		return nil, err
	}
	var tlsFiles remote.TLSFiles
	if t := cfg.GetFleetTls(); t != nil {
		tlsFiles = remote.TLSFiles{CertFile: t.GetCertFile(), KeyFile: t.GetKeyFile(), CAFile: t.GetCaFile()}
	}
	fc := fleet.Config{
		Registry: st.registry,
		Nodes:    st.nodes,
		Dial: func(n store.Node) (sandbox.Service, error) {
			return remote.Dial(n.Addr, remote.ClientOptions{Secret: secret, TLS: tlsFiles, TracerProvider: tp, Log: log.Named("sandbox-client")})
		},
		Log: log,
	}
	p := &fleetParts{done: make(chan struct{})}
	if local != nil {
		fc.Self, fc.Addr, fc.Local = cfg.GetNodeId(), config.NodeAddress(cfg), local
		svc, err := remote.NewServer(local, remote.ServerOptions{Secret: secret, TLS: tlsFiles, TracerProvider: tp, Log: log.Named("sandbox-service")})
		if err != nil {
			return nil, fmt.Errorf("sandbox service: %w", err)
		}
		p.service = svc
	}
	p.fleet = fleet.New(fc)
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	go func() {
		defer close(p.done)
		p.runErr = p.fleet.Run(ctx)
	}()
	return p, nil
}

// fleetSecret reads the fleet secret file.
func fleetSecret(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("fleet_secret_file: %w", err)
	}
	secret := []byte(strings.TrimSpace(string(b)))
	if len(secret) < remote.MinSecretBytes {
		return nil, fmt.Errorf("fleet_secret_file: the secret has fewer than %d bytes", remote.MinSecretBytes)
	}
	return secret, nil
}

// fleetKey is the key of the identity hashes and follow-up signatures of a fleet's
// replicas, derived from their shared secret (never the secret itself, which the sandbox
// service's calls carry).
func fleetKey(path string) ([]byte, error) {
	secret, err := fleetSecret(path)
	if err != nil {
		return nil, err
	}
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte("codeinterp identity and follow-up key"))
	return mac.Sum(nil), nil
}

// serve serves the sandbox service on lis until stop.
func (p *fleetParts) serve(lis net.Listener) error {
	if p.service == nil {
		return errors.New("this process holds no containers: it serves no sandbox service")
	}
	return p.service.Serve(lis)
}

// stop ends the heartbeats (the node leaves the directory), then the sandbox service (its
// calls in progress let finish until ctx ends), then closes the clients of the other nodes. The local Manager is the caller's.
// Idempotent.
func (p *fleetParts) stop(ctx context.Context) error {
	var errs []error
	p.stopOnce.Do(func() {
		// Leave the directory first, so that no replica places a container here any more.
		p.cancel()
		<-p.done
		if p.runErr != nil {
			errs = append(errs, p.runErr)
		}
		if p.service != nil {
			if err := p.service.Shutdown(ctx); err != nil {
				errs = append(errs, fmt.Errorf("stop the sandbox service: %w", err))
			}
		}
		if err := p.fleet.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close the fleet's clients: %w", err))
		}
	})
	return errors.Join(errs...)
}
