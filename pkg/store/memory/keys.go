package memory

import (
	"crypto/sha256"

	"github.com/codeinterp/codeinterp/pkg/store"
)

// Every id the stores keep as a map key comes from a request or an answer and may be chosen by
// the client: a conversation id, a previous_response_id, an answer's id, a Chat tool call id.
// Issue 23: a 16 MiB conversation id was kept as sent for a day. An id of up to MaxKeyBytes is
// kept as it is; a longer one is kept as a fixed-size hash of it (33 bytes), which finds the
// same entry for the same id, so that a long id costs what a short one does and no request is
// refused for it. A hashed id cannot be listed back ([Pending.IDs] lists only the ids kept as
// they are), so a Chat continuation by a tool call id longer than MaxKeyBytes is not put back.
const MaxKeyBytes = 128

// MaxAliasBytes bounds the upstream answer id an alias is kept to: an alias to a longer one is
// not kept (no upstream names its answers so; the continuation then carries the client's id).
const MaxAliasBytes = 1024

// boundedID returns the key id is kept under: id itself up to MaxKeyBytes, else a NUL and the
// SHA-256 of id.
func boundedID(id string) string {
	if len(id) <= MaxKeyBytes {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	return "\x00" + string(sum[:])
}

// boundedKey returns the store key k is kept under.
func boundedKey(identity string, k store.Key) entryKey {
	return entryKey{identity: identity, key: store.Key{Kind: k.Kind, ID: boundedID(k.ID)}}
}
