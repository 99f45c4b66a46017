// Package sandboxtest provides a fake sandbox backend for tests: a [Provider] whose containers
// run in memory, count what happens to them, and can be scripted, failed, killed and blocked.
package sandboxtest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/codeinterp/codeinterp/pkg/sandbox"
)

// Provider is a fake [sandbox.Provider]. Its zero value is ready to use: each of its containers
// keeps variables of its own (a run of "k=v" sets k; a run of "k" shows k's value as the
// Result's Value; see [Container.Eval]). Safe for concurrent use; set the func fields before
// the containers they affect are used.
type Provider struct {
	// Run, if set, answers every run of every container in place of Eval (which it may call).
	// A Run that blocks holds the run, as slow code would.
	Run func(ctx context.Context, c *Container, code string) (sandbox.Result, error)
	// OnDelete, if set, is called by every Delete of a container once the container is marked
	// deleted; its error is Delete's. An OnDelete that blocks holds the Delete.
	OnDelete func(ctx context.Context, c *Container) error

	// mu guards the fields below.
	mu         sync.Mutex
	createErr  error
	containers []*Container
	specs      []sandbox.Spec
	codes      []string
}

var _ sandbox.Provider = (*Provider)(nil)

// Create returns a new container, or the error set with FailCreate.
func (p *Provider) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Container, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.createErr != nil {
		return nil, p.createErr
	}
	c := &Container{p: p, vars: map[string]string{}}
	p.containers = append(p.containers, c)
	p.specs = append(p.specs, spec)
	return c, nil
}

// FailCreate makes every Create from now on fail with err; nil makes them succeed again.
func (p *Provider) FailCreate(err error) {
	p.mu.Lock()
	p.createErr = err
	p.mu.Unlock()
}

// Container returns the i-th container created (from 0).
func (p *Provider) Container(i int) *Container {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.containers[i]
}

// Created returns the number of containers created.
func (p *Provider) Created() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.containers)
}

// Deleted returns the number of containers deleted (each counted once).
func (p *Provider) Deleted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, c := range p.containers {
		if c.Deleted() {
			n++
		}
	}
	return n
}

// Specs returns the Spec of each container created, in order.
func (p *Provider) Specs() []sandbox.Spec {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]sandbox.Spec(nil), p.specs...)
}

// Codes returns the code of every run that reached a container, of all containers, in order.
func (p *Provider) Codes() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.codes...)
}

// Container is a container of a Provider. It reports whether it is alive (as the Manager
// asks of the containers that can tell), so a killed or deleted one is not reused.
type Container struct {
	p       *Provider
	deleted atomic.Bool
	dead    atomic.Bool
	running atomic.Int32
	overlap atomic.Bool

	// mu guards the fields below.
	mu   sync.Mutex
	vars map[string]string
	runs int
}

var _ sandbox.Container = (*Container)(nil)

// Run answers code with the Provider's Run, or with Eval. It fails with [sandbox.ErrClosed]
// once the container is deleted and with [sandbox.ErrLost] once it is killed; such runs are
// not counted.
func (c *Container) Run(ctx context.Context, code string) (sandbox.Result, error) {
	if c.running.Add(1) > 1 {
		c.overlap.Store(true)
	}
	defer c.running.Add(-1)
	if c.deleted.Load() {
		return sandbox.Result{}, sandbox.ErrClosed
	}
	if c.dead.Load() {
		return sandbox.Result{}, fmt.Errorf("%w: the container was killed", sandbox.ErrLost)
	}
	c.mu.Lock()
	c.runs++
	c.mu.Unlock()
	c.p.mu.Lock()
	c.p.codes = append(c.p.codes, code)
	run := c.p.Run
	c.p.mu.Unlock()
	if run != nil {
		return run(ctx, c, code)
	}
	return c.Eval(code), nil
}

// Eval is the default behaviour of a run: code "k=v" sets the container's variable k to v and
// shows nothing; any other code is a variable's name, whose value (or "") is the Value shown.
func (c *Container) Eval(code string) sandbox.Result {
	c.mu.Lock()
	defer c.mu.Unlock()
	if k, v, ok := strings.Cut(code, "="); ok {
		c.vars[k] = v
		return sandbox.Result{}
	}
	return sandbox.Result{Value: c.vars[code]}
}

// Delete marks the container deleted, then calls the Provider's OnDelete. Idempotent.
func (c *Container) Delete(ctx context.Context) error {
	c.deleted.Store(true)
	if c.p.OnDelete != nil {
		return c.p.OnDelete(ctx, c)
	}
	return nil
}

// Kill makes the container die without being deleted, as one killed by the kernel would: it
// is no longer alive and its runs fail with [sandbox.ErrLost].
func (c *Container) Kill() { c.dead.Store(true) }

// Alive reports whether the container has been neither killed nor deleted.
func (c *Container) Alive() bool { return !c.dead.Load() && !c.deleted.Load() }

// Deleted reports whether Delete has been called.
func (c *Container) Deleted() bool { return c.deleted.Load() }

// Runs returns the number of runs the container answered (with the Provider's Run or Eval).
func (c *Container) Runs() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.runs
}

// Overlapped reports whether two runs of the container ever ran at once (the Manager must
// never let them).
func (c *Container) Overlapped() bool { return c.overlap.Load() }
