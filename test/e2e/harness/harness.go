// Package harness plays Envoy for end-to-end tests: an HTTP/1.1 front door that runs one
// envoy.filters.http.ext_proc filter against a real ext_proc gRPC server and forwards to an
// upstream, following docs/envoy-rules.md message for message; where Envoy's behaviour
// matters, the code cites the section of that page it follows: §n for a section of its part
// one (the filter), FD §n for one of part two (FULL_DUPLEX_STREAMED). The twin tests
// (twin*_test.go) run every modelled rule through this package and a real Envoy 1.40
// ([StartReal]) and assert the same outcome on both; where they disagreed, this package was
// changed to do what Envoy 1.40 does (the code says "verified against Envoy 1.40" there).
//
// The filter's processing mode, timeouts, buffer limit and routes come from envoy/envoy.yaml
// ([ShippedConfig]), so the shipped config and the tests cannot drift; [Options] lets a test
// override the few knobs it needs (a short message timeout, a small buffer limit, ...).
//
// Modelled: BUFFERED, STREAMED and NONE body modes; FULL_DUPLEX_STREAMED for the response
// (docs/envoy-rules.md, part two), reached by a mode_override (on either headers
// answer), a per-route processing mode or the filter's own, and for the request as the
// filter's own (which, like a filter-level one for the response, makes Envoy ignore every
// mode_override, FD §5; the HTTP/1 codec hands the filter a body's end as an empty chunk of its
// own, which goes to the server as a message of its own): body chunks go to the server as
// they arrive, also while the headers answer is pending, without message_timeout; the
// response headers go on with the headers answer, or, if the whole body was in by then, with
// the first streamed_response; each streamed_response is injected at once; a normal body
// answer is spurious; fail-open ends once body bytes went to the server; mode_override;
// header mutations with mutation_rules; content-length rules (decided when the headers
// message is sent, so under the mode before a switch); CONTINUE_AND_REPLACE;
// ImmediateResponse; buffer limits; message_timeout and override_message_timeout;
// stream_idle_timeout; failure_mode_allow; status_on_error; spurious messages; the
// stream-close rules; per-route ExtProcPerRoute (disabled, processing mode,
// grpc_initial_metadata, failure_mode_allow); route prefix/path matches, prefix_rewrite,
// host_rewrite_literal and timeouts; local replies through the response path (§1.6).
//
// Not modelled (configs and mode_overrides using them are refused): FULL_DUPLEX_STREAMED for
// the request by a per-route mode or a mode_override (so also the one standalone
// mode_override Envoy 1.40 accepts; any other is spurious, as in Envoy), BUFFERED_PARTIAL, send_body_without_waiting_for_header_response,
// observability mode, attributes, forward rules, http_service. A streamed_immediate_response
// is taken as spurious, as before Envoy 1.37. Trailers are never sent: HTTP/1.1 test traffic
// has none.
//
// [Record.Downstream] lists every write to the client with its time and the ext_proc
// messages before it, so a test can check that a streamed response reached the client
// progressively.
//
// [StartReal] runs the same scenarios against a real Envoy when one is on PATH; [Fronts] and
// [EachFront] run a test function against both.
//
// A scenario test looks like this (the codeinterp server's follow-up calls go back through
// the front, so it starts after the front, on a listener made before):
//
//	func TestScenario(t *testing.T) {
//		model := fakemodel.New(t)
//		model.Enqueue("/v1/responses", fakemodel.JSON(fakemodel.Responses("m", fakemodel.Usage{}, fakemodel.Message("hi"))))
//		harness.EachFront(t, func(t *testing.T, start func(harness.Options) harness.Front) {
//			lis, _ := net.Listen("tcp", "127.0.0.1:0")
//			front := start(harness.Options{ExtProcAddr: lis.Addr().String(), Upstream: model.URL()})
//			// start the ext_proc server on lis with front.URL() as its upstream, then:
//			client := openai.NewClient(option.WithBaseURL(front.URL() + "/v1/"))
//			// ... call client.Responses.New and check the answer; with *harness.Envoy,
//			// Records() and Stats() show the ext_proc exchange.
//		})
//	}
package harness

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Options configures [Start] and [StartReal].
type Options struct {
	// Config is the ext_proc filter config. The zero value means the shipped envoy/envoy.yaml
	// ([ShippedConfig]). Start works on a copy; the caller's messages are not changed.
	Config FilterConfig
	// ExtProcAddr is the ext_proc server: "host:port" or "unix:///path". Required.
	ExtProcAddr string
	// Upstream is the base URL of the upstream (the fake model), e.g. "http://127.0.0.1:8080".
	// Every route's cluster goes there, but those of Clusters. Required.
	Upstream string
	// Clusters are the base URLs ("http://127.0.0.1:8081") of the clusters that do not go to
	// Upstream, by cluster name: codeinterp_api, the server's own Containers API.
	Clusters map[string]string
	// ExtProcReplicas are more ext_proc servers beside ExtProcAddr: [StartReal] puts them all
	// in the ext_proc cluster (health checked as envoy/envoy.yaml says). The harness ignores
	// them.
	ExtProcReplicas []string

	// Knobs overriding Config. Each applies only when set.

	// FailureModeAllow overrides failure_mode_allow.
	FailureModeAllow *bool
	// AllowModeOverride overrides allow_mode_override.
	AllowModeOverride *bool
	// ProcessingMode replaces processing_mode.
	ProcessingMode *extprocv3.ProcessingMode
	// MessageTimeout overrides message_timeout when > 0.
	MessageTimeout time.Duration
	// MaxMessageTimeout overrides max_message_timeout when > 0.
	MaxMessageTimeout time.Duration
	// BufferLimit overrides the per-stream buffer limit when > 0.
	BufferLimit int
	// StatusOnError overrides status_on_error when > 0.
	StatusOnError int
	// StreamIdleTimeout overrides the connection manager's stream_idle_timeout when > 0.
	StreamIdleTimeout time.Duration

	// Pool, when set, makes [StartReal] take a shared Envoy from the pool instead of starting
	// one for the test ([RealPool]). [Start] ignores it.
	Pool *RealPool

	// NoRecords stops the harness from keeping a [Record] per request ([Envoy.Records] then
	// returns none; [Envoy.Stats] still counts), for benchmarks with many requests.
	NoRecords bool

	// hooks lets this package's tests observe the event loop.
	hooks *testHooks
}

// testHooks are called on a filter's event loop.
type testHooks struct {
	// downstreamData runs after the filter handled a chunk of the client's body.
	downstreamData func(eos bool)
	// serverMessage runs after the filter handled a message from the server.
	serverMessage func(kind string)
}

// resolve applies the knobs to a copy of the config and checks that the result is a valid
// filter config the harness models.
func (o Options) resolve(t testing.TB) (FilterConfig, error) {
	t.Helper()
	cfg := o.Config
	if cfg.Filter == nil {
		cfg = ShippedConfig(t)
	} else {
		cfg.Filter = proto.Clone(cfg.Filter).(*extprocv3.ExternalProcessor)
		cfg.Routes = append([]Route(nil), cfg.Routes...)
		if cfg.MaxHeadersCount == 0 {
			cfg.MaxHeadersCount = defaultMaxHeadersCount
		}
		if cfg.MaxRequestHeadersKB == 0 {
			cfg.MaxRequestHeadersKB = defaultMaxHeadersKB
		}
		if cfg.BufferLimit == 0 {
			cfg.BufferLimit = defaultBufferLimit
		}
	}
	f := cfg.Filter
	if o.FailureModeAllow != nil {
		f.FailureModeAllow = *o.FailureModeAllow
	}
	if o.AllowModeOverride != nil {
		f.AllowModeOverride = *o.AllowModeOverride
	}
	if o.ProcessingMode != nil {
		f.ProcessingMode = proto.Clone(o.ProcessingMode).(*extprocv3.ProcessingMode)
	}
	if o.MessageTimeout > 0 {
		f.MessageTimeout = durationpb.New(o.MessageTimeout)
	}
	if o.MaxMessageTimeout > 0 {
		f.MaxMessageTimeout = durationpb.New(o.MaxMessageTimeout)
	}
	if o.StatusOnError > 0 {
		f.StatusOnError = &typev3.HttpStatus{Code: typev3.StatusCode(o.StatusOnError)}
	}
	if o.BufferLimit > 0 {
		cfg.BufferLimit = o.BufferLimit
	}
	if o.StreamIdleTimeout > 0 {
		cfg.StreamIdleTimeout = o.StreamIdleTimeout
	}
	if err := f.ValidateAll(); err != nil {
		return FilterConfig{}, fmt.Errorf("invalid ext_proc config: %w", err)
	}
	if err := checkTrailerModes(f.GetProcessingMode()); err != nil {
		return FilterConfig{}, fmt.Errorf("invalid ext_proc config: %w", err)
	}
	if err := notModelled(f, cfg.Routes); err != nil {
		return FilterConfig{}, err
	}
	return cfg, nil
}

// Envoy is a running harness front door. Its methods are safe for concurrent use.
type Envoy struct {
	t   testing.TB
	cfg FilterConfig
	// filter is cfg.Filter; the fields below are resolved from it.
	filter            *extprocv3.ExternalProcessor
	checker           checker
	limits            headerLimits
	messageTimeout    time.Duration
	maxMessageTimeout time.Duration
	statusOnError     int
	bufferLimit       int
	upstream          string
	clusters          map[string]string // Options.Clusters, without trailing slashes
	noRecords         bool
	hooks             *testHooks

	client     extprocsvc.ExternalProcessorClient
	httpClient *http.Client
	srv        *httptest.Server

	// mu guards the fields below; cond signals inflight changes.
	mu       sync.Mutex
	cond     *sync.Cond
	inflight int
	records  []Record
	stats    Stats
}

// Start starts an HTTP/1.1 front door on 127.0.0.1 playing Envoy with o's filter config. It
// fails the test if the config is invalid or not modelled. The front door, its gRPC
// connection and every goroutine it started are closed and waited for by t.Cleanup.
func Start(t testing.TB, o Options) *Envoy {
	t.Helper()
	e, err := newEnvoy(t, o)
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	return e
}

func newEnvoy(t testing.TB, o Options) (*Envoy, error) {
	cfg, err := o.resolve(t)
	if err != nil {
		return nil, err
	}
	if o.ExtProcAddr == "" || o.Upstream == "" {
		return nil, errors.New("options: ExtProcAddr and Upstream are required")
	}
	u, err := url.Parse(o.Upstream)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("options: upstream %q is not an http(s) base URL", o.Upstream)
	}
	for name, base := range o.Clusters {
		if u, err := url.Parse(base); err != nil || u.Scheme != "http" || u.Host == "" {
			return nil, fmt.Errorf("options: cluster %s: %q is not an http base URL", name, base)
		}
	}
	f := cfg.Filter
	chk, err := newChecker(f.GetMutationRules())
	if err != nil {
		return nil, fmt.Errorf("mutation_rules: %w", err)
	}
	e := &Envoy{
		t:                 t,
		cfg:               cfg,
		filter:            f,
		checker:           chk,
		limits:            headerLimits{count: cfg.MaxHeadersCount, kb: cfg.MaxRequestHeadersKB},
		messageTimeout:    defaultMessageTimeout,
		maxMessageTimeout: f.GetMaxMessageTimeout().AsDuration(),
		statusOnError:     http.StatusInternalServerError,
		bufferLimit:       cfg.BufferLimit,
		upstream:          strings.TrimSuffix(o.Upstream, "/"),
		clusters:          map[string]string{},
		noRecords:         o.NoRecords,
		hooks:             o.hooks,
	}
	for name, base := range o.Clusters {
		e.clusters[name] = strings.TrimSuffix(base, "/")
	}
	e.cond = sync.NewCond(&e.mu)
	if f.GetMessageTimeout() != nil {
		e.messageTimeout = f.GetMessageTimeout().AsDuration()
	}
	if c := f.GetStatusOnError().GetCode(); c != 0 {
		e.statusOnError = int(c)
	}
	// The side stream's :authority is the cluster name unless envoy_grpc.authority says
	// otherwise (§0); Envoy applies no receive limit by default.
	authority := f.GetGrpcService().GetEnvoyGrpc().GetAuthority()
	if authority == "" {
		authority = f.GetGrpcService().GetEnvoyGrpc().GetClusterName()
	}
	conn, err := grpc.NewClient(o.ExtProcAddr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithAuthority(authority),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(math.MaxInt32), grpc.MaxCallSendMsgSize(math.MaxInt32)))
	if err != nil {
		return nil, fmt.Errorf("dial ext_proc server %s: %w", o.ExtProcAddr, err)
	}
	e.client = extprocsvc.NewExternalProcessorClient(conn)
	transport := &http.Transport{
		// Pass the upstream's bytes through as they are, as Envoy does.
		DisableCompression:  true,
		MaxIdleConnsPerHost: 16,
	}
	e.httpClient = &http.Client{
		Transport: transport,
		// Envoy's router does not follow redirects.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	e.srv = httptest.NewServer(e)
	t.Cleanup(func() {
		// Close waits for the handlers, which wait for their goroutines.
		e.srv.Close()
		transport.CloseIdleConnections()
		_ = conn.Close()
	})
	return e, nil
}

// URL is the front door's base URL, e.g. "http://127.0.0.1:41234".
func (e *Envoy) URL() string { return e.srv.URL }

// Name is "harness", as a [Front].
func (e *Envoy) Name() string { return "harness" }

// Client returns an HTTP client for the front door; its connections are closed with it.
func (e *Envoy) Client() *http.Client { return e.srv.Client() }

// Config returns the filter config in force (after the Options knobs).
func (e *Envoy) Config() FilterConfig { return e.cfg }

// Records waits until no request is in flight, then returns a copy of the record of every
// request handled so far, in the order they finished.
func (e *Envoy) Records() []Record {
	e.mu.Lock()
	defer e.mu.Unlock()
	for e.inflight > 0 {
		e.cond.Wait()
	}
	out := make([]Record, len(e.records))
	for i, r := range e.records {
		out[i] = r.clone()
	}
	return out
}

// Stats waits like [Envoy.Records], then returns the counters summed over every request.
func (e *Envoy) Stats() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	for e.inflight > 0 {
		e.cond.Wait()
	}
	return e.stats
}

// ServeHTTP handles one client request: one filter, run to its end.
func (e *Envoy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	e.mu.Lock()
	e.inflight++
	e.mu.Unlock()

	f := newFilter(e, w, r)
	f.run()

	e.mu.Lock()
	if !e.noRecords {
		e.records = append(e.records, f.rec)
	}
	e.stats.add(f.stats)
	e.inflight--
	e.cond.Broadcast()
	e.mu.Unlock()
	if f.rec.Reset {
		// Reset the downstream stream: the client sees the connection close.
		panic(http.ErrAbortHandler)
	}
	if f.unfinished {
		f.closeConnection()
	}
}

// upstreamOf returns the base URL of the cluster: Options.Clusters', or the upstream.
func (e *Envoy) upstreamOf(cluster string) string {
	if base, ok := e.clusters[cluster]; ok {
		return base
	}
	return e.upstream
}
