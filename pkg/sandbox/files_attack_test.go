package sandbox_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

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
