package local

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"
	"go.uber.org/zap"
)

// shared are Locals with the default configuration, one per start mode, for the tests that
// need nothing else: every New runs a probe sandbox that imports matplotlib, which adds up on 2
// cores.
var shared [2]struct {
	once sync.Once
	l    *Local
	err  error
}

// testStartEnv, when set, is the start mode of the tests that do not choose one (inBothStarts
// does): CODEINTERP_TEST_START=fork runs every test on forked containers.
const testStartEnv = "CODEINTERP_TEST_START"

// testStart returns the start mode a test's Locals use: that of its inBothStarts subtest, else
// testStartEnv's, else the default.
func testStart(t testing.TB) string {
	for _, part := range strings.Split(t.Name(), "/")[1:] {
		if part == StartExec || part == StartFork {
			return part
		}
	}
	if v := os.Getenv(testStartEnv); v != "" {
		return v
	}
	return DefaultStart
}

// inBothStarts runs f as two subtests, "exec" and "fork", whose Locals (newTestLocal,
// sharedLocal) start containers that way.
func inBothStarts(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	t.Run(StartExec, f)
	t.Run(StartFork, f)
}

// sharedLocal returns the shared Local of the test's start mode, or skips the test without
// bubblewrap.
func sharedLocal(t testing.TB) *Local {
	t.Helper()
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Skip("bubblewrap is not installed")
	}
	start := testStart(t)
	s := &shared[0]
	if start == StartFork {
		s = &shared[1]
	}
	s.once.Do(func() { s.l, s.err = New(Config{Start: start}, zap.NewNop()) })
	if s.err != nil {
		t.Fatalf("New: %v", s.err)
	}
	if start == StartFork && s.l.tpl == nil {
		t.Fatal("the fork start mode does not work here")
	}
	return s.l
}

func TestMain(m *testing.M) {
	runHelper() // exits when the binary runs as a helper process
	code := m.Run()
	for i := range shared {
		if l := shared[i].l; l != nil {
			if err := l.Close(); err != nil {
				fmt.Fprintln(os.Stderr, "close the shared Local:", err)
				code = 1
			}
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
