// Package fleet routes every container call of a replica to the sandbox node that owns the
// container, and places new containers on the least loaded live node (issue 25).
//
// A container is owned by the node whose Manager started it: the shared Registry names that
// node as the container's Owner, and the shared Nodes directory lists the live nodes with
// what they hold. A [Fleet] is the [sandbox.Service] a replica serves from: on a node of role
// "all" it has a Local Manager and sends the calls on its own containers there; on a gateway
// (no Local) every call goes to a node through Dial (the sandbox gRPC client). A container
// whose owner has left the directory is lost, with the native semantics: it is marked
// expired, an explicit id fails with sandbox.ErrExpiredContainer, a session gets a fresh
// container placed anew, and a listing shows it expired. An owner that is listed but cannot
// be reached makes the calls on its containers fail with sandbox.ErrUnavailable: only the
// directory decides that a node is gone.
//
// Round trips: on top of what the owner's Manager asks of the Registry, a Fleet makes one
// Registry call per call on an existing container (Lookup, or Session for a session) and
// none for a new container, and asks the directory for the live nodes at most once a second
// (and again when a container's owner is missing from a cached list). A lost container
// marked expired here stays in the Registry until the Registry's own expiry forgets it
// (its owner, which would have, is gone).
//
// Caps: the per-identity caps of ManagerConfig (MaxSessionsPerIdentity,
// MaxContainersPerIdentity) hold per node, not across the fleet: an identity may hold up to
// its caps on every node. The global cap of each node (MaxContainers, reported as its
// Capacity) drives placement.
package fleet

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/codeinterp/codeinterp/pkg/sandbox"
	"github.com/codeinterp/codeinterp/pkg/store"
)

// Config configures a Fleet. Registry, Nodes and Dial are required (Dial may be nil only
// when Local is the only node there will ever be); the rest have working zero values.
type Config struct {
	// Self is this node's id, the Owner the Local Manager writes (its ManagerConfig.Node);
	// "" for a gateway.
	Self string
	// Addr is where this node's sandbox service listens ("host:port"), announced by Run.
	Addr string
	// Local is this node's Manager; nil for a gateway. Run announces it only if it reports
	// its load as *sandbox.Manager does (Load).
	Local sandbox.Service
	// Registry is the fleet's shared container registry (Redis in production).
	Registry store.Registry
	// Nodes is the fleet's shared directory of live sandbox nodes.
	Nodes store.Nodes
	// Dial returns a client for node n's sandbox service. The Fleet caches one client per
	// node and closes it (if it has a Close method) when the node's address changes or at
	// Close.
	Dial func(n store.Node) (sandbox.Service, error)
	// Log receives the failures of the background work (heartbeats); nil logs nothing.
	Log *zap.Logger
	// Now is the clock (time.Now if nil): the age of the cached node list, the placements
	// not yet reported, and idle expiry in listings.
	Now func() time.Time
	// HeartbeatEvery is how often Run reports this node (DefaultHeartbeatEvery if 0); a
	// report lapses after HeartbeatsPerTTL of these.
	HeartbeatEvery time.Duration
}

// DefaultHeartbeatEvery is Config.HeartbeatEvery's default.
const DefaultHeartbeatEvery = 5 * time.Second

// HeartbeatsPerTTL is how many heartbeats a node's report outlives: a node missing this many
// in a row has left the directory, and its containers are lost.
const HeartbeatsPerTTL = 3

// Other bounds of a Fleet.
const (
	// liveCacheFor is how long a list of the live nodes is used before it is asked for
	// again: a node that left is still routed to for at most this long (its calls fail
	// with ErrUnavailable), which saves a round trip to the directory on most calls.
	liveCacheFor = time.Second
	// checkSpecTimeout bounds a gateway's CheckSpec, which has no context of its own.
	checkSpecTimeout = 5 * time.Second
	// leaveTimeout bounds Run's Leave once its context is done.
	leaveTimeout = 5 * time.Second
	// maxAttempts bounds how often a session's Acquire starts over after a race with
	// another replica that placed the same session at the same time.
	maxAttempts = 3
	// defaultMemoryLimit is the memory shown of a container registered without one: the
	// native API's default, as the Manager shows it.
	defaultMemoryLimit = "1g"
)

// loadReporter is what Run needs of Local: *sandbox.Manager's Load.
type loadReporter interface {
	Load() (containers, capacity int)
}

// Fleet routes container calls to their owner nodes and places new containers; see the
// package comment. Safe for concurrent use. Close closes the clients it dialled; Local is
// the caller's to close.
type Fleet struct {
	cfg Config
	log *zap.Logger

	// mu guards the fields below.
	mu      sync.Mutex
	closed  bool
	clients map[string]client // by node id
	live    []store.Node      // the last list of live nodes, asked for at liveAt
	liveAt  time.Time
	// placed are the times of this Fleet's placements per node within the last
	// HeartbeatEvery, which the node's report may not count yet: at most the placements one
	// replica makes in one heartbeat, trimmed on each placement.
	placed map[string][]time.Time
}

// client is a cached client for one node, dialled at addr.
type client struct {
	addr string
	svc  sandbox.Service
}

var _ sandbox.Service = (*Fleet)(nil)

// New returns a Fleet over c. It starts nothing: Run announces the Local node.
func New(c Config) *Fleet {
	if c.Log == nil {
		c.Log = zap.NewNop()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.HeartbeatEvery <= 0 {
		c.HeartbeatEvery = DefaultHeartbeatEvery
	}
	return &Fleet{
		cfg:     c,
		log:     c.Log.Named("fleet"),
		clients: map[string]client{},
		placed:  map[string][]time.Time{},
	}
}

// Close closes every client the Fleet dialled and returns their errors joined; later calls
// that need another node fail with sandbox.ErrClosed. Idempotent.
func (f *Fleet) Close() error {
	f.mu.Lock()
	clients := f.clients
	f.clients = map[string]client{}
	f.closed = true
	f.mu.Unlock()
	var errs []error
	for id, c := range clients {
		if err := closeService(c.svc); err != nil {
			errs = append(errs, fmt.Errorf("close client of node %q: %w", id, err))
		}
	}
	return errors.Join(errs...)
}

// closeService closes svc if it can be closed.
func closeService(svc sandbox.Service) error {
	if c, ok := svc.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// liveNodes returns the live nodes, from the directory or the list asked for less than
// liveCacheFor ago. It fails with ErrUnavailable when the directory does not answer.
func (f *Fleet) liveNodes(ctx context.Context) ([]store.Node, error) {
	now := f.cfg.Now()
	f.mu.Lock()
	if f.live != nil && now.Sub(f.liveAt) < liveCacheFor {
		nodes := f.live
		f.mu.Unlock()
		return nodes, nil
	}
	f.mu.Unlock()
	return f.askLive(ctx, now)
}

// liveNode returns live node id; ok is false when the directory, asked now, does not list
// it (a list from the cache that lacks id is not trusted: the node may have just joined).
func (f *Fleet) liveNode(ctx context.Context, id string) (n store.Node, ok bool, err error) {
	nodes, err := f.liveNodes(ctx)
	if err != nil {
		return store.Node{}, false, err
	}
	if n, ok := find(nodes, id); ok {
		return n, true, nil
	}
	if nodes, err = f.askLive(ctx, f.cfg.Now()); err != nil {
		return store.Node{}, false, err
	}
	n, ok = find(nodes, id)
	return n, ok, nil
}

// askLive asks the directory for the live nodes, and caches the list as of now.
func (f *Fleet) askLive(ctx context.Context, now time.Time) ([]store.Node, error) {
	nodes, err := f.cfg.Nodes.Live(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: list the sandbox nodes: %w", sandbox.ErrUnavailable, err)
	}
	if nodes == nil {
		nodes = []store.Node{}
	}
	f.mu.Lock()
	f.live, f.liveAt = nodes, now
	f.mu.Unlock()
	return nodes, nil
}

// local reports whether node id is this one, served by Local.
func (f *Fleet) local(id string) bool {
	return f.cfg.Local != nil && id == f.cfg.Self
}

// serviceOf returns the service of live node n: Local for this node, otherwise a cached
// client, dialled on first use (and again when n's address changed).
func (f *Fleet) serviceOf(n store.Node) (sandbox.Service, error) {
	if f.local(n.ID) {
		return f.cfg.Local, nil
	}
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil, sandbox.ErrClosed
	}
	if c, ok := f.clients[n.ID]; ok && c.addr == n.Addr {
		f.mu.Unlock()
		return c.svc, nil
	}
	f.mu.Unlock()
	if f.cfg.Dial == nil {
		return nil, fmt.Errorf("%w: no way to reach another sandbox node", sandbox.ErrUnavailable)
	}
	svc, err := f.cfg.Dial(n)
	if err != nil {
		return nil, fmt.Errorf("%w: reach sandbox node %q: %w", sandbox.ErrUnavailable, n.ID, err)
	}
	f.mu.Lock()
	old, had := f.clients[n.ID]
	switch {
	case f.closed:
		f.mu.Unlock()
		f.closeQuietly(n.ID, svc)
		return nil, sandbox.ErrClosed
	case had && old.addr == n.Addr:
		// Dialled by another call meanwhile: keep that one.
		f.mu.Unlock()
		f.closeQuietly(n.ID, svc)
		return old.svc, nil
	}
	f.clients[n.ID] = client{addr: n.Addr, svc: svc}
	f.mu.Unlock()
	if had {
		f.closeQuietly(n.ID, old.svc) // the node moved: its old address is gone
	}
	return svc, nil
}

// closeQuietly closes a client no call uses any more, logging a failure.
func (f *Fleet) closeQuietly(id string, svc sandbox.Service) {
	if err := closeService(svc); err != nil {
		f.log.Warn("close a sandbox node's client", zap.String("node", id), zap.Error(err))
	}
}

// find returns the node of id among nodes.
func find(nodes []store.Node, id string) (store.Node, bool) {
	for _, n := range nodes {
		if n.ID == id {
			return n, true
		}
	}
	return store.Node{}, false
}

// sameIdentity compares identities in constant time, as the Manager does: another
// identity's container is not told apart from one never issued.
func sameIdentity(a, b string) bool {
	return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}

// route returns the service of the node owning container id of identity, and the
// container's registration. It fails with ErrUnknownContainer for an id not issued to
// identity; with ErrExpiredContainer for one expired or lost (its owner has left the
// directory: it is marked expired here), also returning the registration (Expired set),
// except a hibernating or anonymous caller's container, then unknown; and with
// ErrUnavailable when the Registry or the directory fails or the owner cannot be reached.
func (f *Fleet) route(ctx context.Context, identity, id string) (sandbox.Service, store.Registration, error) {
	if id == "" {
		return nil, store.Registration{}, sandbox.ErrUnknownContainer
	}
	r, ok, err := f.cfg.Registry.Lookup(ctx, id)
	if err != nil {
		return nil, store.Registration{}, fmt.Errorf("%w: look up container: %w", sandbox.ErrUnavailable, err)
	}
	if !ok || !sameIdentity(r.Identity, identity) {
		return nil, store.Registration{}, sandbox.ErrUnknownContainer
	}
	// A hibernating container (Anthropic's) gone is unknown, as natively; so is an anonymous
	// caller's (ephemeral, kept only while a run of it is paused), as its owner's Manager
	// answers once it is gone.
	gone := r.Lifetime > 0 || r.Identity == ""
	if r.Expired && gone {
		return nil, store.Registration{}, sandbox.ErrUnknownContainer
	}
	if r.Expired {
		return nil, r, sandbox.ErrExpiredContainer
	}
	svc, err := f.ownerOf(ctx, r)
	if errors.Is(err, sandbox.ErrExpiredContainer) && gone {
		return nil, store.Registration{}, sandbox.ErrUnknownContainer
	}
	if errors.Is(err, sandbox.ErrExpiredContainer) {
		r.Expired = true
		return nil, r, err
	}
	return svc, r, err
}

// ownerOf returns the service of the node owning live registration r. An owner that has
// left the directory has lost r: r is marked expired and ownerOf fails with
// ErrExpiredContainer. This node is its own owner as long as it runs, whatever the directory
// says.
func (f *Fleet) ownerOf(ctx context.Context, r store.Registration) (sandbox.Service, error) {
	if f.local(r.Owner) {
		return f.cfg.Local, nil
	}
	n, ok, err := f.liveNode(ctx, r.Owner)
	if err != nil {
		return nil, err
	}
	if !ok {
		if err := f.cfg.Registry.Expire(ctx, r.ID); err != nil {
			return nil, fmt.Errorf("%w: mark a lost container expired: %w", sandbox.ErrUnavailable, err)
		}
		return nil, sandbox.ErrExpiredContainer
	}
	return f.serviceOf(n)
}

// Acquire returns a lease on the request's container as [sandbox.Manager.Acquire] does,
// from the node that owns it: by ContainerID, the container's owner (a lost one fails with
// ErrExpiredContainer); by Session, the owner of the container the session names, or a node
// chosen as for a new container when it names none or a lost one; otherwise a new container
// on the least loaded live node (see [Fleet.Create]). It fails with ErrUnavailable when the
// Registry or the directory fails, the owner cannot be reached, or no node can take a new
// container.
func (f *Fleet) Acquire(ctx context.Context, r sandbox.AcquireRequest) (*sandbox.Lease, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("acquire sandbox: %w", err)
	}
	if r.ContainerID != "" {
		svc, _, err := f.route(ctx, r.Identity, r.ContainerID)
		if err != nil {
			return nil, err
		}
		return svc.Acquire(ctx, r)
	}
	if r.Session == "" {
		var l *sandbox.Lease
		err := f.place(ctx, func(svc sandbox.Service) (err error) {
			l, err = svc.Acquire(ctx, r)
			return err
		})
		return l, err
	}
	var err error
	for range maxAttempts {
		var l *sandbox.Lease
		l, err = f.acquireSession(ctx, r)
		if !errors.Is(err, sandbox.ErrElsewhere) {
			return l, err
		}
		// Another replica placed the session meanwhile: look again, and go to its owner.
	}
	return nil, err
}

// acquireSession is one attempt of Acquire by session. It fails with ErrElsewhere when the
// node it chose finds the session registered to another node.
func (f *Fleet) acquireSession(ctx context.Context, r sandbox.AcquireRequest) (*sandbox.Lease, error) {
	reg, ok, err := f.cfg.Registry.Session(ctx, r.Identity, sandbox.SessionKey(r.Session))
	if err != nil {
		return nil, fmt.Errorf("%w: look up session: %w", sandbox.ErrUnavailable, err)
	}
	if ok && !reg.Expired {
		svc, err := f.ownerOf(ctx, reg)
		if err == nil {
			return svc.Acquire(ctx, r)
		}
		if !errors.Is(err, sandbox.ErrExpiredContainer) {
			return nil, err
		}
		// Lost with its owner: the session gets a fresh container, placed anew.
	}
	var l *sandbox.Lease
	err = f.place(ctx, func(svc sandbox.Service) (err error) {
		l, err = svc.Acquire(ctx, r)
		return err
	})
	return l, err
}

// CheckSpec reports whether a container of spec may be created, as the Local Manager or,
// on a gateway, the node a new container would go to says. A gateway that cannot ask any
// node accepts spec: the container's creation then fails with ErrUnavailable anyway.
func (f *Fleet) CheckSpec(spec sandbox.Spec) error {
	if f.cfg.Local != nil {
		return f.cfg.Local.CheckSpec(spec)
	}
	ctx, cancel := context.WithTimeout(context.Background(), checkSpecTimeout)
	defer cancel()
	nodes, err := f.liveNodes(ctx)
	if err != nil {
		return nil
	}
	for _, n := range f.rank(nodes) {
		svc, err := f.serviceOf(n)
		if err != nil {
			continue
		}
		return svc.CheckSpec(spec)
	}
	return nil
}

// Known reports whether containerID was issued to identity and is alive, from the Registry
// and the directory: a container whose owner has left is lost (and marked expired). A
// Registry or directory that fails makes every id unknown.
func (f *Fleet) Known(identity, containerID string) bool {
	_, _, err := f.route(context.Background(), identity, containerID)
	return err == nil
}

// Create issues a new container to r.Identity as [sandbox.Manager.Create] does, on the live
// node with the lowest share of its Capacity in use (as rank weighs it; ties go to this
// node, then by node id). Nodes
// at their Capacity come last: there the node's Manager evicts an idle container, as one
// process does at its cap, or fails with ErrAtCapacity. A node that fails with
// ErrUnavailable (unreachable, or at a cap) passes the container to the next. No live node
// fails with ErrUnavailable.
func (f *Fleet) Create(ctx context.Context, r sandbox.CreateRequest) (sandbox.ContainerInfo, error) {
	if err := ctx.Err(); err != nil {
		return sandbox.ContainerInfo{}, fmt.Errorf("create container: %w", err)
	}
	if r.Identity == "" {
		return sandbox.ContainerInfo{}, fmt.Errorf("%w: an anonymous caller has no lasting containers", sandbox.ErrUnavailable)
	}
	var info sandbox.ContainerInfo
	err := f.place(ctx, func(svc sandbox.Service) (err error) {
		info, err = svc.Create(ctx, r)
		return err
	})
	return info, err
}

// Container returns container id of identity from its owner, as [sandbox.Manager.Container]
// does; an expired or lost one is shown from the Registry with StatusExpired. The anonymous
// identity's (only while a run of it is paused) is its owner's to show, and unknown once lost.
func (f *Fleet) Container(ctx context.Context, identity, id string) (sandbox.ContainerInfo, error) {
	svc, r, err := f.route(ctx, identity, id)
	if errors.Is(err, sandbox.ErrExpiredContainer) {
		return infoOf(r), nil
	}
	if err != nil {
		return sandbox.ContainerInfo{}, err
	}
	return svc.Container(ctx, identity, id)
}

// DeleteContainer deletes container id of identity on its owner, as
// [sandbox.Manager.DeleteContainer] does; an expired or lost one is left as it is.
func (f *Fleet) DeleteContainer(ctx context.Context, identity, id string) error {
	if identity == "" {
		return sandbox.ErrUnknownContainer
	}
	svc, _, err := f.route(ctx, identity, id)
	if errors.Is(err, sandbox.ErrExpiredContainer) {
		return nil
	}
	if err != nil {
		return err
	}
	return svc.DeleteContainer(ctx, identity, id)
}

// PutFile writes a file into container containerID of identity on its owner, as
// [sandbox.Manager.PutFile] does.
func (f *Fleet) PutFile(ctx context.Context, identity, containerID, path, source string, r io.Reader, limit int64) (sandbox.FileInfo, error) {
	svc, err := f.fileRoute(ctx, identity, containerID)
	if err != nil {
		return sandbox.FileInfo{}, err
	}
	return svc.PutFile(ctx, identity, containerID, path, source, r, limit)
}

// Files lists the files of container containerID of identity from its owner, as
// [sandbox.Manager.Files] does.
func (f *Fleet) Files(ctx context.Context, identity, containerID string) ([]sandbox.FileInfo, error) {
	svc, err := f.fileRoute(ctx, identity, containerID)
	if err != nil {
		return nil, err
	}
	return svc.Files(ctx, identity, containerID)
}

// File returns file fileID of container containerID of identity from its owner, as
// [sandbox.Manager.File] does.
func (f *Fleet) File(ctx context.Context, identity, containerID, fileID string) (sandbox.FileInfo, error) {
	svc, err := f.fileRoute(ctx, identity, containerID)
	if err != nil {
		return sandbox.FileInfo{}, err
	}
	return svc.File(ctx, identity, containerID, fileID)
}

// OpenFile opens file fileID of container containerID of identity on its owner, as
// [sandbox.Manager.OpenFile] does.
func (f *Fleet) OpenFile(ctx context.Context, identity, containerID, fileID string) (io.ReadCloser, sandbox.FileInfo, error) {
	svc, err := f.fileRoute(ctx, identity, containerID)
	if err != nil {
		return nil, sandbox.FileInfo{}, err
	}
	return svc.OpenFile(ctx, identity, containerID, fileID)
}

// DeleteFile deletes file fileID of container containerID of identity on its owner, as
// [sandbox.Manager.DeleteFile] does.
func (f *Fleet) DeleteFile(ctx context.Context, identity, containerID, fileID string) error {
	svc, err := f.fileRoute(ctx, identity, containerID)
	if err != nil {
		return err
	}
	return svc.DeleteFile(ctx, identity, containerID, fileID)
}

// fileRoute is route for the calls on a container's files, which the anonymous identity
// may not make.
func (f *Fleet) fileRoute(ctx context.Context, identity, containerID string) (sandbox.Service, error) {
	if identity == "" {
		return nil, sandbox.ErrUnknownContainer
	}
	svc, _, err := f.route(ctx, identity, containerID)
	return svc, err
}
