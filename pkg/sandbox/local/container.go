package local

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/codeinterp/codeinterp/pkg/sandbox"
)

// markerGrace bounds the wait for the end markers on stdout and stderr once the driver has
// answered. They are written before the answer, so a healthy run waits only for the readers to
// be scheduled — on a saturated host (hundreds of containers starting on two cores) that took
// over a second, and a run's stdout was lost — and only a run that broke its own streams waits
// it all.
const markerGrace = 5 * time.Second

// container is one container of a Local: a bubblewrap process whose command is
// the driver. Its Run calls must not overlap (runMu enforces it); Delete may be called at any
// time.
type container struct {
	l       *Local
	log     *zap.Logger
	name    string // random, names its cgroup
	cmd     *exec.Cmd
	hostDir string // the data directory on the host, without isolation only
	cancel  context.CancelFunc
	// initMu guards initFD: a pidfd of the container's PID-namespace init (bubblewrap's
	// reaper), or -1. Killing it kills every process of the container; it exits only once they
	// are all gone.
	initMu sync.Mutex
	initFD int
	cg     *containerCgroup // nil without cgroups
	uid    int              // its own host uid, given back once its processes are gone; -1 for none
	// initPID is the host pid of the container's init (0 without isolation); procs, its init,
	// driver and PID namespace, noted once the driver is ready (init 0 when they could not be).
	initPID int
	procs   nsProcs

	ctlW  *os.File // requests to the driver (its fd 3)
	ctlR  *os.File // answers from the driver (its fd 4)
	intrW *os.File // interrupts to the driver (its fd 5)
	outR  *os.File
	errR  *os.File

	stdout, stderr *capture
	frames         chan frameMsg // from the frame reader
	exited         chan struct{} // closed when the process has been waited for
	stop           chan struct{} // closed by Delete: the frame reader stops delivering
	waitErr        error         // valid once exited is closed

	runMu       sync.Mutex // one run at a time
	seq         uint64     // guarded by runMu
	killedSince bool       // guarded by runMu: stopBackground killed processes after the last run

	deleteOnce  sync.Once
	deleted     chan struct{} // closed when Delete has started
	cleanupOnce sync.Once
	cleanupErr  error // set by cleanupOnce
	wg          sync.WaitGroup
	closeFiles  sync.Once
}

type frameMsg struct {
	v   map[string]any
	err error
}

// maxFrame bounds one answer from the driver: the capped value, error value and traceback,
// images and file list, base64-free. A longer frame means the driver is not ours any more.
func (l *Local) maxFrame() int {
	return 5*l.cfg.OutputLimit + 4<<20
}

// start launches the process and its reader goroutines; it does not wait for the driver. It
// fails with [sandbox.ErrClosed] after Close, which waits for the starts in progress.
func (l *Local) start(memBytes int64) (_ *container, err error) {
	if err := l.beginStart(); err != nil {
		return nil, err
	}
	defer l.starts.Done()
	c := &container{
		l:       l,
		initFD:  -1,
		uid:     -1,
		stdout:  newCapture(l.cfg.OutputLimit),
		stderr:  newCapture(l.cfg.OutputLimit),
		frames:  make(chan frameMsg),
		exited:  make(chan struct{}),
		stop:    make(chan struct{}),
		deleted: make(chan struct{}),
	}
	name := randomHex(8)
	c.name = name
	c.log = l.log.With(zap.String("container", name))
	var childFiles []*os.File
	started := false // the process started: Delete releases what the container holds
	defer func() {
		for _, f := range childFiles {
			f.Close()
		}
		if err != nil && !started {
			c.closeParentFiles()
			if c.hostDir != "" {
				os.RemoveAll(c.hostDir)
			}
			if c.cg != nil {
				_ = c.cg.remove()
			}
			c.giveUID()
		}
	}()
	runAs := os.Geteuid()
	if l.setUID && l.isolated() {
		if c.uid, err = l.uids.take(); err != nil {
			return nil, err
		}
		runAs = c.uid
	}
	pipe := func() (r, w *os.File, err error) {
		r, w, err = os.Pipe()
		if err != nil {
			return nil, nil, fmt.Errorf("%w: pipe: %w", sandbox.ErrUnavailable, err)
		}
		return r, w, nil
	}
	var ctlInR, ctlOutW, intrR, outW, errW, blockW *os.File
	if ctlInR, c.ctlW, err = pipe(); err != nil {
		return nil, err
	}
	childFiles = append(childFiles, ctlInR)
	if c.ctlR, ctlOutW, err = pipe(); err != nil {
		return nil, err
	}
	childFiles = append(childFiles, ctlOutW)
	if intrR, c.intrW, err = pipe(); err != nil {
		return nil, err
	}
	childFiles = append(childFiles, intrR)
	if c.outR, outW, err = pipe(); err != nil {
		return nil, err
	}
	childFiles = append(childFiles, outW)
	if c.errR, errW, err = pipe(); err != nil {
		return nil, err
	}
	childFiles = append(childFiles, errW)
	extra := []*os.File{ctlInR, ctlOutW, intrR}
	var infoR *os.File
	if l.isolated() {
		var sp *os.File // fd 6: the seccomp filter
		if l.seccomp != nil {
			if sp, err = l.seccompPipe(); err != nil {
				return nil, fmt.Errorf("%w: %w", sandbox.ErrUnavailable, err)
			}
			childFiles = append(childFiles, sp)
		}
		var infoW *os.File // fd 7: bubblewrap's --info-fd
		if infoR, infoW, err = pipe(); err != nil {
			return nil, err
		}
		defer infoR.Close()
		childFiles = append(childFiles, infoW)
		extra = append(extra, sp, infoW)
		var blockR *os.File // fd 8: bubblewrap's --block-fd
		if l.cgroups != nil {
			if blockR, blockW, err = pipe(); err != nil {
				return nil, err
			}
			defer blockW.Close()
			childFiles = append(childFiles, blockR)
			memMax, pidsMax := l.cgroupLimits(memBytes)
			if c.cg, err = l.cgroups.create(name, memMax, pidsMax, l.cfg.CPUQuota); err != nil {
				return nil, fmt.Errorf("%w: %w", sandbox.ErrUnavailable, err)
			}
		}
		extra = append(extra, blockR) // nil without cgroups: fd 8 stays closed
		shared, err := l.openShared() // fd 9 on
		if err != nil {
			return nil, fmt.Errorf("%w: %w", sandbox.ErrUnavailable, err)
		}
		childFiles = append(childFiles, shared...)
		extra = append(extra, shared...)
	}

	dir := dataDir
	if !l.isolated() {
		c.hostDir = l.hostDataDir(name)
		if err := os.MkdirAll(c.hostDir, 0o700); err != nil {
			return nil, fmt.Errorf("%w: make data dir: %w", sandbox.ErrUnavailable, err)
		}
		dir = c.hostDir
	}
	cfgHex, err := l.driverConfig(memBytes, dir)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", sandbox.ErrUnavailable, err)
	}
	path, args := l.commandArgs(cfgHex)

	// The process lives until Delete, not as long as any request: its context is its own.
	life, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	cmd := exec.CommandContext(life, path, args...)
	cmd.Stdin = nil // /dev/null
	cmd.Stdout, cmd.Stderr = outW, errW
	cmd.ExtraFiles = extra
	cmd.SysProcAttr = l.sysProcAttr(runAs)
	if l.isolated() {
		cmd.Env = []string{} // bubblewrap itself gets nothing of the server's environment
		cmd.Dir = "/"
	} else {
		cmd.Env = l.containerEnv(l.workDir + "/mpl")
		cmd.Dir = c.hostDir
	}
	// Kill the whole process group: bubblewrap (whose --die-with-parent then kills the
	// container's PID namespace), or without isolation the interpreter and its children.
	cmd.Cancel = func() error {
		if cmd.Process == nil {
			return nil
		}
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	cmd.WaitDelay = time.Second
	c.cmd = cmd
	if err := cmd.Start(); err != nil {
		cancel()
		return nil, fmt.Errorf("%w: start %s: %w", sandbox.ErrUnavailable, path, err)
	}
	started = true
	l.track(c)
	for _, f := range childFiles {
		f.Close()
	}
	childFiles = nil
	if infoR != nil {
		initPID := c.openInit(infoR)
		c.initPID = initPID
		if c.cg != nil {
			// bubblewrap's monitor and the sandbox's init are the only processes so far; the
			// init waits on the block pipe before it starts anything.
			err := c.cg.add(cmd.Process.Pid)
			if err == nil && initPID > 0 {
				err = c.cg.add(initPID)
			} else if err == nil {
				err = errors.New("no pid for the sandbox's init")
			}
			if err != nil {
				c.kill()
				c.goTracked(func() { _ = cmd.Wait(); close(c.exited) })
				_ = c.Delete(context.Background())
				return nil, fmt.Errorf("%w: %w", sandbox.ErrUnavailable, err)
			}
			if _, err := blockW.Write([]byte{1}); err != nil {
				c.kill()
				c.goTracked(func() { _ = cmd.Wait(); close(c.exited) })
				_ = c.Delete(context.Background())
				return nil, fmt.Errorf("%w: release the sandbox: %w", sandbox.ErrUnavailable, err)
			}
		}
	}

	c.goTracked(func() { c.stdout.readFrom(c.outR) })
	c.goTracked(func() { c.stderr.readFrom(c.errR) })
	c.goTracked(c.readFrames)
	c.goTracked(func() {
		c.waitErr = cmd.Wait()
		close(c.exited)
	})
	return c, nil
}

func (c *container) goTracked(f func()) {
	c.wg.Add(1)
	c.l.wg.Add(1)
	go func() {
		defer c.l.wg.Done()
		defer c.wg.Done()
		f()
	}()
}

// openInit reads bubblewrap's --info-fd report and opens a pidfd of the container's init. It
// is best effort: without it Delete cannot wait for the container's processes to be gone.
func (c *container) openInit(info *os.File) int {
	pid, fd, err := openInit(info)
	if err != nil {
		c.log.Warn("no pidfd of the container's init", zap.Int("pid", pid), zap.Error(err))
		return pid
	}
	c.initMu.Lock()
	c.initFD = fd
	c.initMu.Unlock()
	return pid
}

// openInit reads bubblewrap's --info-fd report: the pid of the sandbox's init (PID 1 of its
// namespace), and a pidfd of it.
func openInit(info *os.File) (pid, fd int, err error) {
	_ = info.SetReadDeadline(time.Now().Add(10 * time.Second))
	var msg struct {
		ChildPID int `json:"child-pid"`
	}
	if err := json.NewDecoder(info).Decode(&msg); err != nil || msg.ChildPID <= 0 {
		return 0, -1, fmt.Errorf("read bubblewrap's child pid: %v", err)
	}
	fd, err = unix.PidfdOpen(msg.ChildPID, 0)
	if err != nil {
		return msg.ChildPID, -1, fmt.Errorf("open pidfd: %w", err)
	}
	return msg.ChildPID, fd, nil
}

// reapInit waits (bounded by ctx) until the process of pidfd has exited and, if it is this
// process's child, reaps it. bubblewrap's monitor exits as soon as its init reports the
// command's status, before the init itself has exited; the init is then reparented to the
// nearest subreaper or PID 1: this process, when the server is a container's PID 1, which
// nothing else would reap. Another reaper's child is left to it (ECHILD).
func reapInit(ctx context.Context, fd int) error {
	if err := waitExited(ctx, fd); err != nil {
		return err
	}
	var info unix.Siginfo
	err := unix.Waitid(unix.P_PIDFD, fd, &info, unix.WEXITED|unix.WNOHANG, nil)
	if err != nil && !errors.Is(err, unix.ECHILD) {
		return fmt.Errorf("reap the container's init: %w", err)
	}
	return nil
}

// waitExited waits until the process of pidfd has exited (it may be a zombie), or ctx is done.
func waitExited(ctx context.Context, fd int) error {
	for {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, 50)
		if err != nil && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("wait for the container's processes: %w", err)
		}
		if n > 0 {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("wait for the container's processes: %w", err)
		}
	}
}

// kill kills the container: bubblewrap's process group (without isolation: the interpreter's)
// and the container's init, which takes every process of its PID namespace with it.
func (c *container) kill() {
	c.cancel()
	c.initMu.Lock()
	if c.initFD >= 0 {
		_ = unix.PidfdSendSignal(c.initFD, unix.SIGKILL, nil, 0)
	}
	c.initMu.Unlock()
}

// waitInitGone waits until the container's init has exited, which it does only after every
// other process of its PID namespace is gone, and reaps it if it became this process's child.
// The monitor has been waited for (the init's reparenting, if any, is done).
func (c *container) waitInitGone(ctx context.Context) error {
	c.initMu.Lock()
	fd := c.initFD
	c.initMu.Unlock()
	if fd < 0 {
		return nil
	}
	return reapInit(ctx, fd)
}

// readFrames delivers the driver's answers until its pipe ends or Delete.
func (c *container) readFrames() {
	limit := c.l.maxFrame()
	for {
		v, err := readFrame(c.ctlR, limit)
		select {
		case c.frames <- frameMsg{v: v, err: err}:
		case <-c.stop:
			return
		}
		if err != nil {
			return
		}
	}
}

// readFrame reads one length-prefixed marshal frame; a frame longer than limit is an error
// and is not read.
func readFrame(r io.Reader, limit int) (map[string]any, error) {
	var head [4]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return nil, fmt.Errorf("read frame: %w", err)
	}
	n := binary.BigEndian.Uint32(head[:])
	if int64(n) > int64(limit) {
		return nil, fmt.Errorf("read frame: %d bytes exceeds the %d-byte limit", n, limit)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return nil, fmt.Errorf("read frame: %w", err)
	}
	v, err := marshalDecode(body)
	if err != nil {
		return nil, fmt.Errorf("read frame: %w", err)
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("read frame: %w: a %T, not a dict", errMarshal, v)
	}
	return m, nil
}

func writeFrame(w io.Writer, v map[string]any) error {
	body, err := marshalEncode(v)
	if err != nil {
		return err
	}
	buf := make([]byte, 4, 4+len(body))
	binary.BigEndian.PutUint32(buf, uint32(len(body)))
	_, err = w.Write(append(buf, body...))
	return err
}

// waitReady waits for the driver's first answer.
func (c *container) waitReady(ctx context.Context) error {
	select {
	case f := <-c.frames:
		if f.err != nil {
			return fmt.Errorf("driver did not start: %w%s", f.err, c.startOutput())
		}
		if op, _ := f.v["op"].(string); op != "ready" {
			return fmt.Errorf("driver sent %q before ready", op)
		}
		c.log.Debug("container ready", zap.Any("preloaded", f.v["preloaded"]))
		if c.initPID > 0 && !c.l.cfg.KeepBackgroundProcesses {
			procs, err := findProcs(c.initPID)
			if err != nil {
				c.log.Warn("background processes of this container will not be stopped", zap.Error(err))
			} else {
				c.procs = procs
			}
		}
		return nil
	case <-c.exited:
		return fmt.Errorf("container exited at start: %v%s", c.waitErr, c.startOutput())
	case <-ctx.Done():
		return ctx.Err()
	}
}

// startOutput returns what the process wrote before its driver was ready (bubblewrap's or
// Python's complaint), for the error.
func (c *container) startOutput() string {
	c.kill()
	select {
	case <-c.exited:
	case <-time.After(time.Second):
	}
	out, _ := c.stdout.end()
	errText, _ := c.stderr.end()
	if s := out + errText; s != "" {
		if len(s) > 2000 {
			s = s[:2000]
		}
		return ": " + s
	}
	return ""
}

func (c *container) isDeleted() bool {
	select {
	case <-c.deleted:
		return true
	default:
		return false
	}
}

// Alive reports whether the container's process is still running.
func (c *container) Alive() bool {
	select {
	case <-c.exited:
		return false
	case <-c.deleted:
		return false
	default:
		return true
	}
}

// Run runs code as the container's next cell. When ctx is done the run is interrupted
// (KeyboardInterrupt); if it has not stopped InterruptGrace later, the container is killed.
// A run stopped at ctx's deadline fails with [sandbox.ErrTimeout], also matching
// [sandbox.ErrLost] if the container was killed; a run stopped by cancellation fails with ctx's
// error (and ErrLost if killed). A container that died fails the run with ErrLost; a deleted one
// with [sandbox.ErrClosed]. The Result holds what the run showed, also when it failed.
func (c *container) Run(ctx context.Context, code string) (sandbox.Result, error) {
	c.runMu.Lock()
	defer c.runMu.Unlock()
	if c.isDeleted() {
		return sandbox.Result{}, sandbox.ErrClosed
	}
	select {
	case <-c.exited:
		return sandbox.Result{}, fmt.Errorf("%w: container exited: %v", sandbox.ErrLost, c.waitErr)
	default:
	}
	if ctx.Err() != nil {
		// Nothing was sent: the container is untouched.
		return sandbox.Result{}, c.stopErr(ctx, false)
	}
	c.seq++
	seq := c.seq
	marker := []byte("\x1e[codeinterp end " + randomHex(16) + "]\x1e")
	outDone := c.stdout.begin(marker)
	errDone := c.stderr.begin(marker)

	req := map[string]any{"op": "run", "seq": int64(seq), "code": code, "marker": marker}
	if c.killedSince {
		req["reap"] = true // the driver reaps its children killed after the last run
		c.killedSince = false
	}
	if err := c.send(ctx, req); err != nil {
		c.kill()
		res := c.partial(outDone, errDone)
		if ctx.Err() != nil {
			return res, c.stopErr(ctx, true)
		}
		return res, fmt.Errorf("%w: send code: %w", sandbox.ErrLost, err)
	}

	interrupted := false
	var grace <-chan time.Time
	for {
		var done <-chan struct{}
		if !interrupted {
			done = ctx.Done()
		}
		select {
		case f := <-c.frames:
			if f.err == nil {
				f.err = checkAnswer(f.v, seq)
			}
			if f.err != nil {
				// The driver broke the protocol, or code running in its process wrote to its
				// pipe: nothing it sends can be trusted any more.
				c.kill()
				res := c.partial(outDone, errDone)
				if c.isDeleted() {
					return res, sandbox.ErrClosed
				}
				if interrupted {
					return res, c.stopErr(ctx, true)
				}
				return res, fmt.Errorf("%w: %w", sandbox.ErrLost, f.err)
			}
			res := c.result(f.v, outDone, errDone)
			c.stopBackground()
			if interrupted {
				return res, c.stopErr(ctx, false)
			}
			return res, nil
		case <-done:
			interrupted = true
			var b [8]byte
			binary.BigEndian.PutUint64(b[:], seq)
			_ = c.intrW.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
			_, _ = c.intrW.Write(b[:])
			t := time.NewTimer(c.l.cfg.InterruptGrace)
			defer t.Stop()
			grace = t.C
		case <-grace:
			c.log.Info("run did not stop when interrupted: killing the container")
			c.kill()
			return c.partial(outDone, errDone), c.stopErr(ctx, true)
		case <-c.exited:
			res := c.partial(outDone, errDone)
			if c.isDeleted() {
				return res, sandbox.ErrClosed
			}
			if interrupted {
				return res, c.stopErr(ctx, true)
			}
			return res, fmt.Errorf("%w: container exited: %v", sandbox.ErrLost, c.waitErr)
		case <-c.deleted:
			return c.partial(outDone, errDone), sandbox.ErrClosed
		}
	}
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
	for _, pid := range pids {
		if pid != c.cmd.Process.Pid && pid != c.procs.init && pid != c.procs.driver {
			return false
		}
	}
	return true
}

// send writes a request to the driver. The request is written whole even when ctx ends
// meanwhile (the run is then interrupted, which the driver honours as the run starts), but a
// driver that does not read it is given up InterruptGrace after ctx ends.
func (c *container) send(ctx context.Context, req map[string]any) error {
	_ = c.ctlW.SetWriteDeadline(time.Time{})
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		_ = c.ctlW.SetWriteDeadline(time.Now().Add(c.l.cfg.InterruptGrace))
		close(fired)
	})
	err := writeFrame(c.ctlW, req)
	if !stop() {
		<-fired
	}
	return err
}

// checkAnswer checks that a frame the driver sent during run seq is that run's result. Each
// run takes its own answer, so any other frame, of an earlier run or a later one, was forged.
func checkAnswer(v map[string]any, seq uint64) error {
	op, _ := v["op"].(string)
	got, ok := v["seq"].(int64)
	if op == "result" && ok && got == int64(seq) {
		return nil
	}
	if len(op) > 32 {
		op = op[:32]
	}
	if !ok {
		return fmt.Errorf("protocol violation: the answer to run %d is a %q frame with a seq of type %T", seq, op, v["seq"])
	}
	return fmt.Errorf("protocol violation: the answer to run %d is a %q frame of run %d", seq, op, got)
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

// partial collects what the streams delivered of a run cut short.
func (c *container) partial(outDone, errDone <-chan struct{}) sandbox.Result {
	// A dead container's pipes end soon; a live one's output so far is all there is.
	waitMarkers(markerGrace/4, nil, outDone, errDone)
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

// result builds a run's Result from the driver's answer and the streams.
func (c *container) result(v map[string]any, outDone, errDone <-chan struct{}) sandbox.Result {
	waitMarkers(markerGrace, c.exited, outDone, errDone)
	var res sandbox.Result
	var t1, t2 bool
	res.Stdout, t1 = c.stdout.end()
	res.Stderr, t2 = c.stderr.end()
	limit := c.l.cfg.OutputLimit
	var t3 bool
	if s, ok := v["value"].(string); ok {
		res.Value, t3 = cutText([]byte(s), 0, limit+len(truncationNote(1<<62)))
	}
	if e, ok := v["error"].(map[string]any); ok {
		str := func(k string) string {
			s, _ := e[k].(string)
			out, _ := cutText([]byte(s), 0, limit+len(truncationNote(1<<62)))
			return out
		}
		res.Error = &sandbox.Error{Name: str("name"), Value: str("value"), Traceback: str("traceback")}
	}
	imgBytes := 0
	if imgs, ok := v["images"].([]any); ok {
		for _, im := range imgs {
			b, ok := im.([]byte)
			if !ok || len(b) == 0 {
				continue
			}
			if imgBytes+len(b) > limit {
				t3 = true
				continue
			}
			imgBytes += len(b)
			res.Images = append(res.Images, sandbox.Image{PNG: b})
		}
	}
	if files, ok := v["files"].([]any); ok {
		for _, f := range files {
			pair, ok := f.([]any)
			if !ok || len(pair) != 2 {
				continue
			}
			p, _ := pair[0].(string)
			n, _ := pair[1].(int64)
			if p == "" {
				continue
			}
			res.Files = append(res.Files, sandbox.File{Path: mapPath(p, c.hostDir), Size: n})
		}
	}
	tr, _ := v["truncated"].(bool)
	res.Truncated = t1 || t2 || t3 || tr
	return res
}

// Delete kills the container and waits for its process and goroutines (bounded by ctx). It is
// idempotent and safe to call concurrently with Run, which then fails with
// [sandbox.ErrClosed], and with itself.
func (c *container) Delete(ctx context.Context) error {
	c.deleteOnce.Do(func() {
		close(c.deleted)
		close(c.stop)
		c.kill()
	})
	select {
	case <-c.exited:
	case <-ctx.Done():
		return fmt.Errorf("delete container: %w", ctx.Err())
	}
	c.cleanupOnce.Do(func() { c.cleanupErr = c.cleanup(ctx) })
	return c.cleanupErr
}

// cleanup releases what a dead container holds; it runs once.
func (c *container) cleanup(ctx context.Context) error {
	// The process is gone; its pipes may still be held by a process that escaped (only
	// possible without isolation): closing our ends stops the readers regardless.
	c.closeParentFiles()
	c.wg.Wait() // the readers end at their closed files, the frame reader at stop
	if err := c.waitInitGone(ctx); err != nil {
		return fmt.Errorf("delete container: %w", err)
	}
	c.initMu.Lock()
	initKnown := c.initFD >= 0 // its end was waited for above
	if c.initFD >= 0 {
		unix.Close(c.initFD)
		c.initFD = -1
	}
	c.initMu.Unlock()
	var err error
	cgEmpty := false // a cgroup removes only once no process is left in it
	if c.cg != nil {
		if rerr := c.cg.remove(); rerr != nil {
			err = fmt.Errorf("delete container: %w", rerr)
		} else {
			cgEmpty = true
		}
	}
	if initKnown || cgEmpty {
		c.giveUID()
	} else if c.uid >= 0 {
		// A process of the container may still hold the uid: another tenant must not get it.
		c.log.Warn("container uid not reused: its processes could not be seen to end", zap.Int("uid", c.uid))
	}
	c.l.untrack(c)
	if c.hostDir != "" {
		if rerr := os.RemoveAll(c.hostDir); rerr != nil && err == nil {
			err = fmt.Errorf("delete container: %w", rerr)
		}
	}
	return err
}

// giveUID returns the container's uid to the pool: its processes are gone.
func (c *container) giveUID() {
	if c.uid >= 0 {
		c.l.uids.give(c.uid)
		c.uid = -1
	}
}

func (c *container) closeParentFiles() {
	c.closeFiles.Do(func() {
		for _, f := range []*os.File{c.ctlW, c.ctlR, c.intrW, c.outR, c.errR} {
			if f != nil {
				f.Close()
			}
		}
	})
}

// randomUint32 returns a random number.
func randomUint32() uint32 {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return binary.BigEndian.Uint32(b[:])
}

// randomHex returns n random bytes in hex.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b)
}
