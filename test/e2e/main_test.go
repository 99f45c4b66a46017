package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks, after every test of the package, that no goroutine is left (goleak) and
// that no sandbox process is left: no process descending from this test process (bubblewrap,
// the container's init, its Python interpreter or anything the code started) may outlive the
// stacks that started it.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		if serverBuild.dir != "" {
			_ = os.RemoveAll(serverBuild.dir)
		}
		if left := descendants(os.Getpid()); len(left) > 0 {
			fmt.Fprintf(os.Stderr, "e2e: %d sandbox processes left after the suite:\n", len(left))
			for _, p := range left {
				fmt.Fprintf(os.Stderr, "  %s\n", p)
			}
			code = 1
		}
		os.Exit(code)
	}))
}

// proc is a process found under /proc.
type proc struct {
	pid, ppid int
	comm      string
	cmdline   string
}

func (p proc) String() string {
	return fmt.Sprintf("pid %d (parent %d) %s: %s", p.pid, p.ppid, p.comm, p.cmdline)
}

// descendants returns every live process whose ancestry includes pid (not pid itself), read
// from /proc. Processes in other PID namespaces appear under their host pids, so the
// containers' processes are included.
func descendants(pid int) []proc {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return []proc{{comm: "cannot read /proc: " + err.Error()}}
	}
	children := map[int][]proc{}
	for _, e := range entries {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		p, ok := readProc(n)
		if ok {
			children[p.ppid] = append(children[p.ppid], p)
		}
	}
	var out []proc
	queue := []int{pid}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		for _, c := range children[cur] {
			out = append(out, c)
			queue = append(queue, c.pid)
		}
	}
	return out
}

// readProc reads /proc/<pid>/stat and cmdline; ok is false when the process is gone.
func readProc(pid int) (proc, bool) {
	dir := filepath.Join("/proc", strconv.Itoa(pid))
	stat, err := os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return proc{}, false
	}
	// "pid (comm) state ppid ...": comm may hold spaces and parentheses; it ends at the last ')'.
	s := string(stat)
	open, closing := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || closing < open {
		return proc{}, false
	}
	fields := strings.Fields(s[closing+1:])
	if len(fields) < 2 {
		return proc{}, false
	}
	ppid, err := strconv.Atoi(fields[1])
	if err != nil {
		return proc{}, false
	}
	cmd, _ := os.ReadFile(filepath.Join(dir, "cmdline"))
	cmdline := strings.TrimSpace(strings.ReplaceAll(string(cmd), "\x00", " "))
	if len(cmdline) > 200 {
		cmdline = cmdline[:200] + "…"
	}
	return proc{pid: pid, ppid: ppid, comm: s[open+1 : closing], cmdline: cmdline}, true
}
