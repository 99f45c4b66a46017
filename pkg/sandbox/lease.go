package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"go.uber.org/zap"
)

// Lease is one request's use of a container. It is not for concurrent use by several
// goroutines; different leases (also on one key) may be used concurrently. A Manager's leases
// hold its own containers; [NewLease] makes one over another [LeaseBackend] (a container
// another node owns).
type Lease struct {
	b LeaseBackend
}

// LeaseBackend is what a [Lease] does: the methods of Lease, with their contracts, for a
// container a Manager of another process holds (see [NewLease]).
type LeaseBackend interface {
	ContainerID() string
	Run(ctx context.Context, code string, timeout time.Duration) (Result, error)
	PutFile(ctx context.Context, path, source string, r io.Reader, limit int64) (FileInfo, error)
	Release()
}

// NewLease returns a Lease over b.
func NewLease(b LeaseBackend) *Lease { return &Lease{b: b} }

// infoReporter is the optional ability of a [LeaseBackend] to say how it got its container
// (see [Lease.Info]); a backend without it reports the container id alone.
type infoReporter interface {
	Info() AcquireInfo
}

// How a lease got its container (AcquireInfo.Origin).
const (
	// OriginNew: the container started while the lease held it, on demand (a cold start).
	OriginNew = "new"
	// OriginPooled: the container was taken from the warm pool while the lease held it.
	OriginPooled = "pooled"
	// OriginReused: the container had started before the lease was acquired (an earlier
	// request of its session or id started it).
	OriginReused = "reused"
)

// AcquireInfo is how a lease got its container: which one, on which node, and how it
// started. It is for telemetry; nothing in it is the tenant's.
type AcquireInfo struct {
	// Container is the lease's container id (as [Lease.ContainerID]).
	Container string
	// Node is the node whose Manager holds the container (ManagerConfig.Node; "" in a single
	// process).
	Node string
	// Origin is OriginNew, OriginPooled or OriginReused; "" while the container has not
	// started (containers start on the first run or file written).
	Origin string
	// StartMode is how the backend started the container, as it names it (the local
	// backend: "fork" or "exec"); "" when the backend does not say.
	StartMode string
	// Started is when the start of a new container began, and StartDuration how long it took
	// (until the container was ready for code); both zero unless Origin is OriginNew. On
	// another node they are that node's clock.
	Started       time.Time
	StartDuration time.Duration
}

// Info returns how the lease got its current container. It changes as ContainerID does, and
// when the container starts.
func (l *Lease) Info() AcquireInfo {
	if r, ok := l.b.(infoReporter); ok {
		return r.Info()
	}
	return AcquireInfo{Container: l.b.ContainerID()}
}

// ContainerID returns the id of the lease's current container: "cntr_" (or the request's
// IDPrefix) and 128 random bits in hex, opaque. It changes when Run had to replace a lost container.
func (l *Lease) ContainerID() string { return l.b.ContainerID() }

// Run runs code in the key's container, one run at a time per container (runs of other leases
// on the same container queue, bounded by ctx). timeout is the run's wall-clock limit (0 =
// ManagerConfig.RunTimeout); waiting in the queue and starting the container count against ctx
// only. If the key's container was lost or evicted since, Run first gets a fresh container for
// the same key (its state is gone and ContainerID changes). A run that loses its container
// (ErrLost, alone or with ErrTimeout) evicts it and deletes it, but only if the key still maps
// to it. A run whose code awaits the client's tools pauses: its Result has Calls, and the
// container's next run fails with ErrPaused until a Resume (see [Lease.Resume]). Errors:
// ErrTimeout, ErrLost, ErrUnavailable (no container could be started), ErrPaused, ErrClosed,
// or ctx's error; the Result holds what the run showed, also when it failed.
func (l *Lease) Run(ctx context.Context, code string, timeout time.Duration) (Result, error) {
	return l.b.Run(ctx, code, timeout)
}

// PutFile writes a file into the lease's container as [Manager.PutFile] does, also into an
// ephemeral container; if the lease's container was lost, the file goes to its replacement,
// which fails with ErrAtCapacity (which matches ErrUnavailable) when a cap is reached and
// nothing may be evicted.
func (l *Lease) PutFile(ctx context.Context, path, source string, r io.Reader, limit int64) (FileInfo, error) {
	return l.b.PutFile(ctx, path, source, r, limit)
}

// Release ends the lease. An ephemeral container is deleted in the background once no lease
// holds it; a lasting container stays, idle from now (its expiry counts from here).
// Idempotent.
func (l *Lease) Release() { l.b.Release() }

// localLease is a Lease on a container of this Manager.
type localLease struct {
	m   *Manager
	key sandboxKey
	e   *entry // the entry in use; replaced when it dies
	// reused reports whether e's container had started when the lease took e. Guarded by
	// Manager.mu.
	reused   bool
	released bool
}

func (l *localLease) ContainerID() string {
	l.m.mu.Lock()
	defer l.m.mu.Unlock()
	return l.e.id
}

var _ infoReporter = (*localLease)(nil)

func (l *localLease) Info() AcquireInfo {
	l.m.mu.Lock()
	defer l.m.mu.Unlock()
	e := l.e
	info := AcquireInfo{Container: e.id, Node: l.m.cfg.Node}
	if e.c == nil {
		return info
	}
	info.StartMode = e.start.mode
	switch {
	case l.reused:
		info.Origin = OriginReused
	default:
		info.Origin = e.start.origin
		if e.start.origin == OriginNew {
			info.Started, info.StartDuration = e.start.began, e.start.took
		}
	}
	return info
}

// errLeaseReleased is returned by Run on a released lease.
var errLeaseReleased = errors.New("sandbox lease already released")

func (l *localLease) Run(ctx context.Context, code string, timeout time.Duration) (Result, error) {
	if l.released {
		return Result{}, errLeaseReleased
	}
	if timeout <= 0 {
		timeout = l.m.cfg.RunTimeout
	}
	for {
		e, err := l.current()
		if err != nil {
			return Result{}, err
		}
		select {
		case <-e.sem:
		case <-ctx.Done():
			return Result{}, fmt.Errorf("wait for the container: %w", ctx.Err())
		}
		c, err := l.m.ensureStarted(ctx, e)
		if errors.Is(err, errEntryDead) {
			e.sem <- struct{}{}
			continue // replaced while we queued: take the key's current container
		}
		if err != nil {
			e.sem <- struct{}{}
			return Result{}, err
		}
		if l.m.paused(e) {
			e.sem <- struct{}{}
			return Result{}, ErrPaused
		}
		runCtx, cancel := context.WithTimeout(ctx, timeout)
		res, err := c.Run(runCtx, code)
		if note := l.m.takeRestoredNote(e); note != "" {
			res.AddFilesNote(note) // the first run of a restored container (hibernate.go)
		}
		res, err = l.m.settleRun(runCtx, e, c, res, err)
		cancel()
		l.m.afterRun(e, c, err)
		e.sem <- struct{}{}
		return res, err
	}
}

var errEntryDead = errors.New("sandbox entry gone")

// current returns the lease's entry, moving the lease to the key's live entry (or a new one)
// if its own has died.
func (l *localLease) current() (*entry, error) {
	m := l.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	if !l.e.dead {
		return l.e, nil
	}
	ctx, now := context.Background(), time.Now()
	e, err := m.keyEntryLocked(ctx, l.key)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if e != nil {
		m.touchLocked(ctx, e, now)
	} else if e, err = m.newEntryLocked(ctx, l.key, l.e.spec, l.e.meta, now); err != nil {
		return nil, err
	}
	l.e.leases--
	e.leases++
	l.e, l.reused = e, e.c != nil
	return e, nil
}

// ensureStarted returns e's container, starting it (from the pool when one fits) on first
// use, with the files of a restored container put back (hibernate.go). The caller holds e.sem.
func (m *Manager) ensureStarted(ctx context.Context, e *entry) (Container, error) {
	c, err := m.startEntry(ctx, e)
	if err == nil {
		m.restoreFiles(ctx, e, c)
	}
	return c, err
}

// startEntry is ensureStarted but for the restore.
func (m *Manager) startEntry(ctx context.Context, e *entry) (Container, error) {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, ErrClosed
	}
	if e.dead {
		m.mu.Unlock()
		return nil, errEntryDead
	}
	if e.c != nil {
		c := e.c
		if a, ok := c.(aliveChecker); ok && !a.Alive() {
			// Died while idle: the run goes to a fresh container for the key.
			m.log.Info("container died while idle: replacing it", zap.String("container_id", e.id))
			m.removeLocked(e)
			m.mu.Unlock()
			return nil, errEntryDead
		}
		m.mu.Unlock()
		return c, nil
	}
	if c := m.takeWarmLocked(e.spec); c != nil {
		e.c = c
		e.start = entryStart{origin: OriginPooled, mode: startModeOf(c), began: time.Now()}
		m.mu.Unlock()
		m.metrics.starts.WithLabelValues("warm").Inc()
		return c, nil
	}
	m.active++ // Close waits for a start in progress
	m.mu.Unlock()
	defer m.done()
	// The start is bounded by the request, and stopped by Close.
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stopOnClose := context.AfterFunc(m.ctx, cancel)
	defer stopOnClose()
	began := time.Now()
	c, err := m.p.Create(cctx, e.spec)
	took := time.Since(began)
	if err != nil {
		if m.ctx.Err() != nil && ctx.Err() == nil {
			return nil, ErrClosed
		}
		if !errors.Is(err, ErrUnavailable) && ctx.Err() == nil {
			err = fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		return nil, fmt.Errorf("start container: %w", err)
	}
	m.mu.Lock()
	if m.closed || e.dead {
		// Deleted while it started (by Close, or an eviction of the entry).
		closed := m.closed
		m.mu.Unlock()
		m.deleteNow(c)
		if closed {
			return nil, ErrClosed
		}
		return nil, errEntryDead
	}
	e.c = c
	e.start = entryStart{origin: OriginNew, mode: startModeOf(c), began: began, took: took}
	m.mu.Unlock()
	m.metrics.starts.WithLabelValues("cold").Inc()
	return c, nil
}

// entryStart is how an entry's container started: OriginNew or OriginPooled, the backend's
// start mode, and for a new one when its start began and how long it took.
type entryStart struct {
	origin, mode string
	began        time.Time
	took         time.Duration
}

// startModer is the optional ability of a [Container] to say how its backend started it
// (the local backend's "fork" or "exec").
type startModer interface {
	StartMode() string
}

// startModeOf returns c's start mode, "" when it does not say.
func startModeOf(c Container) string {
	if s, ok := c.(startModer); ok {
		return s.StartMode()
	}
	return ""
}

// afterRun evicts e when its run lost the container, if the key still maps to e.
func (m *Manager) afterRun(e *entry, c Container, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e.dead {
		return
	}
	m.touchLocked(context.Background(), e, time.Now())
	if err == nil || !errors.Is(err, ErrLost) || e.c != c {
		return
	}
	m.log.Info("container lost: evicting it", zap.String("container_id", e.id), zap.Error(err))
	m.metrics.evictions.WithLabelValues("lost").Inc()
	m.removeLocked(e)
}

func (l *localLease) Release() {
	if l.released {
		return
	}
	l.released = true
	m := l.m
	m.mu.Lock()
	defer m.mu.Unlock()
	m.unpinLocked(l.e)
}

// unpinLocked ends one lease (or Manager call) on e: an ephemeral container no lease holds
// any more is deleted, unless a run of it is paused for the client's tool calls (kept for the
// request resuming it, at most until the pause is abandoned and its run ends: see abandon and
// notePause); a lasting one is
// idle from now.
func (m *Manager) unpinLocked(e *entry) {
	e.leases--
	switch {
	case e.dead:
	case e.key.kind == kindEphemeral && e.leases == 0 && !m.closed:
		if e.pause == nil {
			m.removeLocked(e)
		}
	default:
		m.touchLocked(context.Background(), e, time.Now())
	}
}
