package containers

import (
	"bytes"
	"mime/multipart"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
)

// TestAttackUploadPastTheBodyLimitIs413: a multipart body whose file part is within
// MaxUploadBytes but which, with an ignored part before it, passes the body's limit
// (MaxUploadBytes + 1 MiB of framing) is a client mistake: 413 file_too_large, not a 500
// server_error logged as a failure of the server.
func TestAttackUploadPastTheBodyLimitIs413(t *testing.T) {
	f := newFixture(t, Config{MaxUploadBytes: 1000})
	c, err := f.store.Create(t.Context(), "Bearer sk-a", NewContainer{Name: "c"})
	require.NoError(t, err, "create")
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	junk, err := mw.CreateFormField("junk")
	require.NoError(t, err, "junk part")
	_, _ = junk.Write(bytes.Repeat([]byte("j"), 1<<20+500))
	part, err := mw.CreateFormFile("file", "data.csv")
	require.NoError(t, err, "file part")
	_, _ = part.Write(bytes.Repeat([]byte("f"), 900)) // within MaxUploadBytes
	require.NoError(t, mw.Close(), "close multipart")
	status, out := post(t, f, "sk-a", "/v1/containers/"+c.ID+"/files", mw.FormDataContentType(), body.String())
	assert.Equal(t, http.StatusRequestEntityTooLarge, status, "status: %s", out)
	assert.Equal(t, "file_too_large", gjson.Get(out, "error.code").String(), "code: %s", out)
}
