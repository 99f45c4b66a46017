package local

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// closeOnExecInherited marks every descriptor of this process from 3 up close-on-exec. Go opens
// its own descriptors so; one the server inherited without the flag (a supervisor's pipe, a
// socket-activation listener) would otherwise pass through bubblewrap into every container.
// It uses close_range(2) where the kernel has CLOSE_RANGE_CLOEXEC (5.11+), and walks
// /proc/self/fd elsewhere.
func closeOnExecInherited() error {
	if err := unix.CloseRange(3, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC); err == nil {
		return nil
	}
	return closeOnExecByWalk()
}

// closeOnExecByWalk is closeOnExecInherited for every kernel: it marks each descriptor listed in
// /proc/self/fd. A descriptor closed meanwhile is skipped; one opened meanwhile is Go's own,
// close-on-exec already.
func closeOnExecByWalk() error {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return fmt.Errorf("list open descriptors: %w", err)
	}
	for _, e := range entries {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd < 3 {
			continue
		}
		syscall.CloseOnExec(fd)
	}
	return nil
}

// openAll opens each of paths with flag; on an error it closes what it opened. The caller
// closes the files.
func openAll(paths []string, flag int) ([]*os.File, error) {
	out := make([]*os.File, 0, len(paths))
	for _, p := range paths {
		f, err := os.OpenFile(p, flag, 0)
		if err != nil {
			for _, o := range out {
				o.Close()
			}
			return nil, err
		}
		out = append(out, f)
	}
	return out, nil
}
