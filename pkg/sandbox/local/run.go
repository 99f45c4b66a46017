package local

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/codeinterp/codeinterp/pkg/sandbox"
	"go.uber.org/zap"
)

// Run runs code as the container's next cell. When ctx is done the run is interrupted
// (KeyboardInterrupt); if it has not stopped InterruptGrace later, the container is killed.
// A run stopped at ctx's deadline fails with [sandbox.ErrTimeout], also matching
// [sandbox.ErrLost] if the container was killed; a run stopped by cancellation fails with ctx's
// error (and ErrLost if killed). A container that died fails the run with ErrLost; a deleted one
// with [sandbox.ErrClosed]. The Result holds what the run showed, also when it failed.
func (c *container) Run(ctx context.Context, code string) (sandbox.Result, error) {
	c.runMu.Lock()
	defer c.runMu.Unlock()
	if err := c.runnable(ctx); err != nil {
		return sandbox.Result{}, err
	}
	r := c.beginCell()
	if err := c.sendCell(ctx, r, code); err != nil {
		c.kill()
		res := c.partial(r)
		if ctx.Err() != nil {
			return res, c.stopErr(ctx, true)
		}
		return res, fmt.Errorf("%w: send code: %w", sandbox.ErrLost, err)
	}
	return c.await(ctx, r)
}

var _ sandbox.Resumer = (*container)(nil)

// Resume gives the run paused for tool calls their results and waits for it as Run does (see
// [sandbox.Resumer]). results must answer each call of the pause, in order; a content beyond
// sandbox.MaxToolResultBytes is refused.
func (c *container) Resume(ctx context.Context, results []sandbox.ToolResult) (sandbox.Result, error) {
	c.runMu.Lock()
	defer c.runMu.Unlock()
	if c.isDeleted() {
		return sandbox.Result{}, sandbox.ErrClosed
	}
	r := c.paused
	if r == nil {
		return sandbox.Result{}, sandbox.ErrNotPaused
	}
	if len(results) != c.pausedCalls {
		return sandbox.Result{}, fmt.Errorf("resume: %d results for %d calls", len(results), c.pausedCalls)
	}
	for i, x := range results {
		if len(x.Content) > sandbox.MaxToolResultBytes {
			return sandbox.Result{}, fmt.Errorf("resume: result %d is %d bytes, more than %d", i, len(x.Content), sandbox.MaxToolResultBytes)
		}
	}
	select {
	case <-c.exited:
		c.paused = nil
		return c.partial(*r), fmt.Errorf("%w: container exited: %v", sandbox.ErrLost, c.waitErr)
	default:
	}
	c.paused = nil
	// The resume goes even when ctx is done already: the run then stops at once, interrupted.
	if err := c.send(ctx, resumeRequest{seq: r.seq, results: results}); err != nil {
		c.kill()
		res := c.partial(*r)
		if ctx.Err() != nil {
			return res, c.stopErr(ctx, true)
		}
		return res, fmt.Errorf("%w: send results: %w", sandbox.ErrLost, err)
	}
	return c.await(ctx, *r)
}

// cell is one run in progress: its sequence number, and the end marker of its output with the
// channels closed when each stream has shown it.
type cell struct {
	seq              uint64
	marker           []byte
	outDone, errDone <-chan struct{}
}

// runnable returns why no run may start now (the container is deleted or dead, or ctx is
// already done), or nil. The caller holds runMu.
func (c *container) runnable(ctx context.Context) error {
	if c.isDeleted() {
		return sandbox.ErrClosed
	}
	if c.paused != nil {
		return sandbox.ErrPaused
	}
	select {
	case <-c.exited:
		return fmt.Errorf("%w: container exited: %v", sandbox.ErrLost, c.waitErr)
	default:
	}
	if ctx.Err() != nil {
		// Nothing was sent: the container is untouched.
		return c.stopErr(ctx, false)
	}
	return nil
}

// beginCell numbers the next run and starts capturing its output up to a fresh end marker.
// The caller holds runMu.
func (c *container) beginCell() cell {
	c.seq++
	marker := []byte("\x1e[codeinterp end " + randomHex(16) + "]\x1e")
	return cell{seq: c.seq, marker: marker, outDone: c.stdout.begin(marker), errDone: c.stderr.begin(marker)}
}

// sendCell sends run r of code to the driver. The caller holds runMu.
func (c *container) sendCell(ctx context.Context, r cell, code string) error {
	req := runRequest{seq: r.seq, code: code, marker: r.marker, reap: c.killedSince}
	c.killedSince = false
	return c.send(ctx, req)
}

// await waits for the end of run r: the driver's answer, or the container's death or
// deletion. When ctx is done it interrupts the run, and kills the container if the run has not
// stopped InterruptGrace later.
func (c *container) await(ctx context.Context, r cell) (sandbox.Result, error) {
	interrupted := false
	var grace <-chan time.Time
	for {
		var done <-chan struct{}
		if !interrupted {
			done = ctx.Done()
		}
		select {
		case f := <-c.frames:
			if a, ok := f.a.(callsAnswer); ok && f.err == nil && a.seq == int64(r.seq) {
				if interrupted {
					// The interrupt ends the driver's wait for the results: the run's result
					// follows.
					continue
				}
				// The run awaits the client's tools: it stays where it is, paused, until Resume.
				c.paused, c.pausedCalls = &r, len(a.calls)
				return sandbox.Result{Calls: a.calls}, nil
			}
			return c.collect(ctx, r, f, interrupted)
		case <-done:
			interrupted = true
			c.interrupt(r.seq)
			t := time.NewTimer(c.l.cfg.InterruptGrace)
			defer t.Stop()
			grace = t.C
		case <-grace:
			c.log.Info("run did not stop when interrupted: killing the container")
			c.kill()
			return c.partial(r), c.stopErr(ctx, true)
		case <-c.exited:
			res := c.partial(r)
			if c.isDeleted() {
				return res, sandbox.ErrClosed
			}
			if interrupted {
				return res, c.stopErr(ctx, true)
			}
			return res, fmt.Errorf("%w: container exited: %v", sandbox.ErrLost, c.waitErr)
		case <-c.deleted:
			return c.partial(r), sandbox.ErrClosed
		}
	}
}

// interrupt asks the driver to interrupt run seq (a KeyboardInterrupt in the code). A driver
// that does not read it is left to the grace that follows.
func (c *container) interrupt(seq uint64) {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], seq)
	_ = c.intrW.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	_, _ = c.intrW.Write(b[:])
}

// collect makes run r's result of the frame the driver sent, and stops what the run left
// running in the background; interrupted reports whether ctx had ended the run.
func (c *container) collect(ctx context.Context, r cell, f frameMsg, interrupted bool) (sandbox.Result, error) {
	a, err := checkAnswer(f, r.seq)
	if err != nil {
		// The driver broke the protocol, or code running in its process wrote to its pipe:
		// nothing it sends can be trusted any more.
		c.kill()
		res := c.partial(r)
		if c.isDeleted() {
			return res, sandbox.ErrClosed
		}
		if interrupted {
			return res, c.stopErr(ctx, true)
		}
		return res, fmt.Errorf("%w: %w", sandbox.ErrLost, err)
	}
	res := c.result(a, r)
	c.stopBackground()
	if interrupted {
		return res, c.stopErr(ctx, false)
	}
	return res, nil
}

// stopBackground kills what the run left running besides the interpreter (see nsProcs). The
// caller holds runMu.
func (c *container) stopBackground() {
	if c.procs.init == 0 || c.isDeleted() {
		return // a Delete meanwhile ends every process anyway
	}
	if c.cg != nil && c.onlyDriverLeft() {
		return
	}
	n, err := c.procs.killBackground()
	if n > 0 {
		c.killedSince = true
	}
	if err != nil {
		c.log.Warn("stop background processes", zap.Error(err))
	}
	if n > 0 {
		c.log.Debug("stopped background processes", zap.Int("processes", n))
	}
}

// onlyDriverLeft reports, from the container's cgroup (one read: a zombie is not listed),
// whether nothing runs in it but bubblewrap's monitor and init and the driver, as after most
// runs.
func (c *container) onlyDriverLeft() bool {
	if len(c.cg.dirs) == 0 {
		return false
	}
	pids := cgroupPids(c.cg.dirs[0])
	if len(pids) == 0 {
		return false // unreadable: walk the processes
	}
	monitor := 0 // bubblewrap's monitor; forked containers have none
	if c.cmd != nil {
		monitor = c.cmd.Process.Pid
	}
	for _, pid := range pids {
		if pid != monitor && pid != c.procs.init && pid != c.procs.driver {
			return false
		}
	}
	return true
}

// stopErr is the error of a run stopped because ctx is done; killed reports whether the
// container was killed for it.
func (c *container) stopErr(ctx context.Context, killed bool) error {
	var err error = sandbox.ErrTimeout
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		err = ctx.Err()
	}
	if killed {
		return fmt.Errorf("%w: %w", err, sandbox.ErrLost)
	}
	return err
}

// partial collects what the streams delivered of run r, cut short.
func (c *container) partial(r cell) sandbox.Result {
	// A dead container's pipes end soon; a live one's output so far is all there is.
	waitMarkers(markerGrace/4, nil, r.outDone, r.errDone)
	var res sandbox.Result
	var t1, t2 bool
	res.Stdout, t1 = c.stdout.end()
	res.Stderr, t2 = c.stderr.end()
	res.Truncated = t1 || t2
	return res
}

// waitMarkers waits until both streams have shown the run's end marker or ended, until exited
// is closed (when not nil), or for d in all.
func waitMarkers(d time.Duration, exited <-chan struct{}, outDone, errDone <-chan struct{}) {
	t := time.NewTimer(d)
	defer t.Stop()
	for _, ch := range []<-chan struct{}{outDone, errDone} {
		select {
		case <-ch:
		case <-exited:
		case <-t.C:
			return
		}
	}
}

// result builds run r's Result from the driver's answer a and the streams.
func (c *container) result(a resultAnswer, r cell) sandbox.Result {
	waitMarkers(markerGrace, c.exited, r.outDone, r.errDone)
	var res sandbox.Result
	var t1, t2 bool
	res.Stdout, t1 = c.stdout.end()
	res.Stderr, t2 = c.stderr.end()
	limit := c.l.cfg.OutputLimit
	var t3 bool
	// The one cut of the texts: the driver sends each cut at the limit with the bytes it cut
	// off; the note is added here, and a forged text beyond the limit is cut here.
	if a.value.s != "" || a.value.omitted > 0 {
		res.Value, t3 = cutText([]byte(a.value.s), a.value.omitted, limit)
	}
	if e := a.err; e != nil {
		str := func(t text) string {
			out, _ := cutText([]byte(t.s), t.omitted, limit)
			return out
		}
		res.Error = &sandbox.Error{Name: str(e.name), Value: str(e.value), Traceback: str(e.traceback)}
	}
	imgBytes := 0
	for _, b := range a.images {
		if imgBytes+len(b) > limit {
			t3 = true
			continue
		}
		imgBytes += len(b)
		res.Images = append(res.Images, sandbox.Image{PNG: b})
	}
	reportFiles(&res, a.files, a.filesOmitted, c.hostDir)
	res.Truncated = t1 || t2 || t3 || a.truncated
	return res
}
