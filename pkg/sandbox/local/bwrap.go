package local

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// sysProcAttr is how a container's first process starts: as uid (and the same gid) when the
// server is root.
func (l *Local) sysProcAttr(uid int) *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if l.setUID && l.bwrap != "" {
		attr.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid), Groups: []uint32{}}
	}
	return attr
}

// seccompPipe returns the read end of a pipe holding the filter program, for bwrap's
// --seccomp. The program is far smaller than a pipe's buffer.
func (l *Local) seccompPipe() (*os.File, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("seccomp pipe: %w", err)
	}
	_, err = w.Write(l.seccomp)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("seccomp pipe: %w", err)
	}
	return r, nil
}

// containerEnv is the container's whole environment: nothing of the server's.
func (l *Local) containerEnv(mplConfig string) []string {
	return []string{
		"PATH=/usr/local/bin:/usr/bin:/bin",
		"HOME=/tmp",
		"USER=" + sandboxName,
		"LOGNAME=" + sandboxName,
		"LANG=C.UTF-8",
		"LC_ALL=C.UTF-8",
		"TMPDIR=/tmp",
		"TERM=dumb",
		"MPLBACKEND=Agg",
		"MPLCONFIGDIR=" + mplConfig,
		"OPENBLAS_NUM_THREADS=1",
		"OMP_NUM_THREADS=1",
		"MKL_NUM_THREADS=1",
		"NUMEXPR_NUM_THREADS=1",
		"PYTHONDONTWRITEBYTECODE=1",
	}
}

// bwrapArgs builds bubblewrap's arguments up to the command. probe makes the font cache
// directory writable instead of binding its files; skills are a container's skill mount
// (skillArgs), made before the root is remounted read-only.
func (l *Local) bwrapArgs(probe bool, skills []string) []string {
	c := l.layout()
	a := []string{
		"--unshare-all", "--unshare-user", "--disable-userns",
		"--die-with-parent", "--new-session", "--cap-drop", "ALL",
		"--uid", strconv.Itoa(c.uid), "--gid", strconv.Itoa(c.uid),
		"--hostname", c.hostname,
		"--clearenv",
	}
	a = append(a, l.systemArgs()...)
	if probe {
		a = append(a,
			"--ro-bind", filepath.Join(l.workDir, "etc", "passwd"), "/etc/passwd",
			"--ro-bind", filepath.Join(l.workDir, "etc", "group"), "/etc/group",
		)
	}
	size := func(n int64) []string { return []string{"--size", strconv.FormatInt(n, 10)} }
	a = append(a, "--proc", "/proc", "--dev", "/dev")
	a = append(a, size(c.tmpBytes)...)
	a = append(a, "--tmpfs", "/dev/shm")
	a = append(a, size(c.tmpBytes)...)
	a = append(a, "--tmpfs", "/tmp")
	a = append(a, size(c.dataBytes)...)
	a = append(a, "--tmpfs", c.dataDir)
	if probe {
		a = append(a, "--bind", filepath.Join(l.workDir, "mpl"), mplDir)
	} else {
		// Copies, not binds: a bind would show its host path in /proc/self/mountinfo.
		for i, f := range l.shared {
			a = append(a, "--perms", "0444", "--file", strconv.Itoa(sharedFD+i), f.dest)
		}
	}
	// The init (PID 1, bubblewrap's reaper) runs as the code's uid: its /proc entry would let the
	// code write its memory (/proc/1/mem) and, say, clear its parent-death signal, so that the
	// container outlived the server. An empty read-only directory hides it.
	a = append(a, "--tmpfs", "/proc/1", "--remount-ro", "/proc/1")
	a = append(a, skills...)
	a = append(a, "--chdir", c.dataDir, "--remount-ro", "/dev", "--remount-ro", "/")
	if l.seccomp != nil {
		a = append(a, "--seccomp", "6")
	}
	a = append(a, "--info-fd", "7")
	if !probe {
		if l.cgroups != nil {
			// The sandbox waits, before it starts anything, until it is in its cgroup.
			a = append(a, "--block-fd", "8")
		}
	}
	return a
}

// systemArgs are bubblewrap's arguments for the environment and the read-only system every
// container sees, the same in both start modes.
func (l *Local) systemArgs() []string {
	var a []string
	for _, kv := range l.containerEnv(mplDir) {
		k, v, _ := strings.Cut(kv, "=")
		a = append(a, "--setenv", k, v)
	}
	a = append(a, "--ro-bind", "/usr", "/usr")
	// Merged-/usr systems link these into /usr; others have real directories.
	for _, d := range []string{"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"} {
		fi, err := os.Lstat(d)
		switch {
		case err != nil:
		case fi.Mode()&fs.ModeSymlink != 0:
			if target, err := os.Readlink(d); err == nil {
				a = append(a, "--symlink", target, d)
			}
		case fi.IsDir():
			a = append(a, "--ro-bind", d, d)
		}
	}
	// Debian resolves BLAS through /etc/alternatives and the loader cache; matplotlib reads
	// /etc/matplotlibrc. Nothing else of /etc is visible.
	for _, p := range []string{"/etc/alternatives", "/etc/ld.so.cache", "/etc/ld.so.conf",
		"/etc/ld.so.conf.d", "/etc/matplotlibrc", "/etc/fonts", "/etc/localtime", "/etc/mime.types"} {
		a = append(a, "--ro-bind-try", p, p)
	}
	if prefix := pythonPrefix(l.python); prefix != "" {
		a = append(a, "--ro-bind", prefix, prefix)
	}
	for _, p := range l.cfg.ReadOnlyPaths {
		a = append(a, "--ro-bind", p, p)
	}
	return a
}

// sharedFile is a host file of the work directory copied into every container.
type sharedFile struct {
	host, dest string
}

// listShared returns the work directory's files every container gets a copy of: the passwd and
// group files naming the sandbox user, and matplotlib's font cache.
func (l *Local) listShared() ([]sharedFile, error) {
	files := []sharedFile{
		{filepath.Join(l.workDir, "etc", "passwd"), "/etc/passwd"},
		{filepath.Join(l.workDir, "etc", "group"), "/etc/group"},
	}
	mpl := filepath.Join(l.workDir, "mpl")
	entries, err := os.ReadDir(mpl)
	if err != nil {
		return nil, fmt.Errorf("list font cache: %w", err)
	}
	for _, e := range entries {
		if e.Type().IsRegular() {
			files = append(files, sharedFile{filepath.Join(mpl, e.Name()), mplDir + "/" + e.Name()})
		}
	}
	return files, nil
}

// openShared opens the shared files for one container start; the caller closes them.
func (l *Local) openShared() ([]*os.File, error) {
	paths := make([]string, len(l.shared))
	for i, f := range l.shared {
		paths[i] = f.host
	}
	out, err := openAll(paths, os.O_RDONLY)
	if err != nil {
		return nil, fmt.Errorf("open shared file: %w", err)
	}
	return out, nil
}

// pythonPrefix returns the installation directory to make visible when the interpreter lives
// outside /usr, or "".
func pythonPrefix(python string) string {
	real, err := filepath.EvalSymlinks(python)
	if err != nil || strings.HasPrefix(real, "/usr/") {
		return ""
	}
	prefix := filepath.Dir(filepath.Dir(real)) // .../bin/python3 -> ...
	if prefix == "/" || prefix == "." {
		return ""
	}
	return prefix
}

// commandArgs returns the container's command: bw are bubblewrap's arguments, nil for the
// Local's own.
func (l *Local) commandArgs(cfgHex string, bw []string) (path string, args []string) {
	// -E: no PYTHON* variables; -s: no user site directory. The site module runs: skipping it
	// saves 10 ms of a start but leaves packages' .pth files undone (Debian's matplotlib then
	// takes 100 ms longer to import).
	py := []string{l.python, "-E", "-s", "-c", bootstrap, l.driverCode, cfgHex}
	if !l.isolated() {
		return l.python, py[1:]
	}
	if bw == nil {
		bw = l.args
	}
	return l.bwrap, slices.Concat(bw, []string{"--"}, py)
}
