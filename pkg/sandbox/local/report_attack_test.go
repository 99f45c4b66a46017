package local

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/codeinterp/codeinterp/pkg/sandbox"
)

// replaceScanner defines report(files) in a cell: it replaces the driver's file scanner (the code
// runs in the driver's process) by one that reports files, a list of [path, size] pairs, at the
// end of every run from then on.
const replaceScanner = `import sys
G = sys._getframe(1).f_globals
def report(files):
    G['_scan_files'] = lambda: files
`

// heapBytes returns the bytes of live heap objects of this process, after a collection.
func heapBytes() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// forgedRun runs code in l's container, which must succeed.
func forgedRun(t *testing.T, l *sandbox.Lease, code string) sandbox.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	res, err := l.Run(ctx, code, 120*time.Second)
	require.NoError(t, err, "run %.200q", code)
	return res
}

// TestAdversarialForgedFileListGrowsNoServer: code that replaces the driver's scanner reports
// what files it likes at the end of every run. Paths that are not paths (8 MiB each, as in
// issue 23) are refused and kept nowhere; plausible ones (4 KB, distinct in every run) are kept
// within the container's files table bound. The server's heap does not grow by what the code
// reports. Not parallel: it measures this process's heap.
func TestAdversarialForgedFileListGrowsNoServer(t *testing.T) {
	lc := sharedLocal(t)
	m := sandbox.NewManager(lc, sandbox.ManagerConfig{}, zaptest.NewLogger(t))
	defer func() { assert.NoError(t, m.Close(context.Background()), "close manager") }()
	l, err := m.Acquire(context.Background(), sandbox.AcquireRequest{Identity: "mallory"})
	require.NoError(t, err, "Acquire")
	defer l.Release()
	forgedRun(t, l, replaceScanner)

	before := heapBytes()
	for i := range 4 {
		res := forgedRun(t, l, fmt.Sprintf("report([['/mnt/data/%d' + 'a' * (8 << 20), 1]])", i))
		assert.Empty(t, res.Files, "run %d: an 8 MiB path is not listed", i)
		assert.Contains(t, res.FilesNote, "refused", "run %d: the model is told", i)
	}
	// 2,000 distinct paths of 4 KB per run (8 MB, within one answer's bound), 5 runs: 10,000
	// plausible paths, 40 MB.
	long := "'/mnt/data/' + ('d' * 250 + '/') * 15 + 'f' * 200"
	for i := range 5 {
		res := forgedRun(t, l, fmt.Sprintf("report([[%s + '%d-%%d' %% j, 1] for j in range(2000)])", long, i))
		assert.LessOrEqual(t, len(res.Files), 2000, "run %d: at most what was reported is listed", i)
	}
	grown := heapBytes() - before
	t.Logf("server heap grew by %d bytes (%.1f MiB) for 4 forged 8 MiB paths and 10,000 forged 4 KB paths", grown, float64(grown)/(1<<20))
	assert.Less(t, grown, int64(2*sandbox.DefaultMaxFileTableBytes), "the heap grows by one files table's bound at most")

	files, err := m.Files(context.Background(), "mallory", l.ContainerID())
	require.NoError(t, err, "Files")
	assert.Empty(t, files, "no forged file is listed (none exists)")
	res := forgedRun(t, l, "1")
	assert.Equal(t, "1", res.Value, "the container works on")
}

// TestAdversarialManyLongFilesStayBounded: honest code writes 9,900 files with 3.9 KB paths
// (the driver scans 10,000 entries of /mnt/data: the files and their 16 directories): the run
// lists what one answer may hold and says how many more there are, and rewriting them in
// batches fills the files table only up to its bound, the rest noted to the model. Not
// parallel: it measures this process's heap.
func TestAdversarialManyLongFilesStayBounded(t *testing.T) {
	lc := sharedLocal(t)
	m := sandbox.NewManager(lc, sandbox.ManagerConfig{}, zaptest.NewLogger(t))
	defer func() { assert.NoError(t, m.Close(context.Background()), "close manager") }()
	l, err := m.Acquire(context.Background(), sandbox.AcquireRequest{Identity: "alice"})
	require.NoError(t, err, "Acquire")
	defer l.Release()
	const n = 9900
	before := heapBytes()
	res := forgedRun(t, l, fmt.Sprintf(`import os
D = '/mnt/data/' + '/'.join(['d' * 230] * 16)
os.makedirs(D)
def name(i): return D + '/' + 'f' * 200 + '%%05d' %% i
for i in range(%d):
    open(name(i), 'w').close()
len(name(0))`, n))
	require.Equal(t, "3911", res.Value, "the paths' length")
	size := 0
	for _, f := range res.Files {
		size += len(f.Path)
	}
	assert.LessOrEqual(t, size, maxFileListBytes, "one run lists at most maxFileListBytes of paths")
	assert.Contains(t, res.FilesNote, fmt.Sprintf("%d more files written are not listed", n-len(res.Files)), "the model is told of the rest")
	noted := false
	for i := 0; i < n; i += 500 {
		res = forgedRun(t, l, fmt.Sprintf("for i in range(%d, %d):\n    open(name(i), 'w').write('x')", i, min(i+500, n)))
		noted = noted || strings.Contains(res.FilesNote, "no file id")
	}
	assert.True(t, noted, "once the files table is full, the model is told")
	grown := heapBytes() - before
	t.Logf("server heap grew by %d bytes (%.1f MiB) for %d files with 3.9 KB paths", grown, float64(grown)/(1<<20), n)
	assert.Less(t, grown, int64(2*sandbox.DefaultMaxFileTableBytes), "the heap grows by one files table's bound at most")
	files, err := m.Files(context.Background(), "alice", l.ContainerID())
	require.NoError(t, err, "Files")
	cost := int64(0)
	for _, f := range files {
		cost += int64(len(f.Path)) + sandbox.FileEntryOverhead
	}
	assert.LessOrEqual(t, cost, int64(sandbox.DefaultMaxFileTableBytes), "the table holds %d files, within its bound", len(files))
}
