package messages

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/pkg/schema"
)

// TestRewriteContainerUpload: the container_upload blocks name the files copied into the
// container; the model reads a text block saying where each is, never the block itself.
func TestRewriteContainerUpload(t *testing.T) {
	body := `{"model":"claude-x","max_tokens":1024,"tools":[{"type":"code_execution_20250825","name":"code_execution"}],` +
		`"messages":[{"role":"user","content":[{"type":"text","text":"Analyze this CSV"},` +
		`{"type":"container_upload","file_id":"file_A","cache_control":{"type":"ephemeral"}}]},` +
		`{"role":"assistant","content":"Done."},` +
		`{"role":"user","content":[{"type":"container_upload","file_id":"file_B"},{"type":"container_upload","file_id":"file_A"},{"type":"text","text":"and these"}]}]}`
	x, err := Surface{}.NewExchange([]byte(body), schema.Options{})
	require.NoError(t, err, "new exchange")
	rq := x.Request()
	assert.Equal(t, []string{"file_A", "file_B"}, rq.FileIDs, "the distinct files, in order")
	out := gjson.ParseBytes(rq.Body)
	assert.NotContains(t, string(rq.Body), "container_upload\"", "the model never sees the block")
	first := out.Get("messages.0.content")
	require.Len(t, first.Array(), 2, "the blocks stay in place: %s", first.Raw)
	assert.Equal(t, "Analyze this CSV", first.Get("0.text").String(), "the client's text")
	assert.Equal(t, "text", first.Get("1.type").String(), "the upload became text")
	assert.Contains(t, first.Get("1.text").String(), "file_A", "naming the file")
	assert.Contains(t, first.Get("1.text").String(), "/mnt/data", "and where it is")
	assert.JSONEq(t, `{"type":"ephemeral"}`, first.Get("1.cache_control").Raw, "the cache breakpoint is kept")
	assert.Equal(t, "Done.", out.Get("messages.1.content").String(), "other turns as they were")
	assert.Len(t, out.Get("messages.2.content").Array(), 3, "the later turn's blocks")
}

func TestRewriteContainerUploadRefuses(t *testing.T) {
	tool := `"tools":[{"type":"code_execution_20250825","name":"code_execution"}]`
	tests := []struct {
		name string
		give string
		want string
	}{
		{"no file_id", `{` + tool + `,"messages":[{"role":"user","content":[{"type":"container_upload"}]}]}`, "messages.0.content.0.file_id"},
		{"file_id not a string", `{` + tool + `,"messages":[{"role":"user","content":[{"type":"container_upload","file_id":5}]}]}`, "messages.0.content.0.file_id"},
		{"in an assistant turn", `{` + tool + `,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"container_upload","file_id":"file_A"}]}]}`, "messages.1.content.0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Rewrite([]byte(tt.give), Options{})
			var re *RequestError
			require.ErrorAs(t, err, &re, "a client mistake: %s", tt.give)
			assert.Contains(t, re.Message, tt.want, "names the block")
		})
	}
}

// TestRewriteWithoutUploads: a body without container_upload blocks is kept byte for byte.
func TestRewriteWithoutUploads(t *testing.T) {
	body := `{"tools":[{"type":"code_execution_20250825","name":"code_execution"}],"messages":[{"role":"user","content":[{"type":"text","text":"a  b"}]}]}`
	rq, err := Rewrite([]byte(body), Options{})
	require.NoError(t, err, "rewrite")
	assert.Nil(t, rq.FileIDs, "no files")
	assert.Contains(t, string(rq.Body), `"messages":[{"role":"user","content":[{"type":"text","text":"a  b"}]}]`, "messages untouched")
}
