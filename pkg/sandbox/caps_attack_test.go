package sandbox_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/codeinterp/codeinterp/pkg/sandbox"
	"github.com/codeinterp/codeinterp/pkg/sandbox/sandboxtest"
)

// TestManagerGlobalCapSparesLighterTenants: at MaxContainers, a tenant cannot evict the idle
// containers of tenants holding no more than it does, however long unused: it makes room from
// its own, and a lighter tenant makes room from the heaviest one's.
func TestManagerGlobalCapSparesLighterTenants(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newTestManager(t, &sandboxtest.Provider{}, sandbox.ManagerConfig{
			MaxContainers: 4, MaxContainersPerIdentity: 3, MaxSessionsPerIdentity: 3})
		alice := create(t, m, sandbox.CreateRequest{Identity: "alice"})
		time.Sleep(time.Second)
		carol := create(t, m, sandbox.CreateRequest{Identity: "carol"})
		time.Sleep(time.Second)
		bob1 := create(t, m, sandbox.CreateRequest{Identity: "bob"})
		time.Sleep(time.Second)
		bob2 := create(t, m, sandbox.CreateRequest{Identity: "bob"})
		time.Sleep(time.Second)

		// Bob, holding the most, at the global cap: his own least recently used goes.
		bob3 := create(t, m, sandbox.CreateRequest{Identity: "bob"})
		assert.Equal(t, sandbox.StatusRunning, info(t, m, "alice", alice.ID).Status, "alice's idle container, the oldest, kept")
		assert.Equal(t, sandbox.StatusRunning, info(t, m, "carol", carol.ID).Status, "carol's kept")
		assert.Equal(t, sandbox.StatusExpired, info(t, m, "bob", bob1.ID).Status, "bob's own oldest made room")
		time.Sleep(time.Second)

		// Dave, holding none: the heaviest tenant's least recently used goes.
		create(t, m, sandbox.CreateRequest{Identity: "dave"})
		assert.Equal(t, sandbox.StatusExpired, info(t, m, "bob", bob2.ID).Status, "bob's oldest made room for dave's")
		assert.Equal(t, sandbox.StatusRunning, info(t, m, "bob", bob3.ID).Status, "bob's newest kept")
		assert.Equal(t, sandbox.StatusRunning, info(t, m, "alice", alice.ID).Status, "alice's kept")
		assert.Equal(t, sandbox.StatusRunning, info(t, m, "carol", carol.ID).Status, "carol's kept")
	})
}
