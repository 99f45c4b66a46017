package local

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Cgroups add what rlimits cannot: a memory limit on the sum of a container's processes, its
// tmpfs pages and the kernel memory it causes (inodes, sockets), a process limit that no
// namespace trick escapes, and a CPU quota on all its processes together (RLIMIT_CPU is per
// process, and a fork starts afresh). They are used where the server may create cgroups: cgroup
// v1's memory and pids hierarchies (and its cpu hierarchy, when there is one) under the server's
// own cgroups, or a cgroup v2 directory whose subtree_control already delegates the memory and
// pids controllers (and cpu, for the quota) (the server's own, or Config.Cgroups). Without
// them the rlimits still hold.

// cgroupSlack is memory beyond the code's own limit and its tmpfs sizes: bubblewrap's two
// processes, page tables and kernel objects.
const cgroupSlack = 64 << 20

// cpuPeriod is the CFS period of the CPU quota, in microseconds.
const cpuPeriod = 100_000

// cgroupParents is where a Local creates its containers' cgroups: one directory per controller
// hierarchy (v1: memory, pids and maybe cpu; v2: one directory for all).
type cgroupParents struct {
	v2   bool
	cpu  bool     // the containers get a CPU quota
	dirs []string // a directory of this Local's own, created by newCgroupParents
}

// newCgroupParents finds writable cgroup hierarchies and creates a directory of this Local's
// own, "codeinterp-<id>", in each. It returns nil, nil when cgroups are off or not available to
// the server. setting is Config.Cgroups; wantCPU asks for the cpu controller too, where
// there is one.
func newCgroupParents(setting, id string, wantCPU bool) (*cgroupParents, error) {
	if setting == "off" {
		return nil, nil
	}
	name := "codeinterp-" + id
	if filepath.IsAbs(setting) {
		if !delegates(setting, "memory", "pids") {
			return nil, fmt.Errorf("cgroup %s does not delegate the memory and pids controllers (cgroup.subtree_control)", setting)
		}
		p := &cgroupParents{v2: true, cpu: wantCPU && delegates(setting, "cpu")}
		return p, p.make([]string{setting}, name)
	}
	if setting != "" && setting != "auto" {
		return nil, fmt.Errorf("cgroups setting %q: want auto, off or an absolute cgroup v2 path", setting)
	}
	self, mounts, err := readCgroupInfo()
	if err != nil {
		return nil, nil // no cgroups here
	}
	// cgroup v1, with separate memory and pids hierarchies, and cpu when it can be had.
	v1 := func(ctrl string) string {
		if dir := mounts.v1[ctrl]; dir != "" && self[ctrl] != "" {
			return filepath.Join(dir, self[ctrl])
		}
		return ""
	}
	if mem, pids := v1("memory"), v1("pids"); mem != "" && pids != "" {
		p := &cgroupParents{}
		if err := p.make([]string{mem, pids}, name); err == nil {
			if cpu := v1("cpu"); wantCPU && cpu != "" && cpu != mem && cpu != pids {
				// A cpu hierarchy the server may not write costs the quota only: keep the
				// memory and pids cgroups made above.
				if dir := filepath.Join(cpu, name); os.Mkdir(dir, 0o755) == nil {
					p.dirs = append(p.dirs, dir)
					p.cpu = true
				}
			}
			return p, nil
		}
	}
	// cgroup v2, if the server's own cgroup delegates both controllers.
	if mounts.v2 != "" && self[""] != "" {
		dir := filepath.Join(mounts.v2, self[""])
		if delegates(dir, "memory", "pids") {
			p := &cgroupParents{v2: true, cpu: wantCPU && delegates(dir, "cpu")}
			if err := p.make([]string{dir}, name); err == nil {
				return p, nil
			}
		}
	}
	return nil, nil
}

// make creates name under each parent, adding the directories to p.dirs; on failure it removes
// every directory of p.
func (p *cgroupParents) make(parents []string, name string) error {
	for _, parent := range parents {
		dir := filepath.Join(parent, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			p.remove()
			return fmt.Errorf("make cgroup: %w", err)
		}
		p.dirs = append(p.dirs, dir)
	}
	if p.v2 {
		// Containers below need the controllers too.
		ctrl := "+memory +pids"
		if p.cpu {
			ctrl += " +cpu"
		}
		if err := os.WriteFile(filepath.Join(p.dirs[0], "cgroup.subtree_control"), []byte(ctrl), 0o644); err != nil {
			p.remove()
			return fmt.Errorf("delegate cgroup controllers: %w", err)
		}
	}
	return nil
}

// remove deletes the Local's directories (which must hold no container any more).
func (p *cgroupParents) remove() {
	for _, d := range p.dirs {
		_ = rmdirRetry(d)
	}
	p.dirs = nil
}

func (p *cgroupParents) describe() string {
	if p.v2 {
		return "v2 " + p.dirs[0]
	}
	return "v1 " + strings.Join(p.dirs, ", ")
}

// delegates reports whether the v2 cgroup dir lets its children use every controller named.
func delegates(dir string, controllers ...string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
	if err != nil {
		return false
	}
	f := strings.Fields(string(b))
	for _, c := range controllers {
		if !slices.Contains(f, c) {
			return false
		}
	}
	return true
}

type cgroupMounts struct {
	v1 map[string]string // controller -> mount point
	v2 string
}

// readCgroupInfo returns the server's cgroup per controller ("" for v2) and the mounts.
func readCgroupInfo() (map[string]string, cgroupMounts, error) {
	self := map[string]string{}
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return nil, cgroupMounts{}, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[1] == "" {
			self[""] = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			self[c] = parts[2]
		}
	}
	mounts := cgroupMounts{v1: map[string]string{}}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, cgroupMounts{}, err
	}
	for _, line := range strings.Split(string(mi), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		pf, sf := strings.Fields(pre), strings.Fields(post)
		if len(pf) < 5 || len(sf) < 3 || pf[3] != "/" {
			continue // only whole hierarchies: a bind of a subtree would shift the paths
		}
		switch sf[0] {
		case "cgroup2":
			mounts.v2 = pf[4]
		case "cgroup":
			for _, opt := range strings.Split(sf[2], ",") {
				if opt == "memory" || opt == "pids" || opt == "cpu" {
					mounts.v1[opt] = pf[4]
				}
			}
		}
	}
	return self, mounts, nil
}

// containerCgroup is one container's cgroup, in each hierarchy.
type containerCgroup struct {
	dirs []string
	v2   bool
}

// create makes a container's cgroup with its limits; cpus is its CPU quota in cores, applied
// where p has the cpu controller.
func (p *cgroupParents) create(name string, memBytes int64, maxPids int, cpus float64) (*containerCgroup, error) {
	cg := &containerCgroup{v2: p.v2}
	for _, parent := range p.dirs {
		dir := filepath.Join(parent, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			cg.remove()
			return nil, fmt.Errorf("make container cgroup: %w", err)
		}
		cg.dirs = append(cg.dirs, dir)
	}
	mem := strconv.FormatInt(memBytes, 10)
	pids := strconv.Itoa(maxPids)
	quota := strconv.FormatInt(max(int64(cpus*cpuPeriod), 1000), 10)
	var writes [][2]string // file, value; a missing optional file is skipped
	if p.v2 {
		d := cg.dirs[0]
		writes = [][2]string{{d + "/memory.max", mem}, {d + "/memory.swap.max", "0"}, {d + "/pids.max", pids}}
		if p.cpu {
			writes = append(writes, [2]string{d + "/cpu.max", quota + " " + strconv.Itoa(cpuPeriod)})
		}
	} else {
		for _, d := range cg.dirs {
			if _, err := os.Stat(d + "/memory.limit_in_bytes"); err == nil {
				writes = append(writes, [2]string{d + "/memory.limit_in_bytes", mem},
					[2]string{d + "/memory.memsw.limit_in_bytes", mem})
			}
			if _, err := os.Stat(d + "/pids.max"); err == nil {
				writes = append(writes, [2]string{d + "/pids.max", pids})
			}
			if _, err := os.Stat(d + "/cpu.cfs_quota_us"); err == nil && p.cpu {
				writes = append(writes, [2]string{d + "/cpu.cfs_period_us", strconv.Itoa(cpuPeriod)},
					[2]string{d + "/cpu.cfs_quota_us", quota})
			}
		}
	}
	for _, w := range writes {
		err := os.WriteFile(w[0], []byte(w[1]), 0o644)
		if err != nil && !(errors.Is(err, os.ErrNotExist) && strings.Contains(w[0], "swap")) &&
			!(errors.Is(err, os.ErrNotExist) && strings.Contains(w[0], "memsw")) {
			cg.remove()
			return nil, fmt.Errorf("set cgroup limit %s: %w", filepath.Base(w[0]), err)
		}
	}
	return cg, nil
}

// add moves processes into the cgroup.
func (cg *containerCgroup) add(pids ...int) error {
	for _, d := range cg.dirs {
		for _, pid := range pids {
			if err := os.WriteFile(d+"/cgroup.procs", []byte(strconv.Itoa(pid)), 0o644); err != nil {
				return fmt.Errorf("move process into cgroup: %w", err)
			}
		}
	}
	return nil
}

// procsFiles opens the cgroup.procs file of each of the cgroup's directories for writing: a
// process given them moves itself (or another, by pid) into the cgroup. The caller closes them.
func (cg *containerCgroup) procsFiles() ([]*os.File, error) {
	paths := make([]string, len(cg.dirs))
	for i, d := range cg.dirs {
		paths[i] = d + "/cgroup.procs"
	}
	out, err := openAll(paths, os.O_WRONLY)
	if err != nil {
		return nil, fmt.Errorf("open cgroup.procs: %w", err)
	}
	return out, nil
}

// peakMemory returns the most memory the cgroup used, or 0 if unknown.
func (cg *containerCgroup) peakMemory() int64 {
	for _, d := range cg.dirs {
		for _, f := range []string{"memory.peak", "memory.max_usage_in_bytes"} {
			if b, err := os.ReadFile(filepath.Join(d, f)); err == nil {
				n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
				return n
			}
		}
	}
	return 0
}

// remove deletes the cgroup once its processes are gone. It leaves dirs as they are (a run's
// goroutine may still read them while a Delete removes the cgroup), and may be called again.
func (cg *containerCgroup) remove() error {
	var first error
	for _, d := range cg.dirs {
		if err := rmdirRetry(d); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// rmdirRetry removes a cgroup directory, waiting briefly for exiting processes to leave it.
func rmdirRetry(dir string) error {
	var err error
	for i := range 50 {
		err = syscall.Rmdir(dir)
		if err == nil || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) {
			break
		}
		time.Sleep(time.Duration(i+1) * time.Millisecond)
	}
	return fmt.Errorf("remove cgroup %s: %w", dir, err)
}
