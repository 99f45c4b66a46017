package fleet_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/codeinterp/codeinterp/pkg/sandbox"
)

// TestFleetHibernation: a hibernating container is hibernated on its owner, with its files on
// the owner's disk, and restored through the owner when a request through any replica names
// it; once its owner is gone it is unknown (Anthropic's 404), not expired.
func TestFleetHibernation(t *testing.T) {
	ctx := context.Background()
	dirs := map[string]string{}
	c := newClusterWith(t, func(id string, cfg *sandbox.ManagerConfig) {
		dirs[id] = filepath.Join(t.TempDir(), "hib-"+id)
		cfg.SessionIdleTTL = 200 * time.Millisecond
		cfg.Hibernation = sandbox.HibernationConfig{Dir: dirs[id]}
	}, 8, 8)
	gw := c.fleets[""]
	l := acquire(t, gw, sandbox.AcquireRequest{Identity: "alice", Session: "s", Hibernate: true, IDPrefix: "container_"})
	run(t, l, "write /mnt/data/a.txt hello")
	id := l.ContainerID()
	l.Release()
	owner := c.owner(t, id)
	require.Eventually(t, func() bool { n, _ := c.managers[owner].Hibernated(); return n == 1 }, 10*time.Second, 20*time.Millisecond,
		"hibernated on its owner %s", owner)
	assert.True(t, gw.Known("alice", id), "known through the gateway while hibernated")

	other := "a"
	if owner == "a" {
		other = "b"
	}
	l = acquire(t, c.fleets[other], sandbox.AcquireRequest{Identity: "alice", ContainerID: id})
	res := run(t, l, "x")
	assert.Equal(t, id, l.ContainerID(), "restored under its id through %s", other)
	assert.Contains(t, res.FilesNote, sandbox.RestoredNote, "the model is told")
	l.Release()
	assert.Equal(t, owner, c.owner(t, id), "restored on its owner")
	assert.Equal(t, 2, c.prov[owner].Created(), "the owner started the restored container")
	text, ok := c.prov[owner].Container(1).FileText("/mnt/data/a.txt")
	assert.True(t, ok, "the file is back on the owner")
	assert.Equal(t, "hello", text, "its bytes")

	require.NoError(t, c.nodes.Leave(ctx, owner), "the owner leaves")
	c.clock.Advance(2 * time.Second)
	_, err := gw.Acquire(ctx, sandbox.AcquireRequest{Identity: "alice", ContainerID: id})
	assert.ErrorIs(t, err, sandbox.ErrUnknownContainer, "its owner gone: unknown, as natively")
	_, err = gw.Container(ctx, "alice", id)
	assert.ErrorIs(t, err, sandbox.ErrUnknownContainer, "unknown to the Containers API too")
}
