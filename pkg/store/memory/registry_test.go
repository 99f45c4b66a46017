package memory_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/codeinterp/codeinterp/pkg/sandbox"
	"github.com/codeinterp/codeinterp/pkg/sandbox/sandboxtest"
	"github.com/codeinterp/codeinterp/pkg/store"
	"github.com/codeinterp/codeinterp/pkg/store/memory"
	"github.com/codeinterp/codeinterp/pkg/store/storetest"
)

func TestRegistry(t *testing.T) {
	storetest.TestRegistry(t, func() store.Registry { return memory.NewRegistry() })
}

// TestRegistryUnderManager: the Registry holds the names of what the Manager issued, and
// forgets them with the containers.
func TestRegistryUnderManager(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		reg := memory.NewRegistry()
		m := sandbox.NewManager(&sandboxtest.Provider{}, sandbox.ManagerConfig{Registry: reg}, zaptest.NewLogger(t))
		defer func() { require.NoError(t, m.Close(ctx), "close manager") }()

		s, err := m.Acquire(ctx, sandbox.AcquireRequest{Identity: "alice", Session: "s"})
		require.NoError(t, err, "acquire a session")
		e, err := m.Acquire(ctx, sandbox.AcquireRequest{Identity: ""})
		require.NoError(t, err, "acquire an ephemeral container")
		got, ok, err := reg.Session(ctx, "alice", sandbox.SessionKey("s"))
		require.NoError(t, err, "Session")
		assert.True(t, ok, "the session key is registered")
		assert.Equal(t, store.Registration{ID: s.ContainerID(), Identity: "alice", Session: sandbox.SessionKey("s"), LastUsed: time.Now(),
			CreatedAt: time.Now(), ExpiresAfter: sandbox.DefaultSessionIdleTTL, MemoryLimit: "1g"}, got,
			"the session's registration")
		got, ok, err = reg.Lookup(ctx, e.ContainerID())
		require.NoError(t, err, "Lookup")
		assert.True(t, ok, "the ephemeral container is registered")
		assert.Equal(t, "", got.Identity, "the ephemeral container's identity")

		time.Sleep(time.Minute)
		s.Release()
		got, _, err = reg.Lookup(ctx, s.ContainerID())
		require.NoError(t, err, "Lookup")
		assert.Equal(t, time.Now(), got.LastUsed, "Release records the last use")

		e.Release()
		_, ok, err = reg.Lookup(ctx, e.ContainerID())
		require.NoError(t, err, "Lookup")
		assert.False(t, ok, "a released ephemeral container is forgotten")
		require.NoError(t, m.Close(ctx), "close manager")
		_, ok, err = reg.Session(ctx, "alice", sandbox.SessionKey("s"))
		require.NoError(t, err, "Session")
		assert.False(t, ok, "Close forgets every container")
	})
}
