package app

import (
	"errors"

	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	configv1 "github.com/codeinterp/codeinterp/api/codeinterp/config/v1"
	"github.com/codeinterp/codeinterp/pkg/admission"
	"github.com/codeinterp/codeinterp/pkg/config"
	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/skills"
	storeredis "github.com/codeinterp/codeinterp/pkg/store/redis"
	"github.com/codeinterp/codeinterp/pkg/store/redis/redistest"
)

func TestSkillStoreOfConfig(t *testing.T) {
	rc := redistest.Start(t).Client()
	rst := skillStore(&configv1.Config{Store: config.StoreRedis, Skills: &configv1.Skills{MaxSkillsPerIdentity: 1}}, rc)
	assert.IsType(t, &storeredis.Skills{}, rst, "store redis: the Skills API is served from Redis")

	st := skillStore(&configv1.Config{Skills: &configv1.Skills{MaxSkillsPerIdentity: 1}}, nil)
	assert.IsType(t, &skills.Memory{}, st, "store memory: the Skills API is served from memory")
	for _, st := range []skills.Store{st, rst} {
		require.NotNil(t, st, "store memory: the Skills API is served")
		b := &skills.Bundle{Name: "a", Description: "d", Files: []skills.File{{Path: "SKILL.md", Data: []byte("---\nname: a\ndescription: d\n---\n")}}}
		_, err := st.Create(t.Context(), "alice", b)
		require.NoError(t, err, "the first skill in %T", st)
		_, err = st.Create(t.Context(), "alice", b)
		assert.ErrorIs(t, err, skills.ErrFull, "skills.max_skills_per_identity is applied in %T", st)
	}

	assert.Equal(t, int64(5), skillLimits(&configv1.Config{Skills: &configv1.Skills{MaxBundleBytes: 5}}).MaxBundleBytes, "skills.max_bundle_bytes")
	assert.Zero(t, skillLimits(&configv1.Config{}).MaxBundleBytes, "unset: the package's default")
}

// The shell tool's container_auto skills resolve in the Skills API's store, each announced by
// its SKILL.md's path under OpenAI's skills root; without the API there is no resolver.
func TestResolveSkills(t *testing.T) {
	assert.Nil(t, resolveSkills(nil, skills.Limits{}), "no Skills API: no resolver")

	st := skillStore(&configv1.Config{}, nil)
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

// A container created with skills is looked up by admission as recorded in the store; without
// the API there is no look-up.
func TestContainerSkills(t *testing.T) {
	assert.Nil(t, containerSkills(nil), "no Skills API: no look-up")
	st := skillStore(&configv1.Config{}, nil)
	as := []skills.Announced{{Name: "csv", Description: "Reads CSV files.", Path: "/home/oai/skills/csv-1/SKILL.md"}}
	require.NoError(t, st.Attach(t.Context(), "alice", "cntr_1", as))
	look := containerSkills(st)
	got, err := look(t.Context(), "alice", "cntr_1")
	require.NoError(t, err)
	assert.Equal(t, []admission.MountedSkill{{Name: "csv", Description: "Reads CSV files.", Path: "/home/oai/skills/csv-1/SKILL.md"}}, got)
	got, err = look(t.Context(), "bob", "cntr_1")
	require.NoError(t, err)
	assert.Empty(t, got, "another identity's")
}
