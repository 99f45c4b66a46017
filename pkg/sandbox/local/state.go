package local

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/codeinterp/codeinterp/pkg/sandbox"
)

// The host state directory (Config.StateDir) is shared by every Local on the host, in any
// process. It holds:
//
//   - <id>.lock, one per live Local, flock-ed by it for its whole life (the kernel drops the lock
//     when the process dies, however it dies), and <id>.json, what that Local made on the host:
//     its work directory and its cgroup directories. A Local starting up removes what a Local
//     whose lock is free (its server died without Close) left: it kills the processes still in
//     those cgroups and removes the cgroups and the work directory.
//   - uids.lock, whose bytes are locked (open file description locks) one per host uid a
//     container runs as, so that no two containers on the host, of one server or of several
//     sharing the directory, get the same uid.
//
// A lock file appears under its final name already locked (it is created under a temporary name
// and renamed), so a sweep never takes a starting Local for a dead one.

// stateInfo is what <id>.json records.
type stateInfo struct {
	// WorkDir is the Local's work directory when it created it (removed by a sweep).
	WorkDir string `json:"work_dir,omitempty"`
	// Cgroups are the Local's cgroup directories, one per hierarchy; the containers' are below.
	Cgroups []string `json:"cgroups,omitempty"`
}

// hostState is one Local's registration in the state directory.
type hostState struct {
	dir  string
	id   string
	lock *os.File // <id>.lock, flock-ed
	uids *os.File // uids.lock
}

const uidsLockName = "uids.lock"

// openState registers a new Local in dir, creating dir if needed.
func openState(dir string) (*hostState, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("make state dir: %w", err)
	}
	if err := privateDir(dir); err != nil {
		return nil, err
	}
	s := &hostState{dir: dir, id: randomHex(6)}
	tmp := filepath.Join(dir, s.id+".lock.new")
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("make state lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		os.Remove(tmp)
		return nil, fmt.Errorf("lock state: %w", err)
	}
	if err := os.Rename(tmp, s.lockPath()); err != nil {
		f.Close()
		os.Remove(tmp)
		return nil, fmt.Errorf("make state lock: %w", err)
	}
	s.lock = f
	u, err := os.OpenFile(filepath.Join(dir, uidsLockName), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		s.close()
		return nil, fmt.Errorf("open uid locks: %w", err)
	}
	s.uids = u
	return s, nil
}

func (s *hostState) lockPath() string { return filepath.Join(s.dir, s.id+".lock") }
func (s *hostState) infoPath() string { return filepath.Join(s.dir, s.id+".json") }

// record writes what the Local made on the host, replacing what was recorded.
func (s *hostState) record(info stateInfo) error {
	b, err := json.Marshal(info)
	if err != nil {
		return fmt.Errorf("record state: %w", err)
	}
	tmp := s.infoPath() + ".new"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("record state: %w", err)
	}
	if err := os.Rename(tmp, s.infoPath()); err != nil {
		return fmt.Errorf("record state: %w", err)
	}
	return nil
}

// close ends the registration: what the Local made is gone (Close removed it).
func (s *hostState) close() {
	os.Remove(s.infoPath())
	os.Remove(s.lockPath())
	if s.lock != nil {
		s.lock.Close()
	}
	if s.uids != nil {
		s.uids.Close()
	}
}

// sweep removes what Locals that died without Close left, and reports how many it found.
func (s *hostState) sweep(log *zap.Logger) int {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		log.Warn("sweep state dir", zap.Error(err))
		return 0
	}
	n := 0
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), ".lock")
		if !ok || id == s.id || e.Name() == uidsLockName {
			continue
		}
		if sweepOne(s.dir, id, log) {
			n++
		}
	}
	return n
}

// privateDir checks that dir is a directory (not a link) that the server's user owns and no one
// else may write: a sweep acts on what it finds there, so a directory another user made or may
// write (the default one is under the shared temporary directory) must not be trusted.
func privateDir(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.IsDir():
		return fmt.Errorf("state dir %s: not a directory", dir)
	case !ok || int(st.Uid) != os.Geteuid():
		return fmt.Errorf("state dir %s: not owned by this user", dir)
	case fi.Mode().Perm()&0o022 != 0:
		return fmt.Errorf("state dir %s: others may write it (mode %v); make it 0700 or 0755", dir, fi.Mode().Perm())
	}
	return nil
}

// sweepable reports whether the paths a dead Local recorded are of the kind a Local makes: a
// work directory "codeinterp-sandbox-*", and cgroups "codeinterp-*" on a cgroup file system
// (v1 or v2, wherever it is mounted; one already gone is fine).
func sweepable(info stateInfo) bool {
	if info.WorkDir != "" && (!filepath.IsAbs(info.WorkDir) || !strings.HasPrefix(filepath.Base(info.WorkDir), "codeinterp-sandbox-")) {
		return false
	}
	for _, cg := range info.Cgroups {
		clean := filepath.Clean(cg)
		if !filepath.IsAbs(clean) || !strings.HasPrefix(filepath.Base(clean), "codeinterp-") {
			return false
		}
		var fs unix.Statfs_t
		if err := unix.Statfs(clean, &fs); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue
			}
			return false
		}
		if fs.Type != unix.CGROUP_SUPER_MAGIC && fs.Type != unix.CGROUP2_SUPER_MAGIC {
			return false
		}
	}
	return true
}

// sweepOne cleans up after Local id if it is dead, and reports whether it was.
func sweepOne(dir, id string, log *zap.Logger) bool {
	lockPath := filepath.Join(dir, id+".lock")
	f, err := os.OpenFile(lockPath, os.O_RDWR, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return false // alive
	}
	infoPath := filepath.Join(dir, id+".json")
	var info stateInfo
	if b, err := os.ReadFile(infoPath); err == nil {
		if err := json.Unmarshal(b, &info); err != nil {
			log.Warn("unreadable state of a dead sandbox backend", zap.String("file", infoPath), zap.Error(err))
		}
	}
	if !sweepable(info) {
		log.Warn("a dead sandbox backend's state names paths no backend makes; left alone",
			zap.String("file", infoPath), zap.String("work_dir", info.WorkDir), zap.Strings("cgroups", info.Cgroups))
		return false
	}
	log.Info("removing what a sandbox backend that did not shut down left",
		zap.String("work_dir", info.WorkDir), zap.Strings("cgroups", info.Cgroups))
	for _, cg := range info.Cgroups {
		if err := removeCgroupTree(cg); err != nil {
			log.Warn("remove a dead backend's cgroup", zap.String("cgroup", cg), zap.Error(err))
		}
	}
	if info.WorkDir != "" {
		if err := os.RemoveAll(info.WorkDir); err != nil {
			log.Warn("remove a dead backend's work dir", zap.String("dir", info.WorkDir), zap.Error(err))
		}
	}
	os.Remove(infoPath)
	os.Remove(lockPath)
	return true
}

// removeCgroupTree kills every process in the cgroup dir and its descendants and removes them.
func removeCgroupTree(dir string) error {
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("list cgroup: %w", err)
	}
	var first error
	for _, e := range entries {
		if e.IsDir() {
			if err := removeCgroupTree(filepath.Join(dir, e.Name())); err != nil && first == nil {
				first = err
			}
		}
	}
	// A process may fork while it is being killed: kill what is there until nothing is.
	for range 100 {
		pids := cgroupPids(dir)
		if len(pids) == 0 {
			break
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := rmdirRetry(dir); err != nil && first == nil {
		first = err
	}
	return first
}

// cgroupPids lists the processes of one cgroup directory (not its descendants).
func cgroupPids(dir string) []int {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
			pids = append(pids, pid)
		}
	}
	return pids
}

// uidPool hands out the host uids containers run as: each at most once at a time on the host
// (among the Locals sharing the state directory), in turn, so that a uid just freed is the last
// to be used again.
type uidPool struct {
	first, count int
	locks        *os.File // the state dir's uids.lock

	mu   sync.Mutex
	next int // offset of the next uid to try
	held map[int]struct{}
}

func newUIDPool(first, count int, locks *os.File) *uidPool {
	return &uidPool{first: first, count: count, locks: locks, held: map[int]struct{}{},
		next: int(randomUint32() % uint32(count))}
}

// take returns a uid no other container on the host runs as, or [sandbox.ErrUnavailable] when
// every uid of the range is taken.
func (p *uidPool) take() (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for range p.count {
		uid := p.first + p.next
		p.next = (p.next + 1) % p.count
		if _, ok := p.held[uid]; ok {
			continue
		}
		if err := p.lockByte(uid, unix.F_WRLCK); err != nil {
			continue // another process's container has it
		}
		p.held[uid] = struct{}{}
		return uid, nil
	}
	return 0, fmt.Errorf("%w: all %d container uids from %d are in use", sandbox.ErrUnavailable, p.count, p.first)
}

// give returns a uid whose container's processes are all gone.
func (p *uidPool) give(uid int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.held[uid]; !ok {
		return
	}
	delete(p.held, uid)
	_ = p.lockByte(uid, unix.F_UNLCK)
}

func (p *uidPool) lockByte(uid int, kind int16) error {
	lk := unix.Flock_t{Type: kind, Whence: 0, Start: int64(uid), Len: 1}
	if err := unix.FcntlFlock(p.locks.Fd(), unix.F_OFD_SETLK, &lk); err != nil {
		return fmt.Errorf("lock uid %d: %w", uid, err)
	}
	return nil
}

// defaultStateDir is /run/codeinterp for root (every server on the host sees it), else a
// directory of the user's under the temporary directory.
func defaultStateDir() string {
	if os.Geteuid() == 0 {
		if fi, err := os.Stat("/run"); err == nil && fi.IsDir() {
			return "/run/codeinterp"
		}
	}
	return filepath.Join(os.TempDir(), "codeinterp-state-"+strconv.Itoa(os.Geteuid()))
}
