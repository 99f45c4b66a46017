package app

import (
	"bytes"
	"context"
	"mime/multipart"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
)

// TestAPIServesAnthropicFiles: the API listener serves Anthropic's Files API over the
// Containers API's containers, with the same identity: a file uploaded into a container is
// found by its cfile_ id under /v1/files, in Anthropic's shapes; another key gets
// not_found_error, and /v1/containers is still the Containers API.
func TestAPIServesAnthropicFiles(t *testing.T) {
	svc, base, served := apiApp(t)
	c := &http.Client{Transport: &http.Transport{}}
	defer c.CloseIdleConnections()
	resp, body := call(t, c, http.MethodPost, base+"/v1/containers", "application/json", bytes.NewReader([]byte(`{"name":"x"}`)))
	require.Equal(t, http.StatusOK, resp.StatusCode, "create: %s", body)
	id := gjson.Get(body, "id").String()
	var form bytes.Buffer
	mw := multipart.NewWriter(&form)
	fw, err := mw.CreateFormFile("file", "notes.txt")
	require.NoError(t, err, "form")
	_, _ = fw.Write([]byte("hello\n"))
	require.NoError(t, mw.Close(), "form")
	resp, body = call(t, c, http.MethodPost, base+"/v1/containers/"+id+"/files", mw.FormDataContentType(), &form)
	require.Equal(t, http.StatusOK, resp.StatusCode, "upload: %s", body)
	fileID := gjson.Get(body, "id").String()

	resp, body = call(t, c, http.MethodGet, base+"/v1/files/"+fileID, "", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, "metadata: %s", body)
	assert.Equal(t, "file", gjson.Get(body, "type").String(), "Anthropic's FileMetadata: %s", body)
	assert.Equal(t, "notes.txt", gjson.Get(body, "filename").String(), "filename")
	assert.Equal(t, int64(6), gjson.Get(body, "size_bytes").Int(), "size_bytes")
	resp, body = call(t, c, http.MethodGet, base+"/v1/files/"+fileID+"/content", "", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, "content: %s", body)
	assert.Equal(t, "hello\n", body, "the bytes")

	// Another key the upstream takes would still not see it; here the key is refused first.
	resp, body = callAs(t, c, "sk-other", http.MethodGet, base+"/v1/files/"+fileID, "", nil)
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "a key the upstream refuses: %s", body)
	assert.Equal(t, "authentication_error", gjson.Get(body, "error.type").String(), "in Anthropic's shape: %s", body)
	resp, body = call(t, c, http.MethodGet, base+"/v1/files/cfile_00000000000000000000000000000000", "", nil)
	assert.Equal(t, http.StatusNotFound, resp.StatusCode, "an unknown id: %s", body)
	assert.Equal(t, "not_found_error", gjson.Get(body, "error.type").String(), "its type: %s", body)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, svc.Shutdown(ctx), "shutdown")
	assert.NoError(t, <-served, "ServeAPI after Shutdown")
}
