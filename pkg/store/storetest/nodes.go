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

// NewNodes returns a new, empty directory that reads the time from now.
type NewNodes func(t *testing.T, now func() time.Time) store.Nodes

// TestNodes checks that the directories newNodes returns behave as [store.Nodes] says.
func TestNodes(t *testing.T, newNodes NewNodes) {
	t.Helper()
	ctx := context.Background()
	live := func(t *testing.T, d store.Nodes) []store.Node {
		t.Helper()
		got, err := d.Live(ctx)
		require.NoError(t, err, "Live")
		return got
	}
	a := store.Node{ID: "node-a", Addr: "10.0.0.1:7000", Containers: 3, Capacity: 100}
	b := store.Node{ID: "node-b", Addr: "10.0.0.2:7000", Capacity: 50}

	t.Run("heartbeat, lapse, leave", func(t *testing.T) {
		c := newClock()
		d := newNodes(t, c.Now)
		assert.Empty(t, live(t, d), "Live of an empty directory")
		require.NoError(t, d.Heartbeat(ctx, a, 10*time.Second), "Heartbeat %+v", a)
		require.NoError(t, d.Heartbeat(ctx, b, 30*time.Second), "Heartbeat %+v", b)
		assert.ElementsMatch(t, []store.Node{a, b}, live(t, d), "both nodes are live")

		a2 := a
		a2.Containers = 4
		c.Add(5 * time.Second)
		require.NoError(t, d.Heartbeat(ctx, a2, 10*time.Second), "Heartbeat %+v", a2)
		assert.ElementsMatch(t, []store.Node{a2, b}, live(t, d), "a heartbeat replaces what the node reported")

		c.Add(10 * time.Second)
		assert.ElementsMatch(t, []store.Node{a2, b}, live(t, d), "no heartbeat has lapsed at its deadline")
		c.Add(time.Second)
		assert.ElementsMatch(t, []store.Node{b}, live(t, d), "node-a's heartbeat lapsed")

		require.NoError(t, d.Heartbeat(ctx, a, 10*time.Second), "Heartbeat after a lapse %+v", a)
		assert.ElementsMatch(t, []store.Node{a, b}, live(t, d), "a lapsed node comes back with its next heartbeat")
		require.NoError(t, d.Leave(ctx, b.ID), "Leave")
		assert.ElementsMatch(t, []store.Node{a}, live(t, d), "node-b left")
		require.NoError(t, d.Leave(ctx, b.ID), "Leave again")
		require.NoError(t, d.Leave(ctx, "node-none"), "Leave of a node never seen")
		c.Add(time.Minute)
		assert.Empty(t, live(t, d), "every heartbeat lapsed")
	})

	t.Run("concurrent use", func(t *testing.T) {
		d := newNodes(t, newClock().Now)
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Go(func() {
				n := store.Node{ID: fmt.Sprintf("node-%d", i), Addr: fmt.Sprintf("10.0.0.%d:7000", i)}
				for j := range 50 {
					n.Containers = j
					assert.NoError(t, d.Heartbeat(ctx, n, time.Minute), "Heartbeat %+v", n)
					nodes, err := d.Live(ctx)
					assert.NoError(t, err, "Live")
					assert.Contains(t, nodes, n, "Live after the heartbeat of %s", n.ID)
				}
				assert.NoError(t, d.Leave(ctx, n.ID), "Leave %s", n.ID)
			})
		}
		wg.Wait()
		assert.Empty(t, live(t, d), "every node left")
	})
}
