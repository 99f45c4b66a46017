package sandbox_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/codeinterp/codeinterp/pkg/sandbox"
	"github.com/codeinterp/codeinterp/pkg/sandbox/sandboxtest"
	"github.com/codeinterp/codeinterp/pkg/store/memory"
)

// TestManagerGlobalCapSparesLighterTenants: at MaxContainers, a tenant cannot evict the idle
// containers of tenants holding no more than it does, however long unused: it makes room from
// its own, and a lighter tenant makes room from the heaviest one's.
func TestManagerGlobalCapSparesLighterTenants(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newTestManager(t, &sandboxtest.Provider{}, sandbox.ManagerConfig{
			MaxContainers: 4, MaxContainersPerIdentity: 3, MaxSessionsPerIdentity: 3})
		alice := create(t, m, sandbox.CreateRequest{Identity: "alice"})
		time.Sleep(time.Second)
		carol := create(t, m, sandbox.CreateRequest{Identity: "carol"})
		time.Sleep(time.Second)
		bob1 := create(t, m, sandbox.CreateRequest{Identity: "bob"})
		time.Sleep(time.Second)
		bob2 := create(t, m, sandbox.CreateRequest{Identity: "bob"})
		time.Sleep(time.Second)

		// Bob, holding the most, at the global cap: his own least recently used goes.
		bob3 := create(t, m, sandbox.CreateRequest{Identity: "bob"})
		assert.Equal(t, sandbox.StatusRunning, info(t, m, "alice", alice.ID).Status, "alice's idle container, the oldest, kept")
		assert.Equal(t, sandbox.StatusRunning, info(t, m, "carol", carol.ID).Status, "carol's kept")
		assert.Equal(t, sandbox.StatusExpired, info(t, m, "bob", bob1.ID).Status, "bob's own oldest made room")
		time.Sleep(time.Second)

		// Dave, holding none: the heaviest tenant's least recently used goes.
		create(t, m, sandbox.CreateRequest{Identity: "dave"})
		assert.Equal(t, sandbox.StatusExpired, info(t, m, "bob", bob2.ID).Status, "bob's oldest made room for dave's")
		assert.Equal(t, sandbox.StatusRunning, info(t, m, "bob", bob3.ID).Status, "bob's newest kept")
		assert.Equal(t, sandbox.StatusRunning, info(t, m, "alice", alice.ID).Status, "alice's kept")
		assert.Equal(t, sandbox.StatusRunning, info(t, m, "carol", carol.ID).Status, "carol's kept")
	})
}

// TestManagerAtCapacity: a refusal because a cap is reached and every container is in use is
// ErrAtCapacity, which also matches ErrUnavailable; a failed start or a Registry failure is
// ErrUnavailable alone.
func TestManagerAtCapacity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		reg := &brokenRegistry{Registry: memory.NewRegistry()}
		p := &sandboxtest.Provider{}
		m := newTestManager(t, p, sandbox.ManagerConfig{Registry: reg,
			MaxContainers: 4, MaxContainersPerIdentity: 2, MaxSessionsPerIdentity: 2})
		errOf := func(_ any, err error) error { return err }

		// Alice's kept container is deleted under her lease: its replacement needs a place.
		gone := acquire(t, m, sandbox.AcquireRequest{Identity: "alice"})
		require.NoError(t, m.DeleteContainer(ctx, "alice", gone.ContainerID()), "DeleteContainer")
		s1 := acquire(t, m, sandbox.AcquireRequest{Identity: "alice", Session: "s1"})
		s2 := acquire(t, m, sandbox.AcquireRequest{Identity: "alice"})
		sessionsFull := errOf(m.Acquire(ctx, sandbox.AcquireRequest{Identity: "alice", Session: "s3"}))
		keptFull := errOf(m.Acquire(ctx, sandbox.AcquireRequest{Identity: "alice"}))
		createFull := errOf(m.Create(ctx, sandbox.CreateRequest{Identity: "alice"}))
		putFull := errOf(gone.PutFile(ctx, "/mnt/data/a", "", strings.NewReader("a"), 0))
		runFull := errOf(gone.Run(ctx, "x=1", 0))
		b1 := acquire(t, m, sandbox.AcquireRequest{Identity: "bob"})
		b2 := acquire(t, m, sandbox.AcquireRequest{Identity: "bob"})
		globalFull := errOf(m.Acquire(ctx, sandbox.AcquireRequest{}))
		globalCreateFull := errOf(m.Create(ctx, sandbox.CreateRequest{Identity: "carol"}))

		// Not a cap: the start fails, or the Registry does.
		b2.Release() // idle, not started
		p.FailCreate(errors.New("no bwrap"))
		startFailed := errOf(s1.Run(ctx, "x=1", 0))
		putStartFailed := errOf(m.PutFile(ctx, "bob", b2.ContainerID(), "/mnt/data/a", "", strings.NewReader("a"), 0))
		p.FailCreate(nil)
		anonymousCreate := errOf(m.Create(ctx, sandbox.CreateRequest{}))
		reg.broken.Store(true)
		registryLookup := errOf(m.Acquire(ctx, sandbox.AcquireRequest{Identity: "alice", Session: "s1"}))
		// At the global cap bob's idle container could make room, but its last use is unknown.
		registryEvict := errOf(m.Acquire(ctx, sandbox.AcquireRequest{Identity: "carol"}))
		reg.broken.Store(false)

		tests := []struct {
			name       string
			give       error
			atCapacity bool
		}{
			{"Acquire of a session beyond MaxSessionsPerIdentity", sessionsFull, true},
			{"Acquire of a kept container beyond the identity's caps", keptFull, true},
			{"Create beyond the identity's caps", createFull, true},
			{"Lease.PutFile into a replacement beyond the caps", putFull, true},
			{"Lease.Run in a replacement beyond the caps", runFull, true},
			{"Acquire beyond MaxContainers", globalFull, true},
			{"Create beyond MaxContainers", globalCreateFull, true},
			{"Run whose start fails", startFailed, false},
			{"PutFile whose start fails", putStartFailed, false},
			{"Create for the anonymous identity", anonymousCreate, false},
			{"Acquire when the Registry fails", registryLookup, false},
			{"Acquire at a cap when the Registry fails", registryEvict, false},
		}
		for _, tt := range tests {
			assert.ErrorIs(t, tt.give, sandbox.ErrUnavailable, "%s", tt.name)
			assert.Equal(t, tt.atCapacity, errors.Is(tt.give, sandbox.ErrAtCapacity), "%s: ErrAtCapacity? %v", tt.name, tt.give)
		}
		again := acquire(t, m, sandbox.AcquireRequest{Identity: "carol"})
		assert.Equal(t, sandbox.StatusExpired, info(t, m, "bob", b2.ContainerID()).Status, "once the Registry answers, bob's idle container makes room")
		for _, l := range []*sandbox.Lease{gone, s1, s2, b1, again} {
			l.Release()
		}
	})
}
