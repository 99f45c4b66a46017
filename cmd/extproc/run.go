package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	configv1 "github.com/codeinterp/codeinterp/api/codeinterp/config/v1"
	"github.com/codeinterp/codeinterp/internal/app"
	"github.com/codeinterp/codeinterp/pkg/config"
)

// run parses args, serves until ctx is done, then shuts down within the configured grace. It is
// main without the process: tests call it directly.
func run(ctx context.Context, args []string, stderr io.Writer) error {
	cfg, err := loadConfig(args, stderr)
	if err != nil {
		return err
	}
	log, err := newLogger(cfg.GetLogLevel(), stderr)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()

	// Listen before starting anything that must be stopped, so a busy port fails fast.
	grpcLis, err := listen(cfg.GetListen())
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.GetListen(), err)
	}
	defer grpcLis.Close()
	adminLis, err := net.Listen("tcp", cfg.GetAdminListen())
	if err != nil {
		return fmt.Errorf("listen admin %s: %w", cfg.GetAdminListen(), err)
	}
	defer adminLis.Close()

	var apiLis net.Listener
	// A sandbox node serves the sandbox service only.
	if a := cfg.GetApiListen(); a != "" && cfg.GetRole() != config.RoleSandbox {
		if apiLis, err = listen(a); err != nil {
			return fmt.Errorf("listen api %s: %w", a, err)
		}
		defer apiLis.Close()
	}

	var sandboxLis net.Listener
	if a := cfg.GetSandboxListen(); a != "" {
		if sandboxLis, err = net.Listen("tcp", a); err != nil {
			return fmt.Errorf("listen sandbox service %s: %w", a, err)
		}
		defer sandboxLis.Close()
	}

	svc, err := app.New(app.Options{Config: cfg, Log: log})
	if err != nil {
		return err
	}
	registry := prometheus.NewRegistry()
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	registry.MustRegister(svc.Collectors()...)

	admin := &http.Server{Handler: svc.AdminHandler(registry), ReadHeaderTimeout: 10 * time.Second}
	adminDone := make(chan error, 1)
	go func() { adminDone <- admin.Serve(adminLis) }()
	grpcDone := make(chan error, 1)
	go func() { grpcDone <- svc.Serve(grpcLis) }()
	// Without an API listener apiDone stays empty and the select below never picks it.
	apiDone := make(chan error, 1)
	apiServing := apiLis != nil
	if apiServing {
		go func() { apiDone <- svc.ServeAPI(apiLis) }()
	}
	// Without a sandbox listener sandboxDone stays empty, like apiDone.
	sandboxDone := make(chan error, 1)
	sandboxServing := sandboxLis != nil
	if sandboxServing {
		go func() { sandboxDone <- svc.ServeSandbox(sandboxLis) }()
	}
	log.Info("serving",
		zap.String("listen", cfg.GetListen()),
		zap.String("admin_listen", cfg.GetAdminListen()),
		zap.String("api_listen", cfg.GetApiListen()),
		zap.String("upstream", cfg.GetUpstream()),
		zap.String("role", cfg.GetRole()),
		zap.String("store", cfg.GetStore()),
		zap.String("sandbox_listen", cfg.GetSandboxListen()),
		zap.String("node_id", cfg.GetNodeId()),
		zap.String("node_address", config.NodeAddress(cfg)),
		zap.String("sandbox", cfg.GetSandbox().GetBackend()))

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-grpcDone:
		serveErr = fmt.Errorf("serve grpc: %w", serveErr)
	case serveErr = <-adminDone:
		serveErr = fmt.Errorf("serve admin: %w", serveErr)
	case serveErr = <-apiDone:
		// ServeAPI returns only on a failure before Shutdown.
		serveErr = fmt.Errorf("serve containers api: %w", serveErr)
		apiServing = false
	case serveErr = <-sandboxDone:
		// ServeSandbox returns only on a failure before Shutdown.
		serveErr = fmt.Errorf("serve sandbox service: %w", serveErr)
		sandboxServing = false
	}

	grace := cfg.GetShutdownGrace().AsDuration()
	log.Info("shutting down", zap.Duration("grace", grace))
	graceCtx, cancelGrace := context.WithTimeout(context.Background(), grace)
	err = svc.Shutdown(graceCtx)
	cancelGrace()
	if err != nil {
		log.Warn("shutdown", zap.Error(err))
	}
	if serveErr == nil {
		if err := <-grpcDone; err != nil {
			serveErr = fmt.Errorf("serve grpc: %w", err)
		}
	}
	// Shutdown stopped the API server too: its Serve has returned or is returning.
	if apiServing {
		if err := <-apiDone; err != nil && serveErr == nil {
			serveErr = fmt.Errorf("serve containers api: %w", err)
		}
	}
	if sandboxServing {
		if err := <-sandboxDone; err != nil && serveErr == nil {
			serveErr = fmt.Errorf("serve sandbox service: %w", err)
		}
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := admin.Shutdown(shutdownCtx); err != nil {
		log.Warn("admin shutdown", zap.Error(err))
	}
	if err := <-adminDone; err != nil && !errors.Is(err, http.ErrServerClosed) && serveErr == nil {
		serveErr = fmt.Errorf("serve admin: %w", err)
	}
	return serveErr
}

// loadConfig reads the flags and the config file they name; set flags override the file.
func loadConfig(args []string, stderr io.Writer) (*configv1.Config, error) {
	fs := flag.NewFlagSet("extproc", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		path       = fs.String("config", "", "YAML `file` with the server configuration (see api/codeinterp/config/v1/config.proto)")
		listenAddr = fs.String("listen", config.DefaultListen, "gRPC `address` of ext_proc and gRPC health (host:port or unix:///path)")
		adminAddr  = fs.String("admin-listen", config.DefaultAdminListen, "HTTP `address` of /healthz, /readyz and /metrics")
		apiAddr    = fs.String("api-listen", config.DefaultAPIListen, "HTTP `address` of the Containers API (/v1/containers), host:port or unix:///path; \"\" serves none")
		upstream   = fs.String("upstream", config.DefaultUpstream, "base `URL` of the loop's follow-up model calls; the request path is appended")
		backend    = fs.String("sandbox", config.DefaultSandboxBackend, "sandbox `backend` (local)")
		level      = fs.String("log-level", config.DefaultLogLevel, "log `level`: debug, info, warn, error")
	)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	cfg, err := config.Load(*path)
	if err != nil {
		return nil, err
	}
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "listen":
			cfg.Listen = *listenAddr
		case "admin-listen":
			cfg.AdminListen = *adminAddr
		case "api-listen":
			cfg.ApiListen = apiAddr
		case "upstream":
			cfg.Upstream = *upstream
		case "sandbox":
			if cfg.Sandbox == nil {
				cfg.Sandbox = &configv1.Sandbox{}
			}
			cfg.Sandbox.Backend = *backend
		case "log-level":
			cfg.LogLevel = *level
		}
	})
	config.ApplyDefaults(cfg)
	if err := app.Validate(cfg); err != nil {
		return nil, fmt.Errorf("invalid configuration:\n%w", err)
	}
	return cfg, nil
}

// listen opens a TCP address or, for "unix:///path", a Unix socket (replacing a stale one).
func listen(addr string) (net.Listener, error) {
	if path, ok := strings.CutPrefix(addr, "unix://"); ok {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
		return net.Listen("unix", path)
	}
	return net.Listen("tcp", addr)
}

// newLogger returns a JSON production logger at level, writing to w.
func newLogger(level string, w io.Writer) (*zap.Logger, error) {
	var lvl zapcore.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log level: %w", err)
	}
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	core := zapcore.NewCore(zapcore.NewJSONEncoder(enc), zapcore.AddSync(w), lvl)
	// Sample repeated messages, as production loggers should.
	core = zapcore.NewSamplerWithOptions(core, time.Second, 100, 100)
	return zap.New(core), nil
}
