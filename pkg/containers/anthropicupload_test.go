package containers

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
)

// TestAnthropicUploadsWithTheSDK drives POST /v1/files with anthropic-sdk-go (beta and GA): the
// metadata as natively (not downloadable), the list beside the container files, another key's
// 404, and delete.
func TestAnthropicUploadsWithTheSDK(t *testing.T) {
	st := newMemStore()
	up := NewUploads(UploadsConfig{})
	srv := afilesFixture(t, st, Config{Uploads: up})
	ctx := t.Context()
	c := anthropicFilesClient(srv, "sk-a", "/")
	_, cf := putFile(t, st, st, "sk-a", "out.txt", "written")

	meta, err := c.Beta.Files.Upload(ctx, anthropic.BetaFileUploadParams{
		File:  anthropic.File(strings.NewReader("a,b\n1,2\n"), "dir/sales.csv", "text/csv"),
		Betas: []anthropic.AnthropicBeta{anthropic.AnthropicBetaFilesAPI2025_04_14},
	})
	require.NoError(t, err, "beta upload")
	assert.Regexp(t, `^file_[0-9A-Za-z]{20,}$`, meta.ID, "a native id")
	assert.Equal(t, "sales.csv", meta.Filename, "the final path component is kept")
	assert.Equal(t, "text/csv", meta.MimeType, "mime_type")
	assert.EqualValues(t, 8, meta.SizeBytes, "size_bytes")
	assert.False(t, meta.Downloadable, "an upload is not downloadable, as natively")
	assert.Empty(t, gjson.Get(meta.RawJSON(), "expires_at").String(), "no expiry unless asked")

	ga, err := c.Files.Upload(ctx, anthropic.FileUploadParams{
		File:             anthropic.File(strings.NewReader("x"), "", "application/json"),
		ExpiresInSeconds: anthropic.Int(3600),
	})
	require.NoError(t, err, "GA upload")
	assert.Equal(t, "unnamed.json", ga.Filename, "an absent name is 'unnamed' with the type's extension")
	assert.WithinDuration(t, time.Now().Add(time.Hour), ga.ExpiresAt, time.Minute, "expires_in_seconds")

	got, err := c.Beta.Files.GetMetadata(ctx, meta.ID, anthropic.BetaFileGetMetadataParams{})
	require.NoError(t, err, "metadata")
	assert.Equal(t, "sales.csv", got.Filename, "metadata's filename")
	_, err = c.Beta.Files.Download(ctx, meta.ID, anthropic.BetaFileDownloadParams{})
	status, typ := anthropicStatus(t, err, "download of an upload")
	assert.Equal(t, http.StatusBadRequest, status, "download of an upload: status")
	assert.Equal(t, "invalid_request_error", typ, "download of an upload: type")
	var apiErr *anthropic.Error
	require.ErrorAs(t, err, &apiErr, "download of an upload")
	assert.Equal(t, "file_not_downloadable", gjson.Get(apiErr.RawJSON(), "error.details.error_code").String(), "error_code")

	list, err := c.Beta.Files.List(ctx, anthropic.BetaFileListParams{})
	require.NoError(t, err, "list")
	var ids []string
	for _, f := range list.Data {
		ids = append(ids, f.ID)
	}
	assert.ElementsMatch(t, []string{meta.ID, ga.ID, cf.ID}, ids, "uploads and container files")

	b := anthropicFilesClient(srv, "sk-b", "/")
	_, err = b.Beta.Files.GetMetadata(ctx, meta.ID, anthropic.BetaFileGetMetadataParams{})
	status, typ = anthropicStatus(t, err, "another key's metadata")
	assert.Equal(t, http.StatusNotFound, status, "another key: status")
	assert.Equal(t, "not_found_error", typ, "another key: type")
	_, err = b.Beta.Files.Delete(ctx, meta.ID, anthropic.BetaFileDeleteParams{})
	status, _ = anthropicStatus(t, err, "another key's delete")
	assert.Equal(t, http.StatusNotFound, status, "another key's delete: status")
	bl, err := b.Beta.Files.List(ctx, anthropic.BetaFileListParams{})
	require.NoError(t, err, "another key's list")
	assert.Empty(t, bl.Data, "another key lists nothing of a's")

	del, err := c.Beta.Files.Delete(ctx, meta.ID, anthropic.BetaFileDeleteParams{})
	require.NoError(t, err, "delete")
	assert.EqualValues(t, "file_deleted", del.Type, "delete's type")
	_, err = c.Beta.Files.GetMetadata(ctx, meta.ID, anthropic.BetaFileGetMetadataParams{})
	status, _ = anthropicStatus(t, err, "metadata after delete")
	assert.Equal(t, http.StatusNotFound, status, "metadata after delete")
}

// TestAnthropicUploadsOff: without Uploads, POST /v1/files is not served here.
func TestAnthropicUploadsOff(t *testing.T) {
	srv := afilesFixture(t, newMemStore(), Config{})
	c := anthropicFilesClient(srv, "sk-a", "/")
	_, err := c.Beta.Files.Upload(t.Context(), anthropic.BetaFileUploadParams{File: anthropic.File(strings.NewReader("x"), "a.txt", "text/plain")})
	status, _ := anthropicStatus(t, err, "upload")
	assert.Equal(t, http.StatusNotFound, status, "no upload route")
}

// TestAnthropicUploadBounds: a file past its bound is a 413, one past the identity's file
// count or bytes a 400 storage_quota_exceeded, each leaving nothing; the server's bytes are
// bounded in all.
func TestAnthropicUploadBounds(t *testing.T) {
	up := NewUploads(UploadsConfig{MaxFileBytes: 100, MaxFilesPerIdentity: 2, MaxBytesPerIdentity: 150, MaxBytes: 250})
	srv := afilesFixture(t, newMemStore(), Config{Uploads: up})
	ctx := t.Context()
	send := func(key string, n int) error {
		c := anthropicFilesClient(srv, key, "/")
		_, err := c.Beta.Files.Upload(ctx, anthropic.BetaFileUploadParams{
			File: anthropic.File(strings.NewReader(strings.Repeat("x", n)), "f.txt", "text/plain")})
		return err
	}
	status, typ := anthropicStatus(t, send("sk-a", 101), "a file of 101 bytes")
	assert.Equal(t, http.StatusRequestEntityTooLarge, status, "too large: status")
	assert.Equal(t, "request_too_large", typ, "too large: type")

	require.NoError(t, send("sk-a", 100), "a file of 100 bytes")
	err := send("sk-a", 60)
	status, _ = anthropicStatus(t, err, "past the identity's bytes")
	assert.Equal(t, http.StatusBadRequest, status, "identity's bytes: status")
	var apiErr *anthropic.Error
	require.ErrorAs(t, err, &apiErr, "quota")
	assert.Equal(t, "storage_quota_exceeded", gjson.Get(apiErr.RawJSON(), "error.details.error_code").String(), "error_code")
	require.NoError(t, send("sk-a", 50), "within the identity's bytes")
	status, _ = anthropicStatus(t, send("sk-a", 1), "a third file")
	assert.Equal(t, http.StatusBadRequest, status, "identity's file count: status")

	require.NoError(t, send("sk-b", 100), "b's file")
	status, _ = anthropicStatus(t, send("sk-c", 1), "past the server's bytes")
	assert.Equal(t, http.StatusBadRequest, status, "server's bytes: status")
	assert.Len(t, up.List("sk-a"), 2, "a keeps what fit")
	assert.Empty(t, up.List("sk-c"), "nothing of c's refused upload")
	up.mu.Lock()
	assert.EqualValues(t, 250, up.total, "the server holds the kept files' bytes only")
	up.mu.Unlock()
}

// TestAnthropicUploadStalls: an upload that stops sending is ended by the idle deadline with a
// 408; it leaves nothing and frees its slot.
func TestAnthropicUploadStalls(t *testing.T) {
	up := NewUploads(UploadsConfig{})
	srv := afilesFixture(t, newMemStore(), Config{Uploads: up, UploadIdle: 200 * time.Millisecond, MaxUploadsPerIdentity: 1})
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	require.NoError(t, err, "dial")
	defer conn.Close()
	head := "--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.csv\"\r\n\r\nsome bytes"
	_, err = fmt.Fprintf(conn, "POST /v1/files HTTP/1.1\r\nHost: x\r\nX-Api-Key: sk-a\r\n"+
		"Content-Type: multipart/form-data; boundary=B\r\nContent-Length: 100000\r\n\r\n%s", head)
	require.NoError(t, err, "send the start of an upload")
	start := time.Now()
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)), "deadline")
	answer, _ := io.ReadAll(conn)
	assert.Less(t, time.Since(start), 5*time.Second, "ended by the idle deadline: %q", answer)
	assert.True(t, strings.HasPrefix(string(answer), "HTTP/1.1 408 "), "a 408: %q", answer)
	assert.Empty(t, up.List("sk-a"), "nothing of the stalled upload")
	up.mu.Lock()
	assert.Zero(t, up.total, "its bytes are given back")
	up.mu.Unlock()
	c := anthropicFilesClient(srv, "sk-a", "/")
	_, err = c.Beta.Files.Upload(t.Context(), anthropic.BetaFileUploadParams{File: anthropic.File(strings.NewReader("x"), "b.txt", "text/plain")})
	assert.NoError(t, err, "the identity's next upload")
}

// TestUploadsExpire: a file past expires_in_seconds is gone, and its bytes given back.
func TestUploadsExpire(t *testing.T) {
	up := NewUploads(UploadsConfig{})
	now := time.Unix(1_700_000_000, 0)
	up.now = func() time.Time { return now }
	u, err := up.Put(t.Context(), "sk-a", "a.txt", "text/plain", time.Hour, strings.NewReader("hello"))
	require.NoError(t, err, "put")
	_, err = up.File("sk-a", u.ID)
	require.NoError(t, err, "there before its expiry")
	now = now.Add(time.Hour)
	_, err = up.File("sk-a", u.ID)
	assert.ErrorIs(t, err, ErrNotFound, "gone at its expiry")
	assert.Zero(t, up.total, "its bytes given back")
}
