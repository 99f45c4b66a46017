package e2e

import (
	"bytes"
	"context"
	"net/http"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/test/e2e/fakemodel"
)

// Issue 29, "Skills": a skill uploaded through the Skills API (/v1/skills), named by a Messages
// request's container.skills, is mounted read-only at /skills/<name>/ where the code's bash
// reads its SKILL.md and runs its script; the model is told of it in bash's description; the
// answer's container.skills echoes it with its resolved version, plainly and streamed, through
// our harness and the real Envoy. Anthropic's own skills, an unknown custom skill and more
// than eight skills are native 400s the model never sees.
func TestAnthropicSkills(t *testing.T) {
	env := NewEnv(t, EnvOptions{})
	env.Fronts(t, func(t *testing.T, s *Stack) {
		ctx := t.Context()
		api := s.Client(messagesAPIKey) // the same key: the same identity, whose skills these are
		made, err := api.Skills.New(ctx, openai.SkillNewParams{Files: openai.SkillNewParamsFilesUnion{
			OfFile: openai.File(bytes.NewReader(wordSkillZip(t)), "secret-word.zip", "application/zip"),
		}})
		require.NoError(t, err, "upload a skill")
		t.Cleanup(func() { _, _ = api.Skills.Delete(context.Background(), made.ID) })
		var containerID string
		t.Run("plain", func(t *testing.T) { containerID = testAnthropicSkillsRun(t, s, made.ID, false) })
		t.Run("named again", func(t *testing.T) { testAnthropicSkillsNamedAgain(t, s, containerID) })
		t.Run("stream", func(t *testing.T) { testAnthropicSkillsRun(t, s, made.ID, true) })
		t.Run("refused", func(t *testing.T) { testAnthropicSkillsRefused(t, s, made.ID) })
	})
}

// skillsParams is a Messages request with the code_execution_20250825 tool whose container
// names skills.
func skillsParams(skills ...anthropic.SkillParams) anthropic.MessageNewParams {
	p := askMessagesTools("use the secret-word skill")
	p.Container = anthropic.MessageCreateParamsContainerUnion{OfContainers: &anthropic.ContainerParams{Skills: skills}}
	return p
}

func customSkill(id string) anthropic.SkillParams {
	return anthropic.SkillParams{Type: anthropic.SkillParamsTypeCustom, SkillID: id}
}

// testAnthropicSkillsRun runs the skill's script and returns the answer's container id.
func testAnthropicSkillsRun(t *testing.T, s *Stack, skillID string, stream bool) string {
	mark := len(s.Model.RequestsTo(messagesPath))
	s.Model.Enqueue(messagesPath,
		fakemodel.JSON(fakemodel.AnthropicMessage("claude-e2e", fakemodel.Usage{Input: 30, Output: 12},
			fakemodel.ToolUse("toolu_sk1", "bash_code_execution", map[string]any{
				"command": "cat /skills/secret-word/SKILL.md && /skills/secret-word/scripts/say.sh && " +
					"stat -c '%a %n' /skills/secret-word/scripts/say.sh /skills/secret-word/SKILL.md && " +
					"(rm -f /skills/secret-word/SKILL.md 2>&1 || echo refused)",
			}))),
		fakemodel.JSON(fakemodel.AnthropicMessage("claude-e2e", fakemodel.Usage{Input: 50, Output: 7},
			fakemodel.Text("The secret word is pelican."))),
	)
	t.Cleanup(func() { assert.Zero(t, s.Model.Pending(), "every scripted answer was used") })
	client := s.anthropicClient()
	ctx := context.Background()
	params := skillsParams(customSkill(skillID))
	var msg *anthropic.Message
	if stream {
		st := client.Messages.NewStreaming(ctx, params)
		acc := anthropic.Message{}
		for st.Next() {
			require.NoError(t, acc.Accumulate(st.Current()), "accumulate %s", st.Current().Type)
		}
		require.NoError(t, st.Err(), "the stream")
		require.NoError(t, st.Close(), "close the stream")
		msg = &acc
	} else {
		var err error
		msg, err = client.Messages.New(ctx, params)
		require.NoError(t, err, "POST /v1/messages")
	}
	require.Len(t, msg.Content, 3, "server_tool_use, result, text: %s", msg.RawJSON())
	out := msg.Content[1].AsBashCodeExecutionToolResult().Content
	assert.Equal(t, wordSkill+"said pelican\n555 /skills/secret-word/scripts/say.sh\n444 /skills/secret-word/SKILL.md\n"+
		"rm: cannot remove '/skills/secret-word/SKILL.md': Read-only file system\nrefused\n", out.Stdout,
		"SKILL.md read, the script run, at /skills/secret-word/, read-only: stderr %q", out.Stderr)
	require.Len(t, msg.Container.Skills, 1, "the echo: %s", msg.RawJSON())
	v1, err := client.Skills.Versions.Get(ctx, "1", anthropic.SkillVersionGetParams{SkillID: skillID})
	require.NoError(t, err, "the skill's version 1 in Anthropic's shape")
	assert.Equal(t, anthropic.ContainerSkill{SkillID: skillID, Type: anthropic.ContainerSkillTypeCustom, Version: v1.ID},
		anthropic.ContainerSkill{SkillID: msg.Container.Skills[0].SkillID, Type: msg.Container.Skills[0].Type, Version: msg.Container.Skills[0].Version},
		"container.skills echoes the skill with its resolved version's id")

	sent := s.Model.RequestsTo(messagesPath)[mark:]
	require.Len(t, sent, 2, "the first request and one follow-up")
	for i, r := range sent {
		desc := gjson.GetBytes(r.Body, `tools.#(name=="bash_code_execution").description`).String()
		assert.Contains(t, desc, "- secret-word: Knows the secret word. (path: /skills/secret-word/SKILL.md)",
			"request %d: the model is told the skill's name, description and path", i)
		assert.NotContains(t, string(r.Body), `"container"`, "request %d: the container is not sent upstream", i)
	}
	return msg.Container.ID
}

// testAnthropicSkillsNamedAgain: a later request naming the container by its id alone keeps the
// skills the container was created with.
func testAnthropicSkillsNamedAgain(t *testing.T, s *Stack, containerID string) {
	require.NotEmpty(t, containerID, "the plain answer's container")
	s.Model.Enqueue(messagesPath,
		fakemodel.JSON(fakemodel.AnthropicMessage("claude-e2e", fakemodel.Usage{Input: 30, Output: 12},
			fakemodel.ToolUse("toolu_sk2", "bash_code_execution", map[string]any{"command": "/skills/secret-word/scripts/say.sh"}))),
		fakemodel.JSON(fakemodel.AnthropicMessage("claude-e2e", fakemodel.Usage{Input: 50, Output: 7}, fakemodel.Text("pelican"))),
	)
	t.Cleanup(func() { assert.Zero(t, s.Model.Pending(), "every scripted answer was used") })
	p := askMessagesTools("again")
	p.Container = anthropic.MessageCreateParamsContainerUnion{OfString: anthropic.String(containerID)}
	client := s.anthropicClient()
	msg, err := client.Messages.New(context.Background(), p)
	require.NoError(t, err, "POST /v1/messages naming the container")
	require.Len(t, msg.Content, 3, "server_tool_use, result, text: %s", msg.RawJSON())
	assert.Equal(t, containerID, msg.Container.ID, "the same container")
	out := msg.Content[1].AsBashCodeExecutionToolResult().Content
	assert.Equal(t, "said pelican\n", out.Stdout, "the container keeps its skills: stderr %q", out.Stderr)
}

func testAnthropicSkillsRefused(t *testing.T, s *Stack, skillID string) {
	nine := make([]anthropic.SkillParams, 9)
	for i := range nine {
		nine[i] = customSkill(skillID)
	}
	tests := []struct {
		name   string
		skills []anthropic.SkillParams
		want   string
	}{
		{"anthropic", []anthropic.SkillParams{{Type: anthropic.SkillParamsTypeAnthropic, SkillID: "pptx", Version: anthropic.String("latest")}},
			"Anthropic skills ('pptx') are not provided"},
		{"unknown custom", []anthropic.SkillParams{customSkill("skill_unknown")}, "container.skills.0.skill_id: skill 'skill_unknown' not found."},
		{"more than 8", nine, "container.skills: List should have at most 8 items"},
	}
	client := s.anthropicClient()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mark := len(s.Model.RequestsTo(messagesPath))
			_, err := client.Messages.New(context.Background(), skillsParams(tt.skills...))
			var apiErr *anthropic.Error
			require.ErrorAs(t, err, &apiErr, "%s: an API error", tt.name)
			assert.Equal(t, http.StatusBadRequest, apiErr.StatusCode, "%s: status: %s", tt.name, apiErr.RawJSON())
			assert.Equal(t, "invalid_request_error", gjson.Get(apiErr.RawJSON(), "error.type").String(), "%s: type", tt.name)
			assert.Contains(t, gjson.Get(apiErr.RawJSON(), "error.message").String(), tt.want, "%s: message", tt.name)
			assert.Len(t, s.Model.RequestsTo(messagesPath), mark, "%s: the model was not asked", tt.name)
		})
	}
}
