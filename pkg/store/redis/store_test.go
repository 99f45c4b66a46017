package redis_test

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"

	"github.com/codeinterp/codeinterp/pkg/store"
	"github.com/codeinterp/codeinterp/pkg/store/memory"
	"github.com/codeinterp/codeinterp/pkg/store/redis"
	"github.com/codeinterp/codeinterp/pkg/store/redis/redistest"
	"github.com/codeinterp/codeinterp/pkg/store/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// limits are the defaults of a Store: package memory's.
var limits = storetest.Limits{
	PendingTTL: memory.PendingTTL, AliasTTL: memory.AliasTTL, ContainersTTL: memory.ContainersTTL,
	PendingMaxEntries: memory.PendingMaxEntries, PendingMaxEntriesPerIdentity: memory.PendingMaxEntriesPerIdentity,
	PendingMaxBytesPerIdentity: memory.PendingMaxBytesPerIdentity,
	MaxKeyBytes:                memory.MaxKeyBytes, MaxAliasBytes: memory.MaxAliasBytes,
}

var prefixes atomic.Int64

// stores returns a function that makes empty Stores on one redis-server for t, each under a
// prefix of its own.
func stores(t *testing.T) func(t *testing.T, now func() time.Time) *redis.Store {
	srv := redistest.Start(t)
	return func(t *testing.T, now func() time.Time) *redis.Store {
		return redis.New(srv.Client(), redis.Options{
			Prefix: "t" + strconv.FormatInt(prefixes.Add(1), 10) + ":", Now: now, Log: zaptest.NewLogger(t),
		})
	}
}

func continuations(t *testing.T) storetest.NewContinuations {
	newStore := stores(t)
	return func(t *testing.T, now func() time.Time) store.Continuations { return newStore(t, now) }
}

func TestRegistry(t *testing.T) {
	newStore := stores(t)
	storetest.TestRegistry(t, func() store.Registry { return newStore(t, nil) })
}

func TestPending(t *testing.T) { storetest.TestPending(t, limits, continuations(t)) }

func TestAliases(t *testing.T) { storetest.TestAliases(t, limits, continuations(t)) }

func TestContextContainers(t *testing.T) {
	storetest.TestContextContainers(t, limits, continuations(t))
}

func TestNodes(t *testing.T) {
	newStore := stores(t)
	storetest.TestNodes(t, func(t *testing.T, now func() time.Time) store.Nodes { return newStore(t, now) })
}

// TestCluster runs the contract tests through a Redis Cluster client: every command and script
// reaches the slot of its store's hash tag.
func TestCluster(t *testing.T) {
	srv := redistest.StartCluster(t)
	newStore := func(t *testing.T, now func() time.Time) *redis.Store {
		return redis.New(srv.ClusterClient(), redis.Options{
			Prefix: "t" + strconv.FormatInt(prefixes.Add(1), 10) + ":", Now: now, Log: zaptest.NewLogger(t),
		})
	}
	newContinuations := func(t *testing.T, now func() time.Time) store.Continuations { return newStore(t, now) }
	t.Run("registry", func(t *testing.T) {
		storetest.TestRegistry(t, func() store.Registry { return newStore(t, nil) })
	})
	t.Run("pending", func(t *testing.T) { storetest.TestPending(t, limits, newContinuations) })
	t.Run("aliases", func(t *testing.T) { storetest.TestAliases(t, limits, newContinuations) })
	t.Run("context containers", func(t *testing.T) { storetest.TestContextContainers(t, limits, newContinuations) })
	t.Run("nodes", func(t *testing.T) {
		storetest.TestNodes(t, func(t *testing.T, now func() time.Time) store.Nodes { return newStore(t, now) })
	})
}
