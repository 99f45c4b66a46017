package sandbox_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"

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
