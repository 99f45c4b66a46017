package local

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A run's code may leave processes behind (a busy loop forked off, a daemon): they would keep
// burning CPU after the request ended, each with an RLIMIT_CPU of its own. Unless
// KeepBackgroundProcesses is set, the server kills them when the run ends: every process of the
// container's PID namespace but bubblewrap's init and the driver (the interpreter). Threads the
// code started in the interpreter itself keep running; the cpu cgroup's quota bounds them.

// nsProcs identifies a container's processes on the host: its init and driver, and its PID
// namespace (a process is the container's only if it is in that namespace), and the cgroup
// directory that holds them all ("" without cgroups).
type nsProcs struct {
	init, driver int
	ns           nsID
	cgroup       string
}

type nsID struct{ dev, ino uint64 }

// pidNamespace returns the PID namespace of pid.
func pidNamespace(pid int) (nsID, error) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/"+strconv.Itoa(pid)+"/ns/pid", &st); err != nil {
		return nsID{}, fmt.Errorf("pid namespace of %d: %w", pid, err)
	}
	return nsID{dev: st.Dev, ino: st.Ino}, nil
}

// findProcs notes the container's init (initPID) and its driver: driverPID where known (a
// forked driver is not its init's child), else the init's only child once the driver is ready.
func findProcs(initPID, driverPID int) (nsProcs, error) {
	p := nsProcs{init: initPID, driver: driverPID}
	var err error
	if p.ns, err = pidNamespace(initPID); err != nil {
		return p, err
	}
	if driverPID > 0 {
		return p, nil
	}
	kids := children(initPID)
	if len(kids) != 1 {
		return p, fmt.Errorf("the container's init has %d children, want its driver only", len(kids))
	}
	p.driver = kids[0]
	return p, nil
}

// children returns the child processes of pid (of all its threads).
func children(pid int) []int {
	base := "/proc/" + strconv.Itoa(pid) + "/task"
	tasks, err := os.ReadDir(base)
	if err != nil {
		return nil
	}
	var out []int
	for _, task := range tasks {
		b, err := os.ReadFile(base + "/" + task.Name() + "/children")
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}

// running reports whether pid is a process that has not exited (not a zombie).
func running(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return false
	}
	state := s[i+2]
	return state != 'Z' && state != 'X'
}

// killBackground kills every running process of the container but its init and driver, until
// neither a walk of its process tree nor its cgroup finds one (a process may fork while the walk
// runs), and reports how many it killed. A process is killed through a pidfd opened before its
// namespace is checked, so a pid reused meanwhile by a process outside the container is never
// signalled.
func (p nsProcs) killBackground() (int, error) {
	killed := 0
	for round := 0; ; round++ {
		var victims []int
		stack := children(p.init)
		if !slices.Contains(stack, p.driver) {
			stack = append(stack, p.driver) // a forked driver is not its init's child
		}
		for len(stack) > 0 {
			pid := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			stack = append(stack, children(pid)...)
			if pid != p.driver && running(pid) {
				victims = append(victims, pid)
			}
		}
		// The cgroup also holds what the tree does not: a process whose parent is outside the
		// container (bubblewrap's monitor, or the template for a forked driver's siblings, which
		// the seccomp filter refuses to make) is not in the tree below the init.
		if p.cgroup != "" {
			for _, pid := range cgroupPids(p.cgroup) {
				if pid == p.init || pid == p.driver || slices.Contains(victims, pid) || !running(pid) {
					continue
				}
				if ns, err := pidNamespace(pid); err == nil && ns == p.ns {
					victims = append(victims, pid) // not bubblewrap's monitor, outside it
				}
			}
		}
		if len(victims) == 0 {
			return killed, nil
		}
		if round == 100 {
			return killed, fmt.Errorf("stop background processes: %d still running after %d rounds", len(victims), round)
		}
		for _, pid := range victims {
			if err := p.kill(pid); err == nil {
				killed++
			}
		}
		if round > 0 {
			time.Sleep(time.Millisecond) // SIGKILLed processes exiting still show as running
		}
	}
}

// kill sends SIGKILL to pid if it is in the container's PID namespace.
func (p nsProcs) kill(pid int) error {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return fmt.Errorf("open pidfd of %d: %w", pid, err)
	}
	defer unix.Close(fd)
	ns, err := pidNamespace(pid)
	if err != nil {
		return err
	}
	if ns != p.ns {
		return fmt.Errorf("process %d is not the container's", pid)
	}
	if err := unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("kill %d: %w", pid, err)
	}
	return nil
}
