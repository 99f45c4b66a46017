package memory

import (
	"testing"
	"time"

	"github.com/codeinterp/codeinterp/pkg/store"
	"github.com/codeinterp/codeinterp/pkg/store/storetest"
)

// limits are this package's, which the contract tests probe.
var limits = storetest.Limits{
	PendingTTL: PendingTTL, AliasTTL: AliasTTL, ContainersTTL: ContainersTTL,
	PendingMaxEntries: PendingMaxEntries, PendingMaxEntriesPerIdentity: PendingMaxEntriesPerIdentity,
	PendingMaxBytesPerIdentity: PendingMaxBytesPerIdentity,
	MaxKeyBytes:                MaxKeyBytes, MaxAliasBytes: MaxAliasBytes,
}

func newContinuations(_ *testing.T, now func() time.Time) store.Continuations { return NewPending(now) }

func TestPending(t *testing.T) { storetest.TestPending(t, limits, newContinuations) }

func TestAliases(t *testing.T) { storetest.TestAliases(t, limits, newContinuations) }

func TestContextContainers(t *testing.T) {
	storetest.TestContextContainers(t, limits, newContinuations)
}

func TestNodes(t *testing.T) {
	storetest.TestNodes(t, func(_ *testing.T, now func() time.Time) store.Nodes {
		n := NewNodes()
		n.now = now
		return n
	})
}
