package memory

import (
	"context"
	"sync"
	"time"

	"github.com/codeinterp/codeinterp/pkg/sandbox"
)

// Registry is a [sandbox.Registry] in memory: the names of one Manager's containers, lost
// when the process ends. Safe for concurrent use.
type Registry struct {
	mu        sync.Mutex
	byID      map[string]sandbox.Registration
	bySession map[sessionKey]string // container id
}

// sessionKey is a session name scoped by its identity.
type sessionKey struct {
	identity, session string
}

var _ sandbox.Registry = (*Registry)(nil)

// NewRegistry returns an empty Registry.
func NewRegistry() *Registry {
	return &Registry{byID: map[string]sandbox.Registration{}, bySession: map[sessionKey]string{}}
}

// Add records reg; a session key names reg.ID from now on.
func (r *Registry) Add(_ context.Context, reg sandbox.Registration) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.byID[reg.ID] = reg
	if reg.Session != "" {
		r.bySession[sessionKey{reg.Identity, reg.Session}] = reg.ID
	}
	return nil
}

// Lookup returns the registration of container id.
func (r *Registry) Lookup(_ context.Context, id string) (sandbox.Registration, bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	reg, ok := r.byID[id]
	return reg, ok, nil
}

// Session returns the registration of the container (identity, session) names.
func (r *Registry) Session(_ context.Context, identity, session string) (sandbox.Registration, bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	id, ok := r.bySession[sessionKey{identity, session}]
	if !ok {
		return sandbox.Registration{}, false, nil
	}
	reg, ok := r.byID[id]
	return reg, ok, nil
}

// Touch records a use of container id at t.
func (r *Registry) Touch(_ context.Context, id string, t time.Time) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if reg, ok := r.byID[id]; ok {
		reg.LastUsed = t
		r.byID[id] = reg
	}
	return nil
}

// Remove forgets container id, and its session key if that still names it.
func (r *Registry) Remove(_ context.Context, id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	reg, ok := r.byID[id]
	if !ok {
		return nil
	}
	delete(r.byID, id)
	if k := (sessionKey{reg.Identity, reg.Session}); reg.Session != "" && r.bySession[k] == id {
		delete(r.bySession, k)
	}
	return nil
}
