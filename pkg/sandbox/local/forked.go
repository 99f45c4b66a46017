package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/codeinterp/codeinterp/pkg/sandbox"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// startForked starts a container forked from the template, with its reader goroutines; it does
// not wait for the driver. The caller counts the start (l.starts). An error matching
// errTemplateUnavailable means no process was started.
func (l *Local) startForked(memBytes int64, env map[string]string) (_ *container, err error) {
	c := l.newContainer()
	c.env = env
	c.mode = StartFork
	c.cancel = func() {}
	var child []*os.File // the container's ends, and the cgroup.procs files it moves itself with
	started := false
	var hurried chan struct{}
	defer func() {
		for _, f := range child {
			f.Close()
		}
		if hurried != nil {
			<-hurried
		}
		if err != nil && !started {
			c.releaseUnstarted()
		}
	}()
	if _, err := c.takeUID(); err != nil {
		return nil, err
	}
	var ctlInR, ctlOutW, intrR, outW, errW, lifeR *os.File
	for _, p := range []struct{ r, w **os.File }{
		{&ctlInR, &c.ctlW}, {&c.ctlR, &ctlOutW}, {&intrR, &c.intrW}, {&c.outR, &outW}, {&c.errR, &errW},
		{&lifeR, &c.lifeW},
	} {
		if *p.r, *p.w, err = pipe(); err != nil {
			return nil, err
		}
	}
	child = []*os.File{outW, errW, ctlInR, ctlOutW, intrR, lifeR}
	var procs []*os.File // the cgroup.procs files, after child's pipes in the request
	if l.cgroups != nil {
		memMax, pidsMax := l.cgroupLimits(memBytes)
		if c.cg, err = l.cgroups.create(c.name, memMax, pidsMax, l.cfg.CPUQuota); err != nil {
			return nil, fmt.Errorf("%w: %w", sandbox.ErrUnavailable, err)
		}
		if procs, err = c.cg.procsFiles(); err != nil {
			return nil, fmt.Errorf("%w: %w", sandbox.ErrUnavailable, err)
		}
		child = append(child, procs...)
		// The driver's move into the cgroup waits for an RCU grace period (see
		// hurryCgroupMove): it starts now, while the template forks.
		hurried = make(chan struct{})
		go func() { // owned: startForked waits for hurried
			defer close(hurried)
			hurryCgroupMove(c.cg.dirs[0])
		}()
	}
	req := forkRequest{cgroups: len(procs), driver: l.driverConfig(memBytes, dataDir)}
	req.driver.env = env
	pids, err := l.tpl.fork(req, c.uid, child)
	if errors.Is(err, errForkLost) && c.uid >= 0 {
		// A container may have been forked as this uid: it ends with its lifeline, closed on
		// release, but the uid is not given to another container.
		l.log.Warn("container uid not reused: a fork for it may have happened", zap.Int("uid", c.uid))
		c.uid = -1
	}
	if err != nil {
		if !errors.Is(err, errTemplateUnavailable) && !errors.Is(err, sandbox.ErrUnavailable) {
			err = fmt.Errorf("%w: %w", sandbox.ErrUnavailable, err)
		}
		return nil, err
	}
	for _, f := range child {
		f.Close()
	}
	child = nil
	c.initMu.Lock()
	c.initFD = pids.init
	c.initMu.Unlock()
	started = true
	l.track(c)
	c.initPID, err = pidOfPidfd(pids.init)
	if err == nil {
		c.driverPID, err = pidOfPidfd(pids.driver)
	}
	c.goTracked(func() { c.awaitForked(pids.driver) })
	if err != nil {
		c.kill()
		_ = c.Delete(context.Background())
		return nil, fmt.Errorf("%w: %w", sandbox.ErrUnavailable, err)
	}
	c.goTracked(func() { c.stdout.readFrom(c.outR) })
	c.goTracked(func() { c.stderr.readFrom(c.errR) })
	c.goTracked(c.readFrames)
	return c, nil
}

// awaitForked ends a forked container with its driver (whose pidfd it takes): once the driver
// has exited it kills the init, which ends the container's PID namespace, and waits for the
// init, which exits only once every process of the namespace is gone.
func (c *container) awaitForked(driverFD int) {
	waitProcess(driverFD)
	unix.Close(driverFD)
	c.kill()
	c.initMu.Lock()
	fd := c.initFD // closed by cleanup, which waits for exited
	c.initMu.Unlock()
	waitProcess(fd)
	c.waitErr = errors.New("the container's driver exited")
	close(c.exited)
}

// waitProcess waits until the process of pidfd fd has exited, through the runtime's poller
// where it can.
func waitProcess(fd int) {
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		_ = waitExited(context.Background(), fd)
		return
	}
	if err := unix.SetNonblock(dup, true); err != nil {
		unix.Close(dup)
		_ = waitExited(context.Background(), fd)
		return
	}
	f := os.NewFile(uintptr(dup), "pidfd")
	waitPidfd(f)
	f.Close()
}

// hurryCgroupMove starts the RCU grace period that the next move of a process into a cgroup
// waits for, and returns once it has passed (a few milliseconds); dir is a container's cgroup
// directory.
//
// The kernel guards moves between cgroups with a per-cpu read-write semaphore that fork and
// exit take for reading; a writer waits for an RCU grace period first, unless another writer
// came within the last one. So this process moves itself into the cgroup it is already in,
// the parent of the Local's own directory above dir (a move that changes nothing, but takes
// the semaphore): the container's move that follows waits only for what is left of that grace
// period. Where the server is not in that cgroup (an explicit cgroup v2 parent), nothing is
// written; errors are ignored: the container's move then waits for the whole grace period.
func hurryCgroupMove(dir string) {
	own := filepath.Dir(filepath.Dir(dir))
	self, mounts, err := readCgroupInfo()
	if err != nil {
		return
	}
	mine := false
	for ctrl, mnt := range mounts.v1 {
		mine = mine || (self[ctrl] != "" && filepath.Join(mnt, self[ctrl]) == own)
	}
	if mounts.v2 != "" && self[""] != "" && filepath.Join(mounts.v2, self[""]) == own {
		mine = true
	}
	if mine {
		_ = os.WriteFile(own+"/cgroup.procs", []byte(strconv.Itoa(os.Getpid())), 0)
	}
}

// waitPidfd waits until the process of the non-blocking pidfd f has exited, through the
// runtime's poller (a pidfd polls readable once its process has exited).
func waitPidfd(f *os.File) {
	rc, err := f.SyscallConn()
	if err != nil {
		_ = waitExited(context.Background(), int(f.Fd()))
		return
	}
	err = rc.Read(func(fd uintptr) bool {
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 0)
		return err == nil && n > 0
	})
	if err != nil {
		_ = waitExited(context.Background(), int(f.Fd()))
	}
}
