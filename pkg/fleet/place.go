package fleet

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/codeinterp/codeinterp/pkg/sandbox"
	"github.com/codeinterp/codeinterp/pkg/store"
)

// place gives a new container to the live nodes in the order of rank, calling try with
// each node's service until one succeeds or fails otherwise than with ErrUnavailable (an
// unreachable node, or one at a cap, passes to the next). It fails with ErrUnavailable when
// no node is live or every node failed so.
func (f *Fleet) place(ctx context.Context, try func(sandbox.Service) error) error {
	nodes, err := f.liveNodes(ctx)
	if err != nil {
		return err
	}
	ranked := f.rank(nodes)
	if len(ranked) == 0 {
		return fmt.Errorf("%w: no sandbox node is live", sandbox.ErrUnavailable)
	}
	var last error
	for _, n := range ranked {
		svc, err := f.serviceOf(n)
		if err == nil {
			err = try(svc)
		}
		if err == nil {
			f.notePlaced(n.ID)
			return nil
		}
		if !errors.Is(err, sandbox.ErrUnavailable) || errors.Is(err, sandbox.ErrElsewhere) || ctx.Err() != nil {
			return err
		}
		last = err
	}
	return last
}

// candidate is a node as placement weighs it.
type candidate struct {
	n    store.Node
	load int // its containers, with this Fleet's placements it may not have reported yet
}

// full reports whether c holds its Capacity.
func (c candidate) full() bool { return c.load >= c.n.Capacity }

// rank returns the nodes that may take a new container (those reporting a Capacity), best
// first: the nodes below their Capacity before those at it, then by the share of Capacity
// in use, then this node, then by id. The load of another node is what it reported, plus
// the placements this Fleet made there in the last HeartbeatEvery (which its report may
// count already: a node just placed on looks busier for a heartbeat, which spreads a burst
// rather than piling it on the node that reported least). This node is live to itself
// (also before its first heartbeat) and its load is the Local Manager's own count.
func (f *Fleet) rank(nodes []store.Node) []store.Node {
	now := f.cfg.Now()
	if f.cfg.Local != nil {
		if _, ok := find(nodes, f.cfg.Self); !ok {
			nodes = append(slices.Clip(nodes), store.Node{ID: f.cfg.Self, Addr: f.cfg.Addr})
		}
	}
	cands := make([]candidate, 0, len(nodes))
	f.mu.Lock()
	for _, n := range nodes {
		if f.local(n.ID) {
			if lr, ok := f.cfg.Local.(loadReporter); ok {
				n.Containers, n.Capacity = lr.Load()
			}
		}
		if n.Capacity <= 0 {
			continue
		}
		load := n.Containers
		if !f.local(n.ID) {
			load += f.recentLocked(n.ID, now)
		}
		cands = append(cands, candidate{n: n, load: load})
	}
	f.mu.Unlock()
	slices.SortFunc(cands, func(a, b candidate) int {
		if a.full() != b.full() {
			if a.full() {
				return 1
			}
			return -1
		}
		// a.load/a.cap vs b.load/b.cap, in integers.
		if c := cmp.Compare(a.load*b.n.Capacity, b.load*a.n.Capacity); c != 0 {
			return c
		}
		if aSelf, bSelf := f.local(a.n.ID), f.local(b.n.ID); aSelf != bSelf {
			if aSelf {
				return -1
			}
			return 1
		}
		return cmp.Compare(a.n.ID, b.n.ID)
	})
	out := make([]store.Node, len(cands))
	for i, c := range cands {
		out[i] = c.n
	}
	return out
}

// notePlaced records a placement on node id, counted in its load until its reports can
// count it (one HeartbeatEvery).
func (f *Fleet) notePlaced(id string) {
	if f.local(id) {
		return // the Local Manager's own count has it already
	}
	now := f.cfg.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.recentLocked(id, now)
	f.placed[id] = append(f.placed[id], now)
}

// recentLocked drops node id's placements older than HeartbeatEvery and returns how many
// are left.
func (f *Fleet) recentLocked(id string, now time.Time) int {
	ts := f.placed[id]
	i := 0
	for i < len(ts) && now.Sub(ts[i]) >= f.cfg.HeartbeatEvery {
		i++
	}
	if i == len(ts) {
		delete(f.placed, id)
		return 0
	}
	f.placed[id] = ts[i:]
	return len(ts) - i
}
