package memory

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/codeinterp/codeinterp/pkg/store"
)

// The behaviour of Pending is checked by the contract tests (storetest, run by contract_test.go);
// the tests here check what it counts inside.

func key(kind, id string) store.Key { return store.Key{Kind: kind, ID: id} }

func TestPendingCountsExpired(t *testing.T) {
	now := time.Unix(1000, 0)
	p := NewPending(func() time.Time { return now })
	outs := []store.PendingCall{{CallID: "call_1", Output: "42\n"}}
	p.Put("id-a", outs, key("response", "resp_1"), key("conversation", "conv_1"))
	p.Drop("id-a", key("conversation", "conv_1"))
	now = now.Add(PendingTTL + time.Second)
	assert.Nil(t, p.Get("id-a", key("response", "resp_1")), "expired")
	assert.Empty(t, p.per, "nothing is counted for the identity any more")
	assert.Empty(t, p.kinds, "nor for any kind")
}

func TestPendingCountsBounds(t *testing.T) {
	now := time.Unix(1000, 0)
	p := NewPending(func() time.Time { return now })
	resp := func(id string) store.Key { return key("response", id) }
	big := []store.PendingCall{{CallID: "c", Output: strings.Repeat("x", PendingMaxBytesPerIdentity/4)}}
	for i := range 10 {
		p.Put("noisy", big, resp("resp_"+strconv.Itoa(i)))
	}
	assert.LessOrEqual(t, p.per["noisy"].bytes, PendingMaxBytesPerIdentity, "bytes counted for one identity")

	small := []store.PendingCall{{CallID: "c", Output: "1"}}
	for i := range PendingMaxEntriesPerIdentity + 10 {
		p.Put("many", small, resp("resp_"+strconv.Itoa(i)))
	}
	assert.Equal(t, PendingMaxEntriesPerIdentity, p.per["many"].entries, "entries counted for one identity")

	q := NewPending(func() time.Time { return now })
	for i := range PendingMaxEntries + 10 {
		q.Put("id"+strconv.Itoa(i%100), small, resp("resp_"+strconv.Itoa(i)))
	}
	require.LessOrEqual(t, q.order.Len(), PendingMaxEntries, "entries kept in all")
	assert.Equal(t, len(q.byKey), q.order.Len(), "index and order agree")

	r := NewPending(func() time.Time { return now })
	r.Put("id", small, resp("early"))
	now = now.Add(PendingTTL + time.Second)
	r.Put("id", small, resp("late"))
	assert.Equal(t, 1, r.order.Len(), "expired entries are dropped when a new one is stored")
	assert.Equal(t, 1, r.per["id"].entries, "and no longer counted")
}

// Callers without a credential all have the empty identity: nothing at all is stored for them.
func TestPendingAnonymous(t *testing.T) {
	p := NewPending(nil)
	p.Put("", []store.PendingCall{{CallID: "call_ci", Output: "x"}}, key("chat_call", "call_w"), key("response", "resp_1"))
	assert.Zero(t, p.order.Len(), "no entry at all is stored for the anonymous identity")
	p.PutContainers("", []string{"cntr_anon"}, key("response", "resp_anon"))
	assert.Zero(t, p.containers.order.Len(), "no context containers are stored for the anonymous identity")
}
