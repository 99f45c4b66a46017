package sandbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/codeinterp/codeinterp/pkg/store"
)

// Container statuses, as the Containers API shows them.
const (
	StatusRunning = "running"
	StatusExpired = "expired"
)

// ContainerInfo is what the Containers API shows of a container.
type ContainerInfo struct {
	// ID is the container id ("cntr_…").
	ID string
	// Name is the name it was created with; "" for a container the loop created.
	Name string
	// CreatedAt is when it was issued; LastActiveAt when it was last used (a run, a lease, a
	// call on it or its files).
	CreatedAt, LastActiveAt time.Time
	// ExpiresAfter is its idle expiry, anchored on LastActiveAt.
	ExpiresAfter time.Duration
	// MemoryLimit is its memory as created: the provider's default ("1g") when none was asked.
	MemoryLimit string
	// AllowedDomains is its network_policy's allowlist; nil when its network is disabled. Its
	// domain secrets are never shown.
	AllowedDomains []string
	// Status is StatusRunning while it is live, StatusExpired once it expired or was deleted.
	Status string
}

// CreateRequest asks for a container through the Containers API.
type CreateRequest struct {
	// Identity is the caller's identity; the anonymous identity "" has no lasting containers.
	Identity string
	// Name is the container's name, shown as given.
	Name string
	// Spec describes the container.
	Spec Spec
	// ExpiresAfter is the container's idle expiry; 0 means the Manager's default
	// (ManagerConfig.SessionIdleTTL).
	ExpiresAfter time.Duration
}

// infoOf returns what the Containers API shows of the container registered as r.
func (m *Manager) infoOf(r store.Registration) ContainerInfo {
	status := StatusRunning
	if r.Expired {
		status = StatusExpired
	}
	mem := r.MemoryLimit
	if mem == "" {
		mem = defaultMemoryLimit
	}
	return ContainerInfo{
		ID: r.ID, Name: r.Name, CreatedAt: r.CreatedAt, LastActiveAt: r.LastUsed,
		ExpiresAfter: m.expiryOf(r), MemoryLimit: mem, AllowedDomains: r.AllowedDomains, Status: status,
	}
}

// Create issues a new container to r.Identity, kept until it has been idle for its expiry and
// reachable by its id as one the loop created is. The container starts on first use (a run,
// or a file written into it). It fails with ErrInvalidSpec (a *SpecError) for a Spec the
// provider refuses, with ErrAtCapacity (which matches ErrUnavailable) at the caps after
// evicting what may be evicted (as Acquire does), with ErrUnavailable for the anonymous
// identity or when the Registry fails, and with ErrClosed after Close.
func (m *Manager) Create(ctx context.Context, r CreateRequest) (ContainerInfo, error) {
	if err := ctx.Err(); err != nil {
		return ContainerInfo{}, fmt.Errorf("create container: %w", err)
	}
	if r.Identity == "" {
		return ContainerInfo{}, fmt.Errorf("%w: an anonymous caller has no lasting containers", ErrUnavailable)
	}
	if err := m.CheckSpec(r.Spec); err != nil {
		return ContainerInfo{}, fmt.Errorf("create container: %w", err)
	}
	exp := r.ExpiresAfter
	if exp <= 0 {
		exp = m.cfg.SessionIdleTTL
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ContainerInfo{}, ErrClosed
	}
	now := time.Now()
	k := sandboxKey{kind: kindKept, identity: r.Identity, name: randomHex(16)}
	e, err := m.newEntryLocked(ctx, k, r.Spec, entryMeta{name: r.Name, expiresAfter: exp}, now)
	if err != nil {
		return ContainerInfo{}, err
	}
	reg, ok := m.registrationLocked(e)
	if !ok {
		return ContainerInfo{}, fmt.Errorf("%w: the registry does not answer", ErrUnavailable)
	}
	return m.infoOf(reg), nil
}

// Container returns container id of identity, and refreshes its last activity. An id not
// issued to identity fails with ErrUnknownContainer; an expired or deleted container still
// remembered (see TombstoneTTL) is shown with StatusExpired and a nil error. The anonymous
// identity has only its containers whose run is paused for tool calls (kept for their resume).
func (m *Manager) Container(ctx context.Context, identity, id string) (ContainerInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ContainerInfo{}, ErrClosed
	}
	if identity == "" {
		return m.pausedEphemeralLocked(ctx, id)
	}
	now := time.Now()
	e, err := m.issuedLocked(ctx, identity, id, now)
	if errors.Is(err, ErrExpiredContainer) || errors.Is(err, errHibernated) {
		// Shown as it is remembered: expired, or hibernated (StatusRunning: restored when
		// used).
		r, _, ok, err := m.lookupLocked(ctx, identity, id)
		if err != nil {
			return ContainerInfo{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		if !ok {
			return ContainerInfo{}, ErrUnknownContainer
		}
		return m.infoOf(r), nil
	}
	if err != nil {
		return ContainerInfo{}, err
	}
	m.touchLocked(ctx, e, now)
	r, ok := m.registrationLocked(e)
	if !ok {
		return ContainerInfo{}, fmt.Errorf("%w: the registry does not answer", ErrUnavailable)
	}
	return m.infoOf(r), nil
}

// pausedEphemeralLocked returns the anonymous identity's container id while a run of it is
// paused for the client's tool calls, the one container of that identity a request may name
// (to resume the run); ErrUnknownContainer for any other. The caller holds m.mu.
func (m *Manager) pausedEphemeralLocked(ctx context.Context, id string) (ContainerInfo, error) {
	r, e, ok, err := m.lookupLocked(ctx, "", id)
	if err != nil {
		return ContainerInfo{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if !ok || e == nil || e.dead || e.key.kind != kindEphemeral || e.pause == nil {
		return ContainerInfo{}, ErrUnknownContainer
	}
	return m.infoOf(r), nil
}

// Containers returns identity's containers, live and expired ones still remembered, by
// CreatedAt then ID ascending. Listing is no activity: it refreshes none of them. The
// anonymous identity has none.
func (m *Manager) Containers(ctx context.Context, identity string) ([]ContainerInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	if identity == "" {
		return nil, nil
	}
	regs, err := m.reg.List(ctx, identity)
	if err != nil {
		return nil, fmt.Errorf("%w: list containers: %w", ErrUnavailable, err)
	}
	now := time.Now()
	out := make([]ContainerInfo, 0, len(regs))
	for _, r := range regs {
		if r.Identity != identity {
			continue
		}
		if !r.Expired {
			e := m.live[r.ID]
			switch {
			case r.Hibernated && (e == nil || e.dead):
				// hibernated: shown as running (restored when used)
			case (e == nil || e.dead) && r.Owner != m.cfg.Node:
				continue // another node's (see issuedLocked)
			case e == nil || e.dead:
				m.lostLocked(ctx, r) // this node's, lost (see lookupLocked)
				r.Expired = true
			case m.idlePastLocked(e, r, now):
				m.metrics.evictions.WithLabelValues("idle").Inc()
				m.removeLocked(e)
				r.Expired = true
			}
		}
		out = append(out, m.infoOf(r))
	}
	slices.SortFunc(out, func(a, b ContainerInfo) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.ID, b.ID))
	})
	return out, nil
}

// DeleteContainer deletes container id of identity now (its processes and files go in the
// background; a run in it fails) and remembers it as expired. An id not issued to identity
// fails with ErrUnknownContainer; deleting a container already expired does nothing.
func (m *Manager) DeleteContainer(ctx context.Context, identity, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	if identity == "" {
		return ErrUnknownContainer
	}
	e, err := m.issuedLocked(ctx, identity, id, time.Now())
	if errors.Is(err, ErrExpiredContainer) {
		return nil
	}
	if errors.Is(err, errHibernated) {
		m.dropHibernatedLocked(id)
		return nil
	}
	if err != nil {
		return err
	}
	m.removeLocked(e)
	return nil
}
