package storetest

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/codeinterp/codeinterp/pkg/store"
)

// Limits are the lifetimes and bounds of the continuation store under test, which the contract
// tests probe (package memory's are the reference).
type Limits struct {
	PendingTTL, AliasTTL, ContainersTTL time.Duration
	// PendingMaxEntries bounds the pending entries in all; PendingMaxEntriesPerIdentity and
	// PendingMaxBytesPerIdentity those of one identity.
	PendingMaxEntries, PendingMaxEntriesPerIdentity, PendingMaxBytesPerIdentity int
	// MaxKeyBytes is the longest id kept as it is (a longer one is hashed and not listed);
	// MaxAliasBytes the longest upstream id an alias is kept to.
	MaxKeyBytes, MaxAliasBytes int
}

// NewContinuations returns a new, empty store that reads the time from now; the contract tests
// move that clock to make entries expire.
type NewContinuations func(t *testing.T, now func() time.Time) store.Continuations

func key(kind, id string) store.Key { return store.Key{Kind: kind, ID: id} }

// clock is a contract test's fake time, safe for concurrent use.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Unix(1000, 0)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// TestPending checks that the stores newStore returns behave as [store.Pending] says, within
// l. A package with a Pending store calls it from a test of its own.
func TestPending(t *testing.T, l Limits, newStore NewContinuations) {
	t.Helper()
	t.Run("scope", func(t *testing.T) {
		c := newClock()
		p := newStore(t, c.Now)
		outs := []store.PendingCall{{CallID: "call_1", Arguments: `{"code":"print(42)"}`, Output: "42\n"}}
		p.Put("id-a", outs, key("response", "resp_1"), key("conversation", "conv_1"), key("conversation", ""))

		assert.Nil(t, p.Get("id-b", key("response", "resp_1")), "another identity never gets them")
		assert.Nil(t, p.Get("id-a", key("response", "resp_2")), "another id gets nothing")
		assert.Nil(t, p.Get("id-a", key("conversation", "resp_1")), "another kind gets nothing")
		assert.Equal(t, outs, p.Get("id-a", key("response", "resp_1")), "Get resp_1")
		assert.Equal(t, outs, p.Get("id-a", key("response", "resp_1")), "a second read gets them again")
		assert.Equal(t, outs, p.Get("id-a", key("conversation", "conv_1")), "Get conv_1")
		assert.ElementsMatch(t, []string{"conv_1"}, p.IDs("id-a", "conversation"), "the empty id was skipped")
		assert.True(t, p.Holds("conversation"), "Holds conversation")
		assert.False(t, p.Holds("chat_call"), "Holds chat_call")

		p.Drop("id-a", key("conversation", "conv_1"))
		assert.Nil(t, p.Get("id-a", key("conversation", "conv_1")), "dropped")
		assert.False(t, p.Holds("conversation"), "no entry of the kind is left")
		assert.Equal(t, outs, p.Get("id-a", key("response", "resp_1")), "the other key still holds them")

		c.Add(l.PendingTTL + time.Second)
		assert.Nil(t, p.Get("id-a", key("response", "resp_1")), "expired")
		assert.False(t, p.Holds("response"), "Holds after expiry")
	})

	// Swap is a compare-and-set: it writes only over what the caller read.
	t.Run("swap", func(t *testing.T) {
		c := newClock()
		p := newStore(t, c.Now)
		k := key("response", "resp_s")
		running := []store.PendingCall{{CallID: "resp_s", Arguments: `{"status":"in_progress","note":"<&>"}`, Output: "[]"}}
		failed := []store.PendingCall{{CallID: "resp_s", Arguments: `{"status":"failed"}`, Output: "[]"}}
		assert.False(t, p.Swap("id-a", k, running, failed), "Swap of an entry never put")
		assert.Nil(t, p.Get("id-a", k), "a Swap that failed stored nothing")

		p.Put("id-a", running, k)
		assert.False(t, p.Swap("id-b", k, running, failed), "Swap of another identity's entry")
		assert.False(t, p.Swap("id-a", k, failed, running), "Swap from a value the entry does not hold")
		assert.Equal(t, running, p.Get("id-a", k), "the entry after Swaps that failed")
		assert.True(t, p.Swap("id-a", k, p.Get("id-a", k), failed), "Swap from the value read")
		assert.Equal(t, failed, p.Get("id-a", k), "the entry after the Swap")
		assert.False(t, p.Swap("id-a", k, running, failed), "a second Swap from the old value")
		assert.True(t, p.Holds("response"), "Holds after a Swap")
		assert.Equal(t, []string{"resp_s"}, p.IDs("id-a", "response"), "IDs after a Swap")

		c.Add(l.PendingTTL + time.Second)
		assert.False(t, p.Swap("id-a", k, failed, running), "Swap of an expired entry")
		assert.Nil(t, p.Get("id-a", k), "an expired entry stays gone")
	})

	// A writer fenced by its lease (a background response's runner): each of its writes is a
	// Swap from what it last wrote; once another writer has taken over (swapped the record from
	// what it read, dropped the lease), every later write of the first is refused, and nothing
	// it held comes back.
	t.Run("fenced writer", func(t *testing.T) {
		p := newStore(t, newClock().Now)
		rec, lease := key("record", "resp_f"), key("lease", "resp_f")
		mine := []store.PendingCall{{CallID: "resp_f", Arguments: "1000"}}
		p.Put("id-a", mine, lease)
		renewed := []store.PendingCall{{CallID: "resp_f", Arguments: "2000"}}
		require.True(t, p.Swap("id-a", lease, mine, renewed), "the runner renews its own lease")
		running := []store.PendingCall{{CallID: "resp_f", Arguments: `{"status":"in_progress"}`}}
		p.Put("id-a", running, rec)

		// The takeover: the record swapped from the value read, the lease dropped.
		lost := []store.PendingCall{{CallID: "resp_f", Arguments: `{"status":"failed"}`}}
		require.True(t, p.Swap("id-a", rec, p.Get("id-a", rec), lost), "the takeover")
		p.Drop("id-a", lease)

		done := []store.PendingCall{{CallID: "resp_f", Arguments: `{"status":"completed"}`}}
		assert.False(t, p.Swap("id-a", rec, running, done), "the runner's write of the record after the takeover")
		assert.False(t, p.Swap("id-a", lease, renewed, []store.PendingCall{{CallID: "resp_f", Arguments: "3000"}}),
			"the runner's renewal after the takeover")
		assert.Equal(t, lost, p.Get("id-a", rec), "the takeover's record stays")
		assert.Nil(t, p.Get("id-a", lease), "the lease is not brought back")
	})

	// Of several replicas swapping the same value at once, exactly one wins.
	t.Run("swap once", func(t *testing.T) {
		p := newStore(t, newClock().Now)
		k := key("response", "resp_once")
		running := []store.PendingCall{{CallID: "resp_once", Arguments: `{"status":"in_progress"}`}}
		p.Put("id-a", running, k)
		var wins atomic.Int32
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Go(func() {
				if p.Swap("id-a", k, running, []store.PendingCall{{CallID: "resp_once", Arguments: fmt.Sprintf(`{"by":%d}`, i)}}) {
					wins.Add(1)
				}
			})
		}
		wg.Wait()
		assert.Equal(t, int32(1), wins.Load(), "Swaps that won out of 8 at once")
	})

	t.Run("ids drop expired", func(t *testing.T) {
		c := newClock()
		p := newStore(t, c.Now)
		assert.Empty(t, p.IDs("id-a", "chat_call"), "IDs of an empty store")
		p.Put("id-a", []store.PendingCall{{CallID: "c", Output: "1"}}, key("chat_call", "call_w"))
		assert.Equal(t, []string{"call_w"}, p.IDs("id-a", "chat_call"), "IDs")
		assert.Empty(t, p.IDs("id-b", "chat_call"), "another identity has none")
		c.Add(l.PendingTTL + time.Second)
		assert.Empty(t, p.IDs("id-a", "chat_call"), "expired entries are not listed")
		assert.False(t, p.Holds("chat_call"), "Holds after expiry")
	})

	t.Run("bounds", func(t *testing.T) {
		c := newClock()
		p := newStore(t, c.Now)
		resp := func(id string) store.Key { return key("response", id) }
		// One identity cannot push the others out.
		other := []store.PendingCall{{CallID: "c", Output: "other"}}
		p.Put("quiet", other, resp("resp_q"))
		big := []store.PendingCall{{CallID: "c", Output: strings.Repeat("x", l.PendingMaxBytesPerIdentity/4)}}
		for i := range 10 {
			p.Put("noisy", big, resp("resp_"+strconv.Itoa(i)))
		}
		assert.Equal(t, other, p.Get("quiet", resp("resp_q")), "another identity's entry survives a noisy one")
		assert.Nil(t, p.Get("noisy", resp("resp_0")), "the noisy identity's oldest entry goes at its bytes share")
		assert.NotNil(t, p.Get("noisy", resp("resp_9")), "its newest entry stays")
		kept := 0
		for _, id := range p.IDs("noisy", "response") {
			for _, call := range p.Get("noisy", resp(id)) {
				kept += call.Size()
			}
		}
		assert.LessOrEqual(t, kept, l.PendingMaxBytesPerIdentity, "bytes kept for one identity")

		p.Put("noisy", []store.PendingCall{{CallID: "c", Output: strings.Repeat("x", l.PendingMaxBytesPerIdentity+1)}}, resp("huge"))
		assert.Nil(t, p.Get("noisy", resp("huge")), "calls larger than an identity's share are not kept")

		small := []store.PendingCall{{CallID: "c", Output: "1"}}
		for i := range l.PendingMaxEntriesPerIdentity + 10 {
			p.Put("many", small, resp("resp_"+strconv.Itoa(i)))
		}
		assert.Len(t, p.IDs("many", "response"), l.PendingMaxEntriesPerIdentity, "entries kept for one identity")
		assert.Nil(t, p.Get("many", resp("resp_0")), "the oldest went")
		assert.NotNil(t, p.Get("many", resp("resp_"+strconv.Itoa(l.PendingMaxEntriesPerIdentity+9))), "the newest stays")

		q := newStore(t, c.Now)
		for i := range l.PendingMaxEntries + 10 {
			q.Put("id"+strconv.Itoa(i%100), small, resp("resp_"+strconv.Itoa(i)))
		}
		total := 0
		for i := range 100 {
			total += len(q.IDs("id"+strconv.Itoa(i), "response"))
		}
		assert.Equal(t, l.PendingMaxEntries, total, "entries kept in all")
		assert.Nil(t, q.Get("id0", resp("resp_0")), "the oldest of all went")
		assert.NotNil(t, q.Get("id9", resp("resp_"+strconv.Itoa(l.PendingMaxEntries+9))), "the newest of all stays")
	})

	// Callers without a credential all have the empty identity: a pending call of one must
	// never reach another's request, so none is stored for them.
	t.Run("anonymous", func(t *testing.T) {
		p := newStore(t, newClock().Now)
		p.Put("", []store.PendingCall{{CallID: "call_ci", Output: "x"}}, key("chat_call", "call_w"), key("response", "resp_1"))
		assert.False(t, p.Holds("chat_call"), "Holds")
		assert.False(t, p.Holds("response"), "Holds")
		assert.Nil(t, p.Get("", key("response", "resp_1")), "Get")
	})

	// A long id finds its entry again as a short one does; another long id does not; a long
	// Chat call id is not listed.
	t.Run("long ids", func(t *testing.T) {
		p := newStore(t, newClock().Now)
		long := strings.Repeat("c", l.MaxKeyBytes+1)
		other := strings.Repeat("c", l.MaxKeyBytes) + "d"
		outs := []store.PendingCall{{CallID: "call_1", Output: "42\n"}}
		p.Put("id-a", outs, key("conversation", long))
		assert.Equal(t, outs, p.Get("id-a", key("conversation", long)), "the long id's entry")
		assert.Nil(t, p.Get("id-a", key("conversation", other)), "another long id")
		assert.Nil(t, p.Get("id-b", key("conversation", long)), "another identity")
		assert.Empty(t, p.IDs("id-a", "conversation"), "a hashed id is not listed")
		p.Drop("id-a", key("conversation", long))
		assert.Nil(t, p.Get("id-a", key("conversation", long)), "dropped")
		assert.False(t, p.Holds("conversation"), "nothing is held after the drop")
	})

	// Concurrent Puts of one identity keep its bound, as sequential ones do.
	t.Run("bounds under concurrent use", func(t *testing.T) {
		p := newStore(t, newClock().Now)
		small := []store.PendingCall{{CallID: "c", Output: "1"}}
		const writers = 8
		per := l.PendingMaxEntriesPerIdentity/writers + 16
		var wg sync.WaitGroup
		for w := range writers {
			wg.Go(func() {
				for i := range per {
					p.Put("many", small, key("response", fmt.Sprintf("resp_%d_%d", w, i)))
				}
			})
		}
		wg.Wait()
		assert.Len(t, p.IDs("many", "response"), l.PendingMaxEntriesPerIdentity, "entries kept for one identity after %d concurrent Puts", writers*per)
	})

	t.Run("concurrent use", func(t *testing.T) {
		p := newStore(t, newClock().Now)
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Go(func() {
				identity := fmt.Sprintf("id-%d", i%3)
				k := key("response", fmt.Sprintf("resp_%d", i))
				outs := []store.PendingCall{{CallID: k.ID, Output: "1"}}
				for range 50 {
					p.Put(identity, outs, k)
					assert.Equal(t, outs, p.Get(identity, k), "Get %v of %s", k, identity)
					assert.Contains(t, p.IDs(identity, "response"), k.ID, "IDs of %s", identity)
					assert.True(t, p.Holds("response"), "Holds")
					p.Drop(identity, k)
				}
			})
		}
		wg.Wait()
		assert.False(t, p.Holds("response"), "every entry was dropped")
	})
}

// TestAliases checks that the stores newStore returns behave as [store.Aliases] says, within l.
func TestAliases(t *testing.T, l Limits, newStore NewContinuations) {
	t.Helper()
	t.Run("scope and expiry", func(t *testing.T) {
		c := newClock()
		p := newStore(t, c.Now)
		p.PutAlias("id-a", "resp_first", "resp_last")
		p.PutAlias("", "resp_anon", "resp_anon_last")
		assert.Equal(t, "resp_last", p.Alias("id-a", "resp_first"), "Alias")
		assert.Empty(t, p.Alias("id-b", "resp_first"), "another identity's answer")
		assert.Equal(t, "resp_anon_last", p.Alias("", "resp_anon"), "the anonymous identity's names are kept: they are unguessable")
		assert.Empty(t, p.Alias("id-a", "resp_last"), "no alias of the target")
		// Pending calls do not push names out.
		for i := range l.PendingMaxEntries + 10 {
			p.Put("id-a", []store.PendingCall{{CallID: "c", Output: "1"}}, key("response", strconv.Itoa(i)))
		}
		assert.Equal(t, "resp_last", p.Alias("id-a", "resp_first"), "kept beside many pending calls")
		p.PutAlias("id-a", "resp_first", "resp_later")
		assert.Equal(t, "resp_later", p.Alias("id-a", "resp_first"), "replaced")
		c.Add(l.AliasTTL + time.Second)
		assert.Empty(t, p.Alias("id-a", "resp_first"), "expired")
	})

	t.Run("long ids", func(t *testing.T) {
		p := newStore(t, newClock().Now)
		long := strings.Repeat("c", l.MaxKeyBytes+1)
		other := strings.Repeat("c", l.MaxKeyBytes) + "d"
		p.PutAlias("id-a", long, "resp_up")
		assert.Equal(t, "resp_up", p.Alias("id-a", long), "alias of a long answer id")
		assert.Empty(t, p.Alias("id-a", other), "another long id")
		p.PutAlias("id-a", "resp_1", strings.Repeat("u", l.MaxAliasBytes+1))
		assert.Empty(t, p.Alias("id-a", "resp_1"), "an alias to an over-long id is not kept")
		p.PutAlias("id-a", "resp_2", "")
		assert.Empty(t, p.Alias("id-a", "resp_2"), "an alias to nothing is not kept")
	})
}

// TestContextContainers checks that the stores newStore returns behave as
// [store.ContextContainers] says, within l.
func TestContextContainers(t *testing.T, l Limits, newStore NewContinuations) {
	t.Helper()
	t.Run("scope and expiry", func(t *testing.T) {
		c := newClock()
		p := newStore(t, c.Now)
		many := []string{"cntr_0", "cntr_1", "cntr_2", "cntr_3", "cntr_4", "cntr_5", "cntr_6", "cntr_7", "cntr_8", "cntr_2", strings.Repeat("x", store.MaxContainerIDBytes+1)}
		p.PutContainers("id-a", many, key("response", "resp_1"), key("conversation", "conv_1"), key("response", ""))
		want := []string{"cntr_1", "cntr_3", "cntr_4", "cntr_5", "cntr_6", "cntr_7", "cntr_8", "cntr_2"}
		assert.Equal(t, want, p.Containers("id-a", key("response", "resp_1")), "the newest, once each, oldest first")
		assert.Equal(t, want, p.Containers("id-a", key("conversation", "conv_1")), "under every key")
		assert.Nil(t, p.Containers("id-a", key("response", "")), "nothing under the empty id")
		assert.Nil(t, p.Containers("id-b", key("response", "resp_1")), "another identity's answer")
		p.PutContainers("", []string{"cntr_anon"}, key("response", "resp_anon"))
		assert.Nil(t, p.Containers("", key("response", "resp_anon")), "nothing for the anonymous identity")
		p.PutContainers("id-a", []string{"cntr_9"}, key("conversation", "conv_1"))
		assert.Equal(t, []string{"cntr_9"}, p.Containers("id-a", key("conversation", "conv_1")), "replaced")
		c.Add(l.ContainersTTL + time.Second)
		assert.Nil(t, p.Containers("id-a", key("response", "resp_1")), "expired")
	})

	t.Run("long ids", func(t *testing.T) {
		p := newStore(t, newClock().Now)
		long := strings.Repeat("c", l.MaxKeyBytes+1)
		other := strings.Repeat("c", l.MaxKeyBytes) + "d"
		p.PutContainers("id-a", []string{"cntr_1"}, key("conversation", long))
		assert.Equal(t, []string{"cntr_1"}, p.Containers("id-a", key("conversation", long)), "context containers of the long id")
		assert.Nil(t, p.Containers("id-a", key("conversation", other)), "another long id")
	})
}
