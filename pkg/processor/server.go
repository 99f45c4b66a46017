// Package processor is the Envoy ext_proc server: the only code that touches ext_proc messages. It
// runs one Recv/Send loop per stream, keeps per-stream state, and answers each phase (request
// headers, request body, response headers, response body, trailers) as Envoy expects (see
// docs/architecture.md). A request with the code tool is admitted by pkg/admission; its answer
// goes out through one delivery chosen at its response headers (buffered, a switched stream, a
// configured full-duplex body, or pass-through), which hands it to the loop engine.
package processor

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/codeinterp/codeinterp/pkg/admission"
	"github.com/codeinterp/codeinterp/pkg/loop"
	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/telemetry"
)

// Looper runs the agentic loop of one request. *loop.Engine implements it.
type Looper interface {
	Run(ctx context.Context, r loop.Request) loop.Response
}

// Route is what the server does on the requests of one route, as the operator configured it
// (a profile of the configuration, which internal/app maps onto it): the loop's bounds and
// where its follow-ups go, how callers are identified, how a streamed answer is delivered.
type Route struct {
	// Name is the profile's name ("" for the default).
	Name string
	// Disabled reports whether the route's requests pass through untouched.
	Disabled bool
	// FunctionName and FunctionDescription are the function tool the model calls for code.
	FunctionName, FunctionDescription string
	// IdentityHeader, if set, is the header an authentication filter in front sets to the
	// caller's identity; else the credential identifies the caller.
	IdentityHeader string
	// SessionHeader, if set, is the header that names a request's session container.
	SessionHeader string
	// AllowAnonymousSessions reports whether a caller without an identity may name a session.
	AllowAnonymousSessions bool
	// ForwardHeaders are the request headers, besides the credentials, that follow-up calls
	// carry: exact names, or a prefix ending in "*".
	ForwardHeaders []string
	// Upstream is the base URL of the model API the follow-ups go to.
	Upstream string
	// LoopDeadline bounds a loop, of which LoopMargin is kept for sending the answer: the loop
	// runs for LoopDeadline-LoopMargin, and Envoy's message timer is extended to LoopDeadline.
	LoopDeadline, LoopMargin time.Duration
	// MaxRounds, RunTimeout, OutputLimit, MaxOutputBytes, MaxImages and MaxCallsPerTurn are
	// the loop's bounds (see [loop.Request]; zero is the loop's default).
	MaxRounds       int
	RunTimeout      time.Duration
	OutputLimit     int
	MaxOutputBytes  int
	MaxImages       int
	MaxCallsPerTurn int
	// Progressive reports whether a streaming answer is switched to FULL_DUPLEX_STREAMED and
	// sent as it happens; else it is replayed once the loop is over.
	Progressive bool
	// KeepAlive is how long a progressive stream may send nothing before it sends an SSE
	// comment; zero means 15s.
	KeepAlive time.Duration
	// MaxResponseBytes bounds one upstream answer.
	MaxResponseBytes int64
	// MaxAnswerBytes is the largest answer body the server can send Envoy (its gRPC send
	// limit less the rest of the message).
	MaxAnswerBytes int
}

// Options are the dependencies of a Server.
type Options struct {
	// Routes are the routes' settings by profile name; the default route has the name "" and
	// is required.
	Routes map[string]*Route
	// ProfileKey is the gRPC initial metadata key whose value names a stream's route (set per
	// route in Envoy with ExtProcPerRoute overrides.grpc_initial_metadata).
	ProfileKey string
	// PathPrefixes are the prefixes the surfaces' paths are also served under ("/openai").
	PathPrefixes []string
	// CredentialHeaders are the headers a caller's credential is read from (its identity) and
	// that the loop's follow-up calls carry; nil means the identity package's defaults.
	CredentialHeaders []string
	// MaxRequestBytes bounds a request body collected from FULL_DUPLEX_STREAMED chunks
	// (max_request_bytes, the gRPC receive limit that bounds a BUFFERED one). Required.
	MaxRequestBytes int64
	// Loop runs the loop. Required.
	Loop Looper
	// Admission admits the requests that have the code tool, and continues earlier answers.
	// Required.
	Admission *admission.Admission
	// Surfaces are the API surfaces served, each on its paths (under every path prefix).
	// Required.
	Surfaces []schema.Surface
	// Secret keys the follow-up signatures and identity hashes. If empty, a random secret is made,
	// which is right for a single server per Envoy.
	Secret []byte
	// Log receives the server's logs. If nil, nothing is logged.
	Log *zap.Logger
	// Metrics, if set, records the server's metrics.
	Metrics *Metrics
	// Now, if set, replaces time.Now (a test seam).
	Now func() time.Time
	// Background bounds the background responses the server runs (see background.go).
	Background Background
	// Telemetry, if set, continues the trace Envoy's tracer hands each stream (its traceparent
	// in the stream's gRPC metadata): the loop's spans become children of Envoy's ext_proc
	// span. Nil is off.
	Telemetry *telemetry.GenAI
	// Accepted, if set, hears of every identity whose model call the upstream answered with a
	// 2xx (see [Acceptances]).
	Accepted Acceptances
}

// Server is the ext_proc service. It is safe for concurrent use: every stream has its own state.
// It tracks its live streams: [Server.Drain] waits for them to end, [Server.Close] ends them.
type Server struct {
	extprocv3.UnimplementedExternalProcessorServer

	routes     map[string]*Route
	profileKey string
	paths      map[string]schema.Surface
	loop       Looper
	admission  *admission.Admission
	signer     signer
	log        *zap.Logger
	metrics    *Metrics
	now        func() time.Time
	tel        *telemetry.GenAI
	accepted   Acceptances
	bg         *runner
	// maxRequestBody bounds a request body collected from FULL_DUPLEX_STREAMED chunks
	// (max_request_bytes, the gRPC receive limit that bounds a BUFFERED one).
	maxRequestBody int64

	// mu guards the fields below.
	mu     sync.Mutex
	closed bool                     // Close was called: new streams are refused
	live   map[*liveStream]struct{} // streams whose Process has not returned
	idle   chan struct{}            // closed when live becomes empty; nil while nobody waits
}

// liveStream is one stream in Process, as the Server tracks it.
type liveStream struct {
	cancel context.CancelCauseFunc
}

// ErrShuttingDown is the cause of the context of a stream that [Server.Close] ended.
var ErrShuttingDown = errors.New("codeinterp is shutting down")

var _ extprocv3.ExternalProcessorServer = (*Server)(nil)

// New returns a Server for o.
func New(o Options) (*Server, error) {
	if o.Routes[""] == nil || o.MaxRequestBytes <= 0 || o.Loop == nil || o.Admission == nil || len(o.Surfaces) == 0 {
		return nil, errors.New("new processor: the default route, MaxRequestBytes, Loop, Admission and Surfaces are required")
	}
	paths, err := servedPaths(o.Surfaces, o.PathPrefixes)
	if err != nil {
		return nil, fmt.Errorf("new processor: %w", err)
	}
	secret := o.Secret
	if len(secret) == 0 {
		secret = make([]byte, 32)
		if _, err := rand.Read(secret); err != nil {
			return nil, fmt.Errorf("new processor: make secret: %w", err)
		}
	}
	log := o.Log
	if log == nil {
		log = zap.NewNop()
	}
	now := o.Now
	if now == nil {
		now = time.Now
	}
	metrics := o.Metrics
	if metrics == nil {
		metrics = NewMetrics()
	}
	return &Server{
		routes:     o.Routes,
		profileKey: o.ProfileKey,
		paths:      paths,
		loop:       o.Loop,
		admission:  o.Admission,
		signer:     newSigner(secret, o.CredentialHeaders),
		log:        log.Named("processor"),
		metrics:    metrics,
		now:        now,
		tel:        o.Telemetry,
		accepted:   o.Accepted,
		live:       map[*liveStream]struct{}{},
		bg:         newRunner(o.Background, log),

		maxRequestBody: o.MaxRequestBytes,
	}, nil
}

// Process serves one ext_proc stream, that is one HTTP request passing through Envoy. It returns
// when Envoy closes the stream; io.EOF and cancellation are a normal end. A stream that
// [Server.Close] ends (or that opens after it) fails with codes.Unavailable, so Envoy fails the
// request (failure_mode_allow false) instead of taking a half-done loop for an answer.
func (s *Server) Process(stream extprocv3.ExternalProcessor_ProcessServer) error {
	ctx, cancel := context.WithCancelCause(s.tel.FromIncoming(stream.Context()))
	defer cancel(nil)
	ls := &liveStream{cancel: cancel}
	if !s.track(ls) {
		return status.Error(codes.Unavailable, ErrShuttingDown.Error())
	}
	defer s.untrack(ls)
	st := &streamState{
		srv: s,
		ctx: ctx,
		send: func(r *extprocv3.ProcessingResponse) error {
			// Nothing a loop cut short by Close returns goes to Envoy.
			if errors.Is(context.Cause(ctx), ErrShuttingDown) {
				return ErrShuttingDown
			}
			return stream.Send(r)
		},
		route: s.routeFor(ctx),
	}
	defer st.finish()
	for {
		req, err := stream.Recv()
		if errors.Is(context.Cause(ctx), ErrShuttingDown) {
			return status.Error(codes.Unavailable, ErrShuttingDown.Error())
		}
		if err != nil {
			if errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled || ctx.Err() != nil {
				return nil
			}
			return status.Errorf(status.Code(err), "receive: %v", err)
		}
		if err := st.handleSafely(req); err != nil {
			if errors.Is(context.Cause(ctx), ErrShuttingDown) {
				return status.Error(codes.Unavailable, ErrShuttingDown.Error())
			}
			if ctx.Err() != nil {
				return nil
			}
			st.logger().Warn("stream failed", zap.Error(err))
			return status.Errorf(codes.Internal, "%v", err)
		}
	}
}

// track adds ls to the live streams; it reports false, adding nothing, after Close.
func (s *Server) track(ls *liveStream) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.live[ls] = struct{}{}
	return true
}

// untrack removes ls from the live streams, waking the waiters when none is left.
func (s *Server) untrack(ls *liveStream) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.live, ls)
	if len(s.live) == 0 && s.idle != nil {
		close(s.idle)
		s.idle = nil
	}
}

// Live returns the number of streams being served.
func (s *Server) Live() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.live)
}

// Drain blocks until no stream is live, or until ctx is done (it then returns ctx's error).
// Streams that open meanwhile are served and waited for too: a loop's follow-up calls come
// back through Envoy as streams of their own, so refusing them would fail the loops Drain is
// letting finish.
func (s *Server) Drain(ctx context.Context) error {
	for {
		s.mu.Lock()
		if len(s.live) == 0 {
			s.mu.Unlock()
			return nil
		}
		if s.idle == nil {
			s.idle = make(chan struct{})
		}
		idle := s.idle
		s.mu.Unlock()
		select {
		case <-idle:
		case <-ctx.Done():
			return fmt.Errorf("drain streams: %w", ctx.Err())
		}
	}
}

// Close refuses new streams and ends every live one: its context is cancelled with
// [ErrShuttingDown] (the loop stops, its sandbox run is interrupted, its ephemeral container is
// deleted) and it fails with codes.Unavailable. It ends the background responses as
// [Server.StopBackground] does. It does not wait: a stream blocked receiving
// from Envoy returns only when its gRPC transport closes (grpc.Server.Stop); [Server.Drain]
// then waits for every stream to return. Idempotent.
func (s *Server) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for ls := range s.live {
		ls.cancel(ErrShuttingDown)
	}
	// The background responses end too (StopBackground waits for them).
	s.bg.halt()
}

// routeFor returns the route named by the stream's gRPC initial metadata (set per route in
// Envoy with ExtProcPerRoute overrides.grpc_initial_metadata), or the default route.
func (s *Server) routeFor(ctx context.Context) *Route {
	if s.profileKey != "" {
		md, _ := metadata.FromIncomingContext(ctx)
		for _, name := range md.Get(s.profileKey) {
			if r, ok := s.routes[name]; ok {
				return r
			}
			s.log.Warn("unknown profile named by route; using the default", zap.String("profile", name))
		}
	}
	return s.routes[""]
}

// servedPaths maps every path a surface serves, under every prefix, to the surface. Two
// surfaces may not serve the same path.
func servedPaths(surfaces []schema.Surface, prefixes []string) (map[string]schema.Surface, error) {
	out := make(map[string]schema.Surface)
	for _, prefix := range append([]string{""}, prefixes...) {
		for _, sf := range surfaces {
			for _, p := range sf.Paths() {
				path := strings.TrimSuffix(prefix, "/") + p
				if other, ok := out[path]; ok && other != sf {
					return nil, fmt.Errorf("surfaces %s and %s both serve %s", other.Name(), sf.Name(), path)
				}
				out[path] = sf
			}
		}
	}
	return out, nil
}
