package redis_test

import (
	"context"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/codeinterp/codeinterp/pkg/sandbox"
	"github.com/codeinterp/codeinterp/pkg/store"
	"github.com/codeinterp/codeinterp/pkg/store/redis"
	"github.com/codeinterp/codeinterp/pkg/store/redis/redistest"
)

// TestFaults: with Redis stopped, the Registry and Nodes calls fail within the timeout and the
// continuation calls find nothing (logging once, not once per call); once Redis is back every
// call works again through the same client, its scripts loaded anew.
func TestFaults(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	core, logs := observer.New(zap.WarnLevel)
	const timeout = 500 * time.Millisecond
	s := redis.New(srv.Client(), redis.Options{Log: zap.New(core), Timeout: timeout})
	reg := store.Registration{ID: "cntr_1", Identity: "alice", Session: "s"}
	calls := []store.PendingCall{{CallID: "call_1", Output: "42\n"}}
	k := store.Key{Kind: "response", ID: "resp_1"}
	require.NoError(t, s.Add(ctx, reg), "Add with Redis up")
	s.Put("alice", calls, k)
	require.Equal(t, calls, s.Get("alice", k), "Get with Redis up")

	bounded := func(t *testing.T, name string, f func()) {
		t.Helper()
		start := time.Now()
		f()
		assert.Less(t, time.Since(start), timeout+250*time.Millisecond, "%s is bounded by the timeout", name)
	}
	checkDown := func(t *testing.T) {
		t.Helper()
		bounded(t, "Lookup", func() {
			_, _, err := s.Lookup(ctx, reg.ID)
			assert.Error(t, err, "Lookup with Redis down")
		})
		bounded(t, "Add", func() { assert.Error(t, s.Add(ctx, reg), "Add with Redis down") })
		bounded(t, "Session", func() {
			_, _, err := s.Session(ctx, "alice", "s")
			assert.Error(t, err, "Session with Redis down")
		})
		bounded(t, "Touch", func() { assert.Error(t, s.Touch(ctx, reg.ID, time.Now()), "Touch with Redis down") })
		bounded(t, "Live", func() {
			_, err := s.Live(ctx)
			assert.Error(t, err, "Live with Redis down")
		})
		bounded(t, "Get", func() { assert.Nil(t, s.Get("alice", k), "Get with Redis down") })
		bounded(t, "Put", func() { s.Put("alice", calls, k) })
		bounded(t, "Holds", func() { assert.False(t, s.Holds("response"), "Holds with Redis down") })
		bounded(t, "Alias", func() { assert.Empty(t, s.Alias("alice", "resp_1"), "Alias with Redis down") })
		bounded(t, "Containers", func() { assert.Nil(t, s.Containers("alice", k), "Containers with Redis down") })
	}

	t.Run("stopped", func(t *testing.T) {
		srv.Stop()
		checkDown(t)
		logs.TakeAll()
		start := time.Now()
		for range 50 {
			assert.Nil(t, s.Get("alice", k), "Get with Redis down")
		}
		assert.LessOrEqual(t, logs.Len(), 1+int(time.Since(start)/time.Second), "failures are logged once a second at most: %v", logs.All())
	})
	t.Run("restarted", func(t *testing.T) {
		srv.Restart()
		var ok bool
		// go-redis probes a Redis it could not dial once a second.
		require.Eventually(t, func() bool {
			var err error
			_, ok, err = s.Lookup(ctx, reg.ID)
			return err == nil
		}, 3*time.Second, 50*time.Millisecond, "Lookup works again after the restart")
		assert.False(t, ok, "a restarted Redis that persists nothing has lost the registration")
		require.NoError(t, s.Add(ctx, reg), "Add after the restart (the scripts are loaded again)")
		got, ok, err := s.Session(ctx, "alice", "s")
		require.NoError(t, err, "Session after the restart")
		assert.True(t, ok, "Session after the restart")
		assert.Equal(t, reg, got, "Session after the restart")
		s.Put("alice", calls, k)
		assert.Equal(t, calls, s.Get("alice", k), "Get after the restart")
	})
	t.Run("hung", func(t *testing.T) {
		srv.Pause()
		checkDown(t)
		srv.Resume()
		_, ok, err := s.Lookup(ctx, reg.ID)
		require.NoError(t, err, "Lookup once Redis answers again")
		assert.True(t, ok, "the registration outlived the pause")
		assert.Equal(t, calls, s.Get("alice", k), "Get once Redis answers again")
	})
}

// TestTTLs: every key a Store writes has a native TTL; a live registration's is its idle
// expiry and the tombstone TTL, renewed by Touch, and a tombstone's the tombstone TTL.
func TestTTLs(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	c := srv.Client()
	s := redis.New(c, redis.Options{})
	k := store.Key{Kind: "response", ID: "resp_1"}
	s.Put("alice", []store.PendingCall{{CallID: "c", Output: "1"}}, k)
	s.PutAlias("alice", "resp_1", "resp_up")
	s.PutContainers("alice", []string{"cntr_1"}, k)
	reg := store.Registration{ID: "cntr_1", Identity: "alice", Session: "s", ExpiresAfter: time.Hour}
	require.NoError(t, s.Add(ctx, reg), "Add")
	require.NoError(t, s.Heartbeat(ctx, store.Node{ID: "n1"}, time.Second), "Heartbeat")

	keys, err := c.Keys(ctx, "*").Result() // a test may list keys; the Store never does
	require.NoError(t, err, "KEYS")
	assert.Len(t, keys, 7+2+2+3+2, "the keys of every store (pending, aliases, context containers, registry, nodes): %q", keys)
	for _, key := range keys {
		assert.Positive(t, c.PTTL(ctx, key).Val(), "key %q has a TTL", key)
	}
	record := "codeinterp:{registry}:c:cntr_1"
	live := sandbox.TombstoneTTL + time.Hour
	assert.InDelta(t, live, c.PTTL(ctx, record).Val(), float64(time.Minute), "a live registration's TTL")
	require.NoError(t, c.PExpire(ctx, record, time.Minute).Err(), "PEXPIRE")
	require.NoError(t, s.Touch(ctx, reg.ID, time.Now()), "Touch")
	assert.InDelta(t, live, c.PTTL(ctx, record).Val(), float64(time.Minute), "Touch renews the TTL")

	require.NoError(t, s.Expire(ctx, reg.ID), "Expire")
	assert.InDelta(t, sandbox.TombstoneTTL, c.PTTL(ctx, record).Val(), float64(time.Minute), "a tombstone's TTL")
	require.NoError(t, s.Touch(ctx, reg.ID, time.Now()), "Touch of a tombstone")
	assert.InDelta(t, sandbox.TombstoneTTL, c.PTTL(ctx, record).Val(), float64(time.Minute), "Touch leaves a tombstone's TTL")
	require.NoError(t, s.Remove(ctx, reg.ID), "Remove")
	left, err := c.Keys(ctx, "codeinterp:{registry}:*").Result()
	require.NoError(t, err, "KEYS")
	assert.Empty(t, left, "Remove of the last container leaves nothing of the registry")
}

// TestDeadlinesWarned: a Store over a client that ignores call deadlines says so once, at New.
func TestDeadlinesWarned(t *testing.T) {
	core, logs := observer.New(zap.WarnLevel)
	c := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"})
	defer func() { _ = c.Close() }()
	redis.New(c, redis.Options{Log: zap.New(core)})
	assert.Equal(t, 1, logs.FilterMessageSnippet("ignores call deadlines").Len(), "the warning for a default client")
	nc := redis.NewClient(goredis.UniversalOptions{Addrs: []string{"127.0.0.1:1"}})
	defer func() { _ = nc.Close() }()
	redis.New(nc, redis.Options{Log: zap.New(core)})
	assert.Equal(t, 1, logs.FilterMessageSnippet("ignores call deadlines").Len(), "no warning for NewClient's client")
}
