package store

import (
	"context"
	"time"
)

// Registration is what a Registry keeps of one container a Manager issued.
type Registration struct {
	// ID is the container id ("cntr_…", or "container_…" for the Messages surface's).
	ID string
	// Identity is the identity the container was issued to.
	Identity string
	// Session is the key of the session name that names the container under Identity (the
	// Manager keeps a fixed-size hash of the client's name, never the name itself); "" for a
	// container no session names (ephemeral, or kept under its id only).
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
	// AllowedDomains is the allowlist of the container's network_policy, as the Containers API
	// shows it; nil when its network is disabled. The policy's domain secrets are never kept
	// here.
	AllowedDomains []string
	// Owner is the node that holds the container's state (see [Nodes]); "" in a single
	// process.
	Owner string
	// Expired reports whether the container expired or was deleted: its state is gone, and the
	// registration is kept only so that its id is told apart from one never issued.
	Expired bool
	// Lifetime, when positive, makes the container one that hibernates when idle past its
	// ExpiresAfter instead of expiring (pkg/sandbox's hibernation), until Lifetime after
	// CreatedAt: then it is gone, and forgotten. 0 for a container that expires.
	Lifetime time.Duration
	// Hibernated reports whether the container is hibernated: its process ended, its files
	// kept on its Owner's disk, restored by the Owner when a request names it.
	Hibernated bool
}

// Registry keeps the names a sandbox Manager (pkg/sandbox) gave its containers, the part of the Manager's state
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

// Node is a sandbox node as it reports itself to the others (see [Nodes]).
type Node struct {
	// ID names the node; it is the Owner of the containers the node starts.
	ID string
	// Addr is where the node's sandbox service listens ("host:port").
	Addr string
	// Containers is how many containers the node holds now.
	Containers int
	// Capacity is how many containers the node may hold in all (its max_containers).
	Capacity int
}

// Nodes is the directory of the live sandbox nodes: each one reports itself with a heartbeat
// that lapses after its ttl, so a node that dies leaves the directory without a word.
// Implementations are safe for concurrent use.
type Nodes interface {
	// Heartbeat records n as live for ttl from now, replacing what n.ID reported before.
	Heartbeat(ctx context.Context, n Node, ttl time.Duration) error
	// Live returns the nodes whose last heartbeat has not lapsed, in any order.
	Live(ctx context.Context) ([]Node, error)
	// Leave removes node id at once (a node shutting down).
	Leave(ctx context.Context, id string) error
}
