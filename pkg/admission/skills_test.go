package admission_test

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/pkg/admission"
	"github.com/codeinterp/codeinterp/pkg/sandbox"
	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/store/memory"
)

const skillsBody = `{"model":"m","input":"x","tools":[{"type":"shell","environment":{"type":"container_auto",` +
	`"skills":[{"type":"skill_reference","skill_id":"skill_1"}]}}]}`

// The shell tool's container_auto skills are resolved with the caller's identity, mounted in
// the container the loop acquires, and announced in the shell function's description.
func TestPrepareMountsSkills(t *testing.T) {
	files := &sandbox.SkillFiles{Root: "/home/oai/skills", Files: []sandbox.SkillFile{{Path: "csv-1/SKILL.md", Data: []byte("# csv")}}}
	var gotIdentity, gotRaw, gotParam string
	adm := admission.New(containers{}, memory.NewPending(nil), admission.Config{
		ResolveSkills: func(_ context.Context, identity string, raw []byte, param string) (*sandbox.SkillFiles, []admission.MountedSkill, error) {
			gotIdentity, gotRaw, gotParam = identity, string(raw), param
			return files, []admission.MountedSkill{{Name: "csv", Description: "Reads CSV files.", Path: "/home/oai/skills/csv-1/SKILL.md"}}, nil
		},
	})
	x := exchange(t, skillsBody)
	ad, r := adm.Prepare(t.Context(), x, &caller{id: "id-a"}, admission.Request{})
	require.Nil(t, r, "admitted")
	assert.Equal(t, "id-a", gotIdentity, "the caller's skills")
	assert.JSONEq(t, `[{"type":"skill_reference","skill_id":"skill_1"}]`, gotRaw, "the skills, raw")
	assert.Equal(t, "tools[0].environment.skills", gotParam)
	assert.Same(t, files, ad.Sandbox().Spec.Skills, "mounted in the container")
	desc := gjson.GetBytes(x.Request().Body, "tools.0.description").String()
	assert.Contains(t, desc, "- csv: Reads CSV files. (path: /home/oai/skills/csv-1/SKILL.md)", "announced to the model")
	assert.Contains(t, desc, "Run shell commands", "after the shell function's own description")
}

// Skills are a native 400 where the Skills API is off; a resolver's client error is the
// client's answer, any other its 503.
func TestPrepareRefusesSkills(t *testing.T) {
	resolver := func(err error) func(context.Context, string, []byte, string) (*sandbox.SkillFiles, []admission.MountedSkill, error) {
		return func(context.Context, string, []byte, string) (*sandbox.SkillFiles, []admission.MountedSkill, error) {
			return nil, nil, err
		}
	}
	tests := []struct {
		name       string
		cfg        admission.Config
		wantStatus int
		wantCode   string
		wantParam  string
	}{
		{"Skills API off", admission.Config{}, 0, "unsupported_parameter", "tools[0].environment.skills"},
		{"unknown skill", admission.Config{ResolveSkills: resolver(&schema.RequestError{Message: "no", Param: "tools[0].environment.skills[0]", Code: "invalid_value"})},
			0, "invalid_value", "tools[0].environment.skills[0]"},
		{"store failure", admission.Config{ResolveSkills: resolver(errors.New("boom"))}, http.StatusServiceUnavailable, "skills_unavailable", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ad, r := admission.New(containers{}, memory.NewPending(nil), tt.cfg).Prepare(t.Context(), exchange(t, skillsBody), &caller{id: "id-a"}, admission.Request{})
			require.NotNil(t, r, "refused")
			assert.Nil(t, ad)
			assert.Equal(t, tt.wantStatus, r.Err.Status, "status")
			assert.Equal(t, tt.wantCode, r.Err.Code, "code")
			assert.Equal(t, tt.wantParam, r.Err.Param, "param")
			if tt.wantStatus >= 500 {
				assert.Error(t, r.Cause, "the cause, for the log")
			}
		})
	}
}
