package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	configv1 "github.com/codeinterp/codeinterp/api/codeinterp/config/v1"
	"github.com/codeinterp/codeinterp/internal/app"
	"github.com/codeinterp/codeinterp/pkg/config"
	"github.com/codeinterp/codeinterp/pkg/sandbox/local"
	"github.com/codeinterp/codeinterp/test/e2e"
	"github.com/codeinterp/codeinterp/test/e2e/fakemodel"
	"github.com/codeinterp/codeinterp/test/e2e/harness"
)

// Ready is the line the stack prints on stdout once everything serves.
type Ready struct {
	// EnvoyURL is the real Envoy's listener (or the -front URL), the base of the clients' URLs
	// ("/v1/...").
	EnvoyURL string `json:"envoy_url"`
	// ControlURL is the fake model's control API ([fakemodel.Control]).
	ControlURL string `json:"control_url"`
	// ModelURL is Envoy's upstream: the fake model itself, or the -upstream URL (the fake model
	// then gets no call).
	ModelURL string `json:"model_url"`
	// ExtProcAddr is the codeinterp server's gRPC address.
	ExtProcAddr string `json:"extproc_addr"`
	// APIAddr is the codeinterp server's Containers API address, Envoy's cluster
	// codeinterp_api (clients reach it through EnvoyURL).
	APIAddr string `json:"api_addr"`
}

// stopGrace bounds the server's graceful stop (as test/e2e's stacks do).
const stopGrace = 10 * time.Second

// run starts the stack, writes the [Ready] line to stdout, and serves until ctx is done, stdin
// (if not nil) reaches its end, or Envoy or the server stops; then it stops everything and
// returns how that went, including any process of the stack still alive after the stop. run
// closes stdin before it returns, which must end a Read in progress.
func run(ctx context.Context, args []string, stdin io.ReadCloser, stdout, stderr io.Writer) error {
	err := serve(ctx, args, stdin, stdout, stderr)
	left, lerr := leftovers()
	if lerr != nil {
		return errors.Join(err, lerr)
	}
	if len(left) > 0 {
		err = errors.Join(err, fmt.Errorf("%d processes left after the stop:\n  %s", len(left), strings.Join(left, "\n  ")))
	}
	return err
}

// serve is run without the check for processes left.
func serve(ctx context.Context, args []string, stdin io.ReadCloser, stdout, stderr io.Writer) (err error) {
	fs := flag.NewFlagSet("stack", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		envoyBin  = fs.String("envoy", "", "envoy `binary` (default: $ENVOY_BIN, the module's .venv/bin/envoy, or envoy on PATH)")
		envoyYAML = fs.String("envoy-config", "", "Envoy bootstrap `file` to run (default: the module's envoy/envoy.yaml)")
		logLevel  = fs.String("log-level", "warn", "log `level` of the server and the stack: debug, info, warn, error")
		upstream  = fs.String("upstream", "", "base `URL` of the model Envoy routes to (default: the stack's fake model)")
		start     = fs.String("start", "", "how the local sandbox starts containers, `mode` fork or exec (default: the server's)")
		maxTotal  = fs.Uint("max-containers", 0, "the server's cap on live containers, `n` (default: the server's)")
		front     = fs.String("front", "", "base `URL` of a front the driver runs itself: no Envoy is started, the server's follow-up calls go there, and it serves on the listeners inherited as descriptors 3 (ext_proc) and 4 (Containers API)")
		maxPerID  = fs.Uint("max-containers-per-identity", 0, "the server's cap on one identity's live containers, `n` (default: the server's)")
		uploads   = fs.Bool("anthropic-uploads", false, "the server keeps Anthropic's uploads (anthropic_files.own_uploads); give it an -envoy-config from envoyconf -anthropic-uploads")
		pause     = fs.Duration("ptc-pause-timeout", 0, "the server's ptc.pause_timeout, how long a cell paused for the client's tools waits (default: the server's)")
	)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	if *start != "" && *start != local.StartFork && *start != local.StartExec {
		return fmt.Errorf("start mode %q: want %s or %s", *start, local.StartFork, local.StartExec)
	}
	if *maxTotal > math.MaxUint32 || *maxPerID > math.MaxUint32 {
		return errors.New("container caps: at most 4294967295")
	}
	log, err := newLogger(*logLevel, stderr)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if stdin != nil {
		watched := make(chan struct{})
		go func() {
			defer close(watched)
			_, _ = io.Copy(io.Discard, stdin)
			cancel()
		}()
		defer func() {
			_ = stdin.Close()
			<-watched
		}()
	}

	// The fake model and its control API.
	model, err := fakemodel.Start(log.Named("fakemodel"))
	if err != nil {
		return fmt.Errorf("start the fake model: %w", err)
	}
	defer model.Close()
	controlLis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("listen for the control API: %w", err)
	}
	control := &http.Server{Handler: fakemodel.NewControl(model), ReadHeaderTimeout: 10 * time.Second}
	controlDone := make(chan error, 1)
	go func() { controlDone <- control.Serve(controlLis) }()
	defer func() {
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		_ = control.Shutdown(sctx)
		if serr := <-controlDone; serr != nil && !errors.Is(serr, http.ErrServerClosed) {
			err = errors.Join(err, fmt.Errorf("serve the control API: %w", serr))
		}
	}()

	grpcLis, apiLis, err := listeners(*front != "")
	if err != nil {
		return err
	}
	defer grpcLis.Close()
	defer apiLis.Close()
	modelURL := model.URL()
	if *upstream != "" {
		modelURL = *upstream
	}
	frontURL := *front
	var proxy *envoyProcess
	var envoyDone <-chan struct{} // nil, never ready, without Envoy
	if *front == "" {
		// Envoy first, on a listener made for the server: Envoy connects to it on the first
		// request only, and the server's follow-up calls need Envoy's URL.
		proxy, err = startEnvoy(*envoyBin, *envoyYAML, grpcLis.Addr().String(), modelURL,
			map[string]string{e2e.APICluster: "http://" + apiLis.Addr().String()})
		if err != nil {
			return err
		}
		defer func() {
			if serr := proxy.Stop(); serr != nil {
				err = errors.Join(err, fmt.Errorf("stop envoy: %w\n%s", serr, proxy.Logs()))
			}
		}()
		frontURL, envoyDone = proxy.URL(), proxy.Done()
	}

	// The server, as test/e2e's Env.Serve wires it.
	cfg := e2e.DefaultConfig()
	cfg.Listen = grpcLis.Addr().String()
	cfg.ApiListen = proto.String(apiLis.Addr().String())
	cfg.Upstream = frontURL
	if *start != "" {
		if cfg.Sandbox.Local == nil {
			cfg.Sandbox.Local = &configv1.LocalSandbox{}
		}
		cfg.Sandbox.Local.Start = *start
	}
	if *maxTotal > 0 {
		cfg.Sandbox.MaxContainers = uint32(*maxTotal)
	}
	if *maxPerID > 0 {
		cfg.Sandbox.MaxContainersPerIdentity = uint32(*maxPerID)
	}
	if *uploads {
		cfg.AnthropicFiles = &configv1.AnthropicFiles{OwnUploads: true}
	}
	if *pause > 0 {
		cfg.Ptc = &configv1.Ptc{PauseTimeout: durationpb.New(*pause)}
	}
	config.ApplyDefaults(cfg)
	if err := config.Validate(cfg); err != nil {
		return fmt.Errorf("invalid configuration: %w", err)
	}
	svc, err := app.New(app.Options{Config: cfg, Log: log.Named("codeinterp")})
	if err != nil {
		return fmt.Errorf("new service: %w", err)
	}
	served := make(chan error, 1)
	go func() { served <- svc.Serve(grpcLis) }()
	apiServed := make(chan error, 1)
	go func() { apiServed <- svc.ServeAPI(apiLis) }()
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), stopGrace)
		defer cancel()
		if serr := svc.Shutdown(stopCtx); serr != nil {
			err = errors.Join(err, fmt.Errorf("stop the server: %w", serr))
		}
		if serr := <-served; serr != nil {
			err = errors.Join(err, fmt.Errorf("serve: %w", serr))
		}
		if serr := <-apiServed; serr != nil {
			err = errors.Join(err, fmt.Errorf("serve the Containers API: %w", serr))
		}
	}()

	line, err := json.Marshal(Ready{
		EnvoyURL: frontURL, ControlURL: "http://" + controlLis.Addr().String(),
		ModelURL: modelURL, ExtProcAddr: grpcLis.Addr().String(), APIAddr: apiLis.Addr().String(),
	})
	if err != nil {
		return fmt.Errorf("encode the ready line: %w", err)
	}
	if _, err := fmt.Fprintf(stdout, "%s\n", line); err != nil {
		return fmt.Errorf("write the ready line: %w", err)
	}
	log.Info("serving", zap.ByteString("ready", line))

	select {
	case <-ctx.Done():
		log.Info("stopping")
		return nil
	case <-envoyDone:
		return fmt.Errorf("envoy exited while serving:\n%s", proxy.Logs())
	case serr := <-served:
		served <- serr // for the deferred stop
		return fmt.Errorf("the server stopped serving: %v", serr)
	case serr := <-apiServed:
		apiServed <- serr // for the deferred stop
		return fmt.Errorf("the Containers API stopped serving: %v", serr)
	}
}

// listeners returns the server's listeners, ext_proc's and the Containers API's: inherited as
// descriptors 3 and 4 when inherited is set, else new ones on loopback.
func listeners(inherited bool) (grpcLis, apiLis net.Listener, err error) {
	if inherited {
		if grpcLis, err = fileListener(3, "ext_proc"); err != nil {
			return nil, nil, err
		}
		if apiLis, err = fileListener(4, "Containers API"); err != nil {
			_ = grpcLis.Close()
			return nil, nil, err
		}
		return grpcLis, apiLis, nil
	}
	if grpcLis, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		return nil, nil, fmt.Errorf("listen for the ext_proc server: %w", err)
	}
	if apiLis, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		_ = grpcLis.Close()
		return nil, nil, fmt.Errorf("listen for the Containers API: %w", err)
	}
	return grpcLis, apiLis, nil
}

// fileListener returns the listener inherited as descriptor fd; the descriptor itself is
// closed (the listener holds a copy).
func fileListener(fd uintptr, name string) (net.Listener, error) {
	f := os.NewFile(fd, name+" listener")
	if f == nil {
		return nil, fmt.Errorf("the %s listener: no descriptor %d", name, fd)
	}
	defer f.Close()
	l, err := net.FileListener(f)
	if err != nil {
		return nil, fmt.Errorf("the %s listener (descriptor %d): %w", name, fd, err)
	}
	return l, nil
}

// startEnvoy runs the Envoy binary (found as the e2e tests find it when bin is empty) with the
// bootstrap at path (envoy/envoy.yaml when empty) pointed at the ext_proc server and the model.
func startEnvoy(bin, path, extProcAddr, upstream string, clusters map[string]string) (*envoyProcess, error) {
	var err error
	if bin == "" {
		if bin, err = harness.EnvoyBinary(); err != nil {
			return nil, err
		}
	}
	if path == "" {
		if path, err = harness.ShippedConfigPath(); err != nil {
			return nil, err
		}
	}
	cfg, err := harness.LoadFilterConfig(path)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "codeinterp-stack-")
	if err != nil {
		return nil, fmt.Errorf("make envoy's directory: %w", err)
	}
	p, err := harness.LaunchReal(bin, cfg, extProcAddr, upstream, clusters, dir)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("start envoy: %w", err)
	}
	return &envoyProcess{RealProcess: p, dir: dir}, nil
}

// envoyProcess is Envoy and the directory of its files, removed when it stops.
type envoyProcess struct {
	*harness.RealProcess
	dir string
}

// Stop stops Envoy and removes its directory.
func (p *envoyProcess) Stop() error {
	err := p.RealProcess.Stop()
	if rerr := os.RemoveAll(p.dir); rerr != nil {
		err = errors.Join(err, fmt.Errorf("remove envoy's directory: %w", rerr))
	}
	return err
}

// newLogger returns a JSON logger at level writing to w, as cmd/extproc's.
func newLogger(level string, w io.Writer) (*zap.Logger, error) {
	var lvl zapcore.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log level: %w", err)
	}
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	return zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(enc), zapcore.AddSync(w), lvl)), nil
}

// leftovers returns the live processes descending from this one (Envoy, bubblewrap, a
// sandbox's init or Python, anything the code started), read from /proc; after a clean stop
// there are none.
func leftovers() ([]string, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("read /proc: %w", err)
	}
	type proc struct {
		pid  int
		desc string
	}
	children := map[int][]proc{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // gone meanwhile
		}
		// "pid (comm) state ppid ...": comm may hold spaces and parentheses; it ends at the last ')'.
		s := string(stat)
		end := strings.LastIndexByte(s, ')')
		fields := strings.Fields(s[end+1:])
		if end < 0 || len(fields) < 2 {
			continue
		}
		ppid, err := strconv.Atoi(fields[1])
		if err != nil {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		desc := fmt.Sprintf("pid %d: %s", pid, strings.TrimSpace(strings.ReplaceAll(string(cmdline), "\x00", " ")))
		children[ppid] = append(children[ppid], proc{pid: pid, desc: desc})
	}
	var out []string
	queue := []int{os.Getpid()}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		for _, c := range children[cur] {
			out = append(out, c.desc)
			queue = append(queue, c.pid)
		}
	}
	return out, nil
}
