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
	"strings"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	configv1 "github.com/codeinterp/codeinterp/api/codeinterp/config/v1"
	"github.com/codeinterp/codeinterp/pkg/config"
	"github.com/codeinterp/codeinterp/pkg/loop"
	"github.com/codeinterp/codeinterp/pkg/schema"
)

// Looper runs the agentic loop of one request. *loop.Engine implements it.
type Looper interface {
	Run(ctx context.Context, r loop.Request) loop.Response
}

// Containers tells whether a container id was issued to an identity. *sandbox.Manager implements it.
type Containers interface {
	Known(identity, containerID string) bool
}

// Options are the dependencies of a Server.
type Options struct {
	// Config is the server configuration with defaults applied and validated. Required.
	Config *configv1.Config
	// Loop runs the loop. Required.
	Loop Looper
	// Containers checks container ids named by requests. Required.
	Containers Containers
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
	pending    *pendingCalls
}

var _ extprocv3.ExternalProcessorServer = (*Server)(nil)

// New returns a Server for o.
func New(o Options) (*Server, error) {
	if o.Config == nil || o.Loop == nil || o.Containers == nil {
		return nil, errors.New("new processor: Config, Loop and Containers are required")
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
		profiles:   config.Profiles(o.Config),
		profileKey: o.Config.GetProfileMetadataKey(),
		upstream:   o.Config.GetUpstream(),
		paths:      servedPaths(o.Config.GetPathPrefixes()),
		loop:       o.Loop,
		containers: o.Containers,
		signer:     newSigner(secret),
		log:        log.Named("processor"),
		metrics:    metrics,
		now:        now,
		pending:    newPendingCalls(now),
	}, nil
}

// Process serves one ext_proc stream, that is one HTTP request passing through Envoy. It returns
// when Envoy closes the stream; io.EOF and cancellation are a normal end.
func (s *Server) Process(stream extprocv3.ExternalProcessor_ProcessServer) error {
	ctx := stream.Context()
	st := &streamState{
		srv:     s,
		ctx:     ctx,
		send:    stream.Send,
		profile: s.profileFor(ctx),
	}
	defer st.finish()
	for {
		req, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled || ctx.Err() != nil {
				return nil
			}
			return status.Errorf(status.Code(err), "receive: %v", err)
		}
		if err := st.handle(req); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			st.logger().Warn("stream failed", zap.Error(err))
			return status.Errorf(codes.Internal, "%v", err)
		}
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

// servedPaths maps every served path, under every prefix, to its API surface.
func servedPaths(prefixes []string) map[string]schema.Surface {
	base := map[string]schema.Surface{
		"/v1/responses":        schema.Responses,
		"/v1/chat/completions": schema.Chat,
	}
	out := make(map[string]schema.Surface, len(base)*(len(prefixes)+1))
	for _, prefix := range append([]string{""}, prefixes...) {
		for p, sp := range base {
			out[strings.TrimSuffix(prefix, "/")+p] = sp
		}
	}
	return out
}
