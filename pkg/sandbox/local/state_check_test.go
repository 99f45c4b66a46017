package local

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStateDirMustBePrivate: a state directory others may write (another user could plant a
// dead backend's record in it) is refused, and so is a record naming paths no backend makes.
func TestStateDirMustBePrivate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	require.NoError(t, os.Mkdir(dir, 0o700), "mkdir")
	assert.NoError(t, privateDir(dir), "a 0700 directory of ours")
	require.NoError(t, os.Chmod(dir, 0o777), "chmod")
	assert.Error(t, privateDir(dir), "a directory anyone may write")
	_, err := openState(dir)
	assert.Error(t, err, "openState refuses it")
	link := filepath.Join(t.TempDir(), "link")
	require.NoError(t, os.Symlink(dir, link), "symlink")
	assert.Error(t, privateDir(link), "a link")

	assert.True(t, sweepable(stateInfo{WorkDir: "/tmp/codeinterp-sandbox-123", Cgroups: []string{"/sys/fs/cgroup/memory/x/codeinterp-ab"}}), "a backend's own paths (a cgroup already gone)")
	assert.False(t, sweepable(stateInfo{WorkDir: "/home/victim"}), "a work dir no backend makes")
	assert.False(t, sweepable(stateInfo{Cgroups: []string{"/sys/fs/cgroup/system.slice"}}), "a cgroup no backend makes")
	planted := filepath.Join(t.TempDir(), "codeinterp-x")
	require.NoError(t, os.Mkdir(planted, 0o700), "mkdir")
	assert.False(t, sweepable(stateInfo{Cgroups: []string{planted}}), "a directory named like a cgroup, not on a cgroup file system")
}
