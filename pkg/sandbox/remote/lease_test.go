package remote

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/codeinterp/codeinterp/pkg/sandbox"
	"github.com/codeinterp/codeinterp/pkg/sandbox/sandboxtest"
)

// gatedProvider is a fake Provider whose starts, once gated, wait for their ctx, saying
// when one began.
type gatedProvider struct {
	*sandboxtest.Provider
	entered chan struct{}

	// mu guards gated.
	mu    sync.Mutex
	gated bool
}

func (p *gatedProvider) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Container, error) {
	p.mu.Lock()
	gated := p.gated
	p.mu.Unlock()
	if gated {
		p.entered <- struct{}{}
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return p.Provider.Create(ctx, spec)
}

func (p *gatedProvider) gate(on bool) {
	p.mu.Lock()
	p.gated = on
	p.mu.Unlock()
}

// heldContainerID is the container of the one lease s's node holds.
func heldContainerID(t *testing.T, s *served) string {
	t.Helper()
	s.srv.mu.Lock()
	defer s.srv.mu.Unlock()
	require.Len(t, s.srv.leases, 1, "the leases the node holds")
	for _, hl := range s.srv.leases {
		return hl.l.ContainerID()
	}
	return ""
}

// TestContainerIDAfterACancelledReplacement: a Run whose caller gives up while the node
// starts the replacement of a lost container leaves the lease on the replacement, as the
// Manager's does: ContainerID names it, on the Manager and through the Client alike.
func TestContainerIDAfterACancelledReplacement(t *testing.T) {
	for _, remote := range []bool{false, true} {
		t.Run(map[bool]string{false: "manager", true: "client"}[remote], func(t *testing.T) {
			p := &gatedProvider{Provider: &sandboxtest.Provider{}, entered: make(chan struct{}, 1)}
			m := newManager(t, p)
			var svc sandbox.Service = m
			var s *served
			if remote {
				s = serve(t, m, ServerOptions{}, ClientOptions{})
				svc = s.client
			}
			l, err := svc.Acquire(t.Context(), sandbox.AcquireRequest{Identity: "alice", Session: "s"})
			require.NoError(t, err, "Acquire")
			defer l.Release()
			_, err = l.Run(t.Context(), "x = 1", 0)
			require.NoError(t, err, "the first Run")
			lost := l.ContainerID()
			p.Container(0).Kill()
			p.gate(true)

			ctx, cancel := context.WithCancel(t.Context())
			var wg sync.WaitGroup
			wg.Go(func() {
				<-p.entered
				cancel()
			})
			_, err = l.Run(ctx, "x", 0)
			wg.Wait()
			require.ErrorIs(t, err, context.Canceled, "the Run given up while the replacement starts")
			replaced := l.ContainerID()
			assert.NotEqual(t, lost, replaced, "ContainerID after the lost container was replaced")
			if remote {
				assert.Equal(t, heldContainerID(t, s), replaced, "ContainerID is the node's lease's")
			}

			p.gate(false)
			res, err := l.Run(t.Context(), "x", 0)
			require.NoError(t, err, "the next Run")
			assert.Equal(t, sandbox.Result{}, res, "a fresh container: x is unset")
			assert.Equal(t, replaced, l.ContainerID(), "ContainerID after the next Run")
		})
	}
}

// TestContainerIDAfterAnAnswerTooLarge: a Run on the replacement of a lost container whose
// Result is beyond the node's MaxMessageBytes fails with ErrLost, and ContainerID names the
// replacement (the node's trailer says it).
func TestContainerIDAfterAnAnswerTooLarge(t *testing.T) {
	p := &sandboxtest.Provider{Run: func(_ context.Context, c *sandboxtest.Container, code string) (sandbox.Result, error) {
		if code == "big" {
			return sandbox.Result{Stdout: strings.Repeat("x", 128<<10)}, nil
		}
		return c.Eval(code), nil
	}}
	s := serve(t, newManager(t, p), ServerOptions{MaxMessageBytes: 64 << 10}, ClientOptions{})
	l, err := s.client.Acquire(t.Context(), sandbox.AcquireRequest{Identity: "alice", Session: "s"})
	require.NoError(t, err, "Acquire")
	defer l.Release()
	_, err = l.Run(t.Context(), "x = 1", 0)
	require.NoError(t, err, "the first Run")
	lost := l.ContainerID()
	p.Container(0).Kill()
	_, err = l.Run(t.Context(), "big", 0)
	require.ErrorIs(t, err, sandbox.ErrLost, "a Run whose answer is too large")
	assert.NotEqual(t, lost, l.ContainerID(), "ContainerID after the lost container was replaced")
	assert.Equal(t, heldContainerID(t, s), l.ContainerID(), "ContainerID is the node's lease's")
}

// TestLeaseInfoCrossesTheService: a lease through the Client reports how it got its container
// as the node's own lease does: the node, the origin, and a new container's start.
func TestLeaseInfoCrossesTheService(t *testing.T) {
	m := sandbox.NewManager(&sandboxtest.Provider{}, sandbox.ManagerConfig{Node: "node-b"}, zaptest.NewLogger(t))
	t.Cleanup(func() { _ = m.Close(context.Background()) })
	s := serve(t, m, ServerOptions{}, ClientOptions{})
	l, err := s.client.Acquire(t.Context(), sandbox.AcquireRequest{Identity: "alice", Session: "s"})
	require.NoError(t, err, "Acquire")
	assert.Equal(t, sandbox.AcquireInfo{Container: l.ContainerID(), Node: "node-b"}, l.Info(), "Info after Acquire")
	_, err = l.Run(t.Context(), "x = 1", 0)
	require.NoError(t, err, "the first Run")
	info := l.Info()
	s.srv.mu.Lock()
	var held sandbox.AcquireInfo
	for _, hl := range s.srv.leases {
		held = hl.l.Info()
	}
	s.srv.mu.Unlock()
	assert.Equal(t, sandbox.OriginNew, info.Origin, "the first Run started the container")
	assert.False(t, info.Started.IsZero(), "a new container's start time")
	assert.True(t, info.Started.Equal(held.Started), "the start time the node noted: got %v, want %v", info.Started, held.Started)
	info.Started, held.Started = time.Time{}, time.Time{} // monotonic readings do not travel
	assert.Equal(t, held, info, "Info through the Client is the node's lease's")
	l.Release()

	again, err := s.client.Acquire(t.Context(), sandbox.AcquireRequest{Identity: "alice", Session: "s"})
	require.NoError(t, err, "Acquire again")
	defer again.Release()
	assert.Equal(t, sandbox.OriginReused, again.Info().Origin, "the session's next lease, before it runs")
}
