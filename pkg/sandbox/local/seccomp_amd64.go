package local

import "golang.org/x/sys/unix"

const (
	seccompArch   = 0xc000003e // AUDIT_ARCH_X86_64
	seccompX32Bit = 0x40000000 // __X32_SYSCALL_BIT: x32 calls are refused
)

func seccompDenied() []int {
	return append(seccompDeniedCommon(),
		unix.SYS_IOPL, unix.SYS_IOPERM, unix.SYS_USELIB, unix.SYS_USTAT, unix.SYS_SYSFS,
		unix.SYS__SYSCTL, unix.SYS_CREATE_MODULE, unix.SYS_GET_KERNEL_SYMS, unix.SYS_QUERY_MODULE,
	)
}
