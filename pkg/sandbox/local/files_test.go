package local

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/codeinterp/codeinterp/pkg/sandbox"
)

// fileModes are the two ways containers run: isolated under bubblewrap, and the unsafe host
// directory mode, where a followed symlink would reach the host directly.
func fileModes(t *testing.T) map[string]*Local {
	t.Helper()
	return map[string]*Local{
		"isolated":     sharedLocal(t),
		"no isolation": newTestLocal(t, Config{Bwrap: "/nonexistent/bwrap", UnsafeNoIsolation: true}),
	}
}

func filesOf(t *testing.T, c sandbox.Container) sandbox.Files {
	t.Helper()
	fa, ok := c.(sandbox.Files)
	require.True(t, ok, "a local container has the Files ability")
	return fa
}

func readAll(t *testing.T, fa sandbox.Files, p string) []byte {
	t.Helper()
	rc, _, err := fa.OpenFile(context.Background(), p)
	require.NoError(t, err, "OpenFile(%s)", p)
	defer rc.Close()
	b, err := io.ReadAll(rc)
	require.NoError(t, err, "read %s", p)
	return b
}

// listing is Python that shows every entry under /mnt/data, hidden ones included.
const listing = "import os\nsorted(os.path.relpath(os.path.join(d, n), '.') for d, ds, fs in os.walk('.') for n in ds + fs)"

// TestLocalFilesRoundTrip: a file written by the server is the code's to read and change, and
// a file the code writes reads back byte for byte, streamed.
func TestLocalFilesRoundTrip(t *testing.T) {
	t.Parallel()
	for name, l := range fileModes(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			c := newTestContainer(t, l, sandbox.Spec{})
			fa := filesOf(t, c)
			st, err := fa.WriteFile(ctx, "/mnt/data/in/deep/data.csv", strings.NewReader("a,b\n1,2\n"), 0)
			require.NoError(t, err, "WriteFile")
			assert.Equal(t, int64(8), st.Size, "size")
			res := runIn(t, c, "import os\np = 'in/deep/data.csv'\nopen(p, 'a').write('3,4\\n')\n"+
				"(open(p).read(), os.stat(p).st_uid == os.getuid(), oct(os.stat(p).st_mode & 0o777), os.stat('in').st_uid == os.getuid())")
			require.Nil(t, res.Error, "the code reads and appends to the file: %+v", res.Error)
			assert.Equal(t, `('a,b\n1,2\n3,4\n', True, '0o644', True)`, res.Value, "content, owner and mode as the code sees them")
			assert.Equal(t, []sandbox.File{{Path: "/mnt/data/in/deep/data.csv", Size: 12}}, res.Files, "the run changed it")
			assert.Equal(t, "a,b\n1,2\n3,4\n", string(readAll(t, fa, "/mnt/data/in/deep/data.csv")), "the server reads the code's change")

			// A few MiB written by the code, read back streamed and byte-exact.
			res = runIn(t, c, "import hashlib, os\nb = os.urandom(5 << 20)\nopen('out.bin', 'wb').write(b)\nhashlib.sha256(b).hexdigest()")
			rc, st, err := fa.OpenFile(ctx, "/mnt/data/out.bin")
			require.NoError(t, err, "OpenFile")
			assert.Equal(t, int64(5<<20), st.Size, "size")
			h := sha256.New()
			n, err := io.CopyBuffer(h, rc, make([]byte, 32<<10))
			require.NoError(t, err, "read")
			require.NoError(t, rc.Close(), "close")
			assert.Equal(t, int64(5<<20), n, "bytes read")
			assert.Equal(t, "'"+hex.EncodeToString(h.Sum(nil))+"'", res.Value, "byte-exact")

			// Uploaded in 5 MiB: the code sees the same bytes.
			big := make([]byte, 5<<20)
			_, _ = rand.Read(big)
			sum := sha256.Sum256(big)
			_, err = fa.WriteFile(ctx, "/mnt/data/up.bin", bytes.NewReader(big), 0)
			require.NoError(t, err, "WriteFile 5 MiB")
			res = runIn(t, c, "import hashlib\nhashlib.sha256(open('up.bin', 'rb').read()).hexdigest()")
			assert.Equal(t, "'"+hex.EncodeToString(sum[:])+"'", res.Value, "the code reads the upload byte-exact")

			got, err := fa.StatFile(ctx, "/mnt/data/up.bin")
			require.NoError(t, err, "StatFile")
			assert.Equal(t, int64(5<<20), got.Size, "StatFile size")
			require.NoError(t, fa.RemoveFile(ctx, "/mnt/data/up.bin"), "RemoveFile")
			_, err = fa.StatFile(ctx, "/mnt/data/up.bin")
			assert.ErrorIs(t, err, sandbox.ErrFileNotFound, "StatFile after RemoveFile")
			assert.ErrorIs(t, fa.RemoveFile(ctx, "/mnt/data/up.bin"), sandbox.ErrFileNotFound, "RemoveFile again")
			res = runIn(t, c, "import os\nos.path.exists('up.bin')")
			assert.Equal(t, "False", res.Value, "removed for the code too")
			_, _, err = fa.OpenFile(ctx, "/mnt/data/none")
			assert.ErrorIs(t, err, sandbox.ErrFileNotFound, "OpenFile of nothing")
		})
	}
}

// failingReader yields n bytes, then fails.
type failingReader struct {
	n   int
	err error
}

func (r *failingReader) Read(p []byte) (int, error) {
	if r.n == 0 {
		return 0, r.err
	}
	k := min(len(p), r.n)
	r.n -= k
	return k, nil
}

// TestLocalFilesLeaveNothingOnFailure: a write beyond its limit, beyond the tmpfs, with a
// failing reader or a cancelled context leaves nothing, not even its temporary file, and
// does not replace the file already there.
func TestLocalFilesLeaveNothingOnFailure(t *testing.T) {
	t.Parallel()
	l := newTestLocal(t, Config{DataBytes: 4 << 20, TmpBytes: 4 << 20})
	c := newTestContainer(t, l, sandbox.Spec{})
	fa := filesOf(t, c)
	ctx := context.Background()
	_, err := fa.WriteFile(ctx, "/mnt/data/keep.txt", strings.NewReader("old"), 0)
	require.NoError(t, err, "WriteFile")
	boom := errors.New("client went away")
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	tests := []struct {
		name    string
		ctx     context.Context
		give    io.Reader
		limit   int64
		wantErr error
	}{
		{"beyond the limit", ctx, bytes.NewReader(make([]byte, 1<<20)), 1000, sandbox.ErrFileTooLarge},
		{"beyond the tmpfs", ctx, bytes.NewReader(make([]byte, 8<<20)), 0, sandbox.ErrFileTooLarge},
		{"reader fails", ctx, &failingReader{n: 1 << 20, err: boom}, 0, boom},
		{"context cancelled", cancelled, bytes.NewReader(make([]byte, 1<<20)), 0, context.Canceled},
	}
	for _, tt := range tests {
		for _, p := range []string{"/mnt/data/new.bin", "/mnt/data/keep.txt"} {
			_, err := fa.WriteFile(tt.ctx, p, tt.give, tt.limit)
			assert.ErrorIs(t, err, tt.wantErr, "%s: WriteFile(%s)", tt.name, p)
			if s, ok := tt.give.(io.Seeker); ok {
				_, _ = s.Seek(0, io.SeekStart)
			}
			if fr, ok := tt.give.(*failingReader); ok {
				fr.n = 1 << 20
			}
		}
		res := runIn(t, c, listing)
		assert.Equal(t, "['keep.txt']", res.Value, "%s: nothing is left", tt.name)
		assert.Equal(t, "old", string(readAll(t, fa, "/mnt/data/keep.txt")), "%s: the file there is untouched", tt.name)
	}
	res := runIn(t, c, "import shutil\nshutil.disk_usage('/mnt/data').used < (64 << 10)")
	assert.Equal(t, "True", res.Value, "the tmpfs holds nothing of the failed writes")
	assertHealthy(t, l, c)
}

// TestAdversarialFiles: what the code plants under /mnt/data (symlinks to host files and to
// /proc/1/root, directory symlinks, .., FIFOs, hard links) never makes the server read, write
// or reveal a host file, nor hang.
func TestAdversarialFiles(t *testing.T) {
	t.Parallel()
	for name, l := range fileModes(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			hostDir := t.TempDir()
			secret := filepath.Join(hostDir, "secret")
			require.NoError(t, os.WriteFile(secret, []byte("host secret"), 0o644), "host file")
			c := newTestContainer(t, l, sandbox.Spec{})
			fa := filesOf(t, c)
			res := runIn(t, c, `import os
os.symlink('`+secret+`', 'secret')
os.symlink('/proc/1/root`+secret+`', 'proc1')
os.symlink('/proc/self/root/etc/passwd', 'self')
os.symlink('`+hostDir+`', 'dirlink')
os.symlink('..', 'up')
os.symlink(os.getcwd() + '/../..', 'upabs')
os.mkfifo('fifo')
open('own', 'w').write('own')
os.link('own', 'hard')
try:
    os.mknod('dev', 0o600 | 0o020000, os.makedev(1, 3))
    dev = 'made'
except OSError as e:
    dev = e.errno
dev`)
			require.Nil(t, res.Error, "plant: %+v", res.Error)
			if l.isolated() {
				assert.NotEqual(t, "'made'", res.Value, "the code cannot make device nodes")
			}

			for _, p := range []string{"/mnt/data/secret", "/mnt/data/proc1", "/mnt/data/self", "/mnt/data/dirlink/secret",
				"/mnt/data/up/data/secret", "/mnt/data/upabs", "/mnt/data/fifo", "/mnt/data/dirlink", "/mnt/data/dev", "/mnt/data/up"} {
				done := make(chan struct{})
				var rc io.ReadCloser
				var err error
				go func() {
					defer close(done)
					rc, _, err = fa.OpenFile(ctx, p)
				}()
				select {
				case <-done:
				case <-time.After(10 * time.Second):
					t.Fatalf("OpenFile(%s) hangs", p)
				}
				if rc != nil {
					b, _ := io.ReadAll(rc)
					rc.Close()
					t.Errorf("OpenFile(%s) opened something: %q", p, b)
				}
				assert.ErrorIs(t, err, sandbox.ErrFileNotFound, "OpenFile(%s)", p)
				_, err = fa.StatFile(ctx, p)
				assert.ErrorIs(t, err, sandbox.ErrFileNotFound, "StatFile(%s)", p)
			}
			for _, p := range []string{"/mnt/data/../../" + secret, "/mnt/data/../etc/passwd", secret} {
				_, _, err := fa.OpenFile(ctx, p)
				assert.ErrorIs(t, err, sandbox.ErrInvalidPath, "OpenFile(%s)", p)
				_, err = fa.WriteFile(ctx, p, strings.NewReader("x"), 0)
				assert.ErrorIs(t, err, sandbox.ErrInvalidPath, "WriteFile(%s)", p)
			}

			// Writes replace what is at the path, never write through it.
			for _, p := range []string{"/mnt/data/secret", "/mnt/data/proc1", "/mnt/data/fifo", "/mnt/data/hard"} {
				_, err := fa.WriteFile(ctx, p, strings.NewReader("server"), 0)
				require.NoError(t, err, "WriteFile(%s)", p)
				assert.Equal(t, "server", string(readAll(t, fa, p)), "WriteFile(%s) replaced it with a file", p)
			}
			for _, p := range []string{"/mnt/data/dirlink/x", "/mnt/data/dirlink/new/x", "/mnt/data/up/x", "/mnt/data/own/x"} {
				_, err := fa.WriteFile(ctx, p, strings.NewReader("x"), 0)
				assert.ErrorIs(t, err, sandbox.ErrInvalidPath, "WriteFile(%s) through a symlink or a file", p)
			}
			require.NoError(t, fa.RemoveFile(ctx, "/mnt/data/dirlink"), "RemoveFile of a symlink")
			assert.ErrorIs(t, fa.RemoveFile(ctx, "/mnt/data/dirlink/secret"), sandbox.ErrFileNotFound, "RemoveFile through a symlink")

			b, err := os.ReadFile(secret)
			require.NoError(t, err, "the host file is still there")
			assert.Equal(t, "host secret", string(b), "the host file is untouched")
			entries, err := os.ReadDir(hostDir)
			require.NoError(t, err, "read the host directory")
			assert.Len(t, entries, 1, "nothing was written into the host directory")
			res = runIn(t, c, "(open('own').read(), os.path.islink('secret'), os.stat('hard').st_nlink)")
			assert.Equal(t, "('own', False, 1)", res.Value, "the hard link's other name kept its content; the symlink was replaced")
		})
	}
}

// TestLocalFilesAfterDeath: file calls on a container that died fail with ErrLost, on a
// deleted one with ErrClosed.
func TestLocalFilesAfterDeath(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := sharedLocal(t)
	c, err := l.Create(ctx, sandbox.Spec{})
	require.NoError(t, err, "Create")
	fa := filesOf(t, c)
	_, err = fa.WriteFile(ctx, "/mnt/data/a", strings.NewReader("a"), 0)
	require.NoError(t, err, "WriteFile")
	c.(*container).kill()
	for c.(*container).Alive() {
		time.Sleep(5 * time.Millisecond)
	}
	_, err = fa.StatFile(ctx, "/mnt/data/a")
	assert.ErrorIs(t, err, sandbox.ErrLost, "StatFile of a dead container")
	_, err = fa.WriteFile(ctx, "/mnt/data/b", strings.NewReader("b"), 0)
	assert.ErrorIs(t, err, sandbox.ErrLost, "WriteFile into a dead container")
	require.NoError(t, c.Delete(ctx), "Delete")
	_, _, err = fa.OpenFile(ctx, "/mnt/data/a")
	assert.ErrorIs(t, err, sandbox.ErrClosed, "OpenFile of a deleted container")
	assert.ErrorIs(t, fa.RemoveFile(ctx, "/mnt/data/a"), sandbox.ErrClosed, "RemoveFile of a deleted container")
}

// TestManagerFilesOverLocal: the Manager's files table over real containers: an upload the
// next run's scan sees is not the code's, the code's files get ids and are read back, files
// the code removes vanish.
func TestManagerFilesOverLocal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := sandbox.NewManager(sharedLocal(t), sandbox.ManagerConfig{}, zaptest.NewLogger(t))
	defer func() { require.NoError(t, m.Close(ctx), "close manager") }()
	ci, err := m.Create(ctx, sandbox.CreateRequest{Identity: "alice"})
	require.NoError(t, err, "Create")
	up, err := m.PutFile(ctx, "alice", ci.ID, "/mnt/data/data.csv", sandbox.SourceUser, strings.NewReader("x,y\n1,2\n"), 0)
	require.NoError(t, err, "PutFile")
	l, err := m.Acquire(ctx, sandbox.AcquireRequest{Identity: "alice", ContainerID: ci.ID})
	require.NoError(t, err, "Acquire")
	defer l.Release()
	res, err := l.Run(ctx, "import csv\nrows = list(csv.reader(open('/mnt/data/data.csv')))\nopen('/mnt/data/clean.csv', 'w').write('x\\n1\\n')\nrows", 0)
	require.NoError(t, err, "Run")
	assert.Equal(t, "[['x', 'y'], ['1', '2']]", res.Value, "the code reads the upload")
	require.Len(t, res.Files, 1, "only the code's file is the run's: %+v", res.Files)
	assert.Equal(t, "/mnt/data/clean.csv", res.Files[0].Path, "the code's file")
	assert.Regexp(t, `^cfile_[0-9a-f]{32}$`, res.Files[0].ID, "with its id")

	files, err := m.Files(ctx, "alice", ci.ID)
	require.NoError(t, err, "Files")
	require.Len(t, files, 2, "files")
	assert.Equal(t, []string{up.ID, res.Files[0].ID}, []string{files[0].ID, files[1].ID}, "by creation")
	assert.Equal(t, []string{sandbox.SourceUser, sandbox.SourceAssistant}, []string{files[0].Source, files[1].Source}, "sources")
	rc, fi, err := m.OpenFile(ctx, "alice", ci.ID, files[1].ID)
	require.NoError(t, err, "OpenFile")
	b, err := io.ReadAll(rc)
	require.NoError(t, err, "read")
	require.NoError(t, rc.Close(), "close")
	assert.Equal(t, "x\n1\n", string(b), "the code's file, read back")
	assert.Equal(t, int64(4), fi.Bytes, "its size")

	_, err = l.Run(ctx, "import os\nos.remove('clean.csv')", 0)
	require.NoError(t, err, "Run")
	files, err = m.Files(ctx, "alice", ci.ID)
	require.NoError(t, err, "Files")
	assert.Equal(t, []string{up.ID}, []string{files[0].ID}, "the removed file is gone")
	assert.Len(t, files, 1, "files")
	_, err = m.PutFile(ctx, "bob", ci.ID, "/mnt/data/x", "", strings.NewReader("x"), 0)
	assert.ErrorIs(t, err, sandbox.ErrUnknownContainer, "another identity")
}

// TestLocalFilesWriteDuringRun: a run that ends while a write is in progress does not list
// the write's temporary file, and the file appears whole once the write is done.
func TestLocalFilesWriteDuringRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newTestContainer(t, sharedLocal(t), sandbox.Spec{})
	fa := filesOf(t, c)
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := fa.WriteFile(ctx, "/mnt/data/slow.bin", pr, 0)
		done <- err
	}()
	_, err := pw.Write(make([]byte, 1<<20))
	require.NoError(t, err, "first half")
	res := runIn(t, c, listing)
	assert.Empty(t, res.Files, "a write in progress is not the run's file")
	assert.Contains(t, res.Value, uploadPrefix, "the temporary file is there meanwhile")
	_, err = pw.Write(make([]byte, 1<<20))
	require.NoError(t, err, "second half")
	require.NoError(t, pw.Close(), "end")
	require.NoError(t, <-done, "WriteFile")
	res = runIn(t, c, "import os\n(os.path.getsize('slow.bin'), [n for n in os.listdir('.') if n.startswith('.')])")
	assert.Equal(t, "(2097152, [])", res.Value, "whole, and no temporary file left")
}

// TestManagerUploadFailsOverLocal: an upload into a container not started yet that fails on
// its source's side (beyond the limit, the client's reader breaking or reporting too much, the
// request cancelled midway) leaves the container running, empty of it, and usable.
func TestManagerUploadFailsOverLocal(t *testing.T) {
	t.Parallel()
	m := sandbox.NewManager(sharedLocal(t), sandbox.ManagerConfig{}, zaptest.NewLogger(t))
	defer func() { require.NoError(t, m.Close(context.Background()), "close manager") }()
	errTooLarge := errors.New("file beyond the upload limit")
	tests := []struct {
		name    string
		give    io.Reader
		limit   int64
		cancel  bool
		wantErr error
	}{
		{"beyond the limit", bytes.NewReader(make([]byte, 3<<20)), 1 << 20, false, sandbox.ErrFileTooLarge},
		{"the reader says too large", &failingReader{n: 1 << 20, err: errTooLarge}, 0, false, errTooLarge},
		{"the reader breaks", &failingReader{n: 1 << 20, err: io.ErrUnexpectedEOF}, 0, false, io.ErrUnexpectedEOF},
		{"the reader says cancelled", &failingReader{n: 1 << 20, err: context.Canceled}, 0, false, context.Canceled},
		{"the request is cancelled midway", &failingReader{n: 3 << 20}, 0, true, context.Canceled},
	}
	for _, tt := range tests {
		ctx, cancel := context.WithCancel(context.Background())
		ci, err := m.Create(ctx, sandbox.CreateRequest{Identity: "alice"})
		require.NoError(t, err, "%s: Create", tt.name)
		r := tt.give
		if tt.cancel {
			r = io.MultiReader(io.LimitReader(tt.give, 1<<20), readerFunc(func([]byte) (int, error) {
				cancel()
				return 0, context.Canceled
			}))
		}
		_, err = m.PutFile(ctx, "alice", ci.ID, "/mnt/data/big.bin", "", r, tt.limit)
		cancel()
		assert.ErrorIs(t, err, tt.wantErr, "%s: PutFile", tt.name)
		assert.NotErrorIs(t, err, sandbox.ErrExpiredContainer, "%s: PutFile", tt.name)

		ctx = context.Background()
		got, err := m.Container(ctx, "alice", ci.ID)
		require.NoError(t, err, "%s: Container", tt.name)
		assert.Equal(t, sandbox.StatusRunning, got.Status, "%s: the container is still running", tt.name)
		files, err := m.Files(ctx, "alice", ci.ID)
		require.NoError(t, err, "%s: Files", tt.name)
		assert.Empty(t, files, "%s: nothing is left of the upload", tt.name)
		fi, err := m.PutFile(ctx, "alice", ci.ID, "/mnt/data/fits.bin", "", bytes.NewReader(make([]byte, 1<<20)), 1<<20)
		require.NoError(t, err, "%s: a file at the limit", tt.name)
		assert.Equal(t, int64(1<<20), fi.Bytes, "%s: its size", tt.name)
		require.NoError(t, m.DeleteContainer(ctx, "alice", ci.ID), "%s: DeleteContainer", tt.name)
	}
}

// readerFunc is a func as an io.Reader.
type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }
