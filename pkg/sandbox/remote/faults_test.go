package remote

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	sandboxv1 "github.com/codeinterp/codeinterp/api/codeinterp/sandbox/v1"
	"github.com/codeinterp/codeinterp/pkg/sandbox"
	"github.com/codeinterp/codeinterp/pkg/sandbox/sandboxtest"
)

// TestErrorsTravel: every error a Manager returns comes out of the Client matching what the
// Manager's matched, with the same text.
func TestErrorsTravel(t *testing.T) {
	tests := []struct {
		name string
		give error
	}{
		{"unavailable", fmt.Errorf("start container: %w: %w", sandbox.ErrUnavailable, errors.New("bwrap failed"))},
		{"at capacity", fmt.Errorf("%w: 2 containers in use", sandbox.ErrAtCapacity)},
		{"lost", sandbox.ErrLost},
		{"timeout", sandbox.ErrTimeout},
		{"lost and timeout", fmt.Errorf("%w (%w)", sandbox.ErrTimeout, sandbox.ErrLost)},
		{"unknown", sandbox.ErrUnknownContainer},
		{"expired", fmt.Errorf("%w: %w", sandbox.ErrExpiredContainer, sandbox.ErrLost)},
		{"file not found", sandbox.ErrFileNotFound},
		{"too large", fmt.Errorf("write container file: %w", sandbox.ErrFileTooLarge)},
		{"invalid path", sandbox.ErrInvalidPath},
		{"no file access", sandbox.ErrNoFileAccess},
		{"closed", sandbox.ErrClosed},
		{"spec", fmt.Errorf("create container: %w", &sandbox.SpecError{Field: "memory_limit", Value: "99g", Reason: "above 16g"})},
		{"canceled", fmt.Errorf("wait for the container: %w", context.Canceled)},
		{"deadline", fmt.Errorf("acquire sandbox: %w", context.DeadlineExceeded)},
		{"elsewhere by id", fmt.Errorf("%w: %w", sandbox.ErrUnknownContainer, sandbox.ErrElsewhere)},
		{"elsewhere by session", fmt.Errorf("session's container cntr_1: %w: %w", sandbox.ErrUnavailable, sandbox.ErrElsewhere)},
		{"other", errors.New("something else")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := namer{}
			got := callError(context.Background(), "op", statusError(tt.give), true)
			assert.Equal(t, n.errOf(tt.give), n.errOf(got), "%v through the wire", tt.give)
			assert.NotEqual(t, codes.OK, status.Code(statusError(tt.give)), "%v has a code", tt.give)
		})
	}
}

// blockingProvider is a fake whose "block" code runs until its ctx is done (or unblock is
// closed), saying when it started and how it ended.
func blockingProvider() (p *sandboxtest.Provider, started chan struct{}, ended chan error, unblock chan struct{}) {
	started, ended, unblock = make(chan struct{}, 1), make(chan error, 1), make(chan struct{})
	p = &sandboxtest.Provider{Run: func(ctx context.Context, c *sandboxtest.Container, code string) (sandbox.Result, error) {
		if code != "block" {
			return c.Eval(code), nil
		}
		started <- struct{}{}
		select {
		case <-ctx.Done():
			ended <- ctx.Err()
			return sandbox.Result{}, ctx.Err()
		case <-unblock:
			ended <- nil
			return sandbox.Result{Stdout: "done"}, nil
		}
	}}
	return p, started, ended, unblock
}

func newManager(t *testing.T, p sandbox.Provider) *sandbox.Manager {
	t.Helper()
	m := sandbox.NewManager(p, sandbox.ManagerConfig{}, zaptest.NewLogger(t))
	t.Cleanup(func() { _ = m.Close(context.Background()) })
	return m
}

// TestRunCancelReachesTheNode: cancelling a Run's ctx stops the run on the node.
func TestRunCancelReachesTheNode(t *testing.T) {
	p, started, ended, _ := blockingProvider()
	s := serve(t, newManager(t, p), ServerOptions{}, ClientOptions{})
	l, err := s.client.Acquire(t.Context(), sandbox.AcquireRequest{Identity: "alice"})
	require.NoError(t, err, "Acquire")
	defer l.Release()
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		<-started
		cancel()
	})
	_, err = l.Run(ctx, "block", time.Minute)
	assert.ErrorIs(t, err, context.Canceled, "Run cancelled")
	assert.ErrorIs(t, <-ended, context.Canceled, "the run on the node was cancelled")
	res, err := l.Run(t.Context(), "x", 0)
	assert.NoError(t, err, "the lease runs again")
	assert.Equal(t, sandbox.Result{}, res, "x is unset")
}

// TestKilledNodeMidRunIsLost: a node that dies during a run fails it with ErrLost, as the
// loop shows "[sandbox lost …]"; the next calls find the node unavailable.
func TestKilledNodeMidRunIsLost(t *testing.T) {
	p, started, _, _ := blockingProvider()
	s := serve(t, newManager(t, p), ServerOptions{}, ClientOptions{})
	l, err := s.client.Acquire(t.Context(), sandbox.AcquireRequest{Identity: "alice"})
	require.NoError(t, err, "Acquire")
	defer l.Release()
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		<-started
		// The run's header, which tells the client the node has it, is on its way out
		// (written by the transport's own goroutine): the node dies after it left.
		time.Sleep(100 * time.Millisecond)
		_ = s.stop()
	})
	res, err := l.Run(t.Context(), "block", time.Minute)
	assert.ErrorIs(t, err, sandbox.ErrLost, "Run on a node killed midway")
	assert.NotErrorIs(t, err, sandbox.ErrUnavailable, "the run had started")
	assert.Equal(t, sandbox.Result{}, res, "nothing came back")

	_, err = s.client.Acquire(t.Context(), sandbox.AcquireRequest{Identity: "alice"})
	assert.ErrorIs(t, err, sandbox.ErrUnavailable, "Acquire on a dead node")
	_, err = l.Run(t.Context(), "x", 0)
	assert.Error(t, err, "Run on a lease of a dead node")
}

// TestRestartedNodeLeaseLost: a lease of a node that restarted is gone with the node's
// containers: its next run fails with ErrLost, and a new lease works.
func TestRestartedNodeLeaseLost(t *testing.T) {
	s := serve(t, newManager(t, &sandboxtest.Provider{}), ServerOptions{}, ClientOptions{})
	l, err := s.client.Acquire(t.Context(), sandbox.AcquireRequest{Identity: "alice", Session: "s"})
	require.NoError(t, err, "Acquire")
	defer l.Release()
	_, err = l.Run(t.Context(), "x=1", 0)
	require.NoError(t, err, "Run")
	require.NoError(t, s.stop(), "Serve")
	s.restart(t, newManager(t, &sandboxtest.Provider{}))
	var res sandbox.Result
	require.Eventually(t, func() bool {
		res, err = l.Run(t.Context(), "x", 0)
		return !errors.Is(err, sandbox.ErrUnavailable) // until the client has reconnected
	}, 5*time.Second, 20*time.Millisecond, "the client reconnects")
	assert.ErrorIs(t, err, sandbox.ErrLost, "Run on a lease of the node before it restarted")
	assert.Equal(t, sandbox.Result{}, res, "nothing ran")
	l2, err := s.client.Acquire(t.Context(), sandbox.AcquireRequest{Identity: "alice", Session: "s"})
	require.NoError(t, err, "Acquire on the restarted node")
	defer l2.Release()
	res, err = l2.Run(t.Context(), "x", 0)
	assert.NoError(t, err, "Run on the restarted node")
	assert.Equal(t, sandbox.Result{}, res, "a fresh container: x is unset")
}

// TestUnreachableNodeIsUnavailable: a node nobody listens for fails every call with
// ErrUnavailable, before anything ran.
func TestUnreachableNodeIsUnavailable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err, "listen")
	addr := ln.Addr().String()
	require.NoError(t, ln.Close(), "close the listener")
	c, err := Dial(addr, ClientOptions{Secret: testSecret, CallTimeout: 2 * time.Second})
	require.NoError(t, err, "Dial")
	defer func() { assert.NoError(t, c.Close(), "Close") }()
	ctx := t.Context()
	_, err = c.Acquire(ctx, sandbox.AcquireRequest{Identity: "alice"})
	assert.ErrorIs(t, err, sandbox.ErrUnavailable, "Acquire")
	assert.NotErrorIs(t, err, sandbox.ErrLost, "Acquire")
	_, err = c.Create(ctx, sandbox.CreateRequest{Identity: "alice"})
	assert.ErrorIs(t, err, sandbox.ErrUnavailable, "Create")
	_, err = c.Container(ctx, "alice", neverIssued)
	assert.ErrorIs(t, err, sandbox.ErrUnavailable, "Container")
	_, err = c.Containers(ctx, "alice")
	assert.ErrorIs(t, err, sandbox.ErrUnavailable, "Containers")
	_, err = c.PutFile(ctx, "alice", neverIssued, "/mnt/data/x", "", strings.NewReader("x"), 0)
	assert.ErrorIs(t, err, sandbox.ErrUnavailable, "PutFile")
	_, _, err = c.OpenFile(ctx, "alice", neverIssued, "cfile_0")
	assert.ErrorIs(t, err, sandbox.ErrUnavailable, "OpenFile")
	assert.ErrorIs(t, c.CheckSpec(sandbox.Spec{}), sandbox.ErrUnavailable, "CheckSpec")
	assert.False(t, c.Known("alice", neverIssued), "Known")
}

// TestKnownThroughANodeDown: Known of a container whose node went down is false, as the
// Manager's is when its Registry fails: at once (a refused connection does not wait for the
// CallTimeout), with a warning naming the failure.
func TestKnownThroughANodeDown(t *testing.T) {
	core, logs := observer.New(zap.WarnLevel)
	s := serve(t, newManager(t, &sandboxtest.Provider{}), ServerOptions{}, ClientOptions{Log: zap.New(core)})
	ci, err := s.client.Create(t.Context(), sandbox.CreateRequest{Identity: "alice"})
	require.NoError(t, err, "Create")
	require.True(t, s.client.Known("alice", ci.ID), "Known while the node is up")
	require.Zero(t, logs.Len(), "no warning while the node is up")
	require.NoError(t, s.stop(), "Serve")
	start := time.Now()
	assert.False(t, s.client.Known("alice", ci.ID), "Known through a node that is down")
	assert.Less(t, time.Since(start), DefaultCallTimeout/2, "Known through a node that is down answers at once")
	require.Equal(t, 1, logs.Len(), "a warning")
	assert.ErrorIs(t, logs.All()[0].Context[0].Interface.(error), sandbox.ErrUnavailable, "the warning's error")
}

// TestClientGoneReleasesLease: a lease whose holder goes away (its connection closed, as
// when its process dies) is released on the node: an ephemeral container is deleted.
func TestClientGoneReleasesLease(t *testing.T) {
	p := &sandboxtest.Provider{}
	m := newManager(t, p)
	s := serve(t, m, ServerOptions{}, ClientOptions{})
	other, err := Dial(s.addr, ClientOptions{Secret: testSecret})
	require.NoError(t, err, "Dial")
	l, err := other.Acquire(t.Context(), sandbox.AcquireRequest{})
	require.NoError(t, err, "Acquire")
	_, err = l.Run(t.Context(), "x=1", 0)
	require.NoError(t, err, "Run")
	require.Equal(t, 0, p.Deleted(), "in use")
	require.NoError(t, other.Close(), "the holder goes")
	assert.Eventually(t, func() bool { return p.Deleted() == 1 }, 5*time.Second, 5*time.Millisecond,
		"the ephemeral container is deleted once its holder is gone")
	s.srv.mu.Lock()
	assert.Empty(t, s.srv.leases, "no lease held")
	s.srv.mu.Unlock()
	l.Release() // no-op on a closed client
}

// TestDeadPeerLeaseReleased: a holder that stops answering (its machine gone: no FIN, no
// RST) loses its lease within the keepalive's time.
func TestDeadPeerLeaseReleased(t *testing.T) {
	p := &sandboxtest.Provider{}
	s := serve(t, newManager(t, p), ServerOptions{Keepalive: 200 * time.Millisecond, KeepaliveTimeout: 300 * time.Millisecond}, ClientOptions{})
	px := newProxy(t, s.addr)
	c, err := Dial(px.addr, ClientOptions{Secret: testSecret})
	require.NoError(t, err, "Dial")
	defer func() { assert.NoError(t, c.Close(), "Close") }()
	l, err := c.Acquire(t.Context(), sandbox.AcquireRequest{})
	require.NoError(t, err, "Acquire")
	defer l.Release()
	_, err = l.Run(t.Context(), "x=1", 0)
	require.NoError(t, err, "Run")
	start := time.Now()
	px.freeze()
	assert.Eventually(t, func() bool { return p.Deleted() == 1 }, 5*time.Second, 10*time.Millisecond,
		"the lease of a silent peer is released")
	t.Logf("released %v after the peer went silent", time.Since(start))
	px.close()
}

// TestDownloadCut: a download whose node dies midway fails its reader.
func TestDownloadCut(t *testing.T) {
	m := newManager(t, &sandboxtest.Provider{})
	s := serve(t, m, ServerOptions{}, ClientOptions{})
	ctx := t.Context()
	ci, err := s.client.Create(ctx, sandbox.CreateRequest{Identity: "alice"})
	require.NoError(t, err, "Create")
	fi, err := s.client.PutFile(ctx, "alice", ci.ID, "big.bin", "", bytes.NewReader(bigFile), 0)
	require.NoError(t, err, "PutFile")
	rc, _, err := s.client.OpenFile(ctx, "alice", ci.ID, fi.ID)
	require.NoError(t, err, "OpenFile")
	_, err = io.ReadFull(rc, make([]byte, 1000))
	require.NoError(t, err, "read the start")
	assert.NoError(t, s.stop(), "Serve")
	n, err := io.Copy(io.Discard, rc)
	assert.Error(t, err, "reading on once the node died")
	assert.Less(t, n+1000, int64(len(bigFile)), "the rest did not all come")
	assert.NoError(t, rc.Close(), "Close")
}

// TestSecret: a call without the shared secret, or with another, is refused (and logged
// without what it carried); a secret too short is refused by both sides.
func TestSecret(t *testing.T) {
	core, logs := observer.New(zap.WarnLevel)
	s := serve(t, newManager(t, &sandboxtest.Provider{}), ServerOptions{Log: zap.New(core)}, ClientOptions{})
	wrong := []byte("another secret of at least 32 bytes, not the one")
	c, err := Dial(s.addr, ClientOptions{Secret: wrong})
	require.NoError(t, err, "Dial")
	defer func() { assert.NoError(t, c.Close(), "Close") }()
	_, err = c.Acquire(t.Context(), sandbox.AcquireRequest{Identity: "alice"})
	assert.ErrorIs(t, err, sandbox.ErrUnavailable, "Acquire with a wrong secret")
	assert.Equal(t, codes.Unauthenticated, status.Code(err), "Acquire with a wrong secret")
	_, err = c.Create(t.Context(), sandbox.CreateRequest{Identity: "alice"})
	assert.Equal(t, codes.Unauthenticated, status.Code(err), "Create with a wrong secret")

	cc, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err, "dial without a secret")
	defer func() { assert.NoError(t, cc.Close(), "close") }()
	_, err = sandboxv1.NewSandboxServiceClient(cc).Containers(t.Context(), &sandboxv1.ContainersRequest{Identity: "alice"})
	assert.Equal(t, codes.Unauthenticated, status.Code(err), "a call without a secret")

	require.Equal(t, 3, logs.Len(), "each refusal is logged")
	for _, e := range logs.All() {
		for _, f := range e.Context {
			assert.NotContains(t, f.String, secretToken(wrong), "a log field holds the secret sent")
			assert.NotContains(t, f.String, string(wrong), "a log field holds the secret sent")
		}
	}

	_, err = NewServer(newManager(t, &sandboxtest.Provider{}), ServerOptions{Secret: []byte("short")})
	assert.Error(t, err, "NewServer with a short secret")
	_, err = Dial(s.addr, ClientOptions{Secret: make([]byte, MinSecretBytes-1)})
	assert.Error(t, err, "Dial with a short secret")
}

// proxy forwards TCP connections to a server, and can freeze them: a peer that vanished.
type proxy struct {
	addr string
	ln   net.Listener
	wg   sync.WaitGroup

	mu     sync.Mutex
	conns  []net.Conn
	frozen bool
}

func newProxy(t *testing.T, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err, "listen")
	px := &proxy{addr: ln.Addr().String(), ln: ln}
	px.wg.Go(func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				_ = in.Close()
				continue
			}
			px.mu.Lock()
			px.conns = append(px.conns, in, out)
			px.mu.Unlock()
			px.wg.Go(func() { px.pipe(out, in) })
			px.wg.Go(func() { px.pipe(in, out) })
		}
	})
	t.Cleanup(px.close)
	return px
}

// pipe copies from src to dst until either fails; once frozen it drops what it reads.
func (px *proxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if err != nil {
			return
		}
		px.mu.Lock()
		frozen := px.frozen
		px.mu.Unlock()
		if frozen {
			continue
		}
		if _, err := dst.Write(buf[:n]); err != nil {
			return
		}
	}
}

// freeze stops forwarding, leaving the connections open.
func (px *proxy) freeze() {
	px.mu.Lock()
	px.frozen = true
	px.mu.Unlock()
}

// close closes everything and waits for the copiers. Idempotent.
func (px *proxy) close() {
	_ = px.ln.Close()
	px.mu.Lock()
	for _, c := range px.conns {
		_ = c.Close()
	}
	px.conns = nil
	px.mu.Unlock()
	px.wg.Wait()
}

// TestShutdown: Shutdown waits for a run in progress, whose result its holder gets, but not
// for an idle lease, which it ends (released on the node).
func TestShutdown(t *testing.T) {
	p, started, _, unblock := blockingProvider()
	s := serve(t, newManager(t, p), ServerOptions{}, ClientOptions{})
	ctx := t.Context()
	idle, err := s.client.Acquire(ctx, sandbox.AcquireRequest{})
	require.NoError(t, err, "Acquire")
	defer idle.Release()
	_, err = idle.Run(ctx, "x=1", 0)
	require.NoError(t, err, "Run")
	busy, err := s.client.Acquire(ctx, sandbox.AcquireRequest{Identity: "alice"})
	require.NoError(t, err, "Acquire")
	defer busy.Release()

	var wg sync.WaitGroup
	defer wg.Wait()
	var res sandbox.Result
	var runErr error
	wg.Go(func() { res, runErr = busy.Run(ctx, "block", time.Minute) })
	<-started
	shut := make(chan error, 1)
	wg.Go(func() {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		shut <- s.srv.Shutdown(sctx)
	})
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned during a run: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	close(unblock)
	assert.NoError(t, <-shut, "Shutdown")
	wg.Wait()
	assert.NoError(t, runErr, "the run in progress")
	assert.Equal(t, "done", res.Stdout, "the run in progress")
	assert.Eventually(t, func() bool { return p.Deleted() == 1 }, 5*time.Second, 5*time.Millisecond,
		"the idle ephemeral lease was ended, and its container deleted")
	_, err = idle.Run(ctx, "x", 0)
	assert.Error(t, err, "Run on a lease of a node shut down")
}
