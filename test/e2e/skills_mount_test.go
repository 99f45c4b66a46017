package e2e

import (
	"archive/zip"
	"bytes"
	"encoding/base64"
	"io/fs"
	"net/http"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/test/e2e/fakemodel"
)

// Issue 30 end to end: skills on POST /v1/containers, mounted read-only at /home/oai/skills in
// the container, read by a shell command through a container_reference environment; a skill
// uploaded with the Skills API and an inline one; the shell tool's container_auto skills, told
// of again to a later request naming that container; an unknown skill id is OpenAI's 400.
// Plain and streamed, through our harness and the real Envoy.
func TestSkillsMounted(t *testing.T) {
	env := NewEnv(t, EnvOptions{})
	env.Fronts(t, func(t *testing.T, s *Stack) {
		m := newModel(t, s.Model)
		for _, v := range variants {
			t.Run(v.String(), func(t *testing.T) {
				m.clear()
				x := &scene{s: s, m: m, v: v, mark: len(m.Requests())}
				testSkillsMounted(t, x)
				assert.Zero(t, m.pending(), "(%s): every scripted answer was used", v)
			})
		}
	})
}

func testSkillsMounted(t *testing.T, x *scene) {
	ctx := t.Context()
	key := "sk-skills-mount-" + x.s.Front.Name()
	x.s.Model.AddKey(key)
	c := x.s.Client(key)

	made, err := c.Skills.New(ctx, openai.SkillNewParams{Files: openai.SkillNewParamsFilesUnion{
		OfFile: openai.File(bytes.NewReader(wordSkillZip(t)), "secret-word.zip", "application/zip"),
	}})
	require.NoError(t, err, "upload a skill")
	t.Cleanup(func() { _, _ = c.Skills.Delete(ctx, made.ID) })
	inline := skillZipOf(t, map[string]string{"colour/SKILL.md": "---\nname: colour\ndescription: Knows the colour.\n---\nThe colour is teal.\n"})

	ct, err := c.Containers.New(ctx, openai.ContainerNewParams{Name: x.name("skilled"), Skills: []openai.ContainerNewParamsSkillUnion{
		{OfSkillReference: &responses.SkillReferenceParam{SkillID: made.ID}},
		{OfInline: &responses.InlineSkillParam{Name: "colour", Description: "Knows the colour.",
			Source: responses.InlineSkillSourceParam{Data: base64.StdEncoding.EncodeToString(inline)}}},
	}})
	require.NoError(t, err, "create a container with skills")
	t.Cleanup(func() { _ = c.Containers.Delete(ctx, ct.ID) })

	mark := len(x.m.Requests())
	x.m.script(responsesPath,
		responsesReply(usage(10, 5), runShell("call_1", map[string]any{"commands": []string{
			"cat /home/oai/skills/secret-word-*/SKILL.md /home/oai/skills/colour-*/SKILL.md",
			"ls /home/oai/skills | sed 's/-[0-9a-f]\\{32\\}$/-HEX/'",
			"rm -f /home/oai/skills/colour-*/SKILL.md || echo refused",
			"cd /home/oai/skills/secret-word-* && ./scripts/say.sh && stat -c '%a %n' scripts/say.sh SKILL.md",
		}})),
		responsesReply(usage(20, 7), fakemodel.Message("read")))
	resp := x.responses(t, key, responses.ResponseNewParams{
		Model: testModel,
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("use the skills")},
		Tools: []responses.ToolUnionParam{{OfShell: &responses.FunctionShellToolParam{
			Environment: responses.FunctionShellToolEnvironmentUnionParam{OfContainerReference: &responses.ContainerReferenceParam{ContainerID: ct.ID}},
		}}},
	})
	call, out := shellItems(t, resp, 0)
	assert.Equal(t, ct.ID, call.Environment.ContainerID, "the container with the skills")
	require.Len(t, out.Output, 4, "outputs")
	assert.Contains(t, out.Output[0].Stdout, "The secret word is pelican.", "the uploaded skill's SKILL.md")
	assert.Contains(t, out.Output[0].Stdout, "The colour is teal.", "the inline skill's SKILL.md")
	assert.Equal(t, "colour-HEX\nsecret-word-HEX\n", out.Output[1].Stdout, "each skill in <name>-<32 hex>")
	assert.Contains(t, out.Output[2].Stdout, "refused", "the skills are read-only")
	assert.Contains(t, out.Output[2].Stderr, "Read-only file system", "the skills are read-only")
	assert.Equal(t, "said pelican\n555 scripts/say.sh\n444 SKILL.md\n", out.Output[3].Stdout,
		"a script executable in the zip runs as ./scripts/say.sh; SKILL.md is not executable")
	reqs := x.m.since(mark)
	require.NotEmpty(t, reqs, "container_reference: requests the model got")
	desc := gjson.GetBytes(reqs[0].Body, `tools.#(name=="shell").description`).String()
	assert.Regexp(t, `- secret-word: Knows the secret word\. \(path: /home/oai/skills/secret-word-[0-9a-f]{32}/SKILL\.md\)`, desc,
		"container_reference: the model is told of the container's skills")
	assert.Regexp(t, `- colour: Knows the colour\. \(path: /home/oai/skills/colour-[0-9a-f]{32}/SKILL\.md\)`, desc,
		"container_reference: the model is told of the container's inline skill")

	// The uploaded skill on the shell tool's container_auto: mounted in the container the request
	// gets, and announced to the model in the shell function's description.
	mark = len(x.m.Requests())
	x.m.script(responsesPath,
		responsesReply(usage(10, 5), runShell("call_2", map[string]any{"commands": []string{"cat /home/oai/skills/secret-word-*/SKILL.md"}})),
		responsesReply(usage(20, 7), fakemodel.Message("read")))
	resp = x.responses(t, key, responses.ResponseNewParams{
		Model: testModel,
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("use the skill")},
		Tools: []responses.ToolUnionParam{{OfShell: &responses.FunctionShellToolParam{
			Environment: responses.FunctionShellToolEnvironmentUnionParam{OfContainerAuto: &responses.ContainerAutoParam{
				Skills: []responses.ContainerAutoSkillUnionParam{{OfSkillReference: &responses.SkillReferenceParam{SkillID: made.ID}}},
			}},
		}}},
	})
	call, out = shellItems(t, resp, 0)
	assert.NotEqual(t, ct.ID, call.Environment.ContainerID, "container_auto: a container of its own")
	require.Len(t, out.Output, 1, "container_auto: outputs")
	assert.Contains(t, out.Output[0].Stdout, "The secret word is pelican.", "container_auto: the uploaded skill's SKILL.md")
	reqs = x.m.since(mark)
	require.NotEmpty(t, reqs, "container_auto: requests the model got")
	desc = gjson.GetBytes(reqs[0].Body, `tools.#(name=="shell").description`).String()
	assert.Regexp(t, `- secret-word: Knows the secret word\. \(path: /home/oai/skills/secret-word-[0-9a-f]{32}/SKILL\.md\)`, desc,
		"container_auto: the model is told the skill's name, description and path")

	// A later request naming the container_auto's container (container_reference) is told of
	// its skills as the first was, and its command reads the skill's SKILL.md there.
	auto := call.Environment.ContainerID
	mark = len(x.m.Requests())
	x.m.script(responsesPath,
		responsesReply(usage(10, 5), runShell("call_3", map[string]any{"commands": []string{"cat /home/oai/skills/secret-word-*/SKILL.md"}})),
		responsesReply(usage(20, 7), fakemodel.Message("read again")))
	resp = x.responses(t, key, responses.ResponseNewParams{
		Model: testModel,
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("use the skill again")},
		Tools: []responses.ToolUnionParam{{OfShell: &responses.FunctionShellToolParam{
			Environment: responses.FunctionShellToolEnvironmentUnionParam{OfContainerReference: &responses.ContainerReferenceParam{ContainerID: auto}},
		}}},
	})
	call, out = shellItems(t, resp, 0)
	assert.Equal(t, auto, call.Environment.ContainerID, "container_reference to the container_auto's container")
	require.Len(t, out.Output, 1, "container_reference to the container_auto's container: outputs")
	assert.Contains(t, out.Output[0].Stdout, "The secret word is pelican.", "container_reference to the container_auto's container: SKILL.md")
	reqs = x.m.since(mark)
	require.NotEmpty(t, reqs, "container_reference to the container_auto's container: requests the model got")
	desc = gjson.GetBytes(reqs[0].Body, `tools.#(name=="shell").description`).String()
	assert.Regexp(t, `- secret-word: Knows the secret word\. \(path: /home/oai/skills/secret-word-[0-9a-f]{32}/SKILL\.md\)`, desc,
		"container_reference to the container_auto's container: the model is told of its skills")

	_, err = c.Containers.New(ctx, openai.ContainerNewParams{Name: x.name("unknown"), Skills: []openai.ContainerNewParamsSkillUnion{
		{OfSkillReference: &responses.SkillReferenceParam{SkillID: "skill_unknown"}},
	}})
	e := apiError(t, err, "an unknown skill")
	assert.Equal(t, http.StatusBadRequest, e.StatusCode, "an unknown skill id")
	assert.Equal(t, "skills[0].skill_id", e.Param, "the param")
	assert.Equal(t, "invalid_request_error", e.Type, "the type")
}

// wordSkillZip is the secret-word skill as a zip made on a unix system: its script is
// executable (mode 0755 in the entry's external attributes), its SKILL.md is not.
func wordSkillZip(t *testing.T) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, f := range []struct {
		name, data string
		mode       fs.FileMode
	}{
		{"secret-word/SKILL.md", wordSkill, 0o644},
		{"secret-word/scripts/say.sh", "#!/bin/sh\necho said pelican\n", 0o755},
	} {
		h := &zip.FileHeader{Name: f.name, Method: zip.Deflate}
		h.SetMode(f.mode)
		w, err := zw.CreateHeader(h)
		require.NoError(t, err, "zip %s", f.name)
		_, err = w.Write([]byte(f.data))
		require.NoError(t, err, "zip %s", f.name)
	}
	require.NoError(t, zw.Close(), "zip")
	return buf.Bytes()
}

// scenarioSkillsMounted is testSkillsMounted as one of the fleet's conversations
// (fleetScenarios): each request on another gateway, the skills in Redis, the containers on
// the sandbox nodes.
func scenarioSkillsMounted(t *testing.T, x *scene) string {
	testSkillsMounted(t, x)
	return ""
}
