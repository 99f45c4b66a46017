package messages

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/pkg/schema"
)

// skillsRequest is a request with the code execution tool whose container is c.
func skillsRequest(c string) []byte {
	return []byte(`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"x"}],` +
		`"tools":[{"type":"code_execution_20250825","name":"code_execution"}],"container":` + c + `}`)
}

// container.skills are read with the container's id and removed with it; the answer echoes them.
func TestRewriteSkills(t *testing.T) {
	rq, err := Rewrite(skillsRequest(`{"id":"container_1","skills":[{"type":"custom","skill_id":"skill_a","version":"latest"},{"type":"custom","skill_id":"skill_b"}]}`), Options{})
	require.NoError(t, err, "rewrite")
	assert.Equal(t, "container_1", rq.ContainerID)
	assert.Equal(t, []Skill{{Type: "custom", SkillID: "skill_a", Version: "latest"}, {Type: "custom", SkillID: "skill_b"}}, rq.Skills)
	assert.False(t, gjson.GetBytes(rq.Body, "container").Exists(), "the container is not sent upstream")
	assert.JSONEq(t, `{"id":"c","expires_at":"0001-01-01T00:00:00Z","skills":[{"type":"custom","skill_id":"skill_a","version":"3"}]}`,
		containerJSON(&Container{ID: "c", Skills: []Skill{{Type: "custom", SkillID: "skill_a", Version: "3"}}}), "the echo")
	assert.JSONEq(t, `{"id":"c","expires_at":"0001-01-01T00:00:00Z"}`, containerJSON(&Container{ID: "c"}), "no skills: none shown, as the recorded exchange (reference §1.3)")

	for _, c := range []string{`"container_1"`, `{"id":"container_1"}`, `{"skills":null}`, `{"skills":[]}`} {
		rq, err := Rewrite(skillsRequest(c), Options{})
		require.NoError(t, err, "rewrite container %s", c)
		assert.Empty(t, rq.Skills, "no skills in container %s", c)
	}
}

// Anthropic's own skills, more than eight, and malformed entries are native 400s naming the
// entry.
func TestRewriteRefusesSkills(t *testing.T) {
	nine := strings.Repeat(`{"type":"custom","skill_id":"skill_a"},`, 9)
	tests := []struct {
		name, skills, want string
	}{
		{"anthropic", `[{"type":"anthropic","skill_id":"pptx","version":"latest"}]`,
			"container.skills.0: Anthropic skills ('pptx') are not provided by this gateway; only custom skills uploaded through its Skills API are."},
		{"more than 8", "[" + strings.TrimSuffix(nine, ",") + "]", "container.skills: List should have at most 8 items after validation, not 9"},
		{"not a list", `{}`, "container.skills: Input should be a valid list"},
		{"not an object", `["skill_a"]`, "container.skills.0: Input should be a valid dictionary or object"},
		{"no id", `[{"type":"custom"}]`, "container.skills.0.skill_id: Field required"},
		{"no type", `[{"skill_id":"skill_a"}]`, "container.skills.0.type: Field required"},
		{"unknown type", `[{"type":"mine","skill_id":"skill_a"}]`, "container.skills.0.type: Input should be 'anthropic' or 'custom'"},
		{"version not a string", `[{"type":"custom","skill_id":"skill_a","version":3}]`, "container.skills.0.version: Input should be a valid string"},
		{"twice", `[{"type":"custom","skill_id":"skill_a"},{"type":"custom","skill_id":"skill_a","version":"1"}]`, "container.skills.1: skill 'skill_a' is named twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Rewrite(skillsRequest(fmt.Sprintf(`{"skills":%s}`, tt.skills)), Options{})
			re, ok := err.(*RequestError)
			require.True(t, ok, "a client error for %s: %v", tt.skills, err)
			assert.Equal(t, 0, re.Status, "a 400 for %s", tt.skills)
			assert.Equal(t, tt.want, re.Message, "message for %s", tt.skills)
		})
	}
}

// AnnounceSkills appends its text to the first tool standing for the code execution tool
// (Python's, bash's for _20250825), in the body sent and the one follow-ups are made from.
func TestAnnounceSkills(t *testing.T) {
	tests := []struct {
		version, wantTool string
	}{
		{Version20250522, "code_execution"},
		{Version20250825, "bash_code_execution"},
		{Version20260120, "code_execution"},
		{Version20260521, "code_execution"},
	}
	for _, tt := range tests {
		t.Run(tt.version, func(t *testing.T) {
			body := `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"x"}],"tools":[{"type":"` + tt.version + `","name":"code_execution"}]}`
			xs, err := Surface{}.NewExchange([]byte(body), schema.Options{})
			require.NoError(t, err, "exchange for %s", tt.version)
			x := xs.(*exchange)
			x.AnnounceSkills("\n\nSKILLS")
			for _, b := range [][]byte{x.Request().Body, x.sent} {
				tools := gjson.GetBytes(b, "tools").Array()
				require.NotEmpty(t, tools, "tools of %s", tt.version)
				for _, tool := range tools {
					desc := tool.Get("description").String()
					if tool.Get("name").String() == tt.wantTool {
						assert.True(t, strings.HasSuffix(desc, "\n\nSKILLS"), "%s: %s's description ends with the skills: %q", tt.version, tt.wantTool, desc)
					} else {
						assert.NotContains(t, desc, "SKILLS", "%s: %s's description", tt.version, tool.Get("name").String())
					}
				}
			}
		})
	}
}
