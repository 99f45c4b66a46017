// Package storetest checks implementations of package store's interfaces against their
// contracts, for the tests of each implementation.
package storetest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/codeinterp/codeinterp/pkg/store"
)

// TestRegistry checks that the registries newRegistry returns (a new, empty one per call)
// behave as [store.Registry] says. A package with a Registry calls it from a test of its own.
func TestRegistry(t *testing.T, newRegistry func() store.Registry) {
	t.Helper()
	ctx := context.Background()
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	alice := store.Registration{ID: "cntr_a", Identity: "alice", Session: "s", LastUsed: t0}
	ephemeral := store.Registration{ID: "cntr_e", Identity: "alice", LastUsed: t0}

	lookup := func(t *testing.T, r store.Registry, id string) (store.Registration, bool) {
		t.Helper()
		got, ok, err := r.Lookup(ctx, id)
		require.NoError(t, err, "Lookup(%q)", id)
		return got, ok
	}
	session := func(t *testing.T, r store.Registry, identity, name string) (store.Registration, bool) {
		t.Helper()
		got, ok, err := r.Session(ctx, identity, name)
		require.NoError(t, err, "Session(%q, %q)", identity, name)
		return got, ok
	}

	t.Run("empty", func(t *testing.T) {
		r := newRegistry()
		_, ok := lookup(t, r, "cntr_a")
		assert.False(t, ok, "Lookup of an id never added")
		_, ok = session(t, r, "alice", "s")
		assert.False(t, ok, "Session of a key never added")
		assert.NoError(t, r.Touch(ctx, "cntr_a", t0), "Touch of an id never added")
		_, ok = lookup(t, r, "cntr_a")
		assert.False(t, ok, "Touch adds nothing")
		assert.NoError(t, r.Remove(ctx, "cntr_a"), "Remove of an id never added")
	})

	t.Run("add, look up, remove", func(t *testing.T) {
		r := newRegistry()
		require.NoError(t, r.Add(ctx, alice), "Add %+v", alice)
		require.NoError(t, r.Add(ctx, ephemeral), "Add %+v", ephemeral)
		got, ok := lookup(t, r, alice.ID)
		assert.True(t, ok, "Lookup of a session container")
		assert.Equal(t, alice, got, "Lookup of a session container")
		got, ok = lookup(t, r, ephemeral.ID)
		assert.True(t, ok, "Lookup of an ephemeral container")
		assert.Equal(t, ephemeral, got, "Lookup of an ephemeral container")
		got, ok = session(t, r, "alice", "s")
		assert.True(t, ok, "Session of alice's key")
		assert.Equal(t, alice, got, "Session of alice's key")
		_, ok = session(t, r, "bob", "s")
		assert.False(t, ok, "a session key is scoped by its identity")
		_, ok = session(t, r, "alice", "")
		assert.False(t, ok, "an ephemeral container has no session key")

		require.NoError(t, r.Remove(ctx, alice.ID), "Remove")
		_, ok = lookup(t, r, alice.ID)
		assert.False(t, ok, "Lookup after Remove")
		_, ok = session(t, r, "alice", "s")
		assert.False(t, ok, "Session after Remove")
		_, ok = lookup(t, r, ephemeral.ID)
		assert.True(t, ok, "Remove forgets one container only")
		assert.NoError(t, r.Remove(ctx, alice.ID), "Remove again")
	})

	t.Run("hibernating container", func(t *testing.T) {
		r := newRegistry()
		h := store.Registration{ID: "container_h", Identity: "alice", LastUsed: t0, CreatedAt: t0,
			ExpiresAfter: 5 * time.Minute, Lifetime: 30 * 24 * time.Hour}
		require.NoError(t, r.Add(ctx, h), "Add %+v", h)
		got, ok := lookup(t, r, h.ID)
		assert.True(t, ok, "Lookup of a hibernating container")
		assert.Equal(t, h, got, "Lookup keeps its Lifetime")
		h.Hibernated = true
		require.NoError(t, r.Add(ctx, h), "Add %+v", h)
		got, ok = lookup(t, r, h.ID)
		assert.True(t, ok, "Lookup of a hibernated container")
		assert.Equal(t, h, got, "Lookup keeps Hibernated")
	})

	t.Run("touch", func(t *testing.T) {
		r := newRegistry()
		require.NoError(t, r.Add(ctx, alice), "Add %+v", alice)
		t1 := t0.Add(time.Minute)
		require.NoError(t, r.Touch(ctx, alice.ID, t1), "Touch")
		got, _ := lookup(t, r, alice.ID)
		assert.Equal(t, t1, got.LastUsed, "Lookup after Touch")
		got, _ = session(t, r, "alice", "s")
		assert.Equal(t, t1, got.LastUsed, "Session after Touch")
	})

	t.Run("a session key names its latest container", func(t *testing.T) {
		r := newRegistry()
		next := store.Registration{ID: "cntr_b", Identity: "alice", Session: "s", LastUsed: t0}
		require.NoError(t, r.Add(ctx, alice), "Add %+v", alice)
		require.NoError(t, r.Add(ctx, next), "Add %+v", next)
		got, _ := session(t, r, "alice", "s")
		assert.Equal(t, next.ID, got.ID, "the key names the container added last")
		require.NoError(t, r.Remove(ctx, alice.ID), "Remove the one replaced")
		got, ok := session(t, r, "alice", "s")
		assert.True(t, ok, "removing the replaced container leaves the key")
		assert.Equal(t, next.ID, got.ID, "removing the replaced container leaves the key")
		require.NoError(t, r.Remove(ctx, next.ID), "Remove the latest")
		_, ok = session(t, r, "alice", "s")
		assert.False(t, ok, "removing the latest container frees the key")
	})

	t.Run("list", func(t *testing.T) {
		r := newRegistry()
		bob := store.Registration{ID: "cntr_b", Identity: "bob", LastUsed: t0}
		for _, reg := range []store.Registration{alice, ephemeral, bob} {
			require.NoError(t, r.Add(ctx, reg), "Add %+v", reg)
		}
		got, err := r.List(ctx, "alice")
		require.NoError(t, err, "List")
		assert.ElementsMatch(t, []store.Registration{alice, ephemeral}, got, "List of alice")
		got, err = r.List(ctx, "carol")
		require.NoError(t, err, "List")
		assert.Empty(t, got, "List of an identity without containers")
		require.NoError(t, r.Remove(ctx, alice.ID), "Remove")
		got, err = r.List(ctx, "alice")
		require.NoError(t, err, "List")
		assert.Equal(t, []store.Registration{ephemeral}, got, "List after Remove")
	})

	t.Run("expire", func(t *testing.T) {
		r := newRegistry()
		require.NoError(t, r.Add(ctx, alice), "Add %+v", alice)
		require.NoError(t, r.Expire(ctx, alice.ID), "Expire")
		want := alice
		want.Expired = true
		got, ok := lookup(t, r, alice.ID)
		assert.True(t, ok, "Lookup of an expired container")
		assert.Equal(t, want, got, "Lookup of an expired container")
		_, ok = session(t, r, "alice", "s")
		assert.False(t, ok, "an expired container's session key is freed")
		list, err := r.List(ctx, "alice")
		require.NoError(t, err, "List")
		assert.Equal(t, []store.Registration{want}, list, "List shows the expired container")
		assert.NoError(t, r.Expire(ctx, "cntr_none"), "Expire of an id never added")
		_, ok = lookup(t, r, "cntr_none")
		assert.False(t, ok, "Expire adds nothing")

		next := store.Registration{ID: "cntr_n", Identity: "alice", Session: "s", LastUsed: t0}
		require.NoError(t, r.Add(ctx, next), "Add %+v", next)
		require.NoError(t, r.Remove(ctx, alice.ID), "Remove the expired one")
		got, ok = session(t, r, "alice", "s")
		assert.True(t, ok, "removing the expired container leaves the key's new container")
		assert.Equal(t, next.ID, got.ID, "removing the expired container leaves the key's new container")
	})

	t.Run("concurrent use", func(t *testing.T) {
		r := newRegistry()
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Go(func() {
				reg := store.Registration{ID: fmt.Sprintf("cntr_%d", i), Identity: "alice", Session: fmt.Sprint(i)}
				for range 50 {
					assert.NoError(t, r.Add(ctx, reg), "Add %+v", reg)
					_, _, err := r.Session(ctx, "alice", reg.Session)
					assert.NoError(t, err, "Session of %+v", reg)
					assert.NoError(t, r.Touch(ctx, reg.ID, t0), "Touch %+v", reg)
					_, err = r.List(ctx, "alice")
					assert.NoError(t, err, "List")
					assert.NoError(t, r.Expire(ctx, reg.ID), "Expire %+v", reg)
					assert.NoError(t, r.Remove(ctx, reg.ID), "Remove %+v", reg)
				}
			})
		}
		wg.Wait()
	})
}
