package local

import (
	"fmt"
	"os"
	"os/exec"
	"sync"
	"testing"

	"go.uber.org/goleak"
	"go.uber.org/zap"
)

// shared is one Local with the default configuration for the tests that need nothing else:
// every New runs a probe sandbox that imports matplotlib, which adds up on 2 cores.
var shared struct {
	once sync.Once
	l    *Local
	err  error
}

// sharedLocal returns the shared Local, or skips the test without bubblewrap.
func sharedLocal(t testing.TB) *Local {
	t.Helper()
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Skip("bubblewrap is not installed")
	}
	shared.once.Do(func() { shared.l, shared.err = New(Config{}, zap.NewNop()) })
	if shared.err != nil {
		t.Fatalf("New: %v", shared.err)
	}
	return shared.l
}

func TestMain(m *testing.M) {
	runHelper() // exits when the binary runs as a helper process
	code := m.Run()
	if shared.l != nil {
		if err := shared.l.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "close the shared Local:", err)
			code = 1
		}
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
