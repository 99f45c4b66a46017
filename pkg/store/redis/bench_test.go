package redis_test

import (
	"context"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/codeinterp/codeinterp/pkg/store"
	"github.com/codeinterp/codeinterp/pkg/store/redis"
	"github.com/codeinterp/codeinterp/pkg/store/redis/redistest"
)

// roundTrips is a go-redis hook that counts the round trips to Redis: a command, or a pipeline
// of them.
type roundTrips struct{ n atomic.Int64 }

func (r *roundTrips) DialHook(next goredis.DialHook) goredis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) { return next(ctx, network, addr) }
}

func (r *roundTrips) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		r.n.Add(1)
		return next(ctx, cmd)
	}
}

func (r *roundTrips) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		r.n.Add(1)
		return next(ctx, cmds)
	}
}

// BenchmarkStore measures the hot calls against a real redis-server on loopback: ns/op, and
// round trips per call (roundtrips/op; the scripts are loaded before the timer starts).
//
//	go test -run '^$' -bench . -benchtime 2000x ./pkg/store/redis/
func BenchmarkStore(b *testing.B) {
	ctx := context.Background()
	srv := redistest.Start(b)
	c := redis.NewClient(goredis.UniversalOptions{Addrs: []string{srv.Addr()}})
	b.Cleanup(func() { _ = c.Close() })
	rt := &roundTrips{}
	c.AddHook(rt)
	s := redis.New(c, redis.Options{})

	reg := store.Registration{ID: "cntr_bench", Identity: "alice", Session: "s", LastUsed: time.Now(), CreatedAt: time.Now(),
		ExpiresAfter: 20 * time.Minute, MemoryLimit: "1g", Owner: "node-a"}
	require.NoError(b, s.Add(ctx, reg), "Add")
	calls := []store.PendingCall{{CallID: "call_1", Arguments: `{"code":"print(6*7)"}`, Output: "42\n"}}
	k := store.Key{Kind: "response", ID: "resp_bench"}
	s.Put("alice", calls, k)
	s.PutAlias("alice", "resp_bench", "resp_up")
	s.PutContainers("alice", []string{"cntr_bench"}, k)
	require.NoError(b, s.Heartbeat(ctx, store.Node{ID: "node-a", Addr: "10.0.0.1:7000"}, time.Minute), "Heartbeat")
	// Load every script once, so that no EVAL after a NOSCRIPT is counted.
	_, _, _ = s.Session(ctx, "alice", "s")
	_, _ = s.List(ctx, "alice")
	_ = s.Touch(ctx, reg.ID, time.Now())
	_ = s.Holds("response")
	s.Drop("alice", store.Key{Kind: "response", ID: "none"})
	_, _ = s.Live(ctx)

	bench := func(name string, f func(i int)) {
		b.Run(name, func(b *testing.B) {
			before := rt.n.Load()
			i := 0
			for b.Loop() {
				f(i)
				i++
			}
			b.ReportMetric(float64(rt.n.Load()-before)/float64(i), "roundtrips/op")
		})
	}
	bench("PING", func(int) { // the floor: one round trip doing nothing
		if err := c.Ping(ctx).Err(); err != nil {
			b.Fatalf("PING: %v", err)
		}
	})
	bench("Lookup", func(int) {
		if _, ok, err := s.Lookup(ctx, reg.ID); err != nil || !ok {
			b.Fatalf("Lookup: %v, %v", ok, err)
		}
	})
	bench("Session", func(int) {
		if _, ok, err := s.Session(ctx, "alice", "s"); err != nil || !ok {
			b.Fatalf("Session: %v, %v", ok, err)
		}
	})
	bench("Touch", func(int) {
		if err := s.Touch(ctx, reg.ID, time.Now()); err != nil {
			b.Fatalf("Touch: %v", err)
		}
	})
	bench("Add", func(int) {
		if err := s.Add(ctx, reg); err != nil {
			b.Fatalf("Add: %v", err)
		}
	})
	bench("List", func(int) {
		if _, err := s.List(ctx, "alice"); err != nil {
			b.Fatalf("List: %v", err)
		}
	})
	bench("PendingPut", func(i int) {
		s.Put("id"+strconv.Itoa(i%100), calls, store.Key{Kind: "response", ID: "resp_" + strconv.Itoa(i)})
	})
	bench("PendingGet", func(int) {
		if s.Get("alice", k) == nil {
			b.Fatal("Get: nothing")
		}
	})
	bench("Holds", func(int) { s.Holds("chat_call") })
	bench("Alias", func(int) {
		if s.Alias("alice", "resp_bench") == "" {
			b.Fatal("Alias: nothing")
		}
	})
	bench("Containers", func(int) {
		if s.Containers("alice", k) == nil {
			b.Fatal("Containers: nothing")
		}
	})
	bench("Heartbeat", func(int) {
		if err := s.Heartbeat(ctx, store.Node{ID: "node-a", Addr: "10.0.0.1:7000"}, time.Minute); err != nil {
			b.Fatalf("Heartbeat: %v", err)
		}
	})
	bench("Live", func(int) {
		if _, err := s.Live(ctx); err != nil {
			b.Fatalf("Live: %v", err)
		}
	})
}
