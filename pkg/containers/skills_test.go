package containers

import (
	"archive/zip"
	"bytes"
	"context"
	"io"
	"io/fs"
	"mime/multipart"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/pkg/skills"
)

func skillZip(t *testing.T, files map[string]string, symlinks ...string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for name, data := range files {
		w, err := zw.Create(name)
		require.NoError(t, err)
		_, err = w.Write([]byte(data))
		require.NoError(t, err)
	}
	for _, name := range symlinks {
		h := &zip.FileHeader{Name: name}
		h.SetMode(fs.ModeSymlink | 0o777)
		w, err := zw.CreateHeader(h)
		require.NoError(t, err)
		_, err = w.Write([]byte("/etc/passwd"))
		require.NoError(t, err)
	}
	require.NoError(t, zw.Close())
	return buf.Bytes()
}

func skillMD(name, desc string) string {
	return "---\nname: " + name + "\ndescription: " + desc + "\n---\nSay the word.\n"
}

func zipFile(data []byte) openai.SkillNewParamsFilesUnion {
	return openai.SkillNewParamsFilesUnion{OfFile: openai.File(bytes.NewReader(data), "skill.zip", "application/zip")}
}

// TestSkillsWithTheSDK drives every call of the Skills API with openai-go.
func TestSkillsWithTheSDK(t *testing.T) {
	f := newFixture(t, Config{Skills: skills.NewMemory(skills.MemoryConfig{})})
	ctx := context.Background()
	c := f.client("alice")

	s, err := c.Skills.New(ctx, openai.SkillNewParams{Files: zipFile(skillZip(t, map[string]string{
		"word/SKILL.md": skillMD("word", "Knows the word."), "word/word.txt": "bird",
	}))})
	require.NoError(t, err)
	assert.Equal(t, "word", s.Name)
	assert.Equal(t, "Knows the word.", s.Description)
	assert.Equal(t, "1", s.DefaultVersion)
	assert.Equal(t, "1", s.LatestVersion)

	// A folder upload: one part per file, named <folder>/<path>.
	s2, err := c.Skills.New(ctx, openai.SkillNewParams{Files: openai.SkillNewParamsFilesUnion{OfFileArray: []io.Reader{
		openai.File(strings.NewReader(skillMD("other", "Another.")), "other/SKILL.md", "text/markdown"),
		openai.File(strings.NewReader("x"), "other/sub/x.txt", "text/plain"),
	}}})
	require.NoError(t, err)
	assert.Equal(t, "other", s2.Name)

	v2, err := c.Skills.Versions.New(ctx, s.ID, openai.SkillVersionNewParams{
		Files:   openai.SkillVersionNewParamsFilesUnion{OfFile: openai.File(bytes.NewReader(skillZip(t, map[string]string{"word/SKILL.md": skillMD("word", "Knows the new word."), "word/word.txt": "plane"})), "v2.zip", "application/zip")},
		Default: openai.Bool(true),
	})
	require.NoError(t, err)
	assert.Equal(t, "2", v2.Version)
	assert.Equal(t, s.ID, v2.SkillID)

	got, err := c.Skills.Get(ctx, s.ID)
	require.NoError(t, err)
	assert.Equal(t, "2", got.DefaultVersion)
	assert.Equal(t, "Knows the new word.", got.Description)

	got, err = c.Skills.Update(ctx, s.ID, openai.SkillUpdateParams{DefaultVersion: "1"})
	require.NoError(t, err)
	assert.Equal(t, "1", got.DefaultVersion)

	list, err := c.Skills.List(ctx, openai.SkillListParams{})
	require.NoError(t, err)
	assert.Len(t, list.Data, 2)
	vlist, err := c.Skills.Versions.List(ctx, s.ID, openai.SkillVersionListParams{Order: openai.SkillVersionListParamsOrderAsc})
	require.NoError(t, err)
	require.Len(t, vlist.Data, 2)
	assert.Equal(t, []string{"1", "2"}, []string{vlist.Data[0].Version, vlist.Data[1].Version})

	res, err := c.Skills.Content.Get(ctx, s.ID)
	require.NoError(t, err)
	content, err := io.ReadAll(res.Body)
	require.NoError(t, res.Body.Close())
	require.NoError(t, err)
	b, err := skills.ReadZip(bytes.NewReader(content), skills.Limits{})
	require.NoError(t, err, "the content is a skill zip")
	assert.Equal(t, "Knows the word.", b.Description, "the default version's")
	res, err = c.Skills.Versions.Content.Get(ctx, s.ID, "2")
	require.NoError(t, err)
	content, err = io.ReadAll(res.Body)
	require.NoError(t, res.Body.Close())
	require.NoError(t, err)
	b, err = skills.ReadZip(bytes.NewReader(content), skills.Limits{})
	require.NoError(t, err)
	var word string
	for _, f := range b.Files {
		if f.Path == "word.txt" {
			word = string(f.Data)
		}
	}
	assert.Equal(t, "plane", word, "version 2's file")

	// The default version stays; another goes.
	_, err = c.Skills.Versions.Delete(ctx, s.ID, "1")
	assert.Equal(t, 400, apiStatus(t, err))
	dv, err := c.Skills.Versions.Delete(ctx, s.ID, "2")
	require.NoError(t, err)
	assert.True(t, dv.Deleted)
	assert.Equal(t, "2", dv.Version)

	// Another identity sees nothing of alice's.
	bob := f.client("bob")
	_, err = bob.Skills.Get(ctx, s.ID)
	assert.Equal(t, 404, apiStatus(t, err))
	_, err = bob.Skills.Content.Get(ctx, s.ID)
	assert.Equal(t, 404, apiStatus(t, err))
	_, err = bob.Skills.Delete(ctx, s.ID)
	assert.Equal(t, 404, apiStatus(t, err))
	blist, err := bob.Skills.List(ctx, openai.SkillListParams{})
	require.NoError(t, err)
	assert.Empty(t, blist.Data)

	del, err := c.Skills.Delete(ctx, s.ID)
	require.NoError(t, err)
	assert.True(t, del.Deleted)
	_, err = c.Skills.Get(ctx, s.ID)
	assert.Equal(t, 404, apiStatus(t, err))
}

func TestSkillsRefuseHostileBundles(t *testing.T) {
	f := newFixture(t, Config{Skills: skills.NewMemory(skills.MemoryConfig{}), SkillLimits: skills.Limits{MaxFileBytes: 1 << 20}})
	md := skillMD("s", "d")
	tests := []struct {
		name       string
		give       []byte
		wantStatus int
		want       string
	}{
		{name: "traversal", give: skillZip(t, map[string]string{"s/SKILL.md": md, "s/../../../etc/cron.d/x": "x"}), wantStatus: 400, want: "climbs out"},
		{name: "absolute", give: skillZip(t, map[string]string{"s/SKILL.md": md, "/etc/x": "x"}), wantStatus: 400, want: "absolute"},
		{name: "symlink", give: skillZip(t, map[string]string{"s/SKILL.md": md}, "s/passwd"), wantStatus: 400, want: "symbolic link"},
		{name: "bomb", give: skillZip(t, map[string]string{"s/SKILL.md": md, "s/zeros": strings.Repeat("\x00", 3<<20)}), wantStatus: 413, want: "too large"},
		{name: "oversized file", give: skillZip(t, map[string]string{"s/SKILL.md": md, "s/big": strings.Repeat("ab", 1<<20)}), wantStatus: 413, want: "too large"},
		{name: "no SKILL.md", give: skillZip(t, map[string]string{"s/README.md": md}), wantStatus: 400, want: "no SKILL.md"},
		{name: "not a zip", give: []byte("PK\x03\x04garbage"), wantStatus: 400, want: "not a valid zip"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := f.client("alice")
			_, err := c.Skills.New(context.Background(), openai.SkillNewParams{Files: zipFile(tt.give)})
			var apiErr *openai.Error
			require.ErrorAs(t, err, &apiErr, tt.name)
			assert.Equal(t, tt.wantStatus, apiErr.StatusCode, tt.name)
			assert.Contains(t, apiErr.Message, tt.want, tt.name)
			assert.Equal(t, "files", apiErr.Param, tt.name)
		})
	}
	c := f.client("alice")
	list, err := c.Skills.List(context.Background(), openai.SkillListParams{})
	require.NoError(t, err)
	assert.Empty(t, list.Data, "nothing refused was kept")
}

func TestSkillsNotServedWithoutAStore(t *testing.T) {
	f := newFixture(t, Config{})
	c := f.client("alice")
	_, err := c.Skills.List(context.Background(), openai.SkillListParams{})
	assert.Equal(t, 404, apiStatus(t, err))
}

// multipartBody builds a multipart body of parts (field name, file name or "" for a plain
// field, content).
func multipartBody(t *testing.T, parts ...[3]string) (string, string) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for _, p := range parts {
		var w io.Writer
		var err error
		if p[1] == "" {
			w, err = mw.CreateFormField(p[0])
		} else {
			w, err = mw.CreateFormFile(p[0], p[1])
		}
		require.NoError(t, err)
		_, err = io.WriteString(w, p[2])
		require.NoError(t, err)
	}
	require.NoError(t, mw.Close())
	return mw.FormDataContentType(), buf.String()
}

func TestSkillsRefuseBodies(t *testing.T) {
	f := newFixture(t, Config{Skills: skills.NewMemory(skills.MemoryConfig{})})
	zipped := string(skillZip(t, map[string]string{"s/SKILL.md": skillMD("s", "d")}))
	tests := []struct {
		name       string
		give       [][3]string
		wantStatus int
		wantParam  string
		want       string
	}{
		{name: "no files", give: [][3]string{{"default", "", "true"}}, wantStatus: 400, wantParam: "files", want: "Missing required parameter"},
		{name: "a zip and files", give: [][3]string{{"files", "s.zip", zipped}, {"files", "s/x.txt", "x"}}, wantStatus: 400, wantParam: "files", want: "not both"},
		{name: "files and a zip", give: [][3]string{{"files[]", "s/SKILL.md", skillMD("s", "d")}, {"files[]", "t.zip", zipped}}, wantStatus: 400, wantParam: "files", want: "no SKILL.md at its top"},
		{name: "a file name climbing out", give: [][3]string{{"files", "s/SKILL.md", skillMD("s", "d")}, {"files", "s/../../x", "x"}}, wantStatus: 400, wantParam: "files", want: "climbs out"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ct, body := multipartBody(t, tt.give...)
			status, out := post(t, f, "alice", "/v1/skills", ct, body)
			assert.Equal(t, tt.wantStatus, status, "%s: %s", tt.name, out)
			assert.Equal(t, tt.wantParam, gjson.Get(out, "error.param").String(), "%s: %s", tt.name, out)
			assert.Contains(t, gjson.Get(out, "error.message").String(), tt.want, "%s: %s", tt.name, out)
		})
	}
	status, out := post(t, f, "alice", "/v1/skills", "application/json", `{"files":"x"}`)
	assert.Equal(t, 400, status, "a JSON body: %s", out)

	// A version's default field must be a bool.
	ct, body := multipartBody(t, [3]string{"files", "s.zip", zipped})
	status, out = post(t, f, "alice", "/v1/skills", ct, body)
	require.Equal(t, 200, status, out)
	id := gjson.Get(out, "id").String()
	ct, body = multipartBody(t, [3]string{"files", "s.zip", zipped}, [3]string{"default", "", "maybe"})
	status, out = post(t, f, "alice", "/v1/skills/"+id+"/versions", ct, body)
	assert.Equal(t, 400, status, out)
	assert.Equal(t, "default", gjson.Get(out, "error.param").String(), out)
	// A version of a skill that is not there is a 404.
	ct, body = multipartBody(t, [3]string{"files", "s.zip", zipped})
	status, out = post(t, f, "alice", "/v1/skills/skill_nope/versions", ct, body)
	assert.Equal(t, 404, status, out)
}

// TestSkillsUploadsBounded: past MaxSkillUploads in progress on the server, one more is a 429,
// and a finished upload frees its place.
func TestSkillsUploadsBounded(t *testing.T) {
	f := newFixture(t, Config{Skills: skills.NewMemory(skills.MemoryConfig{}), MaxSkillUploads: 1})
	zipped := string(skillZip(t, map[string]string{"s/SKILL.md": skillMD("s", "d")}))
	ct, body := multipartBody(t, [3]string{"files", "s.zip", zipped})

	// An upload that stalls holds the one place until it ends.
	pr, pw := io.Pipe()
	req, err := http.NewRequest(http.MethodPost, f.srv.URL+"/v1/skills", pr)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer bob")
	req.Header.Set("Content-Type", ct)
	done := make(chan int, 1)
	go func() {
		resp, err := f.srv.Client().Do(req)
		if err != nil {
			done <- 0
			return
		}
		_ = resp.Body.Close()
		done <- resp.StatusCode
	}()
	_, err = io.WriteString(pw, body[:10])
	require.NoError(t, err)
	require.Eventually(t, func() bool { return f.handler.skills.uploading.Load() == 1 }, 5*time.Second, 5*time.Millisecond, "the stalled upload is counted")

	status, out := post(t, f, "alice", "/v1/skills", ct, body)
	assert.Equal(t, http.StatusTooManyRequests, status, out)
	assert.Equal(t, "too_many_uploads", gjson.Get(out, "error.code").String(), out)

	_, err = io.WriteString(pw, body[10:])
	require.NoError(t, err)
	require.NoError(t, pw.Close())
	assert.Equal(t, 200, <-done, "the stalled upload finishes")
	status, out = post(t, f, "alice", "/v1/skills", ct, body)
	assert.Equal(t, 200, status, "its place is free again: %s", out)
}
