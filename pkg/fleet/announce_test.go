package fleet_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/codeinterp/codeinterp/pkg/fleet"
	"github.com/codeinterp/codeinterp/pkg/sandbox"
	"github.com/codeinterp/codeinterp/pkg/sandbox/sandboxtest"
	"github.com/codeinterp/codeinterp/pkg/store"
	"github.com/codeinterp/codeinterp/pkg/store/memory"
)

// TestFleetRun: Run reports the node at once and every HeartbeatEvery with its Manager's
// load, each report live for HeartbeatsPerTTL heartbeats, keeps going through a failing
// directory, and leaves the directory when stopped.
func TestFleetRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		reg, nodes := memory.NewRegistry(), newMemNodes()
		m := sandbox.NewManager(&sandboxtest.Provider{}, sandbox.ManagerConfig{Registry: reg, Node: "a", MaxContainers: 5}, zaptest.NewLogger(t))
		defer func() { require.NoError(t, m.Close(ctx), "close manager") }()
		f := fleet.New(fleet.Config{Self: "a", Addr: "10.0.0.1:7000", Local: m, Registry: reg, Nodes: nodes, Log: zaptest.NewLogger(t)})
		defer func() { require.NoError(t, f.Close(), "close fleet") }()

		runCtx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- f.Run(runCtx) }()
		synctest.Wait()
		live := func() []store.Node {
			t.Helper()
			n, err := nodes.Live(ctx)
			require.NoError(t, err, "Live")
			return n
		}
		assert.Equal(t, []store.Node{{ID: "a", Addr: "10.0.0.1:7000", Capacity: 5}}, live(), "reported at once")
		nodes.mu.Lock()
		assert.Equal(t, fleet.HeartbeatsPerTTL*fleet.DefaultHeartbeatEvery, nodes.ttl, "a report's ttl")
		nodes.mu.Unlock()

		l := acquire(t, f, sandbox.AcquireRequest{Identity: "alice", Session: "s"})
		defer l.Release()
		time.Sleep(fleet.DefaultHeartbeatEvery)
		synctest.Wait()
		assert.Equal(t, []store.Node{{ID: "a", Addr: "10.0.0.1:7000", Containers: 1, Capacity: 5}}, live(), "reported again with its container")

		nodes.fail.Store(true)
		time.Sleep(2 * fleet.DefaultHeartbeatEvery)
		synctest.Wait()
		nodes.fail.Store(false)
		time.Sleep(fleet.DefaultHeartbeatEvery)
		synctest.Wait()
		assert.Len(t, live(), 1, "reported again once the directory answers")

		stop()
		require.NoError(t, <-done, "Run's end")
		assert.Empty(t, live(), "left the directory")
	})
}

// TestFleetRunNothingToAnnounce: a gateway's Run returns at once; a Local that does not
// report its load cannot be announced.
func TestFleetRunNothingToAnnounce(t *testing.T) {
	nodes := newMemNodes()
	gw := fleet.New(fleet.Config{Registry: memory.NewRegistry(), Nodes: nodes})
	assert.NoError(t, gw.Run(context.Background()), "a gateway's Run")

	m := sandbox.NewManager(&sandboxtest.Provider{}, sandbox.ManagerConfig{}, nil)
	defer func() { require.NoError(t, m.Close(context.Background()), "close manager") }()
	f := fleet.New(fleet.Config{Self: "a", Local: struct{ sandbox.Service }{m}, Registry: memory.NewRegistry(), Nodes: nodes})
	assert.Error(t, f.Run(context.Background()), "Run of a Local without Load")
	assert.Empty(t, nodes.nodes, "nothing announced")
}
