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

func key(kind, id string) store.Key { return store.Key{Kind: kind, ID: id} }

func TestPendingScope(t *testing.T) {
	now := time.Unix(1000, 0)
	p := NewPending(func() time.Time { return now })
	outs := []store.PendingCall{{CallID: "call_1", Arguments: `{"code":"print(42)"}`, Output: "42\n"}}
	p.Put("id-a", outs, key("response", "resp_1"), key("conversation", "conv_1"), key("conversation", ""))

	assert.Nil(t, p.Get("id-b", key("response", "resp_1")), "another identity never gets them")
	assert.Nil(t, p.Get("id-a", key("response", "resp_2")), "another id gets nothing")
	assert.Nil(t, p.Get("id-a", key("conversation", "resp_1")), "another kind gets nothing")
	assert.Equal(t, outs, p.Get("id-a", key("response", "resp_1")))
	assert.Equal(t, outs, p.Get("id-a", key("response", "resp_1")), "a second read gets them again")
	assert.Equal(t, outs, p.Get("id-a", key("conversation", "conv_1")))
	assert.ElementsMatch(t, []string{"conv_1"}, p.IDs("id-a", "conversation"), "the empty id was skipped")
	assert.True(t, p.Holds("conversation"))
	assert.False(t, p.Holds("chat_call"))

	p.Drop("id-a", key("conversation", "conv_1"))
	assert.Nil(t, p.Get("id-a", key("conversation", "conv_1")), "dropped")
	assert.False(t, p.Holds("conversation"), "no entry of the kind is left")
	assert.Equal(t, outs, p.Get("id-a", key("response", "resp_1")), "the other key still holds them")

	now = now.Add(PendingTTL + time.Second)
	assert.Nil(t, p.Get("id-a", key("response", "resp_1")), "expired")
	assert.Empty(t, p.per, "nothing is counted for the identity any more")
	assert.False(t, p.Holds("response"))
}

func TestPendingIDsDropExpired(t *testing.T) {
	now := time.Unix(1000, 0)
	p := NewPending(func() time.Time { return now })
	assert.Empty(t, p.IDs("id-a", "chat_call"))
	p.Put("id-a", []store.PendingCall{{CallID: "c", Output: "1"}}, key("chat_call", "call_w"))
	assert.Equal(t, []string{"call_w"}, p.IDs("id-a", "chat_call"))
	assert.Empty(t, p.IDs("id-b", "chat_call"), "another identity has none")
	now = now.Add(PendingTTL + time.Second)
	assert.Empty(t, p.IDs("id-a", "chat_call"), "expired entries are dropped when looked for")
	assert.False(t, p.Holds("chat_call"))
}

func TestPendingBounds(t *testing.T) {
	now := time.Unix(1000, 0)
	p := NewPending(func() time.Time { return now })
	resp := func(id string) store.Key { return key("response", id) }
	// One identity cannot push the others out.
	other := []store.PendingCall{{CallID: "c", Output: "other"}}
	p.Put("quiet", other, resp("resp_q"))
	big := []store.PendingCall{{CallID: "c", Output: strings.Repeat("x", PendingMaxBytesPerIdentity/4)}}
	for i := range 10 {
		p.Put("noisy", big, resp("resp_"+strconv.Itoa(i)))
	}
	assert.Equal(t, other, p.Get("quiet", resp("resp_q")), "another identity's entry survives a noisy one")
	assert.Nil(t, p.Get("noisy", resp("resp_0")), "the noisy identity's oldest entry goes at its bytes share")
	assert.NotNil(t, p.Get("noisy", resp("resp_9")), "its newest entry stays")
	assert.LessOrEqual(t, p.per["noisy"].bytes, PendingMaxBytesPerIdentity, "bytes kept for one identity")

	p.Put("noisy", []store.PendingCall{{CallID: "c", Output: strings.Repeat("x", PendingMaxBytesPerIdentity+1)}}, resp("huge"))
	assert.Nil(t, p.Get("noisy", resp("huge")), "calls larger than an identity's share are not kept")

	small := []store.PendingCall{{CallID: "c", Output: "1"}}
	for i := range pendingMaxEntriesPerIdentity + 10 {
		p.Put("many", small, resp("resp_"+strconv.Itoa(i)))
	}
	assert.Equal(t, pendingMaxEntriesPerIdentity, p.per["many"].entries, "entries kept for one identity")
	assert.Nil(t, p.Get("many", resp("resp_0")), "the oldest went")

	q := NewPending(func() time.Time { return now })
	for i := range pendingMaxEntries + 10 {
		q.Put("id"+strconv.Itoa(i%100), small, resp("resp_"+strconv.Itoa(i)))
	}
	require.LessOrEqual(t, q.order.Len(), pendingMaxEntries, "entries kept in all")
	assert.Equal(t, len(q.byKey), q.order.Len(), "index and order agree")

	r := NewPending(func() time.Time { return now })
	r.Put("id", small, resp("early"))
	now = now.Add(PendingTTL + time.Second)
	r.Put("id", small, resp("late"))
	assert.Equal(t, 1, r.order.Len(), "expired entries are dropped when a new one is stored")
	assert.Equal(t, 1, r.per["id"].entries, "and no longer counted")
}

// Callers without a credential all have the empty identity: a pending call of one must never
// reach another's request, so none is stored for them.
func TestPendingAnonymous(t *testing.T) {
	p := NewPending(nil)
	p.Put("", []store.PendingCall{{CallID: "call_ci", Output: "x"}}, key("chat_call", "call_w"), key("response", "resp_1"))
	assert.False(t, p.Holds("chat_call"))
	assert.Zero(t, p.order.Len(), "no entry at all is stored for the anonymous identity")
	assert.Nil(t, p.Get("", key("response", "resp_1")))
}

func TestAliases(t *testing.T) {
	now := time.Unix(1000, 0)
	p := NewPending(func() time.Time { return now })
	p.PutAlias("id-a", "resp_first", "resp_last")
	p.PutAlias("", "resp_anon", "resp_anon_last")
	assert.Equal(t, "resp_last", p.Alias("id-a", "resp_first"))
	assert.Empty(t, p.Alias("id-b", "resp_first"), "another identity's answer")
	assert.Equal(t, "resp_anon_last", p.Alias("", "resp_anon"), "the anonymous identity's names are kept: they are unguessable")
	assert.Empty(t, p.Alias("id-a", "resp_last"))
	// Pending calls do not push names out.
	for i := range pendingMaxEntries + 10 {
		p.Put("id-a", []store.PendingCall{{CallID: "c", Output: "1"}}, key("response", strconv.Itoa(i)))
	}
	assert.Equal(t, "resp_last", p.Alias("id-a", "resp_first"), "kept beside many pending calls")
	now = now.Add(AliasTTL + time.Second)
	assert.Empty(t, p.Alias("id-a", "resp_first"), "expired")
}

func TestContextContainers(t *testing.T) {
	now := time.Unix(1000, 0)
	p := NewPending(func() time.Time { return now })
	many := []string{"cntr_0", "cntr_1", "cntr_2", "cntr_3", "cntr_4", "cntr_5", "cntr_6", "cntr_7", "cntr_8", "cntr_2", strings.Repeat("x", store.MaxContainerIDBytes+1)}
	p.PutContainers("id-a", many, key("response", "resp_1"), key("conversation", "conv_1"), key("response", ""))
	want := []string{"cntr_1", "cntr_3", "cntr_4", "cntr_5", "cntr_6", "cntr_7", "cntr_8", "cntr_2"}
	assert.Equal(t, want, p.Containers("id-a", key("response", "resp_1")), "the newest, once each, oldest first")
	assert.Equal(t, want, p.Containers("id-a", key("conversation", "conv_1")), "under every key")
	assert.Nil(t, p.Containers("id-b", key("response", "resp_1")), "another identity's answer")
	p.PutContainers("", []string{"cntr_anon"}, key("response", "resp_anon"))
	assert.Nil(t, p.Containers("", key("response", "resp_anon")), "nothing for the anonymous identity")
	p.PutContainers("id-a", []string{"cntr_9"}, key("conversation", "conv_1"))
	assert.Equal(t, []string{"cntr_9"}, p.Containers("id-a", key("conversation", "conv_1")), "replaced")
	now = now.Add(ContainersTTL + time.Second)
	assert.Nil(t, p.Containers("id-a", key("response", "resp_1")), "expired")
}
