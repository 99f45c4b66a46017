package local

const (
	seccompArch   = 0xc00000b7 // AUDIT_ARCH_AARCH64
	seccompX32Bit = 0
)

func seccompDenied() []int { return seccompDeniedCommon() }
