package skills_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/codeinterp/codeinterp/pkg/skills"
	"github.com/codeinterp/codeinterp/pkg/skills/skillstest"
)

func TestMemory(t *testing.T) {
	skillstest.Run(t, func(t *testing.T, b skills.Bounds) skills.Store {
		return skills.NewMemory(skills.MemoryConfig{Bounds: b})
	})
}

// TestMemoryAttachedBounded: Memory remembers at most MaxAttached containers, forgetting the
// oldest first.
func TestMemoryAttachedBounded(t *testing.T) {
	ctx := t.Context()
	m := skills.NewMemory(skills.MemoryConfig{MaxAttached: 2})
	as := []skills.Announced{{Name: "a", Description: "d", Path: "/p"}}
	for _, id := range []string{"c1", "c2", "c1", "c3"} {
		require.NoError(t, m.Attach(ctx, "alice", id, as), "Attach %s", id)
	}
	for id, want := range map[string]bool{"c1": true, "c2": false, "c3": true} {
		got, err := m.Attached(ctx, "alice", id)
		require.NoError(t, err, "Attached %s", id)
		assert.Equal(t, want, len(got) > 0, "%s remembered", id)
	}
}
