package remote

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	sandboxv1 "github.com/codeinterp/codeinterp/api/codeinterp/sandbox/v1"
	"github.com/codeinterp/codeinterp/pkg/sandbox"
)

// ClientOptions configures a [Client]. Secret is required; the zero value of every other
// field is its default.
type ClientOptions struct {
	// Secret is the deployment's shared secret, at least MinSecretBytes long.
	Secret []byte
	// TLS, if set, dials with TLS (mutual, with a certificate and key).
	TLS TLSFiles
	// MaxMessageBytes bounds a message either way. Default DefaultMaxMessageBytes.
	MaxMessageBytes int
	// ChunkBytes is the size of the chunks an upload is sent in. Default DefaultChunkBytes
	// (at most MaxChunkBytes).
	ChunkBytes int
	// Keepalive and KeepaliveTimeout: see DefaultClientKeepalive and DefaultKeepaliveTimeout
	// (a Keepalive below 10 s is 10 s).
	Keepalive, KeepaliveTimeout time.Duration
	// CallTimeout bounds the calls that take no context and a lease's Release. Default
	// DefaultCallTimeout.
	CallTimeout time.Duration
	// TracerProvider makes a span of each call, a child of the span in the call's ctx. If
	// nil, no span is made. Either way the call carries the W3C trace context of its ctx
	// (traceparent), so that the node's spans join the caller's trace.
	TracerProvider trace.TracerProvider
	// Log receives what Known cannot return (a node that does not answer). If nil, nothing is
	// logged.
	Log *zap.Logger
}

// Client is a sandbox node's [sandbox.Service], reached over the network. It is safe for
// concurrent use; it connects lazily and reconnects by itself. Close it when done.
type Client struct {
	cc  *grpc.ClientConn
	c   sandboxv1.SandboxServiceClient
	o   ClientOptions
	log *zap.Logger
}

var _ sandbox.Service = (*Client)(nil)

// secretCreds sends the shared secret with every call.
type secretCreds struct {
	md  map[string]string
	tls bool
}

func (c secretCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return c.md, nil
}
func (c secretCreds) RequireTransportSecurity() bool { return c.tls }

// Dial returns a Client of the sandbox node at addr ("host:port"). It does not wait for the
// connection: a node that cannot be reached fails the calls with ErrUnavailable.
func Dial(addr string, o ClientOptions) (*Client, error) {
	if err := checkSecret(o.Secret); err != nil {
		return nil, err
	}
	if o.MaxMessageBytes <= 0 {
		o.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if o.ChunkBytes <= 0 || o.ChunkBytes > MaxChunkBytes {
		o.ChunkBytes = DefaultChunkBytes
	}
	if o.Keepalive < DefaultClientKeepalive {
		o.Keepalive = DefaultClientKeepalive
	}
	if o.KeepaliveTimeout <= 0 {
		o.KeepaliveTimeout = DefaultKeepaliveTimeout
	}
	if o.CallTimeout <= 0 {
		o.CallTimeout = DefaultCallTimeout
	}
	log := o.Log
	if log == nil {
		log = zap.NewNop()
	}
	tc := insecure.NewCredentials()
	if o.TLS.enabled() {
		c, err := o.TLS.config(false)
		if err != nil {
			return nil, fmt.Errorf("sandbox service TLS: %w", err)
		}
		tc = credentials.NewTLS(c)
	}
	cc, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(tc),
		grpc.WithStatsHandler(otelgrpc.NewClientHandler(otelOptions(o.TracerProvider)...)),
		grpc.WithPerRPCCredentials(secretCreds{md: map[string]string{secretHeader: secretToken(o.Secret)}, tls: o.TLS.enabled()}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(o.MaxMessageBytes), grpc.MaxCallSendMsgSize(o.MaxMessageBytes)),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: o.Keepalive, Timeout: o.KeepaliveTimeout, PermitWithoutStream: true}),
		// A node that restarts is reached again within seconds, not grpc's two minutes.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second},
			MinConnectTimeout: o.CallTimeout,
		}),
	)
	if err != nil {
		return nil, fmt.Errorf("sandbox node %s: %w", addr, err)
	}
	return &Client{cc: cc, c: sandboxv1.NewSandboxServiceClient(cc), o: o, log: log.Named("sandbox_client")}, nil
}

// Close closes the connection: the leases still held are released on the node, calls in
// progress fail.
func (c *Client) Close() error { return c.cc.Close() }

// callError is the Service's error for err, the failure of call op. A node's own error
// keeps what it matched; the caller's ctx done gives ctx's error; a refused secret, or a
// node that cannot be reached, ErrUnavailable, unless ran says the call reached the node and
// may have had effects, which is ErrLost.
func callError(ctx context.Context, op string, err error, ran bool) error {
	st, _ := status.FromError(err)
	for _, d := range st.Details() {
		if pe, ok := d.(*sandboxv1.Error); ok {
			return errorOf(pe)
		}
	}
	if ctx.Err() != nil {
		return fmt.Errorf("%s: %w", op, ctx.Err())
	}
	if ran && st.Code() != codes.Unauthenticated {
		return fmt.Errorf("%w: %s: the sandbox node stopped answering: %w", sandbox.ErrLost, op, err)
	}
	return fmt.Errorf("%w: %s: %w", sandbox.ErrUnavailable, op, err)
}

// Acquire acquires a lease on the node, held by a stream until Release (or Close, or the
// connection dying: the node then releases it).
func (c *Client) Acquire(ctx context.Context, r sandbox.AcquireRequest) (*sandbox.Lease, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("acquire sandbox: %w", err)
	}
	// The stream outlives ctx, which bounds the acquire only.
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, cancel)
	st, err := c.c.Acquire(sctx)
	var resp *sandboxv1.AcquireResponse
	if err == nil {
		err = st.Send(&sandboxv1.AcquireRequest{
			Identity: r.Identity, Session: r.Session, ContainerId: r.ContainerID, Spec: specProto(r.Spec),
			Hibernate: r.Hibernate, IdPrefix: r.IDPrefix,
		})
		if err == nil || errors.Is(err, io.EOF) { // at EOF, Recv tells why
			resp, err = st.Recv()
		}
	}
	if !stop() {
		cancel()
		return nil, fmt.Errorf("acquire sandbox: %w", ctx.Err())
	}
	if err != nil {
		cancel()
		return nil, callError(ctx, "acquire sandbox", err, false)
	}
	l := &lease{c: c, st: st, cancel: cancel, id: resp.GetLeaseId()}
	l.containerID = resp.GetContainerId()
	l.info = leaseInfoOf(resp.GetInfo(), "")
	return sandbox.NewLease(l), nil
}

// lease is a lease held on the node by its Acquire stream.
type lease struct {
	c        *Client
	st       grpc.BidiStreamingClient[sandboxv1.AcquireRequest, sandboxv1.AcquireResponse]
	cancel   context.CancelFunc
	id       string
	released bool

	// mu guards the fields below.
	mu          sync.Mutex
	containerID string
	// info is how the lease got its container, as the node last told it (its Container
	// unset: containerID is the one).
	info sandbox.AcquireInfo
	// unsure reports whether a call that may have changed the lease's container (replacing a
	// lost one) ended without the node's answer, because its caller stopped waiting:
	// ContainerID asks the node.
	unsure bool
}

var _ sandbox.LeaseBackend = (*lease)(nil)

// deadlineGrace is how long after a Run's deadline its client waits for the node's answer
// (the run stopped at the deadline, with what it showed).
const deadlineGrace = 2 * time.Second

// errLeaseReleased is returned by a released lease's calls.
var errLeaseReleased = errors.New("sandbox lease already released")

// ContainerID returns the id of the lease's container, as the node last told it. After a
// call its caller stopped waiting for, the node may have replaced a lost container without
// saying so: ContainerID then asks the node (at most CallTimeout; the id known so far if it
// cannot tell).
func (l *lease) ContainerID() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.unsure {
		l.unsure = false
		ctx, cancel := context.WithTimeout(context.Background(), l.c.o.CallTimeout)
		defer cancel()
		if resp, err := l.c.c.LeaseContainer(ctx, &sandboxv1.LeaseContainerRequest{LeaseId: l.id}); err == nil && resp.GetContainerId() != "" {
			l.containerID = resp.GetContainerId()
		}
	}
	return l.containerID
}

func (l *lease) setContainerID(id string) {
	if id == "" {
		return
	}
	l.mu.Lock()
	l.containerID, l.unsure = id, false
	l.mu.Unlock()
}

// setInfo notes the node's answer to a call: the lease's container and how it got it.
func (l *lease) setInfo(id string, m *sandboxv1.LeaseInfo) {
	if id == "" {
		return
	}
	l.mu.Lock()
	l.containerID, l.unsure = id, false
	if m != nil {
		l.info = leaseInfoOf(m, "")
	}
	l.mu.Unlock()
}

// Info returns how the lease got its container, as the node last told it (the node's own
// clock in Started). After a call whose answer was lost it may be out of date, until the
// next call's answer.
func (l *lease) Info() sandbox.AcquireInfo {
	id := l.ContainerID()
	l.mu.Lock()
	defer l.mu.Unlock()
	info := l.info
	info.Container = id
	return info
}

// afterCall notes what a lease's call that failed with err (its node's answer lost) tells of
// the container: the id in its trailer; or, when ctx ended it, that the node may have
// replaced the container without saying so.
func (l *lease) afterCall(ctx context.Context, trailer metadata.MD) {
	if v := trailer.Get(containerTrailer); len(v) == 1 {
		l.setContainerID(v[0])
		return
	}
	if ctx.Err() != nil {
		l.mu.Lock()
		l.unsure = true
		l.mu.Unlock()
	}
}

// Run runs code on the node. A connection lost once the node had the run fails it with
// ErrLost. A run that pauses for the client's tools returns its Calls; the pause stays on the
// node (see Resume).
func (l *lease) Run(ctx context.Context, code string, timeout time.Duration) (sandbox.Result, error) {
	if l.released {
		return sandbox.Result{}, errLeaseReleased
	}
	req := &sandboxv1.RunRequest{LeaseId: l.id, Code: code, TimeoutNanos: int64(timeout)}
	return l.call(ctx, "run", func(cctx context.Context, deadline int64, opts ...grpc.CallOption) (runAnswer, error) {
		req.DeadlineNanos = deadline
		return l.c.c.Run(cctx, req, opts...)
	})
}

var _ interface {
	Resume(ctx context.Context, results []sandbox.ToolResult, timeout time.Duration) (sandbox.Result, error)
	NamePause(ids []string)
} = (*lease)(nil)

// Resume gives the run of the lease's container paused for tool calls, on the node, the
// results of its calls, as [sandbox.Lease.Resume] does there (its errors: ErrNotPaused and
// the rest, as they travel); a connection lost once the node had it fails it with ErrLost.
func (l *lease) Resume(ctx context.Context, results []sandbox.ToolResult, timeout time.Duration) (sandbox.Result, error) {
	if l.released {
		return sandbox.Result{}, errLeaseReleased
	}
	req := &sandboxv1.ResumeRequest{LeaseId: l.id, Results: toolResultsProto(results), TimeoutNanos: int64(timeout)}
	return l.call(ctx, "resume", func(cctx context.Context, deadline int64, opts ...grpc.CallOption) (runAnswer, error) {
		req.DeadlineNanos = deadline
		return l.c.c.Resume(cctx, req, opts...)
	})
}

// NamePause names the calls of the paused run of the lease's container on the node (see
// [sandbox.Lease.NamePause]), within CallTimeout. A node that cannot be told leaves the pause
// unnamed, as a backend that cannot name does; the failure goes to the log.
func (l *lease) NamePause(ids []string) {
	if l.released {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.c.o.CallTimeout)
	defer cancel()
	if _, err := l.c.c.NamePause(ctx, &sandboxv1.NamePauseRequest{LeaseId: l.id, Ids: ids}); err != nil {
		l.c.log.Warn("name the paused run's calls on the node", zap.Error(callError(ctx, "name pause", err, false)))
	}
}

// runAnswer is the node's answer to a Run or a Resume.
type runAnswer interface {
	GetResult() *sandboxv1.Result
	GetError() *sandboxv1.Error
	GetContainerId() string
	GetInfo() *sandboxv1.LeaseInfo
}

// call makes a run's call (Run, Resume) op with ctx's deadline sent as deadline
// (nanoseconds from now; 0: none), waiting a little past it for the node's answer.
func (l *lease) call(ctx context.Context, op string, send func(cctx context.Context, deadline int64, opts ...grpc.CallOption) (runAnswer, error)) (sandbox.Result, error) {
	cctx, deadline := ctx, int64(0)
	if dl, ok := ctx.Deadline(); ok {
		// The node stops the run at ctx's deadline, and answers: wait a little longer for it.
		deadline = max(int64(time.Until(dl)), 1)
		var cancel context.CancelFunc
		cctx, cancel = context.WithDeadline(context.WithoutCancel(ctx), dl.Add(deadlineGrace))
		defer cancel()
		stop := context.AfterFunc(ctx, func() {
			if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
				cancel()
			}
		})
		defer stop()
	}
	var hdr, trailer metadata.MD
	resp, err := send(cctx, deadline, grpc.Header(&hdr), grpc.Trailer(&trailer))
	if err != nil {
		l.afterCall(ctx, trailer)
		return sandbox.Result{}, callError(ctx, op, err, hdr != nil)
	}
	l.setInfo(resp.GetContainerId(), resp.GetInfo())
	return resultOf(resp.GetResult()), errorOf(resp.GetError())
}

// PutFile writes r's bytes into the lease's container, streamed in chunks.
func (l *lease) PutFile(ctx context.Context, path, source string, r io.Reader, limit int64) (sandbox.FileInfo, error) {
	if l.released {
		return sandbox.FileInfo{}, errLeaseReleased
	}
	st, err := l.c.c.LeasePutFile(ctx)
	if err != nil {
		l.afterCall(ctx, nil)
		return sandbox.FileInfo{}, callError(ctx, "write container file", err, false)
	}
	h := &sandboxv1.FileHeader{Path: path, Source: source, Limit: limit}
	srcErr := upload(st, r, l.c.o.ChunkBytes, func(chunk []byte, abort string, first bool) *sandboxv1.LeasePutFileRequest {
		m := &sandboxv1.LeasePutFileRequest{Chunk: chunk, Abort: abort}
		if first {
			m.LeaseId, m.Header = l.id, h
		}
		return m
	})
	resp, err := st.CloseAndRecv()
	if err != nil {
		l.afterCall(ctx, st.Trailer())
		return sandbox.FileInfo{}, uploadCallError(ctx, err, srcErr)
	}
	l.setInfo(resp.GetContainerId(), resp.GetInfo())
	return fileInfoOf(resp.GetFile()), nil
}

// Release ends the lease: it closes the stream's side and waits (at most CallTimeout) for
// the node to have released it. Idempotent.
func (l *lease) Release() {
	if l.released {
		return
	}
	l.released = true
	defer l.cancel()
	if err := l.st.CloseSend(); err != nil {
		return
	}
	t := time.AfterFunc(l.c.o.CallTimeout, l.cancel)
	defer t.Stop()
	for {
		if _, err := l.st.Recv(); err != nil {
			return
		}
	}
}

// uploadStream is the client side of an upload.
type uploadStream[M any] interface {
	Send(*M) error
}

// upload sends the header (with the first chunk) and the chunks of r, reading r as the
// stream takes them. It stops early when the node ended the upload (Send's io.EOF: the
// node's answer tells why). A failure of r is sent as an abort, and returned.
func upload[M any](st uploadStream[M], r io.Reader, chunkBytes int, msg func(chunk []byte, abort string, first bool) *M) error {
	buf := make([]byte, chunkBytes)
	first := true
	for {
		n, err := io.ReadFull(r, buf)
		eof := errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
		var srcErr error
		abort := ""
		if err != nil && !eof {
			srcErr, abort = err, err.Error()
			if abort == "" {
				abort = "the source failed"
			}
		}
		if n > 0 || first || abort != "" {
			if serr := st.Send(msg(buf[:n], abort, first)); serr != nil {
				return srcErr // the node ended the upload: its answer says why
			}
		}
		first = false
		if err != nil {
			return srcErr
		}
	}
}

// uploadCallError is the Service's error of a failed upload: the source's own error when the
// node failed it for that.
func uploadCallError(ctx context.Context, err, srcErr error) error {
	st, _ := status.FromError(err)
	for _, d := range st.Details() {
		if pe, ok := d.(*sandboxv1.Error); ok {
			if pe.GetSource() && srcErr != nil {
				ne := errorOf(pe).(*nodeError)
				ne.matches = append(ne.matches, srcErr)
				return ne
			}
			return errorOf(pe)
		}
	}
	return callError(ctx, "write container file", err, false)
}

// CheckSpec asks the node whether it would create a container of spec.
func (c *Client) CheckSpec(spec sandbox.Spec) error {
	ctx, cancel := context.WithTimeout(context.Background(), c.o.CallTimeout)
	defer cancel()
	if _, err := c.c.CheckSpec(ctx, &sandboxv1.CheckSpecRequest{Spec: specProto(spec)}); err != nil {
		return callError(ctx, "check container spec", err, false)
	}
	return nil
}

// Known reports whether the node issued containerID to identity and holds it alive; a node
// that does not answer knows none.
func (c *Client) Known(identity, containerID string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), c.o.CallTimeout)
	defer cancel()
	resp, err := c.c.Known(ctx, &sandboxv1.KnownRequest{Identity: identity, ContainerId: containerID})
	if err != nil {
		c.log.Warn("look up container", zap.Error(callError(ctx, "look up container", err, false)))
		return false
	}
	return resp.GetKnown()
}

// Create issues a container on the node.
func (c *Client) Create(ctx context.Context, r sandbox.CreateRequest) (sandbox.ContainerInfo, error) {
	resp, err := c.c.Create(ctx, &sandboxv1.CreateRequest{
		Identity: r.Identity, Name: r.Name, Spec: specProto(r.Spec), ExpiresAfterNanos: int64(r.ExpiresAfter),
	})
	if err != nil {
		return sandbox.ContainerInfo{}, callError(ctx, "create container", err, false)
	}
	return containerInfoOf(resp.GetContainer()), nil
}

// Container returns a container of the node.
func (c *Client) Container(ctx context.Context, identity, id string) (sandbox.ContainerInfo, error) {
	resp, err := c.c.Container(ctx, &sandboxv1.ContainerRequest{Identity: identity, ContainerId: id})
	if err != nil {
		return sandbox.ContainerInfo{}, callError(ctx, "look up container", err, false)
	}
	return containerInfoOf(resp.GetContainer()), nil
}

// Containers lists identity's containers on the node.
func (c *Client) Containers(ctx context.Context, identity string) ([]sandbox.ContainerInfo, error) {
	resp, err := c.c.Containers(ctx, &sandboxv1.ContainersRequest{Identity: identity})
	if err != nil {
		return nil, callError(ctx, "list containers", err, false)
	}
	if identity == "" {
		return nil, nil // as the Manager: the anonymous identity has none, and no list
	}
	out := make([]sandbox.ContainerInfo, len(resp.GetContainers()))
	for i, ci := range resp.GetContainers() {
		out[i] = containerInfoOf(ci)
	}
	return out, nil
}

// DeleteContainer deletes a container of the node.
func (c *Client) DeleteContainer(ctx context.Context, identity, id string) error {
	if _, err := c.c.DeleteContainer(ctx, &sandboxv1.DeleteContainerRequest{Identity: identity, ContainerId: id}); err != nil {
		return callError(ctx, "delete container", err, false)
	}
	return nil
}

// PutFile writes r's bytes into a container of the node, streamed in chunks.
func (c *Client) PutFile(ctx context.Context, identity, containerID, path, source string, r io.Reader, limit int64) (sandbox.FileInfo, error) {
	st, err := c.c.PutFile(ctx)
	if err != nil {
		return sandbox.FileInfo{}, callError(ctx, "write container file", err, false)
	}
	h := &sandboxv1.FileHeader{Path: path, Source: source, Limit: limit}
	srcErr := upload(st, r, c.o.ChunkBytes, func(chunk []byte, abort string, first bool) *sandboxv1.PutFileRequest {
		m := &sandboxv1.PutFileRequest{Chunk: chunk, Abort: abort}
		if first {
			m.Identity, m.ContainerId, m.Header = identity, containerID, h
		}
		return m
	})
	resp, err := st.CloseAndRecv()
	if err != nil {
		return sandbox.FileInfo{}, uploadCallError(ctx, err, srcErr)
	}
	return fileInfoOf(resp.GetFile()), nil
}

// Files lists a container's files.
func (c *Client) Files(ctx context.Context, identity, containerID string) ([]sandbox.FileInfo, error) {
	resp, err := c.c.Files(ctx, &sandboxv1.FilesRequest{Identity: identity, ContainerId: containerID})
	if err != nil {
		return nil, callError(ctx, "list container files", err, false)
	}
	out := make([]sandbox.FileInfo, len(resp.GetFiles()))
	for i, fi := range resp.GetFiles() {
		out[i] = fileInfoOf(fi)
	}
	return out, nil
}

// File returns a container file.
func (c *Client) File(ctx context.Context, identity, containerID, fileID string) (sandbox.FileInfo, error) {
	resp, err := c.c.File(ctx, &sandboxv1.FileRequest{Identity: identity, ContainerId: containerID, FileId: fileID})
	if err != nil {
		return sandbox.FileInfo{}, callError(ctx, "look up container file", err, false)
	}
	return fileInfoOf(resp.GetFile()), nil
}

// OpenFile opens a container file of the node for reading, streamed in chunks. As the
// Manager's, the reader outlives ctx (which bounds the open only) and must be closed.
func (c *Client) OpenFile(ctx context.Context, identity, containerID, fileID string) (io.ReadCloser, sandbox.FileInfo, error) {
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, cancel)
	st, err := c.c.OpenFile(sctx, &sandboxv1.OpenFileRequest{Identity: identity, ContainerId: containerID, FileId: fileID})
	var first *sandboxv1.OpenFileResponse
	if err == nil {
		first, err = st.Recv()
	}
	if !stop() {
		cancel()
		return nil, sandbox.FileInfo{}, fmt.Errorf("open container file: %w", ctx.Err())
	}
	if err != nil {
		cancel()
		return nil, sandbox.FileInfo{}, callError(ctx, "open container file", err, false)
	}
	return &download{st: st, cancel: cancel, buf: first.GetChunk()}, fileInfoOf(first.GetFile()), nil
}

// download reads a file's chunks as they arrive. Not for concurrent use.
type download struct {
	st     grpc.ServerStreamingClient[sandboxv1.OpenFileResponse]
	cancel context.CancelFunc
	buf    []byte
	err    error
}

func (d *download) Read(p []byte) (int, error) {
	for len(d.buf) == 0 {
		if d.err != nil {
			return 0, d.err
		}
		m, err := d.st.Recv()
		switch {
		case errors.Is(err, io.EOF):
			d.err = io.EOF
		case err != nil:
			d.err = callError(context.Background(), "read container file", err, true)
		default:
			d.buf = m.GetChunk()
		}
	}
	n := copy(p, d.buf)
	d.buf = d.buf[n:]
	return n, nil
}

// Close ends the download. Idempotent.
func (d *download) Close() error {
	d.cancel()
	if d.err == nil {
		d.err = sandbox.ErrClosed
	}
	return nil
}

// DeleteFile removes a container file.
func (c *Client) DeleteFile(ctx context.Context, identity, containerID, fileID string) error {
	if _, err := c.c.DeleteFile(ctx, &sandboxv1.DeleteFileRequest{Identity: identity, ContainerId: containerID, FileId: fileID}); err != nil {
		return callError(ctx, "delete container file", err, false)
	}
	return nil
}
