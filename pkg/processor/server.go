// Package processor is the Envoy ext_proc server: the only code that touches ext_proc messages. It
// runs one Recv/Send loop per stream, keeps per-stream state, answers each phase (request headers,
// request body, response headers, response body) as reference/envoy-ext-proc.md says Envoy expects,
// and hands the response phase of a code_interpreter request to the loop engine.
package processor

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"sync"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	configv1 "github.com/codeinterp/codeinterp/api/codeinterp/config/v1"
	"github.com/codeinterp/codeinterp/pkg/config"
	"github.com/codeinterp/codeinterp/pkg/files"
	"github.com/codeinterp/codeinterp/pkg/loop"
	"github.com/codeinterp/codeinterp/pkg/sandbox"
	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/store"
)

// Looper runs the agentic loop of one request. *loop.Engine implements it.
type Looper interface {
	Run(ctx context.Context, r loop.Request) loop.Response
}

// Containers tells whether a container id was issued to an identity, and whether a container
// of a spec may be created. *sandbox.Manager implements it.
type Containers interface {
	// Known reports whether containerID was issued to identity and is alive.
	Known(identity, containerID string) bool
	// Container returns the container id of identity: sandbox.ErrUnknownContainer when it
	// was not issued to identity; an expired one is shown with sandbox.StatusExpired (or
	// fails with sandbox.ErrExpiredContainer).
	Container(ctx context.Context, identity, id string) (sandbox.ContainerInfo, error)
	// CheckSpec returns an error matching sandbox.ErrInvalidSpec for a spec no container may
	// have (a memory limit above the operator's cap).
	CheckSpec(spec sandbox.Spec) error
}

// Options are the dependencies of a Server.
type Options struct {
	// Config is the server configuration with defaults applied and validated. Required.
	Config *configv1.Config
	// Loop runs the loop. Required.
	Loop Looper
	// Containers checks container ids named by requests. Required.
	Containers Containers
	// Surfaces are the API surfaces served, each on its paths (under every configured path
	// prefix). Required.
	Surfaces []schema.Surface
	// Pending keeps the calls an answer left out for the request that continues from it.
	// Required.
	Pending store.Continuations
	// FilesClient sends the calls to the upstream's Files API that read the files a request's
	// code_interpreter tool names (container.file_ids). If nil, the files package's own
	// client, which follows no redirect.
	FilesClient files.Doer
	// NewFiles, if set, returns the Files API at a base URL instead of a *files.API (a test
	// seam).
	NewFiles func(base string) Files
	// Secret keys the follow-up signatures and identity hashes. If empty, a random secret is made,
	// which is right for a single server per Envoy.
	Secret []byte
	// Log receives the server's logs. If nil, nothing is logged.
	Log *zap.Logger
	// Metrics, if set, records the server's metrics.
	Metrics *Metrics
	// Now, if set, replaces time.Now (a test seam).
	Now func() time.Time
}

// Server is the ext_proc service. It is safe for concurrent use: every stream has its own state.
// It tracks its live streams: [Server.Drain] waits for them to end, [Server.Close] ends them.
type Server struct {
	extprocv3.UnimplementedExternalProcessorServer

	profiles   map[string]*config.Profile
	profileKey string
	upstream   string
	paths      map[string]schema.Surface
	loop       Looper
	containers Containers
	signer     signer
	log        *zap.Logger
	metrics    *Metrics
	now        func() time.Time
	pending    store.Continuations
	files      func(base string) Files
	// maxInputFile bounds each file of a tool's container.file_ids (max_upload_bytes, as
	// for the Containers API's uploads).
	maxInputFile int64
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
	if o.Config == nil || o.Loop == nil || o.Containers == nil || len(o.Surfaces) == 0 || o.Pending == nil {
		return nil, errors.New("new processor: Config, Loop, Containers, Surfaces and Pending are required")
	}
	paths, err := servedPaths(o.Surfaces, o.Config.GetPathPrefixes())
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
	newFiles := o.NewFiles
	if newFiles == nil {
		newFiles = defaultFiles(o.FilesClient)
	}
	metrics := o.Metrics
	if metrics == nil {
		metrics = NewMetrics()
	}
	return &Server{
		profiles:   config.Profiles(o.Config),
		profileKey: o.Config.GetProfileMetadataKey(),
		upstream:   o.Config.GetUpstream(),
		paths:      paths,
		loop:       o.Loop,
		containers: o.Containers,
		signer:     newSigner(secret),
		log:        log.Named("processor"),
		metrics:    metrics,
		now:        now,
		pending:    o.Pending,
		files:      newFiles,
		live:       map[*liveStream]struct{}{},

		maxInputFile:   int64(min(o.Config.GetMaxUploadBytes(), math.MaxInt64)),
		maxRequestBody: int64(min(o.Config.GetMaxRequestBytes(), math.MaxInt64)),
	}, nil
}

// Process serves one ext_proc stream, that is one HTTP request passing through Envoy. It returns
// when Envoy closes the stream; io.EOF and cancellation are a normal end. A stream that
// [Server.Close] ends (or that opens after it) fails with codes.Unavailable, so Envoy fails the
// request (failure_mode_allow false) instead of taking a half-done loop for an answer.
func (s *Server) Process(stream extprocv3.ExternalProcessor_ProcessServer) error {
	ctx, cancel := context.WithCancelCause(stream.Context())
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
		profile: s.profileFor(ctx),
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
// deleted) and it fails with codes.Unavailable. It does not wait: a stream blocked receiving
// from Envoy returns only when its gRPC transport closes (grpc.Server.Stop); [Server.Drain]
// then waits for every stream to return. Idempotent.
func (s *Server) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for ls := range s.live {
		ls.cancel(ErrShuttingDown)
	}
}

// profileFor returns the profile named by the stream's gRPC initial metadata (set per route in
// Envoy with ExtProcPerRoute overrides.grpc_initial_metadata), or the default profile.
func (s *Server) profileFor(ctx context.Context) *config.Profile {
	md, _ := metadata.FromIncomingContext(ctx)
	for _, name := range md.Get(s.profileKey) {
		if p, ok := s.profiles[name]; ok {
			return p
		}
		s.log.Warn("unknown profile named by route; using the default", zap.String("profile", name))
	}
	return s.profiles[""]
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
