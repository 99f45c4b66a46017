//go:build !amd64 && !arm64

package local

const (
	seccompArch   = 0 // no deny list: the filter is not installed
	seccompX32Bit = 0
)

func seccompDenied() []int { return nil }

func seccompDeniedCommon() []int { return nil }

func seccompSocketCalls() []int { return nil }

const (
	seccompClone  = 0
	seccompClone3 = 0
)
