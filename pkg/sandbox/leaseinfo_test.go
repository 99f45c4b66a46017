package sandbox_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/codeinterp/codeinterp/pkg/sandbox"
	"github.com/codeinterp/codeinterp/pkg/sandbox/sandboxtest"
)

// slowProvider takes startTime to create each container, and names its start mode.
type slowProvider struct {
	*sandboxtest.Provider
	startTime time.Duration
}

func (p slowProvider) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Container, error) {
	time.Sleep(p.startTime)
	c, err := p.Provider.Create(ctx, spec)
	if err != nil {
		return nil, err
	}
	return modeContainer{c}, nil
}

// modeContainer is a container that says how it started.
type modeContainer struct{ sandbox.Container }

func (modeContainer) StartMode() string { return "fork" }

func TestLeaseInfo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newTestManager(t, slowProvider{&sandboxtest.Provider{}, 300 * time.Millisecond}, sandbox.ManagerConfig{Node: "node-a"})
		l := acquire(t, m, sandbox.AcquireRequest{Identity: "alice", Session: "s"})
		assert.Equal(t, sandbox.AcquireInfo{Container: l.ContainerID(), Node: "node-a"}, l.Info(),
			"before its first run: the container and node, no origin")

		before := time.Now()
		run(t, l, "x=1")
		info := l.Info()
		assert.Equal(t, sandbox.OriginNew, info.Origin, "the first run started the container")
		assert.Equal(t, "fork", info.StartMode, "the container's own start mode")
		assert.Equal(t, 300*time.Millisecond, info.StartDuration, "the start's duration")
		assert.Equal(t, before, info.Started, "the start began with the run")
		run(t, l, "x")
		assert.Equal(t, info, l.Info(), "a later run of the same lease: the lease still started it")
		l.Release()

		again := acquire(t, m, sandbox.AcquireRequest{Identity: "alice", Session: "s"})
		defer again.Release()
		run(t, again, "x")
		assert.Equal(t, sandbox.AcquireInfo{Container: l.ContainerID(), Node: "node-a", Origin: sandbox.OriginReused, StartMode: "fork"},
			again.Info(), "the session's next request reuses the container")
	})
}

func TestLeaseInfoPooled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newTestManager(t, &sandboxtest.Provider{}, sandbox.ManagerConfig{WarmPool: 1})
		synctest.Wait()
		l := acquire(t, m, sandbox.AcquireRequest{})
		defer l.Release()
		run(t, l, "x=1")
		info := l.Info()
		assert.Equal(t, sandbox.OriginPooled, info.Origin, "a warm container was taken")
		assert.Equal(t, "", info.StartMode, "a container that does not say has no start mode")
		assert.Zero(t, info.StartDuration, "a pooled container's start was not the request's")
	})
}
