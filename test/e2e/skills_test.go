package e2e

import (
	"archive/zip"
	"bytes"
	"io"
	"io/fs"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Issue 30 end to end: the Skills API (/v1/skills) served by codeinterp through Envoy (its own
// route, no ext_proc), with openai-go: skills from a zip and from a folder's files, versions,
// content, hostile zips refused with OpenAI's error shape, and another API key seeing nothing.
func TestSkillsAPI(t *testing.T) {
	env := NewEnv(t, EnvOptions{})
	env.Fronts(t, func(t *testing.T, s *Stack) {
		t.Run("skills, versions and content", func(t *testing.T) { testSkillsLifecycle(t, s) })
		t.Run("hostile zips", func(t *testing.T) { testSkillsHostile(t, s) })
	})
}

// skillZipOf zips files (path → content); the paths in symlinks are symbolic links.
func skillZipOf(t *testing.T, files map[string]string, symlinks ...string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for name, data := range files {
		w, err := zw.Create(name)
		require.NoError(t, err, "zip %s", name)
		_, err = w.Write([]byte(data))
		require.NoError(t, err, "zip %s", name)
	}
	for _, name := range symlinks {
		h := &zip.FileHeader{Name: name}
		h.SetMode(fs.ModeSymlink | 0o777)
		w, err := zw.CreateHeader(h)
		require.NoError(t, err, "zip %s", name)
		_, err = w.Write([]byte("/etc/passwd"))
		require.NoError(t, err, "zip %s", name)
	}
	require.NoError(t, zw.Close(), "zip")
	return buf.Bytes()
}

const wordSkill = "---\nname: secret-word\ndescription: Knows the secret word.\n---\nThe secret word is pelican.\n"

func testSkillsLifecycle(t *testing.T, s *Stack) {
	ctx := t.Context()
	key, otherKey := "sk-skills-"+s.Front.Name(), "sk-skills-other-"+s.Front.Name()
	s.Model.AddKey(key)
	s.Model.AddKey(otherKey)
	c, other := s.Client(key), s.Client(otherKey)

	made, err := c.Skills.New(ctx, openai.SkillNewParams{Files: openai.SkillNewParamsFilesUnion{
		OfFile: openai.File(bytes.NewReader(skillZipOf(t, map[string]string{"secret-word/SKILL.md": wordSkill, "secret-word/notes.txt": "n"})), "secret-word.zip", "application/zip"),
	}})
	require.NoError(t, err, "create from a zip")
	assert.Equal(t, "secret-word", made.Name, "name from the front matter")
	assert.Equal(t, "Knows the secret word.", made.Description, "description from the front matter")
	assert.Equal(t, "1", made.DefaultVersion, "default_version")

	folder, err := c.Skills.New(ctx, openai.SkillNewParams{Files: openai.SkillNewParamsFilesUnion{OfFileArray: []io.Reader{
		openai.File(strings.NewReader("---\nname: folder-skill\ndescription: From files.\n---\n"), "folder-skill/SKILL.md", "text/markdown"),
		openai.File(strings.NewReader("print(1)\n"), "folder-skill/scripts/run.py", "text/x-python"),
	}}})
	require.NoError(t, err, "create from a folder's files")
	assert.Equal(t, "folder-skill", folder.Name, "name of the folder upload")

	v2, err := c.Skills.Versions.New(ctx, made.ID, openai.SkillVersionNewParams{
		Files: openai.SkillVersionNewParamsFilesUnion{OfFile: openai.File(bytes.NewReader(skillZipOf(t, map[string]string{
			"secret-word/SKILL.md": strings.Replace(wordSkill, "pelican", "heron", 1)})), "v2.zip", "application/zip")},
		Default: openai.Bool(true),
	})
	require.NoError(t, err, "a second version")
	assert.Equal(t, "2", v2.Version, "version number")
	got, err := c.Skills.Get(ctx, made.ID)
	require.NoError(t, err, "retrieve")
	assert.Equal(t, "2", got.DefaultVersion, "the new default")
	assert.Equal(t, "2", got.LatestVersion, "latest")

	resp, err := c.Skills.Content.Get(ctx, made.ID)
	require.NoError(t, err, "content")
	content, err := io.ReadAll(resp.Body)
	require.NoError(t, resp.Body.Close(), "close the content")
	require.NoError(t, err, "read the content")
	zr, err := zip.NewReader(bytes.NewReader(content), int64(len(content)))
	require.NoError(t, err, "the content is a zip")
	require.Len(t, zr.File, 1, "version 2's files")
	assert.Equal(t, "secret-word/SKILL.md", zr.File[0].Name, "one folder with SKILL.md")

	// Through the profile route's prefix too.
	analyst := s.ClientAt("/analyst/v1/", key)
	vs, err := analyst.Skills.Versions.List(ctx, made.ID, openai.SkillVersionListParams{})
	require.NoError(t, err, "list versions through /analyst/v1/")
	assert.Len(t, vs.Data, 2, "versions")

	// Another key sees nothing of it.
	list, err := other.Skills.List(ctx, openai.SkillListParams{})
	require.NoError(t, err, "list as another key")
	assert.Empty(t, list.Data, "another key lists none")
	_, err = other.Skills.Get(ctx, made.ID)
	assert.Equal(t, http.StatusNotFound, apiError(t, err, "retrieve as another key").StatusCode, "a 404, never a 403")
	_, err = other.Skills.Content.Get(ctx, made.ID)
	assert.Equal(t, http.StatusNotFound, apiError(t, err, "content as another key").StatusCode, "content as another key")
	_, err = other.Skills.Delete(ctx, made.ID)
	assert.Equal(t, http.StatusNotFound, apiError(t, err, "delete as another key").StatusCode, "delete as another key")

	for _, id := range []string{made.ID, folder.ID} {
		del, err := c.Skills.Delete(ctx, id)
		require.NoError(t, err, "delete %s", id)
		assert.True(t, del.Deleted, "deleted %s", id)
	}
}

func testSkillsHostile(t *testing.T, s *Stack) {
	ctx := t.Context()
	key := "sk-skills-hostile-" + s.Front.Name()
	s.Model.AddKey(key)
	c := s.Client(key)
	md := "---\nname: h\ndescription: d\n---\n"
	tests := []struct {
		name       string
		give       []byte
		wantStatus int
		want       string
	}{
		{name: "traversal", give: skillZipOf(t, map[string]string{"h/SKILL.md": md, "h/../../../../etc/cron.d/x": "x"}), wantStatus: 400, want: "climbs out"},
		{name: "absolute", give: skillZipOf(t, map[string]string{"h/SKILL.md": md, "/etc/x": "x"}), wantStatus: 400, want: "absolute"},
		{name: "symlink", give: skillZipOf(t, map[string]string{"h/SKILL.md": md}, "h/passwd"), wantStatus: 400, want: "symbolic link"},
		{name: "bomb", give: skillZipOf(t, map[string]string{"h/SKILL.md": md, "h/zeros": strings.Repeat("\x00", 8<<20)}), wantStatus: 400, want: "zip bombs"},
		{name: "a file past 25 MB", give: skillZipOf(t, map[string]string{"h/SKILL.md": md, "h/big": strings.Repeat("\x00", 26<<20)}), wantStatus: 413, want: "too large"},
		{name: "no SKILL.md", give: skillZipOf(t, map[string]string{"h/README.md": md}), wantStatus: 400, want: "no SKILL.md"},
	}
	for _, tt := range tests {
		_, err := c.Skills.New(ctx, openai.SkillNewParams{Files: openai.SkillNewParamsFilesUnion{OfFile: openai.File(bytes.NewReader(tt.give), "h.zip", "application/zip")}})
		e := apiError(t, err, tt.name)
		assert.Equal(t, tt.wantStatus, e.StatusCode, "%s: status", tt.name)
		assert.Contains(t, e.Message, tt.want, "%s: message", tt.name)
		assert.Equal(t, "files", e.Param, "%s: param", tt.name)
		assert.Equal(t, "invalid_request_error", e.Type, "%s: OpenAI's error shape", tt.name)
	}
	list, err := c.Skills.List(ctx, openai.SkillListParams{})
	require.NoError(t, err, "list")
	assert.Empty(t, list.Data, "nothing refused was kept")
}
