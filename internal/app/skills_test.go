package app

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	configv1 "github.com/codeinterp/codeinterp/api/codeinterp/config/v1"
	"github.com/codeinterp/codeinterp/pkg/config"
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
