// Package skillstest is the contract of a [skills.Store], run against each implementation:
// skills.Memory and the fleet's Redis store.
package skillstest

import (
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/codeinterp/codeinterp/pkg/skills"
)

// NewStore returns an empty store with b (zero fields: the store's defaults), for t.
type NewStore func(t *testing.T, b skills.Bounds) skills.Store

// Bundle returns a bundle named name of size bytes (or the least it can be, about 40), with an
// executable script.
func Bundle(name string, size int) *skills.Bundle {
	md := "---\nname: " + name + "\ndescription: d " + name + "\n---\n"
	md += strings.Repeat("x", max(size-len(md)-len("echo\n"), 0))
	return &skills.Bundle{Name: name, Description: "d " + name, Files: []skills.File{
		{Path: "SKILL.md", Data: []byte(md)},
		{Path: "scripts/run.sh", Data: []byte("echo\n"), Exec: true},
	}}
}

// Run runs the contract's tests on the stores newStore makes.
func Run(t *testing.T, newStore NewStore) {
	t.Run("versions", func(t *testing.T) { testVersions(t, newStore(t, skills.Bounds{})) })
	t.Run("epochs and display name", func(t *testing.T) { testEpochs(t, newStore(t, skills.Bounds{})) })
	t.Run("bounds", func(t *testing.T) {
		testBounds(t, newStore(t, skills.Bounds{MaxSkillsPerIdentity: 2, MaxVersionsPerSkill: 2, MaxBytesPerIdentity: 1000, MaxBytes: 1500}))
	})
	t.Run("bundle", func(t *testing.T) { testBundle(t, newStore(t, skills.Bounds{})) })
	t.Run("attach", func(t *testing.T) { testAttach(t, newStore(t, skills.Bounds{})) })
	t.Run("concurrent", func(t *testing.T) { testConcurrent(t, newStore(t, skills.Bounds{MaxSkillsPerIdentity: 3})) })
}

func testVersions(t *testing.T, m skills.Store) {
	ctx := t.Context()
	s, err := m.Create(ctx, "alice", Bundle("one", 10))
	require.NoError(t, err)
	assert.Equal(t, "1", s.DefaultVersion)
	assert.Equal(t, "1", s.LatestVersion)
	assert.True(t, strings.HasPrefix(s.ID, "skill_"), s.ID)
	assert.Equal(t, "one", s.Name)
	assert.Equal(t, "d one", s.Description)

	v2, err := m.AddVersion(ctx, "alice", s.ID, Bundle("two", 10), false)
	require.NoError(t, err)
	assert.Equal(t, "2", v2.Version)
	assert.Equal(t, s.ID, v2.SkillID)
	assert.True(t, strings.HasPrefix(v2.ID, "skillver_"), v2.ID)
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
	_, err = m.SetDefault(ctx, "alice", s.ID, "7")
	assert.ErrorIs(t, err, skills.ErrNotFound, "SetDefault of a version that is not")
	assert.ErrorIs(t, m.DeleteVersion(ctx, "alice", s.ID, "2"), skills.ErrDefaultVersion)
	require.NoError(t, m.DeleteVersion(ctx, "alice", s.ID, "1"))
	_, err = m.Version(ctx, "alice", s.ID, "1")
	assert.ErrorIs(t, err, skills.ErrNotFound)
	_, _, err = m.Bundle(ctx, "alice", s.ID, "1")
	assert.ErrorIs(t, err, skills.ErrNotFound, "the bundle of a deleted version")
	vs, err := m.Versions(ctx, "alice", s.ID)
	require.NoError(t, err)
	assert.Len(t, vs, 1)

	// Another identity does not see it.
	_, err = m.Get(ctx, "bob", s.ID)
	assert.ErrorIs(t, err, skills.ErrNotFound)
	_, _, err = m.Bundle(ctx, "bob", s.ID, "")
	assert.ErrorIs(t, err, skills.ErrNotFound)
	assert.ErrorIs(t, m.Delete(ctx, "bob", s.ID), skills.ErrNotFound)
	list, err := m.List(ctx, "bob")
	require.NoError(t, err)
	assert.Empty(t, list)
	list, err = m.List(ctx, "alice")
	require.NoError(t, err)
	assert.Len(t, list, 1)

	// Deleting the last version deletes the skill.
	require.NoError(t, m.DeleteVersion(ctx, "alice", s.ID, "2"))
	_, err = m.Get(ctx, "alice", s.ID)
	assert.ErrorIs(t, err, skills.ErrNotFound)
}

// testEpochs: each version has an Epoch, later than the one made before it (also within the
// same microsecond), by which it is read, bundled and deleted; a skill keeps the DisplayName
// it was created with, or none.
func testEpochs(t *testing.T, m skills.Store) {
	ctx := t.Context()
	b := Bundle("one", 10)
	b.DisplayName = "One Skill"
	s, err := m.Create(ctx, "alice", b)
	require.NoError(t, err, "create")
	assert.Equal(t, "One Skill", s.DisplayName, "the display name")
	v1, err := m.Version(ctx, "alice", s.ID, "1")
	require.NoError(t, err, "version 1")
	epochs := []string{v1.Epoch}
	for range 3 {
		v, err := m.AddVersion(ctx, "alice", s.ID, Bundle("one", 10), false)
		require.NoError(t, err, "add a version")
		epochs = append(epochs, v.Epoch)
	}
	for i, e := range epochs {
		n, err := strconv.ParseInt(e, 10, 64)
		require.NoError(t, err, "epoch %q of version %d is a number", e, i+1)
		assert.WithinDuration(t, time.Now(), time.UnixMicro(n), time.Hour, "epoch %q of version %d: microseconds of now", e, i+1)
		if i > 0 {
			prev, _ := strconv.ParseInt(epochs[i-1], 10, 64)
			assert.Greater(t, n, prev, "version %d's epoch after version %d's", i+1, i)
		}
		v, err := m.Version(ctx, "alice", s.ID, e)
		require.NoError(t, err, "version by epoch %q", e)
		assert.Equal(t, strconv.Itoa(i+1), v.Version, "epoch %q names version %d", e, i+1)
	}
	_, v, err := m.Bundle(ctx, "alice", s.ID, epochs[2])
	require.NoError(t, err, "bundle by epoch")
	assert.Equal(t, "3", v.Version, "bundle by epoch")
	v, err = m.Version(ctx, "alice", s.ID, "latest")
	require.NoError(t, err, "latest")
	assert.Equal(t, epochs[3], v.Epoch, "latest")
	require.NoError(t, m.DeleteVersion(ctx, "alice", s.ID, epochs[1]), "delete by epoch")
	_, err = m.Version(ctx, "alice", s.ID, "2")
	assert.ErrorIs(t, err, skills.ErrNotFound, "deleted by epoch")
	_, err = m.Version(ctx, "bob", s.ID, epochs[0])
	assert.ErrorIs(t, err, skills.ErrNotFound, "another identity's")
	got, err := m.Get(ctx, "alice", s.ID)
	require.NoError(t, err, "get")
	assert.Equal(t, "One Skill", got.DisplayName, "kept")

	plain, err := m.Create(ctx, "alice", Bundle("two", 10))
	require.NoError(t, err, "create without a display name")
	assert.Empty(t, plain.DisplayName, "none")
}

func testBounds(t *testing.T, m skills.Store) {
	ctx := t.Context()
	a, err := m.Create(ctx, "alice", Bundle("a", 400))
	require.NoError(t, err)
	_, err = m.AddVersion(ctx, "alice", a.ID, Bundle("a", 100), true)
	require.NoError(t, err)
	_, err = m.AddVersion(ctx, "alice", a.ID, Bundle("a", 10), true)
	assert.ErrorIs(t, err, skills.ErrFull, "versions per skill")
	_, err = m.Create(ctx, "alice", Bundle("b", 600))
	assert.ErrorIs(t, err, skills.ErrFull, "bytes per identity")
	_, err = m.Create(ctx, "alice", Bundle("b", 400))
	require.NoError(t, err)
	_, err = m.Create(ctx, "alice", Bundle("c", 10))
	assert.ErrorIs(t, err, skills.ErrFull, "skills per identity")
	_, err = m.Create(ctx, "bob", Bundle("d", 610))
	assert.ErrorIs(t, err, skills.ErrFull, "bytes in all")
	_, err = m.Create(ctx, "bob", Bundle("d", 600))
	require.NoError(t, err)
	require.NoError(t, m.Delete(ctx, "alice", a.ID))
	_, err = m.Create(ctx, "alice", Bundle("e", 500))
	assert.NoError(t, err, "a deleted skill's bytes are free again")
}

func testBundle(t *testing.T, m skills.Store) {
	ctx := t.Context()
	give := Bundle("csv-tool", 100)
	give.Files = append(give.Files, skills.File{Path: "data/zeros.bin", Data: make([]byte, 2<<20)})
	s, err := m.Create(ctx, "alice", give)
	require.NoError(t, err)
	b, v, err := m.Bundle(ctx, "alice", s.ID, "")
	require.NoError(t, err)
	assert.Equal(t, "1", v.Version)
	assert.Equal(t, give.Name, b.Name)
	assert.Equal(t, give.Description, b.Description)
	require.Len(t, b.Files, len(give.Files))
	for i, f := range give.Files {
		assert.Equal(t, f.Path, b.Files[i].Path, "file %d's path", i)
		assert.Equal(t, f.Data, b.Files[i].Data, "%s's data", f.Path)
		assert.Equal(t, f.Exec, b.Files[i].Exec, "%s's exec bit", f.Path)
	}
}

func testAttach(t *testing.T, m skills.Store) {
	ctx := t.Context()
	got, err := m.Attached(ctx, "alice", "cntr_1")
	require.NoError(t, err)
	assert.Empty(t, got, "nothing attached")
	as := []skills.Announced{{Name: "a", Description: "d a", Path: "/home/oai/skills/a-1/SKILL.md"}}
	require.NoError(t, m.Attach(ctx, "alice", "cntr_1", as))
	got, err = m.Attached(ctx, "alice", "cntr_1")
	require.NoError(t, err)
	assert.Equal(t, as, got, "attached to alice's cntr_1")
	got, err = m.Attached(ctx, "bob", "cntr_1")
	require.NoError(t, err)
	assert.Empty(t, got, "another identity's container of the same id")
	as2 := []skills.Announced{{Name: "b", Description: "d b", Path: "/home/oai/skills/b-2/SKILL.md"}}
	require.NoError(t, m.Attach(ctx, "alice", "cntr_1", as2))
	got, err = m.Attached(ctx, "alice", "cntr_1")
	require.NoError(t, err)
	assert.Equal(t, as2, got, "a second Attach replaces the first")
}

// testConcurrent: creates racing from many goroutines (replicas) keep the bound.
func testConcurrent(t *testing.T, m skills.Store) {
	ctx := t.Context()
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		ok, off int
	)
	for range 10 {
		wg.Go(func() {
			_, err := m.Create(ctx, "alice", Bundle("x", 10))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ok++
			case assert.ErrorIs(t, err, skills.ErrFull, "a create past the bound"):
				off++
			}
		})
	}
	wg.Wait()
	assert.Equal(t, 3, ok, "creates that succeeded")
	assert.Equal(t, 7, off, "creates refused")
	list, err := m.List(ctx, "alice")
	require.NoError(t, err)
	assert.Len(t, list, 3, "skills kept")
}
