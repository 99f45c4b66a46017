package memory

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/codeinterp/codeinterp/pkg/store"
	"github.com/stretchr/testify/assert"
)

func liveHeap() int64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// TestServerMemoryPerContinuation measures what the continuation records cost the server in
// the memory store (the single-process default): an alias (an answer id to the upstream's),
// a pending call, and an answer's context containers — the figures docs/operations.md quotes.
func TestServerMemoryPerContinuation(t *testing.T) {
	const n = 5000
	now := func() time.Time { return time.Unix(1000, 0) }
	measure := func(put func(p *Pending, i int)) int64 {
		p := NewPending(now)
		base := liveHeap()
		for i := range n {
			put(p, i)
		}
		per := (liveHeap() - base) / n
		runtime.KeepAlive(p)
		return per
	}
	ident := func(i int) string { return fmt.Sprintf("identity-%03d", i/100) } // within the per-identity bounds
	respID := func(i int) string { return fmt.Sprintf("resp_%048d", i) }       // ids as long as OpenAI's
	alias := measure(func(p *Pending, i int) { p.PutAlias(ident(i), respID(i), "resp_up_"+respID(i)) })
	pending := measure(func(p *Pending, i int) {
		p.Put(ident(i), []store.PendingCall{{CallID: fmt.Sprintf("call_%020d", i), Output: "42"}}, key("response", respID(i)))
	})
	containers := measure(func(p *Pending, i int) {
		p.PutContainers(ident(i), []string{fmt.Sprintf("cntr_%032d", i)}, key("response", respID(i)))
	})
	t.Logf("server memory: %d bytes per alias, %d per pending call (2-byte output), %d per answer's context container", alias, pending, containers)
	for what, v := range map[string]int64{"alias": alias, "pending call": pending, "context container": containers} {
		assert.LessOrEqual(t, v, int64(1024), "a %s", what)
	}
}
