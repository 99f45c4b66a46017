package sandbox_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/codeinterp/codeinterp/pkg/sandbox"
	"github.com/codeinterp/codeinterp/pkg/sandbox/sandboxtest"
	"github.com/codeinterp/codeinterp/pkg/store/memory"
)

// tablePath is the container path of file i, 30 bytes long.
func tablePath(i int) string { return fmt.Sprintf("/mnt/data/file-%015d", i) }

// perFile is what one file at tablePath costs a files table.
const perFile = 30 + sandbox.FileEntryOverhead

// fill uploads files to container id until the table refuses one, and returns how many it took.
func fill(t *testing.T, m *sandbox.Manager, identity, id string, from int) int {
	t.Helper()
	for i := from; ; i++ {
		_, err := m.PutFile(context.Background(), identity, id, tablePath(i), "", strings.NewReader("x"), 0)
		if err != nil {
			require.ErrorIs(t, err, sandbox.ErrFileTooLarge, "upload %d is refused for the table's bound only", i)
			return i - from
		}
		require.Less(t, i-from, 1000, "the table takes no more than its bound")
	}
}

// TestManagerFilesTableBytes: a files table is bounded in bytes per container, per identity
// and in all; a file over a bound is refused (upload) or listed without an id and noted (run),
// and removing files or containers gives their bytes back.
func TestManagerFilesTableBytes(t *testing.T) {
	cfg := sandbox.ManagerConfig{
		MaxFileTableBytes:            4 * perFile,
		MaxFileTableBytesPerIdentity: 6 * perFile,
		MaxAllFileTableBytes:         10 * perFile,
	}
	t.Run("per container", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ctx := context.Background()
			p := &sandboxtest.Provider{}
			m := newTestManager(t, p, cfg)
			c := create(t, m, sandbox.CreateRequest{Identity: "alice"})
			assert.Equal(t, 4, fill(t, m, "alice", c.ID, 0), "the container's bound")
			_, err := m.PutFile(ctx, "alice", c.ID, tablePath(0), "", strings.NewReader("y"), 0)
			assert.NoError(t, err, "a known file is replaced at the bound")

			l := acquire(t, m, sandbox.AcquireRequest{Identity: "alice", ContainerID: c.ID})
			res := run(t, l, "write "+tablePath(100)+" x")
			require.Len(t, res.Files, 1, "the run's file is listed")
			assert.Empty(t, res.Files[0].ID, "without an id beyond the bound")
			assert.Contains(t, res.FilesNote, "1 of the files written have no file id", "the model is told")
			l.Release()

			files, err := m.Files(ctx, "alice", c.ID)
			require.NoError(t, err, "Files")
			require.NoError(t, m.DeleteFile(ctx, "alice", c.ID, files[0].ID), "DeleteFile")
			assert.Equal(t, 1, fill(t, m, "alice", c.ID, 200), "a deleted file's bytes come back")
		})
	})
	t.Run("per identity and in all", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ctx := context.Background()
			m := newTestManager(t, &sandboxtest.Provider{}, cfg)
			a1 := create(t, m, sandbox.CreateRequest{Identity: "alice"})
			a2 := create(t, m, sandbox.CreateRequest{Identity: "alice"})
			assert.Equal(t, 4, fill(t, m, "alice", a1.ID, 0), "alice's first container")
			assert.Equal(t, 2, fill(t, m, "alice", a2.ID, 100), "alice's second container: the rest of her budget")
			b1 := create(t, m, sandbox.CreateRequest{Identity: "bob"})
			assert.Equal(t, 4, fill(t, m, "bob", b1.ID, 0), "bob is not held back by alice")
			c1 := create(t, m, sandbox.CreateRequest{Identity: "carol"})
			assert.Equal(t, 0, fill(t, m, "carol", c1.ID, 0), "the server's budget is spent")
			reg := prometheus.NewRegistry()
			for _, c := range m.Collectors() {
				require.NoError(t, reg.Register(c), "register the manager's metrics")
			}
			assert.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(fmt.Sprintf(`
# HELP codeinterp_sandbox_file_table_bytes Server memory the containers' files tables are charged (ManagerConfig.MaxAllFileTableBytes bounds it).
# TYPE codeinterp_sandbox_file_table_bytes gauge
codeinterp_sandbox_file_table_bytes %d
`, 10*perFile)), "codeinterp_sandbox_file_table_bytes"), "the gauge shows the budget spent")
			require.NoError(t, m.DeleteContainer(ctx, "alice", a1.ID), "DeleteContainer")
			assert.Equal(t, 4, fill(t, m, "carol", c1.ID, 0), "a deleted container's bytes come back")
			assert.Equal(t, 0, fill(t, m, "alice", a2.ID, 200), "alice's budget: 2 files of a2 and no room in all")
		})
	})
}

// TestManagerSessionNameBound: a session name of any length costs the Manager a fixed-size
// key, also in the record kept of its container once deleted.
func TestManagerSessionNameBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		reg := memory.NewRegistry()
		m := newTestManager(t, &sandboxtest.Provider{}, sandbox.ManagerConfig{Registry: reg})
		long := strings.Repeat("s", 16<<20)
		l := acquire(t, m, sandbox.AcquireRequest{Identity: "alice", Session: long})
		id := l.ContainerID()
		again := acquire(t, m, sandbox.AcquireRequest{Identity: "alice", Session: long})
		assert.Equal(t, id, again.ContainerID(), "the long name still names its container")
		other := acquire(t, m, sandbox.AcquireRequest{Identity: "alice", Session: long[:len(long)-1]})
		assert.NotEqual(t, id, other.ContainerID(), "another name, another container")
		l.Release()
		again.Release()
		other.Release()
		require.NoError(t, m.DeleteContainer(ctx, "alice", id), "DeleteContainer")
		r, ok, err := reg.Lookup(ctx, id)
		require.NoError(t, err, "Lookup")
		require.True(t, ok, "the deleted container is remembered")
		assert.True(t, r.Expired, "as expired")
		assert.LessOrEqual(t, len(r.Session), len("sha256:")+2*sha256.Size, "with its session's fixed-size key, not the name")
	})
}

// listing is a Provider of one container whose runs list files, which it does not hold.
type listing struct{ files []sandbox.File }

func (p *listing) Create(context.Context, sandbox.Spec) (sandbox.Container, error) { return p, nil }
func (p *listing) Run(context.Context, string) (sandbox.Result, error) {
	return sandbox.Result{Files: slices.Clone(p.files)}, nil
}
func (p *listing) Delete(context.Context) error { return nil }

// TestFileEntryOverhead measures what a file of a files table costs the server besides its
// path (which the table keeps as the run reported it): FileEntryOverhead must cover it.
func TestFileEntryOverhead(t *testing.T) {
	const n = 5000
	p := &listing{}
	for i := range n {
		p.files = append(p.files, sandbox.File{Path: tablePath(i), Size: 1})
	}
	m := newTestManager(t, p, sandbox.ManagerConfig{})
	l := acquire(t, m, sandbox.AcquireRequest{Identity: "alice"})
	defer l.Release()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	res := run(t, l, "")
	require.Len(t, res.Files, n, "every file listed")
	require.NotEmpty(t, res.Files[n-1].ID, "and given an id")
	res = sandbox.Result{}
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := (int64(after.HeapAlloc) - int64(before.HeapAlloc)) / n
	t.Logf("a files table entry costs %d bytes besides its path", per)
	assert.LessOrEqual(t, per, int64(sandbox.FileEntryOverhead), "FileEntryOverhead covers an entry")
	runtime.KeepAlive(p)
}
