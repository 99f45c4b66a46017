package local

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/codeinterp/codeinterp/pkg/sandbox"
)

// TestManagerHibernateOverLocal: a hibernating container over real containers: idle past its
// expiry its process ends and its files (a binary one, one in a subdirectory, an upload) go to
// disk; named again, a fresh container has them byte for byte under the same ids, without the
// earlier variables, and the model is told.
func TestManagerHibernateOverLocal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	hdir := filepath.Join(t.TempDir(), "hib")
	m := sandbox.NewManager(sharedLocal(t), sandbox.ManagerConfig{SessionIdleTTL: time.Second,
		Hibernation: sandbox.HibernationConfig{Dir: hdir}}, zaptest.NewLogger(t))
	defer func() { require.NoError(t, m.Close(ctx), "close manager") }()

	l, err := m.Acquire(ctx, sandbox.AcquireRequest{Identity: "alice", Session: "s", Hibernate: true, IDPrefix: "container_"})
	require.NoError(t, err, "Acquire")
	id := l.ContainerID()
	require.True(t, strings.HasPrefix(id, "container_"), "id %q", id)
	_, err = l.PutFile(ctx, "/mnt/data/up.txt", sandbox.SourceUser, strings.NewReader("uploaded"), 0)
	require.NoError(t, err, "PutFile")
	res, err := l.Run(ctx, "import os\nos.makedirs('/mnt/data/sub', exist_ok=True)\n"+
		"open('/mnt/data/sub/bin.dat', 'wb').write(bytes(range(256)) * 100)\nsecret = 42\nsecret", 0)
	require.NoError(t, err, "Run")
	require.Equal(t, "42", res.Value, "the run's value")
	before, err := m.Files(ctx, "alice", id)
	require.NoError(t, err, "Files")
	require.Len(t, before, 2, "its files")
	l.Release()

	require.Eventually(t, func() bool { n, _ := m.Hibernated(); return n == 1 }, 20*time.Second, 50*time.Millisecond,
		"hibernated once idle past its expiry")
	_, bytes := m.Hibernated()
	assert.Equal(t, int64(25600+len("uploaded")), bytes, "the bytes on disk")

	l, err = m.Acquire(ctx, sandbox.AcquireRequest{Identity: "alice", ContainerID: id})
	require.NoError(t, err, "Acquire the hibernated container")
	defer l.Release()
	assert.Equal(t, id, l.ContainerID(), "the same id")
	res, err = l.Run(ctx, "import hashlib\n(open('/mnt/data/up.txt').read(), hashlib.sha256(open('/mnt/data/sub/bin.dat','rb').read()).hexdigest() == "+
		"hashlib.sha256(bytes(range(256)) * 100).hexdigest(), 'secret' in globals())", 0)
	require.NoError(t, err, "Run after the restore")
	assert.Equal(t, "('uploaded', True, False)", res.Value, "files equal, variables gone")
	assert.Contains(t, res.FilesNote, sandbox.RestoredNote, "the model is told")
	assert.Empty(t, res.Files, "the files put back are not the run's")
	after, err := m.Files(ctx, "alice", id)
	require.NoError(t, err, "Files after the restore")
	assert.ElementsMatch(t, before, after, "the same files, ids and sources")
}
