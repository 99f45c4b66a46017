package sandbox_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"

	"github.com/codeinterp/codeinterp/pkg/sandbox"
	"github.com/codeinterp/codeinterp/pkg/sandbox/sandboxtest"
)

func newTestManager(t *testing.T, p sandbox.Provider, cfg sandbox.ManagerConfig) *sandbox.Manager {
	t.Helper()
	m := sandbox.NewManager(p, cfg, zaptest.NewLogger(t))
	t.Cleanup(func() { require.NoError(t, m.Close(context.Background()), "close manager") })
	return m
}

func acquire(t *testing.T, m *sandbox.Manager, r sandbox.AcquireRequest) *sandbox.Lease {
	t.Helper()
	l, err := m.Acquire(context.Background(), r)
	require.NoError(t, err, "acquire %+v", r)
	return l
}

func run(t *testing.T, l *sandbox.Lease, code string) sandbox.Result {
	t.Helper()
	res, err := l.Run(context.Background(), code, 0)
	require.NoError(t, err, "run %q", code)
	return res
}

func TestManagerSessionKeepsState(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &sandboxtest.Provider{}
		m := newTestManager(t, p, sandbox.ManagerConfig{})
		a := acquire(t, m, sandbox.AcquireRequest{Identity: "alice", Session: "s1"})
		run(t, a, "x=10")
		id := a.ContainerID()
		a.Release()

		again := acquire(t, m, sandbox.AcquireRequest{Identity: "alice", Session: "s1"})
		assert.Equal(t, id, again.ContainerID(), "same identity and session give the same container")
		assert.Equal(t, "10", run(t, again, "x").Value, "state persists across leases of a session")
		again.Release()

		tests := []struct {
			name string
			give sandbox.AcquireRequest
		}{
			{"same session under another identity", sandbox.AcquireRequest{Identity: "bob", Session: "s1"}},
			{"same session under the empty identity", sandbox.AcquireRequest{Identity: "", Session: "s1"}},
			{"another session of the same identity", sandbox.AcquireRequest{Identity: "alice", Session: "s2"}},
			{"no session: ephemeral", sandbox.AcquireRequest{Identity: "alice"}},
		}
		for _, tt := range tests {
			l := acquire(t, m, tt.give)
			assert.NotEqual(t, id, l.ContainerID(), "%s: must not share alice/s1's container", tt.name)
			assert.Equal(t, "", run(t, l, "x").Value, "%s: must not see alice/s1's variables", tt.name)
			l.Release()
		}
	})
}

func TestManagerContainerIDScopedByIdentity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &sandboxtest.Provider{}
		m := newTestManager(t, p, sandbox.ManagerConfig{})
		a := acquire(t, m, sandbox.AcquireRequest{Identity: "alice", Session: "s1"})
		run(t, a, "x=1")
		id := a.ContainerID()
		a.Release()
		require.Regexp(t, `^cntr_[0-9a-f]{32}$`, id, "container id format")

		tests := []struct {
			name      string
			identity  string
			id        string
			wantKnown bool
			wantErr   error
		}{
			{"issuing identity", "alice", id, true, nil},
			{"another identity", "bob", id, false, sandbox.ErrUnknownContainer},
			{"empty identity", "", id, false, sandbox.ErrUnknownContainer},
			{"unknown id", "alice", "cntr_00000000000000000000000000000000", false, sandbox.ErrUnknownContainer},
		}
		assert.False(t, m.Known("alice", ""), "the empty id is never known")
		for _, tt := range tests {
			assert.Equal(t, tt.wantKnown, m.Known(tt.identity, tt.id), "%s: Known", tt.name)
			l, err := m.Acquire(context.Background(), sandbox.AcquireRequest{Identity: tt.identity, ContainerID: tt.id})
			assert.ErrorIs(t, err, tt.wantErr, "%s: Acquire", tt.name)
			if l != nil {
				l.Release()
			}
		}
		l := acquire(t, m, sandbox.AcquireRequest{Identity: "alice", ContainerID: id})
		assert.Equal(t, "1", run(t, l, "x").Value, "acquiring by id reaches the session's state")
		l.Release()
	})
}

func TestManagerEphemeralDeletedOnRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &sandboxtest.Provider{}
		m := newTestManager(t, p, sandbox.ManagerConfig{})
		l := acquire(t, m, sandbox.AcquireRequest{Identity: ""})
		id := l.ContainerID()
		assert.Equal(t, 0, p.Created(), "the container starts lazily, on the first run")
		run(t, l, "x=1")
		// A second lease on the ephemeral container, by its id, keeps it alive.
		byID := acquire(t, m, sandbox.AcquireRequest{Identity: "", ContainerID: id})
		l.Release()
		l.Release() // idempotent
		synctest.Wait()
		assert.False(t, p.Container(0).Deleted(), "still leased by id: not deleted")
		byID.Release()
		synctest.Wait()
		assert.True(t, p.Container(0).Deleted(), "deleted once no lease holds it")
		assert.False(t, m.Known("", id), "a deleted container is unknown")

		unused := acquire(t, m, sandbox.AcquireRequest{Identity: ""})
		unused.Release()
		assert.Equal(t, 1, p.Created(), "a lease that never ran started no container")
	})
}

func TestManagerSessionLRUCap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &sandboxtest.Provider{}
		m := newTestManager(t, p, sandbox.ManagerConfig{MaxSessionsPerIdentity: 2})
		ids := map[string]string{}
		open := func(s string) *sandbox.Lease {
			l := acquire(t, m, sandbox.AcquireRequest{Identity: "alice", Session: s})
			run(t, l, "x="+s)
			ids[s] = l.ContainerID()
			time.Sleep(time.Second) // distinct last-use times
			return l
		}
		open("a").Release()
		open("b").Release()
		open("c").Release() // evicts a, the least recently used
		synctest.Wait()
		assert.False(t, m.Known("alice", ids["a"]), "a evicted")
		assert.True(t, p.Container(0).Deleted(), "the evicted container is deleted")
		assert.True(t, m.Known("alice", ids["b"]), "b kept")

		// Another identity has its own cap.
		bob := acquire(t, m, sandbox.AcquireRequest{Identity: "bob", Session: "a"})
		run(t, bob, "x=bob")
		assert.True(t, m.Known("alice", ids["c"]), "bob's session does not evict alice's")

		// A session in use is never evicted: b is leased, so d evicts c.
		b := acquire(t, m, sandbox.AcquireRequest{Identity: "alice", Session: "b"})
		open("d").Release()
		assert.True(t, m.Known("alice", ids["b"]), "leased b kept")
		assert.False(t, m.Known("alice", ids["c"]), "idle c evicted")

		// With every session in use, one more is refused.
		d := acquire(t, m, sandbox.AcquireRequest{Identity: "alice", Session: "d"})
		_, err := m.Acquire(context.Background(), sandbox.AcquireRequest{Identity: "alice", Session: "e"})
		assert.ErrorIs(t, err, sandbox.ErrUnavailable, "all sessions leased at the cap")
		b.Release()
		d.Release()
		bob.Release()
	})
}

func TestManagerGlobalCap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &sandboxtest.Provider{}
		m := newTestManager(t, p, sandbox.ManagerConfig{MaxContainers: 2})
		a := acquire(t, m, sandbox.AcquireRequest{Identity: "alice"})
		b := acquire(t, m, sandbox.AcquireRequest{Identity: "bob", Session: "s"})
		_, err := m.Acquire(context.Background(), sandbox.AcquireRequest{Identity: "carol"})
		assert.ErrorIs(t, err, sandbox.ErrUnavailable, "third container beyond the global cap")
		_, err = m.Acquire(context.Background(), sandbox.AcquireRequest{Identity: "carol", Session: "s"})
		assert.ErrorIs(t, err, sandbox.ErrUnavailable, "third (session) container beyond the global cap")
		again := acquire(t, m, sandbox.AcquireRequest{Identity: "bob", Session: "s"})
		again.Release()
		a.Release()
		c := acquire(t, m, sandbox.AcquireRequest{Identity: "carol"})
		c.Release()
		b.Release()
	})
}

// One identity cannot take all of MaxContainers: its containers, kept and session, are
// capped; an idle one of its own makes room, others' containers are never touched.
func TestManagerIdentityCap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &sandboxtest.Provider{}
		m := newTestManager(t, p, sandbox.ManagerConfig{MaxContainers: 8, MaxContainersPerIdentity: 3, MaxSessionsPerIdentity: 3})
		s := acquire(t, m, sandbox.AcquireRequest{Identity: "alice", Session: "s"})
		run(t, s, "x=1")
		sid := s.ContainerID()
		s.Release()
		e1 := acquire(t, m, sandbox.AcquireRequest{Identity: "alice"})
		e2 := acquire(t, m, sandbox.AcquireRequest{Identity: "alice"})
		bob := acquire(t, m, sandbox.AcquireRequest{Identity: "bob"})

		// Alice is at her cap: her idle session makes room for another container.
		e3 := acquire(t, m, sandbox.AcquireRequest{Identity: "alice"})
		assert.False(t, m.Known("alice", sid), "alice's idle session evicted at her cap")
		_, err := m.Acquire(context.Background(), sandbox.AcquireRequest{Identity: "alice"})
		assert.ErrorIs(t, err, sandbox.ErrUnavailable, "alice beyond her cap with every container in use")
		_, err = m.Acquire(context.Background(), sandbox.AcquireRequest{Identity: "alice", Session: "t"})
		assert.ErrorIs(t, err, sandbox.ErrUnavailable, "a new session beyond her cap too")

		// Others still get containers.
		carol := acquire(t, m, sandbox.AcquireRequest{Identity: "carol", Session: "s"})
		e1.Release()
		again := acquire(t, m, sandbox.AcquireRequest{Identity: "alice"})
		assert.False(t, m.Known("alice", e1.ContainerID()), "alice's container released last made room")
		for _, l := range []*sandbox.Lease{e2, e3, bob, carol, again} {
			l.Release()
		}
	})
}

func TestManagerIdleTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &sandboxtest.Provider{}
		m := newTestManager(t, p, sandbox.ManagerConfig{SessionIdleTTL: 10 * time.Minute})
		idle := acquire(t, m, sandbox.AcquireRequest{Identity: "alice", Session: "idle"})
		run(t, idle, "x=1")
		idle.Release()
		busy := acquire(t, m, sandbox.AcquireRequest{Identity: "alice", Session: "busy"})
		run(t, busy, "x=1")

		time.Sleep(9 * time.Minute)
		synctest.Wait()
		assert.True(t, m.Known("alice", idle.ContainerID()), "idle for less than the TTL: kept")

		time.Sleep(5 * time.Minute)
		synctest.Wait()
		assert.False(t, m.Known("alice", idle.ContainerID()), "idle past the TTL: pruned")
		assert.True(t, p.Container(0).Deleted(), "pruned container deleted")
		assert.True(t, m.Known("alice", busy.ContainerID()), "leased: never pruned")
		assert.False(t, p.Container(1).Deleted(), "leased container not deleted")

		// The TTL counts from the release.
		busy.Release()
		time.Sleep(9 * time.Minute)
		synctest.Wait()
		assert.True(t, m.Known("alice", busy.ContainerID()), "released 9m ago: kept")
		time.Sleep(5 * time.Minute)
		synctest.Wait()
		assert.False(t, m.Known("alice", busy.ContainerID()), "released 14m ago: pruned")
	})
}

func TestManagerLostContainerReplaced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &sandboxtest.Provider{}
		p.Run = func(ctx context.Context, c *sandboxtest.Container, code string) (sandbox.Result, error) {
			if code == "crash" {
				return sandbox.Result{Stdout: "partial"}, fmt.Errorf("%w: boom", sandbox.ErrLost)
			}
			return c.Eval(code), nil
		}
		m := newTestManager(t, p, sandbox.ManagerConfig{})
		l := acquire(t, m, sandbox.AcquireRequest{Identity: "alice", Session: "s"})
		run(t, l, "x=1")
		oldID := l.ContainerID()
		res, err := l.Run(context.Background(), "crash", 0)
		assert.ErrorIs(t, err, sandbox.ErrLost, "crash")
		assert.Equal(t, "partial", res.Stdout, "partial output comes with the error")
		synctest.Wait()
		assert.True(t, p.Container(0).Deleted(), "lost container deleted")
		assert.False(t, m.Known("alice", oldID), "lost container evicted")

		assert.Equal(t, "", run(t, l, "x").Value, "the next run has a fresh container: state reset")
		assert.NotEqual(t, oldID, l.ContainerID(), "the lease's ContainerID changed")
		assert.True(t, m.Known("alice", l.ContainerID()), "the replacement is known")
		other := acquire(t, m, sandbox.AcquireRequest{Identity: "alice", Session: "s"})
		assert.Equal(t, l.ContainerID(), other.ContainerID(), "the session key maps to the replacement")
		other.Release()
		l.Release()
	})
}

func TestManagerContainerDeadWhileIdleReplaced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &sandboxtest.Provider{}
		m := newTestManager(t, p, sandbox.ManagerConfig{})
		l := acquire(t, m, sandbox.AcquireRequest{Identity: "alice", Session: "s"})
		run(t, l, "x=1")
		oldID := l.ContainerID()
		p.Container(0).Kill() // e.g. killed at its CPU limit between runs
		res, err := l.Run(context.Background(), "x", 0)
		require.NoError(t, err, "the run goes to a fresh container")
		assert.Equal(t, "", res.Value, "state reset")
		assert.NotEqual(t, oldID, l.ContainerID(), "ContainerID changed")
		assert.False(t, m.Known("alice", oldID), "the dead container is forgotten")
		l.Release()
	})
}

func TestManagerTimeoutWithoutLossKeepsContainer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &sandboxtest.Provider{}
		p.Run = func(ctx context.Context, c *sandboxtest.Container, code string) (sandbox.Result, error) {
			if code == "spin" {
				<-ctx.Done()
				return sandbox.Result{}, sandbox.ErrTimeout // interrupted in time
			}
			return c.Eval(code), nil
		}
		m := newTestManager(t, p, sandbox.ManagerConfig{RunTimeout: time.Minute})
		l := acquire(t, m, sandbox.AcquireRequest{Identity: "alice", Session: "s"})
		run(t, l, "x=1")
		start := time.Now()
		_, err := l.Run(context.Background(), "spin", 0)
		assert.ErrorIs(t, err, sandbox.ErrTimeout, "spin")
		assert.Equal(t, time.Minute, time.Since(start), "timeout 0 uses RunTimeout")
		start = time.Now()
		_, err = l.Run(context.Background(), "spin", 5*time.Second)
		assert.ErrorIs(t, err, sandbox.ErrTimeout, "spin")
		assert.Equal(t, 5*time.Second, time.Since(start), "an explicit timeout")
		assert.Equal(t, "1", run(t, l, "x").Value, "an interrupted run keeps the container and its state")
		l.Release()
	})
}

func TestManagerLateFailureKeepsReplacement(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &sandboxtest.Provider{}
		m := newTestManager(t, p, sandbox.ManagerConfig{})
		l := acquire(t, m, sandbox.AcquireRequest{Identity: "alice", Session: "s"})
		run(t, l, "x=1")
		oldID := l.ContainerID()
		lateFailure := l.EvictForTest() // e.g. evicted while idle
		run(t, l, "x=2")                // the lease moves to a replacement
		require.NotEqual(t, oldID, l.ContainerID(), "replaced")

		lateFailure(fmt.Errorf("%w: late", sandbox.ErrLost))
		assert.True(t, m.Known("alice", l.ContainerID()), "a late failure of the old container keeps the replacement")
		assert.Equal(t, "2", run(t, l, "x").Value, "replacement still serves the key")
		l.Release()
	})
}

func TestManagerOneRunAtATime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &sandboxtest.Provider{}
		p.Run = func(ctx context.Context, c *sandboxtest.Container, code string) (sandbox.Result, error) {
			time.Sleep(time.Second)
			return c.Eval(code), nil
		}
		m := newTestManager(t, p, sandbox.ManagerConfig{})
		var wg sync.WaitGroup
		for i := range 5 {
			wg.Go(func() {
				l, err := m.Acquire(context.Background(), sandbox.AcquireRequest{Identity: "alice", Session: "s"})
				if !assert.NoError(t, err, "acquire %d", i) {
					return
				}
				defer l.Release()
				_, err = l.Run(context.Background(), fmt.Sprintf("x%d=1", i), 0)
				assert.NoError(t, err, "run %d", i)
			})
		}
		wg.Wait()
		require.Equal(t, 1, p.Created(), "concurrent first requests of one session share one container")
		c := p.Container(0)
		assert.False(t, c.Overlapped(), "runs on one container never overlap")
		assert.Equal(t, 5, c.Runs(), "every run ran")
	})
}

func TestManagerQueuedRunRespectsContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &sandboxtest.Provider{}
		release := make(chan struct{})
		p.Run = func(ctx context.Context, c *sandboxtest.Container, code string) (sandbox.Result, error) {
			if code == "block" {
				<-release
			}
			return c.Eval(code), nil
		}
		m := newTestManager(t, p, sandbox.ManagerConfig{})
		a := acquire(t, m, sandbox.AcquireRequest{Identity: "alice", Session: "s"})
		b := acquire(t, m, sandbox.AcquireRequest{Identity: "alice", Session: "s"})
		var wg sync.WaitGroup
		wg.Go(func() { _, _ = a.Run(context.Background(), "block", 0) })
		synctest.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := b.Run(ctx, "x", 0)
		assert.ErrorIs(t, err, context.DeadlineExceeded, "queued behind a run: gives up with its context")
		close(release)
		wg.Wait()
		a.Release()
		b.Release()
	})
}

func TestManagerWarmPool(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &sandboxtest.Provider{}
		m := newTestManager(t, p, sandbox.ManagerConfig{WarmPool: 2})
		synctest.Wait()
		require.Equal(t, 2, p.Created(), "the pool fills at start")

		l := acquire(t, m, sandbox.AcquireRequest{Identity: ""})
		run(t, l, "x=1")
		assert.Equal(t, 1, p.Container(0).Runs(), "the first warm container serves the first run")
		synctest.Wait()
		assert.Equal(t, 2, p.Created(), "the refill waits a moment: the run that took the container goes first")
		time.Sleep(sandbox.RefillDelay)
		synctest.Wait()
		assert.Equal(t, 3, p.Created(), "the pool is refilled in the background")

		// A warm container that died in the pool is not handed out.
		p.Container(1).Kill()
		l2 := acquire(t, m, sandbox.AcquireRequest{Identity: ""})
		run(t, l2, "x=2")
		assert.Equal(t, 0, p.Container(1).Runs(), "dead warm container skipped")
		assert.Equal(t, 1, p.Container(2).Runs(), "next warm container used")

		// A request for another spec does not take a warm container.
		big := acquire(t, m, sandbox.AcquireRequest{Identity: "", Spec: sandbox.Spec{MemoryLimit: "4g"}})
		run(t, big, "x=3")
		synctest.Wait()
		var bigSpecs int
		for _, s := range p.Specs() {
			if s.MemoryLimit == "4g" {
				bigSpecs++
			}
		}
		assert.Equal(t, 1, bigSpecs, "a 4g container was created for the 4g request")

		// Containers are never reused across keys: the released ones are deleted, not pooled.
		l.Release()
		l2.Release()
		big.Release()
		synctest.Wait()
		assert.True(t, p.Container(0).Deleted(), "used container deleted, not returned to the pool")
	})
}

func TestManagerCreateFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &sandboxtest.Provider{}
		p.FailCreate(errors.New("no bwrap"))
		m := newTestManager(t, p, sandbox.ManagerConfig{})
		l := acquire(t, m, sandbox.AcquireRequest{Identity: "alice", Session: "s"})
		_, err := l.Run(context.Background(), "x=1", 0)
		assert.ErrorIs(t, err, sandbox.ErrUnavailable, "creation failure")
		p.FailCreate(nil)
		run(t, l, "x=1")
		assert.Equal(t, "1", run(t, l, "x").Value, "the next run retries the start")
		l.Release()
	})
}

func TestManagerClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &sandboxtest.Provider{}
		m := sandbox.NewManager(p, sandbox.ManagerConfig{WarmPool: 1}, zaptest.NewLogger(t))
		synctest.Wait()
		s := acquire(t, m, sandbox.AcquireRequest{Identity: "alice", Session: "s"})
		run(t, s, "x=1")
		e := acquire(t, m, sandbox.AcquireRequest{Identity: "alice"})
		run(t, e, "x=1")
		synctest.Wait()

		require.NoError(t, m.Close(context.Background()), "close")
		require.NoError(t, m.Close(context.Background()), "close again")
		for i := range p.Created() {
			assert.True(t, p.Container(i).Deleted(), "container %d deleted by Close", i)
		}
		_, err := m.Acquire(context.Background(), sandbox.AcquireRequest{Identity: "alice"})
		assert.ErrorIs(t, err, sandbox.ErrClosed, "acquire after close")
		_, err = s.Run(context.Background(), "x", 0)
		assert.ErrorIs(t, err, sandbox.ErrClosed, "run after close")
		assert.False(t, m.Known("alice", s.ContainerID()), "nothing is known after close")
		s.Release()
		e.Release()
	})
}

// TestManagerCloseTimeout: a Close whose ctx ends before the deletions returns ctx's error and
// leaves nothing of its own behind; the deletions go on, and a later Close waits for them.
func TestManagerCloseTimeout(t *testing.T) {
	unblock := make(chan struct{})
	p := &sandboxtest.Provider{OnDelete: func(context.Context, *sandboxtest.Container) error {
		<-unblock
		return nil
	}}
	m := sandbox.NewManager(p, sandbox.ManagerConfig{}, zaptest.NewLogger(t))
	l := acquire(t, m, sandbox.AcquireRequest{Identity: "alice", Session: "s"})
	run(t, l, "x=1")
	l.Release()
	before := goleak.IgnoreCurrent()

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	assert.ErrorIs(t, m.Close(ctx), context.Canceled, "Close with its ctx done")
	assert.NoError(t, goleak.Find(before, goleak.IgnoreAnyFunction("github.com/codeinterp/codeinterp/pkg/sandbox_test.TestManagerCloseTimeout.func1")),
		"after a Close that timed out, only the deletion it started is left")

	close(unblock)
	require.NoError(t, m.Close(context.Background()), "a later Close waits for the deletion")
	assert.True(t, p.Container(0).Deleted(), "deleted")
}

func TestManagerMetrics(t *testing.T) {
	p := &sandboxtest.Provider{}
	m := newTestManager(t, p, sandbox.ManagerConfig{MaxSessionsPerIdentity: 1})
	reg := prometheus.NewRegistry()
	for _, c := range m.Collectors() {
		require.NoError(t, reg.Register(c), "register the manager's metrics")
	}

	a := acquire(t, m, sandbox.AcquireRequest{Identity: "alice", Session: "s1"})
	run(t, a, "x=1")
	a.Release()
	b := acquire(t, m, sandbox.AcquireRequest{Identity: "alice", Session: "s2"}) // evicts s1 (cap 1)
	_, err := m.Acquire(context.Background(), sandbox.AcquireRequest{Identity: "bob", ContainerID: b.ContainerID()})
	require.ErrorIs(t, err, sandbox.ErrUnknownContainer)
	e := acquire(t, m, sandbox.AcquireRequest{Identity: ""})

	assert.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP codeinterp_sandbox_starts_total Containers put to use, by source: warm (from the pool), cold (started on demand) or restored (a hibernated container started again).
# TYPE codeinterp_sandbox_starts_total counter
codeinterp_sandbox_starts_total{source="cold"} 1
# HELP codeinterp_sandbox_evictions_total Lasting containers deleted before their owner was done: lru (a cap), idle (expiry), lost (died or was killed), hibernated (idle, its files kept on disk), lifetime (a hibernating container past its lifetime).
# TYPE codeinterp_sandbox_evictions_total counter
codeinterp_sandbox_evictions_total{reason="lru"} 1
# HELP codeinterp_sandbox_acquire_failures_total Acquires refused, by reason: cap (a cap was reached) or unknown_container.
# TYPE codeinterp_sandbox_acquire_failures_total counter
codeinterp_sandbox_acquire_failures_total{reason="unknown_container"} 1
`), "codeinterp_sandbox_starts_total", "codeinterp_sandbox_evictions_total", "codeinterp_sandbox_acquire_failures_total"),
		"one cold start, one LRU eviction, one unknown container")
	got, err := testutil.GatherAndCount(reg, "codeinterp_sandbox_containers")
	require.NoError(t, err)
	assert.Equal(t, 3, got, "gauges for every kind")
	assert.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP codeinterp_sandbox_containers Containers in use (issued under a key), by kind.
# TYPE codeinterp_sandbox_containers gauge
codeinterp_sandbox_containers{kind="ephemeral"} 1
codeinterp_sandbox_containers{kind="kept"} 0
codeinterp_sandbox_containers{kind="session"} 1
`), "codeinterp_sandbox_containers"))
	b.Release()
	e.Release()
}
