package sandbox

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"
)

// pause is an entry's run paused for tool calls: the container it paused in, its calls, and
// the timer that abandons it past ManagerConfig.PauseTimeout.
type pause struct {
	c     Container
	calls int
	timer *time.Timer
	// ids are the names of its calls (Lease.NamePause), nil when unnamed.
	ids []string
}

// notePause records, after a run or resume of e's container c that gave res, whether a run of
// it is paused now. An anonymous caller's run may not pause beyond anonymousPauseCap: it
// reports refused, records nothing, and the caller resumes the run with its calls refused
// (settleRun). An anonymous caller's container whose run is not paused any more and that no
// lease holds (its pause abandoned, the request that meant to resume it gone) is deleted. The
// caller holds e.sem.
func (m *Manager) notePause(e *entry, c Container, res Result) (refused bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.endPauseLocked(e)
	if e.dead || m.closed {
		return false
	}
	anonymous := e.key.kind == kindEphemeral
	if len(res.Calls) == 0 {
		if anonymous && e.leases == 0 {
			m.log.Info("paused run ended: its anonymous container deleted", zap.String("container_id", e.id))
			m.removeLocked(e)
		}
		return false
	}
	if anonymous && m.anonPaused >= m.anonymousPauseCap() {
		m.log.Debug("anonymous pauses at their cap: the run's calls refused", zap.String("container_id", e.id))
		return true
	}
	p := &pause{c: c, calls: len(res.Calls)}
	p.timer = time.AfterFunc(m.cfg.PauseTimeout, func() { m.abandon(e, p) })
	e.pause = p
	if anonymous {
		m.anonPaused++
	}
	return false
}

// anonymousPauseCap is how many anonymous callers' containers may be paused at once: half of
// the anonymous identity's share (ManagerConfig.MaxContainersPerIdentity), as a paused one
// outlives its request (up to PauseTimeout) and is never evicted, so that the rest of the
// share is left to the other anonymous callers.
func (m *Manager) anonymousPauseCap() int {
	return m.cfg.MaxContainersPerIdentity / 2
}

// TextToolCallRefusedAnonymous is the error a call of the client's tools from an anonymous
// caller's code gets when as many anonymous callers' runs as may be are paused already
// (anonymousPauseCap): the code sees it raised as ToolCallError, and the run goes on.
const TextToolCallRefusedAnonymous = "the client's tools cannot be called from code now: too many anonymous callers' runs are paused for theirs"

// settleRun ends a run or resume of e's container c that gave res and err, bounded by ctx: it
// registers the run's files and records its pause (notePause); a pause notePause refuses is
// resumed at once, each call failing with TextToolCallRefusedAnonymous, until the run ends or
// pauses as it may. The caller holds e.sem.
func (m *Manager) settleRun(ctx context.Context, e *entry, c Container, res Result, err error) (Result, error) {
	for {
		if len(res.Files) > 0 {
			m.registerRunFiles(context.WithoutCancel(ctx), e, c, &res)
		}
		if !m.notePause(e, c, res) || err != nil {
			return res, err
		}
		r, ok := c.(Resumer)
		if !ok {
			return res, err
		}
		refused := make([]ToolResult, len(res.Calls))
		for i := range refused {
			refused[i] = ToolResult{Content: TextToolCallRefusedAnonymous, IsError: true}
		}
		res, err = r.Resume(ctx, refused)
	}
}

// paused reports whether a run of e is paused for tool calls: no other may start.
func (m *Manager) paused(e *entry) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return e.pause != nil
}

// endPauseLocked forgets e's pause and stops its timer. The caller holds m.mu.
func (m *Manager) endPauseLocked(e *entry) {
	if e.pause != nil {
		e.pause.timer.Stop()
		e.pause = nil
		if e.key.kind == kindEphemeral {
			m.anonPaused--
		}
	}
}

// abandon ends pause p of e, still not resumed at its bound: each of its calls raises
// TimeoutError in the code, which runs on (up to the run timeout) and may pause again.
func (m *Manager) abandon(e *entry, p *pause) {
	m.mu.Lock()
	if m.closed || e.dead || e.pause != p {
		m.mu.Unlock()
		return
	}
	m.active++ // Close waits for it
	m.mu.Unlock()
	defer m.done()
	select {
	case <-e.sem:
	case <-m.ctx.Done():
		return
	}
	defer func() { e.sem <- struct{}{} }()
	m.mu.Lock()
	current := e.pause == p && !e.dead
	if current && e.key.kind == kindEphemeral && e.leases == 0 {
		// An anonymous caller's container kept only for the pause's resume (unpinLocked):
		// no one is left to see the code run on, and it goes now.
		m.log.Info("paused run abandoned: its anonymous container deleted", zap.String("container_id", e.id))
		m.removeLocked(e)
		m.mu.Unlock()
		return
	}
	m.mu.Unlock()
	r, ok := p.c.(Resumer)
	if !current || !ok {
		return // resumed meanwhile, or gone
	}
	results := make([]ToolResult, p.calls)
	for i := range results {
		results[i].Timeout = true
	}
	ctx, cancel := context.WithTimeout(m.ctx, m.cfg.RunTimeout)
	defer cancel()
	res, err := r.Resume(ctx, results)
	m.log.Info("paused run abandoned: its tool calls timed out", zap.String("container_id", e.id), zap.Error(err))
	_, err = m.settleRun(ctx, e, p.c, res, err)
	m.afterRun(e, p.c, err)
}

// resume gives the lease's paused run its results (see [Lease.Resume]).
func (l *localLease) Resume(ctx context.Context, results []ToolResult, timeout time.Duration) (Result, error) {
	if l.released {
		return Result{}, errLeaseReleased
	}
	if timeout <= 0 {
		timeout = l.m.cfg.RunTimeout
	}
	m := l.m
	m.mu.Lock()
	e := l.e
	dead := e.dead
	m.mu.Unlock()
	if dead {
		return Result{}, ErrNotPaused // the container is gone, and its paused run with it
	}
	select {
	case <-e.sem:
	case <-ctx.Done():
		return Result{}, fmt.Errorf("wait for the container: %w", ctx.Err())
	}
	defer func() { e.sem <- struct{}{} }()
	m.mu.Lock()
	p := e.pause
	if p == nil || e.dead {
		m.mu.Unlock()
		return Result{}, ErrNotPaused
	}
	if len(results) != p.calls {
		// Not this pause's results: it stays paused for the right ones.
		m.mu.Unlock()
		return Result{}, fmt.Errorf("%w: the paused run awaits %d results, not %d", ErrNotPaused, p.calls, len(results))
	}
	for i, id := range p.ids {
		if results[i].CallID != id {
			// The results of an earlier pause of the run (a request sent again), or of
			// another run's.
			m.mu.Unlock()
			return Result{}, fmt.Errorf("%w: result %d answers call %q, not the paused run's %q", ErrNotPaused, i, results[i].CallID, id)
		}
	}
	m.endPauseLocked(e)
	m.mu.Unlock()
	r, ok := p.c.(Resumer)
	if !ok {
		return Result{}, ErrNotPaused
	}
	runCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	res, err := r.Resume(runCtx, results)
	res, err = m.settleRun(runCtx, e, p.c, res, err)
	m.afterRun(e, p.c, err)
	return res, err
}

// NamePause names the calls of the paused run of the lease's container (of its last Run or
// Resume), in order: a later Resume must then give each result the CallID of its call, so that
// the results meant for an earlier pause of the run, sent again, cannot resume a later one. It
// does nothing when no run is paused, or when ids are not as many as its calls.
func (l *localLease) NamePause(ids []string) {
	m := l.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if p := l.e.pause; p != nil && len(ids) == p.calls {
		p.ids = ids
	}
}

// pauseNamer is a LeaseBackend whose paused runs' calls can be named.
type pauseNamer interface {
	NamePause(ids []string)
}

// NamePause names the calls of the run of the lease's container paused for them (see
// [Lease.Resume]), in order: each result of the Resume of that pause must then carry the
// CallID of its call, or the Resume fails with ErrNotPaused and the run stays paused. It does
// nothing with a backend that cannot resume.
func (l *Lease) NamePause(ids []string) {
	if n, ok := l.b.(pauseNamer); ok {
		n.NamePause(ids)
	}
}

// resumer is a LeaseBackend that can resume a paused run.
type resumer interface {
	Resume(ctx context.Context, results []ToolResult, timeout time.Duration) (Result, error)
}

// Resume gives the run of the lease's container paused for tool calls (a Result with Calls, of
// an earlier Run or Resume, possibly of another request) the results of its calls, in order,
// and waits for it as Run does, timeout bounding it as Run's does: it ends, or pauses again.
// Without a paused run (it ended, was abandoned past ManagerConfig.PauseTimeout, or the
// container is gone) it fails with ErrNotPaused, as it does, leaving the run paused, when
// results are not as many as its calls; a backend that cannot resume with ErrUnavailable. A
// lease on another node's container (pkg/sandbox/remote) resumes the run there.
func (l *Lease) Resume(ctx context.Context, results []ToolResult, timeout time.Duration) (Result, error) {
	r, ok := l.b.(resumer)
	if !ok {
		return Result{}, fmt.Errorf("%w: this sandbox backend cannot resume a paused run", ErrUnavailable)
	}
	return r.Resume(ctx, results, timeout)
}

// TextToolCallRefused is the error a call of the client's tools from code gets from
// [Lease.RunRefusingToolCalls] (the code sees it raised as ToolCallError).
const TextToolCallRefused = "the client's tools cannot be called from code in this request (programmatic tool calling is not enabled)"

// RunRefusingToolCalls runs code as Run does, but a run that pauses for calls of the client's
// tools is resumed at once with each call failing with TextToolCallRefused, within what is
// left of timeout, until it ends: for a caller that serves no programmatic tool calling, so
// that no container is left paused.
func (l *Lease) RunRefusingToolCalls(ctx context.Context, code string, timeout time.Duration) (Result, error) {
	start := time.Now()
	res, err := l.Run(ctx, code, timeout)
	for err == nil && len(res.Calls) > 0 {
		left := time.Duration(0)
		if timeout > 0 {
			if left = timeout - time.Since(start); left <= 0 {
				left = time.Millisecond // the run stops at once, as one past its limit does
			}
		}
		refused := make([]ToolResult, len(res.Calls))
		for i := range refused {
			refused[i] = ToolResult{Content: TextToolCallRefused, IsError: true}
		}
		res, err = l.Resume(ctx, refused, left)
	}
	return res, err
}
