package local

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
// socket and socketpair are allowed for the families code uses inside its empty network
// namespace (AF_UNIX, AF_INET, AF_INET6) and refused with EAFNOSUPPORT for every other one
// (AF_VSOCK reaches the hypervisor's host, AF_NETLINK and AF_PACKET the kernel's network
// configuration code; Python falls back where it would use netlink, and numpy, pandas and
// matplotlib open no socket). clone is refused (EPERM) with CLONE_PARENT: a child so made would
// be its caller's sibling, and a forked driver's parent is the template, outside the container's
// process tree. clone3 passes its flags in memory a filter cannot read, so it fails with ENOSYS,
// on which glibc (threads, posix_spawn) falls back to clone. Everything else is allowed. A
// foreign architecture (32-bit compat calls) kills the process.

// Classic BPF opcodes and seccomp return values (linux/filter.h, linux/seccomp.h).
const (
	bpfLdWAbs  = 0x20 // BPF_LD | BPF_W | BPF_ABS
	bpfJeqK    = 0x15 // BPF_JMP | BPF_JEQ | BPF_K
	bpfJgeK    = 0x35 // BPF_JMP | BPF_JGE | BPF_K
	bpfJsetK   = 0x45 // BPF_JMP | BPF_JSET | BPF_K
	bpfRetK    = 0x06 // BPF_RET | BPF_K
	seccompOff = 0    // offsetof(struct seccomp_data, nr)
	seccompArc = 4    // offsetof(struct seccomp_data, arch)
	// seccompArg0 is the offset of the low 32 bits of args[0] (the socket family, an int) on a
	// little-endian machine; every architecture with a deny list is one.
	seccompArg0 = 16

	seccompRetKillProcess = 0x80000000
	seccompRetErrno       = 0x00050000
	seccompRetAllow       = 0x7fff0000
)

// cloneParent is CLONE_PARENT (linux/sched.h), in clone's first argument.
const cloneParent = 0x00008000

// Socket families (linux/socket.h) the filter allows.
const (
	afUnix  = 1
	afInet  = 2
	afInet6 = 10
)

type bpfInsn struct {
	code   uint16
	jt, jf uint8
	k      uint32
}

// bpfAsm assembles a program whose conditional jumps name their targets by label.
type bpfAsm struct {
	prog   []bpfInsn
	labels map[string]int
	fixups []bpfFixup
}

type bpfFixup struct {
	at     int
	target string
}

func (a *bpfAsm) emit(in bpfInsn) { a.prog = append(a.prog, in) }

// jumpIf emits "if A <op> k goto target" (falling through otherwise).
func (a *bpfAsm) jumpIf(op uint16, k uint32, target string) {
	a.fixups = append(a.fixups, bpfFixup{at: len(a.prog), target: target})
	a.emit(bpfInsn{code: op, k: k})
}

func (a *bpfAsm) label(name string) { a.labels[name] = len(a.prog) }

// assemble resolves the jumps: each goes forward by at most 255 instructions.
func (a *bpfAsm) assemble() ([]bpfInsn, error) {
	for _, f := range a.fixups {
		to, ok := a.labels[f.target]
		if !ok {
			return nil, fmt.Errorf("build seccomp filter: no label %q", f.target)
		}
		off := to - f.at - 1
		if off < 0 || off > 255 {
			return nil, fmt.Errorf("build seccomp filter: jump of %d instructions to %q does not fit 8 bits", off, f.target)
		}
		a.prog[f.at].jt = uint8(off)
	}
	return a.prog, nil
}

// seccompProgram returns the filter as bwrap's --seccomp expects it (struct sock_filter
// array, native byte order), or nil when this architecture has no deny list.
func seccompProgram() ([]byte, error) {
	if seccompArch == 0 {
		return nil, nil
	}
	a := &bpfAsm{labels: map[string]int{}}
	a.emit(bpfInsn{code: bpfLdWAbs, k: seccompArc})
	a.jumpIf(bpfJeqK, seccompArch, "native")
	a.emit(bpfInsn{code: bpfRetK, k: seccompRetKillProcess})
	a.label("native")
	a.emit(bpfInsn{code: bpfLdWAbs, k: seccompOff})
	if seccompX32Bit != 0 {
		a.jumpIf(bpfJgeK, seccompX32Bit, "deny")
	}
	for _, nr := range seccompDenied() {
		a.jumpIf(bpfJeqK, uint32(nr), "deny")
	}
	for _, nr := range seccompSocketCalls() {
		a.jumpIf(bpfJeqK, uint32(nr), "socket")
	}
	a.jumpIf(bpfJeqK, uint32(seccompClone), "clone")
	a.jumpIf(bpfJeqK, uint32(seccompClone3), "clone3")
	a.label("allow")
	a.emit(bpfInsn{code: bpfRetK, k: seccompRetAllow})
	a.label("deny")
	a.emit(bpfInsn{code: bpfRetK, k: seccompRetErrno | uint32(syscall.EPERM)})
	a.label("socket")
	a.emit(bpfInsn{code: bpfLdWAbs, k: seccompArg0})
	for _, family := range []uint32{afUnix, afInet, afInet6} {
		a.jumpIf(bpfJeqK, family, "socket allow")
	}
	a.emit(bpfInsn{code: bpfRetK, k: seccompRetErrno | uint32(syscall.EAFNOSUPPORT)})
	a.label("socket allow")
	a.emit(bpfInsn{code: bpfRetK, k: seccompRetAllow})
	a.label("clone")
	a.emit(bpfInsn{code: bpfLdWAbs, k: seccompArg0})
	a.jumpIf(bpfJsetK, cloneParent, "clone deny")
	a.emit(bpfInsn{code: bpfRetK, k: seccompRetAllow})
	a.label("clone deny")
	a.emit(bpfInsn{code: bpfRetK, k: seccompRetErrno | uint32(syscall.EPERM)})
	a.label("clone3")
	a.emit(bpfInsn{code: bpfRetK, k: seccompRetErrno | uint32(syscall.ENOSYS)})
	prog, err := a.assemble()
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, 8*len(prog))
	for _, in := range prog {
		out = binary.NativeEndian.AppendUint16(out, in.code)
		out = append(out, in.jt, in.jf)
		out = binary.NativeEndian.AppendUint32(out, in.k)
	}
	return out, nil
}
