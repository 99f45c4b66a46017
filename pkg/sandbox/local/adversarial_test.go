package local

// The adversarial suite: hostile code in real containers. Each attack must be contained, the
// server (this test process) must stay healthy, and other containers must keep working.

import (
	"context"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
	"golang.org/x/sys/unix"

	"github.com/codeinterp/codeinterp/pkg/sandbox"
)

// assertHealthy checks that the server can still start processes and that a new container of
// l (and, if given, an existing one) still runs code.
func assertHealthy(t *testing.T, l *Local, others ...sandbox.Container) {
	t.Helper()
	require.NoError(t, exec.Command("true").Run(), "the server can still start processes")
	c := newTestContainer(t, l, sandbox.Spec{})
	assert.Equal(t, "2\n", runIn(t, c, "print(1 + 1)").Stdout, "a new container works")
	for i, o := range others {
		res, err := runTimeout(o, "print('still here')", 30*time.Second)
		require.NoError(t, err, "other container %d", i)
		assert.Equal(t, "still here\n", res.Stdout, "other container %d keeps working", i)
	}
}

// procTree returns the processes under pid (inclusive) as pid -> start time, so that a pid
// reused later is not mistaken for one of them.
func procTree(pid int) map[int]string {
	out := map[int]string{}
	var walk func(int)
	walk = func(p int) {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
		if err != nil {
			return
		}
		// Field 22 (start time) counted after the ")" closing the command name.
		s := string(stat)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fields) > 19 {
			out[p] = fields[19]
		}
		tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", p))
		for _, task := range tasks {
			kids, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", p, task.Name()))
			for _, k := range strings.Fields(string(kids)) {
				if n, err := strconv.Atoi(k); err == nil {
					walk(n)
				}
			}
		}
	}
	walk(pid)
	return out
}

// forked reports whether c was forked from a template (it has no bubblewrap monitor).
func forked(c sandbox.Container) bool { return c.(*container).cmd == nil }

// withMonitor returns n, the processes of a container counting bubblewrap's monitor, minus
// one for a forked container, which has none.
func withMonitor(c sandbox.Container, n int) int {
	if forked(c) {
		return n - 1
	}
	return n
}

// containerPID returns the host pid of the container's first process: bubblewrap's monitor, or
// the init of a forked container (which has no monitor).
func containerPID(c sandbox.Container) int {
	lc := c.(*container)
	if lc.cmd == nil {
		return lc.initPID
	}
	return lc.cmd.Process.Pid
}

// containerTree returns the processes of c (see procTree): those under its first process and,
// for a forked container, those under its driver, which is not its init's child.
func containerTree(c sandbox.Container) map[int]string {
	tree := procTree(containerPID(c))
	if lc := c.(*container); lc.driverPID > 0 {
		maps.Copy(tree, procTree(lc.driverPID))
	}
	return tree
}

// survivors returns the processes of tree still running (a zombie has ended: it only waits to
// be reaped by whoever inherited it).
func survivors(tree map[int]string) []int {
	var alive []int
	for pid, start := range tree {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		s := string(stat)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fields) > 19 && fields[19] == start && fields[0] != "Z" && fields[0] != "X" {
			alive = append(alive, pid)
		}
	}
	return alive
}

// containerSnapshot is what a container holds on the host, noted while it runs, to check that
// nothing of it is left once it is deleted.
type containerSnapshot struct {
	name  string
	tree  map[int]string // its processes: pid -> start time
	cgDir []string
}

func snapshotContainer(t *testing.T, c sandbox.Container) containerSnapshot {
	t.Helper()
	lc := c.(*container)
	s := containerSnapshot{name: lc.name, tree: containerTree(c)}
	require.NotEmpty(t, s.tree, "the container's processes are visible")
	if lc.cg != nil {
		s.cgDir = slices.Clone(lc.cg.dirs)
	}
	return s
}

// assertGone checks that nothing of the deleted containers is left: no process running, none a
// zombie of this process's that nobody reaped, no cgroup.
func assertGone(t *testing.T, snaps ...containerSnapshot) {
	t.Helper()
	for _, s := range snaps {
		assert.Empty(t, survivors(s.tree), "container %s: no process outlives Delete", s.name)
		assert.Empty(t, zombieChildren(s.tree), "container %s: no process is left a zombie of the server", s.name)
		for _, d := range s.cgDir {
			_, err := os.Stat(d)
			assert.ErrorIs(t, err, os.ErrNotExist, "container %s: its cgroup %s is removed", s.name, d)
		}
	}
}

// zombieChildren returns the processes of tree that are zombies whose parent is this process.
func zombieChildren(tree map[int]string) []int {
	var out []int
	for pid, start := range tree {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		s := string(stat)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fields) > 19 && fields[19] == start && fields[0] == "Z" && fields[1] == strconv.Itoa(os.Getpid()) {
			out = append(out, pid)
		}
	}
	return out
}

// assertClosedClean closes l and checks that its work directory and cgroups are gone.
func assertClosedClean(t *testing.T, l *Local) {
	t.Helper()
	var dirs []string
	if l.cgroups != nil {
		dirs = slices.Clone(l.cgroups.dirs)
	}
	require.NoError(t, l.Close(), "close Local")
	_, err := os.Stat(l.workDir)
	assert.ErrorIs(t, err, os.ErrNotExist, "the work directory %s is removed", l.workDir)
	for _, d := range dirs {
		_, err := os.Stat(d)
		assert.ErrorIs(t, err, os.ErrNotExist, "the cgroup %s is removed", d)
	}
}

// TestAdversarialForkBomb runs first and alone (not parallel): it counts processes.
func TestAdversarialForkBomb(t *testing.T) {
	inBothStarts(t, testAdversarialForkBomb)
}

func testAdversarialForkBomb(t *testing.T) {
	l := newTestLocal(t, Config{MaxProcesses: 32})
	bystander := newTestContainer(t, l, sandbox.Spec{})
	bomb, err := l.Create(context.Background(), sandbox.Spec{})
	require.NoError(t, err, "create")
	code := "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"

	var wg sync.WaitGroup
	var runErr error
	wg.Go(func() { _, runErr = runTimeout(bomb, code, 3*time.Second) })
	time.Sleep(time.Second) // let it grow while the checks below run
	res, err := runTimeout(bystander, "print('fine')", 30*time.Second)
	require.NoError(t, err, "another container during the fork bomb")
	assert.Equal(t, "fine\n", res.Stdout, "another container works during the fork bomb")
	require.NoError(t, exec.Command("true").Run(), "the server can start processes during the fork bomb")
	tree := containerTree(bomb)
	// bubblewrap's monitor outside, its init and the interpreter's processes inside.
	assert.LessOrEqual(t, len(tree), 32+2, "processes of the fork-bombing container")
	assert.Greater(t, len(tree), 10, "the fork bomb did fork (the test would prove nothing otherwise)")
	wg.Wait()
	assert.ErrorIs(t, runErr, sandbox.ErrTimeout, "the fork bomb's run times out")

	require.NoError(t, bomb.Delete(context.Background()), "delete")
	assert.Empty(t, survivors(containerTree(bomb)), "nothing of the container outlives Delete")
	assert.Empty(t, survivors(tree), "no forked process outlives Delete")
	assertHealthy(t, l, bystander)
}

func TestAdversarialNetwork(t *testing.T) {
	t.Parallel()
	inBothStarts(t, testAdversarialNetwork)
}

func testAdversarialNetwork(t *testing.T) {
	t.Parallel()
	l := sharedLocal(t)
	c := newTestContainer(t, l, sandbox.Spec{})
	ln4, err := net.Listen("tcp4", "127.0.0.1:0")
	require.NoError(t, err, "listen on IPv4 loopback")
	defer ln4.Close()
	port4 := ln4.Addr().(*net.TCPAddr).Port
	targets := []struct {
		name string
		give string // a Python expression making one connection attempt
	}{
		{"host IPv4 loopback listener", fmt.Sprintf("tcp(socket.AF_INET, ('127.0.0.1', %d))", port4)},
		{"public IPv4", "tcp(socket.AF_INET, ('1.1.1.1', 53))"},
		{"public IPv6", "tcp(socket.AF_INET6, ('2606:4700:4700::1111', 53))"},
		{"DNS", "socket.getaddrinfo('example.com', 443)"},
		{"UDP to a public resolver", "udp(('8.8.8.8', 53))"},
	}
	if ln6, err := net.Listen("tcp6", "[::1]:0"); err == nil {
		defer ln6.Close()
		targets = append(targets, struct {
			name string
			give string
		}{"host IPv6 loopback listener", fmt.Sprintf("tcp(socket.AF_INET6, ('::1', %d))", ln6.Addr().(*net.TCPAddr).Port)})
	}
	runIn(t, c, `import socket
def tcp(family, addr):
    s = socket.socket(family, socket.SOCK_STREAM)
    s.settimeout(3)
    try:
        s.connect(addr)
    finally:
        s.close()
def udp(addr):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(3)
    try:
        s.sendto(b'x', addr)
        return s.recvfrom(10)
    finally:
        s.close()`)
	for _, tt := range targets {
		res := runIn(t, c, tt.give)
		require.NotNil(t, res.Error, "%s: %s must fail", tt.name, tt.give)
		assert.Contains(t, []string{"OSError", "ConnectionRefusedError", "gaierror", "TimeoutError"},
			res.Error.Name, "%s: %s fails for want of a network", tt.name, tt.give)
	}
	// if_nameindex asks netlink, which the filter refuses: the kernel's own table says the same.
	res := runIn(t, c, "sorted(l.split(':')[0].strip() for l in open('/proc/net/dev').readlines()[2:])")
	assert.Equal(t, "['lo']", res.Value, "the container has only its own loopback")

	// Nothing reached the host's listener.
	require.NoError(t, ln4.(*net.TCPListener).SetDeadline(time.Now().Add(10*time.Millisecond)), "deadline")
	_, err = ln4.Accept()
	assert.ErrorIs(t, err, os.ErrDeadlineExceeded, "no connection arrived at the host's listener")
}

// TestAdversarialSocketFamilies: only the families code needs inside its empty network
// namespace can be opened. AF_VSOCK reaches the hypervisor's host (on a VM such as this one, its
// agent), AF_NETLINK and AF_PACKET the kernel's network configuration and packet code, AF_ALG
// its crypto code.
func TestAdversarialSocketFamilies(t *testing.T) {
	t.Parallel()
	inBothStarts(t, testAdversarialSocketFamilies)
}

func testAdversarialSocketFamilies(t *testing.T) {
	t.Parallel()
	l := sharedLocal(t)
	c := newTestContainer(t, l, sandbox.Spec{})
	runIn(t, c, `import errno, socket
def open_family(family, kind=socket.SOCK_STREAM, pair=False):
    try:
        if pair:
            a, b = socket.socketpair(family, kind)
            a.close(); b.close()
        else:
            socket.socket(family, kind).close()
        return 'ok'
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))`)
	tests := []struct {
		name string
		give string
		want string
	}{
		{"AF_UNIX", "open_family(socket.AF_UNIX)", "'ok'"},
		{"AF_INET", "open_family(socket.AF_INET)", "'ok'"},
		{"AF_INET6", "open_family(socket.AF_INET6)", "'ok'"},
		{"AF_UNIX pair", "open_family(socket.AF_UNIX, pair=True)", "'ok'"},
		{"AF_VSOCK", "open_family(40)", "'EAFNOSUPPORT'"},
		{"AF_VSOCK datagram", "open_family(40, socket.SOCK_DGRAM)", "'EAFNOSUPPORT'"},
		{"AF_VSOCK pair", "open_family(40, pair=True)", "'EAFNOSUPPORT'"},
		{"AF_NETLINK route", "open_family(socket.AF_NETLINK, socket.SOCK_RAW)", "'EAFNOSUPPORT'"},
		{"AF_NETLINK datagram", "open_family(socket.AF_NETLINK, socket.SOCK_DGRAM)", "'EAFNOSUPPORT'"},
		{"AF_PACKET", "open_family(17, socket.SOCK_RAW)", "'EAFNOSUPPORT'"},
		{"AF_ALG", "open_family(38, socket.SOCK_SEQPACKET)", "'EAFNOSUPPORT'"},
		{"AF_KEY", "open_family(15, socket.SOCK_RAW)", "'EAFNOSUPPORT'"},
		{"AF_BLUETOOTH", "open_family(31, socket.SOCK_RAW)", "'EAFNOSUPPORT'"},
	}
	for _, tt := range tests {
		res := runIn(t, c, tt.give)
		assert.Equal(t, tt.want, res.Value, "%s: %s", tt.name, tt.give)
	}
	// What the libraries need still works: a local socket pair, name resolution falls back.
	res := runIn(t, c, "import multiprocessing.connection as mc\na, b = mc.Pipe()\na.send(1)\nb.recv()")
	assert.Equal(t, "1", res.Value, "multiprocessing's pipes (AF_UNIX) work")
	res = runIn(t, c, "socket.getaddrinfo('127.0.0.1', 80, type=socket.SOCK_STREAM)[0][4]")
	assert.Equal(t, "('127.0.0.1', 80)", res.Value, "numeric name resolution works without netlink")
	snap := snapshotContainer(t, c)
	require.NoError(t, c.Delete(context.Background()), "delete")
	assertGone(t, snap)
	assertHealthy(t, l)
}

// TestAdversarialMountsShowNoHostPath: /proc/self/mountinfo names, for each mount, the path of
// its source on its own file system. No mount may show a host path the container does not see
// at the same place (the work directory's, above all).
func TestAdversarialMountsShowNoHostPath(t *testing.T) {
	t.Parallel()
	inBothStarts(t, testAdversarialMountsShowNoHostPath)
}

func testAdversarialMountsShowNoHostPath(t *testing.T) {
	t.Parallel()
	l := sharedLocal(t)
	c := newTestContainer(t, l, sandbox.Spec{})
	res := runIn(t, c, "print(open('/proc/self/mountinfo').read())")
	assert.NotContains(t, res.Stdout, l.workDir, "the work directory's path is not visible")
	assert.NotContains(t, res.Stdout, "codeinterp", "no path of the server's is visible")
	// A source path is neutral when the container sees that very file there itself (the root of
	// a file system, a bind at the same place, /etc/localtime's target under /usr, a device
	// node of /dev).
	res = runIn(t, c, `import os
lines = open('/proc/self/mountinfo').read().splitlines()
def neutral(root, point):
    if root in ('/', point, '/newroot') or point.endswith(root):
        return True
    try:
        return os.path.samefile(root, point)
    except OSError:
        return False
print(len(lines), [l for l in lines if not neutral(l.split()[3], l.split()[4])])`)
	assert.Regexp(t, `^\d\d+ \[\]\n$`, res.Stdout, "every mount shows a neutral source path")
	res = runIn(t, c, "import pwd, os\nprint(pwd.getpwuid(os.getuid()).pw_name, open('/etc/group').read().split(':')[0])")
	assert.Equal(t, "sandbox sandbox\n", res.Stdout, "the passwd and group files are there")
	res = runIn(t, c, "import os\nsorted(os.listdir('/tmp/.matplotlib'))")
	assert.Contains(t, res.Value, "fontlist", "matplotlib's font cache is there")
	res = runIn(t, c, "try:\n    open('/etc/passwd', 'a').write('x')\nexcept OSError as e:\n    r = type(e).__name__\nr")
	assert.Contains(t, []string{"'PermissionError'", "'OSError'"}, res.Value, "the copied files are read-only")
	snap := snapshotContainer(t, c)
	require.NoError(t, c.Delete(context.Background()), "delete")
	assertGone(t, snap)
	assertHealthy(t, l)
}

// TestAdversarialInitMemory: the container's init (bubblewrap's PID 1) runs as the code's uid,
// so without more the code could write its memory through /proc/1/mem (ptrace is refused, the
// file is not) and make it outlive the server. No way to its memory is open, and when the
// server's end of the container (bubblewrap's monitor) dies, everything in it dies, a daemon
// planted with setsid and a double fork too.
func TestAdversarialInitMemory(t *testing.T) {
	t.Parallel()
	inBothStarts(t, testAdversarialInitMemory)
}

func testAdversarialInitMemory(t *testing.T) {
	t.Parallel()
	l := sharedLocal(t)
	c := newTestContainer(t, l, sandbox.Spec{})
	tests := []struct {
		name string
		give string
	}{
		{"write /proc/1/mem", "open('/proc/1/mem', 'r+b', buffering=0).write(b'x')"},
		{"read /proc/1/mem", "open('/proc/1/mem', 'rb', buffering=0).read(1)"},
		{"write /proc/1/task/1/mem", "open('/proc/1/task/1/mem', 'r+b', buffering=0).write(b'x')"},
		{"read /proc/1/environ", "open('/proc/1/environ', 'rb').read()"},
		{"read /proc/1/maps", "open('/proc/1/maps').read()"},
		{"pidfd of init, then its memory", "import os\nos.pidfd_open(1)\nopen('/proc/1/mem', 'r+b', buffering=0).write(b'x')"},
	}
	for _, tt := range tests {
		res := runIn(t, c, "try:\n    "+strings.ReplaceAll(tt.give, "\n", "\n    ")+"\n    r = 'done'\nexcept OSError as e:\n    r = type(e).__name__\nr")
		assert.Contains(t, []string{"'FileNotFoundError'", "'PermissionError'"}, res.Value, "%s: refused", tt.name)
	}
	runIn(t, c, plantDaemon)
	snap := snapshotContainer(t, c)
	require.GreaterOrEqual(t, len(snap.tree), withMonitor(c, 4), "monitor, init, interpreter and the daemon run")
	if forked(c) {
		// The server's end dies as it would with the server: the init's lifeline closes.
		require.NoError(t, c.(*container).lifeW.Close(), "close the init's lifeline")
	} else {
		// The server's end dies as it would with the server (its parent-death signal).
		require.NoError(t, syscall.Kill(containerPID(c), syscall.SIGKILL), "kill bubblewrap's monitor")
	}
	require.Eventually(t, func() bool { return len(survivors(snap.tree)) == 0 }, 30*time.Second, 10*time.Millisecond,
		"every process of the container dies with its monitor")
	require.NoError(t, c.Delete(context.Background()), "delete")
	assertGone(t, snap)
	assertHealthy(t, l)
}

// hostUID returns the host uid a container's interpreter runs as.
func hostUID(t *testing.T, c sandbox.Container) string {
	t.Helper()
	for pid := range containerTree(c) {
		cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if forked(c) {
			if pid != c.(*container).procs.driver {
				continue // a forked driver's command line is the template's
			}
		} else if !strings.Contains(string(cmd), bootstrap) || strings.HasPrefix(string(cmd), "bwrap") {
			continue
		}
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		require.NoError(t, err, "status of %d", pid)
		for _, line := range strings.Split(string(status), "\n") {
			if f := strings.Fields(line); len(f) > 1 && f[0] == "Uid:" {
				return f[1]
			}
		}
	}
	t.Fatalf("no interpreter found in container %s", c.(*container).name)
	return ""
}

// TestAdversarialPerUserLimits: per-user kernel limits count per host uid. One container that
// takes every inotify instance its uid may have (fs.inotify.max_user_instances) must not stop
// another's inotify_init, as it would if containers shared a uid.
func TestAdversarialPerUserLimits(t *testing.T) {
	t.Parallel()
	inBothStarts(t, testAdversarialPerUserLimits)
}

func testAdversarialPerUserLimits(t *testing.T) {
	t.Parallel()
	l := sharedLocal(t)
	if !l.setUID {
		t.Skip("the server is not root: every container runs as its own uid")
	}
	hog := newTestContainer(t, l, sandbox.Spec{})
	other := newTestContainer(t, l, sandbox.Spec{})
	assert.NotEqual(t, hostUID(t, hog), hostUID(t, other), "the containers run as different host uids")
	const inotify = `import ctypes, errno
libc = ctypes.CDLL(None, use_errno=True)
def inotify_init():
    fd = libc.inotify_init1(0)
    return fd if fd >= 0 else -ctypes.get_errno()
`
	runIn(t, hog, inotify)
	runIn(t, other, inotify)
	res := runIn(t, hog, `held = []
while True:
    fd = inotify_init()
    if fd < 0:
        break
    held.append(fd)
(len(held), errno.errorcode[-fd])`)
	assert.Regexp(t, `^\(\d+, 'EMFILE'\)$`, res.Value, "the hog runs out of inotify instances")
	res = runIn(t, other, "fd = inotify_init()\nfd >= 0 or errno.errorcode[-fd]")
	assert.Equal(t, "True", res.Value, "another container still gets an inotify instance")
	res = runIn(t, hog, "inotify_init() >= 0")
	assert.Equal(t, "False", res.Value, "the hog still holds its instances (the check above proves something)")

	// Uids go back to the pool with their containers, and nothing of them is left.
	snaps := []containerSnapshot{snapshotContainer(t, hog), snapshotContainer(t, other)}
	uids := []string{hostUID(t, hog), hostUID(t, other)}
	require.NoError(t, hog.Delete(context.Background()), "delete the hog")
	require.NoError(t, other.Delete(context.Background()), "delete the other")
	assertGone(t, snaps...)
	for _, u := range uids {
		n, err := strconv.Atoi(u)
		require.NoError(t, err, "uid %q", u)
		l.uids.mu.Lock()
		_, held := l.uids.held[n]
		l.uids.mu.Unlock()
		assert.False(t, held, "uid %d is free again", n)
	}
	assertHealthy(t, l)
}

// inheritedSocket is one end of a host TCP connection held as a descriptor without
// close-on-exec, as one the server inherited would be, and the host's other end.
type inheritedSocket struct {
	fd   int
	peer net.Conn
	name string // as /proc/PID/fd links name it: "socket:[inode]"
}

func newInheritedSocket(t *testing.T) inheritedSocket {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err, "listen")
	defer ln.Close()
	conn, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err, "dial")
	t.Cleanup(func() { conn.Close() })
	peer, err := ln.Accept()
	require.NoError(t, err, "accept")
	t.Cleanup(func() { peer.Close() })
	f, err := conn.(*net.TCPConn).File()
	require.NoError(t, err, "the connection's descriptor")
	defer f.Close()
	fd, err := unix.Dup(int(f.Fd())) // dup sets no close-on-exec
	require.NoError(t, err, "dup")
	t.Cleanup(func() { unix.Close(fd) })
	var st unix.Stat_t
	require.NoError(t, unix.Fstat(fd, &st), "fstat")
	return inheritedSocket{fd: fd, peer: peer, name: fmt.Sprintf("socket:[%d]", st.Ino)}
}

// TestAdversarialInheritedDescriptors is not parallel: New marks every descriptor of the
// process close-on-exec, and another test's New meanwhile would hide whether the driver
// closes a descriptor opened after New.
func TestAdversarialInheritedDescriptors(t *testing.T) {
	inBothStarts(t, testAdversarialInheritedDescriptors)
}

func testAdversarialInheritedDescriptors(t *testing.T) {
	before := newInheritedSocket(t)
	l := newTestLocal(t, Config{})
	flags, err := unix.FcntlInt(uintptr(before.fd), unix.F_GETFD, 0)
	require.NoError(t, err, "F_GETFD")
	assert.NotZero(t, flags&unix.FD_CLOEXEC, "New marked the descriptor the server held close-on-exec")
	after := newInheritedSocket(t)
	flags, err = unix.FcntlInt(uintptr(after.fd), unix.F_GETFD, 0)
	require.NoError(t, err, "F_GETFD")
	require.Zero(t, flags&unix.FD_CLOEXEC, "a descriptor opened after New stays inheritable")

	c := newTestContainer(t, l, sandbox.Spec{})
	res := runIn(t, c, fmt.Sprintf(`import os, socket, subprocess
links = []
for pid in [p for p in os.listdir('/proc') if p.isdigit()] + ['self']:
    try:
        fds = os.listdir('/proc/%%s/fd' %% pid)
    except OSError:
        continue
    for fd in fds:
        try:
            links.append(os.readlink('/proc/%%s/fd/%%s' %% (pid, fd)))
        except OSError:
            pass
child = subprocess.run(['/bin/ls', '-l', '/proc/self/fd/'], capture_output=True, text=True).stdout
sent = []
for fd in (%d, %d):
    try:
        socket.socket(fileno=fd).sendall(b'escaped')
        sent.append(fd)
    except OSError:
        pass
print(sent, links, child)`, before.fd, after.fd))
	assert.Contains(t, res.Stdout, "[] [", "no descriptor of the server worked in the container")
	assert.Contains(t, res.Stdout, "pipe:[", "the listing saw the container's own descriptors")
	for _, s := range []inheritedSocket{before, after} {
		assert.NotContains(t, res.Stdout, s.name, "no process of the container holds the server's socket %d", s.fd)
		require.NoError(t, s.peer.SetReadDeadline(time.Now().Add(50*time.Millisecond)), "deadline")
		n, _ := s.peer.Read(make([]byte, 16))
		assert.Zero(t, n, "nothing reached the host through the server's socket %d", s.fd)
	}
}

func TestAdversarialHostFiles(t *testing.T) {
	t.Parallel()
	inBothStarts(t, testAdversarialHostFiles)
}

func testAdversarialHostFiles(t *testing.T) {
	t.Parallel()
	l := sharedLocal(t)
	c := newTestContainer(t, l, sandbox.Spec{})
	secretDir := t.TempDir()
	secret := filepath.Join(secretDir, "secret.txt")
	require.NoError(t, os.WriteFile(secret, []byte("host secret"), 0o644), "write host secret")
	wd, err := os.Getwd()
	require.NoError(t, err, "getwd")

	reads := []string{
		secret, "/etc/shadow", "/etc/hostname", "/etc/hosts", "/root/.profile",
		filepath.Join(wd, "sandbox.go"), filepath.Join(l.workDir, "containers"),
		"/sys/kernel/hostname", "/var/log", "/home",
	}
	for _, p := range reads {
		res := runIn(t, c, fmt.Sprintf("import os\nos.listdir(%q) if os.path.isdir(%q) else open(%q).read()", p, p, p))
		require.NotNil(t, res.Error, "reading %s must fail", p)
		assert.Contains(t, []string{"FileNotFoundError", "PermissionError"}, res.Error.Name, "reading %s", p)
	}
	res := runIn(t, c, "import os\nsorted(os.listdir('/'))")
	assert.Equal(t, "['bin', 'dev', 'etc', 'lib', 'lib64', 'mnt', 'proc', 'sbin', 'tmp', 'usr']", res.Value,
		"the container's root holds only the allowed mounts")
	res = runIn(t, c, "sorted(os.listdir('/etc'))")
	assert.NotContains(t, res.Value, "shadow", "no /etc/shadow")
	assert.NotContains(t, res.Value, "hostname", "no host /etc files")

	writes := []string{"/usr/evil", "/etc/evil", "/evil", "/mnt/evil", "/dev/evil", "/proc/sys/kernel/hostname",
		"/usr/bin/python3", "/etc/passwd", secretDir + "/evil"}
	for _, p := range writes {
		res := runIn(t, c, fmt.Sprintf("open(%q, 'w').write('x')", p))
		require.NotNil(t, res.Error, "writing %s must fail", p)
		assert.Contains(t, []string{"OSError", "PermissionError", "FileNotFoundError"}, res.Error.Name, "writing %s", p)
	}
	_, err = os.Stat(filepath.Join(secretDir, "evil"))
	assert.ErrorIs(t, err, os.ErrNotExist, "nothing written on the host")
	res = runIn(t, c, "open('/tmp/ok', 'w').write('ok')\nopen('/mnt/data/ok', 'w').write('ok')")
	assert.Nil(t, res.Error, "/tmp and /mnt/data are writable")
	assertHealthy(t, l, c)
}

// TestAdversarialEnvironment is not parallel: it sets an environment variable.
func TestAdversarialEnvironment(t *testing.T) {
	inBothStarts(t, testAdversarialEnvironment)
}

func testAdversarialEnvironment(t *testing.T) {
	const secret = "sk-codeinterp-test-secret-0123456789"
	t.Setenv("CODEINTERP_TEST_API_KEY", secret)
	readEnv := "import os\nprint(repr(dict(os.environ)))"
	readProc := `import os, glob
seen = [repr(dict(os.environ))]
for p in glob.glob('/proc/*/environ') + ['/proc/1/environ', '/proc/self/environ']:
    try:
        seen.append(open(p, 'rb').read().decode('utf-8', 'replace'))
    except OSError as e:
        seen.append(type(e).__name__)
print('\n'.join(seen))`
	tests := []struct {
		name string
		cfg  Config
		give string
	}{
		{"isolated: environment and every /proc/*/environ", Config{}, readProc},
		// Without isolation /proc shows the host's processes; only the environment is clean.
		{"no isolation: environment", Config{UnsafeNoIsolation: true}, readEnv},
	}
	for _, tt := range tests {
		c := newTestContainer(t, newTestLocal(t, tt.cfg), sandbox.Spec{})
		res := runIn(t, c, tt.give)
		require.Nil(t, res.Error, "%s: reading environments", tt.name)
		assert.NotContains(t, res.Stdout, secret, "%s: the server's secret must not reach the container", tt.name)
		assert.NotContains(t, res.Stdout, "CODEINTERP_TEST_API_KEY", "%s: nor its name", tt.name)
		assert.NotContains(t, res.Stdout, "/usr/local/go", "%s: nor the server's PATH", tt.name)
		assert.Contains(t, res.Stdout, "MPLBACKEND", "%s: the container's own environment was read", tt.name)
	}
}

func TestAdversarialProcSnooping(t *testing.T) {
	t.Parallel()
	inBothStarts(t, testAdversarialProcSnooping)
}

func testAdversarialProcSnooping(t *testing.T) {
	t.Parallel()
	// The marker process must outlive the run that starts it.
	l := newTestLocal(t, Config{KeepBackgroundProcesses: true})
	a := newTestContainer(t, l, sandbox.Spec{})
	b := newTestContainer(t, l, sandbox.Spec{})
	marker := "snoop-marker-" + randomHex(8)
	// The child announces itself once running (Popen may return while its command line is
	// still being set up by exec).
	runIn(t, a, fmt.Sprintf(`import subprocess, sys, os, time
p = subprocess.Popen([sys.executable, '-c', "open('/tmp/up', 'w').close()\nimport time\ntime.sleep(600)", %q])
while not os.path.exists('/tmp/up'):
    time.sleep(0.01)
secret_var = %q`, marker, marker))
	// The marker process exists (seen from the host), so the check below can fail.
	found := false
	for pid := range containerTree(a) {
		if cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); strings.Contains(string(cmd), marker) {
			found = true
		}
	}
	require.True(t, found, "container a runs the marker process")

	res := runIn(t, b, `import os, glob
out = []
for p in glob.glob('/proc/[0-9]*/cmdline'):
    try:
        out.append(open(p, 'rb').read().decode('utf-8', 'replace'))
    except OSError:
        pass
print('\n'.join(out))
pids = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())
visible = []
for pid in range(1, 1 << 15):
    try:
        os.kill(pid, 0)
        visible.append(pid)
    except ProcessLookupError:
        pass
    except PermissionError:
        visible.append(pid)
(pids, visible)`)
	require.Nil(t, res.Error, "snooping")
	assert.NotContains(t, res.Stdout, marker, "container b does not see container a's processes")
	// 1 is bubblewrap's init, 2 the interpreter and 3 its interrupt thread (a thread id is not
	// listed in /proc but can be signalled).
	assert.Equal(t, "([1, 2], [1, 2, 3])", res.Value, "container b sees only its init and itself")
	res = runIn(t, b, "secret_var")
	require.NotNil(t, res.Error, "container b has no access to a's variables")
	assert.Equal(t, "NameError", res.Error.Name, "container b has no access to a's variables")
	assertHealthy(t, l, a)
}

func TestAdversarialMemoryBomb(t *testing.T) {
	t.Parallel()
	inBothStarts(t, testAdversarialMemoryBomb)
}

func testAdversarialMemoryBomb(t *testing.T) {
	t.Parallel()
	l := sharedLocal(t)
	// A small limit keeps the touched variant quick; the mechanism is the same for every size.
	c := newTestContainer(t, l, sandbox.Spec{MemoryLimit: "512m"})
	tests := []struct {
		name string
		give string
	}{
		{"one huge allocation", "b = bytearray(8 << 30)"},
		{"growing and touched", "chunks = []\nwhile True:\n    chunks.append(b'x' * (64 << 20))"},
		{"a huge string", "s = 'x' * (4 << 30)"},
	}
	for _, tt := range tests {
		res, err := runTimeout(c, tt.give, 60*time.Second)
		require.NoError(t, err, "%s: the container survives", tt.name)
		require.NotNil(t, res.Error, "%s: must fail", tt.name)
		assert.Equal(t, "MemoryError", res.Error.Name, "%s: stopped by the memory limit", tt.name)
		runIn(t, c, "chunks = None")
	}
	hasScientificPython(t)
	res := runIn(t, c, "import numpy as np\nnp.ones((1 << 17, 1 << 17))")
	require.NotNil(t, res.Error, "numpy huge array must fail")
	assert.Contains(t, res.Error.Name, "MemoryError", "numpy huge array stopped by the memory limit")
	assertHealthy(t, l, c)
}

func TestAdversarialCPU(t *testing.T) {
	t.Parallel()
	inBothStarts(t, testAdversarialCPU)
}

func testAdversarialCPU(t *testing.T) {
	t.Parallel()
	l := newTestLocal(t, Config{CPUSeconds: 1})
	c := newTestContainer(t, l, sandbox.Spec{})
	runIn(t, c, "x = 1")
	_, err := runTimeout(c, "while True:\n    pass", time.Second)
	assert.ErrorIs(t, err, sandbox.ErrTimeout, "a spin is stopped at its deadline")
	assert.NotErrorIs(t, err, sandbox.ErrLost, "and interrupted, not killed")
	// The CPU-time limit ends a container that spins past it, whatever the wall clock allows.
	_, err = runTimeout(c, "while True:\n    pass", 60*time.Second)
	assert.ErrorIs(t, err, sandbox.ErrLost, "CPU time exhausted: the container is killed")
	assert.NotErrorIs(t, err, sandbox.ErrTimeout, "killed by the CPU limit, long before the deadline")
	assertHealthy(t, l)
}

func TestAdversarialDiskFill(t *testing.T) {
	t.Parallel()
	inBothStarts(t, testAdversarialDiskFill)
}

func testAdversarialDiskFill(t *testing.T) {
	t.Parallel()
	l := newTestLocal(t, Config{DataBytes: 16 << 20, TmpBytes: 8 << 20, MaxFileBytes: 4 << 20})
	c := newTestContainer(t, l, sandbox.Spec{})
	runIn(t, c, `import errno, os
def fill(d):
    i = 0
    try:
        while True:
            with open(os.path.join(d, 'f%d' % i), 'wb') as f:
                f.write(b'x' * (1 << 20))
            i += 1
    except OSError as e:
        return errno.errorcode[e.errno], i
`)
	tests := []struct {
		name string
		give string
		want string
	}{
		{"one file past the file-size limit", "open('/mnt/data/big', 'wb').write(b'x' * (8 << 20))", "EFBIG"},
		{"/mnt/data", "fill('/mnt/data')", "ENOSPC"},
		{"/tmp", "fill('/tmp')", "ENOSPC"},
		{"/dev/shm", "fill('/dev/shm')", "ENOSPC"},
		{"memfd", "os.memfd_create('x')", "EPERM"},
	}
	for _, tt := range tests {
		res := runIn(t, c, "try:\n    r = "+tt.give+"\nexcept OSError as e:\n    r = errno.errorcode[e.errno]\nr")
		require.Nil(t, res.Error, "%s", tt.name)
		assert.Contains(t, res.Value, tt.want, "%s: stopped", tt.name)
	}
	res := runIn(t, c, "import shutil\nshutil.disk_usage('/mnt/data').total")
	assert.Equal(t, strconv.Itoa(16<<20), res.Value, "/mnt/data is a 16 MiB tmpfs")
	res = runIn(t, c, "for n in os.listdir('/mnt/data'):\n    os.remove('/mnt/data/' + n)\nopen('/mnt/data/ok', 'w').write('fine')")
	assert.Nil(t, res.Error, "the container recovers once files are removed")
	assertHealthy(t, l, c)
}

func TestAdversarialHugeOutput(t *testing.T) {
	t.Parallel()
	inBothStarts(t, testAdversarialHugeOutput)
}

func testAdversarialHugeOutput(t *testing.T) {
	t.Parallel()
	l := sharedLocal(t)
	c := newTestContainer(t, l, sandbox.Spec{})
	limit := 1 << 20
	tests := []struct {
		name  string
		give  string
		field func(sandbox.Result) string
	}{
		{"10 MB print", "print('x' * 10_000_000)", func(r sandbox.Result) string { return r.Stdout }},
		{"10 MB raw write", "import os\nos.write(1, b'y' * 10_000_000);", func(r sandbox.Result) string { return r.Stdout }},
		{"a million lines", "for i in range(1_000_000):\n    print(i)", func(r sandbox.Result) string { return r.Stdout }},
		{"10 MB stderr", "import sys\nsys.stderr.write('z' * 10_000_000);", func(r sandbox.Result) string { return r.Stderr }},
		{"10 MB value", "'v' * 10_000_000", func(r sandbox.Result) string { return r.Value }},
		{"10 MB from a child process", "import subprocess\nsubprocess.run(['/usr/bin/head', '-c', '10000000', '/dev/zero']);",
			func(r sandbox.Result) string { return r.Stdout }},
	}
	for _, tt := range tests {
		res := runIn(t, c, tt.give)
		got := tt.field(res)
		assert.True(t, res.Truncated, "%s: truncated", tt.name)
		assert.LessOrEqual(t, len(got), limit+64, "%s: capped", tt.name)
		assert.Contains(t, got, "[output truncated: ", "%s: visible note", tt.name)
	}
	res := runIn(t, c, "class Big:\n    def _repr_png_(self):\n        return b'\\x89PNG' + b'0' * 10_000_000\nBig()")
	assert.Empty(t, res.Images, "an oversized image is dropped")
	assert.True(t, res.Truncated, "an oversized image marks the result truncated")
	res = runIn(t, c, fmt.Sprintf("class Tiny:\n    def _repr_png_(self):\n        return b'\\x89PNG'\ndisplay(*[Tiny()] * %d)", maxImages+1))
	assert.Len(t, res.Images, maxImages, "images beyond the count a run returns are dropped")
	assert.True(t, res.Truncated, "images beyond the count mark the result truncated")
	assertHealthy(t, l, c)
}

func TestAdversarialProtocolAbuse(t *testing.T) {
	t.Parallel()
	inBothStarts(t, testAdversarialProtocolAbuse)
}

func testAdversarialProtocolAbuse(t *testing.T) {
	t.Parallel()
	l := sharedLocal(t)
	tests := []struct {
		name string
		give string
	}{
		{"huge frame length", "import os\nos.write(4, b'\\xff\\xff\\xff\\xff')\nimport time\ntime.sleep(60)"},
		{"garbage frame", "import os\nos.write(4, b'\\x00\\x00\\x00\\x05hello')\nimport time\ntime.sleep(60)"},
		{"closed protocol pipes", "import os\nos.close(3)\nos.close(4)\nos.close(5)"},
		{"end marker forged", "print('\\x1e[codeinterp end 00]\\x1e')\nimport os\nos._exit(0)"},
	}
	for _, tt := range tests {
		c := newTestContainer(t, l, sandbox.Spec{})
		_, err := runTimeout(c, tt.give, 30*time.Second)
		assert.ErrorIs(t, err, sandbox.ErrLost, "%s: the container is given up", tt.name)
	}
	assertHealthy(t, l)
}

// forge defines forge(**frame) in a cell, which writes a frame to the driver's answer pipe, and
// S, the driver's state (S.seq is the run's number).
const forge = `import marshal, os, sys, time
S = sys._getframe(1).f_globals['S']
def forge(**v):
    body = marshal.dumps(v, 2)
    os.write(4, len(body).to_bytes(4, 'big') + body)
`

// TestAdversarialForgedAnswerOfThisRun answers the run from its own code before the code ends:
// the run takes the answer (the code could have printed anything anyway) but does not wait for
// the code's end markers beyond their grace, nor does the container outlive the real answer.
func TestAdversarialForgedAnswerOfThisRun(t *testing.T) {
	t.Parallel()
	inBothStarts(t, testAdversarialForgedAnswerOfThisRun)
}

func testAdversarialForgedAnswerOfThisRun(t *testing.T) {
	t.Parallel()
	c := newTestContainer(t, sharedLocal(t), sandbox.Spec{})
	res, err := runTimeout(c, forge+"forge(op='result', seq=S.seq, value='forged')\ntime.sleep(30)\nprint('late')", 60*time.Second)
	require.NoError(t, err, "the run takes the answer it was sent")
	assert.NotContains(t, res.Stdout, "late", "the run ended with its answer, not with the code")
	_, err = runTimeout(c, "1", time.Second)
	assert.ErrorIs(t, err, sandbox.ErrLost, "the container is given up (the real answer comes out of turn)")
}

// TestAdversarialForgedAnswers writes frames to the driver's answer pipe from the code, which
// runs in the driver's process: any frame but the run's own result gives the container up,
// before the server decodes more of them.
func TestAdversarialForgedAnswers(t *testing.T) {
	t.Parallel()
	inBothStarts(t, testAdversarialForgedAnswers)
}

func testAdversarialForgedAnswers(t *testing.T) {
	t.Parallel()
	l := sharedLocal(t)
	tests := []struct {
		name string
		give string
	}{
		{"an answer of an earlier run", "forge(op='result', seq=S.seq - 1, value='forged')\ntime.sleep(600)"},
		{"an answer of a later run", "forge(op='result', seq=S.seq + 1, value='forged')\ntime.sleep(600)"},
		{"a frame that is not a result", "forge(op='ready', seq=S.seq)\ntime.sleep(600)"},
		{"a frame without a run number", "forge(op='result', value='forged')\ntime.sleep(600)"},
		{"this run's answer of a million values", "forge(op='result', seq=S.seq, x=[None] * (1 << 20))\ntime.sleep(600)"},
		{"a stream of large frames of other runs", "while True:\n    forge(op='result', seq=-1, x=[None] * (8 << 20))"},
	}
	for _, tt := range tests {
		c := newTestContainer(t, l, sandbox.Spec{})
		res, err := runTimeout(c, forge+tt.give, 20*time.Second)
		assert.ErrorIs(t, err, sandbox.ErrLost, "%s: the container is given up", tt.name)
		assert.NotErrorIs(t, err, sandbox.ErrTimeout, "%s: at once, not when the run's time is up", tt.name)
		assert.Empty(t, res.Value, "%s: no forged value is taken", tt.name)
		_, err = runTimeout(c, "1", 10*time.Second)
		assert.ErrorIs(t, err, sandbox.ErrLost, "%s: the container is gone", tt.name)
	}
	assertHealthy(t, l)
}

func TestAdversarialSignals(t *testing.T) {
	t.Parallel()
	inBothStarts(t, testAdversarialSignals)
}

func testAdversarialSignals(t *testing.T) {
	t.Parallel()
	l := sharedLocal(t)
	bystander := newTestContainer(t, l, sandbox.Spec{})
	tests := []struct {
		name string
		give string
	}{
		{"kill the parent", "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)"},
		{"kill init", "import os, signal\nos.kill(1, signal.SIGKILL)"},
		{"kill everything", "import os, signal\nos.kill(-1, signal.SIGKILL)"},
		{"kill the server's pid", fmt.Sprintf("import os, signal\nos.kill(%d, signal.SIGKILL)", os.Getpid())},
		{"stop the parent", "import os, signal\nos.kill(os.getppid(), signal.SIGSTOP)"},
	}
	for _, tt := range tests {
		c := newTestContainer(t, l, sandbox.Spec{})
		// Whatever happens to the container, it stays in it.
		_, _ = runTimeout(c, tt.give, 10*time.Second)
		_, _ = runTimeout(c, "print(1)", 10*time.Second)
	}
	assertHealthy(t, l, bystander)
}

func TestAdversarialPtraceAndPrivileges(t *testing.T) {
	t.Parallel()
	inBothStarts(t, testAdversarialPtraceAndPrivileges)
}

func testAdversarialPtraceAndPrivileges(t *testing.T) {
	t.Parallel()
	l := sharedLocal(t)
	c := newTestContainer(t, l, sandbox.Spec{})
	runIn(t, c, `import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
def call(name, *args):
    r = getattr(libc, name)(*args)
    return os.strerror(ctypes.get_errno()) if r == -1 else 'ok'
`)
	tests := []struct {
		name string
		give string
		want string
	}{
		{"ptrace the parent", "call('ptrace', 16, os.getppid(), None, None)", "Operation not permitted"},
		{"ptrace self", "call('ptrace', 0, 0, None, None)", "Operation not permitted"},
		{"new user namespace", "call('unshare', 0x10000000)", "Operation not permitted"},
		{"mount", "call('mount', b'none', b'/tmp', b'tmpfs', 0, None)", "Operation not permitted"},
		{"setuid root", "call('setuid', 0)", "Invalid argument"}, // uid 0 does not exist in the container
		{"read init's memory", "open('/proc/1/mem', 'rb').read(1)", "Error"},
		{"capabilities", "[l for l in open('/proc/self/status') if l.startswith('CapEff')][0].split()[1]", "0000000000000000"},
		{"no new privileges", "[l for l in open('/proc/self/status') if l.startswith('NoNewPrivs')][0].split()[1]", "1"},
		{"seccomp on", "[l for l in open('/proc/self/status') if l.startswith('Seccomp:')][0].split()[1]", "2"},
	}
	for _, tt := range tests {
		res := runIn(t, c, "try:\n    r = "+tt.give+"\nexcept OSError as e:\n    r = type(e).__name__\nr")
		require.Nil(t, res.Error, "%s", tt.name)
		assert.Contains(t, res.Value, tt.want, "%s", tt.name)
	}
	assertHealthy(t, l, c)
}

func TestAdversarialTenants(t *testing.T) {
	t.Parallel()
	inBothStarts(t, testAdversarialTenants)
}

func testAdversarialTenants(t *testing.T) {
	t.Parallel()
	l := sharedLocal(t)
	m := sandbox.NewManager(l, sandbox.ManagerConfig{}, zaptest.NewLogger(t))
	t.Cleanup(func() { assert.NoError(t, m.Close(context.Background()), "close manager") })
	ctx := context.Background()

	alice, err := m.Acquire(ctx, sandbox.AcquireRequest{Identity: "alice", Session: "shared-name"})
	require.NoError(t, err, "alice acquires")
	defer alice.Release()
	_, err = alice.Run(ctx, "secret = 'alice-secret'\nopen('/mnt/data/secret.txt', 'w').write(secret)", 0)
	require.NoError(t, err, "alice writes her secret")

	tests := []struct {
		name string
		give sandbox.AcquireRequest
	}{
		{"same session name, other identity", sandbox.AcquireRequest{Identity: "mallory", Session: "shared-name"}},
		{"other identity, no session", sandbox.AcquireRequest{Identity: "mallory"}},
		{"empty identity, same session name", sandbox.AcquireRequest{Session: "shared-name"}},
	}
	for _, tt := range tests {
		lease, err := m.Acquire(ctx, tt.give)
		require.NoError(t, err, "%s: acquire", tt.name)
		res, err := lease.Run(ctx, "import os, glob\nprint(glob.glob('/mnt/data/*'), 'secret' in dir())", 0)
		require.NoError(t, err, "%s: run", tt.name)
		assert.Equal(t, "[] False\n", res.Stdout, "%s: sees neither alice's files nor her variables", tt.name)
		lease.Release()
	}
	_, err = m.Acquire(ctx, sandbox.AcquireRequest{Identity: "mallory", ContainerID: alice.ContainerID()})
	assert.ErrorIs(t, err, sandbox.ErrUnknownContainer, "alice's container id is unknown to mallory")
	assert.False(t, m.Known("mallory", alice.ContainerID()), "alice's container id is unknown to mallory")
	res, err := alice.Run(ctx, "print(secret, open('/mnt/data/secret.txt').read())", 0)
	require.NoError(t, err, "alice again")
	assert.Equal(t, "alice-secret alice-secret\n", res.Stdout, "alice's state is intact")
}

// TestAdversarialMemoryBombProcesses: several processes, each within the per-process address
// space limit, together far beyond the container's memory. Only the container's cgroup can stop
// them, so the test needs one.
func TestAdversarialMemoryBombProcesses(t *testing.T) {
	t.Parallel()
	inBothStarts(t, testAdversarialMemoryBombProcesses)
}

func testAdversarialMemoryBombProcesses(t *testing.T) {
	t.Parallel()
	l := newTestLocal(t, Config{DataBytes: 16 << 20, TmpBytes: 8 << 20})
	if l.cgroups == nil {
		t.Skip("no writable cgroup hierarchy here: the rlimits alone cannot bound this")
	}
	c := newTestContainer(t, l, sandbox.Spec{MemoryLimit: "512m"})
	memMax, _ := l.cgroupLimits(512 << 20)
	res, err := runTimeout(c, `import os
kids = []
for i in range(6):
    pid = os.fork()
    if pid == 0:
        b = b'x' * (300 << 20)  # touched: 1.8 GB in all, 300 MB each within the rlimit
        os._exit(0)
    kids.append(pid)
killed = 0
for pid in kids:
    _, status = os.waitpid(pid, 0)
    killed += os.WIFSIGNALED(status)
print('killed', killed)`, 60*time.Second)
	if err == nil {
		assert.NotEqual(t, "killed 0\n", res.Stdout, "some children were stopped by the cgroup's limit")
	} else {
		assert.ErrorIs(t, err, sandbox.ErrLost, "or the container itself was")
	}
	peak := c.(*container).cg.peakMemory()
	assert.LessOrEqual(t, peak, memMax, "the container's memory never exceeded its cgroup limit")
	assert.Greater(t, peak, int64(300<<20), "the bomb did allocate (the test would prove nothing otherwise)")
	assertHealthy(t, l)
}

func TestLocalCgroupHoldsEveryProcess(t *testing.T) {
	t.Parallel()
	inBothStarts(t, testLocalCgroupHoldsEveryProcess)
}

func testLocalCgroupHoldsEveryProcess(t *testing.T) {
	t.Parallel()
	l := newTestLocal(t, Config{KeepBackgroundProcesses: true})
	if l.cgroups == nil {
		t.Skip("no writable cgroup hierarchy here")
	}
	c := newTestContainer(t, l, sandbox.Spec{})
	runIn(t, c, "import subprocess\np = subprocess.Popen(['/usr/bin/sleep', '600'])")
	cg := c.(*container).cg
	tree := containerTree(c)
	require.GreaterOrEqual(t, len(tree), withMonitor(c, 4), "monitor, init, interpreter and its child")
	for pid := range tree {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		require.NoError(t, err, "read cgroup of %d", pid)
		for _, dir := range cg.dirs {
			assert.Contains(t, string(data), filepath.Base(dir), "process %d is in the container's cgroup", pid)
		}
	}
	dirs := slices.Clone(cg.dirs)
	require.NoError(t, c.Delete(context.Background()), "delete")
	for _, d := range dirs {
		_, err := os.Stat(d)
		assert.ErrorIs(t, err, os.ErrNotExist, "the container's cgroup is removed with it")
	}
}

func TestNewCgroupSetting(t *testing.T) {
	t.Parallel()
	inBothStarts(t, testNewCgroupSetting)
}

func testNewCgroupSetting(t *testing.T) {
	t.Parallel()
	_, err := New(Config{Cgroups: "sometimes"}, zaptest.NewLogger(t))
	assert.Error(t, err, "an unknown cgroups setting is refused")
	_, err = New(Config{Cgroups: t.TempDir()}, zaptest.NewLogger(t))
	assert.Error(t, err, "a directory that is not a delegated cgroup is refused")
	l := newTestLocal(t, Config{Cgroups: "off"})
	assert.Nil(t, l.cgroups, "cgroups off")
	c := newTestContainer(t, l, sandbox.Spec{})
	assert.Equal(t, "2\n", runIn(t, c, "print(1 + 1)").Stdout, "containers work without cgroups")
}

// TestAdversarialBackgroundProcesses: what a run leaves running (a busy loop forked off, a
// daemon in a session of its own, a subprocess) is killed when the run ends, so that nothing
// burns CPU between requests; the interpreter and its state stay. The killed children are
// reaped, so runs that each leave one do not use up the process limit.
func TestAdversarialBackgroundProcesses(t *testing.T) {
	t.Parallel()
	inBothStarts(t, testAdversarialBackgroundProcesses)
}

func testAdversarialBackgroundProcesses(t *testing.T) {
	t.Parallel()
	l := newTestLocal(t, Config{MaxProcesses: 8})
	c := newTestContainer(t, l, sandbox.Spec{})
	runIn(t, c, "import os, subprocess, sys\nkept = 'state'\nif os.fork() == 0:\n    while True:\n        pass")
	runIn(t, c, plantDaemon)
	runIn(t, c, "p = subprocess.Popen(['/usr/bin/sleep', '600'])")
	lc := c.(*container)
	want := slices.Compact(slices.Sorted(slices.Values([]int{containerPID(c), lc.procs.init, lc.procs.driver})))
	require.NotZero(t, lc.procs.driver, "the driver's pid is known")
	require.Eventually(t, func() bool {
		got := survivors(containerTree(c))
		slices.Sort(got)
		return slices.Equal(got, slices.Sorted(slices.Values(want)))
	}, 30*time.Second, 10*time.Millisecond, "only bubblewrap's monitor and init and the interpreter run between runs")
	res := runIn(t, c, "kept")
	assert.Equal(t, "'state'", res.Value, "the interpreter's state survives")
	for i := range 12 {
		res, err := runTimeout(c, "subprocess.Popen(['/usr/bin/sleep', '600']).pid > 0", 30*time.Second)
		require.NoError(t, err, "run %d", i)
		require.Equal(t, "True", res.Value, "run %d can still start a process (the killed ones were reaped)", i)
	}
	// The driver reaped it: a Popen the code holds finds it gone (subprocess reports 0 then).
	res = runIn(t, c, "p.wait() in (0, -9)")
	assert.Equal(t, "True", res.Value, "waiting for a process killed between runs returns")
	snap := snapshotContainer(t, c)
	require.NoError(t, c.Delete(context.Background()), "delete")
	assertGone(t, snap)

	// Configured to keep them, they run on.
	keep := newTestLocal(t, Config{KeepBackgroundProcesses: true})
	k := newTestContainer(t, keep, sandbox.Spec{})
	runIn(t, k, "import subprocess\np = subprocess.Popen(['/usr/bin/sleep', '600'])")
	runIn(t, k, "1")
	res = runIn(t, k, "p.poll() is None")
	assert.Equal(t, "True", res.Value, "with keep_background_processes the process keeps running")
	snap = snapshotContainer(t, k)
	require.NoError(t, k.Delete(context.Background()), "delete")
	assertGone(t, snap)
	assertHealthy(t, l)
	assertClosedClean(t, keep)
	assertClosedClean(t, l)
}

// TestAdversarialCloneParent: code cannot make a process that is its own sibling
// (CLONE_PARENT): a forked driver's parent is the template, outside the container's process
// tree, where the stopping of background processes would not look. clone3, whose flags a
// seccomp filter cannot read, fails with ENOSYS, and threads and subprocesses (glibc falls back
// to clone) still work.
func TestAdversarialCloneParent(t *testing.T) {
	t.Parallel()
	inBothStarts(t, testAdversarialCloneParent)
}

func testAdversarialCloneParent(t *testing.T) {
	t.Parallel()
	l := sharedLocal(t)
	c := newTestContainer(t, l, sandbox.Spec{})
	res := runIn(t, c, fmt.Sprintf(`import ctypes, errno, os, subprocess, threading
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def call(nr, *args):
    r = libc.syscall(nr, *args)
    if r == 0:
        os.execv('/usr/bin/sleep', ['sleep', '600'])  # the child, had it been made
    return errno.errorcode.get(ctypes.get_errno(), r) if r < 0 else 'made'
out = [call(%d, 0x8000 | 17, 0, 0, 0, 0), call(%d, 0, 0)]
t = threading.Thread(target=out.append, args=('thread',))
t.start(); t.join()
out.append(subprocess.run(['/usr/bin/true']).returncode)  # vfork
out.append(os.waitpid(os.posix_spawn('/usr/bin/true', ['true'], {}), 0)[1])  # clone3, then clone
print(out)`, unix.SYS_CLONE, unix.SYS_CLONE3))
	assert.Equal(t, "['EPERM', 'ENOSYS', 'thread', 0, 0]\n", res.Stdout,
		"CLONE_PARENT refused, clone3 ENOSYS, threads, subprocesses and posix_spawn work")
	assertHealthy(t, l, c)
}

// TestAdversarialCPUQuota: the processes of a container share its CPU quota (cgroup cpu
// controller): two processes spinning in a container allowed a tenth of a core are throttled,
// each having an RLIMIT_CPU of its own notwithstanding.
func TestAdversarialCPUQuota(t *testing.T) {
	t.Parallel()
	inBothStarts(t, testAdversarialCPUQuota)
}

func testAdversarialCPUQuota(t *testing.T) {
	t.Parallel()
	l := newTestLocal(t, Config{CPUQuota: 0.1})
	if l.cgroups == nil {
		t.Skip("no writable cgroup hierarchy here")
	}
	if !l.cgroups.cpu {
		// Where the server is root on a cgroup v1 host with a cpu hierarchy (our machines), the
		// controller must be used; elsewhere it may not be writable.
		if _, mounts, err := readCgroupInfo(); err == nil && os.Geteuid() == 0 && mounts.v1["cpu"] != "" {
			require.Fail(t, "the cpu controller is not used although this root server has a cgroup v1 cpu hierarchy")
		}
		t.Skip("no writable cpu controller here (memory and pids only)")
	}
	c := newTestContainer(t, l, sandbox.Spec{})
	cg := c.(*container).cg
	stat := func(name string) string {
		for _, d := range cg.dirs {
			if b, err := os.ReadFile(filepath.Join(d, name)); err == nil {
				return string(b)
			}
		}
		return ""
	}
	quota := strings.TrimSpace(stat("cpu.cfs_quota_us"))
	if quota == "" { // cgroup v2
		quota = strings.Fields(stat("cpu.max") + " ")[0]
	}
	assert.Equal(t, "10000", quota, "a tenth of a 100 ms period")
	res, err := runTimeout(c, `import os, time
kids = []
for i in range(2):
    pid = os.fork()
    if pid == 0:
        while time.process_time() < 0.2:
            pass
        os._exit(0)
    kids.append(pid)
for pid in kids:
    os.waitpid(pid, 0)
print('done')`, 120*time.Second)
	require.NoError(t, err, "spin")
	assert.Equal(t, "done\n", res.Stdout, "the spinners finished")
	var throttled int
	for _, line := range strings.Split(stat("cpu.stat"), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "nr_throttled" {
			throttled, _ = strconv.Atoi(f[1])
		}
	}
	assert.Greater(t, throttled, 0, "the container was throttled to its quota")
	snap := snapshotContainer(t, c)
	require.NoError(t, c.Delete(context.Background()), "delete")
	assertGone(t, snap)
	assertHealthy(t, l)
	assertClosedClean(t, l)
}

// TestAdversarialMemoryAboveTheHost: a client may not ask for more memory than the operator
// allows (max_memory_limit, by default the host's RAM up to 64g): Manager.CheckSpec refuses it
// as the client's mistake before anything runs, and Create refuses it too.
func TestAdversarialMemoryAboveTheHost(t *testing.T) {
	t.Parallel()
	inBothStarts(t, testAdversarialMemoryAboveTheHost)
}

func testAdversarialMemoryAboveTheHost(t *testing.T) {
	t.Parallel()
	l := sharedLocal(t)
	var si syscall.Sysinfo_t
	require.NoError(t, syscall.Sysinfo(&si), "sysinfo")
	ram := int64(si.Totalram) * int64(si.Unit)
	assert.Equal(t, min(int64(64<<30), ram&^(1<<20-1)), l.maxMem, "the default cap is the host's RAM, at most 64g")
	m := sandbox.NewManager(l, sandbox.ManagerConfig{}, zaptest.NewLogger(t))
	t.Cleanup(func() { assert.NoError(t, m.Close(context.Background()), "close manager") })
	over := sandbox.FormatMemory(l.maxMem + 1<<30)
	if ram < 64<<30 {
		over = "64g" // what a client may ask for, beyond this host
	}
	for _, give := range []string{over, "1t", "lots"} {
		err := m.CheckSpec(sandbox.Spec{MemoryLimit: give})
		require.ErrorIs(t, err, sandbox.ErrInvalidSpec, "memory_limit %q is refused", give)
		var se *sandbox.SpecError
		require.ErrorAs(t, err, &se, "memory_limit %q: a SpecError", give)
		assert.Equal(t, "memory_limit", se.Field, "memory_limit %q: the field is named", give)
		_, err = l.Create(context.Background(), sandbox.Spec{MemoryLimit: give})
		assert.ErrorIs(t, err, sandbox.ErrInvalidSpec, "Create refuses memory_limit %q", give)
	}
	for _, give := range []string{"", "1g", sandbox.FormatMemory(l.maxMem)} {
		assert.NoError(t, m.CheckSpec(sandbox.Spec{MemoryLimit: give}), "memory_limit %q is allowed", give)
	}
	lease, err := m.Acquire(context.Background(), sandbox.AcquireRequest{Identity: "greedy", Spec: sandbox.Spec{MemoryLimit: over}})
	require.NoError(t, err, "acquire (the container starts on the first run)")
	_, err = lease.Run(context.Background(), "1", 0)
	assert.ErrorIs(t, err, sandbox.ErrUnavailable, "a run in a container above the cap does not run")
	lease.Release()

	capped := newTestLocal(t, Config{MaxMemoryLimit: "2g"})
	assert.ErrorIs(t, capped.CheckSpec(sandbox.Spec{MemoryLimit: "4g"}), sandbox.ErrInvalidSpec, "4g is above a 2g cap")
	assert.NoError(t, capped.CheckSpec(sandbox.Spec{MemoryLimit: "2g"}), "2g is within a 2g cap")
	assertHealthy(t, l)
	assertHealthy(t, capped)
	assertClosedClean(t, capped)
}
