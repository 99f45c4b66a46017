package memory

import (
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/codeinterp/codeinterp/pkg/store"
)

// TestLongIDsCounted: a long id's entry is counted, and no longer once dropped (its behaviour
// is checked by the contract tests).
func TestLongIDsCounted(t *testing.T) {
	p := NewPending(nil)
	long := strings.Repeat("c", MaxKeyBytes+1)
	p.Put("id-a", []store.PendingCall{{CallID: "call_1", Output: "42\n"}}, key("conversation", long))
	assert.Equal(t, 1, p.per["id-a"].entries, "the long id's entry is counted")
	assert.Empty(t, p.per["id-a"].ids["conversation"], "a hashed id is not listed")
	p.Drop("id-a", key("conversation", long))
	assert.Empty(t, p.per, "nothing is counted after the drop")
}

// TestLongIDsLeaveNoHeap (issue 23, item 4): requests with 16 MiB conversation ids and answer
// ids left what they named on the heap for a day; now each costs a fixed-size key.
func TestLongIDsLeaveNoHeap(t *testing.T) {
	p := NewPending(func() time.Time { return time.Unix(1000, 0) })
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	for i := range 6 {
		put16MiB(p, byte('a'+i))
	}
	grown := int64(heap()) - int64(before)
	assert.Less(t, grown, int64(1<<20), "heap growth after six 16 MiB ids of each kind: %d bytes", grown)
	runtime.KeepAlive(p)
}

// put16MiB stores under 16 MiB ids filled with c, as a request would: a conversation and an
// answer id with pending calls and context containers, and an alias.
func put16MiB(p *Pending, c byte) {
	id := strings.Repeat(string(c), 16<<20)
	conv, resp := "conv_"+id, "resp_"+id
	p.Put("id-a", []store.PendingCall{{CallID: "call_1", Output: "1"}}, key("conversation", conv), key("response", resp))
	p.PutContainers("id-a", []string{"cntr_1"}, key("conversation", conv), key("response", resp))
	p.PutAlias("id-a", resp, "resp_up")
}

// FuzzBoundedID: the key of an id is the id itself up to MaxKeyBytes, else a fixed-size hash;
// two different ids never share a key.
func FuzzBoundedID(f *testing.F) {
	f.Add("conv_1", strings.Repeat("x", MaxKeyBytes+1))
	f.Add("", "\x00")
	f.Add(strings.Repeat("a", MaxKeyBytes), strings.Repeat("a", MaxKeyBytes+1))
	f.Fuzz(func(t *testing.T, a, b string) {
		ka, kb := boundedID(a), boundedID(b)
		require.LessOrEqual(t, len(ka), max(MaxKeyBytes, 33), "key of %d bytes", len(a))
		if len(a) <= MaxKeyBytes {
			assert.Equal(t, a, ka, "a short id is kept as it is")
		}
		assert.Equal(t, ka, boundedID(a), "stable")
		if a != b && (len(a) > MaxKeyBytes) == (len(b) > MaxKeyBytes) {
			assert.NotEqual(t, ka, kb, "ids %q and %q", a, b)
		}
	})
}
