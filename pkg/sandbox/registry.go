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
	// Session is the session name that names the container under Identity; "" for an
	// ephemeral container.
	Session string
	// LastUsed is when a lease last acquired it, ran in it or released it. A session container
	// no lease holds is deleted once it has been idle for the Manager's SessionIdleTTL.
	LastUsed time.Time
}

// Registry keeps the names a Manager gave its containers, the part of the Manager's state
// that replicas would share: which identity each container id belongs to, which session key
// (identity, session name) names which container id, and when each was last used. The live
// containers, their leases, the caps and the warm pool stay in the Manager.
//
// Implementations are safe for concurrent use. The Manager calls them with its lock held: a
// call must not call back into the Manager.
type Registry interface {
	// Add records r. If r.Session is set, the key (r.Identity, r.Session) names r.ID from now
	// on, in place of any container it named before.
	Add(ctx context.Context, r Registration) error
	// Lookup returns the registration of container id; ok is false when there is none.
	Lookup(ctx context.Context, id string) (r Registration, ok bool, err error)
	// Session returns the registration of the container the key (identity, session) names; ok
	// is false when there is none.
	Session(ctx context.Context, identity, session string) (r Registration, ok bool, err error)
	// Touch records a use of container id at t. An id not recorded is left unrecorded.
	Touch(ctx context.Context, id string, t time.Time) error
	// Remove forgets container id, and its session key if that still names it. Removing an id
	// not recorded does nothing.
	Remove(ctx context.Context, id string) error
}

// mapRegistry is the in-memory Registry: the Registry of a Manager whose ManagerConfig names
// none, and what pkg/store/memory hands out (NewMemoryRegistry).
type mapRegistry struct {
	mu        sync.Mutex
	byID      map[string]Registration
	bySession map[[2]string]string // (identity, session) -> container id
}

var _ Registry = (*mapRegistry)(nil)

// NewMemoryRegistry returns an empty Registry in the process's memory, safe for concurrent
// use; its names are lost when the process ends.
func NewMemoryRegistry() Registry { return newMapRegistry() }

func newMapRegistry() *mapRegistry {
	return &mapRegistry{byID: map[string]Registration{}, bySession: map[[2]string]string{}}
}

func (r *mapRegistry) Add(_ context.Context, reg Registration) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.byID[reg.ID] = reg
	if reg.Session != "" {
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

func (r *mapRegistry) Touch(_ context.Context, id string, t time.Time) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if reg, ok := r.byID[id]; ok {
		reg.LastUsed = t
		r.byID[id] = reg
	}
	return nil
}

func (r *mapRegistry) Remove(_ context.Context, id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	reg, ok := r.byID[id]
	if !ok {
		return nil
	}
	delete(r.byID, id)
	if k := [2]string{reg.Identity, reg.Session}; reg.Session != "" && r.bySession[k] == id {
		delete(r.bySession, k)
	}
	return nil
}
