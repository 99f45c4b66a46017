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
	// fileUID is the host uid (and gid) that owns the files the server writes into it, set
	// before it starts: its own uid, or -1 where the server's own uid is the code's.
	fileUID int
	// initPID is the host pid of the container's init (0 without isolation); procs, its init,
	// driver and PID namespace, noted once the driver is ready (init 0 when they could not be).
	initPID int
	// driverPID is the host pid of a forked container's driver, which is not its init's child
	// (0 for the others: their driver is found as the init's only child).
	driverPID int
	procs     nsProcs

	ctlW  *os.File // requests to the driver (its fd 3)
	ctlR  *os.File // answers from the driver (its fd 4)
	intrW *os.File // interrupts to the driver (its fd 5)
	lifeW *os.File // forked containers: its init ends when this closes (given up, or the server died); else nil
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

	// openMu guards held: the files open on the container's tmpfs (readers OpenFile handed
	// out, writes in progress), which Delete closes.
	openMu sync.Mutex
	held   map[*os.File]struct{}

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
	if l.tpl != nil {
		c, err := l.startForked(memBytes)
		if !errors.Is(err, errTemplateUnavailable) {
			return c, err
		}
		l.metrics.fallbacks.Inc()
		l.log.Info("container starts the exec way: the fork template is unavailable", zap.Error(err))
	}
	c := l.newContainer()
	var files startFiles
	started := false // the process started: Delete releases what the container holds
	defer func() {
		files.close()
		if err != nil && !started {
			c.releaseUnstarted()
		}
	}()
	runAs, err := c.takeUID()
	if err != nil {
		return nil, err
	}
	if err := c.openFiles(&files, memBytes); err != nil {
		return nil, err
	}
	dir, err := c.makeDataDir()
	if err != nil {
		return nil, err
	}
	cmd, err := c.command(memBytes, dir, runAs, &files)
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		c.cancel()
		return nil, fmt.Errorf("%w: start %s: %w", sandbox.ErrUnavailable, cmd.Path, err)
	}
	started = true
	l.track(c)
	files.closeChildEnds()
	if files.infoR != nil {
		c.initPID = c.openInit(files.infoR)
	}
	if c.cg != nil {
		if err := c.enterCgroup(files.blockW); err != nil {
			c.abortStarted()
			return nil, fmt.Errorf("%w: %w", sandbox.ErrUnavailable, err)
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

// newContainer returns a container not yet started, with a random name.
func (l *Local) newContainer() *container {
	name := randomHex(8)
	return &container{
		l:       l,
		log:     l.log.With(zap.String("container", name)),
		name:    name,
		initFD:  -1,
		uid:     -1,
		fileUID: -1,
		stdout:  newCapture(l.cfg.OutputLimit),
		stderr:  newCapture(l.cfg.OutputLimit),
		frames:  make(chan frameMsg),
		exited:  make(chan struct{}),
		stop:    make(chan struct{}),
		deleted: make(chan struct{}),
	}
}

// releaseUnstarted releases what a container whose process never started holds: its ends of
// the pipes, its data directory, cgroup and uid.
func (c *container) releaseUnstarted() {
	c.closeParentFiles()
	if c.hostDir != "" {
		os.RemoveAll(c.hostDir)
	}
	if c.cg != nil {
		_ = c.cg.remove()
	}
	c.giveUID()
}

// abortStarted kills a container whose process started but whose start then failed, and
// releases what it holds.
func (c *container) abortStarted() {
	c.kill()
	c.goTracked(func() { _ = c.cmd.Wait(); close(c.exited) })
	_ = c.Delete(context.Background())
}

// takeUID gives the container a host uid of its own when the server is root and containers
// are isolated, and returns the uid its process starts as.
func (c *container) takeUID() (int, error) {
	if !c.l.setUID || !c.l.isolated() {
		return os.Geteuid(), nil
	}
	uid, err := c.l.uids.take()
	if err != nil {
		return 0, err
	}
	c.uid = uid
	c.fileUID = uid
	return uid, nil
}

// startFiles are the descriptors of one start: the child's ends, which the process inherits
// (ExtraFiles from fd 3 on, and its stdout and stderr), and this process's ends of bubblewrap's
// info and block pipes, used until the container is in its cgroup. The container's own ends
// of the protocol pipes and streams are its fields.
type startFiles struct {
	child          []*os.File // closed once the process has started
	extra          []*os.File // the child's fds 3 on; nil entries stay closed
	stdout, stderr *os.File
	infoR          *os.File // bubblewrap's --info-fd report; nil without isolation
	blockW         *os.File // releases bubblewrap's --block-fd; nil without cgroups
}

// closeChildEnds closes the child's ends, which the process holds once it has started.
func (f *startFiles) closeChildEnds() {
	for _, fh := range f.child {
		fh.Close()
	}
	f.child = nil
}

// close closes every descriptor of the start still open.
func (f *startFiles) close() {
	f.closeChildEnds()
	for _, fh := range []*os.File{f.infoR, f.blockW} {
		if fh != nil {
			fh.Close()
		}
	}
	f.infoR, f.blockW = nil, nil
}

// pipe returns a new pipe, its failure an ErrUnavailable.
func pipe() (r, w *os.File, err error) {
	r, w, err = os.Pipe()
	if err != nil {
		return nil, nil, fmt.Errorf("%w: pipe: %w", sandbox.ErrUnavailable, err)
	}
	return r, w, nil
}

// openFiles opens the container's descriptors into f: the protocol pipes (the child's fds 3-5)
// and standard streams, and under isolation the seccomp filter (fd 6), bubblewrap's info pipe
// (fd 7), its block pipe (fd 8) with the cgroup it waits to be put in, and the shared files
// (fd 9 on). What it opened before failing is in f (and the container) to be closed.
func (c *container) openFiles(f *startFiles, memBytes int64) error {
	l := c.l
	var ctlInR, ctlOutW, intrR *os.File
	var err error
	if ctlInR, c.ctlW, err = pipe(); err != nil {
		return err
	}
	f.child = append(f.child, ctlInR)
	if c.ctlR, ctlOutW, err = pipe(); err != nil {
		return err
	}
	f.child = append(f.child, ctlOutW)
	if intrR, c.intrW, err = pipe(); err != nil {
		return err
	}
	f.child = append(f.child, intrR)
	if c.outR, f.stdout, err = pipe(); err != nil {
		return err
	}
	f.child = append(f.child, f.stdout)
	if c.errR, f.stderr, err = pipe(); err != nil {
		return err
	}
	f.child = append(f.child, f.stderr)
	f.extra = []*os.File{ctlInR, ctlOutW, intrR}
	if !l.isolated() {
		return nil
	}
	var sp *os.File // fd 6: the seccomp filter
	if l.seccomp != nil {
		if sp, err = l.seccompPipe(); err != nil {
			return fmt.Errorf("%w: %w", sandbox.ErrUnavailable, err)
		}
		f.child = append(f.child, sp)
	}
	var infoW *os.File // fd 7: bubblewrap's --info-fd
	if f.infoR, infoW, err = pipe(); err != nil {
		return err
	}
	f.child = append(f.child, infoW)
	f.extra = append(f.extra, sp, infoW)
	var blockR *os.File // fd 8: bubblewrap's --block-fd
	if l.cgroups != nil {
		if blockR, f.blockW, err = pipe(); err != nil {
			return err
		}
		f.child = append(f.child, blockR)
		memMax, pidsMax := l.cgroupLimits(memBytes)
		if c.cg, err = l.cgroups.create(c.name, memMax, pidsMax, l.cfg.CPUQuota); err != nil {
			return fmt.Errorf("%w: %w", sandbox.ErrUnavailable, err)
		}
	}
	f.extra = append(f.extra, blockR) // nil without cgroups: fd 8 stays closed
	shared, err := l.openShared()     // fd 9 on
	if err != nil {
		return fmt.Errorf("%w: %w", sandbox.ErrUnavailable, err)
	}
	f.child = append(f.child, shared...)
	f.extra = append(f.extra, shared...)
	return nil
}

// makeDataDir returns the data directory as the driver sees it: /mnt/data in the sandbox, or
// without isolation a new host directory of the container's own.
func (c *container) makeDataDir() (string, error) {
	if c.l.isolated() {
		return dataDir, nil
	}
	c.hostDir = c.l.hostDataDir(c.name)
	if err := os.MkdirAll(c.hostDir, 0o700); err != nil {
		return "", fmt.Errorf("%w: make data dir: %w", sandbox.ErrUnavailable, err)
	}
	return c.hostDir, nil
}

// command builds the container's process, started as runAs with the descriptors of f: the
// driver, under bubblewrap unless isolation is off, with its data directory dir. The process
// lives until Delete, not as long as any request: its context is the container's own.
func (c *container) command(memBytes int64, dir string, runAs int, f *startFiles) (*exec.Cmd, error) {
	l := c.l
	cfgHex, err := l.driverConfig(memBytes, dir)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", sandbox.ErrUnavailable, err)
	}
	path, args := l.commandArgs(cfgHex)
	life, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	cmd := exec.CommandContext(life, path, args...)
	cmd.Stdin = nil // /dev/null
	cmd.Stdout, cmd.Stderr = f.stdout, f.stderr
	cmd.ExtraFiles = f.extra
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
	return cmd, nil
}

// enterCgroup puts the started container in its cgroup and lets it go on: bubblewrap's
// monitor and the sandbox's init are the only processes so far, and the init waits on the
// block pipe (blockW's other end) before it starts anything.
func (c *container) enterCgroup(blockW *os.File) error {
	if err := c.cg.add(c.cmd.Process.Pid); err != nil {
		return err
	}
	if c.initPID <= 0 {
		return errors.New("no pid for the sandbox's init")
	}
	if err := c.cg.add(c.initPID); err != nil {
		return err
	}
	if _, err := blockW.Write([]byte{1}); err != nil {
		return fmt.Errorf("release the sandbox: %w", err)
	}
	return nil
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
			procs, err := findProcs(c.initPID, c.driverPID)
			if err != nil {
				c.log.Warn("background processes of this container will not be stopped", zap.Error(err))
			} else {
				if c.cg != nil && len(c.cg.dirs) > 0 {
					procs.cgroup = c.cg.dirs[0]
				}
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
	req := map[string]any{"op": "run", "seq": int64(r.seq), "code": code, "marker": r.marker}
	if c.killedSince {
		req["reap"] = true // the driver reaps its children killed after the last run
		c.killedSince = false
	}
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
	if f.err == nil {
		f.err = checkAnswer(f.v, r.seq)
	}
	if f.err != nil {
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
		return res, fmt.Errorf("%w: %w", sandbox.ErrLost, f.err)
	}
	res := c.result(f.v, r)
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

// result builds run r's Result from the driver's answer v and the streams.
func (c *container) result(v map[string]any, r cell) sandbox.Result {
	waitMarkers(markerGrace, c.exited, r.outDone, r.errDone)
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
	omitted, _ := v["files_omitted"].(int64)
	reportFiles(&res, v["files"], omitted, c.hostDir)
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
		c.closeHeld()
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
		for _, f := range []*os.File{c.ctlW, c.ctlR, c.intrW, c.outR, c.errR, c.lifeW} {
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
