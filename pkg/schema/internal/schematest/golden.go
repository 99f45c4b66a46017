package schematest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ReadFile returns testdata/<path>.
func ReadFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", path))
	require.NoError(t, err, "read testdata/%s", path)
	return b
}

// CheckTestdata compares got with testdata/<path>, or writes it there when update is set (the
// request, turn and follow-up golden tests' -update-rewrite-golden).
func CheckTestdata(t *testing.T, path string, got []byte, update bool) {
	t.Helper()
	if update {
		require.NoError(t, os.WriteFile(filepath.Join("testdata", path), got, 0o644), "write testdata/%s", path)
		return
	}
	want := ReadFile(t, path)
	assert.Equal(t, string(want), string(got), "body differs from testdata/%s", path)
}

// CheckGolden compares got with the golden file at path, rewriting it first when update is set
// (the final-answer and SSE tests' -update-output).
func CheckGolden(t *testing.T, path string, got []byte, update bool) {
	t.Helper()
	if update {
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755), "mkdir for %s", path)
		require.NoError(t, os.WriteFile(path, got, 0o644), "write %s", path)
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "read golden %s (run with -update-output to create it)", path)
	assert.Equal(t, string(want), string(got), "output differs from golden %s", path)
}
