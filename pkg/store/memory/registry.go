package memory

import (
	"context"
	"sync"
	"time"

	"github.com/codeinterp/codeinterp/pkg/store"
)

// Registry is the in-memory [store.Registry]: the names of one sandbox Manager's containers,
// lost when the process ends. It is the Registry of a Manager whose configuration names none.
// Safe for concurrent use.
type Registry struct {
	mu         sync.Mutex
	byID       map[string]store.Registration
	bySession  map[[2]string]string           // (identity, session) -> container id
	byIdentity map[string]map[string]struct{} // identity -> its container ids
}

var _ store.Registry = (*Registry)(nil)

// NewRegistry returns an empty Registry.
func NewRegistry() *Registry {
	return &Registry{
		byID:       map[string]store.Registration{},
		bySession:  map[[2]string]string{},
		byIdentity: map[string]map[string]struct{}{},
	}
}

func (r *Registry) Add(_ context.Context, reg store.Registration) error {
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

func (r *Registry) Lookup(_ context.Context, id string) (store.Registration, bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	reg, ok := r.byID[id]
	return reg, ok, nil
}

func (r *Registry) Session(_ context.Context, identity, session string) (store.Registration, bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	id, ok := r.bySession[[2]string{identity, session}]
	if !ok {
		return store.Registration{}, false, nil
	}
	reg, ok := r.byID[id]
	return reg, ok, nil
}

func (r *Registry) List(_ context.Context, identity string) ([]store.Registration, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]store.Registration, 0, len(r.byIdentity[identity]))
	for id := range r.byIdentity[identity] {
		out = append(out, r.byID[id])
	}
	return out, nil
}

func (r *Registry) Touch(_ context.Context, id string, t time.Time) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if reg, ok := r.byID[id]; ok {
		reg.LastUsed = t
		r.byID[id] = reg
	}
	return nil
}

func (r *Registry) Expire(_ context.Context, id string) error {
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

func (r *Registry) Remove(_ context.Context, id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if reg, ok := r.byID[id]; ok {
		r.forgetLocked(reg)
	}
	return nil
}

// forgetLocked drops reg from every index.
func (r *Registry) forgetLocked(reg store.Registration) {
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
func (r *Registry) dropSessionLocked(reg store.Registration) {
	if k := [2]string{reg.Identity, reg.Session}; reg.Session != "" && r.bySession[k] == reg.ID {
		delete(r.bySession, k)
	}
}
