package local

// Tests of what the fork start mode adds: containers forked from one template must share
// nothing with it or each other that the exec way would not (random state, writable memory,
// descriptors, signals), and the template's death must not fail a Create.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/codeinterp/codeinterp/pkg/sandbox"
)

// newForkLocal returns a Local in the fork start mode with the libraries preloaded in the
// template (numpy's random state is then the template's until reseeded).
func newForkLocal(t *testing.T, cfg Config) *Local {
	t.Helper()
	hasScientificPython(t)
	cfg.Start, cfg.Preload = StartFork, true
	l := newTestLocal(t, cfg)
	require.NotNil(t, l.tpl, "the fork start mode works here")
	return l
}

// TestForkedRandomness: every random state a container starts with is its own, not the
// template's: random, numpy's legacy global and new generators, os.urandom, uuid4, tempfile's
// names.
func TestForkedRandomness(t *testing.T) {
	t.Parallel()
	l := newForkLocal(t, Config{})
	const draw = `import random, os, uuid, tempfile, numpy
print(random.random(), random.getrandbits(64), numpy.random.random(), numpy.random.randint(1 << 30),
      numpy.random.default_rng().random(), os.urandom(16).hex(), uuid.uuid4(), next(tempfile._get_candidate_names()))`
	seen := map[string]string{}
	for i := range 3 {
		c := newTestContainer(t, l, sandbox.Spec{})
		require.True(t, forked(c), "container %d is forked", i)
		vals := strings.Fields(runIn(t, c, draw).Stdout)
		require.Len(t, vals, 8, "container %d drew every value", i)
		for j, v := range vals {
			key := fmt.Sprintf("%d:%s", j, v)
			assert.NotContains(t, seen, key, "value %d of container %d (%s) is not another container's", j, i, v)
			seen[key] = strconv.Itoa(i)
		}
	}
}

// TestForkedNoSharedWritableMemory: a forked container shares no writable memory with the
// template or another container: no shared writable mapping in any of its processes (copy on
// write only), and what one container writes to the template's objects no other sees.
func TestForkedNoSharedWritableMemory(t *testing.T) {
	t.Parallel()
	l := newForkLocal(t, Config{})
	a := newTestContainer(t, l, sandbox.Spec{})
	b := newTestContainer(t, l, sandbox.Spec{})
	for _, c := range []sandbox.Container{a, b} {
		lc := c.(*container)
		for _, pid := range []int{lc.procs.init, lc.procs.driver} {
			maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
			require.NoError(t, err, "maps of %d", pid)
			for _, line := range strings.Split(string(maps), "\n") {
				f := strings.Fields(line)
				if len(f) > 1 {
					assert.False(t, strings.Contains(f[1], "w") && strings.Contains(f[1], "s"),
						"process %d of container %s has no shared writable mapping: %s", pid, lc.name, line)
				}
			}
		}
	}
	// The driver's own view agrees.
	res := runIn(t, a, "[l for l in open('/proc/self/maps') if l.split()[1][1] == 'w' and l.split()[1][3] == 's']")
	assert.Equal(t, "[]", res.Value, "the driver sees no shared writable mapping")
	// Writes to the template's objects and pages are the writer's alone.
	runIn(t, a, `import numpy, ctypes, sys
numpy.pi = 3
sys.modules['numpy'].__dict__['marker'] = 'a'
x = numpy.zeros(1)
ctypes.memmove(ctypes.c_void_p(id(numpy.e) + 16), b'\x00' * 8, 8)`)
	res = runIn(t, b, "import numpy\nprint(numpy.pi, numpy.e, hasattr(numpy, 'marker'))")
	assert.Equal(t, "3.141592653589793 2.718281828459045 False\n", res.Stdout, "another container sees the template's objects unchanged")
	c := newTestContainer(t, l, sandbox.Spec{})
	res = runIn(t, c, "import numpy\nprint(numpy.pi, numpy.e, hasattr(numpy, 'marker'))")
	assert.Equal(t, "3.141592653589793 2.718281828459045 False\n", res.Stdout, "a new container sees the template's objects unchanged")
}

// TestForkedDescriptors: no descriptor of the template reaches a container: its processes hold
// no socket (the template's is its only one), no pidfd or namespace file, only the protocol's
// pipes, /dev/null and what they opened themselves.
func TestForkedDescriptors(t *testing.T) {
	t.Parallel()
	l := newForkLocal(t, Config{})
	c := newTestContainer(t, l, sandbox.Spec{})
	lc := c.(*container)
	for _, pid := range []int{lc.procs.init, lc.procs.driver} {
		dir := fmt.Sprintf("/proc/%d/fd", pid)
		entries, err := os.ReadDir(dir)
		require.NoError(t, err, "descriptors of %d", pid)
		for _, e := range entries {
			target, err := os.Readlink(dir + "/" + e.Name())
			if err != nil {
				continue
			}
			ok := target == "/dev/null" || strings.HasPrefix(target, "pipe:[") ||
				strings.HasPrefix(target, "/mnt/data") || strings.HasPrefix(target, "/dev/pts")
			assert.True(t, ok, "process %d (init %d) fd %s is not the template's: %s", pid, lc.procs.init, e.Name(), target)
		}
	}
	res := runIn(t, c, `import os
out = []
for fd in sorted(int(n) for n in os.listdir('/proc/self/fd')):
    try:
        out.append((fd, os.readlink('/proc/self/fd/%d' % fd)))
    except OSError:
        pass
print([f for f, p in out if 'socket' in p or 'anon_inode' in p or p.startswith('/proc')])
try:
    os.listdir('/proc/1/fd')
    r = 'listed'
except OSError as e:
    r = type(e).__name__
print(r)`)
	assert.Equal(t, "[]\nPermissionError\n", res.Stdout, "the driver holds no socket, pidfd or namespace; the init's are closed to it")
}

// TestForkedSignals: a container cannot signal the template or another container: they are
// outside its PID namespace, and kill(-1) reaches only its own processes.
func TestForkedSignals(t *testing.T) {
	t.Parallel()
	l := newForkLocal(t, Config{})
	tpl := l.tpl.pid()
	require.NotZero(t, tpl, "the template's pid is known")
	bystander := newTestContainer(t, l, sandbox.Spec{})
	c := newTestContainer(t, l, sandbox.Spec{})
	res := runIn(t, c, fmt.Sprintf(`import os, signal
seen = []
for pid in list(range(1, 4096)) + [%d, %d, %d]:
    try:
        os.kill(pid, 0)
        seen.append(pid)
    except ProcessLookupError:
        pass
    except PermissionError:
        seen.append(-pid)
print(seen, os.getppid())
for pid in [1, %d, %d, %d]:
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass
try:
    os.kill(-1, signal.SIGKILL)  # every process it may signal but itself: none
except ProcessLookupError:
    pass
print('alive')`, tpl, bystander.(*container).initPID, bystander.(*container).procs.driver,
		tpl, bystander.(*container).initPID, bystander.(*container).procs.driver))
	assert.Regexp(t, `^\[1, 2(, 3)?\] 0\nalive\n$`, res.Stdout,
		"the container sees and signals only its init, itself (and its thread); its parent is outside")
	assert.True(t, running(tpl), "the template lives")
	assert.Equal(t, tpl, l.tpl.pid(), "the template was not replaced")
	assertHealthy(t, l, bystander, c)
	assert.True(t, forked(newTestContainer(t, l, sandbox.Spec{})), "the template still forks")
}

// TestForkedTemplateDeath: a template killed is replaced: the containers forked from it keep
// running, the next Create succeeds (the exec way while no template is ready), and containers
// are forked again soon.
func TestForkedTemplateDeath(t *testing.T) {
	t.Parallel()
	l := newForkLocal(t, Config{})
	reg := prometheus.NewRegistry()
	for _, col := range l.Collectors() {
		require.NoError(t, reg.Register(col), "register the local metrics")
	}
	old := newTestContainer(t, l, sandbox.Spec{})
	runIn(t, old, "x = 41")
	tpl := l.tpl.pid()
	require.NotZero(t, tpl, "the template's pid is known")
	require.NoError(t, syscall.Kill(tpl, syscall.SIGKILL), "kill the template")
	next := newTestContainer(t, l, sandbox.Spec{})
	assert.Equal(t, "2\n", runIn(t, next, "print(1 + 1)").Stdout, "the next container works")
	assert.Equal(t, "42", runIn(t, old, "x + 1").Value, "a container of the dead template keeps running")
	require.Eventually(t, func() bool {
		c, err := l.Create(context.Background(), sandbox.Spec{})
		if err != nil {
			return false
		}
		defer c.Delete(context.Background())
		return forked(c) && runIn(t, c, "print(3)").Stdout == "3\n"
	}, time.Minute, 200*time.Millisecond, "containers are forked again from a new template")
	assert.NotEqual(t, tpl, l.tpl.pid(), "a new template runs")
	assert.Equal(t, 1.0, gatherValue(t, reg, "codeinterp_sandbox_local_template_restarts_total"), "the restart is counted")
}

// TestForkedTemplateUnreachable: the template's namespaces and uid are not a container's: its
// processes are in PID, mount, network, user, IPC and UTS namespaces of their own, run as a
// host uid of their own (not the template's root) without capabilities, and cannot enter
// another namespace or create a user namespace.
func TestForkedTemplateUnreachable(t *testing.T) {
	t.Parallel()
	l := newForkLocal(t, Config{})
	c := newTestContainer(t, l, sandbox.Spec{})
	lc := c.(*container)
	assert.Equal(t, StartFork, lc.StartMode(), "a forked container says so")
	tpl := l.tpl.pid()
	for _, ns := range []string{"pid", "mnt", "net", "user", "ipc", "uts", "cgroup"} {
		tplNS, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", tpl, ns))
		require.NoError(t, err, "the template's %s namespace", ns)
		for _, pid := range []int{lc.procs.init, lc.procs.driver} {
			got, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", pid, ns))
			require.NoError(t, err, "the %s namespace of %d", ns, pid)
			assert.NotEqual(t, tplNS, got, "process %d is not in the template's %s namespace", pid, ns)
		}
	}
	assert.Equal(t, strconv.Itoa(lc.uid), hostUID(t, c), "the driver runs as the container's host uid")
	res := runIn(t, c, `import os, ctypes
libc = ctypes.CDLL(None, use_errno=True)
out = []
for ns, flag in (('pid', 0x20000000), ('mnt', 0x20000), ('user', 0x10000000), ('net', 0x40000000)):
    try:
        fd = os.open('/proc/1/ns/' + ns, os.O_RDONLY)
        out.append(ns + (' entered' if libc.setns(fd, flag) == 0 else ' refused'))
    except OSError:
        out.append(ns + ' refused')
for f in ('setuid', 'setgid'):
    try:
        getattr(os, f)(0)
        out.append(f + ' done')
    except OSError:
        out.append(f + ' refused')
out.append('userns ' + ('made' if libc.unshare(0x10000000) == 0 else 'refused'))
st = dict(l.split(':\t', 1) for l in open('/proc/self/status').read().splitlines() if ':\t' in l)
out.append('caps ' + st['CapEff'].strip() + ' ' + st['CapBnd'].strip())
print(', '.join(out))`)
	assert.Equal(t, "pid refused, mnt refused, user refused, net refused, setuid refused, setgid refused, "+
		"userns refused, caps 0000000000000000 0000000000000000\n", res.Stdout, "nothing of the template's is reachable")
}

// TestForkedCloseStopsTemplate: Close stops the template, its keeper and bubblewrap, and
// leaves no process, cgroup or uid behind.
func TestForkedCloseStopsTemplate(t *testing.T) {
	t.Parallel()
	l := newForkLocal(t, Config{})
	c, err := l.Create(context.Background(), sandbox.Spec{})
	require.NoError(t, err, "Create")
	runIn(t, c, plantDaemon)
	snap := snapshotContainer(t, c)
	tree := procTree(l.tpl.gen.cmd.Process.Pid)
	require.GreaterOrEqual(t, len(tree), 4, "bubblewrap, its init, the keeper and the template run")
	assertClosedClean(t, l)
	assert.Empty(t, survivors(tree), "nothing of the template outlives Close")
	assertGone(t, snap)
	assert.Empty(t, l.uids.held, "every uid is given back")
}

// gatherValue returns the value of the counter or gauge name in reg.
func gatherValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err, "gather")
	for _, mf := range mfs {
		if mf.GetName() == name {
			m := mf.GetMetric()[0]
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// TestForkUnavailableFallsBack: where the template cannot start (here an interpreter that
// refuses to run it), New says so, the start-mode metric says exec, and containers start the
// exec way.
func TestForkUnavailableFallsBack(t *testing.T) {
	t.Parallel()
	// Not under /tmp, which every container mounts a tmpfs of its own over.
	dir, err := os.MkdirTemp("/var/tmp", "fork-wrapper-")
	require.NoError(t, err, "make the wrapper's directory")
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755), "make the wrapper's directory readable by containers")
	python := dir + "/python3"
	script := "#!/bin/sh\ncase \"$*\" in *codeinterp-template*) echo 'no template here' >&2; exit 3;; esac\nexec /usr/bin/python3 \"$@\"\n"
	require.NoError(t, os.WriteFile(python, []byte(script), 0o755), "write the wrapper")
	l, err := New(Config{Start: StartFork, Python: python, ReadOnlyPaths: []string{dir}}, zaptest.NewLogger(t))
	require.NoError(t, err, "New")
	t.Cleanup(func() { assert.NoError(t, l.Close(), "close Local") })
	assert.Nil(t, l.tpl, "no template")
	reg := prometheus.NewRegistry()
	for _, col := range l.Collectors() {
		require.NoError(t, reg.Register(col), "register the local metrics")
	}
	mfs, err := reg.Gather()
	require.NoError(t, err, "gather")
	modes := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() == "codeinterp_sandbox_local_start_mode" {
			for _, m := range mf.GetMetric() {
				modes[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
			}
		}
	}
	assert.Equal(t, map[string]float64{"exec": 1}, modes, "the start mode metric says exec")
	assert.Equal(t, 1.0, gatherValue(t, reg, "codeinterp_sandbox_local_fork_unavailable_total"), "the fallback is counted")
	c := newTestContainer(t, l, sandbox.Spec{})
	assert.False(t, forked(c), "the container started the exec way")
	assert.Equal(t, StartExec, c.(*container).StartMode(), "and says so")
	assert.Equal(t, "1\n", runIn(t, c, "print(1)").Stdout, "and works")
}

// TestForkedTemplateSandboxDeath: when the template's bubblewrap itself dies (and with it every
// container forked from it), the next Create still succeeds (the exec way), a new bubblewrap
// and template are started in the background, and containers are forked again.
func TestForkedTemplateSandboxDeath(t *testing.T) {
	t.Parallel()
	l := newForkLocal(t, Config{})
	old := newTestContainer(t, l, sandbox.Spec{})
	l.tpl.mu.Lock()
	bwrap := l.tpl.gen.cmd.Process.Pid
	l.tpl.mu.Unlock()
	require.NoError(t, syscall.Kill(-bwrap, syscall.SIGKILL), "kill the template's bubblewrap")
	require.Eventually(t, func() bool { return !old.(*container).Alive() }, 30*time.Second, 10*time.Millisecond,
		"the containers of the dead template die with it")
	next := newTestContainer(t, l, sandbox.Spec{})
	assert.Equal(t, "2\n", runIn(t, next, "print(1 + 1)").Stdout, "the next container works")
	require.Eventually(t, func() bool {
		c, err := l.Create(context.Background(), sandbox.Spec{})
		if err != nil {
			return false
		}
		defer c.Delete(context.Background())
		return forked(c) && runIn(t, c, "print(3)").Stdout == "3\n"
	}, time.Minute, 200*time.Millisecond, "containers are forked again from a new template")
}

// TestForkedTemplateRotation: after its maximum of forks the template is replaced by a new one
// (a new address layout); the containers of the old one keep running until deleted, and the
// old one's processes end once they are.
func TestForkedTemplateRotation(t *testing.T) {
	t.Parallel()
	l := newForkLocal(t, Config{})
	l.tpl.mu.Lock()
	l.tpl.maxForks = 2
	first := l.tpl.gen
	l.tpl.mu.Unlock()
	a := newTestContainer(t, l, sandbox.Spec{})
	b := newTestContainer(t, l, sandbox.Spec{})
	runIn(t, a, "x = 1")
	require.Eventually(t, func() bool {
		l.tpl.mu.Lock()
		defer l.tpl.mu.Unlock()
		return l.tpl.gen != first && l.tpl.gen != nil
	}, time.Minute, 20*time.Millisecond, "a new template replaces the one that forked its maximum")
	assert.Equal(t, int64(1), l.tpl.rotations.Load(), "one rotation")
	c := newTestContainer(t, l, sandbox.Spec{})
	assert.True(t, forked(c), "the new template forks")
	assert.Equal(t, "2", runIn(t, a, "x + 1").Value, "a container of the old template keeps its state")
	tree := procTree(first.cmd.Process.Pid)
	require.NoError(t, a.Delete(context.Background()), "delete a")
	require.NoError(t, b.Delete(context.Background()), "delete b")
	require.Eventually(t, func() bool {
		select {
		case <-first.exited:
			return true
		default:
			return false
		}
	}, 30*time.Second, 10*time.Millisecond, "the old template's bubblewrap ends with its last container")
	require.Eventually(t, func() bool { return len(survivors(tree)) == 0 }, 30*time.Second, 10*time.Millisecond,
		"nothing of the old template is left")
}

// TestHurryCgroupMoveMovesNothing: starting the grace period of a cgroup move leaves the server
// in its cgroups, and writes nothing where the server is not (a dir whose Local directory is
// not directly under the server's cgroup: a write there would move the server into it).
func TestHurryCgroupMoveMovesNothing(t *testing.T) {
	l := newTestLocal(t, Config{Start: StartExec})
	if l.cgroups == nil {
		t.Skip("no cgroups here")
	}
	before, err := os.ReadFile("/proc/self/cgroup")
	require.NoError(t, err)
	own := l.cgroups.dirs[0]
	for _, dir := range []string{own + "/container", own + "/nested/container"} {
		hurryCgroupMove(dir)
		after, err := os.ReadFile("/proc/self/cgroup")
		require.NoError(t, err)
		assert.Equal(t, string(before), string(after), "the server's cgroups after hurrying a move into %s", dir)
	}
	procs, err := os.ReadFile(own + "/cgroup.procs")
	require.NoError(t, err)
	assert.Empty(t, strings.TrimSpace(string(procs)), "no process in the Local's own cgroup")
}

// makerAndAhead returns the host pids of l's maker (the template's one child in its own PID
// namespace) and of the inits it made that no container has claimed yet (its children still
// root, whose pidfd the template holds: one being set up is not handed over yet), waiting until
// there is one made ahead.
func makerAndAhead(t *testing.T, l *Local) (maker int, ahead []int) {
	t.Helper()
	require.Eventually(t, func() bool {
		tpl := l.tpl.pid()
		if tpl == 0 {
			return false
		}
		tplNS, err := pidNamespace(tpl)
		if err != nil {
			return false
		}
		maker, ahead = 0, nil
		for _, pid := range children(tpl) {
			if ns, err := pidNamespace(pid); err == nil && ns == tplNS {
				maker = pid
			}
		}
		held := pidfdsHeld(tpl)
		for _, pid := range children(maker) {
			if procStatus(pid, "Uid:") == "0" && held[pid] {
				ahead = append(ahead, pid)
			}
		}
		return maker != 0 && len(ahead) == 1
	}, 30*time.Second, 10*time.Millisecond, "the maker runs and has one init made ahead")
	return maker, ahead
}

// pidfdsHeld returns the (host) pids of the processes whose pidfds process pid holds.
func pidfdsHeld(pid int) map[int]bool {
	held := map[int]bool{}
	dir := fmt.Sprintf("/proc/%d/fdinfo", pid)
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		b, err := os.ReadFile(dir + "/" + e.Name())
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "Pid:"); ok {
				if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && n > 0 {
					held[n] = true
				}
			}
		}
	}
	return held
}

// procStatus returns the first field of a line of /proc/<pid>/status, or "".
func procStatus(pid int, key string) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, key); ok {
			if f := strings.Fields(rest); len(f) > 0 {
				return f[0]
			}
		}
	}
	return ""
}

// TestForkedInitMadeAheadIsReplaced: the init made ahead for the next container, killed from
// outside, is replaced as that container starts: the start neither fails nor falls back to
// the exec way.
func TestForkedInitMadeAheadIsReplaced(t *testing.T) {
	t.Parallel()
	l := newForkLocal(t, Config{})
	_, ahead := makerAndAhead(t, l)
	require.NoError(t, syscall.Kill(ahead[0], syscall.SIGKILL), "kill the init made ahead")
	require.Eventually(t, func() bool { return !running(ahead[0]) }, 10*time.Second, 5*time.Millisecond, "the init is gone")
	c := newTestContainer(t, l, sandbox.Spec{})
	assert.True(t, forked(c), "the container is forked")
	assert.Equal(t, "1\n", runIn(t, c, "print(1)").Stdout, "and works")
	assert.Zero(t, testutil.ToFloat64(l.metrics.fallbacks), "no container started the exec way")
}

// TestForkedInitMadeAheadEndsWithItsTemplate: an init made ahead that no container claimed
// ends when its template does; the ones containers claimed live on with them.
func TestForkedInitMadeAheadEndsWithItsTemplate(t *testing.T) {
	t.Parallel()
	l := newForkLocal(t, Config{})
	c := newTestContainer(t, l, sandbox.Spec{})
	runIn(t, c, "x = 41")
	_, ahead := makerAndAhead(t, l)
	require.NoError(t, syscall.Kill(l.tpl.pid(), syscall.SIGKILL), "kill the template")
	require.Eventually(t, func() bool { return !running(ahead[0]) }, 10*time.Second, 5*time.Millisecond,
		"the init made ahead ends with its template")
	assert.Equal(t, "42", runIn(t, c, "x + 1").Value, "a container of the dead template keeps running")
}

// TestForkedMakerDeath: the maker killed, the template gives way to a new one (and maker):
// every Create meanwhile succeeds, and containers are forked again soon.
func TestForkedMakerDeath(t *testing.T) {
	t.Parallel()
	l := newForkLocal(t, Config{})
	maker, _ := makerAndAhead(t, l)
	old := newTestContainer(t, l, sandbox.Spec{}) // takes the init made ahead
	require.NoError(t, syscall.Kill(maker, syscall.SIGKILL), "kill the maker")
	var failed []error // Eventually's condition runs on a goroutine of its own: no require there
	require.Eventually(t, func() bool {
		c, err := l.Create(context.Background(), sandbox.Spec{})
		if err != nil {
			failed = append(failed, err)
			return false
		}
		defer c.Delete(context.Background())
		res, err := runTimeout(c, "print(3)", 30*time.Second)
		if err != nil || res.Stdout != "3\n" {
			failed = append(failed, fmt.Errorf("run: %q, %v", res.Stdout, err))
			return false
		}
		return forked(c)
	}, time.Minute, 50*time.Millisecond, "containers are forked again from a new template")
	assert.Empty(t, failed, "every Create and run succeeded while the template was replaced")
	assert.Equal(t, "2\n", runIn(t, old, "print(1 + 1)").Stdout, "a container forked before keeps running")
}

// TestForkedSlowMaker: a maker that makes no init in time (here: stopped) costs the start that
// waits for it the exec way, not the template; the init it makes late serves a later start.
func TestForkedSlowMaker(t *testing.T) {
	t.Parallel()
	l := newForkLocal(t, Config{})
	maker, _ := makerAndAhead(t, l)
	tpl := l.tpl.pid()
	require.NoError(t, syscall.Kill(maker, syscall.SIGSTOP), "stop the maker")
	t.Cleanup(func() { _ = syscall.Kill(maker, syscall.SIGCONT) })
	a := newTestContainer(t, l, sandbox.Spec{})
	assert.True(t, forked(a), "the first container takes the init made ahead")
	b := newTestContainer(t, l, sandbox.Spec{})
	assert.False(t, forked(b), "the next, for which no init comes in time, starts the exec way")
	assert.Equal(t, "2\n", runIn(t, b, "print(1 + 1)").Stdout, "and works")
	require.NoError(t, syscall.Kill(maker, syscall.SIGCONT), "let the maker go on")
	c := newTestContainer(t, l, sandbox.Spec{})
	assert.True(t, forked(c), "the init made late serves the next container")
	assert.Equal(t, "3\n", runIn(t, c, "print(1 + 2)").Stdout, "which works")
	assert.Equal(t, tpl, l.tpl.pid(), "the same template forked it")
}

// TestForkedTemplateDiesWithARequest: a template that dies holding a fork request (here: its
// maker killed while it waits for an init) costs that one container the exec way; the template
// the keeper starts instead forks the next.
func TestForkedTemplateDiesWithARequest(t *testing.T) {
	t.Parallel()
	l := newForkLocal(t, Config{})
	maker, _ := makerAndAhead(t, l)
	require.NoError(t, syscall.Kill(maker, syscall.SIGSTOP), "stop the maker")
	t.Cleanup(func() { _ = syscall.Kill(maker, syscall.SIGKILL) })
	a := newTestContainer(t, l, sandbox.Spec{})
	assert.True(t, forked(a), "the first container takes the init made ahead")
	type created struct {
		c   sandbox.Container
		err error
	}
	done := make(chan created, 1)
	go func() {
		c, err := l.Create(context.Background(), sandbox.Spec{})
		done <- created{c, err}
	}()
	// The template waits (up to 5 s) for the init the stopped maker does not make.
	time.Sleep(time.Second)
	require.NoError(t, syscall.Kill(maker, syscall.SIGKILL), "kill the maker")
	b := <-done
	require.NoError(t, b.err, "Create")
	t.Cleanup(func() { assert.NoError(t, b.c.Delete(context.Background()), "delete b") })
	assert.False(t, forked(b.c), "the container whose request died with the template starts the exec way")
	assert.Equal(t, "2\n", runIn(t, b.c, "print(1 + 1)").Stdout, "and works")
	c := newTestContainer(t, l, sandbox.Spec{})
	assert.True(t, forked(c), "the template the keeper started forks the next")
	assert.Equal(t, "3\n", runIn(t, c, "print(1 + 2)").Stdout, "which works")
	assert.Equal(t, "4\n", runIn(t, a, "print(2 + 2)").Stdout, "a container of the dead template keeps running")
}

// cpuTicks returns the CPU time (user and system, in clock ticks) process pid has used.
func cpuTicks(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	require.NoError(t, err, "stat of %d", pid)
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	utime, err1 := strconv.Atoi(f[11])
	stime, err2 := strconv.Atoi(f[12])
	require.NoError(t, errors.Join(err1, err2), "utime and stime of %d", pid)
	return utime + stime
}

// TestForkedStopsDoNotWakeTheTemplate: a forked driver is the template's child, and code may
// stop and continue it at will; the template (whose CPU is no container's) is woken only when
// a child exits, not by each stop (SA_NOCLDSTOP).
func TestForkedStopsDoNotWakeTheTemplate(t *testing.T) {
	t.Parallel()
	l := newForkLocal(t, Config{})
	c := newTestContainer(t, l, sandbox.Spec{})
	tpl := l.tpl.pid()
	before := cpuTicks(t, tpl)
	res := runIn(t, c, `import os, signal, time
pid = os.fork()
if pid == 0:
    for _ in range(4000):
        os.kill(2, signal.SIGSTOP)
        time.sleep(0.0002)
        os.kill(2, signal.SIGCONT)
        time.sleep(0.0002)
    os._exit(0)
os.waitpid(pid, 0)
print('done')`)
	require.Equal(t, "done\n", res.Stdout, "the code stopped and continued its driver")
	// Woken by each stop and continue, the template spent 0.12 s (12 ticks) here; not woken, none.
	assert.Less(t, cpuTicks(t, tpl)-before, 4, "the template's CPU time, in ticks, while the driver was stopped 4000 times")
}
