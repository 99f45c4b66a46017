package local

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/codeinterp/codeinterp/pkg/egress"
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
	hostDir string            // the data directory on the host, without isolation only
	mode    string            // how it started: StartFork or StartExec
	env     map[string]string // variables the driver adds for the code (the proxy's); nil for none
	// egressMu guards egress: the container's proxy, its only way out, when its Spec has a
	// network policy; nil for none. Delete closes it.
	egressMu sync.Mutex
	egress   *egress.Proxy
	cancel   context.CancelFunc
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
	paused      *cell      // guarded by runMu: the run paused for tool calls, nil when none
	pausedCalls int        // guarded by runMu: how many calls it is paused for

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

// start launches the process and its reader goroutines; it does not wait for the driver. It
// fails with [sandbox.ErrClosed] after Close, which waits for the starts in progress.
func (l *Local) start(memBytes int64, env map[string]string, skills *sandbox.SkillFiles) (_ *container, err error) {
	if err := l.beginStart(); err != nil {
		return nil, err
	}
	defer l.starts.Done()
	if l.tpl != nil && skills == nil { // skills.go: a container with skills starts the exec way
		c, err := l.startForked(memBytes, env)
		if !errors.Is(err, errTemplateUnavailable) {
			return c, err
		}
		l.metrics.fallbacks.Inc()
		l.log.Info("container starts the exec way: the fork template is unavailable", zap.Error(err))
	}
	c := l.newContainer()
	c.env = env
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
	bw, err := c.addSkills(&files, skills)
	if err != nil {
		return nil, err
	}
	dir, err := c.makeDataDir()
	if err != nil {
		return nil, err
	}
	cmd, err := c.command(memBytes, dir, runAs, &files, bw)
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
		mode:    StartExec,
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
// driver, under bubblewrap (with the arguments bw, nil for the Local's own) unless isolation is
// off, with its data directory dir. The process lives until Delete, not as long as any
// request: its context is the container's own.
func (c *container) command(memBytes int64, dir string, runAs int, f *startFiles, bw []string) (*exec.Cmd, error) {
	l := c.l
	cfgHex, err := l.driverArg(memBytes, dir, c.env)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", sandbox.ErrUnavailable, err)
	}
	path, args := l.commandArgs(cfgHex, bw)
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

// waitReady waits for the driver's first answer.
func (c *container) waitReady(ctx context.Context) error {
	select {
	case f := <-c.frames:
		if f.err != nil {
			return fmt.Errorf("driver did not start: %w%s", f.err, c.startOutput())
		}
		ready, ok := f.a.(readyAnswer)
		if !ok {
			return errors.New("driver sent a result before ready")
		}
		c.log.Debug("container ready", zap.Any("preloaded", ready.preloaded))
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

// StartMode returns how the container started: StartFork (forked from the template) or
// StartExec (a new bubblewrap and interpreter, also a fork mode's fallback).
func (c *container) StartMode() string { return c.mode }

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

// Delete kills the container and waits for its process and goroutines (bounded by ctx). It is
// idempotent and safe to call concurrently with Run, which then fails with
// [sandbox.ErrClosed], and with itself.
func (c *container) Delete(ctx context.Context) error {
	c.deleteOnce.Do(func() {
		close(c.deleted)
		close(c.stop)
		c.egressMu.Lock()
		if c.egress != nil {
			_ = c.egress.Close() // its Serve goroutine, tracked in wg, returns
		}
		c.egressMu.Unlock()
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
