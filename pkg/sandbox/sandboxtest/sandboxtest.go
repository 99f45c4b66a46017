// Package sandboxtest provides a fake sandbox backend for tests: a [Provider] whose containers
// run in memory, keep files in memory ([sandbox.Files]), count what happens to them, and can
// be scripted, failed, killed and blocked.
package sandboxtest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/codeinterp/codeinterp/pkg/sandbox"
)

// Provider is a fake [sandbox.Provider]. Its zero value is ready to use: each of its containers
// keeps variables and files of its own (see [Container.Eval]). Safe for concurrent use; set the
// fields before the containers they affect are used.
type Provider struct {
	// NoFileAccess makes its containers lack the [sandbox.Files] ability.
	NoFileAccess bool
	// Run, if set, answers every run of every container in place of Eval (which it may call).
	// A Run that blocks holds the run, as slow code would.
	Run func(ctx context.Context, c *Container, code string) (sandbox.Result, error)
	// Resume, if set, answers every resume of a run paused for tool calls (a Run's Result with
	// Calls); unset, a resume fails with sandbox.ErrNotPaused.
	Resume func(ctx context.Context, c *Container, results []sandbox.ToolResult) (sandbox.Result, error)
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
	c := &Container{p: p, vars: map[string]string{}, files: map[string]*file{}}
	p.containers = append(p.containers, c)
	p.specs = append(p.specs, spec)
	if p.NoFileAccess {
		return runOnly{c}, nil
	}
	return c, nil
}

// runOnly is a container without the file ability.
type runOnly struct{ c *Container }

func (r runOnly) Run(ctx context.Context, code string) (sandbox.Result, error) {
	return r.c.Run(ctx, code)
}
func (r runOnly) Delete(ctx context.Context) error { return r.c.Delete(ctx) }
func (r runOnly) Alive() bool                      { return r.c.Alive() }

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
	mu     sync.Mutex
	vars   map[string]string
	files  map[string]*file
	writes int64 // file writes so far: each gets a distinct modification time
	runs   int
}

// file is one file of a Container.
type file struct {
	data []byte
	mod  time.Time
}

var (
	_ sandbox.Container = (*Container)(nil)
	_ sandbox.Files     = (*Container)(nil)
)

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

var _ sandbox.Resumer = (*Container)(nil)

// Resume implements [sandbox.Resumer] with the Provider's Resume.
func (c *Container) Resume(ctx context.Context, results []sandbox.ToolResult) (sandbox.Result, error) {
	if c.deleted.Load() {
		return sandbox.Result{}, sandbox.ErrClosed
	}
	c.p.mu.Lock()
	resume := c.p.Resume
	c.p.mu.Unlock()
	if resume == nil {
		return sandbox.Result{}, sandbox.ErrNotPaused
	}
	return resume(ctx, c, results)
}

// Eval is the default behaviour of a run:
//   - "write PATH TEXT" writes TEXT to the file PATH (replacing it), and lists it in the
//     Result's Files, as a run that changed it would;
//   - "remove PATH" removes the file PATH;
//   - "k=v" sets the container's variable k to v and shows nothing;
//   - any other code is a variable's name, whose value (or "") is the Value shown.
func (c *Container) Eval(code string) sandbox.Result {
	c.mu.Lock()
	defer c.mu.Unlock()
	if rest, ok := strings.CutPrefix(code, "write "); ok {
		p, text, _ := strings.Cut(rest, " ")
		c.putLocked(p, []byte(text))
		return sandbox.Result{Files: []sandbox.File{{Path: p, Size: int64(len(text))}}}
	}
	if p, ok := strings.CutPrefix(code, "remove "); ok {
		delete(c.files, p)
		return sandbox.Result{}
	}
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

func (c *Container) putLocked(p string, data []byte) *file {
	c.writes++
	f := &file{data: data, mod: time.Now().Add(time.Duration(c.writes))}
	c.files[p] = f
	return f
}

// usable returns why the container's files cannot be reached, or nil.
func (c *Container) usable() error {
	if c.deleted.Load() {
		return sandbox.ErrClosed
	}
	if c.dead.Load() {
		return fmt.Errorf("%w: the container was killed", sandbox.ErrLost)
	}
	return nil
}

// WriteFile implements [sandbox.Files]: it reads r whole (at most limit bytes when limit > 0)
// before the file is replaced, so that a failure leaves nothing.
func (c *Container) WriteFile(ctx context.Context, p string, r io.Reader, limit int64) (sandbox.FileStat, error) {
	if err := c.usable(); err != nil {
		return sandbox.FileStat{}, err
	}
	src := r
	if limit > 0 {
		src = io.LimitReader(r, limit+1)
	}
	data, err := io.ReadAll(src)
	if err != nil {
		return sandbox.FileStat{}, err
	}
	if err := ctx.Err(); err != nil {
		return sandbox.FileStat{}, err
	}
	if limit > 0 && int64(len(data)) > limit {
		return sandbox.FileStat{}, fmt.Errorf("%w: beyond %d bytes", sandbox.ErrFileTooLarge, limit)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	f := c.putLocked(p, data)
	return sandbox.FileStat{Size: int64(len(f.data)), ModTime: f.mod}, nil
}

// OpenFile implements [sandbox.Files].
func (c *Container) OpenFile(_ context.Context, p string) (io.ReadCloser, sandbox.FileStat, error) {
	if err := c.usable(); err != nil {
		return nil, sandbox.FileStat{}, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	f := c.files[p]
	if f == nil {
		return nil, sandbox.FileStat{}, sandbox.ErrFileNotFound
	}
	return io.NopCloser(bytes.NewReader(f.data)), sandbox.FileStat{Size: int64(len(f.data)), ModTime: f.mod}, nil
}

// StatFile implements [sandbox.Files].
func (c *Container) StatFile(_ context.Context, p string) (sandbox.FileStat, error) {
	if err := c.usable(); err != nil {
		return sandbox.FileStat{}, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	f := c.files[p]
	if f == nil {
		return sandbox.FileStat{}, sandbox.ErrFileNotFound
	}
	return sandbox.FileStat{Size: int64(len(f.data)), ModTime: f.mod}, nil
}

// RemoveFile implements [sandbox.Files].
func (c *Container) RemoveFile(_ context.Context, p string) error {
	if err := c.usable(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.files[p] == nil {
		return sandbox.ErrFileNotFound
	}
	delete(c.files, p)
	return nil
}

// FileText returns the content of file p, and whether there is one.
func (c *Container) FileText(p string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f := c.files[p]
	if f == nil {
		return "", false
	}
	return string(f.data), true
}

// FilePaths returns the paths of the container's files, sorted.
func (c *Container) FilePaths() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, 0, len(c.files))
	for p := range c.files {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}
