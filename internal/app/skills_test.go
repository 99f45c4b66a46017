package app

import (
	"errors"

	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	configv1 "github.com/codeinterp/codeinterp/api/codeinterp/config/v1"
	"github.com/codeinterp/codeinterp/pkg/config"
	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/skills"
)

func TestSkillStoreOfConfig(t *testing.T) {
	assert.Nil(t, skillStore(&configv1.Config{Store: config.StoreRedis}), "store redis: the Skills API is not served")

	st := skillStore(&configv1.Config{Skills: &configv1.Skills{MaxSkillsPerIdentity: 1}})
	require.NotNil(t, st, "store memory: the Skills API is served")
	b := &skills.Bundle{Name: "a", Description: "d", Files: []skills.File{{Path: "SKILL.md", Data: []byte("x")}}}
	_, err := st.Create(t.Context(), "alice", b)
	require.NoError(t, err, "the first skill")
	_, err = st.Create(t.Context(), "alice", b)
	assert.ErrorIs(t, err, skills.ErrFull, "skills.max_skills_per_identity is applied")

	assert.Equal(t, int64(5), skillLimits(&configv1.Config{Skills: &configv1.Skills{MaxBundleBytes: 5}}).MaxBundleBytes, "skills.max_bundle_bytes")
	assert.Zero(t, skillLimits(&configv1.Config{}).MaxBundleBytes, "unset: the package's default")
}

// The shell tool's container_auto skills resolve in the Skills API's store, each announced by
// its SKILL.md's path under OpenAI's skills root; without the API there is no resolver.
func TestResolveSkills(t *testing.T) {
	assert.Nil(t, resolveSkills(nil, skills.Limits{}), "no Skills API: no resolver")

	st := skillStore(&configv1.Config{})
	sk, err := st.Create(t.Context(), "alice", &skills.Bundle{Name: "csv", Description: "Reads CSV files.",
		Files: []skills.File{{Path: "skill.md", Data: []byte("x")}, {Path: "run.sh", Data: []byte("y")}}})
	require.NoError(t, err)
	resolve := resolveSkills(st, skills.Limits{})
	require.NotNil(t, resolve)
	files, ms, err := resolve(t.Context(), "alice", []byte(`[{"type":"skill_reference","skill_id":"`+sk.ID+`"}]`), "tools[0].environment.skills")
	require.NoError(t, err)
	require.Len(t, ms, 1)
	assert.Equal(t, "csv", ms[0].Name)
	assert.Equal(t, "Reads CSV files.", ms[0].Description)
	assert.Regexp(t, `^/home/oai/skills/csv-[0-9a-f]{32}/skill\.md$`, ms[0].Path, "its SKILL.md, as the bundle spells it")
	require.NotNil(t, files)
	assert.Len(t, files.Files, 2, "the bundle's files are mounted")

	_, _, err = resolve(t.Context(), "bob", []byte(`[{"type":"skill_reference","skill_id":"`+sk.ID+`"}]`), "tools[0].environment.skills")
	re, ok := errors.AsType[*schema.RequestError](err)
	require.True(t, ok, "another identity's skill is the client's error: %v", err)
	assert.Equal(t, "tools[0].environment.skills[0].skill_id", re.Param)
}
