package memory

import (
	"context"
	"sync"
	"time"

	"github.com/codeinterp/codeinterp/pkg/store"
)

// Nodes is the in-memory [store.Nodes]: the directory of one process's sandbox nodes, for tests
// and a single process. Safe for concurrent use.
type Nodes struct {
	now func() time.Time // the clock, replaced by tests

	mu    sync.Mutex // guards nodes
	nodes map[string]liveNode
}

type liveNode struct {
	node     store.Node
	deadline time.Time
}

var _ store.Nodes = (*Nodes)(nil)

// NewNodes returns an empty directory.
func NewNodes() *Nodes {
	return &Nodes{now: time.Now, nodes: map[string]liveNode{}}
}

// Heartbeat implements [store.Nodes].
func (d *Nodes) Heartbeat(_ context.Context, n store.Node, ttl time.Duration) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.nodes[n.ID] = liveNode{node: n, deadline: d.now().Add(ttl)}
	return nil
}

// Live implements [store.Nodes]; it forgets the nodes whose heartbeat has lapsed.
func (d *Nodes) Live(context.Context) ([]store.Node, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := d.now()
	out := make([]store.Node, 0, len(d.nodes))
	for id, n := range d.nodes {
		if now.After(n.deadline) {
			delete(d.nodes, id)
			continue
		}
		out = append(out, n.node)
	}
	return out, nil
}

// Leave implements [store.Nodes].
func (d *Nodes) Leave(_ context.Context, id string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.nodes, id)
	return nil
}
