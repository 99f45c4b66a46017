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
	"github.com/codeinterp/codeinterp/pkg/schema/messages"
	"github.com/codeinterp/codeinterp/pkg/skills"
	"github.com/codeinterp/codeinterp/pkg/store/memory"
)

// messagesSkillsBody is a Messages request whose container names skills (%s: the entries).
func messagesSkillsBody(entries string) string {
	return `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"x"}],` +
		`"tools":[{"type":"code_execution_20250825","name":"code_execution"}],"container":{"skills":[` + entries + `]}}`
}

// storeWithSkill returns a skills store where identity id-a has skill "say" in two versions,
// and the skill's id.
func storeWithSkill(t *testing.T) (skills.Store, string) {
	t.Helper()
	st := skills.NewMemory(skills.MemoryConfig{})
	b := func(desc string) *skills.Bundle {
		return &skills.Bundle{Name: "say", Description: desc, Files: []skills.File{
			{Path: "SKILL.md", Data: []byte("---\nname: say\ndescription: " + desc + "\n---\n")},
			{Path: "scripts/say.sh", Data: []byte("echo hi\n"), Exec: true},
		}}
	}
	sk, err := st.Create(t.Context(), "id-a", b("Says hi."))
	require.NoError(t, err, "create the skill")
	_, err = st.AddVersion(t.Context(), "id-a", sk.ID, b("Says hi twice."), false)
	require.NoError(t, err, "add its version 2")
	return st, sk.ID
}

// A Messages request's container.skills are resolved for the caller in the Skills API's store
// (latest by default, or the version named), mounted at /skills/<name>/, announced in the code
// tool's description, and echoed in the answer with the id (skills.Version.Epoch) of the version
// they resolved to.
func TestPrepareMountsRequestedSkills(t *testing.T) {
	st, id := storeWithSkill(t)
	tests := []struct {
		name, version string
		wantVersion   string
		wantDesc      string
	}{
		{"latest by default", ``, "2", "Says hi twice."},
		{"latest", `,"version":"latest"`, "2", "Says hi twice."},
		{"a version", `,"version":"1"`, "1", "Says hi."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x, err := messages.Surface{}.NewExchange([]byte(messagesSkillsBody(`{"type":"custom","skill_id":"`+id+`"`+tt.version+`}`)), schema.Options{})
			require.NoError(t, err, "the request")
			ad, r := admission.New(containers{}, memory.NewPending(nil), admission.Config{SkillStore: st}).
				Prepare(t.Context(), x, &caller{id: "id-a"}, admission.Request{})
			require.Nil(t, r, "admitted")
			spec := ad.Sandbox().Spec.Skills
			require.NotNil(t, spec, "skills mounted")
			assert.Equal(t, "/skills", spec.Root, "the native root")
			assert.Equal(t, []sandbox.SkillFile{
				{Path: "say/SKILL.md", Data: []byte("---\nname: say\ndescription: " + tt.wantDesc + "\n---\n")},
				{Path: "say/scripts/say.sh", Data: []byte("echo hi\n"), Exec: true},
			}, spec.Files, "the version's files, in /skills/say/")
			desc := gjson.GetBytes(x.Request().Body, `tools.#(name=="bash_code_execution").description`).String()
			assert.Contains(t, desc, "- say: "+tt.wantDesc+" (path: /skills/say/SKILL.md)", "announced in bash's description")

			final, err := x.Final([]schema.Round{{Body: []byte(`{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[` +
				`{"type":"tool_use","id":"toolu_1","name":"bash_code_execution","input":{"command":"ls"}}],"stop_reason":"tool_use","usage":{"input_tokens":1,"output_tokens":1}}`),
				Calls: []schema.CodeCall{{ContainerID: "container_1", Run: &schema.CodeRun{}}}},
				{Body: []byte(`{"id":"msg_2","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"ok"}],"stop_reason":"end_turn","usage":{"input_tokens":1,"output_tokens":1}}`)}}, "")
			require.NoError(t, err, "the answer")
			want, err := st.Version(t.Context(), "id-a", id, tt.wantVersion)
			require.NoError(t, err, "version %s", tt.wantVersion)
			assert.JSONEq(t, `[{"type":"custom","skill_id":"`+id+`","version":"`+want.Epoch+`"}]`,
				gjson.GetBytes(final, "container.skills").Raw, "the echo, with the resolved version's id")
		})
	}
}

// An unknown skill or version is a native 400 naming the entry; skills where the Skills API is
// off a 400; a store failure a 503.
func TestPrepareRefusesRequestedSkills(t *testing.T) {
	st, id := storeWithSkill(t)
	tests := []struct {
		name       string
		store      skills.Store
		entries    string
		wantStatus int
		wantMsg    string
	}{
		{"unknown skill", st, `{"type":"custom","skill_id":"skill_nope"}`, 0, "container.skills.0.skill_id: skill 'skill_nope' not found."},
		{"unknown version", st, `{"type":"custom","skill_id":"` + id + `","version":"9"}`, 0, "container.skills.0.version: skill '" + id + "' has no version '9'."},
		{"Skills API off", nil, `{"type":"custom","skill_id":"` + id + `"}`, 0, "container.skills: custom skills are not served by this gateway (its Skills API is off)."},
		{"store failure", failingSkills{st}, `{"type":"custom","skill_id":"` + id + `"}`, http.StatusServiceUnavailable, "codeinterp could not read the request's skills; try again."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x, err := messages.Surface{}.NewExchange([]byte(messagesSkillsBody(tt.entries)), schema.Options{})
			require.NoError(t, err, "the request %s", tt.entries)
			ad, r := admission.New(containers{}, memory.NewPending(nil), admission.Config{SkillStore: tt.store}).
				Prepare(t.Context(), x, &caller{id: "id-a"}, admission.Request{})
			require.NotNil(t, r, "refused: %s", tt.entries)
			assert.Nil(t, ad)
			assert.Equal(t, tt.wantStatus, r.Err.Status, "status of %s", tt.entries)
			assert.Equal(t, tt.wantMsg, r.Err.Message, "message of %s", tt.entries)
		})
	}
}

// failingSkills is a skills store whose bundles cannot be read.
type failingSkills struct{ skills.Store }

func (failingSkills) Bundle(context.Context, string, string, string) (*skills.Bundle, skills.Version, error) {
	return nil, skills.Version{}, errors.New("boom")
}

// A Messages request naming a container is told of the container's recorded skills when it
// names none of its own; of its own only when it does (not of both).
func TestPrepareNamedContainerAndRequestedSkills(t *testing.T) {
	st, id := storeWithSkill(t)
	recorded := []admission.MountedSkill{{Name: "csv", Description: "Reads CSV files.", Path: "/home/oai/skills/csv-1/SKILL.md"}}
	tests := []struct {
		name      string
		container string
		wantTold  []string
		wantNot   []string
	}{
		{"no skills of its own", `{"id":"container_1"}`, []string{"- csv: Reads CSV files."}, []string{"- say:"}},
		{"skills of its own", `{"id":"container_1","skills":[{"type":"custom","skill_id":"` + id + `"}]}`, []string{"- say: Says hi twice."}, []string{"- csv:"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"x"}],` +
				`"tools":[{"type":"code_execution_20250825","name":"code_execution"}],"container":` + tt.container + `}`
			x, err := messages.Surface{}.NewExchange([]byte(body), schema.Options{})
			require.NoError(t, err, "the request %s", tt.container)
			_, r := admission.New(containers{"container_1": "id-a"}, memory.NewPending(nil), admission.Config{SkillStore: st,
				ContainerSkills: func(context.Context, string, string) ([]admission.MountedSkill, error) { return recorded, nil },
			}).Prepare(t.Context(), x, &caller{id: "id-a"}, admission.Request{})
			require.Nil(t, r, "admitted: %s", tt.container)
			desc := gjson.GetBytes(x.Request().Body, `tools.#(name=="bash_code_execution").description`).String()
			for _, w := range tt.wantTold {
				assert.Contains(t, desc, w, "told with container %s", tt.container)
			}
			for _, w := range tt.wantNot {
				assert.NotContains(t, desc, w, "not told with container %s", tt.container)
			}
		})
	}
}
