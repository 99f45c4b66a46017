package local

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// inheritablePipe returns a pipe opened without close-on-exec, as a descriptor inherited from
// whatever started the server would be; it is closed at the end of the test.
func inheritablePipe(t *testing.T) [2]int {
	t.Helper()
	var p [2]int
	require.NoError(t, unix.Pipe(p[:]), "pipe")
	t.Cleanup(func() {
		unix.Close(p[0])
		unix.Close(p[1])
	})
	return p
}

func closeOnExec(t *testing.T, fd int) bool {
	t.Helper()
	flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
	require.NoError(t, err, "F_GETFD of %d", fd)
	return flags&unix.FD_CLOEXEC != 0
}

func TestCloseOnExecInherited(t *testing.T) {
	tests := []struct {
		name string
		give func() error
	}{
		{"close_range or walk", closeOnExecInherited},
		{"walk of /proc/self/fd", closeOnExecByWalk},
	}
	for _, tt := range tests {
		p := inheritablePipe(t)
		require.False(t, closeOnExec(t, p[0]), "%s: the pipe starts inheritable", tt.name)
		require.NoError(t, tt.give(), "%s", tt.name)
		for _, fd := range p {
			assert.True(t, closeOnExec(t, fd), "%s: descriptor %d is close-on-exec", tt.name, fd)
		}
		for fd := range 3 {
			assert.False(t, closeOnExec(t, fd), "%s: standard descriptor %d is left alone", tt.name, fd)
		}
	}
}
