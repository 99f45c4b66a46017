package containers

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/skills"
)

func rawEntries(t *testing.T, entries ...any) []json.RawMessage {
	t.Helper()
	out := make([]json.RawMessage, len(entries))
	for i, e := range entries {
		b, err := json.Marshal(e)
		require.NoError(t, err)
		out[i] = b
	}
	return out
}

// TestResolveSkills: a container's skills entries become files under /home/oai/skills, each
// skill in <name>-<32 hex>; what is wrong is a 400 naming the entry.
func TestResolveSkills(t *testing.T) {
	ctx := context.Background()
	store := skills.NewMemory(skills.MemoryConfig{})
	b, err := skills.ReadZip(bytes.NewReader(skillZip(t, map[string]string{"word/SKILL.md": skillMD("word", "Knows the word.")})), skills.Limits{})
	require.NoError(t, err)
	made, err := store.Create(ctx, "alice", b)
	require.NoError(t, err)
	inline := base64.StdEncoding.EncodeToString(skillZip(t, map[string]string{"colour/SKILL.md": skillMD("colour", "Knows the colour.")}))
	inlineEntry := map[string]any{"type": "inline", "name": "colour", "description": "d",
		"source": map[string]any{"type": "base64", "media_type": "application/zip", "data": inline}}

	files, ms, err := ResolveSkills(ctx, store, skills.Limits{}, "alice",
		rawEntries(t, map[string]any{"type": "skill_reference", "skill_id": made.ID, "version": 1}, inlineEntry), "skills")
	require.NoError(t, err)
	require.Len(t, ms, 2)
	assert.Equal(t, OpenAISkillsRoot, files.Root)
	hexDir := regexp.MustCompile(`^(word|colour)-[0-9a-f]{32}/SKILL\.md$`)
	for _, f := range files.Files {
		assert.Regexp(t, hexDir, f.Path)
	}
	assert.Equal(t, "Knows the word.", ms[0].Description)

	none, _, err := ResolveSkills(ctx, store, skills.Limits{}, "alice", nil, "skills")
	require.NoError(t, err)
	assert.Nil(t, none, "no skills, no mount")

	for name, tt := range map[string]struct {
		entries   []json.RawMessage
		param     string
		wantParam string
	}{
		"unknown id":      {rawEntries(t, map[string]any{"type": "skill_reference", "skill_id": "skill_nope"}), "skills", "skills[0].skill_id"},
		"another's skill": {rawEntries(t, map[string]any{"type": "skill_reference", "skill_id": made.ID}), "skills", "skills[0].skill_id"},
		"unknown version": {rawEntries(t, map[string]any{"type": "skill_reference", "skill_id": made.ID, "version": 7}), "skills", "skills[0].version"},
		"bad version":     {rawEntries(t, map[string]any{"type": "skill_reference", "skill_id": made.ID, "version": -1}), "skills", "skills[0].version"},
		"no skill_id":     {rawEntries(t, map[string]any{"type": "skill_reference"}), "skills", "skills[0].skill_id"},
		"bad type":        {rawEntries(t, map[string]any{"type": "other"}), "skills", "skills[0].type"},
		"not base64":      {rawEntries(t, map[string]any{"type": "inline", "name": "n", "description": "d", "source": map[string]any{"type": "base64", "media_type": "application/zip", "data": "%%"}}), "skills", "skills[0].source.data"},
		"traversal zip": {rawEntries(t, map[string]any{"type": "inline", "name": "n", "description": "d", "source": map[string]any{"type": "base64", "media_type": "application/zip",
			"data": base64.StdEncoding.EncodeToString(skillZip(t, map[string]string{"x/SKILL.md": skillMD("x", "d"), "x/../../etc/passwd": "p"}))}}), "skills", "skills[0].source.data"},
		"twice": {rawEntries(t, inlineEntry, inlineEntry), "skills", "skills[1]"},
	} {
		store := skills.Store(store)
		who := "alice"
		if name == "another's skill" {
			who = "bob"
		}
		_, _, err := ResolveSkills(ctx, store, skills.Limits{}, who, tt.entries, tt.param)
		re, ok := err.(*schema.RequestError)
		if assert.True(t, ok, "%s: a RequestError, got %v", name, err) {
			assert.Equal(t, tt.wantParam, re.Param, name)
			assert.Contains(t, []int{0, http.StatusBadRequest}, re.Status, "%s: a 400", name)
		}
	}
}

// TestAnnounce: each skill is announced by its name, description and SKILL.md's path under
// OpenAI's skills root, as its bundle spells it.
func TestAnnounce(t *testing.T) {
	got := Announce([]skills.Mounted{
		{Name: "word", Description: "Knows the word.", Dir: "word-0123", Files: []skills.File{{Path: "SKILL.md"}, {Path: "run.sh"}}},
		{Name: "low", Description: "Lower case.", Dir: "low-4567", Files: []skills.File{{Path: "run.sh"}, {Path: "skill.md"}}},
	})
	assert.Equal(t, []skills.Announced{
		{Name: "word", Description: "Knows the word.", Path: "/home/oai/skills/word-0123/SKILL.md"},
		{Name: "low", Description: "Lower case.", Path: "/home/oai/skills/low-4567/skill.md"},
	}, got)
}
