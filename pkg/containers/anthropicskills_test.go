package containers

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/pkg/skills"
)

// askFixture is a Handler with a skills store whose identity is the x-api-key (Anthropic's
// SDKs) or the Authorization bearer (OpenAI's), the same key either way.
func askFixture(t *testing.T) *fixture {
	t.Helper()
	return newFixture(t, Config{Skills: skills.NewMemory(skills.MemoryConfig{}), Identify: func(r *http.Request) (string, error) {
		if k := r.Header.Get("x-api-key"); k != "" {
			return k, nil
		}
		return strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "), nil
	}})
}

func askClient(f *fixture, key string) anthropic.Client {
	return anthropic.NewClient(option.WithBaseURL(f.srv.URL+"/"), option.WithAPIKey(key), option.WithMaxRetries(0),
		option.WithHTTPClient(f.srv.Client()))
}

func askFiles(name, desc string) []io.Reader {
	return []io.Reader{
		anthropic.File(strings.NewReader(skillMD(name, desc)), name+"/SKILL.md", "text/markdown"),
		anthropic.File(strings.NewReader("bird"), name+"/word.txt", "text/plain"),
	}
}

// TestAnthropicSkillsWithTheSDK drives every call of Anthropic's Skills API with
// anthropic-sdk-go, and checks the skill is the one OpenAI's shape shows for the same key.
func TestAnthropicSkillsWithTheSDK(t *testing.T) {
	f := askFixture(t)
	ctx := t.Context()
	c := askClient(f, "sk-a")

	s, err := c.Skills.New(ctx, anthropic.SkillNewParams{Files: askFiles("word", "Knows the word.")})
	require.NoError(t, err, "create")
	assert.True(t, strings.HasPrefix(s.ID, "skill_"), "id %q", s.ID)
	assert.Equal(t, "skill", string(s.Type))
	assert.Equal(t, "word", s.DisplayName, "display_name from SKILL.md")
	first := s.LatestVersionID
	assertEpochID(t, first, "the first version's id")
	assert.Equal(t, anthropic.SkillSourceType("custom"), s.Source.Type)
	assert.False(t, s.CreatedAt.IsZero(), "created_at")
	assert.Empty(t, s.JSON.ExtraFields, "no field the SDK does not know")

	got, err := c.Skills.Get(ctx, s.ID, anthropic.SkillGetParams{})
	require.NoError(t, err, "retrieve")
	assert.Equal(t, s.ID, got.ID)

	v2, err := c.Skills.Versions.New(ctx, s.ID, anthropic.SkillVersionNewParams{Files: askFiles("word", "Knows the new word.")})
	require.NoError(t, err, "create a version")
	assertEpochID(t, v2.ID, "the second version's id")
	assert.Greater(t, epochOf(v2.ID), epochOf(first), "a later version, a later id")
	assert.Equal(t, "skill_version", string(v2.Type))
	assert.Equal(t, s.ID, v2.SkillID)
	assert.Equal(t, "word", v2.Name)
	assert.Equal(t, "Knows the new word.", v2.Description)
	assert.Empty(t, v2.JSON.ExtraFields)

	got, err = c.Skills.Get(ctx, s.ID, anthropic.SkillGetParams{})
	require.NoError(t, err)
	assert.Equal(t, v2.ID, got.LatestVersionID)
	assert.False(t, got.UpdatedAt.Before(got.CreatedAt), "updated_at")

	v, err := c.Skills.Versions.Get(ctx, first, anthropic.SkillVersionGetParams{SkillID: s.ID})
	require.NoError(t, err, "retrieve a version by its id")
	assert.Equal(t, first, v.ID)
	assert.Equal(t, "Knows the word.", v.Description)
	v, err = c.Skills.Versions.Get(ctx, "1", anthropic.SkillVersionGetParams{SkillID: s.ID})
	require.NoError(t, err, "retrieve a version by its number in OpenAI's shape")
	assert.Equal(t, first, v.ID)
	v, err = c.Skills.Versions.Get(ctx, "latest", anthropic.SkillVersionGetParams{SkillID: s.ID})
	require.NoError(t, err, "retrieve the latest version")
	assert.Equal(t, v2.ID, v.ID)

	vs, err := c.Skills.Versions.List(ctx, s.ID, anthropic.SkillVersionListParams{})
	require.NoError(t, err, "list versions")
	require.Len(t, vs.Data, 2)
	assert.Equal(t, []string{v2.ID, first}, []string{vs.Data[0].ID, vs.Data[1].ID}, "newest first")
	assert.Empty(t, vs.NextPage)

	// The same skill through OpenAI's shape, for the same key: the version made here is the
	// default, so both shapes mount the same one.
	o := f.client("sk-a")
	os, err := o.Skills.Get(ctx, s.ID)
	require.NoError(t, err, "the skill in OpenAI's shape")
	assert.Equal(t, "2", os.DefaultVersion)
	assert.Equal(t, "Knows the new word.", os.Description)

	// Deleting the latest version makes the one before it the latest and the default.
	dv, err := c.Skills.Versions.Delete(ctx, v2.ID, anthropic.SkillVersionDeleteParams{SkillID: s.ID})
	require.NoError(t, err, "delete a version")
	assert.Equal(t, v2.ID, dv.ID)
	assert.Equal(t, "skill_version_deleted", string(dv.Type))
	got, err = c.Skills.Get(ctx, s.ID, anthropic.SkillGetParams{})
	require.NoError(t, err)
	assert.Equal(t, first, got.LatestVersionID)
	os, err = o.Skills.Get(ctx, s.ID)
	require.NoError(t, err)
	assert.Equal(t, "1", os.DefaultVersion)

	// Another key sees none of it.
	b := askClient(f, "sk-b")
	_, err = b.Skills.Get(ctx, s.ID, anthropic.SkillGetParams{})
	status, typ := anthropicStatus(t, err, "another key's skill")
	assert.Equal(t, http.StatusNotFound, status)
	assert.Equal(t, "not_found_error", typ)
	bl, err := b.Skills.List(ctx, anthropic.SkillListParams{})
	require.NoError(t, err)
	assert.Empty(t, bl.Data)

	del, err := c.Skills.Delete(ctx, s.ID, anthropic.SkillDeleteParams{})
	require.NoError(t, err, "delete")
	assert.Equal(t, s.ID, del.ID)
	assert.Equal(t, "skill_deleted", string(del.Type))
	_, err = c.Skills.Get(ctx, s.ID, anthropic.SkillGetParams{})
	status, typ = anthropicStatus(t, err, "a deleted skill")
	assert.Equal(t, http.StatusNotFound, status)
	assert.Equal(t, "not_found_error", typ)
}

// TestAnthropicSkillsList pages the list with page and limit, the newest first, and filters by
// source.
func TestAnthropicSkillsList(t *testing.T) {
	f := askFixture(t)
	ctx := t.Context()
	c := askClient(f, "sk-a")
	var ids []string
	for i := range 5 {
		s, err := c.Skills.New(ctx, anthropic.SkillNewParams{Files: askFiles("s"+strconv.Itoa(i), "One of five.")})
		require.NoError(t, err)
		ids = append(ids, s.ID)
	}
	var seen []string
	p, err := c.Skills.List(ctx, anthropic.SkillListParams{Limit: anthropic.Int(2)})
	require.NoError(t, err)
	for pages := 0; p != nil; pages++ {
		require.Less(t, pages, 5, "the pages end")
		require.LessOrEqual(t, len(p.Data), 2)
		for _, s := range p.Data {
			seen = append(seen, s.ID)
		}
		p, err = p.GetNextPage()
		require.NoError(t, err)
	}
	assert.ElementsMatch(t, ids, seen, "every skill once")
	assert.Len(t, seen, 5)

	all, err := c.Skills.List(ctx, anthropic.SkillListParams{Source: anthropic.String("custom")})
	require.NoError(t, err)
	assert.Len(t, all.Data, 5)
	none, err := c.Skills.List(ctx, anthropic.SkillListParams{Source: anthropic.String("anthropic")})
	require.NoError(t, err)
	assert.Empty(t, none.Data)

	_, err = c.Skills.List(ctx, anthropic.SkillListParams{Limit: anthropic.Int(1001)})
	status, typ := anthropicStatus(t, err, "limit past 1000")
	assert.Equal(t, http.StatusBadRequest, status)
	assert.Equal(t, "invalid_request_error", typ)
}

// TestAnthropicSkillsErrors: a refused bundle, a display_name too long or of two lines, a route
// Anthropic's API lacks, and a missing key answer in Anthropic's error shape; without
// anthropic-version the same paths keep OpenAI's shapes.
func TestAnthropicSkillsErrors(t *testing.T) {
	f := askFixture(t)
	ctx := t.Context()
	c := askClient(f, "sk-a")

	_, err := c.Skills.New(ctx, anthropic.SkillNewParams{Files: []io.Reader{
		anthropic.File(strings.NewReader("no front matter"), "x/README.md", "text/markdown")}})
	status, typ := anthropicStatus(t, err, "no SKILL.md")
	assert.Equal(t, http.StatusBadRequest, status)
	assert.Equal(t, "invalid_request_error", typ)

	for _, bad := range []string{strings.Repeat("é", skills.MaxDisplayName+1), "two\nlines"} {
		_, err = c.Skills.New(ctx, anthropic.SkillNewParams{Files: askFiles("word", "W."), DisplayName: anthropic.String(bad)})
		status, typ = anthropicStatus(t, err, "display_name "+bad)
		assert.Equal(t, http.StatusBadRequest, status, "display_name %q", bad)
		assert.Equal(t, "invalid_request_error", typ, "display_name %q", bad)
	}
	s, err := c.Skills.New(ctx, anthropic.SkillNewParams{Files: askFiles("word", "W.")})
	require.NoError(t, err, "create")

	_, err = c.Skills.Versions.New(ctx, "skill_none", anthropic.SkillVersionNewParams{Files: askFiles("word", "W.")})
	status, typ = anthropicStatus(t, err, "a version of no skill")
	assert.Equal(t, http.StatusNotFound, status)
	assert.Equal(t, "not_found_error", typ)

	get := func(path string, anthropicVersion bool, key string) (int, string) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.srv.URL+path, nil)
		require.NoError(t, err)
		if anthropicVersion {
			req.Header.Set("anthropic-version", "2023-06-01")
		}
		if key != "" {
			req.Header.Set("x-api-key", key)
		}
		res, err := f.srv.Client().Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		body, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		return res.StatusCode, string(body)
	}
	status, body := get("/v1/skills/"+s.ID+"/content", true, "sk-a")
	assert.Equal(t, http.StatusNotFound, status, "content is OpenAI's route only")
	assert.Equal(t, "error", gjson.Get(body, "type").String(), body)
	assert.Equal(t, "not_found_error", gjson.Get(body, "error.type").String(), body)

	status, body = get("/v1/skills", true, "")
	assert.Equal(t, http.StatusUnauthorized, status)
	assert.Equal(t, "authentication_error", gjson.Get(body, "error.type").String(), body)

	// Without the header: OpenAI's shapes on the same paths.
	status, body = get("/v1/skills/"+s.ID, false, "sk-a")
	assert.Equal(t, http.StatusOK, status, body)
	assert.Equal(t, "skill", gjson.Get(body, "object").String(), body)
	assert.Equal(t, "1", gjson.Get(body, "default_version").String(), body)
	status, body = get("/v1/skills/"+s.ID+"/content", false, "sk-a")
	assert.Equal(t, http.StatusOK, status, body)

	// A skill made in OpenAI's shape is listed in Anthropic's.
	o := f.client("sk-a")
	os, err := o.Skills.New(ctx, openai.SkillNewParams{Files: zipFile(skillZip(t, map[string]string{"z/SKILL.md": skillMD("zed", "Zipped.")}))})
	require.NoError(t, err)
	as, err := c.Skills.Get(ctx, os.ID, anthropic.SkillGetParams{})
	require.NoError(t, err)
	assert.Equal(t, "zed", as.DisplayName)
}

// TestAnthropicSkillsDisplayName: a skill created with a display_name of its own keeps it
// (create, retrieve, list; a later version changes it not); one created without is named after
// its SKILL.md then, and keeps that name past a version of another; one of 255 characters is
// taken.
func TestAnthropicSkillsDisplayName(t *testing.T) {
	f := askFixture(t)
	ctx := t.Context()
	c := askClient(f, "sk-a")
	s, err := c.Skills.New(ctx, anthropic.SkillNewParams{Files: askFiles("word", "W."), DisplayName: anthropic.String("  Word Finder ")})
	require.NoError(t, err, "create with a display_name")
	assert.Equal(t, "Word Finder", s.DisplayName, "the label, trimmed")
	_, err = c.Skills.Versions.New(ctx, s.ID, anthropic.SkillVersionNewParams{Files: askFiles("word", "W2.")})
	require.NoError(t, err, "a new version")
	got, err := c.Skills.Get(ctx, s.ID, anthropic.SkillGetParams{})
	require.NoError(t, err, "retrieve")
	assert.Equal(t, "Word Finder", got.DisplayName, "kept past a new version")
	l, err := c.Skills.List(ctx, anthropic.SkillListParams{})
	require.NoError(t, err, "list")
	require.Len(t, l.Data, 1)
	assert.Equal(t, "Word Finder", l.Data[0].DisplayName, "listed")

	plain, err := c.Skills.New(ctx, anthropic.SkillNewParams{Files: askFiles("word", "W.")})
	require.NoError(t, err, "create without a display_name")
	assert.Equal(t, "word", plain.DisplayName, "SKILL.md's name at creation")
	_, err = c.Skills.Versions.New(ctx, plain.ID, anthropic.SkillVersionNewParams{Files: askFiles("renamed", "R.")})
	require.NoError(t, err, "a new version of another name")
	got, err = c.Skills.Get(ctx, plain.ID, anthropic.SkillGetParams{})
	require.NoError(t, err, "retrieve")
	assert.Equal(t, "word", got.DisplayName, "fixed at creation: a later version's name changes it not")

	long := strings.Repeat("é", skills.MaxDisplayName)
	s, err = c.Skills.New(ctx, anthropic.SkillNewParams{Files: askFiles("other", "O."), DisplayName: anthropic.String(long)})
	require.NoError(t, err, "a display_name of 255 characters")
	assert.Equal(t, long, s.DisplayName)
}

// assertEpochID checks that id is shaped as Anthropic's skill version ids: the microseconds
// since the Unix epoch when the version was made (16 digits today), within the last hour.
func assertEpochID(t *testing.T, id, what string) {
	t.Helper()
	assert.Regexp(t, `^[0-9]{16}$`, id, what)
	made := time.UnixMicro(epochOf(id))
	assert.WithinDuration(t, time.Now(), made, time.Hour, "%s: %s is a recent time", what, id)
}

func epochOf(id string) int64 {
	n, _ := strconv.ParseInt(id, 10, 64)
	return n
}
