package local

import (
	"context"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/codeinterp/codeinterp/pkg/sandbox"
)

// stallingReader yields one byte, reports that it did, then blocks until release is closed,
// as a client that sends its upload slowly does.
type stallingReader struct {
	started *sync.WaitGroup
	release <-chan struct{}
	once    sync.Once
	sent    bool
}

func (r *stallingReader) Read(p []byte) (int, error) {
	if !r.sent {
		r.sent = true
		p[0] = 'x'
		return 1, nil
	}
	r.once.Do(r.started.Done)
	<-r.release
	return 0, context.Canceled
}

// osThreads returns the number of threads of this process.
func osThreads(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	require.NoError(t, err, "read /proc/self/status")
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Threads:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			require.NoError(t, err, "parse %q", line)
			return n
		}
	}
	t.Fatal("no Threads line in /proc/self/status")
	return 0
}

// TestAdversarialSlowUploadsHoldNoThreads: uploads whose bytes come slowly (a tenant's many
// stalled uploads) must not each pin an OS thread, as they would if the whole copy ran on the
// thread locked for the code's user's file credentials: the runtime dies at 10000 threads.
func TestAdversarialSlowUploadsHoldNoThreads(t *testing.T) {
	l := sharedLocal(t)
	if !l.setUID {
		t.Skip("the server is not root: files are written with its own credentials, on any thread")
	}
	c := newTestContainer(t, l, sandbox.Spec{})
	fa := filesOf(t, c)
	require.GreaterOrEqual(t, c.(*container).fileUID, 0, "the container has a uid of its own")
	const uploads = 48
	before := osThreads(t)
	var started, done sync.WaitGroup
	release := make(chan struct{})
	started.Add(uploads)
	errs := make([]error, uploads)
	for i := range uploads {
		done.Go(func() {
			_, errs[i] = fa.WriteFile(context.Background(), "/mnt/data/slow"+strconv.Itoa(i), &stallingReader{started: &started, release: release}, 0)
		})
	}
	started.Wait()
	during := osThreads(t)
	close(release)
	done.Wait()
	for i, err := range errs {
		assert.ErrorIs(t, err, context.Canceled, "upload %d ends with its reader's error", i)
	}
	assert.Less(t, during-before, uploads/2, "stalled uploads hold OS threads (%d before, %d during)", before, during)
	res := runIn(t, c, listing)
	assert.Equal(t, "[]", res.Value, "the failed uploads left nothing")
}

// endlessReader yields chunk-sized reads every tick, forever, and counts them.
type endlessReader struct {
	mu    sync.Mutex
	reads int
	tick  time.Duration
	first chan struct{}
}

func (r *endlessReader) Read(p []byte) (int, error) {
	time.Sleep(r.tick)
	r.mu.Lock()
	r.reads++
	if r.reads == 4 {
		close(r.first)
	}
	r.mu.Unlock()
	return min(len(p), 64<<10), nil
}

// TestAdversarialUploadStopsAtDelete: an upload into a container deleted meanwhile (the
// container expired, was deleted, or the server is closing) stops at once with ErrClosed,
// instead of filling the dead container's tmpfs, which its open descriptors keep alive, for as
// long as the client sends.
func TestAdversarialUploadStopsAtDelete(t *testing.T) {
	t.Parallel()
	for name, l := range fileModes(t) {
		t.Run(name, func(t *testing.T) {
			c := newTestContainer(t, l, sandbox.Spec{})
			fa := filesOf(t, c)
			r := &endlessReader{tick: 5 * time.Millisecond, first: make(chan struct{})}
			errc := make(chan error, 1)
			go func() {
				_, err := fa.WriteFile(context.Background(), "/mnt/data/endless.bin", r, 0)
				errc <- err
			}()
			<-r.first
			require.NoError(t, c.Delete(context.Background()), "Delete")
			select {
			case err := <-errc:
				assert.ErrorIs(t, err, sandbox.ErrClosed, "the upload into the deleted container")
			case <-time.After(5 * time.Second):
				t.Fatal("the upload goes on into the deleted container")
			}
		})
	}
}

// TestAdversarialDownloadOfAGrowingFile: code that appends to a file while the server reads it
// cannot make the read go past the size the file had when opened (the size the caller was
// told, and answers with), nor make it endless.
func TestAdversarialDownloadOfAGrowingFile(t *testing.T) {
	t.Parallel()
	for name, l := range fileModes(t) {
		t.Run(name, func(t *testing.T) {
			c := newTestContainer(t, l, sandbox.Spec{})
			fa := filesOf(t, c)
			_, err := fa.WriteFile(context.Background(), "/mnt/data/grow.log", strings.NewReader("0123456789"), 0)
			require.NoError(t, err, "WriteFile")
			rc, st, err := fa.OpenFile(context.Background(), "/mnt/data/grow.log")
			require.NoError(t, err, "OpenFile")
			defer rc.Close()
			require.Equal(t, int64(10), st.Size, "size when opened")
			runIn(t, c, "open('grow.log', 'a').write('x' * 100000)")
			b, err := io.ReadAll(rc)
			require.NoError(t, err, "read")
			assert.Equal(t, 10, len(b), "the file as long as it was when opened")
			assert.Equal(t, "0123456789", string(b[:min(len(b), 10)]), "its content then")
		})
	}
}

// TestAdversarialUploadNamedLikeATemporaryFile: a write may not take the name of a write in
// progress, which a run's file list leaves out.
func TestAdversarialUploadNamedLikeATemporaryFile(t *testing.T) {
	t.Parallel()
	l := newTestLocal(t, Config{Bwrap: "/nonexistent/bwrap", UnsafeNoIsolation: true})
	c := newTestContainer(t, l, sandbox.Spec{})
	fa := filesOf(t, c)
	for _, p := range []string{"/mnt/data/" + uploadPrefix + "0123456789abcdef", "/mnt/data/sub/" + uploadPrefix + "x"} {
		_, err := fa.WriteFile(context.Background(), p, strings.NewReader("x"), 0)
		assert.ErrorIs(t, err, sandbox.ErrInvalidPath, "WriteFile(%s)", p)
	}
	res := runIn(t, c, listing)
	assert.Equal(t, "[]", res.Value, "nothing written")
}

// TestAdversarialReaderLeftOpenAfterDelete: a reader of a container file left open (a
// download read slowly, never finished) must not keep the deleted container's tmpfs alive, as
// its descriptor would, beyond the caps that bound live containers: Delete closes it, and it
// fails from then on with ErrClosed.
func TestAdversarialReaderLeftOpenAfterDelete(t *testing.T) {
	t.Parallel()
	for name, l := range fileModes(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			c := newTestContainer(t, l, sandbox.Spec{})
			fa := filesOf(t, c)
			_, err := fa.WriteFile(ctx, "/mnt/data/big.bin", strings.NewReader(strings.Repeat("b", 1<<20)), 0)
			require.NoError(t, err, "WriteFile")
			rc, _, err := fa.OpenFile(ctx, "/mnt/data/big.bin")
			require.NoError(t, err, "OpenFile")
			buf := make([]byte, 10)
			_, err = io.ReadFull(rc, buf)
			require.NoError(t, err, "read the start")
			require.NoError(t, c.Delete(ctx), "Delete")
			_, err = rc.Read(buf)
			assert.ErrorIs(t, err, sandbox.ErrClosed, "a read after Delete")
			assert.Equal(t, ^uintptr(0), rc.(*openFile).f.Fd(), "Delete closed the descriptor")
			assert.NoError(t, rc.Close(), "the reader's own Close after Delete")
		})
	}
}

// fdsNaming returns how many of this process's descriptors have a path containing s.
func fdsNaming(t *testing.T, s string) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err, "read /proc/self/fd")
	n := 0
	for _, e := range entries {
		if target, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.Contains(target, s) {
			n++
		}
	}
	return n
}

// TestAdversarialStalledUploadAfterDelete: an upload whose client stopped sending (its read
// blocks) must not keep the deleted container's tmpfs alive through the descriptors it holds
// (its directory and temporary file), as a tenant deleting and creating containers under such
// uploads would pile up tmpfs beyond the caps: Delete closes them, and the upload, once its
// read returns, fails with ErrClosed.
func TestAdversarialStalledUploadAfterDelete(t *testing.T) {
	t.Parallel()
	for name, l := range fileModes(t) {
		t.Run(name, func(t *testing.T) {
			c := newTestContainer(t, l, sandbox.Spec{})
			fa := filesOf(t, c)
			dir := "stall-" + randomHex(8)
			var started sync.WaitGroup
			started.Add(1)
			release := make(chan struct{})
			errc := make(chan error, 1)
			go func() {
				_, err := fa.WriteFile(context.Background(), "/mnt/data/"+dir+"/up.bin", &stallingReader{started: &started, release: release}, 0)
				errc <- err
			}()
			started.Wait()
			require.Equal(t, 2, fdsNaming(t, dir), "the upload holds its directory and temporary file")
			require.NoError(t, c.Delete(context.Background()), "Delete")
			assert.Equal(t, 0, fdsNaming(t, dir), "nothing of the deleted container is held open")
			close(release)
			assert.ErrorIs(t, <-errc, sandbox.ErrClosed, "the upload, once its read returns")
		})
	}
}

// TestAdversarialDirectoriesTheCodeLocked: directories the code made unwritable or unsearchable
// refuse the server's writes and removals there, which run with the code's user's credentials,
// as the client's mistake (ErrInvalidPath), not as a failure of the server.
func TestAdversarialDirectoriesTheCodeLocked(t *testing.T) {
	t.Parallel()
	l := sharedLocal(t)
	if !l.setUID {
		t.Skip("the server is not root: files are written with its own credentials")
	}
	c := newTestContainer(t, l, sandbox.Spec{})
	fa := filesOf(t, c)
	ctx := context.Background()
	_, err := fa.WriteFile(ctx, "/mnt/data/ro/kept.txt", strings.NewReader("kept"), 0)
	require.NoError(t, err, "WriteFile")
	runIn(t, c, "import os\nos.mkdir('none')\nos.chmod('none', 0)\nos.chmod('ro', 0o555)")
	for _, p := range []string{"/mnt/data/ro/x", "/mnt/data/ro/new/x", "/mnt/data/none/x", "/mnt/data/ro/kept.txt"} {
		_, err := fa.WriteFile(ctx, p, strings.NewReader("x"), 0)
		assert.ErrorIs(t, err, sandbox.ErrInvalidPath, "WriteFile(%s)", p)
	}
	assert.ErrorIs(t, fa.RemoveFile(ctx, "/mnt/data/ro/kept.txt"), sandbox.ErrInvalidPath, "RemoveFile in a read-only directory")
	assert.Equal(t, "kept", string(readAll(t, fa, "/mnt/data/ro/kept.txt")), "the file is untouched")
}
