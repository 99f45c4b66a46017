// Package store holds the interfaces of codeinterp's cross-request state: what one request
// leaves for a later one of the same caller. Every method is scoped by the caller's identity;
// the anonymous identity "" has nothing stored. The in-memory implementation is in
// store/memory; one shared by several replicas lands beside it.
package store

// PendingCall is an internal code call, with its output, that an answer did not show because
// the same turn also called a client function (see [Pending]).
type PendingCall struct {
	// CallID is the call's id.
	CallID string
	// Arguments is the call's raw arguments string.
	Arguments string
	// Output is the text the model read as the call's result.
	Output string
}

// Size is the bytes the call holds, as the stores count them.
func (c PendingCall) Size() int { return len(c.CallID) + len(c.Arguments) + len(c.Output) }

// Key names what a continuation refers to: a Kind, which the API surface that stores and
// reads it chooses (an answer's id, a conversation, a client tool call), and the ID.
type Key struct {
	Kind string
	ID   string
}

// Pending remembers the internal calls an answer left out because its turn also called a
// client function: the client gets the answer with its own call to run, and a later request
// that continues from there (by an answer id, a conversation, a replayed tool call) must
// carry ours again. Implementations bound what they keep (per identity and in all) and for how
// long; a call may find nothing where an earlier Put was made. Safe for concurrent use.
type Pending interface {
	// Put remembers calls under each of keys (a key with an empty ID is skipped) for identity,
	// replacing what the keys held. Nothing is stored for the identity "".
	Put(identity string, calls []PendingCall, keys ...Key)
	// Get returns the calls stored under key for identity, or nil. Entries stay until they
	// expire or are dropped: a client may continue from one answer several times.
	Get(identity string, key Key) []PendingCall
	// Swap replaces what key holds for identity with calls, as Put does, only when it holds old
	// (compared field by field; an entry gone or expired holds nothing, which no old matches),
	// and reports whether it did: a compare-and-set, atomic among the replicas sharing the
	// store, so that of several callers swapping the same old exactly one succeeds.
	Swap(identity string, key Key, old, calls []PendingCall) bool
	// Drop forgets key for identity.
	Drop(identity string, key Key)
	// IDs returns the ids of identity's live entries of kind, in no order.
	IDs(identity, kind string) []string
	// Holds reports whether any identity has entries of kind: when none has, a request need
	// not be searched for their ids.
	Holds(kind string) bool
}

// MaxContinuationBytes bounds what putting pending calls back may add to one request: a store
// keeps at most MaxPendingBytesPerIdentity of them per caller, which JSON escaping may grow;
// beyond it the request is not continued.
const (
	MaxPendingBytesPerIdentity = 1 << 20
	MaxContinuationBytes       = 4 * MaxPendingBytesPerIdentity
)

// Aliases maps an answer id a client was given to the upstream's id for the same answer, for
// the requests that continue from it: a streamed answer must name itself before the loop has
// reached the upstream's last answer, whose id a continuation must carry upstream. Bounded
// and scoped like [Pending]. Safe for concurrent use.
type Aliases interface {
	// PutAlias remembers that identity's answer from is the upstream's answer to. Nothing is
	// stored for the identity "".
	PutAlias(identity, from, to string)
	// Alias returns the upstream id of identity's answer from, or "".
	Alias(identity, from string) string
}

// MaxContextContainers bounds the container ids kept for one answer (see [ContextContainers]):
// the most recent ones are kept.
const MaxContextContainers = 8

// MaxContainerIDBytes bounds the length of a container id a store keeps; a longer one is not
// one codeinterp issued.
const MaxContainerIDBytes = 64

// ContextContainers remembers the containers an answer's code_interpreter_call items ran in,
// under the answer's id and its conversation, so that a request continuing from it
// (previous_response_id, conversation) reuses the last one still alive as the native auto
// container does. Bounded and scoped like [Pending]; nothing is kept for the identity "".
// Safe for concurrent use.
type ContextContainers interface {
	// PutContainers remembers ids (oldest first; at most MaxContextContainers of the newest are
	// kept) under each of keys (a key with an empty ID is skipped) for identity, replacing what
	// the keys held.
	PutContainers(identity string, ids []string, keys ...Key)
	// Containers returns the ids stored under key for identity, oldest first, or nil.
	Containers(identity string, key Key) []string
}

// Continuations is what an answer leaves for the requests that continue from it.
type Continuations interface {
	Pending
	Aliases
	ContextContainers
}
