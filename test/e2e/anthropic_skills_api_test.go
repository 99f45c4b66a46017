package e2e

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/test/e2e/fakemodel"
)

// Issue 29, "Skills": Anthropic's Skills API on /v1/skills (anthropic-sdk-go's skills client,
// which sends anthropic-version): a skill created from the files of its folder, listed,
// retrieved, given a second version, named by a Messages request's container.skills whose code
// reads the new version's SKILL.md at /skills/<name>/, then its first version and the skill
// deleted; through our harness and the real Envoy.
func TestAnthropicSkillsAPI(t *testing.T) {
	env := NewEnv(t, EnvOptions{})
	env.Fronts(t, func(t *testing.T, s *Stack) {
		ctx := t.Context()
		c := s.anthropicClient() // messagesAPIKey: the identity whose skills Messages mounts
		folder := func(desc string) []io.Reader {
			return []io.Reader{anthropic.File(strings.NewReader(
				"---\nname: api-word\ndescription: "+desc+"\n---\nThe word is heron.\n"), "api-word/SKILL.md", "text/markdown")}
		}
		made, err := c.Skills.New(ctx, anthropic.SkillNewParams{Files: folder("Knows the word."), DisplayName: anthropic.String("API Word")})
		require.NoError(t, err, "create a skill")
		t.Cleanup(func() { _, _ = c.Skills.Delete(context.Background(), made.ID, anthropic.SkillDeleteParams{}) })
		assert.Equal(t, "skill", string(made.Type))
		assert.Equal(t, "API Word", made.DisplayName, "the display_name given")
		assert.Equal(t, anthropic.SkillSourceType("custom"), made.Source.Type)
		assert.Regexp(t, `^[0-9]{16}$`, made.LatestVersionID, "an epoch-like version id")
		first := made.LatestVersionID

		list, err := c.Skills.List(ctx, anthropic.SkillListParams{Limit: anthropic.Int(100)})
		require.NoError(t, err, "list")
		ids := make([]string, len(list.Data))
		for i, sk := range list.Data {
			ids[i] = sk.ID
		}
		assert.Contains(t, ids, made.ID, "the list holds the skill")

		got, err := c.Skills.Get(ctx, made.ID, anthropic.SkillGetParams{})
		require.NoError(t, err, "retrieve")
		assert.Equal(t, made.ID, got.ID)
		assert.Equal(t, "API Word", got.DisplayName, "the display_name kept")

		v2, err := c.Skills.Versions.New(ctx, made.ID, anthropic.SkillVersionNewParams{Files: folder("Knows the new word.")})
		require.NoError(t, err, "create a version")
		assert.Regexp(t, `^[0-9]{16}$`, v2.ID, "an epoch-like version id")
		assert.Greater(t, v2.ID, first, "later than the first's")
		assert.Equal(t, anthropic.SkillVersion{ID: v2.ID, SkillID: made.ID, Name: "api-word", Description: "Knows the new word.", Type: "skill_version"},
			anthropic.SkillVersion{ID: v2.ID, SkillID: v2.SkillID, Name: v2.Name, Description: v2.Description, Type: v2.Type}, "the version")
		vs, err := c.Skills.Versions.List(ctx, made.ID, anthropic.SkillVersionListParams{})
		require.NoError(t, err, "list the versions")
		require.Len(t, vs.Data, 2, "two versions")
		v1, err := c.Skills.Versions.Get(ctx, first, anthropic.SkillVersionGetParams{SkillID: made.ID})
		require.NoError(t, err, "retrieve a version by its id")
		assert.Equal(t, "Knows the word.", v1.Description)

		// Messages mounts the latest version at /skills/api-word/.
		s.Model.Enqueue(messagesPath,
			fakemodel.JSON(fakemodel.AnthropicMessage("claude-e2e", fakemodel.Usage{Input: 30, Output: 12},
				fakemodel.ToolUse("toolu_ska1", "bash_code_execution", map[string]any{"command": "cat /skills/api-word/SKILL.md"}))),
			fakemodel.JSON(fakemodel.AnthropicMessage("claude-e2e", fakemodel.Usage{Input: 50, Output: 7}, fakemodel.Text("heron"))),
		)
		t.Cleanup(func() { assert.Zero(t, s.Model.Pending(), "every scripted answer was used") })
		msg, err := c.Messages.New(ctx, skillsParams(customSkill(made.ID)))
		require.NoError(t, err, "POST /v1/messages with container.skills")
		require.Len(t, msg.Content, 3, "server_tool_use, result, text: %s", msg.RawJSON())
		out := msg.Content[1].AsBashCodeExecutionToolResult().Content
		assert.Equal(t, "---\nname: api-word\ndescription: Knows the new word.\n---\nThe word is heron.\n", out.Stdout,
			"the latest version's SKILL.md: stderr %q", out.Stderr)
		require.Len(t, msg.Container.Skills, 1, "the echo: %s", msg.RawJSON())
		assert.Equal(t, v2.ID, msg.Container.Skills[0].Version, "the resolved version's id")

		dv, err := c.Skills.Versions.Delete(ctx, first, anthropic.SkillVersionDeleteParams{SkillID: made.ID})
		require.NoError(t, err, "delete a version")
		assert.Equal(t, "skill_version_deleted", string(dv.Type))
		del, err := c.Skills.Delete(ctx, made.ID, anthropic.SkillDeleteParams{})
		require.NoError(t, err, "delete the skill")
		assert.Equal(t, "skill_deleted", string(del.Type))
		_, err = c.Skills.Get(ctx, made.ID, anthropic.SkillGetParams{})
		var apiErr *anthropic.Error
		require.ErrorAs(t, err, &apiErr, "a deleted skill")
		assert.Equal(t, http.StatusNotFound, apiErr.StatusCode)
		assert.Equal(t, "not_found_error", gjson.Get(apiErr.RawJSON(), "error.type").String(), apiErr.RawJSON())
	})
}
