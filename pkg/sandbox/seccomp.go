package sandbox

import (
	"encoding/binary"
	"fmt"
	"syscall"
)

// The seccomp filter is defence in depth under the namespaces: it refuses (EPERM) the system
// calls that let code inspect or control other processes (ptrace, process_vm_*, pidfd_getfd),
// change the system (mount, modules, kexec, clocks, swap, reboot), open new kernel attack surface
// (bpf, perf_event_open, userfaultfd, io_uring, keyrings, namespaces), or hold memory outside
// the container's rlimits and tmpfs sizes (memfd_create, SysV shared memory and message queues).
// Everything else is allowed. A foreign architecture (32-bit compat calls) kills the process.

// Classic BPF opcodes and seccomp return values (linux/filter.h, linux/seccomp.h).
const (
	bpfLdWAbs  = 0x20 // BPF_LD | BPF_W | BPF_ABS
	bpfJeqK    = 0x15 // BPF_JMP | BPF_JEQ | BPF_K
	bpfJgeK    = 0x35 // BPF_JMP | BPF_JGE | BPF_K
	bpfRetK    = 0x06 // BPF_RET | BPF_K
	seccompOff = 0    // offsetof(struct seccomp_data, nr)
	seccompArc = 4    // offsetof(struct seccomp_data, arch)

	seccompRetKillProcess = 0x80000000
	seccompRetErrno       = 0x00050000
	seccompRetAllow       = 0x7fff0000
)

type bpfInsn struct {
	code   uint16
	jt, jf uint8
	k      uint32
}

// seccompProgram returns the filter as bwrap's --seccomp expects it (struct sock_filter
// array, native byte order), or nil when this architecture has no deny list.
func seccompProgram() ([]byte, error) {
	if seccompArch == 0 {
		return nil, nil
	}
	denied := seccompDenied()
	var prog []bpfInsn
	prog = append(prog,
		bpfInsn{code: bpfLdWAbs, k: seccompArc},
		bpfInsn{code: bpfJeqK, jt: 1, k: seccompArch},
		bpfInsn{code: bpfRetK, k: seccompRetKillProcess},
		bpfInsn{code: bpfLdWAbs, k: seccompOff},
	)
	// Jumps are relative and at most 255 instructions long; the deny return is placed after
	// the allow return at the end.
	checks := len(denied)
	if seccompX32Bit != 0 {
		checks++
	}
	if checks+1 > 255 {
		return nil, fmt.Errorf("build seccomp filter: %d checks do not fit 8-bit jumps", checks)
	}
	i := 0
	jumpToDeny := func() uint8 { return uint8(checks - i) } // skips the remaining checks and allow
	if seccompX32Bit != 0 {
		prog = append(prog, bpfInsn{code: bpfJgeK, jt: jumpToDeny(), k: seccompX32Bit})
		i++
	}
	for _, nr := range denied {
		prog = append(prog, bpfInsn{code: bpfJeqK, jt: jumpToDeny(), k: uint32(nr)})
		i++
	}
	prog = append(prog,
		bpfInsn{code: bpfRetK, k: seccompRetAllow},
		bpfInsn{code: bpfRetK, k: seccompRetErrno | uint32(syscall.EPERM)},
	)
	out := make([]byte, 0, 8*len(prog))
	for _, in := range prog {
		out = binary.NativeEndian.AppendUint16(out, in.code)
		out = append(out, in.jt, in.jf)
		out = binary.NativeEndian.AppendUint32(out, in.k)
	}
	return out, nil
}
