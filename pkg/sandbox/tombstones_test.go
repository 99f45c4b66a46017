package sandbox

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestTombstoneBounds(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	ts := newTombstones()
	var forgot []string
	// MaxTombstones+1 identities with one each: the oldest overall goes.
	for i := range MaxTombstones + 1 {
		forgot = append(forgot, ts.add(fmt.Sprintf("cntr_%d", i), fmt.Sprintf("id-%d", i), t0.Add(time.Duration(i)))...)
	}
	assert.Equal(t, []string{"cntr_0"}, forgot, "beyond MaxTombstones the oldest goes")
	assert.Equal(t, MaxTombstones, ts.order.Len(), "kept")

	// One identity beyond its bound loses its own oldest, not anyone else's.
	ts = newTombstones()
	forgot = ts.add("cntr_other", "bob", t0)
	for i := range MaxTombstonesPerIdentity + 1 {
		forgot = append(forgot, ts.add(fmt.Sprintf("cntr_a%d", i), "alice", t0.Add(time.Duration(i+1)))...)
	}
	assert.Equal(t, []string{"cntr_a0"}, forgot, "alice's oldest goes")
	assert.Equal(t, MaxTombstonesPerIdentity, ts.byIdentity["alice"], "alice's kept")
	assert.Equal(t, 1, ts.byIdentity["bob"], "bob's kept")

	assert.Equal(t, []string{"cntr_other", "cntr_a1"}, ts.older(t0.Add(3)), "older than t0+3")
	assert.Len(t, ts.drain(), MaxTombstonesPerIdentity-1, "drain returns the rest")
	assert.Equal(t, 0, ts.order.Len(), "drained")
	assert.Empty(t, ts.byIdentity, "drained")
}
