package fleet_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/codeinterp/codeinterp/pkg/sandbox"
	"github.com/codeinterp/codeinterp/pkg/sandbox/sandboxtest"
)

// TestFleetContainerFromAnyReplica: a container made through node a's Fleet is used through
// node b's and the gateway's as through a's: runs continue its state, files go in on one and
// come out on another, the Containers calls see it, and its session key leads to it.
func TestFleetContainerFromAnyReplica(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, 8, 8)
	fa, fb, gw := c.fleets["a"], c.fleets["b"], c.fleets[""]

	l := acquire(t, fa, sandbox.AcquireRequest{Identity: "alice", Session: "s"})
	run(t, l, "x=1")
	id := l.ContainerID()
	assert.Equal(t, sandbox.AcquireInfo{Container: id, Node: "a", Origin: sandbox.OriginNew}, withoutStart(l.Info()),
		"how the first lease got its container")
	l.Release()
	assert.Equal(t, "a", c.owner(t, id), "owner of the container made through a (ties go to the node itself)")

	for _, name := range []string{"b", ""} {
		f := c.fleets[name]
		l := acquire(t, f, sandbox.AcquireRequest{Identity: "alice", Session: "s"})
		assert.Equal(t, id, l.ContainerID(), "session through %q: the same container", name)
		assert.Equal(t, "1", run(t, l, "x").Value, "session through %q: the container's state", name)
		assert.Equal(t, sandbox.AcquireInfo{Container: id, Node: "a", Origin: sandbox.OriginReused}, l.Info(),
			"session through %q: how the lease got its container", name)
		l.Release()

		l = acquire(t, f, sandbox.AcquireRequest{Identity: "alice", ContainerID: id})
		run(t, l, "y="+name)
		l.Release()
		assert.True(t, f.Known("alice", id), "Known through %q", name)
		assert.False(t, f.Known("bob", id), "Known through %q under another identity", name)
		_, err := f.Acquire(ctx, sandbox.AcquireRequest{Identity: "bob", ContainerID: id})
		assert.ErrorIs(t, err, sandbox.ErrUnknownContainer, "acquire through %q under another identity", name)
	}
	assert.Equal(t, 1, c.prov["a"].Created(), "one container started, on a")
	assert.Zero(t, c.prov["b"].Created(), "none started on b")

	// Files: in through the gateway, read by the code through b, out through a.
	up := putFile(t, gw, "alice", id, "/mnt/data/in.txt", "hello")
	l = acquire(t, fb, sandbox.AcquireRequest{Identity: "alice", ContainerID: id})
	res := run(t, l, "write /mnt/data/out.txt from-code")
	l.Release()
	require.Len(t, res.Files, 1, "files the run wrote")
	assert.Equal(t, "hello", readFile(t, fa, "alice", id, up.ID), "the upload, read through a")
	files, err := fb.Files(ctx, "alice", id)
	require.NoError(t, err, "list files through b")
	assert.Len(t, files, 2, "files listed through b")
	for _, fi := range files {
		got, err := gw.File(ctx, "alice", id, fi.ID)
		require.NoError(t, err, "file %s through the gateway", fi.Path)
		assert.Equal(t, fi.Path, got.Path, "file %s through the gateway", fi.Path)
	}
	require.NoError(t, gw.DeleteFile(ctx, "alice", id, up.ID), "delete the upload through the gateway")
	_, err = fa.File(ctx, "alice", id, up.ID)
	assert.ErrorIs(t, err, sandbox.ErrFileNotFound, "the deleted upload through a")

	// The Containers calls.
	made := create(t, gw, "alice")
	info, err := fb.Container(ctx, "alice", made.ID)
	require.NoError(t, err, "show the created container through b")
	assert.Equal(t, sandbox.StatusRunning, info.Status, "created container's status")
	for _, name := range []string{"a", "b", ""} {
		list, err := c.fleets[name].Containers(ctx, "alice")
		require.NoError(t, err, "list through %q", name)
		require.Len(t, list, 2, "alice's containers through %q", name)
		assert.Equal(t, []string{id, made.ID}, []string{list[0].ID, list[1].ID}, "alice's containers through %q, oldest first", name)
		for _, ci := range list {
			assert.Equal(t, sandbox.StatusRunning, ci.Status, "status of %s through %q", ci.ID, name)
		}
	}
	require.NoError(t, fa.DeleteContainer(ctx, "alice", made.ID), "delete the created container through a")
	info, err = gw.Container(ctx, "alice", made.ID)
	require.NoError(t, err, "show the deleted container through the gateway")
	assert.Equal(t, sandbox.StatusExpired, info.Status, "deleted container's status")
	require.NoError(t, fb.DeleteContainer(ctx, "alice", made.ID), "delete it again through b")
	_, err = fb.Acquire(ctx, sandbox.AcquireRequest{Identity: "alice", ContainerID: made.ID})
	assert.ErrorIs(t, err, sandbox.ErrExpiredContainer, "acquire the deleted container through b")
	_, err = gw.Container(ctx, "alice", "cntr_never")
	assert.ErrorIs(t, err, sandbox.ErrUnknownContainer, "a container never issued")
	_, err = gw.Container(ctx, "", id)
	assert.ErrorIs(t, err, sandbox.ErrUnknownContainer, "the anonymous identity shows no container")

	c.mu.Lock()
	assert.Equal(t, map[string]int{"a": 2}, c.dials, "b and the gateway dial a's service once each; a reaches its own locally")
	c.mu.Unlock()
}

// TestFleetPlacementSpreads: new containers go to the node with the lowest share of its
// capacity in use, counting what a Fleet placed there since its last report; ties go to the
// node itself, then by id.
func TestFleetPlacementSpreads(t *testing.T) {
	c := newCluster(t, 4, 4, 8)
	counts := map[string]int{}
	for range 8 {
		info := create(t, c.fleets[""], "alice")
		counts[c.owner(t, info.ID)]++
	}
	assert.Equal(t, map[string]int{"a": 2, "b": 2, "c": 4}, counts, "eight containers from the gateway, by node, with no report between")
	c.beat(t)

	l := acquire(t, c.fleets["b"], sandbox.AcquireRequest{Identity: "bob", Session: "s"})
	c.beat(t)
	assert.Equal(t, "b", c.owner(t, l.ContainerID()), "a tie goes to the node itself")
	l.Release()

	// b holds 3 of 4; a reports 2 of 4 and c 4 of 8: a tie between other nodes goes by id.
	assert.Equal(t, "a", c.owner(t, create(t, c.fleets["b"], "carol").ID), "the least loaded node")
}

// TestFleetPlacementRespectsCapacity: no node takes more than its capacity; at every
// node's capacity, a container not in use makes room (as in one process), and when all are
// in use a new container fails with ErrUnavailable.
func TestFleetPlacementRespectsCapacity(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, 1, 2)
	gw := c.fleets[""]
	var held []*sandbox.Lease
	for i := range 3 {
		l := acquire(t, gw, sandbox.AcquireRequest{Identity: "alice"})
		run(t, l, "x=1")
		held = append(held, l)
		c.beat(t)
		n, capacity := c.managers[c.owner(t, l.ContainerID())].Load()
		assert.LessOrEqual(t, n, capacity, "container %d: its node's load", i)
	}
	a, _ := c.managers["a"].Load()
	b, _ := c.managers["b"].Load()
	assert.Equal(t, []int{1, 2}, []int{a, b}, "containers on a and b")

	_, err := gw.Acquire(ctx, sandbox.AcquireRequest{Identity: "alice"})
	assert.ErrorIs(t, err, sandbox.ErrUnavailable, "a fourth container while all three are in use")
	_, err = gw.Create(ctx, sandbox.CreateRequest{Identity: "alice"})
	assert.ErrorIs(t, err, sandbox.ErrUnavailable, "a created container while all three are in use")

	held[0].Release()
	l := acquire(t, gw, sandbox.AcquireRequest{Identity: "alice"})
	assert.NotEqual(t, held[0].ContainerID(), l.ContainerID(), "a new container in place of the idle one")
	l.Release()
	for _, l := range held[1:] {
		l.Release()
	}
	for _, id := range c.ids() {
		n, capacity := c.managers[id].Load()
		assert.LessOrEqual(t, n, capacity, "node %s's load", id)
	}
}

// TestFleetNodeLost: once a node has left the directory, its containers are lost: an
// explicit id is expired (and listed so), and a session gets a fresh container elsewhere.
func TestFleetNodeLost(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, 8, 8)
	fa, gw := c.fleets["a"], c.fleets[""]
	create(t, fa, "carol")
	c.beat(t) // b is the least loaded
	ls := acquire(t, c.fleets["b"], sandbox.AcquireRequest{Identity: "alice", Session: "s"})
	run(t, ls, "x=1")
	sessID := ls.ContainerID()
	ls.Release()
	made := create(t, c.fleets["b"], "alice")
	require.Equal(t, "b", c.owner(t, made.ID), "owner of the created container")
	assert.True(t, gw.Known("alice", made.ID), "Known while b is live")

	require.NoError(t, c.nodes.Leave(ctx, "b"), "b leaves")
	assert.True(t, gw.Known("alice", made.ID), "Known from the gateway's cached list of nodes")
	c.clock.Advance(2 * time.Second)

	_, err := gw.Acquire(ctx, sandbox.AcquireRequest{Identity: "alice", ContainerID: made.ID})
	assert.ErrorIs(t, err, sandbox.ErrExpiredContainer, "acquire a lost container by id")
	assert.False(t, fa.Known("alice", made.ID), "Known of a lost container")
	info, err := fa.Container(ctx, "alice", made.ID)
	require.NoError(t, err, "show a lost container")
	assert.Equal(t, sandbox.StatusExpired, info.Status, "a lost container's status")
	_, err = gw.Files(ctx, "alice", made.ID)
	assert.ErrorIs(t, err, sandbox.ErrExpiredContainer, "list a lost container's files")

	l := acquire(t, gw, sandbox.AcquireRequest{Identity: "alice", Session: "s"})
	assert.NotEqual(t, sessID, l.ContainerID(), "a lost session gets a fresh container")
	assert.Equal(t, "a", c.owner(t, l.ContainerID()), "placed on the live node")
	assert.Empty(t, run(t, l, "x").Value, "the fresh container has none of the lost one's state")
	l.Release()
	assert.False(t, gw.Known("alice", sessID), "Known of the lost session's container")

	list, err := fa.Containers(ctx, "alice")
	require.NoError(t, err, "list alice's containers")
	status := map[string]string{}
	for _, ci := range list {
		status[ci.ID] = ci.Status
	}
	assert.Equal(t, map[string]string{
		sessID: sandbox.StatusExpired, made.ID: sandbox.StatusExpired, l.ContainerID(): sandbox.StatusRunning,
	}, status, "alice's containers once b is gone")
	require.NoError(t, gw.DeleteContainer(ctx, "alice", made.ID), "delete a lost container")
}

// TestFleetNodeJoined: a container on a node that joined after a replica last listed the
// nodes is not taken for lost: the replica asks the directory again.
func TestFleetNodeJoined(t *testing.T) {
	c := newCluster(t, 8, 8)
	gw := c.fleets[""]
	require.NoError(t, c.nodes.Leave(context.Background(), "b"), "b leaves")
	c.clock.Advance(2 * time.Second)
	create(t, gw, "alice") // the gateway lists a alone
	c.beat(t)
	c.clock.Advance(-2 * time.Second) // the gateway's list is fresh again
	made := create(t, c.fleets["b"], "bob")
	require.Equal(t, "b", c.owner(t, made.ID), "owner of bob's container")
	assert.True(t, gw.Known("bob", made.ID), "Known of a container of a node that joined since the gateway listed")
}

// TestFleetOwnerUnreachable: an owner that is live but cannot be reached makes its
// containers' calls fail with ErrUnavailable (they are not lost); a new container goes to
// another node.
func TestFleetOwnerUnreachable(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, 8, 8)
	made := create(t, c.fleets["b"], "alice")
	c.mu.Lock()
	c.unreach["b"] = true
	c.mu.Unlock()
	gw := c.fleets[""]
	_, err := gw.Acquire(ctx, sandbox.AcquireRequest{Identity: "alice", ContainerID: made.ID})
	assert.ErrorIs(t, err, sandbox.ErrUnavailable, "acquire through the gateway")
	assert.ErrorIs(t, err, errUnreachable, "acquire through the gateway")
	_, err = gw.Container(ctx, "alice", made.ID)
	assert.ErrorIs(t, err, sandbox.ErrUnavailable, "show through the gateway")

	// b is the least loaded, but unreachable.
	_ = create(t, c.fleets["a"], "carol")
	_ = create(t, c.fleets["a"], "carol")
	c.beat(t)
	info := create(t, gw, "dave")
	assert.Equal(t, "a", c.owner(t, info.ID), "placed on the node that can be reached")

	c.mu.Lock()
	c.unreach["b"] = false
	c.mu.Unlock()
	l := acquire(t, gw, sandbox.AcquireRequest{Identity: "alice", ContainerID: made.ID})
	l.Release()
}

// TestFleetStoreFails: a Registry or a directory that does not answer makes the calls fail
// with ErrUnavailable, and every id unknown.
func TestFleetStoreFails(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, 8, 8)
	gw := c.fleets[""]
	made := create(t, c.fleets["b"], "alice")

	c.reg.fail.Store(true)
	c.view.fail.Store(true)
	_, err := gw.Acquire(ctx, sandbox.AcquireRequest{Identity: "alice", ContainerID: made.ID})
	assert.ErrorIs(t, err, sandbox.ErrUnavailable, "acquire by id")
	_, err = gw.Acquire(ctx, sandbox.AcquireRequest{Identity: "alice", Session: "s"})
	assert.ErrorIs(t, err, sandbox.ErrUnavailable, "acquire by session")
	_, err = gw.Acquire(ctx, sandbox.AcquireRequest{Identity: "alice"})
	assert.ErrorIs(t, err, sandbox.ErrUnavailable, "acquire a new container")
	_, err = gw.Containers(ctx, "alice")
	assert.ErrorIs(t, err, sandbox.ErrUnavailable, "list")
	_, err = gw.Container(ctx, "alice", made.ID)
	assert.ErrorIs(t, err, sandbox.ErrUnavailable, "show")
	_, err = gw.Files(ctx, "alice", made.ID)
	assert.ErrorIs(t, err, sandbox.ErrUnavailable, "list files")
	assert.False(t, gw.Known("alice", made.ID), "Known")
	c.reg.fail.Store(false)
	c.view.fail.Store(false)

	c.nodes.fail.Store(true)
	c.clock.Advance(2 * time.Second)
	_, err = gw.Create(ctx, sandbox.CreateRequest{Identity: "alice"})
	assert.ErrorIs(t, err, sandbox.ErrUnavailable, "create while the directory fails")
	_, err = gw.Acquire(ctx, sandbox.AcquireRequest{Identity: "alice", ContainerID: made.ID})
	assert.ErrorIs(t, err, sandbox.ErrUnavailable, "acquire by id while the directory fails")
	assert.ErrorIs(t, err, errDown, "acquire by id while the directory fails")
	c.nodes.fail.Store(false)

	l := acquire(t, gw, sandbox.AcquireRequest{Identity: "alice", ContainerID: made.ID})
	l.Release()
}

// TestFleetSessionRace: a replica that placed a new session on one node while another
// replica placed it elsewhere goes to the session's owner.
func TestFleetSessionRace(t *testing.T) {
	c := newCluster(t, 8, 8)
	l := acquire(t, c.fleets["a"], sandbox.AcquireRequest{Identity: "alice", Session: "s"})
	run(t, l, "x=1")
	id := l.ContainerID()
	l.Release()
	c.beat(t) // a holds one container, b none: b is where the gateway places

	c.view.staleSessions.Store(1)
	l = acquire(t, c.fleets[""], sandbox.AcquireRequest{Identity: "alice", Session: "s"})
	assert.Equal(t, id, l.ContainerID(), "the session's container, on a")
	assert.Equal(t, "1", run(t, l, "x").Value, "the session's state")
	l.Release()
	n, _ := c.managers["b"].Load()
	assert.Zero(t, n, "b holds no container")
}

// TestFleetCheckSpec: a Fleet checks a Spec with its Local Manager, a gateway with a node.
func TestFleetCheckSpec(t *testing.T) {
	c := newCluster(t, 8)
	for _, name := range []string{"a", ""} {
		assert.NoError(t, c.fleets[name].CheckSpec(sandbox.Spec{MemoryLimit: "1g"}), "CheckSpec through %q", name)
	}
}

// TestFleetClose: Close closes the clients a Fleet dialled.
func TestFleetClose(t *testing.T) {
	c := newCluster(t, 8, 8)
	made := create(t, c.fleets["b"], "alice")
	for _, name := range []string{"a", ""} {
		l := acquire(t, c.fleets[name], sandbox.AcquireRequest{Identity: "alice", ContainerID: made.ID})
		l.Release()
	}
	require.NoError(t, c.fleets[""].Close(), "close the gateway's fleet")
	assert.Equal(t, int32(1), c.closedCl.Load(), "clients closed")
	_, err := c.fleets[""].Acquire(context.Background(), sandbox.AcquireRequest{Identity: "alice", ContainerID: made.ID})
	assert.ErrorIs(t, err, sandbox.ErrClosed, "acquire after Close")
}

// TestFleetPlacesOnItself: a node is live to itself before its first heartbeat (or when the
// directory lapsed it): its Fleet places there and reaches its own containers.
func TestFleetPlacesOnItself(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, 8, 8)
	require.NoError(t, c.nodes.Leave(ctx, "a"), "a leaves")
	require.NoError(t, c.nodes.Leave(ctx, "b"), "b leaves")
	c.clock.Advance(2 * time.Second)
	l := acquire(t, c.fleets["a"], sandbox.AcquireRequest{Identity: "alice", Session: "s"})
	run(t, l, "x=1")
	l.Release()
	assert.Equal(t, "a", c.owner(t, l.ContainerID()), "placed on the node itself")
	l = acquire(t, c.fleets["a"], sandbox.AcquireRequest{Identity: "alice", Session: "s"})
	assert.Equal(t, "1", run(t, l, "x").Value, "its own session's state")
	l.Release()
	_, err := c.fleets[""].Create(ctx, sandbox.CreateRequest{Identity: "alice"})
	assert.ErrorIs(t, err, sandbox.ErrUnavailable, "a gateway with no live node")
}

// TestFleetRoundTrips counts what a call through a gateway's Fleet asks of the shared
// stores itself (the owner's Manager asks its own on top): one Registry call for a call on
// an existing container, none for a new one, and one Nodes.Live per liveCacheFor at most.
func TestFleetRoundTrips(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, 8, 8)
	gw := c.fleets[""]
	made := create(t, c.fleets["b"], "alice")
	l := acquire(t, c.fleets["b"], sandbox.AcquireRequest{Identity: "alice", Session: "s"})
	l.Release()
	type count struct{ registry, live int32 }
	measure := func(call func()) count {
		c.view.calls.Store(0)
		c.nodes.lives.Store(0)
		call()
		return count{c.view.calls.Load(), c.nodes.lives.Load()}
	}
	byID := func() {
		l := acquire(t, gw, sandbox.AcquireRequest{Identity: "alice", ContainerID: made.ID})
		l.Release()
	}
	assert.Equal(t, count{1, 1}, measure(byID), "acquire by id, the list of nodes not cached")
	tests := []struct {
		name string
		call func()
		want count
	}{
		{"acquire by id", byID, count{1, 0}},
		{"acquire by session", func() {
			l := acquire(t, gw, sandbox.AcquireRequest{Identity: "alice", Session: "s"})
			l.Release()
		}, count{1, 0}},
		{"acquire a new container", func() {
			l := acquire(t, gw, sandbox.AcquireRequest{Identity: "bob"})
			l.Release()
		}, count{0, 0}},
		{"create", func() { create(t, gw, "bob") }, count{0, 0}},
		{"list", func() {
			_, err := gw.Containers(ctx, "alice")
			require.NoError(t, err, "list")
		}, count{1, 0}},
		{"list files", func() {
			_, err := gw.Files(ctx, "alice", made.ID)
			require.NoError(t, err, "list files")
		}, count{1, 0}},
		{"Known", func() { assert.True(t, gw.Known("alice", made.ID), "Known") }, count{1, 0}},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, measure(tt.call), "%s: the Fleet's own calls of the Registry and Nodes.Live", tt.name)
	}
}

// withoutStart is info without a new container's start time and duration, which vary.
func withoutStart(info sandbox.AcquireInfo) sandbox.AcquireInfo {
	info.Started, info.StartDuration = time.Time{}, 0
	return info
}

// TestFleetAnonymousPause: an anonymous caller's container whose run is paused for the client's
// tools is shown through a gateway (only then) and resumed through it on its node; once the run
// has ended and the lease is released, it is gone.
func TestFleetAnonymousPause(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, 8, 8)
	for _, p := range c.prov {
		p.Run = func(context.Context, *sandboxtest.Container, string) (sandbox.Result, error) {
			return sandbox.Result{Calls: []sandbox.ToolCall{{Name: "roll", Input: "{}"}}}, nil
		}
		p.Resume = func(context.Context, *sandboxtest.Container, []sandbox.ToolResult) (sandbox.Result, error) {
			return sandbox.Result{Stdout: "rolled\n"}, nil
		}
	}
	fa, gw := c.fleets["a"], c.fleets[""]
	l := acquire(t, fa, sandbox.AcquireRequest{})
	require.Len(t, run(t, l, "await roll({})").Calls, 1, "paused")
	id := l.ContainerID()
	l.Release()

	info, err := gw.Container(ctx, "", id)
	require.NoError(t, err, "the paused anonymous container through the gateway")
	assert.Equal(t, id, info.ID)
	_, err = gw.Container(ctx, "alice", id)
	assert.ErrorIs(t, err, sandbox.ErrUnknownContainer, "not another identity's")
	l = acquire(t, gw, sandbox.AcquireRequest{ContainerID: id})
	res, err := l.Resume(ctx, []sandbox.ToolResult{{Content: "4"}}, time.Minute)
	require.NoError(t, err, "resume through the gateway")
	assert.Equal(t, "rolled\n", res.Stdout, "the run ended")
	l.Release()
	_, err = gw.Container(ctx, "", id)
	assert.ErrorIs(t, err, sandbox.ErrUnknownContainer, "gone once the run ended and the lease was released")
}

// TestFleetAnonymousPauseLost: an anonymous caller's paused container whose node has left is
// unknown through a gateway, as its own node's Manager would answer once it is gone (never
// shown expired: the anonymous identity has no lasting containers).
func TestFleetAnonymousPauseLost(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, 8, 8)
	for _, p := range c.prov {
		p.Run = func(context.Context, *sandboxtest.Container, string) (sandbox.Result, error) {
			return sandbox.Result{Calls: []sandbox.ToolCall{{Name: "roll", Input: "{}"}}}, nil
		}
	}
	fa, gw := c.fleets["a"], c.fleets[""]
	l := acquire(t, fa, sandbox.AcquireRequest{})
	require.Len(t, run(t, l, "await roll({})").Calls, 1, "paused")
	id := l.ContainerID()
	l.Release()
	require.NoError(t, c.nodes.Leave(ctx, "a"), "a leaves")

	_, err := gw.Container(ctx, "", id)
	assert.ErrorIs(t, err, sandbox.ErrUnknownContainer, "a lost anonymous container through the gateway")
	_, err = gw.Acquire(ctx, sandbox.AcquireRequest{ContainerID: id})
	assert.ErrorIs(t, err, sandbox.ErrUnknownContainer, "acquire a lost anonymous container")
}
