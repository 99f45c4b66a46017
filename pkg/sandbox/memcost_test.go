package sandbox_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/codeinterp/codeinterp/pkg/sandbox"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// heapNow is the live heap after a collection.
func heapNow() int64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// The server memory a container and the tombstone it leaves cost, with a memory registry (the
// single-process default): the figures docs/operations.md quotes. The provider is one shared
// handle, so what is measured is the server's own records, not a sandbox's.
const (
	maxBytesPerContainer = 2048
	maxBytesPerTombstone = 1024
)

func TestServerMemoryPerContainerAndTombstone(t *testing.T) {
	const identities, perIdentity = 50, sandbox.MaxTombstonesPerIdentity
	const n = identities * perIdentity
	m := newTestManager(t, &listing{}, sandbox.ManagerConfig{MaxContainers: n, MaxContainersPerIdentity: perIdentity})
	ctx := context.Background()
	name := strings.Repeat("n", 64) // a name as clients give them
	ids := make([]string, 0, n)
	base := heapNow()
	for i := range n {
		c, err := m.Create(ctx, sandbox.CreateRequest{Identity: fmt.Sprintf("identity-%02d", i%identities), Name: name})
		require.NoError(t, err, "create %d", i)
		ids = append(ids, c.ID)
	}
	perContainer := (heapNow() - base) / n
	for i, id := range ids {
		require.NoError(t, m.DeleteContainer(ctx, fmt.Sprintf("identity-%02d", i%identities), id), "delete %d", i)
	}
	perTombstone := (heapNow() - base) / n
	t.Logf("server memory: %d bytes per container (created, with a %d-byte name), %d bytes per tombstone", perContainer, len(name), perTombstone)
	assert.LessOrEqual(t, perContainer, int64(maxBytesPerContainer), "a container's records")
	assert.LessOrEqual(t, perTombstone, int64(maxBytesPerTombstone), "a tombstone")
	runtime.KeepAlive(ids)
}
