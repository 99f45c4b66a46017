package memory

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/codeinterp/codeinterp/pkg/store"
)

func TestPendingLimited(t *testing.T) {
	now := time.Unix(1000, 0)
	p := NewPendingLimited(func() time.Time { return now }, PendingLimits{TTL: time.Minute, MaxEntriesPerIdentity: 2})
	call := []store.PendingCall{{CallID: "c", Arguments: "{}"}}
	for _, id := range []string{"a", "b", "c"} {
		p.Put("id-1", call, store.Key{Kind: "k", ID: id})
	}
	assert.Nil(t, p.Get("id-1", store.Key{Kind: "k", ID: "a"}), "the oldest goes past max_entries_per_identity 2")
	assert.NotNil(t, p.Get("id-1", store.Key{Kind: "k", ID: "c"}), "the newest stays")
	now = now.Add(2 * time.Minute)
	p.Put("id-2", call, store.Key{Kind: "k", ID: "d"})
	assert.Nil(t, p.Get("id-1", store.Key{Kind: "k", ID: "c"}), "gone after the TTL of 1m")
}
