package skills

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func bundle(name string, size int) *Bundle {
	return &Bundle{Name: name, Description: "d " + name, Files: []File{{Path: "SKILL.md", Data: []byte(strings.Repeat("x", size))}}}
}

func TestMemoryVersions(t *testing.T) {
	ctx := context.Background()
	m := NewMemory(MemoryConfig{})
	s, err := m.Create(ctx, "alice", bundle("one", 10))
	require.NoError(t, err)
	assert.Equal(t, "1", s.DefaultVersion)
	assert.Equal(t, "1", s.LatestVersion)
	assert.True(t, strings.HasPrefix(s.ID, "skill_"), s.ID)

	v2, err := m.AddVersion(ctx, "alice", s.ID, bundle("two", 10), false)
	require.NoError(t, err)
	assert.Equal(t, "2", v2.Version)
	got, err := m.Get(ctx, "alice", s.ID)
	require.NoError(t, err)
	assert.Equal(t, "1", got.DefaultVersion, "a version not made default leaves the default")
	assert.Equal(t, "2", got.LatestVersion)
	assert.Equal(t, "one", got.Name, "the skill shows its default version's name")

	b, v, err := m.Bundle(ctx, "alice", s.ID, "latest")
	require.NoError(t, err)
	assert.Equal(t, "two", b.Name)
	assert.Equal(t, "2", v.Version)

	got, err = m.SetDefault(ctx, "alice", s.ID, "2")
	require.NoError(t, err)
	assert.Equal(t, "two", got.Name)
	assert.ErrorIs(t, m.DeleteVersion(ctx, "alice", s.ID, "2"), ErrDefaultVersion)
	require.NoError(t, m.DeleteVersion(ctx, "alice", s.ID, "1"))
	_, err = m.Version(ctx, "alice", s.ID, "1")
	assert.ErrorIs(t, err, ErrNotFound)
	vs, err := m.Versions(ctx, "alice", s.ID)
	require.NoError(t, err)
	assert.Len(t, vs, 1)

	// Another identity does not see it.
	_, err = m.Get(ctx, "bob", s.ID)
	assert.ErrorIs(t, err, ErrNotFound)
	assert.ErrorIs(t, m.Delete(ctx, "bob", s.ID), ErrNotFound)
	list, err := m.List(ctx, "bob")
	require.NoError(t, err)
	assert.Empty(t, list)

	// Deleting the last version deletes the skill and frees its bytes.
	require.NoError(t, m.DeleteVersion(ctx, "alice", s.ID, "2"))
	_, err = m.Get(ctx, "alice", s.ID)
	assert.ErrorIs(t, err, ErrNotFound)
	assert.Zero(t, m.total)
}

func TestMemoryBounds(t *testing.T) {
	ctx := context.Background()
	m := NewMemory(MemoryConfig{MaxSkillsPerIdentity: 2, MaxVersionsPerSkill: 2, MaxBytesPerIdentity: 100, MaxBytes: 150})
	a, err := m.Create(ctx, "alice", bundle("a", 40))
	require.NoError(t, err)
	_, err = m.AddVersion(ctx, "alice", a.ID, bundle("a", 10), true)
	require.NoError(t, err)
	_, err = m.AddVersion(ctx, "alice", a.ID, bundle("a", 1), true)
	assert.ErrorIs(t, err, ErrFull, "versions per skill")
	_, err = m.Create(ctx, "alice", bundle("b", 60))
	assert.ErrorIs(t, err, ErrFull, "bytes per identity")
	_, err = m.Create(ctx, "alice", bundle("b", 40))
	require.NoError(t, err)
	_, err = m.Create(ctx, "alice", bundle("c", 1))
	assert.ErrorIs(t, err, ErrFull, "skills per identity")
	_, err = m.Create(ctx, "bob", bundle("d", 61))
	assert.ErrorIs(t, err, ErrFull, "bytes in all")
	_, err = m.Create(ctx, "bob", bundle("d", 60))
	require.NoError(t, err)
	require.NoError(t, m.Delete(ctx, "alice", a.ID))
	_, err = m.Create(ctx, "alice", bundle("e", 50))
	assert.NoError(t, err, "a deleted skill's bytes are free again")
}
