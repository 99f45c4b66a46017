package sandbox

import (
	"context"
	"sync"
	"time"
)

// Registration is what a Registry keeps of one container a Manager issued.
type Registration struct {
	// ID is the container id ("cntr_…").
	ID string
	// Identity is the identity the container was issued to.
	Identity string
	// Session is the session name that names the container under Identity; "" for a container
	// no session names (ephemeral, or kept under its id only).
	Session string
	// LastUsed is when the container was last active: acquired, run in, released, or reached
	// through a Manager method. A container no lease holds expires once it has been idle for
	// its ExpiresAfter.
	LastUsed time.Time
	// Name is the name the container was created with; "" for one the loop created.
	Name string
	// CreatedAt is when the Manager issued the container.
	CreatedAt time.Time
	// ExpiresAfter is the container's idle expiry, counted from LastUsed; 0 for an ephemeral
	// container, deleted when its leases end.
	ExpiresAfter time.Duration
	// MemoryLimit is the container's memory as created ("1g").
	MemoryLimit string
	// Expired reports whether the container expired or was deleted: its state is gone, and the
	// registration is kept only so that its id is told apart from one never issued.
	Expired bool
}

// Registry keeps the names a Manager gave its containers, the part of the Manager's state
// that replicas would share: which identity each container id belongs to, which session key
// (identity, session name) names which container id, when each was last used, and which
// have expired. The live containers, their leases and files, the caps and the warm pool stay
// in the Manager.
//
// Implementations are safe for concurrent use. The Manager calls them with its lock held: a
// call must not call back into the Manager.
type Registry interface {
	// Add records r. If r.Session is set, the key (r.Identity, r.Session) names r.ID from now
	// on, in place of any container it named before.
	Add(ctx context.Context, r Registration) error
	// Lookup returns the registration of container id, expired or not; ok is false when there
	// is none.
	Lookup(ctx context.Context, id string) (r Registration, ok bool, err error)
	// Session returns the registration of the container the key (identity, session) names; ok
	// is false when there is none. An expired container is named by no key.
	Session(ctx context.Context, identity, session string) (r Registration, ok bool, err error)
	// List returns the registrations of identity's containers, expired or not, in any order.
	List(ctx context.Context, identity string) ([]Registration, error)
	// Touch records a use of container id at t. An id not recorded is left unrecorded.
	Touch(ctx context.Context, id string, t time.Time) error
	// Expire marks container id expired (Expired set, the rest kept), and frees its session
	// key if that still names it. An id not recorded is left unrecorded.
	Expire(ctx context.Context, id string) error
	// Remove forgets container id, and its session key if that still names it. Removing an id
	// not recorded does nothing.
	Remove(ctx context.Context, id string) error
}

// mapRegistry is the in-memory Registry: the Registry of a Manager whose ManagerConfig names
// none, and what pkg/store/memory hands out (NewMemoryRegistry).
type mapRegistry struct {
	mu         sync.Mutex
	byID       map[string]Registration
	bySession  map[[2]string]string           // (identity, session) -> container id
	byIdentity map[string]map[string]struct{} // identity -> its container ids
}

var _ Registry = (*mapRegistry)(nil)

// NewMemoryRegistry returns an empty Registry in the process's memory, safe for concurrent
// use; its names are lost when the process ends.
func NewMemoryRegistry() Registry { return newMapRegistry() }

func newMapRegistry() *mapRegistry {
	return &mapRegistry{
		byID:       map[string]Registration{},
		bySession:  map[[2]string]string{},
		byIdentity: map[string]map[string]struct{}{},
	}
}

func (r *mapRegistry) Add(_ context.Context, reg Registration) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if old, ok := r.byID[reg.ID]; ok && old.Identity != reg.Identity {
		r.forgetLocked(old)
	}
	r.byID[reg.ID] = reg
	ids := r.byIdentity[reg.Identity]
	if ids == nil {
		ids = map[string]struct{}{}
		r.byIdentity[reg.Identity] = ids
	}
	ids[reg.ID] = struct{}{}
	if reg.Session != "" && !reg.Expired {
		r.bySession[[2]string{reg.Identity, reg.Session}] = reg.ID
	}
	return nil
}

func (r *mapRegistry) Lookup(_ context.Context, id string) (Registration, bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	reg, ok := r.byID[id]
	return reg, ok, nil
}

func (r *mapRegistry) Session(_ context.Context, identity, session string) (Registration, bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	id, ok := r.bySession[[2]string{identity, session}]
	if !ok {
		return Registration{}, false, nil
	}
	reg, ok := r.byID[id]
	return reg, ok, nil
}

func (r *mapRegistry) List(_ context.Context, identity string) ([]Registration, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Registration, 0, len(r.byIdentity[identity]))
	for id := range r.byIdentity[identity] {
		out = append(out, r.byID[id])
	}
	return out, nil
}

func (r *mapRegistry) Touch(_ context.Context, id string, t time.Time) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if reg, ok := r.byID[id]; ok {
		reg.LastUsed = t
		r.byID[id] = reg
	}
	return nil
}

func (r *mapRegistry) Expire(_ context.Context, id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	reg, ok := r.byID[id]
	if !ok {
		return nil
	}
	r.dropSessionLocked(reg)
	reg.Expired = true
	r.byID[id] = reg
	return nil
}

func (r *mapRegistry) Remove(_ context.Context, id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if reg, ok := r.byID[id]; ok {
		r.forgetLocked(reg)
	}
	return nil
}

// forgetLocked drops reg from every index.
func (r *mapRegistry) forgetLocked(reg Registration) {
	delete(r.byID, reg.ID)
	if ids := r.byIdentity[reg.Identity]; ids != nil {
		delete(ids, reg.ID)
		if len(ids) == 0 {
			delete(r.byIdentity, reg.Identity)
		}
	}
	r.dropSessionLocked(reg)
}

// dropSessionLocked frees reg's session key if it still names reg.
func (r *mapRegistry) dropSessionLocked(reg Registration) {
	if k := [2]string{reg.Identity, reg.Session}; reg.Session != "" && r.bySession[k] == reg.ID {
		delete(r.bySession, k)
	}
}
