package sandbox_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/codeinterp/codeinterp/pkg/sandbox"
	"github.com/codeinterp/codeinterp/pkg/sandbox/sandboxtest"
	"github.com/codeinterp/codeinterp/pkg/store"
	"github.com/codeinterp/codeinterp/pkg/store/memory"
)

// brokenRegistry fails Lookup, Session and Touch while broken is set.
type brokenRegistry struct {
	store.Registry
	broken atomic.Bool
}

var errBroken = errors.New("registry down")

func (r *brokenRegistry) Lookup(ctx context.Context, id string) (store.Registration, bool, error) {
	if r.broken.Load() {
		return store.Registration{}, false, errBroken
	}
	return r.Registry.Lookup(ctx, id)
}

func (r *brokenRegistry) Session(ctx context.Context, identity, session string) (store.Registration, bool, error) {
	if r.broken.Load() {
		return store.Registration{}, false, errBroken
	}
	return r.Registry.Session(ctx, identity, session)
}

func (r *brokenRegistry) Touch(ctx context.Context, id string, t time.Time) error {
	if r.broken.Load() {
		return errBroken
	}
	return r.Registry.Touch(ctx, id, t)
}

// TestManagerRegistryFails: a Registry that cannot answer makes acquires by id or session
// fail with ErrUnavailable and ids unknown; a lease already held keeps its container, and an
// idle session whose last use cannot be read is not pruned.
func TestManagerRegistryFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := &brokenRegistry{Registry: memory.NewRegistry()}
		p := &sandboxtest.Provider{}
		m := newTestManager(t, p, sandbox.ManagerConfig{Registry: reg, SessionIdleTTL: time.Minute})
		held := acquire(t, m, sandbox.AcquireRequest{Identity: "alice", Session: "held"})
		run(t, held, "x=1")
		idle := acquire(t, m, sandbox.AcquireRequest{Identity: "alice", Session: "idle"})
		run(t, idle, "x=1")
		idle.Release()
		reg.broken.Store(true)

		_, err := m.Acquire(context.Background(), sandbox.AcquireRequest{Identity: "alice", Session: "held"})
		assert.ErrorIs(t, err, sandbox.ErrUnavailable, "acquire by session")
		assert.ErrorIs(t, err, errBroken, "acquire by session")
		_, err = m.Acquire(context.Background(), sandbox.AcquireRequest{Identity: "alice", ContainerID: held.ContainerID()})
		assert.ErrorIs(t, err, sandbox.ErrUnavailable, "acquire by id")
		assert.False(t, m.Known("alice", held.ContainerID()), "Known")
		assert.Equal(t, "1", run(t, held, "x").Value, "a held lease keeps its container")
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		assert.False(t, p.Container(1).Deleted(), "an idle session whose last use is unknown is kept")

		reg.broken.Store(false)
		assert.True(t, m.Known("alice", held.ContainerID()), "Known once the registry answers")
		held.Release()
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		assert.True(t, p.Container(1).Deleted(), "pruned once the registry answers")
	})
}

// TestManagerNodeOwner: Managers sharing a Registry, each with a Node of its own, register
// their containers with their Node as Owner and serve only those: another node's container id
// is unknown here and its session is not taken over (both with ErrElsewhere), and a listing
// leaves it out.
func TestManagerNodeOwner(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		reg := memory.NewRegistry()
		a := newTestManager(t, &sandboxtest.Provider{}, sandbox.ManagerConfig{Registry: reg, Node: "a"})
		b := newTestManager(t, &sandboxtest.Provider{}, sandbox.ManagerConfig{Registry: reg, Node: "b"})
		l := acquire(t, a, sandbox.AcquireRequest{Identity: "alice", Session: "s"})
		run(t, l, "x=1")
		id := l.ContainerID()
		l.Release()

		r, ok, err := reg.Lookup(ctx, id)
		require.NoError(t, err, "Lookup(%q)", id)
		require.True(t, ok, "Lookup(%q)", id)
		assert.Equal(t, "a", r.Owner, "a's container's owner")

		_, err = b.Acquire(ctx, sandbox.AcquireRequest{Identity: "alice", ContainerID: id})
		assert.ErrorIs(t, err, sandbox.ErrUnknownContainer, "b acquires a's container by id")
		assert.ErrorIs(t, err, sandbox.ErrElsewhere, "b acquires a's container by id")
		_, err = b.Acquire(ctx, sandbox.AcquireRequest{Identity: "alice", Session: "s"})
		assert.ErrorIs(t, err, sandbox.ErrUnavailable, "b acquires a's session")
		assert.ErrorIs(t, err, sandbox.ErrElsewhere, "b acquires a's session")
		assert.False(t, b.Known("alice", id), "b knows a's container")
		_, err = b.Container(ctx, "alice", id)
		assert.ErrorIs(t, err, sandbox.ErrElsewhere, "b shows a's container")
		list, err := b.Containers(ctx, "alice")
		require.NoError(t, err, "b lists alice's containers")
		assert.Empty(t, list, "b lists a's container")

		again := acquire(t, a, sandbox.AcquireRequest{Identity: "alice", Session: "s"})
		assert.Equal(t, id, again.ContainerID(), "a's session still names a's container")
		assert.Equal(t, "1", run(t, again, "x").Value, "a's container kept its state")
		again.Release()

		n, capacity := a.Load()
		assert.Equal(t, 1, n, "a's Load: containers")
		assert.Equal(t, sandbox.DefaultMaxContainers, capacity, "a's Load: capacity")
	})
}

// TestManagerNodeRestarted: a Manager that finds a container registered as its Node's but
// holds no live entry for it (the node restarted) treats it as lost: expired by id, listed as
// expired, and its session gets a fresh container.
func TestManagerNodeRestarted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		reg := memory.NewRegistry()
		old := sandbox.NewManager(&sandboxtest.Provider{}, sandbox.ManagerConfig{Registry: reg, Node: "a"}, nil)
		kept := acquire(t, old, sandbox.AcquireRequest{Identity: "alice"})
		keptID := kept.ContainerID()
		kept.Release()
		sess := acquire(t, old, sandbox.AcquireRequest{Identity: "alice", Session: "s"})
		sessID := sess.ContainerID()
		sess.Release()
		// A process that dies forgets nothing in a shared Registry: copy what it held.
		var regs []store.Registration
		for _, id := range []string{keptID, sessID} {
			r, _, err := reg.Lookup(ctx, id)
			require.NoError(t, err, "Lookup(%q)", id)
			regs = append(regs, r)
		}
		require.NoError(t, old.Close(ctx), "close the old manager")
		for _, r := range regs {
			require.NoError(t, reg.Add(ctx, r), "re-add %q", r.ID)
		}

		m := newTestManager(t, &sandboxtest.Provider{}, sandbox.ManagerConfig{Registry: reg, Node: "a"})
		list, err := m.Containers(ctx, "alice")
		require.NoError(t, err, "list alice's containers")
		require.Len(t, list, 2, "alice's containers")
		for _, c := range list {
			assert.Equal(t, sandbox.StatusExpired, c.Status, "status of lost container %s", c.ID)
		}
		_, err = m.Acquire(ctx, sandbox.AcquireRequest{Identity: "alice", ContainerID: keptID})
		assert.ErrorIs(t, err, sandbox.ErrExpiredContainer, "acquire a lost container by id")
		l := acquire(t, m, sandbox.AcquireRequest{Identity: "alice", Session: "s"})
		assert.NotEqual(t, sessID, l.ContainerID(), "a lost session's container is replaced")
		l.Release()
	})
}

// TestManagerExpiredElsewhere: a container not in use that another replica marked expired
// in the shared Registry (it took the node for gone) is expired here too, and deleted.
func TestManagerExpiredElsewhere(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		reg := memory.NewRegistry()
		p := &sandboxtest.Provider{}
		m := newTestManager(t, p, sandbox.ManagerConfig{Registry: reg, Node: "a"})
		l := acquire(t, m, sandbox.AcquireRequest{Identity: "alice"})
		run(t, l, "x=1")
		id := l.ContainerID()
		l.Release()
		require.NoError(t, reg.Expire(ctx, id), "another replica expires %s", id)

		_, err := m.Acquire(ctx, sandbox.AcquireRequest{Identity: "alice", ContainerID: id})
		assert.ErrorIs(t, err, sandbox.ErrExpiredContainer, "acquire a container expired elsewhere")
		synctest.Wait()
		assert.True(t, p.Container(0).Deleted(), "the container expired elsewhere is deleted")
		n, _ := m.Load()
		assert.Zero(t, n, "containers held")
	})
}

// countingRegistry counts Lookups.
type countingRegistry struct {
	store.Registry
	lookups atomic.Int64
}

func (r *countingRegistry) Lookup(ctx context.Context, id string) (store.Registration, bool, error) {
	r.lookups.Add(1)
	return r.Registry.Lookup(ctx, id)
}

// TestPrunerReadsOnlyIdleCandidates: the pruner reads from the Registry only the containers this
// Manager has seen idle past their expiry (with a fleet's Redis, one round trip each), not
// every live container on every round; those it expires as before.
func TestPrunerReadsOnlyIdleCandidates(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := &countingRegistry{Registry: memory.NewRegistry()}
		m := newTestManager(t, &sandboxtest.Provider{}, sandbox.ManagerConfig{Registry: reg, SessionIdleTTL: time.Minute})
		ctx := context.Background()
		const n = 8
		for i := range n {
			_, err := m.Create(ctx, sandbox.CreateRequest{Identity: "alice", Name: fmt.Sprint("c", i)})
			require.NoError(t, err, "create")
		}
		before := reg.lookups.Load()
		time.Sleep(50 * time.Second) // several pruner rounds (every 15 s), none idle yet
		assert.Zero(t, reg.lookups.Load()-before, "no container is read while it is in use by this Manager's count")
		list, err := m.Containers(ctx, "alice")
		require.NoError(t, err)
		assert.Len(t, list, n, "all alive")

		time.Sleep(30 * time.Second) // past the expiry: the next rounds read them and expire them
		synctest.Wait()
		assert.GreaterOrEqual(t, reg.lookups.Load()-before, int64(n), "each idle one read once it may be idle")
		for _, c := range list {
			got, err := m.Container(ctx, "alice", c.ID)
			require.NoError(t, err)
			assert.Equal(t, sandbox.StatusExpired, got.Status, "%s expired", c.ID)
		}
	})
}
