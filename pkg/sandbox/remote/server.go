package remote

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"

	sandboxv1 "github.com/codeinterp/codeinterp/api/codeinterp/sandbox/v1"
	"github.com/codeinterp/codeinterp/pkg/sandbox"
)

// ServerOptions configures a [Server]. Secret is required; the zero value of every other
// field is its default.
type ServerOptions struct {
	// Secret is the deployment's shared secret, at least MinSecretBytes long: every call
	// must carry it.
	Secret []byte
	// TLS, if set, serves TLS (mutual, with a CAFile).
	TLS TLSFiles
	// MaxMessageBytes bounds a message either way. Default DefaultMaxMessageBytes.
	MaxMessageBytes int
	// ChunkBytes is the size of the chunks a download is sent in. Default DefaultChunkBytes
	// (at most MaxChunkBytes).
	ChunkBytes int
	// MaxConcurrentStreams bounds the streams of one connection. Default
	// DefaultMaxConcurrentStreams.
	MaxConcurrentStreams uint32
	// Keepalive and KeepaliveTimeout: see DefaultKeepalive.
	Keepalive, KeepaliveTimeout time.Duration
	// TracerProvider makes a span of each call served, a child of the caller's span (the W3C
	// trace context it sent) so that the node's work joins the caller's trace; a call without
	// the secret gets a new trace, linked to what it sent. If nil, no span is made, and the
	// caller's trace context is still what the Service's calls see in their ctx.
	TracerProvider trace.TracerProvider
	// Log receives the refused calls (never the secret) and the server's failures. If nil,
	// nothing is logged.
	Log *zap.Logger
}

// Server serves a [sandbox.Service] to the other replicas. Serve and Shutdown may be called
// from any goroutine; every goroutine it starts ends before Shutdown returns.
type Server struct {
	svc    sandbox.Service
	o      ServerOptions
	log    *zap.Logger
	secret [sha256.Size]byte
	gs     *grpc.Server

	// quit is closed by Shutdown: the leases end.
	quit     chan struct{}
	quitOnce sync.Once
	// wg counts the receivers of the Acquire streams, which end with their streams.
	wg sync.WaitGroup

	// mu guards leases.
	mu     sync.Mutex
	leases map[string]*heldLease
}

// handlers are the Server's RPCs (not exported: the Server's API is Serve and Shutdown).
type handlers struct {
	sandboxv1.UnimplementedSandboxServiceServer
	*Server
}

var _ sandboxv1.SandboxServiceServer = handlers{}

// heldLease is a lease an Acquire stream holds.
type heldLease struct {
	// mu serializes the lease's calls (a Lease is not for concurrent use) and its release,
	// which waits for a call in progress.
	mu       sync.Mutex
	l        *sandbox.Lease
	released bool
}

// errLeaseGone is the error of a call on a lease whose holder is gone: its stream ended, so
// the lease was released; as far as its holder can tell, the container is lost.
var errLeaseGone = fmt.Errorf("%w: the sandbox lease ended", sandbox.ErrLost)

// NewServer returns a Server of svc. It fails when the secret is too short or the TLS files
// cannot be loaded.
func NewServer(svc sandbox.Service, o ServerOptions) (*Server, error) {
	if err := checkSecret(o.Secret); err != nil {
		return nil, err
	}
	if o.MaxMessageBytes <= 0 {
		o.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if o.ChunkBytes <= 0 || o.ChunkBytes > MaxChunkBytes {
		o.ChunkBytes = DefaultChunkBytes
	}
	if o.MaxConcurrentStreams == 0 {
		o.MaxConcurrentStreams = DefaultMaxConcurrentStreams
	}
	if o.Keepalive <= 0 {
		o.Keepalive = DefaultKeepalive
	}
	if o.KeepaliveTimeout <= 0 {
		o.KeepaliveTimeout = DefaultKeepaliveTimeout
	}
	log := o.Log
	if log == nil {
		log = zap.NewNop()
	}
	s := &Server{
		svc: svc, o: o, log: log.Named("sandbox_service"),
		secret: sha256.Sum256(o.Secret), leases: map[string]*heldLease{}, quit: make(chan struct{}),
	}
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(o.MaxMessageBytes),
		grpc.MaxSendMsgSize(o.MaxMessageBytes),
		grpc.MaxConcurrentStreams(o.MaxConcurrentStreams),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: o.Keepalive, Timeout: o.KeepaliveTimeout}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: minPingInterval, PermitWithoutStream: true}),
		grpc.UnaryInterceptor(s.authUnary),
		grpc.StreamInterceptor(s.authStream),
		grpc.StatsHandler(otelgrpc.NewServerHandler(append(otelOptions(o.TracerProvider),
			otelgrpc.WithPublicEndpointFn(func(ctx context.Context, _ *stats.RPCTagInfo) bool { return !s.carriesSecret(ctx) }))...)),
	}
	if o.TLS.enabled() {
		tc, err := o.TLS.config(true)
		if err != nil {
			return nil, fmt.Errorf("sandbox service TLS: %w", err)
		}
		opts = append(opts, grpc.Creds(credentials.NewTLS(tc)))
	}
	s.gs = grpc.NewServer(opts...)
	sandboxv1.RegisterSandboxServiceServer(s.gs, handlers{Server: s})
	return s, nil
}

// Serve serves on l until Shutdown; it returns nil after Shutdown, and l's failure otherwise.
func (s *Server) Serve(l net.Listener) error {
	if err := s.gs.Serve(l); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return err
	}
	return nil
}

// Shutdown stops accepting calls, ends the leases held (their holders' next runs fail
// with ErrLost) once no call of theirs is in progress, and waits for the calls in progress
// (runs, uploads, downloads, …) until ctx is done; then it closes every connection, ending
// the calls left, and returns ctx's error. The service itself is not closed.
func (s *Server) Shutdown(ctx context.Context) error {
	s.quitOnce.Do(func() { close(s.quit) })
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		s.gs.GracefulStop()
		close(done)
	})
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		s.gs.Stop()
		err = ctx.Err()
	}
	wg.Wait()
	s.wg.Wait() // no Acquire runs any more: none adds to wg
	return err
}

// authenticated returns an Unauthenticated status unless ctx's call carries the secret; a
// refused call is logged with its method and peer, never what it carried.
func (s *Server) authenticated(ctx context.Context, method string) error {
	if s.carriesSecret(ctx) {
		return nil
	}
	addr := ""
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		addr = p.Addr.String()
	}
	s.log.Warn("sandbox service call refused: no valid shared secret", zap.String("method", method), zap.String("peer", addr))
	return status.Error(codes.Unauthenticated, "the sandbox service needs the deployment's shared secret")
}

// carriesSecret reports whether ctx's call carries the secret.
func (s *Server) carriesSecret(ctx context.Context) bool {
	md, _ := metadata.FromIncomingContext(ctx)
	v := md.Get(secretHeader)
	return len(v) == 1 && secretMatches(v[0], s.secret)
}

func (s *Server) authUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if err := s.authenticated(ctx, info.FullMethod); err != nil {
		return nil, err
	}
	return h(ctx, req)
}

func (s *Server) authStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if err := s.authenticated(ss.Context(), info.FullMethod); err != nil {
		return err
	}
	return h(srv, ss)
}

// Acquire holds a lease while the stream is open.
func (s handlers) Acquire(st grpc.BidiStreamingServer[sandboxv1.AcquireRequest, sandboxv1.AcquireResponse]) error {
	req, err := st.Recv()
	if err != nil {
		return err
	}
	l, err := s.svc.Acquire(st.Context(), sandbox.AcquireRequest{
		Identity: req.GetIdentity(), Session: req.GetSession(), ContainerID: req.GetContainerId(), Spec: specOf(req.GetSpec()),
		Hibernate: req.GetHibernate(), IDPrefix: req.GetIdPrefix(),
	})
	if err != nil {
		return statusError(err)
	}
	hl := &heldLease{l: l}
	id := leaseID()
	s.mu.Lock()
	s.leases[id] = hl
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.leases, id)
		s.mu.Unlock()
		hl.mu.Lock()
		hl.released = true
		hl.l.Release()
		hl.mu.Unlock()
	}()
	if err := st.Send(&sandboxv1.AcquireResponse{LeaseId: id, ContainerId: l.ContainerID(), Info: leaseInfoProto(l.Info())}); err != nil {
		return err
	}
	// The client sends nothing more: it closes its side to release the lease. Its
	// cancelling, or its connection dying, ends the stream too; so does Shutdown (once a call
	// in progress on the lease is over: the release waits for it).
	ended := make(chan error, 1)
	s.wg.Go(func() {
		for {
			if _, err := st.Recv(); err != nil {
				ended <- err
				return
			}
		}
	})
	select {
	case err := <-ended:
		if errors.Is(err, io.EOF) {
			return nil
		}
		return err
	case <-s.quit:
		return status.Error(codes.Unavailable, "the sandbox node is shutting down")
	}
}

// lease returns the held lease id, locked; the caller unlocks it.
func (s *Server) lease(id string) (*heldLease, error) {
	s.mu.Lock()
	hl := s.leases[id]
	s.mu.Unlock()
	if hl == nil {
		return nil, errLeaseGone
	}
	hl.mu.Lock()
	if hl.released {
		hl.mu.Unlock()
		return nil, errLeaseGone
	}
	return hl, nil
}

// Run runs code on a lease. Its header is sent first, so that a client whose connection
// fails later knows the run reached the node; its trailer names the lease's container after
// the run, also when the answer fails to go out (a Result beyond MaxMessageBytes). A run that
// pauses for the client's tools answers with its calls; the pause, and the timer that abandons
// it, stay on this node with the container.
func (s handlers) Run(ctx context.Context, req *sandboxv1.RunRequest) (*sandboxv1.RunResponse, error) {
	return s.onLease(ctx, req.GetLeaseId(), req.GetDeadlineNanos(), "run", func(ctx context.Context, l *sandbox.Lease) (sandbox.Result, error) {
		return l.Run(ctx, req.GetCode(), time.Duration(req.GetTimeoutNanos()))
	})
}

// Resume resumes the paused run of a lease's container, as Run runs code: header first, the
// lease's container in the trailer.
func (s handlers) Resume(ctx context.Context, req *sandboxv1.ResumeRequest) (*sandboxv1.ResumeResponse, error) {
	resp, err := s.onLease(ctx, req.GetLeaseId(), req.GetDeadlineNanos(), "resume", func(ctx context.Context, l *sandbox.Lease) (sandbox.Result, error) {
		return l.Resume(ctx, toolResultsOf(req.GetResults()), time.Duration(req.GetTimeoutNanos()))
	})
	if err != nil {
		return nil, err
	}
	return &sandboxv1.ResumeResponse{Result: resp.GetResult(), Error: resp.GetError(), ContainerId: resp.GetContainerId(), Info: resp.GetInfo()}, nil
}

// onLease runs f, a run of op on lease id, as Run and Resume do: it sends the header first,
// sets the trailer, stops f at deadline (nanoseconds from now; 0: none), and answers with
// what f returned and the lease's container after it.
func (s handlers) onLease(ctx context.Context, id string, deadline int64, op string, f func(context.Context, *sandbox.Lease) (sandbox.Result, error)) (*sandboxv1.RunResponse, error) {
	if err := grpc.SendHeader(ctx, metadata.MD{}); err != nil {
		return nil, err
	}
	hl, err := s.lease(id)
	if err != nil {
		return &sandboxv1.RunResponse{Result: &sandboxv1.Result{}, Error: errorProto(err)}, nil
	}
	defer hl.mu.Unlock()
	defer func() { _ = grpc.SetTrailer(ctx, metadata.Pairs(containerTrailer, hl.l.ContainerID())) }()
	if err := ctx.Err(); err != nil {
		// The caller stopped waiting before the run began: the lease stays as it was (a run
		// would replace a lost container even so), as its LeaseContainer, asked next, says.
		return &sandboxv1.RunResponse{Result: &sandboxv1.Result{}, Error: errorProto(fmt.Errorf("%s: %w", op, err)), ContainerId: hl.l.ContainerID()}, nil
	}
	if deadline > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(deadline))
		defer cancel()
	}
	res, err := f(ctx, hl.l)
	info := hl.l.Info()
	return &sandboxv1.RunResponse{Result: resultProto(res), Error: errorProto(err), ContainerId: info.Container, Info: leaseInfoProto(info)}, nil
}

// NamePause names the calls of the paused run of a lease's container.
func (s handlers) NamePause(_ context.Context, req *sandboxv1.NamePauseRequest) (*sandboxv1.NamePauseResponse, error) {
	hl, err := s.lease(req.GetLeaseId())
	if err != nil {
		return nil, statusError(err)
	}
	defer hl.mu.Unlock()
	hl.l.NamePause(req.GetIds())
	return &sandboxv1.NamePauseResponse{}, nil
}

// LeaseContainer names a lease's container, once the lease's call in progress is over.
func (s handlers) LeaseContainer(_ context.Context, req *sandboxv1.LeaseContainerRequest) (*sandboxv1.LeaseContainerResponse, error) {
	hl, err := s.lease(req.GetLeaseId())
	if err != nil {
		return nil, statusError(err)
	}
	defer hl.mu.Unlock()
	return &sandboxv1.LeaseContainerResponse{ContainerId: hl.l.ContainerID()}, nil
}

// containerTrailer names the lease's container after a run or an upload, in the trailer.
const containerTrailer = "x-codeinterp-container-id"

// LeasePutFile writes a file into a lease's container.
func (s handlers) LeasePutFile(st grpc.ClientStreamingServer[sandboxv1.LeasePutFileRequest, sandboxv1.LeasePutFileResponse]) error {
	first, err := st.Recv()
	if err != nil {
		return err
	}
	h := first.GetHeader()
	if h == nil {
		return status.Error(codes.InvalidArgument, "an upload starts with its header")
	}
	hl, err := s.lease(first.GetLeaseId())
	if err != nil {
		return statusError(err)
	}
	defer hl.mu.Unlock()
	defer func() { st.SetTrailer(metadata.Pairs(containerTrailer, hl.l.ContainerID())) }()
	if err := st.Context().Err(); err != nil {
		return statusError(fmt.Errorf("write container file: %w", err)) // as Run: the lease stays as it was
	}
	r := &chunkReader{buf: first.GetChunk(), abort: first.GetAbort(), recv: func() ([]byte, string, error) {
		m, err := st.Recv()
		return m.GetChunk(), m.GetAbort(), err
	}}
	fi, err := hl.l.PutFile(st.Context(), h.GetPath(), h.GetSource(), r, h.GetLimit())
	if err != nil {
		return uploadError(err)
	}
	info := hl.l.Info()
	return st.SendAndClose(&sandboxv1.LeasePutFileResponse{File: fileInfoProto(fi), ContainerId: info.Container, Info: leaseInfoProto(info)})
}

// PutFile writes a file into a container.
func (s handlers) PutFile(st grpc.ClientStreamingServer[sandboxv1.PutFileRequest, sandboxv1.PutFileResponse]) error {
	first, err := st.Recv()
	if err != nil {
		return err
	}
	h := first.GetHeader()
	if h == nil {
		return status.Error(codes.InvalidArgument, "an upload starts with its header")
	}
	r := &chunkReader{buf: first.GetChunk(), abort: first.GetAbort(), recv: func() ([]byte, string, error) {
		m, err := st.Recv()
		return m.GetChunk(), m.GetAbort(), err
	}}
	fi, err := s.svc.PutFile(st.Context(), first.GetIdentity(), first.GetContainerId(), h.GetPath(), h.GetSource(), r, h.GetLimit())
	if err != nil {
		return uploadError(err)
	}
	return st.SendAndClose(&sandboxv1.PutFileResponse{File: fileInfoProto(fi)})
}

// uploadError is the status of a failed upload, marking the client's own source's failure.
func uploadError(err error) error {
	pe := errorProto(err)
	pe.Source = errors.Is(err, errAborted)
	st := status.New(codeOf(err), err.Error())
	if d, derr := st.WithDetails(pe); derr == nil {
		st = d
	}
	return st.Err()
}

// errAborted marks the error of an upload its client aborted (its source failed).
var errAborted = errors.New("upload aborted")

// abortError is the source failure a client reported; it reads as the client's text.
type abortError struct{ msg string }

func (e *abortError) Error() string        { return e.msg }
func (e *abortError) Is(target error) bool { return target == errAborted }

// chunkReader reads an upload's chunks as they arrive. A chunk beyond MaxChunkBytes fails
// it, as does the client's abort.
type chunkReader struct {
	recv  func() (chunk []byte, abort string, err error)
	buf   []byte
	abort string
	err   error
}

func (r *chunkReader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		switch {
		case r.err != nil:
			return 0, r.err
		case r.abort != "":
			r.err = &abortError{msg: r.abort}
			continue
		}
		chunk, abort, err := r.recv()
		switch {
		case err != nil:
			r.err = err // io.EOF at the end
		case len(chunk) > MaxChunkBytes:
			r.err = fmt.Errorf("a chunk of %d bytes, more than %d", len(chunk), MaxChunkBytes)
		default:
			r.buf, r.abort = chunk, abort
		}
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

// OpenFile streams a container file: its FileInfo, then its content in chunks.
func (s handlers) OpenFile(req *sandboxv1.OpenFileRequest, st grpc.ServerStreamingServer[sandboxv1.OpenFileResponse]) error {
	rc, fi, err := s.svc.OpenFile(st.Context(), req.GetIdentity(), req.GetContainerId(), req.GetFileId())
	if err != nil {
		return statusError(err)
	}
	defer func() { _ = rc.Close() }()
	if err := st.Send(&sandboxv1.OpenFileResponse{File: fileInfoProto(fi)}); err != nil {
		return err
	}
	buf := make([]byte, s.o.ChunkBytes)
	for {
		n, err := io.ReadFull(rc, buf)
		if n > 0 {
			if err := st.Send(&sandboxv1.OpenFileResponse{Chunk: buf[:n]}); err != nil {
				return err
			}
		}
		switch {
		case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
			return nil
		case err != nil:
			return statusError(err)
		}
	}
}

// CheckSpec checks a Spec.
func (s handlers) CheckSpec(_ context.Context, req *sandboxv1.CheckSpecRequest) (*sandboxv1.CheckSpecResponse, error) {
	if err := s.svc.CheckSpec(specOf(req.GetSpec())); err != nil {
		return nil, statusError(err)
	}
	return &sandboxv1.CheckSpecResponse{}, nil
}

// Known reports whether a container is known and alive.
func (s handlers) Known(_ context.Context, req *sandboxv1.KnownRequest) (*sandboxv1.KnownResponse, error) {
	return &sandboxv1.KnownResponse{Known: s.svc.Known(req.GetIdentity(), req.GetContainerId())}, nil
}

// Create issues a container.
func (s handlers) Create(ctx context.Context, req *sandboxv1.CreateRequest) (*sandboxv1.CreateResponse, error) {
	ci, err := s.svc.Create(ctx, sandbox.CreateRequest{
		Identity: req.GetIdentity(), Name: req.GetName(), Spec: specOf(req.GetSpec()),
		ExpiresAfter: time.Duration(req.GetExpiresAfterNanos()),
	})
	if err != nil {
		return nil, statusError(err)
	}
	return &sandboxv1.CreateResponse{Container: containerInfoProto(ci)}, nil
}

// Container shows a container.
func (s handlers) Container(ctx context.Context, req *sandboxv1.ContainerRequest) (*sandboxv1.ContainerResponse, error) {
	ci, err := s.svc.Container(ctx, req.GetIdentity(), req.GetContainerId())
	if err != nil {
		return nil, statusError(err)
	}
	return &sandboxv1.ContainerResponse{Container: containerInfoProto(ci)}, nil
}

// Containers lists an identity's containers.
func (s handlers) Containers(ctx context.Context, req *sandboxv1.ContainersRequest) (*sandboxv1.ContainersResponse, error) {
	cis, err := s.svc.Containers(ctx, req.GetIdentity())
	if err != nil {
		return nil, statusError(err)
	}
	resp := &sandboxv1.ContainersResponse{Containers: make([]*sandboxv1.ContainerInfo, len(cis))}
	for i, ci := range cis {
		resp.Containers[i] = containerInfoProto(ci)
	}
	return resp, nil
}

// DeleteContainer deletes a container.
func (s handlers) DeleteContainer(ctx context.Context, req *sandboxv1.DeleteContainerRequest) (*sandboxv1.DeleteContainerResponse, error) {
	if err := s.svc.DeleteContainer(ctx, req.GetIdentity(), req.GetContainerId()); err != nil {
		return nil, statusError(err)
	}
	return &sandboxv1.DeleteContainerResponse{}, nil
}

// Files lists a container's files.
func (s handlers) Files(ctx context.Context, req *sandboxv1.FilesRequest) (*sandboxv1.FilesResponse, error) {
	fis, err := s.svc.Files(ctx, req.GetIdentity(), req.GetContainerId())
	if err != nil {
		return nil, statusError(err)
	}
	resp := &sandboxv1.FilesResponse{Files: make([]*sandboxv1.FileInfo, len(fis))}
	for i, fi := range fis {
		resp.Files[i] = fileInfoProto(fi)
	}
	return resp, nil
}

// File shows a container file.
func (s handlers) File(ctx context.Context, req *sandboxv1.FileRequest) (*sandboxv1.FileResponse, error) {
	fi, err := s.svc.File(ctx, req.GetIdentity(), req.GetContainerId(), req.GetFileId())
	if err != nil {
		return nil, statusError(err)
	}
	return &sandboxv1.FileResponse{File: fileInfoProto(fi)}, nil
}

// DeleteFile removes a container file.
func (s handlers) DeleteFile(ctx context.Context, req *sandboxv1.DeleteFileRequest) (*sandboxv1.DeleteFileResponse, error) {
	if err := s.svc.DeleteFile(ctx, req.GetIdentity(), req.GetContainerId(), req.GetFileId()); err != nil {
		return nil, statusError(err)
	}
	return &sandboxv1.DeleteFileResponse{}, nil
}

// leaseID returns a new lease id.
func leaseID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "lease_" + hex.EncodeToString(b[:])
}
