package local

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/codeinterp/codeinterp/pkg/sandbox"
)

var pngSignature = []byte("\x89PNG\r\n\x1a\n")

// newTestLocal returns a Local closed at the end of the test. Without bubblewrap on the machine
// (CI installs it) the test is skipped.
func newTestLocal(t testing.TB, cfg Config) *Local {
	t.Helper()
	if !cfg.UnsafeNoIsolation {
		if _, err := exec.LookPath("bwrap"); err != nil {
			t.Skip("bubblewrap is not installed")
		}
	}
	if cfg.Start == "" {
		cfg.Start = testStart(t)
	}
	l, err := New(cfg, zaptest.NewLogger(t))
	require.NoError(t, err, "New(%+v)", cfg)
	t.Cleanup(func() { assert.NoError(t, l.Close(), "close Local") })
	if testStart(t) == StartFork && cfg.Start == StartFork && !cfg.UnsafeNoIsolation {
		require.NotNil(t, l.tpl, "the fork start mode works here (see the log for why not)")
	}
	return l
}

func newTestContainer(t testing.TB, l *Local, spec sandbox.Spec) sandbox.Container {
	t.Helper()
	c, err := l.Create(context.Background(), spec)
	require.NoError(t, err, "Create(%+v)", spec)
	t.Cleanup(func() { assert.NoError(t, c.Delete(context.Background()), "delete container") })
	return c
}

// runIn runs code with a generous timeout and requires success.
func runIn(t testing.TB, c sandbox.Container, code string) sandbox.Result {
	t.Helper()
	res, err := runTimeout(c, code, 30*time.Second)
	require.NoError(t, err, "run %q", code)
	return res
}

// warmGauge returns a reader of m's gauge of the containers ready in its warm pool.
func warmGauge(t testing.TB, m *sandbox.Manager) func() int {
	t.Helper()
	reg := prometheus.NewRegistry()
	for _, c := range m.Collectors() {
		require.NoError(t, reg.Register(c), "register the manager's metrics")
	}
	return func() int {
		mfs, err := reg.Gather()
		require.NoError(t, err, "gather the manager's metrics")
		for _, mf := range mfs {
			if mf.GetName() == "codeinterp_sandbox_warm_containers" {
				return int(mf.GetMetric()[0].GetGauge().GetValue())
			}
		}
		t.Fatal("no codeinterp_sandbox_warm_containers gauge")
		return 0
	}
}

func runTimeout(c sandbox.Container, code string, d time.Duration) (sandbox.Result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return c.Run(ctx, code)
}

func hasScientificPython(t testing.TB) {
	t.Helper()
	if err := exec.Command("/usr/bin/python3", "-c", "import numpy, pandas, matplotlib").Run(); err != nil {
		t.Skip("numpy, pandas or matplotlib is not installed for /usr/bin/python3")
	}
}

func TestLocalRunsCellsLikeANotebook(t *testing.T) {
	t.Parallel()
	c := newTestContainer(t, sharedLocal(t), sandbox.Spec{})
	tests := []struct {
		name       string
		give       string
		wantStdout string
		wantStderr string
		wantValue  string
		wantErr    string   // exception class
		wantTB     []string // in the traceback
	}{
		{name: "print", give: "print('hello')", wantStdout: "hello\n"},
		{name: "last expression", give: "1 + 1", wantValue: "2"},
		{name: "string value is its repr", give: "'a' * 3", wantValue: "'aaa'"},
		{name: "None shows nothing", give: "None"},
		{name: "statement shows nothing", give: "y = 5"},
		{name: "semicolon hides the value", give: "1 + 1;"},
		{name: "print then value", give: "print('a', end='')\n7", wantStdout: "a", wantValue: "7"},
		{name: "stderr", give: "import sys\nprint('oops', file=sys.stderr)", wantStderr: "oops\n"},
		{name: "unicode", give: "print('héllo ✓')", wantStdout: "héllo ✓\n"},
		{name: "raw write to fd 1", give: "import os\nos.write(1, b'raw\\n');", wantStdout: "raw\n"},
		{name: "child process output", give: "import subprocess\nsubprocess.run(['echo', 'from child']);",
			wantStdout: "from child\n"},
		{name: "display", give: "display(42)", wantStdout: "42\n"},
		{name: "exception names the line", give: "a = 1\nb = 0\na / b",
			wantErr: "ZeroDivisionError", wantTB: []string{"<cell ", "line 3", "a / b", "ZeroDivisionError: division by zero"}},
		{name: "exception in a function", give: "def f():\n    raise ValueError('bad')\nf()",
			wantErr: "ValueError", wantTB: []string{"line 3, in <module>", "line 2, in f", "ValueError: bad"}},
		{name: "output before an exception", give: "print('before')\nraise KeyError('k')",
			wantStdout: "before\n", wantErr: "KeyError", wantTB: []string{"line 2"}},
		{name: "syntax error", give: "x = (", wantErr: "SyntaxError", wantTB: []string{"line 1"}},
		{name: "exit is an error, not the end", give: "exit(3)", wantErr: "SystemExit"},
		{name: "fork: output not repeated", give: "import os\nprint('once')\npid = os.fork()\nif pid == 0:\n    print('child', flush=True)\n    os._exit(0)\nos.waitpid(pid, 0);",
			wantStdout: "once\nchild\n"},
		{name: "forked child ending the cell", give: "import os\npid = os.fork()\nif pid == 0:\n    print('child done')\nelse:\n    os.waitpid(pid, 0)\n    print('parent done')",
			wantStdout: "child done\nparent done\n"},
		{name: "forked child exiting out of the cell", give: "import os, sys\npid = os.fork()\nif pid == 0:\n    sys.exit(3)\n_, st = os.waitpid(pid, 0)\nos.WEXITSTATUS(st)",
			wantValue: "3"},
	}
	for _, tt := range tests {
		res, err := runTimeout(c, tt.give, 30*time.Second)
		require.NoError(t, err, "%s: run %q", tt.name, tt.give)
		assert.Equal(t, tt.wantStdout, res.Stdout, "%s: stdout of %q", tt.name, tt.give)
		assert.Equal(t, tt.wantStderr, res.Stderr, "%s: stderr of %q", tt.name, tt.give)
		assert.Equal(t, tt.wantValue, res.Value, "%s: value of %q", tt.name, tt.give)
		gotErr := ""
		if res.Error != nil {
			gotErr = res.Error.Name
			for _, s := range tt.wantTB {
				assert.Contains(t, res.Error.Traceback, s, "%s: traceback of %q", tt.name, tt.give)
			}
			assert.NotContains(t, res.Error.Traceback, "<codeinterp>", "%s: the driver's frames are hidden", tt.name)
			assert.NotContains(t, res.Error.Traceback, "<string>", "%s: the bootstrap's frames are hidden", tt.name)
		}
		assert.Equal(t, tt.wantErr, gotErr, "%s: error of %q", tt.name, tt.give)
		assert.False(t, res.Truncated, "%s: truncated", tt.name)
	}
}

// TestLocalResultsMarshalRefuses runs cells whose results hold what the driver's encoding
// refuses as it stands: each run answers, and the container keeps its state.
func TestLocalResultsMarshalRefuses(t *testing.T) {
	t.Parallel()
	c := newTestContainer(t, sharedLocal(t), sandbox.Spec{})
	runIn(t, c, "x = 41\nclass S(str): pass")
	tests := []struct {
		name      string
		give      string
		wantValue string
		wantErr   string // exception class
		wantText  string // in the error's value
	}{
		{name: "repr is a str subclass", give: "class A:\n    def __repr__(self): return S('an A')\nA()", wantValue: "an A"},
		{name: "str of an exception is a str subclass",
			give:    "class E(Exception):\n    def __str__(self): return S('boom')\nraise E()",
			wantErr: "E", wantText: "boom"},
		{name: "exception class named by a str subclass",
			give:    "class E(Exception): pass\nE.__name__ = S('Renamed')\nraise E('x')",
			wantErr: "Renamed", wantText: "x"},
		{name: "what marshal refuses in the driver's state",
			give:    "import sys\nsys._getframe(1).f_globals['S'].images.append(object())",
			wantErr: "ValueError", wantText: "the result could not be returned"},
	}
	for _, tt := range tests {
		res, err := runTimeout(c, tt.give, 30*time.Second)
		require.NoError(t, err, "%s: run %q", tt.name, tt.give)
		assert.Equal(t, tt.wantValue, res.Value, "%s: value of %q", tt.name, tt.give)
		if tt.wantErr == "" {
			assert.Nil(t, res.Error, "%s: error of %q", tt.name, tt.give)
			continue
		}
		require.NotNil(t, res.Error, "%s: error of %q", tt.name, tt.give)
		assert.Equal(t, tt.wantErr, res.Error.Name, "%s: error of %q", tt.name, tt.give)
		assert.Contains(t, res.Error.Value, tt.wantText, "%s: error value of %q", tt.name, tt.give)
	}
	assert.Equal(t, "41", runIn(t, c, "x").Value, "the container kept its state")
}

func TestLocalForkedChildRaisingOutOfTheCell(t *testing.T) {
	t.Parallel()
	c := newTestContainer(t, sharedLocal(t), sandbox.Spec{})
	res := runIn(t, c, "import os\npid = os.fork()\nif pid == 0:\n    raise ValueError('in child')\n_, st = os.waitpid(pid, 0)\nos.WEXITSTATUS(st)")
	assert.Equal(t, "1", res.Value, "the child exits with status 1, as a script's would")
	assert.Nil(t, res.Error, "the parent's run is unaffected")
	assert.Contains(t, res.Stderr, "line 4, in <module>\n    raise ValueError('in child')\nValueError: in child\n", "the child's traceback")
	assert.NotContains(t, res.Stderr, "<codeinterp>", "without the driver's frames")
	assert.Equal(t, "2\n", runIn(t, c, "print(1 + 1)").Stdout, "the driver still answers alone")
}

func TestLocalStatePersistsPerContainer(t *testing.T) {
	t.Parallel()
	inBothStarts(t, testLocalStatePersistsPerContainer)
}

func testLocalStatePersistsPerContainer(t *testing.T) {
	t.Parallel()
	l := sharedLocal(t)
	a := newTestContainer(t, l, sandbox.Spec{})
	b := newTestContainer(t, l, sandbox.Spec{})
	runIn(t, a, "x = 10\nimport math")
	runIn(t, a, "open('notes.txt', 'w').write('kept')")
	res := runIn(t, a, "print(x)\nmath.sqrt(x * 10)\nopen('notes.txt').read()")
	assert.Equal(t, "10\n", res.Stdout, "variables persist across runs")
	assert.Equal(t, "'kept'", res.Value, "files persist across runs")

	res = runIn(t, b, "x")
	require.NotNil(t, res.Error, "another container has no x")
	assert.Equal(t, "NameError", res.Error.Name, "another container has no x")
	res = runIn(t, b, "import os\nos.path.exists('notes.txt')")
	assert.Equal(t, "False", res.Value, "another container has its own /mnt/data")
}

func TestLocalImagesAndLibraries(t *testing.T) {
	t.Parallel()
	hasScientificPython(t)
	c := newTestContainer(t, sharedLocal(t), sandbox.Spec{})
	tests := []struct {
		name       string
		give       string
		wantImages int
		wantValue  string // substring
	}{
		{"open figure at the end", "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3]);", 1, ""},
		{"two shows, two images", "plt.plot([1]); plt.show()\nplt.plot([2]); plt.show()", 2, ""},
		{"displayed figure not repeated", "fig = plt.figure()\nplt.plot([3])\ndisplay(fig)", 1, ""},
		{"figure as the value", "fig, ax = plt.subplots()\nax.bar([1, 2], [3, 4])\nfig", 1, ""},
		{"figures were closed", "len(plt.get_fignums())", 0, "0"},
		{"numpy", "import numpy as np\nnp.arange(6).reshape(2, 3).sum()", 0, "15"},
		{"pandas", "import pandas as pd\npd.DataFrame({'col': [1, 2]})", 0, "col"},
		{"3D plot (a namespace package)", "from mpl_toolkits.mplot3d import Axes3D\nax = plt.figure().add_subplot(projection='3d')\nax.plot([0, 1], [0, 1], [0, 1]);", 1, ""},
	}
	for _, tt := range tests {
		res := runIn(t, c, tt.give)
		require.Nil(t, res.Error, "%s: error of %q", tt.name, tt.give)
		require.Len(t, res.Images, tt.wantImages, "%s: images of %q", tt.name, tt.give)
		for i, im := range res.Images {
			assert.True(t, bytes.HasPrefix(im.PNG, pngSignature), "%s: image %d is a PNG", tt.name, i)
		}
		assert.Contains(t, res.Value, tt.wantValue, "%s: value of %q", tt.name, tt.give)
	}
}

func TestLocalReportsFiles(t *testing.T) {
	t.Parallel()
	c := newTestContainer(t, sharedLocal(t), sandbox.Spec{})
	tests := []struct {
		name string
		give string
		want []sandbox.File
	}{
		{"new file", "open('a.csv', 'w').write('1,2')", []sandbox.File{{Path: "/mnt/data/a.csv", Size: 3}}},
		{"unchanged", "x = 1", nil},
		{"changed", "open('a.csv', 'a').write(',3')", []sandbox.File{{Path: "/mnt/data/a.csv", Size: 5}}},
		{"in a directory, absolute path", "import os\nos.makedirs('/mnt/data/d/e')\nopen('/mnt/data/d/e/b.txt', 'w').write('x')",
			[]sandbox.File{{Path: "/mnt/data/d/e/b.txt", Size: 1}}},
		{"several, sorted", "for n in 'zy':\n    open(n, 'w').write(n * 2)", []sandbox.File{{Path: "/mnt/data/y", Size: 2}, {Path: "/mnt/data/z", Size: 2}}},
		{"deleted files are not listed", "import os\nos.remove('a.csv')", nil},
		{"outside /mnt/data", "open('/tmp/t', 'w').write('t')", nil},
	}
	for _, tt := range tests {
		res := runIn(t, c, tt.give)
		require.Nil(t, res.Error, "%s: error of %q", tt.name, tt.give)
		assert.Equal(t, tt.want, res.Files, "%s: files of %q", tt.name, tt.give)
	}
}

func TestLocalOutputLimit(t *testing.T) {
	t.Parallel()
	const limit = 4096
	c := newTestContainer(t, newTestLocal(t, Config{OutputLimit: limit}), sandbox.Spec{})
	tests := []struct {
		name       string
		give       string
		field      func(sandbox.Result) string
		wantPrefix string
	}{
		{"stdout", "print('x' * 100000)", func(r sandbox.Result) string { return r.Stdout }, strings.Repeat("x", 100)},
		{"stderr", "import sys\nprint('e' * 100000, file=sys.stderr)", func(r sandbox.Result) string { return r.Stderr }, strings.Repeat("e", 100)},
		{"value", "'v' * 100000", func(r sandbox.Result) string { return r.Value }, "'" + strings.Repeat("v", 100)},
		{"many lines", "for i in range(100000):\n    print('l')", func(r sandbox.Result) string { return r.Stdout }, strings.Repeat("l\n", 100)},
	}
	for _, tt := range tests {
		res := runIn(t, c, tt.give)
		got := tt.field(res)
		assert.True(t, res.Truncated, "%s: Truncated", tt.name)
		assert.LessOrEqual(t, len(got), limit+64, "%s: cut near the limit", tt.name)
		assert.Contains(t, got, "[output truncated: ", "%s: visible truncation note", tt.name)
		assert.True(t, strings.HasPrefix(got, tt.wantPrefix), "%s: keeps the start", tt.name)
	}
	res := runIn(t, c, "print('small')")
	assert.Equal(t, "small\n", res.Stdout, "the next run is whole again")
	assert.False(t, res.Truncated, "the next run is not truncated")
}

func TestLocalTimeoutInterrupts(t *testing.T) {
	t.Parallel()
	c := newTestContainer(t, sharedLocal(t), sandbox.Spec{})
	runIn(t, c, "x = 1")
	tests := []struct {
		name string
		give string
	}{
		{"busy loop", "print('started')\nwhile True:\n    pass"},
		{"blocking sleep", "print('started')\nimport time\ntime.sleep(600)"},
	}
	for _, tt := range tests {
		res, err := runTimeout(c, tt.give, time.Second)
		assert.ErrorIs(t, err, sandbox.ErrTimeout, "%s: timed out", tt.name)
		assert.NotErrorIs(t, err, sandbox.ErrLost, "%s: interrupted, not killed", tt.name)
		assert.Equal(t, "started\n", res.Stdout, "%s: output before the interrupt", tt.name)
		require.NotNil(t, res.Error, "%s: interrupted", tt.name)
		assert.Equal(t, "KeyboardInterrupt", res.Error.Name, "%s: interrupted like a notebook", tt.name)
		assert.Equal(t, "1\n", runIn(t, c, "print(x)").Stdout, "%s: state survives the interrupt", tt.name)
	}
}

// TestLocalInterruptBeforeTheRunStarts makes the driver slow (from a cell: the code can reach
// the driver's functions) so that a run's time is up before the run starts: it is interrupted
// as it starts, not lost.
func TestLocalInterruptBeforeTheRunStarts(t *testing.T) {
	t.Parallel()
	l := sharedLocal(t)
	slowDriver := func(fn string) string {
		return fmt.Sprintf(`import sys, time
g = sys._getframe(1).f_globals
def slow(*args, f=g[%[1]q]):
    time.sleep(1)
    return f(*args)
g[%[1]q] = slow`, fn)
	}
	tests := []struct {
		name string
		slow string // the driver function that takes a second longer
		give string
	}{
		{"the interrupt arrives while the driver prepares the run", "_reset_streams", "while True:\n    pass"},
		{"a large cell sent with little time left", "_recv", strings.Repeat("#", 1<<20) + "\nwhile True:\n    pass"},
	}
	for _, tt := range tests {
		c := newTestContainer(t, l, sandbox.Spec{})
		runIn(t, c, "x = 1\n"+slowDriver(tt.slow))
		res, err := runTimeout(c, tt.give, 300*time.Millisecond)
		assert.ErrorIs(t, err, sandbox.ErrTimeout, "%s: timed out", tt.name)
		assert.NotErrorIs(t, err, sandbox.ErrLost, "%s: interrupted, not killed", tt.name)
		if assert.NotNil(t, res.Error, "%s: interrupted", tt.name) {
			assert.Equal(t, "KeyboardInterrupt", res.Error.Name, "%s: interrupted like a notebook", tt.name)
		}
		assert.Equal(t, "1\n", runIn(t, c, "print(x)").Stdout, "%s: state survives the interrupt", tt.name)
	}
}

func TestLocalTimeoutKillsStubbornCode(t *testing.T) {
	t.Parallel()
	inBothStarts(t, testLocalTimeoutKillsStubbornCode)
}

func testLocalTimeoutKillsStubbornCode(t *testing.T) {
	t.Parallel()
	l := newTestLocal(t, Config{InterruptGrace: 200 * time.Millisecond})
	tests := []struct {
		name string
		give string
	}{
		{"ignores SIGINT", "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nprint('stubborn')\nwhile True:\n    pass"},
		{"swallows KeyboardInterrupt", "print('stubborn')\nwhile True:\n    try:\n        while True:\n            pass\n    except KeyboardInterrupt:\n        pass"},
	}
	for _, tt := range tests {
		c := newTestContainer(t, l, sandbox.Spec{})
		res, err := runTimeout(c, tt.give, time.Second)
		assert.ErrorIs(t, err, sandbox.ErrTimeout, "%s: timed out", tt.name)
		assert.ErrorIs(t, err, sandbox.ErrLost, "%s: killed", tt.name)
		assert.Equal(t, "stubborn\n", res.Stdout, "%s: partial output", tt.name)
		_, err = runTimeout(c, "1", 5*time.Second)
		assert.ErrorIs(t, err, sandbox.ErrLost, "%s: the killed container is gone", tt.name)
	}
}

func TestLocalLostAndCancelled(t *testing.T) {
	t.Parallel()
	inBothStarts(t, testLocalLostAndCancelled)
}

func testLocalLostAndCancelled(t *testing.T) {
	t.Parallel()
	l := sharedLocal(t)

	c := newTestContainer(t, l, sandbox.Spec{})
	res, err := runTimeout(c, "print('bye', flush=True)\nimport os\nos._exit(3)", 10*time.Second)
	assert.ErrorIs(t, err, sandbox.ErrLost, "the interpreter exited")
	assert.Equal(t, "bye\n", res.Stdout, "output before the exit")

	c = newTestContainer(t, l, sandbox.Spec{})
	runIn(t, c, "x = 2")
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	_, err = c.Run(ctx, "import time\ntime.sleep(600)")
	assert.ErrorIs(t, err, context.Canceled, "cancelled")
	assert.NotErrorIs(t, err, sandbox.ErrTimeout, "cancelled, not timed out")
	assert.Equal(t, "2\n", runIn(t, c, "print(x)").Stdout, "a cancelled run keeps the container")
	_, err = c.Run(ctx, "print(x)")
	assert.ErrorIs(t, err, context.Canceled, "a done context runs nothing")
	assert.Equal(t, "2\n", runIn(t, c, "print(x)").Stdout, "and leaves the container alone")
}

func TestLocalDelete(t *testing.T) {
	t.Parallel()
	inBothStarts(t, testLocalDelete)
}

func testLocalDelete(t *testing.T) {
	t.Parallel()
	l := sharedLocal(t)
	c, err := l.Create(context.Background(), sandbox.Spec{})
	require.NoError(t, err, "create")
	runIn(t, c, "x = 1")
	require.NoError(t, c.Delete(context.Background()), "delete")
	require.NoError(t, c.Delete(context.Background()), "delete again")
	_, err = runTimeout(c, "x", 5*time.Second)
	assert.ErrorIs(t, err, sandbox.ErrClosed, "run after delete")
	assert.False(t, c.(*container).Alive(), "process gone")

	// Delete during a run stops it.
	c, err = l.Create(context.Background(), sandbox.Spec{})
	require.NoError(t, err, "create")
	time.AfterFunc(300*time.Millisecond, func() { _ = c.Delete(context.Background()) })
	_, err = runTimeout(c, "while True:\n    pass", 30*time.Second)
	assert.ErrorIs(t, err, sandbox.ErrClosed, "run stopped by delete")
}

func TestLocalMemoryLimit(t *testing.T) {
	t.Parallel()
	inBothStarts(t, testLocalMemoryLimit)
}

func testLocalMemoryLimit(t *testing.T) {
	t.Parallel()
	l := sharedLocal(t)
	tests := []struct {
		name string
		give sandbox.Spec
		want string
	}{
		{"default", sandbox.Spec{}, "1073741824"},
		{"4g", sandbox.Spec{MemoryLimit: "4g"}, "4294967296"},
		{"upper case", sandbox.Spec{MemoryLimit: "16G"}, "17179869184"},
	}
	for _, tt := range tests {
		c := newTestContainer(t, l, tt.give)
		res := runIn(t, c, "import resource\nresource.getrlimit(resource.RLIMIT_AS)[0]")
		assert.Equal(t, tt.want, res.Value, "%s: RLIMIT_AS", tt.name)
	}
	_, err := l.Create(context.Background(), sandbox.Spec{MemoryLimit: "lots"})
	assert.Error(t, err, "an invalid memory limit")
	assert.Equal(t, sandbox.Spec{MemoryLimit: "1g"}, l.ResolveSpec(sandbox.Spec{}), "ResolveSpec fills the default")
	assert.Equal(t, sandbox.Spec{MemoryLimit: "4g"}, l.ResolveSpec(sandbox.Spec{MemoryLimit: "4096M"}), "ResolveSpec canonicalizes")
}

func TestLocalPreload(t *testing.T) {
	t.Parallel()
	hasScientificPython(t)
	c := newTestContainer(t, newTestLocal(t, Config{Preload: true}), sandbox.Spec{})
	res := runIn(t, c, "import sys\nsorted(m for m in ('numpy', 'pandas', 'matplotlib.pyplot') if m in sys.modules)")
	assert.Equal(t, "['matplotlib.pyplot', 'numpy', 'pandas']", res.Value, "preloaded modules")
	res = runIn(t, c, "'np' in dir() or 'numpy' in dir()")
	assert.Equal(t, "False", res.Value, "preloading does not fill the user's namespace")
	res = runIn(t, c, "import matplotlib.pyplot as plt\nplt.plot([1]);")
	assert.Len(t, res.Images, 1, "plots work after preloading")
}

func TestNewNeedsBubblewrap(t *testing.T) {
	t.Parallel()
	_, err := New(Config{Bwrap: "/nonexistent/bwrap"}, zaptest.NewLogger(t))
	require.Error(t, err, "missing bubblewrap")
	assert.Contains(t, err.Error(), "bubblewrap", "the error names the problem")
	assert.Contains(t, err.Error(), "unsafe_no_isolation", "the error names the way out")

	_, err = New(Config{FirstUID: -5}, zaptest.NewLogger(t))
	assert.Error(t, err, "a negative first uid is refused")
	_, err = New(Config{FirstUID: 1 << 32}, zaptest.NewLogger(t))
	assert.Error(t, err, "a uid range beyond 32 bits is refused")
	_, err = New(Config{DefaultMemoryLimit: "4g", MaxMemoryLimit: "2g"}, zaptest.NewLogger(t))
	assert.Error(t, err, "a default memory limit above the max is refused")
	_, err = New(Config{CPUQuota: -1}, zaptest.NewLogger(t))
	assert.Error(t, err, "a negative cpu quota is refused")
	_, err = New(Config{DefaultMemoryLimit: "much"}, zaptest.NewLogger(t))
	assert.Error(t, err, "an invalid default memory limit is refused")
}

func TestLocalUnsafeNoIsolation(t *testing.T) {
	t.Parallel()
	l := newTestLocal(t, Config{Bwrap: "/nonexistent/bwrap", UnsafeNoIsolation: true})
	c := newTestContainer(t, l, sandbox.Spec{})
	res := runIn(t, c, "x = 3\nopen('f.txt', 'w').write('abc')\nprint(x)")
	assert.Equal(t, "3\n", res.Stdout, "runs without isolation")
	assert.Equal(t, []sandbox.File{{Path: "/mnt/data/f.txt", Size: 3}}, res.Files, "paths shown as in a container")
	res = runIn(t, c, "import os\nsorted(os.environ)")
	assert.NotContains(t, res.Value, "GOPATH", "the server's environment is not passed even without isolation")
}

func TestLocalClose(t *testing.T) {
	t.Parallel()
	inBothStarts(t, testLocalClose)
}

func testLocalClose(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Skip("bubblewrap is not installed")
	}
	l, err := New(Config{}, zaptest.NewLogger(t))
	require.NoError(t, err, "New")
	c, err := l.Create(context.Background(), sandbox.Spec{})
	require.NoError(t, err, "create")
	require.NoError(t, l.Close(), "close")
	require.NoError(t, l.Close(), "close again")
	assert.False(t, c.(*container).Alive(), "Close killed the live container")
	_, err = l.Create(context.Background(), sandbox.Spec{})
	assert.ErrorIs(t, err, sandbox.ErrClosed, "create after close")
}

// TestLocalStartFailures runs a Local whose bubblewrap is gone after New, so that every
// start fails in the middle: a failed start leaves no cgroup behind, and Close, racing with
// failing starts, returns.
func TestLocalStartFailures(t *testing.T) {
	t.Parallel()
	bwrap, err := exec.LookPath("bwrap")
	if err != nil {
		t.Skip("bubblewrap is not installed")
	}
	dir, err := os.MkdirTemp("", "codeinterp-test-")
	require.NoError(t, err, "temporary directory")
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755), "the sandbox user runs bubblewrap from it")
	link := filepath.Join(dir, "bwrap")
	require.NoError(t, os.Symlink(bwrap, link), "link bubblewrap")
	// Each start the exec way runs bubblewrap; a forked one does not.
	l, err := New(Config{Bwrap: link, Start: StartExec}, zaptest.NewLogger(t))
	require.NoError(t, err, "New")
	var parents []string // the Local's cgroups, which hold one directory per container
	if l.cgroups != nil {
		parents = slices.Clone(l.cgroups.dirs)
	}
	require.NoError(t, os.Remove(link), "remove bubblewrap")

	_, err = l.Create(context.Background(), sandbox.Spec{})
	require.ErrorIs(t, err, sandbox.ErrUnavailable, "a start without bubblewrap")
	for _, p := range parents {
		entries, err := os.ReadDir(p)
		require.NoError(t, err, "read cgroup %s", p)
		for _, e := range entries {
			assert.False(t, e.IsDir(), "cgroup %s of a failed start is removed", e.Name())
		}
	}

	var attempts atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				_, err := l.Create(context.Background(), sandbox.Spec{})
				if errors.Is(err, sandbox.ErrClosed) {
					return
				}
				attempts.Add(1)
			}
		})
	}
	for attempts.Load() < 100 {
		runtime.Gosched()
	}
	closed := make(chan error, 1)
	go func() { closed <- l.Close() }()
	select {
	case err := <-closed:
		assert.NoError(t, err, "close while starts fail")
	case <-time.After(time.Minute):
		require.FailNow(t, "Close hangs while starts fail")
	}
	wg.Wait()
	for _, p := range parents {
		_, err := os.Stat(p)
		assert.ErrorIs(t, err, os.ErrNotExist, "Close removed the Local's cgroup %s: no container's is left in it", p)
	}
}

func TestManagerOverLocal(t *testing.T) {
	t.Parallel()
	l := newTestLocal(t, Config{})
	m := sandbox.NewManager(l, sandbox.ManagerConfig{WarmPool: 1}, zaptest.NewLogger(t))
	ctx := context.Background()
	for warm := warmGauge(t, m); warm() < 1; {
		time.Sleep(5 * time.Millisecond) // the pool fills in the background
	}
	warm := l.liveContainers()
	require.Len(t, warm, 1, "one warm container")

	s, err := m.Acquire(ctx, sandbox.AcquireRequest{Identity: "alice", Session: "s"})
	require.NoError(t, err, "acquire")
	res, err := s.Run(ctx, "x = 41\nx + 1", 0)
	require.NoError(t, err, "first run")
	assert.Equal(t, "42", res.Value, "first run")
	used := warm[0]
	res, err = used.Run(ctx, "x")
	require.NoError(t, err, "run in the warm container itself")
	assert.Equal(t, "41", res.Value, "the first run used the warm container")

	// Killed from outside while idle (as the kernel's OOM killer would): the next run goes to
	// a fresh container for the same key.
	oldID := s.ContainerID()
	tree := containerTree(used)
	require.NoError(t, syscall.Kill(containerPID(used), syscall.SIGKILL), "kill")
	for used.Alive() {
		time.Sleep(5 * time.Millisecond)
	}
	res, err = s.Run(ctx, "'x' in dir()", 0)
	require.NoError(t, err, "run after the container died")
	assert.Equal(t, "False", res.Value, "fresh state")
	assert.NotEqual(t, oldID, s.ContainerID(), "new container id")
	s.Release()

	require.NoError(t, m.Close(ctx), "close")
	assert.Empty(t, l.liveContainers(), "Close deleted every container")
	assert.Empty(t, survivors(tree), "no process of the killed container is left")
}
