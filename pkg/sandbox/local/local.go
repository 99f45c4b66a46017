// Package local is the bubblewrap backend of package sandbox: each container is one persistent
// Python process (driver.py) under bubblewrap, driven over pipes with a length-prefixed marshal
// protocol, with rlimits, a seccomp filter and, where the host allows, a cgroup of its own.
package local

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/codeinterp/codeinterp/pkg/egress"
	"github.com/codeinterp/codeinterp/pkg/sandbox"
)

//go:embed driver.py
var driverSource string

// Paths inside the container.
const (
	dataDir     = "/mnt/data"
	mplDir      = "/tmp/.matplotlib"
	sandboxUID  = 1000 // the code's uid and gid inside its user namespace
	sandboxName = "sandbox"
	maxFiles    = 10000 // directory entries under /mnt/data scanned after each run
	// maxFileListBytes bounds the bytes of the paths one run lists: 1 MiB, some 250 of the
	// longest paths, or all maxFiles with 100-byte paths.
	maxFileListBytes = 1 << 20
	maxImages        = 1000 // images one run returns; more mark it truncated
)

// Config configures a Local. The zero value works where bubblewrap and /usr/bin/python3 are
// installed. Fields mirror the LocalSandbox and Sandbox config messages.
type Config struct {
	// Python is the interpreter run in each container. Default "/usr/bin/python3" (Debian's,
	// where numpy, pandas and matplotlib are installed; another python3 may be first on PATH).
	Python string
	// Bwrap is the bubblewrap binary, a path or a name looked up on PATH. Default "bwrap".
	Bwrap string
	// WorkDir is a host directory for files the backend shares read-only with every container
	// (an /etc/passwd naming the sandbox user, matplotlib's font cache), and, without
	// isolation, for each container's data directory. Default: a new directory under the
	// system temporary directory, removed by Close.
	WorkDir string
	// CPUSeconds caps the CPU time of each process of a container (RLIMIT_CPU), counted from
	// the container's start; the interpreter's total over all its runs counts. Default 300.
	CPUSeconds int
	// MaxProcesses caps the processes and threads of a container (RLIMIT_NPROC, counted in the
	// container's own user namespace). Default 64.
	MaxProcesses int
	// MaxFileBytes caps the size of one file a container writes (RLIMIT_FSIZE). Default 100 MiB.
	MaxFileBytes int64
	// OutputLimit caps, per run, each of stdout, stderr, the value, the error's value and
	// traceback, and the images together, in bytes. Cut text ends with a visible note. Default
	// 1 MiB.
	OutputLimit int
	// DefaultMemoryLimit is the memory of a container whose [sandbox.Spec] names none: "1g",
	// "4g", "16g" or "64g" (any size with a k/m/g/t suffix is accepted). It is the
	// address-space limit (RLIMIT_AS) of each process of the container. Default "1g".
	DefaultMemoryLimit string
	// DataBytes is the size of /mnt/data, a tmpfs private to the container. Default 512 MiB.
	DataBytes int64
	// TmpBytes is the size of each of /tmp and /dev/shm, tmpfs private to the container.
	// Default 64 MiB.
	TmpBytes int64
	// FirstUID and UIDCount are the host uids (and gids: the same numbers) containers run as
	// when the server runs as root: each live container has one of its own, so that per-user
	// kernel limits and counters (inotify instances and watches, pending signals, POSIX message
	// queues, the process count) are not one pool shared by all containers. No two containers
	// on the host sharing StateDir get the same uid. The uids must belong to no one else on the
	// host and not be 0. Defaults 1000000000 and 65536. A server not running as root runs
	// containers as its own ids.
	FirstUID, UIDCount int
	// StateDir is a host directory shared by the Locals of a host: which uids are in use, and
	// what each Local made (work directory, cgroups), so that a Local starting up removes what
	// one whose server died without Close left. Default /run/codeinterp for root, else
	// codeinterp-state-<uid> under the system temporary directory.
	StateDir string
	// MaxMemoryLimit is the largest memory a container may have ([sandbox.Spec].MemoryLimit,
	// and DefaultMemoryLimit): a size such as "16g". Default: the smaller of 64g and the host's
	// RAM.
	MaxMemoryLimit string
	// CPUQuota is the CPU each container may use, in cores (0.5 = half a core), summed over its
	// processes, where the cpu cgroup controller is available (cgroup v1's cpu hierarchy, or a
	// cgroup v2 directory delegating cpu). Default 1.
	CPUQuota float64
	// KeepBackgroundProcesses lets processes a run started keep running after it ended. By
	// default, when a run ends, every process of the container but its interpreter (and
	// bubblewrap's init) is killed.
	KeepBackgroundProcesses bool
	// InterruptGrace is how long a run may take to stop after its time is up and it was
	// interrupted (KeyboardInterrupt), before the container is killed. Default 2s.
	InterruptGrace time.Duration
	// ReadOnlyPaths are more host paths made visible read-only at the same place.
	ReadOnlyPaths []string
	// Cgroups places each container in a cgroup of its own that caps the memory of all its
	// processes and tmpfs (the memory limit plus DataBytes and twice TmpBytes) and its
	// processes: "auto" (or "", the default) where the server may create cgroups (cgroup v1's
	// memory and pids hierarchies, or a cgroup v2 directory delegating both controllers),
	// "off", or the absolute path of a cgroup v2 directory delegating both controllers. The
	// rlimits apply either way.
	Cgroups string
	// UnsafeNoIsolation runs Python without bubblewrap, with the server's own rights: for
	// development machines without bubblewrap only. The rlimits still apply, nothing else does.
	UnsafeNoIsolation bool
	// Preload imports numpy, pandas and matplotlib (those installed) when a container starts,
	// and renders one figure, so that the first run using them is fast. With the fork start
	// mode the template imports them once.
	Preload bool
	// Start is how containers start: StartFork ("fork", the default), each forked from a
	// template interpreter that has imported the preloaded libraries once, then isolated on its
	// own (template.go); or StartExec ("exec"), each a new bubblewrap and interpreter. Where
	// the host does not allow forking (the server not root, no user namespaces, the test
	// container failing), New says so in the log and the codeinterp_sandbox_local_start_mode
	// metric, and containers start the exec way.
	Start string
	// Network is the operator's say on network policies: refused unless Network.Enabled.
	Network NetworkConfig
}

// Local is the local backend: each container is one persistent Python process driven over
// pipes, run under bubblewrap with no network, its own PID, IPC, UTS, user and mount
// namespaces, a read-only system, private /tmp and /mnt/data, an empty environment, no
// capabilities, a seccomp filter and rlimits. Safe for concurrent use. Close it to kill what is
// left and remove its WorkDir.
type Local struct {
	cfg     Config
	log     *zap.Logger
	python  string
	bwrap   string // "" without isolation
	workDir string
	ownWork bool
	args    []string     // bubblewrap arguments up to the command
	env     []string     // the container's whole environment
	seccomp []byte       // filter program; nil when none
	shared  []sharedFile // copied into every container, from descriptor sharedFD on
	setUID  bool         // the server is root: run containers as uids of their own
	maxMem  int64        // the largest memory limit a container may have
	state   *hostState   // the registration in the state directory
	uids    *uidPool
	// driverCode is the driver compiled by the containers' interpreter (a marshalled code
	// object, in hex): containers skip compiling it, 3.5 ms of a cold start under load.
	driverCode string
	cgroups    *cgroupParents // nil when containers get no cgroup
	// tpl forks containers in the fork start mode; nil when they start the exec way.
	tpl     *forkTemplate
	metrics localMetrics

	// mu guards the fields below.
	mu     sync.Mutex
	live   map[*container]struct{} // started and not yet deleted
	closed bool

	starts sync.WaitGroup // starts in progress, added to under mu while not closed
	wg     sync.WaitGroup // goroutines of all containers
}

var _ sandbox.Provider = (*Local)(nil)

// New checks the configuration, prepares WorkDir and starts one sandbox to prove that
// bubblewrap works here (and to build matplotlib's font cache once for every container). It
// fails when bubblewrap is missing or unusable, unless UnsafeNoIsolation is set.
//
// It marks every descriptor the process holds from 3 up close-on-exec, for the whole process:
// a descriptor the server inherited without the flag would otherwise reach every container (a
// socket would reach the network from a sandbox that has none). A descriptor the process opens
// later without the flag is closed by each container's driver before any code runs.
func New(cfg Config, log *zap.Logger) (*Local, error) {
	if log == nil {
		log = zap.NewNop()
	}
	setDefaults(&cfg)
	defMem, err := sandbox.ParseMemory(cfg.DefaultMemoryLimit)
	if err != nil {
		return nil, fmt.Errorf("new local sandbox: default memory limit: %w", err)
	}
	maxMem, err := sandbox.ParseMemory(cfg.MaxMemoryLimit)
	if err != nil {
		return nil, fmt.Errorf("new local sandbox: max memory limit: %w", err)
	}
	if defMem > maxMem {
		return nil, fmt.Errorf("new local sandbox: the default memory limit %s is above the max memory limit %s",
			cfg.DefaultMemoryLimit, cfg.MaxMemoryLimit)
	}
	if cfg.FirstUID <= 0 || cfg.UIDCount <= 0 || int64(cfg.FirstUID)+int64(cfg.UIDCount) > 1<<32-2 {
		return nil, fmt.Errorf("new local sandbox: uid range %d+%d: want a first uid above 0 and a count above 0 within 32 bits",
			cfg.FirstUID, cfg.UIDCount)
	}
	if err := egress.CheckPolicy(egress.Policy{AllowedDomains: cfg.Network.AllowedDomains}); err != nil {
		return nil, fmt.Errorf("new local sandbox: network allowed domains: %w", err)
	}
	if cfg.Network.Enabled && (cfg.UnsafeNoIsolation || os.Geteuid() != 0) {
		// The proxy listens inside each container's network namespace (setns: CAP_SYS_ADMIN);
		// without isolation the code has the host's network and nothing to enforce.
		return nil, errors.New("new local sandbox: network policies need sandbox isolation and a server running as root")
	}
	if cfg.CPUQuota < 0.01 {
		return nil, fmt.Errorf("new local sandbox: cpu quota %v is below 0.01 of a core", cfg.CPUQuota)
	}
	l := &Local{
		cfg:     cfg,
		log:     log.Named("sandbox.local"),
		metrics: newLocalMetrics(),
		live:    map[*container]struct{}{},
		setUID:  os.Geteuid() == 0,
		maxMem:  maxMem,
	}
	// Before the first sandbox starts: no descriptor of the server may reach one.
	if err := closeOnExecInherited(); err != nil {
		l.log.Warn("descriptors the server inherited may reach containers (their drivers close them)", zap.Error(err))
	}
	python, err := exec.LookPath(cfg.Python)
	if err != nil {
		return nil, fmt.Errorf("new local sandbox: find python %q: %w", cfg.Python, err)
	}
	l.python = python
	if !cfg.UnsafeNoIsolation {
		bw, err := exec.LookPath(cfg.Bwrap)
		if err != nil {
			return nil, fmt.Errorf("new local sandbox: bubblewrap %q not found (install bubblewrap, "+
				"or set unsafe_no_isolation on a development machine): %w", cfg.Bwrap, err)
		}
		l.bwrap = bw
		if l.seccomp, err = seccompProgram(); err != nil {
			return nil, fmt.Errorf("new local sandbox: %w", err)
		}
	}
	if err := l.setUp(); err != nil {
		l.tearDown()
		return nil, fmt.Errorf("new local sandbox: %w", err)
	}
	if l.cgroups != nil {
		l.log.Info("containers get their own cgroups", zap.String("under", l.cgroups.describe()),
			zap.Bool("cpu_quota", l.cgroups.cpu), zap.Float64("cpus", cfg.CPUQuota))
	} else if !cfg.UnsafeNoIsolation {
		l.log.Info("no writable cgroup hierarchy: containers are limited by rlimits only")
	}
	if l.setUID && l.isolated() {
		l.log.Info("containers run as host uids of their own", zap.Int("first_uid", cfg.FirstUID), zap.Int("uid_count", cfg.UIDCount))
	} else if !cfg.UnsafeNoIsolation {
		l.log.Warn("server is not root: containers run as the server's own host uid, isolated by namespaces only")
	}
	if cfg.UnsafeNoIsolation {
		l.log.Warn("sandbox isolation is OFF (unsafe_no_isolation): code runs with the server's rights")
	}
	l.chooseStart()
	return l, nil
}

// chooseStart starts the fork template when the fork start mode is asked for and the host
// allows it, and says how containers start.
func (l *Local) chooseStart() {
	start := l.cfg.Start
	if !l.isolated() {
		start = StartExec // nothing to fork into: the interpreter runs as the server
	}
	switch start {
	case StartFork:
		if _, err := l.startTemplate(); err != nil {
			l.metrics.forkUnavailable.Inc()
			l.log.Warn("the fork start mode is not available here: containers start the exec way (a new bubblewrap and interpreter each)",
				zap.Error(err))
			break
		}
		l.metrics.mode.WithLabelValues(StartFork).Set(1)
		l.log.Info("containers start forked from a template")
		return
	case StartExec:
	default:
		l.log.Warn("unknown start mode: containers start the exec way", zap.String("start", l.cfg.Start))
	}
	l.metrics.mode.WithLabelValues(StartExec).Set(1)
	l.log.Info("containers start the exec way: a new bubblewrap and interpreter each")
}

// setUp registers the Local in the state directory (sweeping what dead ones left), prepares the
// work directory, runs the probe and makes the cgroups. tearDown undoes what it did.
func (l *Local) setUp() error {
	var err error
	if l.state, err = openState(l.cfg.StateDir); err != nil {
		return err
	}
	if n := l.state.sweep(l.log); n > 0 {
		l.log.Info("removed what sandbox backends that did not shut down left", zap.Int("backends", n))
	}
	l.uids = newUIDPool(l.cfg.FirstUID, l.cfg.UIDCount, l.state.uids)
	if err := l.prepareWorkDir(); err != nil {
		return err
	}
	if err := l.recordState(); err != nil {
		return err
	}
	if err := l.probe(); err != nil {
		return err
	}
	if l.isolated() {
		if l.cgroups, err = newCgroupParents(l.cfg.Cgroups, l.state.id, l.cfg.CPUQuota > 0); err != nil {
			return err
		}
		if err := l.recordState(); err != nil {
			return err
		}
		// No container reads the work directory: what they need is copied in.
		if err := os.Chmod(l.workDir, 0o700); err != nil {
			return fmt.Errorf("make work dir private: %w", err)
		}
	}
	if l.shared, err = l.listShared(); err != nil {
		return err
	}
	l.args = l.bwrapArgs(false, nil)
	return nil
}

// recordState records the work directory and cgroups the Local made.
func (l *Local) recordState() error {
	var info stateInfo
	if l.ownWork {
		info.WorkDir = l.workDir
	}
	if l.cgroups != nil {
		info.Cgroups = slices.Clone(l.cgroups.dirs)
	}
	return l.state.record(info)
}

// tearDown removes the cgroups and work directory and ends the registration.
func (l *Local) tearDown() {
	if l.cgroups != nil {
		l.cgroups.remove()
	}
	l.removeWorkDir()
	if l.state != nil {
		l.state.close()
	}
}

// Defaults of a Config's fields, used where a field is zero. The configuration's defaults
// (pkg/config) are these.
const (
	DefaultPython         = "/usr/bin/python3"
	DefaultBwrap          = "bwrap"
	DefaultCPUSeconds     = 300
	DefaultMaxProcesses   = 64
	DefaultMaxFileBytes   = 100 << 20
	DefaultOutputLimit    = 1 << 20
	DefaultMemoryLimit    = "1g"
	DefaultDataBytes      = 512 << 20
	DefaultTmpBytes       = 64 << 20
	DefaultFirstUID       = 1_000_000_000
	DefaultUIDCount       = 65536
	DefaultCPUQuota       = 1.0
	DefaultInterruptGrace = 2 * time.Second
	DefaultStart          = StartFork
)

func setDefaults(cfg *Config) {
	if cfg.Python == "" {
		cfg.Python = DefaultPython
	}
	if cfg.Bwrap == "" {
		cfg.Bwrap = DefaultBwrap
	}
	if cfg.CPUSeconds <= 0 {
		cfg.CPUSeconds = DefaultCPUSeconds
	}
	if cfg.MaxProcesses <= 0 {
		cfg.MaxProcesses = DefaultMaxProcesses
	}
	if cfg.MaxFileBytes <= 0 {
		cfg.MaxFileBytes = DefaultMaxFileBytes
	}
	if cfg.OutputLimit <= 0 {
		cfg.OutputLimit = DefaultOutputLimit
	}
	if cfg.DefaultMemoryLimit == "" {
		cfg.DefaultMemoryLimit = DefaultMemoryLimit
	}
	if cfg.DataBytes <= 0 {
		cfg.DataBytes = DefaultDataBytes
	}
	if cfg.TmpBytes <= 0 {
		cfg.TmpBytes = DefaultTmpBytes
	}
	if cfg.FirstUID == 0 {
		cfg.FirstUID = DefaultFirstUID
	}
	if cfg.UIDCount == 0 {
		cfg.UIDCount = DefaultUIDCount
	}
	if cfg.StateDir == "" {
		cfg.StateDir = defaultStateDir()
	}
	if cfg.MaxMemoryLimit == "" {
		cfg.MaxMemoryLimit = sandbox.FormatMemory(defaultMaxMemory())
	}
	if cfg.CPUQuota == 0 {
		cfg.CPUQuota = DefaultCPUQuota
	}
	if cfg.InterruptGrace <= 0 {
		cfg.InterruptGrace = DefaultInterruptGrace
	}
	if cfg.Start == "" {
		cfg.Start = DefaultStart
	}
}

// ResolveSpec returns spec with the backend's defaults filled in and its memory limit in
// canonical form, so that equal containers have equal specs. An invalid memory limit is kept
// as given (Create rejects it).
func (l *Local) ResolveSpec(spec sandbox.Spec) sandbox.Spec {
	mem := spec.MemoryLimit
	if mem == "" {
		mem = l.cfg.DefaultMemoryLimit
	}
	if n, err := sandbox.ParseMemory(mem); err == nil {
		spec.MemoryLimit = sandbox.FormatMemory(n)
	}
	return spec
}

// CheckSpec reports whether a container of spec may be created: its memory limit must be a
// size within MaxMemoryLimit, and a network policy enabled (Network) and within the
// operator's allowlist. An error matches [sandbox.ErrInvalidSpec].
func (l *Local) CheckSpec(spec sandbox.Spec) error {
	if _, err := l.memoryOf(spec); err != nil {
		return err
	}
	if err := l.checkSkills(spec.Skills); err != nil {
		return err
	}
	return l.checkNetwork(spec.NetworkPolicy)
}

// memoryOf returns the memory of a container of spec.
func (l *Local) memoryOf(spec sandbox.Spec) (int64, error) {
	mem := spec.MemoryLimit
	if mem == "" {
		mem = l.cfg.DefaultMemoryLimit
	}
	n, err := sandbox.ParseMemory(mem)
	if err != nil {
		return 0, &sandbox.SpecError{Field: "memory_limit", Value: spec.MemoryLimit, Reason: "not a size such as 1g"}
	}
	if n > l.maxMem {
		return 0, &sandbox.SpecError{Field: "memory_limit", Value: spec.MemoryLimit,
			Reason: "above the largest this server allows, " + sandbox.FormatMemory(l.maxMem)}
	}
	return n, nil
}

// defaultMaxMemory is the smaller of 64 GiB and the host's RAM.
func defaultMaxMemory() int64 {
	limit := int64(64 << 30)
	var si syscall.Sysinfo_t
	if err := syscall.Sysinfo(&si); err == nil && si.Totalram > 0 {
		ram := int64(si.Totalram) * int64(max(si.Unit, 1))
		ram &^= 1<<20 - 1 // whole MiB, so that the size has a short form
		if ram > 0 {
			limit = min(limit, ram)
		}
	}
	return limit
}

func (l *Local) prepareWorkDir() error {
	dir := l.cfg.WorkDir
	if dir == "" {
		d, err := os.MkdirTemp("", "codeinterp-sandbox-")
		if err != nil {
			return fmt.Errorf("make work dir: %w", err)
		}
		dir, l.ownWork = d, true
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("make work dir: %w", err)
	}
	// The sandbox user must be able to reach the shared files.
	if err := os.Chmod(dir, 0o755); err != nil {
		return fmt.Errorf("make work dir: %w", err)
	}
	l.workDir = dir
	for _, sub := range []string{"etc", "mpl", "containers"} {
		p := filepath.Join(dir, sub)
		if err := os.MkdirAll(p, 0o755); err != nil {
			return fmt.Errorf("make work dir: %w", err)
		}
	}
	passwd := fmt.Sprintf("%s:x:%d:%d:%s:/tmp:/bin/sh\n", sandboxName, sandboxUID, sandboxUID, sandboxName)
	group := fmt.Sprintf("%s:x:%d:\n", sandboxName, sandboxUID)
	for name, body := range map[string]string{"passwd": passwd, "group": group} {
		if err := os.WriteFile(filepath.Join(dir, "etc", name), []byte(body), 0o644); err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
	}
	return nil
}

func (l *Local) removeWorkDir() {
	if l.ownWork {
		if err := os.RemoveAll(l.workDir); err != nil {
			l.log.Warn("remove work dir", zap.String("dir", l.workDir), zap.Error(err))
		}
	}
}

// probeScript runs in the probe sandbox. It builds matplotlib's font cache, compiles the
// driver (read from stdin) and reports the compiled driver.
const probeScript = `import sys, marshal
try:
    import matplotlib.font_manager
except Exception:
    pass
code = compile(sys.stdin.read(), '<codeinterp>', 'exec')
out = {'driver': marshal.dumps(code), 'version': sys.version.split()[0]}
sys.stdout.write('probe:' + marshal.dumps(out, 2).hex())
`

// bootstrap is the container's command: it runs the precompiled driver (argv[1]).
const bootstrap = "import marshal,sys;exec(marshal.loads(bytes.fromhex(sys.argv[1])))"

// probe runs one sandbox with a writable font cache directory: it proves that the sandbox
// starts here, builds matplotlib's font cache that every container then reads, and compiles the
// driver with the containers' interpreter.
func (l *Local) probe() error {
	script := probeScript
	uid := os.Geteuid()
	mpl := filepath.Join(l.workDir, "mpl")
	if l.setUID && l.isolated() {
		var err error
		if uid, err = l.uids.take(); err != nil {
			return fmt.Errorf("start a test sandbox: %w", err)
		}
		defer l.uids.give(uid) // the probe's processes are gone once Run returns (see below)
		// The probe writes the font cache as its uid; the cache is the server's afterwards.
		if err := os.Chown(mpl, uid, uid); err != nil {
			return fmt.Errorf("start a test sandbox: %w", err)
		}
		defer func() { _ = os.Chown(mpl, 0, 0) }()
	}
	var cmd *exec.Cmd
	var infoR, infoW *os.File // bubblewrap's --info-fd
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if l.bwrap == "" {
		cmd = exec.CommandContext(ctx, l.python, "-E", "-s", "-c", script)
		cmd.Env = l.containerEnv(filepath.Join(l.workDir, "mpl"))
		cmd.Dir = l.workDir
	} else {
		args := l.bwrapArgs(true, nil)
		args = append(args, "--", l.python, "-E", "-s", "-c", script)
		cmd = exec.CommandContext(ctx, l.bwrap, args...)
		cmd.Env = []string{}
		cmd.Dir = "/"
		sp, err := l.seccompPipe()
		if err != nil {
			return err
		}
		defer sp.Close()
		if infoR, infoW, err = os.Pipe(); err != nil {
			return fmt.Errorf("start a test sandbox: %w", err)
		}
		defer infoR.Close()
		defer infoW.Close()
		cmd.ExtraFiles = []*os.File{nil, nil, nil, sp, infoW} // fds 6 and 7, as for containers
	}
	cmd.SysProcAttr = l.sysProcAttr(uid)
	var out, errb bytes.Buffer
	cmd.Stdin = strings.NewReader(driverSource)
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.WaitDelay = time.Second
	err := cmd.Start()
	if err == nil {
		initFD := -1
		if infoR != nil {
			infoW.Close()
			_, initFD, _ = openInit(infoR)
		}
		err = cmd.Wait()
		if initFD >= 0 {
			// bubblewrap's monitor may exit before its init: then the init is this process's
			// to reap (when it is PID 1 or a subreaper).
			_ = reapInit(ctx, initFD)
			unix.Close(initFD)
		}
	}
	_, report, ok := strings.Cut(out.String(), "probe:")
	if err != nil || !ok {
		return fmt.Errorf("start a test sandbox (%s): %v: %s", cmd.Path, err, strings.TrimSpace(errb.String()))
	}
	if err := l.readProbe(strings.TrimSpace(report)); err != nil {
		return fmt.Errorf("start a test sandbox: %w", err)
	}
	// Every container reads the cache; none may write it.
	return filepath.WalkDir(filepath.Join(l.workDir, "mpl"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		mode := fs.FileMode(0o644)
		if d.IsDir() {
			mode = 0o755
		}
		return os.Chmod(p, mode)
	})
}

// sharedFD is the first descriptor of the shared files copied into each container; 3-8 are the
// protocol pipes, the seccomp filter and bubblewrap's info and block descriptors.
const sharedFD = 9

// readProbe takes the compiled driver from the probe's report.
func (l *Local) readProbe(report string) error {
	raw, err := hex.DecodeString(report)
	if err != nil {
		return fmt.Errorf("read probe report: %w", err)
	}
	v, err := marshalDecode(raw)
	if err != nil {
		return fmt.Errorf("read probe report: %w", err)
	}
	m, _ := v.(map[string]any)
	code, _ := m["driver"].([]byte)
	if len(code) == 0 {
		return errors.New("read probe report: no driver")
	}
	l.driverCode = hex.EncodeToString(code)
	l.log.Debug("probe", zap.Any("python", m["version"]))
	return nil
}

// driverArg is the driver's argv[1]: its configuration, in hex.
func (l *Local) driverArg(memBytes int64, dir string, env map[string]string) (string, error) {
	cfg := l.driverConfig(memBytes, dir)
	cfg.env = env
	b, err := marshalEncode(cfg.encode())
	if err != nil {
		return "", fmt.Errorf("encode driver config: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// driverConfig is the configuration of a driver of memBytes whose data directory is dir.
func (l *Local) driverConfig(memBytes int64, dir string) driverConfig {
	return driverConfig{
		dataDir: dir, outputLimit: l.cfg.OutputLimit, maxFiles: maxFiles, maxFileBytes: maxFileListBytes,
		maxImages: maxImages, preload: l.cfg.Preload,
		as: memBytes, cpu: int64(l.cfg.CPUSeconds), nproc: int64(l.cfg.MaxProcesses), fsize: l.cfg.MaxFileBytes, nofile: 1024,
	}
}

// Create starts a container and waits until its interpreter is ready (with the preloaded
// libraries imported when Preload is set). ctx bounds the start only: the container lives until
// Delete. It fails with [sandbox.ErrUnavailable] when the container cannot be started, and
// with [sandbox.ErrClosed] after Close.
func (l *Local) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Container, error) {
	memBytes, err := l.memoryOf(spec)
	if err != nil {
		return nil, fmt.Errorf("create container: %w", err)
	}
	if err := l.checkNetwork(spec.NetworkPolicy); err != nil {
		return nil, fmt.Errorf("create container: %w", err)
	}
	if err := l.checkSkills(spec.Skills); err != nil {
		return nil, fmt.Errorf("create container: %w", err)
	}
	var proxy *egress.Proxy // the container's, once started; closed here until then
	var env map[string]string
	if spec.NetworkPolicy != nil {
		if proxy, err = egress.New(egressPolicy(spec.NetworkPolicy), l.cfg.Network.Proxy, l.log); err != nil {
			return nil, fmt.Errorf("create container: %w", err)
		}
		defer func() {
			if proxy != nil {
				_ = proxy.Close()
			}
		}()
		env = networkEnv(proxy)
	}
	c, err := l.start(memBytes, env, spec.Skills)
	if err != nil {
		return nil, err
	}
	if err := c.waitReady(ctx); err != nil {
		_ = c.Delete(context.Background())
		return nil, fmt.Errorf("%w: start container: %w", sandbox.ErrUnavailable, err)
	}
	// The code runs once Create has returned: its proxy is listening by then.
	if proxy != nil {
		if err := c.startEgress(proxy); err != nil {
			_ = c.Delete(context.Background())
			return nil, fmt.Errorf("%w: %w: %w", sandbox.ErrUnavailable, errNoEgress, err)
		}
		proxy = nil // the container's now
	}
	return c, nil
}

// Close kills every container still running and waits for them; the first Close then
// removes what New made (the cgroups, a WorkDir it created, the registration in StateDir).
// Containers created afterwards fail with [sandbox.ErrClosed]. It returns what deleting the
// containers still live met, joined (a cgroup that could not be removed, ...), or nil; what
// the Local itself made is removed on a best-effort basis, a failure logged at most. A container
// deleted before Close reported its own errors to its Delete's caller. Idempotent.
func (l *Local) Close() error {
	l.mu.Lock()
	first := !l.closed
	l.closed = true
	l.mu.Unlock()
	// No start begins now; one in progress ends with its container live or released.
	l.starts.Wait()
	live := l.liveContainers()
	for _, c := range live {
		c.kill()
	}
	var errs []error
	for _, c := range live {
		if err := c.Delete(context.Background()); err != nil {
			errs = append(errs, err)
		}
	}
	l.wg.Wait()
	if first {
		if l.tpl != nil {
			l.tpl.close()
		}
		l.tearDown()
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("close local sandbox: %w", err)
	}
	return nil
}

// beginStart counts a start in progress, which must call l.starts.Done when it ends; after
// Close it fails with [sandbox.ErrClosed].
func (l *Local) beginStart() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return sandbox.ErrClosed
	}
	l.starts.Add(1)
	return nil
}

// track adds a started container to those Close kills. Its start is still counted in
// l.starts, so Close, which waits for the starts, sees it.
func (l *Local) track(c *container) {
	l.mu.Lock()
	l.live[c] = struct{}{}
	l.mu.Unlock()
}

// liveContainers returns the containers created and not yet deleted.
func (l *Local) liveContainers() []*container {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]*container, 0, len(l.live))
	for c := range l.live {
		out = append(out, c)
	}
	return out
}

func (l *Local) untrack(c *container) {
	l.mu.Lock()
	delete(l.live, c)
	l.mu.Unlock()
}

// hostDataDir returns a container's data directory on the host when there is no isolation.
func (l *Local) hostDataDir(name string) string {
	return filepath.Join(l.workDir, "containers", name)
}

// cgroupLimits returns a container's cgroup memory and process limits.
func (l *Local) cgroupLimits(memBytes int64) (int64, int) {
	return memBytes + l.cfg.DataBytes + 2*l.cfg.TmpBytes + cgroupSlack, l.cfg.MaxProcesses + 8
}

// isolated reports whether containers run under bubblewrap.
func (l *Local) isolated() bool { return l.bwrap != "" }
