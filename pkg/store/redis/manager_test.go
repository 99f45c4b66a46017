package redis_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/codeinterp/codeinterp/pkg/sandbox"
	"github.com/codeinterp/codeinterp/pkg/sandbox/sandboxtest"
	"github.com/codeinterp/codeinterp/pkg/store/redis"
	"github.com/codeinterp/codeinterp/pkg/store/redis/redistest"
)

func TestDefaultTombstoneTTL(t *testing.T) {
	assert.Equal(t, sandbox.TombstoneTTL, redis.DefaultTombstoneTTL, "a tombstone lives as long in Redis as the Manager keeps it")
}

// TestRegistryUnderManager: a sandbox Manager keeps the names of what it issued in Redis, where
// another Store on the same Redis (another replica) finds them, and forgets them with the
// containers.
func TestRegistryUnderManager(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	reg := redis.New(srv.Client(), redis.Options{})
	other := redis.New(srv.Client(), redis.Options{})
	m := sandbox.NewManager(&sandboxtest.Provider{}, sandbox.ManagerConfig{Registry: reg}, zaptest.NewLogger(t))
	defer func() { require.NoError(t, m.Close(ctx), "close manager") }()

	s, err := m.Acquire(ctx, sandbox.AcquireRequest{Identity: "alice", Session: "s"})
	require.NoError(t, err, "acquire a session")
	e, err := m.Acquire(ctx, sandbox.AcquireRequest{Identity: ""})
	require.NoError(t, err, "acquire an ephemeral container")
	got, ok, err := other.Session(ctx, "alice", sandbox.SessionKey("s"))
	require.NoError(t, err, "Session")
	require.True(t, ok, "another replica finds the session key")
	assert.Equal(t, s.ContainerID(), got.ID, "the session's container")
	assert.Equal(t, "alice", got.Identity, "the session's identity")
	assert.Equal(t, sandbox.DefaultSessionIdleTTL, got.ExpiresAfter, "the session's idle expiry")
	assert.Equal(t, "1g", got.MemoryLimit, "the session's memory")
	assert.WithinDuration(t, time.Now(), got.CreatedAt, time.Minute, "the session's creation")
	_, ok, err = other.Lookup(ctx, e.ContainerID())
	require.NoError(t, err, "Lookup")
	assert.True(t, ok, "another replica finds the ephemeral container")

	before := got.LastUsed
	time.Sleep(10 * time.Millisecond)
	s.Release()
	got, _, err = other.Lookup(ctx, s.ContainerID())
	require.NoError(t, err, "Lookup")
	assert.True(t, got.LastUsed.After(before), "Release records the last use: %v after %v", got.LastUsed, before)

	e.Release()
	_, ok, err = other.Lookup(ctx, e.ContainerID())
	require.NoError(t, err, "Lookup")
	assert.False(t, ok, "a released ephemeral container is forgotten")

	list, err := m.Containers(ctx, "alice")
	require.NoError(t, err, "Containers")
	assert.Len(t, list, 1, "the Manager lists alice's container from Redis")
	require.NoError(t, m.DeleteContainer(ctx, "alice", s.ContainerID()), "DeleteContainer")
	got, ok, err = other.Lookup(ctx, s.ContainerID())
	require.NoError(t, err, "Lookup")
	assert.True(t, ok && got.Expired, "a deleted container leaves a tombstone: %+v", got)
	_, ok, err = other.Session(ctx, "alice", sandbox.SessionKey("s"))
	require.NoError(t, err, "Session")
	assert.False(t, ok, "a deleted container's session key is freed")
}
