package local

// The fork start mode (Config.Start "fork"): a template process (template.py) that has run the
// driver's definitions and imported the preloaded libraries once forks each container's
// driver, which then isolates itself before any of the caller's code runs. A container so
// started costs one fork and a few system calls instead of a fresh interpreter and its imports,
// and shares the template's pages copy on write. Its init, the other process of a container (pid
// 1 of its PID namespace, with its mount, network, IPC and UTS namespaces and file systems), is
// not forked from the template: a small process beside it makes the next container's init while
// the template forks the current one (template.py has the whole sequence).
//
// The template runs under bubblewrap as the server's root, with its capabilities, in a PID
// namespace of its own (its first child, the keeper, forks the template again when it dies), no
// network and a read-only system; it never runs any of the caller's code. Each container's
// processes drop to a host uid of their own before it runs any, and create their user
// namespaces as that uid. A user namespace of the template's own, owned by one host uid, would
// have been the parent of every container's: the kernel charges per-user counts (inotify
// instances, pending signals, message queues) at each level of the user namespace tree, so
// every container would have shared that uid's counts — one container could then exhaust them
// for all.

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/codeinterp/codeinterp/pkg/sandbox"
)

//go:embed template.py
var templateSource string

// Start modes of Config.Start.
const (
	StartExec = "exec" // each container is a new bubblewrap and interpreter
	StartFork = "fork" // each container is forked from a template, where the host allows it
)

// templateBootstrap is the template's command: it compiles and runs template.py (argv[1]).
const templateBootstrap = "import sys;exec(compile(bytes.fromhex(sys.argv[1]).decode(),'<codeinterp-template>','exec'))"

// errTemplateUnavailable marks a fork that did not happen because the template is not there
// (starting again, dead, or closed): the container is then started the exec way.
var errTemplateUnavailable = errors.New("fork template unavailable")

// errForkLost marks a fork request given up on without knowing whether a container was forked
// for it: its lifeline is closed, which ends any, but its uid is not given to another.
var errForkLost = errors.New("the fork's outcome is unknown")

// Timeouts of the template.
const (
	templateReadyTimeout = 2 * time.Minute // a template's start, imports included
	templateForkTimeout  = 10 * time.Second
	// templateInitWait is how long the template waits for an init before it gives a fork up
	// (less than templateForkTimeout; passed to template.py).
	templateInitWait    = 5 * time.Second
	templateStopTimeout = 5 * time.Second
	// A template is replaced after this many forks or this long: every container of one
	// template has its address layout (libraries, heap, stack canary, pointer guard) and
	// str hash secret, which one that learns them knows for all; rotation bounds how many.
	templateMaxForks = 1000
	templateMaxAge   = time.Hour
)

// forkTemplate is a Local's template. Safe for concurrent use; forks are serialized (the
// template forks one container at a time anyway).
type forkTemplate struct {
	l   *Local
	log *zap.Logger

	// mu guards the fields below, and the socket of gen: one request and its answer at a time.
	mu       sync.Mutex
	gen      *templateGen // nil while none runs
	relaunch bool         // a relaunch goroutine runs
	closed   bool
	nextID   int64

	maxForks int           // forks after which the template is replaced
	maxAge   time.Duration // age after which it is replaced
	rotating bool          // the relaunch in progress replaces a live template

	done      chan struct{} // closed by close
	restarts  atomic.Int64  // templates started again after one died
	rotations atomic.Int64  // templates replaced after maxForks or maxAge
	wg        sync.WaitGroup
}

// templateGen is one bubblewrap running a keeper and template.
type templateGen struct {
	cmd   *exec.Cmd
	sock  int // this process's end of the SOCK_SEQPACKET socket
	ready bool
	pid   int // host pid of the template process, 0 if unknown
	forks int // containers forked, guarded by the template's mu
	// started is when it started.
	started time.Time
	// initFD is a pidfd of bubblewrap's init (pid 1 of the template's PID namespace), or -1:
	// when the server is PID 1 it reaps the init, which outlives bubblewrap's monitor.
	initFD  int
	exited  chan struct{} // closed when bubblewrap has been waited for
	waitErr error         // valid once exited is closed
}

// startTemplate starts the template and proves it by forking one container that runs
// print(1). Its error says why the host does not allow the fork mode.
func (l *Local) startTemplate() (*forkTemplate, error) {
	if !l.isolated() {
		return nil, errors.New("containers are not isolated")
	}
	if !l.setUID {
		return nil, errors.New("the server is not root: the template could not make each container a uid of its own")
	}
	if b, err := os.ReadFile("/proc/sys/user/max_user_namespaces"); err == nil && strings.TrimSpace(string(b)) == "0" {
		return nil, errors.New("user namespaces are disabled (user.max_user_namespaces is 0)")
	}
	t := &forkTemplate{l: l, log: l.log.Named("template"), maxForks: templateMaxForks, maxAge: templateMaxAge,
		done: make(chan struct{})}
	gen, err := t.launch()
	if err != nil {
		return nil, err
	}
	t.gen = gen
	l.tpl = t
	if err := t.selfTest(); err != nil {
		l.tpl = nil
		t.close()
		return nil, fmt.Errorf("test container: %w", err)
	}
	return t, nil
}

// selfTest forks one container and checks that it runs code isolated as it should.
func (t *forkTemplate) selfTest() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	mem, err := sandbox.ParseMemory(t.l.cfg.DefaultMemoryLimit) // New checked it
	if err != nil {
		return err
	}
	c, err := t.l.startForked(mem, nil)
	if err != nil {
		return err
	}
	defer c.Delete(context.Background())
	if err := c.waitReady(ctx); err != nil {
		return err
	}
	res, err := c.Run(ctx, forkSelfTest)
	if err != nil {
		return err
	}
	if got := strings.TrimSpace(res.Stdout); got != "ok" {
		return fmt.Errorf("the test container says %q%s", got, res.Stderr)
	}
	return nil
}

// forkSelfTest checks, in a forked container, what the sequence must have given it.
const forkSelfTest = `import os, socket
st = open('/proc/self/status').read()
f = dict(l.split(':\t', 1) for l in st.splitlines() if ':\t' in l)
bad = []
if os.getuid() != 1000 or os.getgid() != 1000: bad.append('uid')
if f['CapEff'].strip('0\n ') or f['CapBnd'].strip('0\n '): bad.append('caps')
if f.get('Seccomp', '').strip() != '2': bad.append('seccomp')
if f.get('NoNewPrivs', '').strip() != '1': bad.append('no_new_privs')
if os.getpid() != 2: bad.append('pid')
if socket.gethostname() != 'sandbox': bad.append('hostname')
print('ok' if not bad else ' '.join(bad))`

// launch starts a bubblewrap with the keeper and template and waits until the template is
// ready.
func (t *forkTemplate) launch() (_ *templateGen, err error) {
	l := t.l
	gen := &templateGen{sock: -1, initFD: -1, exited: make(chan struct{}), started: time.Now()}
	defer func() {
		if err != nil {
			gen.stop(t.log)
		}
	}()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("template socket: %w", err)
	}
	gen.sock = fds[0]
	theirs := os.NewFile(uintptr(fds[1]), "template-socket")
	defer theirs.Close()
	shared, err := l.openShared()
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, f := range shared {
			f.Close()
		}
	}()
	driver, err := hex.DecodeString(l.driverCode)
	if err != nil {
		return nil, fmt.Errorf("start the template: %w", err)
	}
	cfg, err := marshalEncode(templateConfig{
		driver: driver, seccomp: l.seccomp, preload: l.cfg.Preload, layout: l.layout(), makerWait: templateInitWait.Seconds(),
	}.encode())
	if err != nil {
		return nil, fmt.Errorf("start the template: %w", err)
	}
	args := slices.Concat(l.templateArgs(), []string{"--", l.python, "-E", "-s", "-c", templateBootstrap,
		hex.EncodeToString([]byte(templateSource)), hex.EncodeToString(cfg)})
	cmd := exec.Command(l.bwrap, args...)
	cmd.Env = []string{}
	cmd.Dir = "/"
	infoR, infoW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("start the template: %w", err)
	}
	defer infoR.Close()
	defer infoW.Close()
	// fd 3 the socket, 4 bubblewrap's --info-fd, the shared files from fd 5.
	cmd.ExtraFiles = append([]*os.File{theirs, infoW}, shared...)
	stderr := &limitedBuffer{n: 8 << 10}
	cmd.Stderr = stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the template: %w", err)
	}
	gen.cmd = cmd
	go func() { // owned by gen: stop waits for exited
		gen.waitErr = cmd.Wait()
		close(gen.exited)
	}()
	theirs.Close()
	infoW.Close()
	if _, gen.initFD, err = openInit(infoR); err != nil {
		t.log.Warn("the template's init will not be reaped", zap.Error(err))
	}
	msg, rights, err := gen.recv(templateReadyTimeout, gen.exited)
	if err != nil {
		select { // what it wrote, complete once it has exited
		case <-gen.exited:
		case <-time.After(time.Second):
		}
		return nil, fmt.Errorf("start the template: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	defer closeAll(rights)
	if msg.op != templateReady {
		return nil, fmt.Errorf("start the template: it sent %q before ready", msg.op)
	}
	gen.ready = true
	if len(rights) == 1 {
		gen.pid, _ = pidOfPidfd(rights[0])
	}
	return gen, nil
}

// templateArgs are bubblewrap's arguments for the template: those of a container but for its
// user namespace and uid (each container makes its own), capabilities (the template keeps the
// server's to set each container up), seccomp (each container installs it) and /proc/1 (each
// container mounts a proc of its own); /mnt/data and /dev/shm are only mount points.
func (l *Local) templateArgs() []string {
	a := []string{
		"--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
		"--die-with-parent", "--new-session", "--cap-add", "ALL",
		"--hostname", sandboxName, "--clearenv", "--info-fd", "4",
	}
	// bubblewrap makes the parents of what it mounts 0700: the containers' uids must read them.
	a = append(a, "--perms", "0755", "--dir", "/etc", "--perms", "0755", "--dir", "/mnt")
	a = append(a, l.systemArgs()...)
	// The template's /tmp is writable, as a container's, for what the imports write there
	// (matplotlib's configuration directory); each container mounts its own over it.
	a = append(a, "--proc", "/proc", "--dev", "/dev", "--dir", "/dev/shm", "--dir", dataDir,
		"--size", strconv.FormatInt(l.cfg.TmpBytes, 10), "--tmpfs", "/tmp")
	for i, f := range l.shared {
		a = append(a, "--perms", "0444", "--file", strconv.Itoa(5+i), f.dest)
	}
	return append(a, "--chdir", "/", "--remount-ro", "/dev", "--remount-ro", "/")
}

// limitedBuffer keeps the first n bytes written to it. Safe for concurrent use.
type limitedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
	n  int
}

func (w *limitedBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

func (w *limitedBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if room := w.n - w.b.Len(); room > 0 {
		w.b.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

// recv reads one message from the template (with the descriptors it carries), waiting at most
// d, or until exited is closed.
func (g *templateGen) recv(d time.Duration, exited <-chan struct{}) (templateAnswer, []int, error) {
	deadline := time.Now().Add(d)
	buf := make([]byte, 64<<10)
	oob := make([]byte, unix.CmsgSpace(8*4))
	for {
		fds := []unix.PollFd{{Fd: int32(g.sock), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, int(min(50*time.Millisecond, max(0, time.Until(deadline)))/time.Millisecond))
		if err != nil && !errors.Is(err, unix.EINTR) {
			return templateAnswer{}, nil, fmt.Errorf("poll the template: %w", err)
		}
		if n == 0 {
			select {
			case <-exited:
				return templateAnswer{}, nil, errors.New("the template exited")
			default:
			}
			if time.Now().After(deadline) {
				return templateAnswer{}, nil, errors.New("the template did not answer in time")
			}
			continue
		}
		m, oobn, _, _, err := unix.Recvmsg(g.sock, buf, oob, unix.MSG_DONTWAIT|unix.MSG_CMSG_CLOEXEC)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return templateAnswer{}, nil, fmt.Errorf("read from the template: %w", err)
		}
		if m == 0 && oobn == 0 {
			return templateAnswer{}, nil, errors.New("the template closed its socket")
		}
		var rights []int
		if oobn > 0 {
			msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
			if err == nil {
				for _, cm := range msgs {
					if r, err := unix.ParseUnixRights(&cm); err == nil {
						rights = append(rights, r...)
					}
				}
			}
		}
		v, err := marshalDecode(buf[:m])
		msg, ok := v.(map[string]any)
		if err != nil || !ok {
			closeAll(rights)
			return templateAnswer{}, nil, fmt.Errorf("read from the template: a bad message: %v", err)
		}
		return decodeTemplateAnswer(msg), rights, nil
	}
}

func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// forkedPids are pidfds of a forked container's init and driver.
type forkedPids struct{ init, driver int }

// fork asks the template for a container of host uid hostUID: req, with files (the container's
// ends of its pipes and its cgroup.procs files). It returns pidfds of the container's init and
// driver. An error matching errTemplateUnavailable means the template is not there: the caller
// starts the container the exec way. No pidfd is returned with an error.
func (t *forkTemplate) fork(req forkRequest, hostUID int, files []*os.File) (forkedPids, error) {
	none := forkedPids{-1, -1}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return none, fmt.Errorf("%w: closed", errTemplateUnavailable)
	}
	gen := t.gen
	if gen != nil {
		select {
		case <-gen.exited:
			t.log.Warn("the template's bubblewrap exited: starting a new one", zap.Error(gen.waitErr))
			gen.stop(t.log)
			t.gen, gen = nil, nil
		default:
		}
	}
	if gen == nil {
		t.relaunchLocked()
		return none, fmt.Errorf("%w: starting", errTemplateUnavailable)
	}
	// What arrived since the last fork: a template the keeper forked again after one died says
	// ready; answers to requests given up on are stale.
	for {
		msg, rights, err := gen.recv(0, nil)
		if err != nil {
			break
		}
		t.noteLocked(gen, msg, rights)
	}
	if !gen.ready {
		return none, fmt.Errorf("%w: restarting", errTemplateUnavailable)
	}
	t.nextID++
	id := t.nextID
	req.id, req.uid = id, int64(hostUID)
	body, err := marshalEncode(req.encode())
	if err != nil {
		return none, fmt.Errorf("encode fork request: %w", err)
	}
	fds := make([]int, len(files))
	for i, f := range files {
		fds[i] = int(f.Fd())
	}
	if err := unix.Sendmsg(gen.sock, body, unix.UnixRights(fds...), nil, 0); err != nil {
		return none, fmt.Errorf("%w: send fork request: %w", errTemplateUnavailable, err)
	}
	wait := templateForkTimeout
	restarted := false
	for {
		msg, rights, err := gen.recv(wait, gen.exited)
		if err != nil {
			if restarted {
				// The template that had read the request died with it; the one the keeper
				// started since is ready for the next.
				return none, fmt.Errorf("%w: %w: the template died with the request", errTemplateUnavailable, errForkLost)
			}
			// It does not answer: forks go the exec way until a new template replaces it.
			t.log.Warn("the template does not answer: starting a new one", zap.Error(err))
			gen.ready = false
			t.rotating = true
			t.relaunchLocked()
			return none, fmt.Errorf("%w: %w: %w", errTemplateUnavailable, errForkLost, err)
		}
		if msg.op == templateReady {
			// The template died: the one the keeper forked since reads the request if the dead
			// one had not, and answers once it has an init.
			t.noteLocked(gen, msg, rights)
			restarted = true
			wait = templateInitWait + 2*time.Second
			continue
		}
		if msg.id != id {
			discardAnswer(msg, rights) // to a request given up on
			continue
		}
		switch msg.op {
		case templateError:
			// The template could not fork (it runs a thread, a system call failed): the
			// container starts the exec way.
			closeAll(rights)
			return none, fmt.Errorf("%w: fork: %s", errTemplateUnavailable, msg.err)
		case templateForked:
			if len(rights) != 2 {
				// Truncated (this process out of descriptors?): a container may run.
				discardAnswer(msg, rights)
				return none, fmt.Errorf("fork: %w: %d descriptors with the answer, want two pidfds", errForkLost, len(rights))
			}
			gen.forks++
			if gen.forks >= t.maxForks || time.Since(gen.started) >= t.maxAge {
				t.rotating = true
				t.relaunchLocked()
			}
			return forkedPids{init: rights[0], driver: rights[1]}, nil
		default:
			discardAnswer(msg, rights)
			return none, fmt.Errorf("fork: %w: an answer %q", errForkLost, msg.op)
		}
	}
}

// noteLocked takes in a message of gen's template outside a fork's answer: a template ready
// (again), with a pidfd of itself, or a stale answer. t.mu is held.
func (t *forkTemplate) noteLocked(gen *templateGen, msg templateAnswer, rights []int) {
	if msg.op != templateReady {
		discardAnswer(msg, rights)
		return
	}
	defer closeAll(rights)
	// launch took the first ready: this one is from a template the keeper forked again.
	t.restarts.Add(1)
	t.log.Warn("the template died; the keeper started a new one")
	gen.ready = true
	gen.pid = 0
	if len(rights) == 1 {
		gen.pid, _ = pidOfPidfd(rights[0])
	}
}

// discardAnswer closes the descriptors of an answer to a fork request given up on; a container
// forked for it is killed (through its init, which takes its PID namespace with it).
func discardAnswer(msg templateAnswer, rights []int) {
	if msg.op == templateForked && len(rights) > 0 {
		_ = unix.PidfdSendSignal(rights[0], unix.SIGKILL, nil, 0)
	}
	closeAll(rights)
}

// pid returns the host pid of the template process last known ready, or 0.
func (t *forkTemplate) pid() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.gen == nil {
		return 0
	}
	return t.gen.pid
}

// relaunchLocked starts a new bubblewrap and template in the background, unless one is
// starting. t.mu is held.
func (t *forkTemplate) relaunchLocked() {
	if t.relaunch || t.closed {
		return
	}
	t.relaunch = true
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		gen, err := t.launch()
		t.mu.Lock()
		defer t.mu.Unlock()
		t.relaunch = false
		if err != nil {
			t.rotating = false
			t.log.Warn("start a new template (containers start cold meanwhile)", zap.Error(err))
			return
		}
		if t.closed {
			gen.stop(t.log)
			return
		}
		if old := t.gen; old != nil && t.rotating {
			t.rotations.Add(1)
			t.retireLocked(old)
		} else {
			t.restarts.Add(1)
		}
		t.rotating = false
		t.gen = gen
	}()
}

// retireLocked stops old's template from forking (its socket closes, so it exits); its keeper
// and bubblewrap end once the last container forked from it has, and are then waited for.
// t.mu is held.
func (t *forkTemplate) retireLocked(old *templateGen) {
	unix.Close(old.sock)
	old.sock = -1
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		select {
		case <-old.exited:
		case <-t.done: // Local.Close deleted every container: one that does not end is killed
		}
		old.stop(t.log)
	}()
}

// close stops the template and its keeper and waits for them. Containers forked from it have
// been deleted first (Local.Close).
func (t *forkTemplate) close() {
	t.mu.Lock()
	t.closed = true
	gen := t.gen
	t.gen = nil
	t.mu.Unlock()
	close(t.done)
	t.wg.Wait() // a relaunch in progress sees closed and stops what it started
	if gen != nil {
		gen.stop(t.log)
	}
}

// stop closes the socket, which ends the template and then the keeper and bubblewrap, and
// waits for bubblewrap; one that does not end in time is killed, with its process group.
func (g *templateGen) stop(log *zap.Logger) {
	if g.sock >= 0 {
		unix.Close(g.sock)
		g.sock = -1
	}
	if g.cmd == nil {
		return
	}
	select {
	case <-g.exited:
	case <-time.After(templateStopTimeout):
		log.Warn("the template did not stop: killing it")
		_ = syscall.Kill(-g.cmd.Process.Pid, syscall.SIGKILL)
		<-g.exited
	}
	if g.initFD >= 0 {
		// bubblewrap's init ends the template's PID namespace as it exits: nothing of it is left.
		ctx, cancel := context.WithTimeout(context.Background(), templateStopTimeout)
		if err := reapInit(ctx, g.initFD); err != nil {
			log.Warn("the template's init did not end", zap.Error(err))
			_ = unix.PidfdSendSignal(g.initFD, unix.SIGKILL, nil, 0)
		}
		cancel()
		unix.Close(g.initFD)
		g.initFD = -1
	}
}

// pidOfPidfd returns the pid, in this process's PID namespace, of the process of pidfd.
func pidOfPidfd(fd int) (int, error) {
	b, err := os.ReadFile("/proc/self/fdinfo/" + strconv.Itoa(fd))
	if err != nil {
		return 0, fmt.Errorf("read pidfd info: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Pid:"); ok {
			pid, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil || pid <= 0 {
				return 0, fmt.Errorf("pidfd info: pid %q", v)
			}
			return pid, nil
		}
	}
	return 0, errors.New("pidfd info: no pid")
}
