package sandbox

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/codeinterp/codeinterp/pkg/store"
	"github.com/codeinterp/codeinterp/pkg/store/memory"
)

// ManagerConfig configures a Manager. The zero value works: no warm pool and the defaults below.
type ManagerConfig struct {
	// WarmPool is the number of started containers kept ready to hand out (0 = none). They
	// are created with the provider's default Spec and serve the requests whose Spec resolves
	// to it; the pool is refilled in the background.
	WarmPool int
	// SessionIdleTTL is the default idle expiry of a lasting container (every container of a
	// caller with an identity: named by a session, or kept under its id): one unused (no lease,
	// no call on it) for this long expires and is deleted. Default 20m, as OpenAI's containers
	// expire. A container created with an ExpiresAfter of its own expires after that instead.
	SessionIdleTTL time.Duration
	// MaxSessionsPerIdentity caps the lasting containers of one identity; one more evicts (and
	// deletes) that identity's least recently used lasting container not in use. Default 10.
	MaxSessionsPerIdentity int
	// MaxContainers caps all containers issued, ephemeral and lasting (the warm pool is
	// excluded); one more evicts a lasting container not in use, or fails with ErrAtCapacity.
	// The victim is the least recently used of the identity holding the most containers, and
	// never one of an identity holding no more than the caller: a tenant makes room at the cap
	// from its own containers or from those of tenants holding more, never by evicting a
	// lighter tenant's. Default 64.
	MaxContainers int
	// MaxContainersPerIdentity caps the containers of one identity, ephemeral and lasting, so
	// that one tenant cannot take all of MaxContainers: one more evicts that identity's least
	// recently used lasting container not in use, or fails with ErrAtCapacity. Default 16 (and
	// at least MaxSessionsPerIdentity, at most MaxContainers).
	MaxContainersPerIdentity int
	// RunTimeout is the wall-clock limit of a run called with timeout 0. Default 30s.
	RunTimeout time.Duration
	// PauseTimeout bounds how long a run paused for tool calls (see [Resumer]) waits for its
	// Resume: past it, each call raises TimeoutError in the code, which goes on. Default 270s
	// (the native ~4.5 minutes).
	PauseTimeout time.Duration
	// DeleteTimeout bounds one background deletion. Default 30s.
	DeleteTimeout time.Duration
	// MaxFileTableBytes bounds the server memory one container's files table takes: each file
	// the Manager knows of costs its path's length and FileEntryOverhead. A file beyond it
	// (or beyond MaxFilesPerContainer files) is not given an id: a run lists it without one
	// and says so in its Result's FilesNote; an upload fails with ErrFileTooLarge. Default
	// 4 MiB: 10,000 files with 100-byte paths, or about 950 with the longest paths Linux allows.
	MaxFileTableBytes int64
	// MaxFileTableBytesPerIdentity bounds the bytes of all files tables of one identity's
	// containers, as MaxFileTableBytes bounds one's, so that one tenant cannot take the whole
	// of MaxAllFileTableBytes. Default 16 MiB.
	MaxFileTableBytesPerIdentity int64
	// MaxAllFileTableBytes bounds the bytes of every files table the Manager keeps. Default
	// 64 MiB.
	MaxAllFileTableBytes int64
	// Registry keeps which identity each container id belongs to, which session key names it
	// and when it was last used. If nil, the Manager keeps them in a map of its own. Managers
	// may share a Registry (a fleet's, in Redis) only when each has a Node of its own: a
	// Manager serves only the containers registered with its Node as their Owner, and leaves
	// the others' to whoever routes calls to their owners (pkg/fleet).
	Registry store.Registry
	// Node is the id of the node this Manager runs on, written as the Owner of every
	// container it registers ("" in a single process). A registration whose Owner is another
	// node is not this Manager's: calls on it fail with ErrElsewhere.
	Node string
	// Hibernation keeps the files of the containers acquired with AcquireRequest.Hibernate on
	// disk when they idle out, and restores them by id (see hibernate.go). Its zero value
	// (no Dir) hibernates nothing: such containers expire as the others do.
	Hibernation HibernationConfig
}

// Defaults of a ManagerConfig's fields, used where a field is zero. The configuration's defaults
// (pkg/config) are these.
const (
	DefaultSessionIdleTTL           = 20 * time.Minute
	DefaultMaxSessionsPerIdentity   = 10
	DefaultMaxContainers            = 64
	DefaultMaxContainersPerIdentity = 16
	DefaultRunTimeout               = 30 * time.Second
	DefaultPauseTimeout             = 270 * time.Second

	DefaultMaxFileTableBytes            = 4 << 20
	DefaultMaxFileTableBytesPerIdentity = 16 << 20
	DefaultMaxAllFileTableBytes         = 64 << 20
)

// Bounds of what a Manager remembers of containers that expired or were deleted (tombstones),
// so that their ids get ErrExpiredContainer rather than ErrUnknownContainer and are listed as
// expired: each is kept for TombstoneTTL, and at most MaxTombstonesPerIdentity of one identity
// and MaxTombstones in all (the oldest go first). A tombstone is a Registration, some 200
// bytes.
const (
	TombstoneTTL             = 24 * time.Hour
	MaxTombstonesPerIdentity = 100
	MaxTombstones            = 10000
)

func (c *ManagerConfig) setDefaults() {
	if c.SessionIdleTTL <= 0 {
		c.SessionIdleTTL = DefaultSessionIdleTTL
	}
	if c.MaxSessionsPerIdentity <= 0 {
		c.MaxSessionsPerIdentity = DefaultMaxSessionsPerIdentity
	}
	if c.MaxContainers <= 0 {
		c.MaxContainers = DefaultMaxContainers
	}
	if c.MaxContainersPerIdentity <= 0 {
		c.MaxContainersPerIdentity = DefaultMaxContainersPerIdentity
	}
	c.MaxContainersPerIdentity = min(max(c.MaxContainersPerIdentity, c.MaxSessionsPerIdentity), c.MaxContainers)
	if c.RunTimeout <= 0 {
		c.RunTimeout = DefaultRunTimeout
	}
	if c.PauseTimeout <= 0 {
		c.PauseTimeout = DefaultPauseTimeout
	}
	if c.DeleteTimeout <= 0 {
		c.DeleteTimeout = 30 * time.Second
	}
	if c.MaxFileTableBytes <= 0 {
		c.MaxFileTableBytes = DefaultMaxFileTableBytes
	}
	if c.MaxFileTableBytesPerIdentity <= 0 {
		c.MaxFileTableBytesPerIdentity = DefaultMaxFileTableBytesPerIdentity
	}
	if c.MaxAllFileTableBytes <= 0 {
		c.MaxAllFileTableBytes = DefaultMaxAllFileTableBytes
	}
	if c.WarmPool < 0 {
		c.WarmPool = 0
	}
}

// The manager's view of providers and containers beyond Provider and Container: optional
// abilities, used when present.
type (
	// specResolver fills in a provider's defaults, so the manager can tell which requests a
	// warm container fits (Local implements it).
	specResolver interface {
		ResolveSpec(Spec) Spec
	}
	// specChecker refuses Specs a provider will not create (Local implements it).
	specChecker interface {
		CheckSpec(Spec) error
	}
	// aliveChecker reports whether a container is still running (Local's containers do), so
	// a container that died in the pool is not handed out.
	aliveChecker interface {
		Alive() bool
	}
)

// AcquireRequest names the container a request wants.
type AcquireRequest struct {
	// Identity is the caller's opaque tenant identity (already a keyed hash of its credential
	// or identity header). "" is the anonymous identity: a valid one of its own, whose
	// containers without a session are ephemeral.
	Identity string
	// Session is a session name (metadata.session_id or a configured header); "" means none.
	// The Manager keeps only its SessionKey, a fixed-size hash: a name of any length costs the
	// same, and is never shown back.
	Session string
	// ContainerID is a "cntr_…" id this manager issued earlier; "" means none.
	ContainerID string
	// Spec describes a container created for this request; it does not change an existing one.
	Spec Spec
	// Hibernate asks that a container created for this request hibernate when idle past its
	// expiry instead of expiring (Anthropic's container lifetime; see HibernationConfig), and
	// that it be forgotten, not remembered as expired, once it is gone: its id is then unknown.
	// It does not change an existing container.
	Hibernate bool
	// IDPrefix is the prefix of the id of a container created for this request: "" means
	// "cntr_" (OpenAI's and the Containers API's); the Messages surface asks for "container_".
	IDPrefix string
}

// ErrElsewhere means the Registry names another node than the Manager's (ManagerConfig.Node)
// as the owner of the container or session asked for: the Manager does not hold it, and only
// a router that knows the nodes (pkg/fleet) may send the call to its owner. It comes with
// ErrUnknownContainer for a container id, and with ErrUnavailable for a session.
var ErrElsewhere = errors.New("sandbox: held by another node")

// keyKind tells the sandbox keys apart.
type keyKind uint8

const (
	kindSession   keyKind = iota + 1 // named by (identity, session); lasting
	kindEphemeral                    // an anonymous caller's: deleted when its leases end
	kindKept                         // an identity's container named by its id only; lasting
)

// sandboxKey is the key a container is kept under. Every key is scoped by identity.
type sandboxKey struct {
	kind     keyKind
	identity string
	name     string // SessionKey of the session name, or a server-minted random name (ephemeral, kept)
}

// SessionKey returns what the Manager and its Registry keep of a session name: a fixed-size hash,
// so that a client's name of any length costs the same (also in an expired container's
// registration, kept for TombstoneTTL). Names are compared by it; the name itself is never
// shown back.
func SessionKey(session string) string {
	h := sha256.Sum256([]byte(session))
	return "sha256:" + hex.EncodeToString(h[:])
}

// lasting reports whether containers under k live until idle for their expiry.
func (k sandboxKey) lasting() bool { return k.kind != kindEphemeral }

// entryMeta is what a container is created with beyond its Spec, carried over to the
// container that replaces a lost one under the same key.
type entryMeta struct {
	name         string
	expiresAfter time.Duration // 0 for an ephemeral container
	hibernate    bool          // AcquireRequest.Hibernate: hibernates when idle (if configured), forgotten when gone
	prefix       string        // the id's prefix; "" means "cntr_"
}

// entry is one container issued under a key: its names are in the Manager's Registry, and its
// live parts here. Its container starts lazily, on the first run or file written.
type entry struct {
	id   string // "cntr_…"
	key  sandboxKey
	spec Spec
	meta entryMeta

	// The fields below are guarded by Manager.mu.
	c      Container  // nil until the first run starts it
	start  entryStart // how c started; set with c
	leases int        // leases, and Manager calls in progress on it (a file being written or read)
	// used is the last use this Manager recorded (the Registry's LastUsed is never earlier:
	// every use it records is recorded there too), so that the pruner reads from the Registry
	// only the entries idle past their expiry by this Manager's own count.
	used  time.Time
	dead  bool // evicted, lost, expired or deleted: never used again
	files fileTable
	// downloads are the readers of its files open (OpenFile), each holding one of leases;
	// ended when it is removed.
	downloads map[*download]struct{}

	// sem serializes runs (and the lazy start) on the entry: one token.
	sem chan struct{}

	// pause is the run of c paused for tool calls, nil when none (guarded by Manager.mu).
	pause *pause
	// restore, guarded by Manager.mu, is the hibernated state to put back when the container
	// starts; nil when there is none. restoredNote reports that the first run since the
	// restore has yet to tell the model what did not survive.
	restore       *hibernated
	restoredNote  bool
	restoreFailed int // files of restore that could not be put back
}

// Manager maps sandbox keys to containers: ephemeral keys minted per request, session keys,
// and the container ids it issued, all scoped by the caller's identity. It caps containers per
// identity (LRU) and globally, deletes idle sessions, hands out warm containers, runs one cell
// at a time per container and deletes containers off the request path. The names (which
// identity owns an id, which session key names it, when it was last used) are kept in its
// Registry. Safe for concurrent use. Close stops it and deletes everything.
type Manager struct {
	p   Provider
	cfg ManagerConfig
	log *zap.Logger
	reg store.Registry

	poolSpec Spec

	// mu guards the fields below and the entries' guarded fields.
	mu      sync.Mutex
	closed  bool
	live    map[string]*entry     // entries by container id, until removed
	minted  map[sandboxKey]*entry // the live entries of server-minted keys (ephemeral, kept), which no other replica needs
	lasting map[string]int        // live lasting entries (session, kept) per identity
	owned   map[string]int        // live entries (all kinds) per identity
	// anonPaused is how many live anonymous callers' (ephemeral) entries have a run paused
	// (see anonymousPauseCap).
	anonPaused int
	// fileBytes and allFileBytes are what the live entries' files tables cost (see fileCost),
	// per identity and in all: the budgets of ManagerConfig.MaxFileTableBytesPerIdentity and
	// MaxAllFileTableBytes.
	fileBytes    map[string]int64
	allFileBytes int64
	tombs        tombstones
	pool         []Container

	metrics managerMetrics

	// hib is the hibernated containers this node keeps on disk (nil without Hibernation).
	hib *hibIndex

	refill chan struct{}   // size 1: a kick to the pool filler; extra kicks are redundant
	ctx    context.Context // done at Close: stops the filler, the pruner and pool starts
	stop   context.CancelFunc
	// active counts the filler, the pruner, background deletions and container starts, under
	// mu. It grows only while !closed or within Close's own critical section, so once it is 0
	// after Close it stays 0: then drained is closed (by Close, or by the last to end).
	active  int
	drained chan struct{}
}

// NewManager returns a Manager over p and starts its pool filler (when cfg.WarmPool > 0) and
// its idle-session pruner. p must outlive the Manager; Close the Manager before p.
func NewManager(p Provider, cfg ManagerConfig, log *zap.Logger) *Manager {
	if log == nil {
		log = zap.NewNop()
	}
	cfg.setDefaults()
	reg := cfg.Registry
	if reg == nil {
		reg = memory.NewRegistry()
	}
	m := &Manager{
		p:         p,
		cfg:       cfg,
		log:       log.Named("sandbox.manager"),
		reg:       reg,
		live:      map[string]*entry{},
		minted:    map[sandboxKey]*entry{},
		lasting:   map[string]int{},
		owned:     map[string]int{},
		fileBytes: map[string]int64{},
		tombs:     newTombstones(),
		refill:    make(chan struct{}, 1),
		drained:   make(chan struct{}),
		metrics:   newManagerMetrics(),
	}
	m.ctx, m.stop = context.WithCancel(context.Background())
	m.poolSpec = m.resolve(Spec{})
	m.hib = m.loadHibernated()
	m.mu.Lock()
	defer m.mu.Unlock()
	if cfg.WarmPool > 0 {
		m.kick()
		m.goLocked(m.fillPool)
	}
	m.goLocked(m.prune)
	return m
}

// goLocked runs f in a goroutine of the Manager's, which Close waits for. The caller holds mu,
// and the Manager is not closed (or Close is in its critical section).
func (m *Manager) goLocked(f func()) {
	m.active++
	go func() {
		defer m.done()
		f()
	}()
}

// done ends one of the Manager's goroutines or container starts counted in active.
func (m *Manager) done() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.active--
	m.signalDrainedLocked()
}

// signalDrainedLocked closes drained once the Manager is closed and nothing it counts is left.
func (m *Manager) signalDrainedLocked() {
	if !m.closed || m.active > 0 {
		return
	}
	select {
	case <-m.drained:
	default:
		close(m.drained)
	}
}

func (m *Manager) resolve(s Spec) Spec {
	if r, ok := m.p.(specResolver); ok {
		return r.ResolveSpec(s)
	}
	return s
}

// Acquire returns a lease on the container for the request's key:
//   - ContainerID set: that container if it was issued to Identity and is alive; an id issued
//     to Identity whose container has expired or been deleted fails with ErrExpiredContainer,
//     any other with ErrUnknownContainer (an anonymous caller's ephemeral container lives
//     while a lease holds it, or while a run of it is paused for tool calls);
//   - Session set: the (Identity, Session) container, created on first use;
//   - neither: a new container under a server-minted key: for a caller with an identity one
//     kept until it has been idle for its expiry and reusable by its id; for the anonymous
//     identity "" an ephemeral one, deleted once its leases are released.
//
// A new lasting container (session or kept) beyond the caps evicts the least recently used
// lasting container not in use (of the identity, at MaxSessionsPerIdentity and
// MaxContainersPerIdentity; at MaxContainers, as ManagerConfig.MaxContainers says). The container itself starts on the
// lease's first Run (from the warm pool when one fits), but the lease already has its
// ContainerID. Acquire fails with ErrAtCapacity (which matches ErrUnavailable) when a cap is
// reached and nothing may be evicted, with ErrUnavailable when the Registry fails, and with
// ErrClosed after Close.
func (m *Manager) Acquire(ctx context.Context, r AcquireRequest) (*Lease, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("acquire sandbox: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	now := time.Now()
	var e *entry
	var err error
	switch {
	case r.ContainerID != "":
		if err = m.restoreIfHibernatedLocked(ctx, r.Identity, r.ContainerID, now); err != nil {
			return nil, err
		}
		if e, err = m.issuedLocked(ctx, r.Identity, r.ContainerID, now); err != nil {
			if errors.Is(err, ErrUnknownContainer) || errors.Is(err, ErrExpiredContainer) {
				m.metrics.refusals.WithLabelValues("unknown_container").Inc()
			}
			return nil, err
		}
		m.touchLocked(ctx, e, now)
	case r.Session != "":
		k := sandboxKey{kind: kindSession, identity: r.Identity, name: SessionKey(r.Session)}
		if e, err = m.keyEntryLocked(ctx, k); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		if e != nil {
			m.touchLocked(ctx, e, now)
		} else if e, err = m.newEntryLocked(ctx, k, r.Spec, m.lastingMeta(r), now); err != nil {
			return nil, err
		}
	case r.Identity == "":
		k := sandboxKey{kind: kindEphemeral, name: randomHex(16)}
		if e, err = m.newEntryLocked(ctx, k, r.Spec, entryMeta{prefix: r.IDPrefix}, now); err != nil {
			return nil, err
		}
	default:
		k := sandboxKey{kind: kindKept, identity: r.Identity, name: randomHex(16)}
		if e, err = m.newEntryLocked(ctx, k, r.Spec, m.lastingMeta(r), now); err != nil {
			return nil, err
		}
	}
	e.leases++
	return &Lease{b: &localLease{m: m, key: e.key, e: e, reused: e.c != nil}}, nil
}

// CheckSpec reports whether the provider would create a container of spec: an error matching
// ErrInvalidSpec (a *SpecError) is the client's mistake, as an invalid memory_limit is, to be
// refused before anything runs. A provider that checks nothing accepts every Spec.
func (m *Manager) CheckSpec(spec Spec) error {
	if c, ok := m.p.(specChecker); ok {
		return c.CheckSpec(spec)
	}
	return nil
}

// Known reports whether containerID was issued to identity and is still alive. A Registry
// that fails makes every id unknown.
func (m *Manager) Known(identity, containerID string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return false
	}
	e, err := m.issuedLocked(context.Background(), identity, containerID, time.Now())
	if errors.Is(err, errHibernated) {
		return true // restored when a request names it
	}
	if err != nil && !errors.Is(err, ErrUnknownContainer) && !errors.Is(err, ErrExpiredContainer) {
		m.log.Warn("look up container", zap.Error(err))
	}
	return e != nil
}

// lookupLocked returns the registration of container id if the Registry has it issued to
// identity (ok false otherwise), and its live entry, or nil when it has none here. Another
// identity's id is not told apart from one never issued: the identities are compared in
// constant time. A registration of this node's with no live entry (the node restarted) is
// marked expired here: its container is lost; a live entry not in use whose registration is
// expired (by a replica that took this node for gone) is removed.
func (m *Manager) lookupLocked(ctx context.Context, identity, id string) (store.Registration, *entry, bool, error) {
	if id == "" {
		return store.Registration{}, nil, false, nil
	}
	r, ok, err := m.reg.Lookup(ctx, id)
	if err != nil {
		return store.Registration{}, nil, false, fmt.Errorf("look up container: %w", err)
	}
	if !ok || subtle.ConstantTimeCompare([]byte(r.Identity), []byte(identity)) != 1 {
		return store.Registration{}, nil, false, nil
	}
	e := m.live[id]
	if r.Hibernated && (e == nil || e.dead) {
		if r.Owner == m.cfg.Node && !m.restorableLocked(r, time.Now()) {
			// Past its lifetime, or its files are gone: unknown, as natively.
			m.dropHibernatedLocked(r.ID)
			return store.Registration{}, nil, false, nil
		}
		return r, nil, true, nil
	}
	switch {
	case e != nil && !e.dead && !r.Expired:
		return r, e, true, nil
	case e != nil && !e.dead && e.leases == 0:
		// Marked expired by another replica, which took this node for gone (its heartbeats
		// lapsed): the container is no one's now, and goes.
		m.log.Info("container marked expired elsewhere: deleting it", zap.String("container_id", id))
		m.metrics.evictions.WithLabelValues("lost").Inc()
		m.removeLocked(e)
	}
	if !r.Expired && r.Owner == m.cfg.Node {
		m.lostLocked(ctx, r)
		r.Expired = true
	}
	return r, nil, true, nil
}

// lostLocked marks container r, registered as this node's but held by no live entry, expired:
// its state went with the process that held it. It is remembered (a tombstone) as an expired
// container is.
func (m *Manager) lostLocked(ctx context.Context, r store.Registration) {
	if err := m.reg.Expire(ctx, r.ID); err != nil {
		m.log.Warn("mark lost container expired", zap.String("container_id", r.ID), zap.Error(err))
		return
	}
	for _, id := range m.tombs.add(r.ID, r.Identity, time.Now()) {
		m.forgetLocked(id)
	}
}

// issuedLocked returns the live entry of container id issued to identity. It fails with
// ErrUnknownContainer for an id not issued to identity, with ErrExpiredContainer for one that
// expired or was deleted (a live entry idle past its expiry expires here, even before the
// pruner sees it), and with ErrUnavailable when the Registry fails.
func (m *Manager) issuedLocked(ctx context.Context, identity, id string, now time.Time) (*entry, error) {
	r, e, ok, err := m.lookupLocked(ctx, identity, id)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	switch {
	case !ok, r.Expired && r.Lifetime > 0:
		// A hibernating container gone (lost with its node) is unknown, as natively.
		return nil, ErrUnknownContainer
	case r.Expired:
		return nil, ErrExpiredContainer
	case r.Hibernated && e == nil && r.Owner == m.cfg.Node:
		return nil, errHibernated
	case e == nil:
		// Issued, not expired, and another node's (see lookupLocked): not this Manager's
		// to serve.
		return nil, fmt.Errorf("%w: %w", ErrUnknownContainer, ErrElsewhere)
	case m.idlePastLocked(e, r, now):
		m.log.Debug("container expired", zap.String("container_id", e.id))
		m.metrics.evictions.WithLabelValues("idle").Inc()
		m.removeLocked(e)
		if e.meta.hibernate {
			return nil, ErrUnknownContainer // forgotten (see AcquireRequest.Hibernate)
		}
		return nil, ErrExpiredContainer
	}
	return e, nil
}

// idlePastLocked reports whether lasting entry e, registered as r, has been idle (no lease)
// past its expiry at now.
func (m *Manager) idlePastLocked(e *entry, r store.Registration, now time.Time) bool {
	if !e.key.lasting() || e.leases > 0 {
		return false
	}
	idle := now.Sub(r.LastUsed) >= m.expiryOf(r)
	if e.meta.hibernate && m.hib != nil {
		// A hibernating container idle past its expiry is the sweeper's to hibernate: until
		// then it serves as it is, unless its lifetime is over too.
		return idle && !now.Before(r.CreatedAt.Add(m.hib.cfg.Lifetime))
	}
	return idle
}

// maybeIdleLocked reports whether e may be idle past its expiry at now: whether this Manager
// has recorded no use of it for that long. Only then can its registration say it is (another
// process's later use only makes the registration's LastUsed later).
func (m *Manager) maybeIdleLocked(e *entry, now time.Time) bool {
	exp := e.meta.expiresAfter
	if exp <= 0 {
		exp = m.cfg.SessionIdleTTL
	}
	return now.Sub(e.used) >= exp
}

// expiryOf returns r's idle expiry.
func (m *Manager) expiryOf(r store.Registration) time.Duration {
	if r.ExpiresAfter > 0 {
		return r.ExpiresAfter
	}
	return m.cfg.SessionIdleTTL
}

// keyEntryLocked returns the live entry key k names, or nil: a session key's from the
// Registry, a server-minted key's from the Manager's own map.
func (m *Manager) keyEntryLocked(ctx context.Context, k sandboxKey) (*entry, error) {
	if k.kind != kindSession {
		return m.minted[k], nil
	}
	r, ok, err := m.reg.Session(ctx, k.identity, k.name)
	if err != nil {
		return nil, fmt.Errorf("look up session: %w", err)
	}
	if !ok || r.Expired {
		return nil, nil
	}
	if e := m.live[r.ID]; e != nil && !e.dead {
		return e, nil
	}
	if r.Hibernated && r.Owner == m.cfg.Node {
		if !m.restorableLocked(r, time.Now()) {
			m.dropHibernatedLocked(r.ID)
			return nil, nil
		}
		return m.restoreLocked(ctx, r, time.Now())
	}
	if r.Owner != m.cfg.Node {
		return nil, fmt.Errorf("session's container %s: %w", r.ID, ErrElsewhere)
	}
	m.lostLocked(ctx, r) // this node's, lost: the key gets a fresh container
	return nil, nil
}

// touchLocked records a use of e at now. The lease goes on if the Registry fails: only the
// time of last use is lost.
func (m *Manager) touchLocked(ctx context.Context, e *entry, now time.Time) {
	if now.After(e.used) {
		e.used = now
	}
	if err := m.reg.Touch(ctx, e.id, now); err != nil {
		m.log.Warn("record a container's use", zap.String("container_id", e.id), zap.Error(err))
	}
}

// registrationLocked returns e's registration; ok is false when the Registry failed (which is
// logged). A registration the Registry no longer has counts as unused since the zero time.
func (m *Manager) registrationLocked(e *entry) (r store.Registration, ok bool) {
	r, _, err := m.reg.Lookup(context.Background(), e.id)
	if err != nil {
		m.log.Warn("look up container", zap.String("container_id", e.id), zap.Error(err))
		return store.Registration{}, false
	}
	return r, true
}

// newEntryLocked reserves a container under k, within the caps, used from now on.
func (m *Manager) newEntryLocked(ctx context.Context, k sandboxKey, spec Spec, meta entryMeta, now time.Time) (*entry, error) {
	prefix := meta.prefix
	if prefix == "" {
		prefix = "cntr_"
	}
	return m.enterLocked(ctx, prefix+randomHex(16), k, spec, meta, now, now)
}

// enterLocked reserves container id under k, within the caps, created at createdAt (now for a
// new one, earlier for a restored one) and used from now on.
func (m *Manager) enterLocked(ctx context.Context, id string, k sandboxKey, spec Spec, meta entryMeta, createdAt, now time.Time) (*entry, error) {
	if k.lasting() && m.lasting[k.identity] >= m.cfg.MaxSessionsPerIdentity {
		if err := m.evictLRULocked(k.identity, true, "all %d lasting containers of this identity are in use", m.cfg.MaxSessionsPerIdentity); err != nil {
			return nil, err
		}
	}
	if m.owned[k.identity] >= m.cfg.MaxContainersPerIdentity {
		if err := m.evictLRULocked(k.identity, true, "all %d containers of this identity are in use", m.cfg.MaxContainersPerIdentity); err != nil {
			return nil, err
		}
	}
	if len(m.live) >= m.cfg.MaxContainers {
		if err := m.evictLRULocked(k.identity, false, "%d containers in use", m.cfg.MaxContainers); err != nil {
			return nil, err
		}
	}
	e := &entry{
		id:   id,
		key:  k,
		spec: m.resolve(spec),
		meta: meta,
		used: now,
		sem:  make(chan struct{}, 1),
	}
	e.sem <- struct{}{}
	r := store.Registration{
		ID: e.id, Identity: k.identity, LastUsed: now,
		Name: meta.name, CreatedAt: createdAt, ExpiresAfter: meta.expiresAfter, MemoryLimit: m.memoryLimitOf(e.spec),
		Owner: m.cfg.Node,
	}
	if meta.hibernate && m.hib != nil {
		r.Lifetime = m.hib.cfg.Lifetime
	}
	if p := e.spec.NetworkPolicy; p != nil {
		r.AllowedDomains = p.AllowedDomains // never its secrets
	}
	if k.kind == kindSession {
		r.Session = k.name
	}
	if err := m.reg.Add(ctx, r); err != nil {
		return nil, fmt.Errorf("%w: register container: %w", ErrUnavailable, err)
	}
	m.live[e.id] = e
	if k.kind != kindSession {
		m.minted[k] = e
	}
	m.owned[k.identity]++
	if k.lasting() {
		m.lasting[k.identity]++
	}
	return e, nil
}

// defaultMemoryLimit is the memory a container has when its Spec names none and the
// provider does not say: the native API's default.
const defaultMemoryLimit = "1g"

// memoryLimitOf returns the memory of a container of resolved spec, as shown.
func (m *Manager) memoryLimitOf(spec Spec) string {
	if spec.MemoryLimit != "" {
		return spec.MemoryLimit
	}
	return defaultMemoryLimit
}

// evictLRULocked makes room under a cap for a container of identity by removing a lasting
// container not in use: the least recently used of identity's when scoped; otherwise of the
// identity holding the most containers, among identity itself and those holding more than it
// (see ManagerConfig.MaxContainers). When there is none, it fails with ErrAtCapacity, saying
// why with format and limit; or with ErrUnavailable alone when the Registry could not tell
// the last use of a container that might have been evicted.
func (m *Manager) evictLRULocked(identity string, scoped bool, format string, limit int) error {
	victim, unknown := m.lruIdleLocked(identity, scoped)
	if victim == nil && unknown {
		return fmt.Errorf("%w: the registry does not tell which container to evict", ErrUnavailable)
	}
	if victim == nil {
		m.metrics.refusals.WithLabelValues("cap").Inc()
		return fmt.Errorf("%w: "+format, ErrAtCapacity, limit)
	}
	m.log.Debug("evicting least recently used container", zap.String("container_id", victim.id))
	m.metrics.evictions.WithLabelValues("lru").Inc()
	m.removeLocked(victim)
	return nil
}

// lruIdleLocked returns the container evictLRULocked may evict, or nil; unknown reports
// whether a candidate was passed over because the Registry failed.
func (m *Manager) lruIdleLocked(identity string, scoped bool) (victim *entry, unknown bool) {
	var victimUsed time.Time
	victimOwned := 0
	for _, e := range m.live {
		if !e.key.lasting() || e.leases > 0 {
			continue
		}
		own := e.key.identity == identity
		if scoped && !own {
			continue
		}
		owned := m.owned[e.key.identity]
		if !own && owned <= m.owned[identity] {
			continue // a tenant holding no more than the caller keeps its containers
		}
		r, ok := m.registrationLocked(e)
		if !ok {
			unknown = true
			continue
		}
		if victim == nil || owned > victimOwned || (owned == victimOwned && r.LastUsed.Before(victimUsed)) {
			victim, victimUsed, victimOwned = e, r.LastUsed, owned
		}
	}
	return victim, unknown
}

// removeLocked forgets e and deletes its container in the background. A lasting container is
// remembered as expired (a tombstone), unless the Manager is closing or it hibernates (see
// AcquireRequest.Hibernate); an ephemeral one is forgotten.
func (m *Manager) removeLocked(e *entry) {
	if e.dead {
		return
	}
	ctx := context.Background()
	if e.key.lasting() && !m.closed && !e.meta.hibernate {
		if err := m.reg.Expire(ctx, e.id); err != nil {
			m.log.Warn("mark container expired", zap.String("container_id", e.id), zap.Error(err))
		}
		for _, id := range m.tombs.add(e.id, e.key.identity, time.Now()) {
			m.forgetLocked(id)
		}
	} else {
		m.forgetLocked(e.id)
	}
	m.detachLocked(e)
}

// detachLocked marks e dead and lets go of it, leaving its registration as it is: it leaves the
// Manager's maps, counts and budgets, and its container is deleted in the background.
func (m *Manager) detachLocked(e *entry) {
	e.dead = true
	m.endPauseLocked(e)
	delete(m.live, e.id)
	if m.minted[e.key] == e {
		delete(m.minted, e.key)
	}
	if m.owned[e.key.identity]--; m.owned[e.key.identity] <= 0 {
		delete(m.owned, e.key.identity)
	}
	if e.key.lasting() {
		if m.lasting[e.key.identity]--; m.lasting[e.key.identity] <= 0 {
			delete(m.lasting, e.key.identity)
		}
	}
	m.clearFilesLocked(e)
	e.endDownloadsLocked()
	if e.restore != nil {
		m.removeDirLocked(e.restore.dir) // restored, never started: its files go
		e.restore = nil
	}
	if e.c != nil {
		m.deleteLocked(e.c)
		e.c = nil
	}
}

// forgetLocked removes container id from the Registry.
func (m *Manager) forgetLocked(id string) {
	if err := m.reg.Remove(context.Background(), id); err != nil {
		m.log.Warn("forget container", zap.String("container_id", id), zap.Error(err))
	}
}

// deleteLocked deletes c off the request path; Close waits for it. After Close has started
// waiting, deletions happen where they are asked for (see Close).
func (m *Manager) deleteLocked(c Container) {
	m.goLocked(func() { m.deleteNow(c) })
}

func (m *Manager) deleteNow(c Container) {
	ctx, cancel := context.WithTimeout(context.Background(), m.cfg.DeleteTimeout)
	defer cancel()
	if err := c.Delete(ctx); err != nil {
		m.log.Warn("delete container", zap.Error(err))
	}
}

// Close stops the pool filler and the pruner, deletes every container (also those leased:
// their runs fail) and waits for all of it, or until ctx is done: then it returns ctx's error,
// and what is left ends in the background. Later Acquires fail with ErrClosed. Idempotent: a
// later Close waits again.
func (m *Manager) Close(ctx context.Context) error {
	m.mu.Lock()
	if !m.closed {
		m.closed = true
		m.stop()
		for _, e := range m.live {
			m.removeLocked(e)
		}
		for _, id := range m.tombs.drain() {
			m.forgetLocked(id)
		}
		for _, c := range m.pool {
			m.deleteLocked(c)
		}
		m.pool = nil
		m.signalDrainedLocked()
	}
	m.mu.Unlock()
	select {
	case <-m.drained:
		m.unlockHibernation()
		return nil
	case <-ctx.Done():
		return fmt.Errorf("close sandbox manager: %w", ctx.Err())
	}
}

// Load returns how many containers the Manager holds now (ephemeral and lasting; the warm
// pool excluded) and how many it may hold in all (ManagerConfig.MaxContainers): what a sandbox
// node reports to the fleet (store.Node).
func (m *Manager) Load() (containers, capacity int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.live), m.cfg.MaxContainers
}

// randomHex returns n random bytes in hex.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b)
}
