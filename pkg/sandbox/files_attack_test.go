package sandbox_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/codeinterp/codeinterp/pkg/sandbox"
	"github.com/codeinterp/codeinterp/pkg/sandbox/sandboxtest"
)

// gateReader reports its first Read on started, then waits for release before it yields its
// text: an upload in flight.
type gateReader struct {
	started *sync.WaitGroup
	release <-chan struct{}
	once    sync.Once
	r       *strings.Reader
}

func (g *gateReader) Read(p []byte) (int, error) {
	g.once.Do(func() {
		g.started.Done()
		<-g.release
	})
	return g.r.Read(p)
}

// TestManagerFilesTableBoundConcurrent: uploads of new files in flight together, one place
// left in the table, cannot take it past MaxFilesPerContainer: one gets the place, the others
// are refused with ErrFileTooLarge before a byte is read, and nothing of them is left.
func TestManagerFilesTableBoundConcurrent(t *testing.T) {
	ctx := context.Background()
	p := &sandboxtest.Provider{}
	m := newTestManager(t, p, sandbox.ManagerConfig{})
	c := create(t, m, sandbox.CreateRequest{Identity: "alice"})
	for i := range sandbox.MaxFilesPerContainer - 1 {
		_, err := m.PutFile(ctx, "alice", c.ID, fmt.Sprintf("f%d", i), "", strings.NewReader("x"), 0)
		require.NoError(t, err, "PutFile %d", i)
	}
	const uploads = 8
	var started, done sync.WaitGroup
	release := make(chan struct{})
	errs := make([]error, uploads)
	for i := range uploads {
		started.Add(1)
		done.Go(func() {
			g := &gateReader{started: &started, release: release, r: strings.NewReader("y")}
			_, errs[i] = m.PutFile(ctx, "alice", c.ID, fmt.Sprintf("race%d", i), "", g, 0)
			if errs[i] != nil {
				g.once.Do(started.Done) // refused before reading
			}
		})
	}
	started.Wait()
	close(release)
	done.Wait()
	ok := 0
	for i, err := range errs {
		if err == nil {
			ok++
			continue
		}
		assert.ErrorIs(t, err, sandbox.ErrFileTooLarge, "upload %d beyond the bound", i)
		_, written := p.Container(0).FileText(fmt.Sprintf("/mnt/data/race%d", i))
		assert.False(t, written, "upload %d refused: nothing written", i)
	}
	assert.Equal(t, 1, ok, "one upload takes the last place: %v", errs)
	files, err := m.Files(ctx, "alice", c.ID)
	require.NoError(t, err, "Files")
	assert.Equal(t, sandbox.MaxFilesPerContainer, len(files), "the table stays within its bound")
	_, err = m.PutFile(ctx, "alice", c.ID, "f0", "", strings.NewReader("z"), 0)
	assert.NoError(t, err, "replacing a known file at the bound")
	_, err = m.PutFile(ctx, "alice", c.ID, "late", "", strings.NewReader("z"), 0)
	assert.True(t, errors.Is(err, sandbox.ErrFileTooLarge), "a new file at the bound: %v", err)
}

// cancelReader cancels its context at its first Read, and then yields its text: an upload whose
// client goes away midway.
type cancelReader struct {
	cancel context.CancelFunc
	r      io.Reader
}

func (c *cancelReader) Read(p []byte) (int, error) {
	c.cancel()
	return c.r.Read(p)
}

// TestManagerPutFileSourceFails: an upload that fails on its source's side (beyond the limit,
// a reader error, even one that names a closed or lost sandbox, its request cancelled) is not
// the container's failure: the container stays, alive and usable, with nothing of the upload.
func TestManagerPutFileSourceFails(t *testing.T) {
	errTooLarge := errors.New("file beyond the upload limit")
	big := func() io.Reader { return bytes.NewReader(make([]byte, 3<<20)) }
	failing := func(err error) func() io.Reader {
		return func() io.Reader { return io.MultiReader(strings.NewReader("partial"), errReader{err}) }
	}
	tests := []struct {
		name    string
		give    func() io.Reader
		limit   int64
		cancel  bool
		wantErr error
	}{
		{"beyond the limit", big, 1 << 20, false, sandbox.ErrFileTooLarge},
		{"the reader says too large", failing(errTooLarge), 0, false, errTooLarge},
		{"the reader says cancelled", failing(context.Canceled), 0, false, context.Canceled},
		{"the reader breaks", failing(io.ErrUnexpectedEOF), 0, false, io.ErrUnexpectedEOF},
		{"the reader's own sandbox is closed", failing(sandbox.ErrClosed), 0, false, sandbox.ErrClosed},
		{"the reader's own sandbox is lost", failing(fmt.Errorf("%w: killed", sandbox.ErrLost)), 0, false, sandbox.ErrLost},
		{"the request is cancelled midway", big, 0, true, context.Canceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := &sandboxtest.Provider{}
				m := newTestManager(t, p, sandbox.ManagerConfig{})
				c := create(t, m, sandbox.CreateRequest{Identity: "alice"})
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				r := tt.give()
				if tt.cancel {
					r = &cancelReader{cancel: cancel, r: r}
				}
				_, err := m.PutFile(ctx, "alice", c.ID, "/mnt/data/up.bin", "", r, tt.limit)
				require.ErrorIs(t, err, tt.wantErr, "PutFile")
				assert.NotErrorIs(t, err, sandbox.ErrExpiredContainer, "PutFile")
				synctest.Wait()

				assert.Equal(t, sandbox.StatusRunning, info(t, m, "alice", c.ID).Status, "the container is still running")
				assert.False(t, p.Container(0).Deleted(), "nor deleted")
				files, err := m.Files(context.Background(), "alice", c.ID)
				require.NoError(t, err, "Files")
				assert.Empty(t, files, "nothing is left of the upload")
				fi := putFile(t, m, "alice", c.ID, "/mnt/data/next.txt", "ok")
				assert.Equal(t, "ok", readFile(t, m, "alice", c.ID, fi.ID), "the container takes the next upload")
				assert.Equal(t, 1, p.Created(), "in the same container")
			})
		})
	}
}
