//go:build amd64 || arm64

package local

import "golang.org/x/sys/unix"

// seccompDeniedCommon lists the refused calls that exist on every supported architecture.
func seccompDeniedCommon() []int {
	return []int{
		// other processes
		unix.SYS_PTRACE, unix.SYS_PROCESS_VM_READV, unix.SYS_PROCESS_VM_WRITEV,
		unix.SYS_PIDFD_GETFD, unix.SYS_KCMP,
		// the system
		unix.SYS_MOUNT, unix.SYS_UMOUNT2, unix.SYS_PIVOT_ROOT, unix.SYS_CHROOT,
		unix.SYS_FSOPEN, unix.SYS_FSCONFIG, unix.SYS_FSMOUNT, unix.SYS_FSPICK,
		unix.SYS_MOVE_MOUNT, unix.SYS_OPEN_TREE, unix.SYS_MOUNT_SETATTR,
		unix.SYS_INIT_MODULE, unix.SYS_FINIT_MODULE, unix.SYS_DELETE_MODULE,
		unix.SYS_KEXEC_LOAD, unix.SYS_KEXEC_FILE_LOAD, unix.SYS_REBOOT,
		unix.SYS_SWAPON, unix.SYS_SWAPOFF, unix.SYS_ACCT, unix.SYS_QUOTACTL,
		unix.SYS_SETTIMEOFDAY, unix.SYS_CLOCK_SETTIME, unix.SYS_CLOCK_ADJTIME, unix.SYS_ADJTIMEX,
		unix.SYS_SYSLOG, unix.SYS_VHANGUP, unix.SYS_NFSSERVCTL, unix.SYS_LOOKUP_DCOOKIE,
		unix.SYS_SETHOSTNAME, unix.SYS_SETDOMAINNAME,
		unix.SYS_OPEN_BY_HANDLE_AT, unix.SYS_NAME_TO_HANDLE_AT,
		// kernel attack surface
		unix.SYS_BPF, unix.SYS_PERF_EVENT_OPEN, unix.SYS_USERFAULTFD, unix.SYS_FANOTIFY_INIT,
		unix.SYS_IO_URING_SETUP, unix.SYS_IO_URING_ENTER, unix.SYS_IO_URING_REGISTER,
		unix.SYS_KEYCTL, unix.SYS_ADD_KEY, unix.SYS_REQUEST_KEY,
		unix.SYS_SETNS, unix.SYS_UNSHARE,
		// memory outside the rlimits and tmpfs sizes
		unix.SYS_MEMFD_CREATE, unix.SYS_MEMFD_SECRET, unix.SYS_SHMGET, unix.SYS_MSGGET,
	}
}

// The calls that create processes: clone's first argument is its flags.
const (
	seccompClone  = unix.SYS_CLONE
	seccompClone3 = unix.SYS_CLONE3
)

// seccompSocketCalls lists the calls whose first argument is a socket family.
func seccompSocketCalls() []int { return []int{unix.SYS_SOCKET, unix.SYS_SOCKETPAIR} }
