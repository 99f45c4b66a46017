package local

// Helper processes: the test binary run again in a role (helperEnv names it), for what a test
// cannot do in its own process: be PID 1, or die without closing its Local.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/codeinterp/codeinterp/pkg/sandbox"
)

const (
	helperEnv      = "CODEINTERP_SANDBOX_HELPER"
	helperStateEnv = "CODEINTERP_SANDBOX_HELPER_STATE"
	// Helpers take uids from ranges of their own, so that they never compete with the test
	// process's Locals, whose state directory they do not share.
	helperPID1UID  = 1_100_000_000
	helperCrashUID = 1_100_100_000
)

// runHelper runs the helper role named by helperEnv, if any, and exits; TestMain calls it first.
func runHelper() {
	role := os.Getenv(helperEnv)
	if role == "" {
		return
	}
	var out any
	var err error
	switch role {
	case "pid1":
		out, err = helperPID1()
	case "crash":
		out, err = helperCrash()
	default:
		err = fmt.Errorf("unknown helper role %q", role)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		os.Exit(2)
	}
	b, _ := json.Marshal(out)
	fmt.Println(string(b))
	os.Exit(0)
}

// pid1Report is what the PID 1 helper saw once it had closed everything.
type pid1Report struct {
	PID     int      `json:"pid"`
	Runs    int      `json:"runs"`
	Zombies []string `json:"zombies"` // "pid name" of every zombie in its PID namespace
	Others  []string `json:"others"`  // every other process but itself
	Left    []string `json:"left"`    // the Local's work directory and cgroups, if still there
}

// helperPID1 runs as PID 1 of its own PID namespace, as the server does as a sidecar
// container's only process: containers created and deleted through a Manager (with a warm
// pool, ephemeral and session leases, a run killed at its deadline, a container killed from
// outside), then closed. Every child it started must have been reaped.
func helperPID1() (pid1Report, error) {
	rep := pid1Report{PID: os.Getpid()}
	l, err := New(Config{StateDir: os.Getenv(helperStateEnv), FirstUID: helperPID1UID, UIDCount: 1000, Start: os.Getenv(testStartEnv),
		InterruptGrace: 200 * time.Millisecond}, zap.NewNop())
	if err != nil {
		return rep, err
	}
	m := sandbox.NewManager(l, sandbox.ManagerConfig{WarmPool: 1}, zap.NewNop())
	ctx := context.Background()
	codes := []string{"print(1)", "import subprocess\nsubprocess.Popen(['/usr/bin/sleep', '600'])",
		"import os\nif os.fork() == 0:\n    os.setsid()\n    import time\n    time.sleep(600)"}
	for i, code := range codes {
		lease, err := m.Acquire(ctx, sandbox.AcquireRequest{Identity: "pid1"})
		if err != nil {
			return rep, fmt.Errorf("acquire %d: %w", i, err)
		}
		if _, err := lease.Run(ctx, code, 30*time.Second); err != nil {
			return rep, fmt.Errorf("run %d: %w", i, err)
		}
		rep.Runs++
		lease.Release()
	}
	// A run that ignores its interrupt: the container is killed.
	lease, err := m.Acquire(ctx, sandbox.AcquireRequest{Identity: "pid1", Session: "s"})
	if err != nil {
		return rep, fmt.Errorf("acquire session: %w", err)
	}
	_, err = lease.Run(ctx, "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    time.sleep(1)", 300*time.Millisecond)
	if err == nil {
		return rep, fmt.Errorf("the stubborn run ended by itself")
	}
	rep.Runs++
	lease.Release()
	// A container whose monitor is killed from outside, then deleted.
	c, err := l.Create(ctx, sandbox.Spec{})
	if err != nil {
		return rep, fmt.Errorf("create: %w", err)
	}
	_ = syscall.Kill(containerPID(c), syscall.SIGKILL)
	if err := c.Delete(ctx); err != nil {
		return rep, fmt.Errorf("delete: %w", err)
	}
	if err := m.Close(ctx); err != nil {
		return rep, fmt.Errorf("close manager: %w", err)
	}
	made := []string{l.workDir}
	if l.cgroups != nil {
		made = append(made, l.cgroups.dirs...)
	}
	if err := l.Close(); err != nil {
		return rep, fmt.Errorf("close local: %w", err)
	}
	for _, p := range made {
		if _, err := os.Stat(p); err == nil {
			rep.Left = append(rep.Left, p)
		}
	}
	// Whatever a dying process leaves is reparented to PID 1 at once; give the kernel a moment
	// to finish the exits already under way.
	for range 50 {
		rep.Zombies, rep.Others = rep.Zombies[:0], rep.Others[:0]
		entries, err := os.ReadDir("/proc")
		if err != nil {
			return rep, err
		}
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == os.Getpid() {
				continue
			}
			stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
			if err != nil {
				continue
			}
			s := string(stat)
			name := s[strings.IndexByte(s, '(')+1 : strings.LastIndexByte(s, ')')]
			state := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])[0]
			desc := fmt.Sprintf("%d %s", pid, name)
			if state == "Z" {
				rep.Zombies = append(rep.Zombies, desc)
			} else {
				rep.Others = append(rep.Others, desc)
			}
		}
		if len(rep.Zombies)+len(rep.Others) == 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	return rep, nil
}

// crashReport is what the crash helper left when it died.
type crashReport struct {
	WorkDir    string   `json:"work_dir"`
	Cgroups    []string `json:"cgroups"`     // the Local's cgroup directories
	Containers []string `json:"containers"`  // the container's cgroup directories
	Processes  []int    `json:"processes"`   // the container's processes
	StartTimes []string `json:"start_times"` // of Processes
	Forked     bool     `json:"forked"`      // the container was forked from a template: it has no monitor
}

// helperCrash starts a Local and a container with a daemon planted in it, reports them, and
// dies without closing anything, as a server killed by the OOM killer would.
func helperCrash() (crashReport, error) {
	var rep crashReport
	l, err := New(Config{StateDir: os.Getenv(helperStateEnv), FirstUID: helperCrashUID, UIDCount: 1000, Start: os.Getenv(testStartEnv)},
		zap.NewNop())
	if err != nil {
		return rep, err
	}
	ctx := context.Background()
	c, err := l.Create(ctx, sandbox.Spec{})
	if err != nil {
		return rep, err
	}
	if _, err := c.Run(ctx, plantDaemon); err != nil {
		return rep, err
	}
	lc := c.(*container)
	rep.Forked = forked(c)
	rep.WorkDir = l.workDir
	if l.cgroups != nil {
		rep.Cgroups = slices.Clone(l.cgroups.dirs)
	}
	if lc.cg != nil {
		rep.Containers = slices.Clone(lc.cg.dirs)
	}
	for pid, start := range containerTree(c) {
		rep.Processes = append(rep.Processes, pid)
		rep.StartTimes = append(rep.StartTimes, start)
	}
	b, _ := json.Marshal(rep)
	fmt.Println(string(b))
	_ = os.Stdout.Sync()
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // not reached
}

// plantDaemon starts a process that leaves its session and ignores the usual signals, and waits
// until it runs.
const plantDaemon = `import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        import signal
        for s in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT):
            signal.signal(s, signal.SIG_IGN)
        open('/tmp/daemon-up', 'w').close()
        while True:
            time.sleep(1)
    os._exit(0)
while not os.path.exists('/tmp/daemon-up'):
    time.sleep(0.01)`

// helperCommand returns the test binary run in role.
func helperCommand(t *testing.T, role, stateDir string, wrap ...string) *exec.Cmd {
	t.Helper()
	self, err := os.Executable()
	require.NoError(t, err, "the test binary")
	args := append(slices.Clone(wrap), self, "-test.run=^$")
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), helperEnv+"="+role, helperStateEnv+"="+stateDir, testStartEnv+"="+testStart(t))
	return cmd
}

// TestLocalReapsEveryChildAsPID1 runs the server's part as PID 1 of a PID namespace (the helper,
// under unshare), as in a sidecar container where nothing else reaps orphans: every container
// it creates and deletes leaves no zombie behind, however it ended.
func TestLocalReapsEveryChildAsPID1(t *testing.T) {
	inBothStarts(t, testLocalReapsEveryChildAsPID1)
}

func testLocalReapsEveryChildAsPID1(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("a PID namespace of its own needs root here")
	}
	sharedLocal(t) // skips without bubblewrap
	unshare, err := exec.LookPath("unshare")
	require.NoError(t, err, "unshare (util-linux)")
	cmd := helperCommand(t, "pid1", t.TempDir(), unshare, "--pid", "--fork", "--mount-proc")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "the PID 1 helper: %s", stderr.String())
	var rep pid1Report
	require.NoError(t, json.Unmarshal(out, &rep), "the helper's report %q", out)
	assert.Equal(t, 1, rep.PID, "the helper ran as PID 1")
	assert.Equal(t, 4, rep.Runs, "the helper ran everything")
	assert.Empty(t, rep.Zombies, "no zombie is left in the server's PID namespace")
	assert.Empty(t, rep.Others, "no process is left in the server's PID namespace")
	assert.Empty(t, rep.Left, "no work directory or cgroup is left")
}

// TestLocalSweepsWhatADeadServerLeft: a server killed without Close leaves its work directory
// and cgroups (and, were its containers' processes to survive it, those); the next Local to
// start on the host removes them.
func TestLocalSweepsWhatADeadServerLeft(t *testing.T) {
	inBothStarts(t, testLocalSweepsWhatADeadServerLeft)
}

func testLocalSweepsWhatADeadServerLeft(t *testing.T) {
	sharedLocal(t) // skips without bubblewrap
	stateDir := t.TempDir()
	cmd := helperCommand(t, "crash", stateDir)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "the crash helper dies: %s", stderr.String())
	require.Equal(t, syscall.SIGKILL, exit.Sys().(syscall.WaitStatus).Signal(), "killed: %s", stderr.String())
	var rep crashReport
	require.NoError(t, json.Unmarshal(out, &rep), "the helper's report %q", out)
	require.DirExists(t, rep.WorkDir, "the dead server left its work directory")
	minProcs := 4
	if rep.Forked {
		minProcs = 3 // no monitor
	}
	require.GreaterOrEqual(t, len(rep.Processes), minProcs, "monitor, init, interpreter and daemon ran")
	tree := map[int]string{}
	for i, pid := range rep.Processes {
		tree[pid] = rep.StartTimes[i]
	}
	// Its containers die with it (their monitor's parent-death signal, then the init's).
	require.Eventually(t, func() bool { return len(survivors(tree)) == 0 }, 30*time.Second, 10*time.Millisecond,
		"the dead server's container processes die with it")
	for _, d := range rep.Cgroups {
		require.DirExists(t, d, "the dead server left its cgroup")
	}

	l := newTestLocal(t, Config{StateDir: stateDir, FirstUID: helperCrashUID, UIDCount: 1000})
	_, err = os.Stat(rep.WorkDir)
	assert.ErrorIs(t, err, os.ErrNotExist, "the dead server's work directory is removed")
	for _, d := range append(rep.Containers, rep.Cgroups...) {
		_, err := os.Stat(d)
		assert.ErrorIs(t, err, os.ErrNotExist, "the dead server's cgroup %s is removed", d)
	}
	entries, err := os.ReadDir(stateDir)
	require.NoError(t, err, "list the state dir")
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	assert.ElementsMatch(t, []string{l.state.id + ".lock", l.state.id + ".json", uidsLockName}, names,
		"only the live Local is registered")
	c := newTestContainer(t, l, sandbox.Spec{})
	assert.Equal(t, "2\n", runIn(t, c, "print(1 + 1)").Stdout, "the new Local works")
	require.NoError(t, c.Delete(context.Background()), "delete")
	assertClosedClean(t, l)
	entries, err = os.ReadDir(stateDir)
	require.NoError(t, err, "list the state dir")
	require.Len(t, entries, 1, "a closed Local leaves only the uid lock file")
}
