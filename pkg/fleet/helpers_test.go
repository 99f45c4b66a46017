package fleet_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"

	"github.com/codeinterp/codeinterp/pkg/fleet"
	"github.com/codeinterp/codeinterp/pkg/sandbox"
	"github.com/codeinterp/codeinterp/pkg/sandbox/sandboxtest"
	"github.com/codeinterp/codeinterp/pkg/store"
	"github.com/codeinterp/codeinterp/pkg/store/memory"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// memNodes is an in-memory store.Nodes: heartbeats lapse after their ttl (time.Now).
type memNodes struct {
	mu    sync.Mutex
	nodes map[string]memNode
	fail  atomic.Bool   // every call fails with errDown while set
	ttl   time.Duration // the last heartbeat's
	lives atomic.Int32  // calls of Live
}

type memNode struct {
	n     store.Node
	until time.Time
}

var errDown = errors.New("store down")

func newMemNodes() *memNodes { return &memNodes{nodes: map[string]memNode{}} }

func (s *memNodes) Heartbeat(_ context.Context, n store.Node, ttl time.Duration) error {
	if s.fail.Load() {
		return errDown
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nodes[n.ID] = memNode{n: n, until: time.Now().Add(ttl)}
	s.ttl = ttl
	return nil
}

func (s *memNodes) Live(context.Context) ([]store.Node, error) {
	s.lives.Add(1)
	if s.fail.Load() {
		return nil, errDown
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []store.Node
	now := time.Now()
	for _, n := range s.nodes {
		if now.Before(n.until) {
			out = append(out, n.n)
		}
	}
	return out, nil
}

func (s *memNodes) Leave(_ context.Context, id string) error {
	if s.fail.Load() {
		return errDown
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.nodes, id)
	return nil
}

// failingRegistry is a store.Registry whose every call fails with errDown while fail is set.
type failingRegistry struct {
	store.Registry
	fail  atomic.Bool
	calls atomic.Int32 // calls of the methods below
	// staleSessions, while above zero, makes Session answer "none" (a replica that looked
	// before another placed the session), counting down.
	staleSessions atomic.Int32
}

func (r *failingRegistry) Add(ctx context.Context, reg store.Registration) error {
	r.calls.Add(1)
	if r.fail.Load() {
		return errDown
	}
	return r.Registry.Add(ctx, reg)
}

func (r *failingRegistry) Lookup(ctx context.Context, id string) (store.Registration, bool, error) {
	r.calls.Add(1)
	if r.fail.Load() {
		return store.Registration{}, false, errDown
	}
	return r.Registry.Lookup(ctx, id)
}

func (r *failingRegistry) Session(ctx context.Context, identity, session string) (store.Registration, bool, error) {
	r.calls.Add(1)
	if r.fail.Load() {
		return store.Registration{}, false, errDown
	}
	if r.staleSessions.Add(-1) >= 0 {
		return store.Registration{}, false, nil
	}
	return r.Registry.Session(ctx, identity, session)
}

func (r *failingRegistry) List(ctx context.Context, identity string) ([]store.Registration, error) {
	r.calls.Add(1)
	if r.fail.Load() {
		return nil, errDown
	}
	return r.Registry.List(ctx, identity)
}

func (r *failingRegistry) Expire(ctx context.Context, id string) error {
	r.calls.Add(1)
	if r.fail.Load() {
		return errDown
	}
	return r.Registry.Expire(ctx, id)
}

// clock is a settable clock for the Fleets (the age of their cached node lists).
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock past the Fleets' cache of the live nodes.
func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// remote is what Dial returns for a node: its Manager, as a client would reach it, counting
// its Close.
type remote struct {
	sandbox.Service
	closed *atomic.Int32
}

func (r remote) Close() error {
	r.closed.Add(1)
	return nil
}

// cluster is sandbox nodes (a Manager each, over the fake provider) sharing a Registry and
// a Nodes directory, the Fleets of nodes of role "all", and a gateway's Fleet.
type cluster struct {
	reg      *failingRegistry // the Managers'
	view     *failingRegistry // the Fleets', over reg
	nodes    *memNodes
	clock    *clock
	managers map[string]*sandbox.Manager
	prov     map[string]*sandboxtest.Provider
	fleets   map[string]*fleet.Fleet // by node id; "" is the gateway's

	mu       sync.Mutex
	dials    map[string]int  // Dial calls per node
	unreach  map[string]bool // nodes Dial fails to reach
	closedCl atomic.Int32    // clients closed
}

var errUnreachable = errors.New("connection refused")

// newCluster starts nodes "a", "b", … (one per capacity given: its MaxContainers) and
// reports each once in the directory.
func newCluster(t testing.TB, capacities ...int) *cluster {
	t.Helper()
	return newClusterWith(t, nil, capacities...)
}

// newClusterWith is newCluster with each node's ManagerConfig edited by configure (when set).
func newClusterWith(t testing.TB, configure func(id string, cfg *sandbox.ManagerConfig), capacities ...int) *cluster {
	t.Helper()
	c := &cluster{
		reg:      &failingRegistry{Registry: memory.NewRegistry()},
		nodes:    newMemNodes(),
		clock:    &clock{t: time.Now()},
		managers: map[string]*sandbox.Manager{},
		prov:     map[string]*sandboxtest.Provider{},
		fleets:   map[string]*fleet.Fleet{},
		dials:    map[string]int{},
		unreach:  map[string]bool{},
	}
	c.view = &failingRegistry{Registry: c.reg}
	for i, capacity := range capacities {
		id := string(rune('a' + i))
		p := &sandboxtest.Provider{}
		mcfg := sandbox.ManagerConfig{
			Registry: c.reg, Node: id, MaxContainers: capacity, MaxContainersPerIdentity: capacity,
		}
		if configure != nil {
			configure(id, &mcfg)
		}
		m := sandbox.NewManager(p, mcfg, zaptest.NewLogger(t).Named(id))
		t.Cleanup(func() { require.NoError(t, m.Close(context.Background()), "close manager %s", id) })
		c.managers[id], c.prov[id] = m, p
	}
	for _, id := range append(c.ids(), "") {
		cfg := fleet.Config{
			Self: id, Addr: id + ":7000", Registry: c.view, Nodes: c.nodes, Dial: c.dial,
			Log: zaptest.NewLogger(t), Now: c.clock.Now,
		}
		if id != "" {
			cfg.Local = c.managers[id]
		}
		f := fleet.New(cfg)
		t.Cleanup(func() { require.NoError(t, f.Close(), "close fleet %q", id) })
		c.fleets[id] = f
	}
	c.beat(t)
	return c
}

// ids returns the nodes' ids in order.
func (c *cluster) ids() []string {
	var ids []string
	for i := range len(c.managers) {
		ids = append(ids, string(rune('a'+i)))
	}
	return ids
}

func (c *cluster) dial(n store.Node) (sandbox.Service, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dials[n.ID]++
	if c.unreach[n.ID] {
		return nil, errUnreachable
	}
	m := c.managers[n.ID]
	if m == nil || n.Addr != n.ID+":7000" {
		return nil, errUnreachable
	}
	return remote{Service: m, closed: &c.closedCl}, nil
}

// beat reports every node in the directory with its Manager's load, as Run does, and moves
// the clock past the Fleets' caches.
func (c *cluster) beat(t testing.TB) {
	t.Helper()
	for id, m := range c.managers {
		n := store.Node{ID: id, Addr: id + ":7000"}
		n.Containers, n.Capacity = m.Load()
		require.NoError(t, c.nodes.Heartbeat(context.Background(), n, time.Hour), "heartbeat %s", id)
	}
	c.clock.Advance(2 * time.Second)
}

// owner returns the node the Registry names as container id's owner.
func (c *cluster) owner(t *testing.T, id string) string {
	t.Helper()
	r, ok, err := c.reg.Lookup(context.Background(), id)
	require.NoError(t, err, "Lookup(%q)", id)
	require.True(t, ok, "Lookup(%q)", id)
	return r.Owner
}

func acquire(t *testing.T, s sandbox.Service, r sandbox.AcquireRequest) *sandbox.Lease {
	t.Helper()
	l, err := s.Acquire(context.Background(), r)
	require.NoError(t, err, "acquire %+v", r)
	return l
}

func run(t *testing.T, l *sandbox.Lease, code string) sandbox.Result {
	t.Helper()
	res, err := l.Run(context.Background(), code, 0)
	require.NoError(t, err, "run %q", code)
	return res
}

func create(t *testing.T, s sandbox.Service, identity string) sandbox.ContainerInfo {
	t.Helper()
	info, err := s.Create(context.Background(), sandbox.CreateRequest{Identity: identity, Name: "n"})
	require.NoError(t, err, "create a container of %q", identity)
	return info
}

func readFile(t *testing.T, s sandbox.Service, identity, id, fileID string) string {
	t.Helper()
	rc, _, err := s.OpenFile(context.Background(), identity, id, fileID)
	require.NoError(t, err, "open file %s of %s", fileID, id)
	defer rc.Close()
	b, err := io.ReadAll(rc)
	require.NoError(t, err, "read file %s of %s", fileID, id)
	return string(b)
}

func putFile(t *testing.T, s sandbox.Service, identity, id, path, text string) sandbox.FileInfo {
	t.Helper()
	fi, err := s.PutFile(context.Background(), identity, id, path, "", strings.NewReader(text), 0)
	require.NoError(t, err, "put %s into %s", path, id)
	return fi
}
