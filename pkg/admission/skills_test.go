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
	"github.com/codeinterp/codeinterp/pkg/loop"
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

const refBody = `{"model":"m","input":"x","tools":[{"type":"shell","environment":{"type":"container_reference","container_id":"cntr_1"}}]}`

// prepareRef admits refBody for id-a, whose container cntr_1's skills are give (or the
// look-up fails with giveErr); it returns the body sent upstream's shell description.
func prepareRef(t *testing.T, give []admission.MountedSkill, giveErr error) (string, *admission.Refusal) {
	t.Helper()
	var gotIdentity, gotID string
	adm := admission.New(containers{"cntr_1": "id-a"}, memory.NewPending(nil), admission.Config{
		ContainerSkills: func(_ context.Context, identity, id string) ([]admission.MountedSkill, error) {
			gotIdentity, gotID = identity, id
			return give, giveErr
		},
	})
	x := exchange(t, refBody)
	_, r := adm.Prepare(t.Context(), x, &caller{id: "id-a"}, admission.Request{})
	assert.Equal(t, "id-a", gotIdentity, "the caller's container is looked up")
	assert.Equal(t, "cntr_1", gotID, "the container named is looked up")
	return gjson.GetBytes(x.Request().Body, "tools.0.description").String(), r
}

// A request naming a container created with skills (the shell tool's container_reference)
// tells the model of them as for container_auto's.
func TestPrepareAnnouncesContainerSkills(t *testing.T) {
	desc, r := prepareRef(t, []admission.MountedSkill{{Name: "csv", Description: "Reads CSV files.", Path: "/home/oai/skills/csv-1/SKILL.md"}}, nil)
	require.Nil(t, r, "admitted")
	assert.Contains(t, desc, "Run shell commands", "the shell function's own description")
	assert.Contains(t, desc, "Skills are installed in the container.", "announced to the model")
	assert.Contains(t, desc, "- csv: Reads CSV files. (path: /home/oai/skills/csv-1/SKILL.md)", "announced to the model")
}

// A container created without skills tells the model nothing.
func TestPrepareContainerWithoutSkills(t *testing.T) {
	desc, r := prepareRef(t, nil, nil)
	require.Nil(t, r, "admitted")
	assert.Contains(t, desc, "Run shell commands", "the shell function's own description")
	assert.NotContains(t, desc, "Skills are installed", "no skills announced")
}

// A failed look-up of a container's skills is a 503, its cause kept for the log.
func TestPrepareContainerSkillsUnavailable(t *testing.T) {
	_, r := prepareRef(t, nil, errors.New("redis down"))
	require.NotNil(t, r, "refused")
	assert.Equal(t, http.StatusServiceUnavailable, r.Err.Status)
	assert.Equal(t, "skills_unavailable", r.Err.Code)
	assert.Error(t, r.Cause, "the cause, for the log")
}

// attached is what an AttachSkills recorded: each identity's containers' skills.
type attached map[string][]admission.MountedSkill

func (a attached) attach(_ context.Context, identity, id string, ms []admission.MountedSkill) {
	a[identity+"/"+id] = ms
}

// The containers the loop created for a request whose shell tool's container_auto has skills
// record them once its answer is made (the shell call ran in cntr_new): a later request
// naming cntr_new tells the model of them. A container the request named, a session's, an
// anonymous caller's or a failed answer's records nothing.
func TestAnsweredAttachesSkills(t *testing.T) {
	ms := []admission.MountedSkill{{Name: "csv", Description: "Reads CSV files.", Path: "/home/oai/skills/csv-1/SKILL.md"}}
	noSkills := `{"model":"m","input":"x","tools":[{"type":"shell","environment":{"type":"container_auto"}}]}`
	tests := []struct {
		name     string
		give     string
		identity string
		session  string
		status   int
		want     attached
	}{
		{"container_auto with skills", skillsBody, "id-a", "", http.StatusOK, attached{"id-a/cntr_new": ms}},
		{"no skills", noSkills, "id-a", "", http.StatusOK, attached{}},
		{"anonymous", skillsBody, "", "", http.StatusOK, attached{}},
		{"a session's container", skillsBody, "id-a", "s-1", http.StatusOK, attached{}},
		{"a failed answer", skillsBody, "id-a", "", http.StatusBadGateway, attached{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := attached{}
			adm := admission.New(containers{}, memory.NewPending(nil), admission.Config{
				ResolveSkills: func(context.Context, string, []byte, string) (*sandbox.SkillFiles, []admission.MountedSkill, error) {
					return &sandbox.SkillFiles{Root: "/home/oai/skills", Files: []sandbox.SkillFile{{Path: "csv-1/SKILL.md"}}}, ms, nil
				},
				AttachSkills: got.attach,
			})
			x := exchange(t, tt.give)
			ad, r := adm.Prepare(t.Context(), x, &caller{id: tt.identity}, admission.Request{Session: tt.session, AllowAnonymousSessions: true})
			require.Nil(t, r, "admitted")
			var lr loop.Request
			ad.Apply(&lr)
			final, err := x.Final(shellRounds("cntr_new"), "")
			require.NoError(t, err, "the answer")
			ad.Answered(loop.Response{Status: tt.status, Body: final})
			assert.Equal(t, tt.want, got, "recorded")
		})
	}
}

// A request naming a container by id (the shell tool's container_reference, or the
// code_interpreter tool's container) with skills of its own does not record them for it: the
// container keeps those it was created with.
func TestAnsweredAttachesNoNamedContainer(t *testing.T) {
	got := attached{}
	adm := admission.New(containers{"cntr_1": "id-a"}, memory.NewPending(nil), admission.Config{
		ResolveSkills: func(context.Context, string, []byte, string) (*sandbox.SkillFiles, []admission.MountedSkill, error) {
			return &sandbox.SkillFiles{}, []admission.MountedSkill{{Name: "csv"}}, nil
		},
		AttachSkills: got.attach,
	})
	x := exchange(t, `{"model":"m","input":"x","tools":[{"type":"code_interpreter","container":"cntr_1"},`+
		`{"type":"shell","environment":{"type":"container_auto","skills":[{"type":"skill_reference","skill_id":"skill_1"}]}}]}`)
	ad, r := adm.Prepare(t.Context(), x, &caller{id: "id-a"}, admission.Request{})
	require.Nil(t, r, "admitted")
	var lr loop.Request
	ad.Apply(&lr)
	require.Equal(t, "cntr_1", lr.Sandbox.ContainerID, "the code_interpreter tool's container")
	final, err := x.Final(shellRounds("cntr_1"), "")
	require.NoError(t, err, "the answer")
	ad.Answered(loop.Response{Status: http.StatusOK, Body: final})
	assert.Empty(t, got, "nothing recorded")
}

// The code_interpreter tool's container id form names a container created with skills as the
// shell tool's container_reference does: the shell function's description tells of them.
func TestPrepareAnnouncesCodeInterpreterContainerSkills(t *testing.T) {
	adm := admission.New(containers{"cntr_1": "id-a"}, memory.NewPending(nil), admission.Config{
		ContainerSkills: func(_ context.Context, identity, id string) ([]admission.MountedSkill, error) {
			if identity != "id-a" || id != "cntr_1" {
				return nil, nil
			}
			return []admission.MountedSkill{{Name: "csv", Description: "Reads CSV files.", Path: "/home/oai/skills/csv-1/SKILL.md"}}, nil
		},
	})
	x := exchange(t, `{"model":"m","input":"x","tools":[{"type":"code_interpreter","container":"cntr_1"},`+
		`{"type":"shell","environment":{"type":"container_auto"}}]}`)
	_, r := adm.Prepare(t.Context(), x, &caller{id: "id-a"}, admission.Request{})
	require.Nil(t, r, "admitted")
	desc := gjson.GetBytes(x.Request().Body, `tools.#(name=="shell").description`).String()
	assert.Contains(t, desc, "- csv: Reads CSV files. (path: /home/oai/skills/csv-1/SKILL.md)", "announced to the model")
}

// shellRounds are a model turn calling the shell function, run in container id, and the
// model's answer.
func shellRounds(id string) []schema.Round {
	return []schema.Round{
		{Body: []byte(`{"id":"resp_1","object":"response","status":"completed","output":[` +
			`{"type":"function_call","id":"fc_1","call_id":"call_1","name":"shell","arguments":"{\"commands\":[\"ls\"]}"}],` +
			`"usage":{"input_tokens":1,"output_tokens":1,"total_tokens":2}}`),
			Calls: []schema.CodeCall{{ID: "sh_1", Status: schema.CodeCallCompleted, ContainerID: id, Run: &schema.CodeRun{Stdout: "x\n"}}}},
		{Body: []byte(`{"id":"resp_2","object":"response","status":"completed","output":[` +
			`{"type":"message","id":"msg_1","role":"assistant","status":"completed","content":[{"type":"output_text","text":"ok","annotations":[]}]}],` +
			`"usage":{"input_tokens":1,"output_tokens":1,"total_tokens":2}}`)},
	}
}
