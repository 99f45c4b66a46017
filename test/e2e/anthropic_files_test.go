package e2e

import (
	"context"
	"io"
	"net/http"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/test/e2e/fakemodel"
)

// Issue 24, item 4 end to end: the cfile_ ids a Messages answer names are fetched with the
// Anthropic SDK's Files API (client.Beta.Files.GetMetadata and Download), which the shipped
// Envoy config routes to codeinterp's API listener; another key gets the native 404, and the
// model's own files (file_… ids) still reach the model.
func TestAnthropicFiles(t *testing.T) {
	env := NewEnv(t, EnvOptions{})
	env.Fronts(t, func(t *testing.T, s *Stack) {
		fileID := testAnthropicFilesOfAnswer(t, s)
		t.Run("another key gets the native 404", func(t *testing.T) { testAnthropicFilesOtherKey(t, s, fileID) })
		t.Run("the model's own files stay with the model", func(t *testing.T) { testAnthropicFilesUpstream(t, s) })
		t.Run("delete", func(t *testing.T) { testAnthropicFilesDelete(t, s, fileID) })
	})
}

// reportCSV is what the conversation's code writes.
const reportCSV = "city,temp\nParis,21\nOslo,12\n"

// testAnthropicFilesOfAnswer runs a conversation whose code writes a file, and fetches the
// file its answer names: metadata (name, size, type) and bytes. It returns the file's id.
func testAnthropicFilesOfAnswer(t *testing.T, s *Stack) string {
	t.Helper()
	s.Model.Enqueue(messagesPath,
		fakemodel.JSON(fakemodel.AnthropicMessage("claude-e2e", fakemodel.Usage{Input: 10, Output: 5},
			fakemodel.ToolUse("toolu_f1", "code_execution", map[string]any{
				"code": "open('/mnt/data/report.csv', 'w').write(" + pyQuote(reportCSV) + ")\nprint('saved')",
			}))),
		fakemodel.JSON(fakemodel.AnthropicMessage("claude-e2e", fakemodel.Usage{Input: 20, Output: 3}, fakemodel.Text("Saved report.csv."))),
	)
	t.Cleanup(func() { assert.Zero(t, s.Model.Pending(), "every scripted answer was used") })
	ctx := context.Background()
	client := s.anthropicClient()
	msg, err := client.Messages.New(ctx, askMessages("Write a report."))
	require.NoError(t, err, "the conversation")
	require.Len(t, msg.Content, 3, "server_tool_use, result, text: %s", msg.RawJSON())
	fileID := gjson.Get(msg.Content[1].RawJSON(), "content.content.0.file_id").String()
	require.Regexp(t, cfileID, fileID, "the result names the file: %s", msg.Content[1].RawJSON())

	meta, err := client.Beta.Files.GetMetadata(ctx, fileID, anthropic.BetaFileGetMetadataParams{})
	require.NoError(t, err, "GetMetadata of %s", fileID)
	assert.Equal(t, fileID, meta.ID, "id")
	assert.Equal(t, "report.csv", meta.Filename, "filename")
	assert.Equal(t, int64(len(reportCSV)), meta.SizeBytes, "size_bytes")
	assert.Equal(t, "text/csv", meta.MimeType, "mime_type")
	assert.True(t, meta.Downloadable, "downloadable, as the native code execution's outputs are")

	res, err := client.Beta.Files.Download(ctx, fileID, anthropic.BetaFileDownloadParams{})
	require.NoError(t, err, "Download of %s", fileID)
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err, "read the download")
	require.NoError(t, res.Body.Close(), "close the download")
	assert.Equal(t, reportCSV, string(body), "the bytes the code wrote")
	assert.Equal(t, "text/csv", res.Header.Get("Content-Type"), "content type")

	// The GA service reads the same file.
	ga, err := client.Files.GetMetadata(ctx, fileID, anthropic.FileGetMetadataParams{})
	require.NoError(t, err, "GA GetMetadata of %s", fileID)
	assert.Equal(t, "report.csv", ga.Filename, "GA filename")
	for _, r := range s.Model.Requests() {
		assert.NotContains(t, r.Path, "/files/cfile_", "no call of a container file reached the model")
	}
	return fileID
}

func testAnthropicFilesOtherKey(t *testing.T, s *Stack, fileID string) {
	other := anthropic.NewClient(
		option.WithBaseURL(s.Front.URL()+"/"),
		option.WithHeader("x-api-key", "sk-ant-someone-else"),
		option.WithMaxRetries(0),
		option.WithHTTPClient(&http.Client{Transport: s.transport}),
	)
	ctx := context.Background()
	_, err := other.Beta.Files.GetMetadata(ctx, fileID, anthropic.BetaFileGetMetadataParams{})
	assertAnthropicNotFound(t, err, "metadata with another key")
	_, err = other.Beta.Files.Download(ctx, fileID, anthropic.BetaFileDownloadParams{})
	assertAnthropicNotFound(t, err, "download with another key")
	_, err = other.Beta.Files.Delete(ctx, fileID, anthropic.BetaFileDeleteParams{})
	assertAnthropicNotFound(t, err, "delete with another key")
	owner := s.anthropicClient()
	_, err = owner.Beta.Files.GetMetadata(ctx, fileID, anthropic.BetaFileGetMetadataParams{})
	assert.NoError(t, err, "the owner still has it")
}

func assertAnthropicNotFound(t *testing.T, err error, what string) {
	t.Helper()
	var apiErr *anthropic.Error
	require.ErrorAs(t, err, &apiErr, "%s: an API error", what)
	assert.Equal(t, http.StatusNotFound, apiErr.StatusCode, "%s: status", what)
	assert.Equal(t, "not_found_error", gjson.Get(apiErr.RawJSON(), "error.type").String(), "%s: error type: %s", what, apiErr.RawJSON())
}

// testAnthropicFilesUpstream: an id codeinterp did not mint goes to the model's Files API.
func testAnthropicFilesUpstream(t *testing.T, s *Stack) {
	const id = "file_011CNha8iCJcU1wXNR6q4V8w"
	s.Model.Enqueue("/v1/files/"+id, fakemodel.JSON(map[string]any{
		"id": id, "type": "file", "filename": "upload.pdf", "mime_type": "application/pdf", "size_bytes": 1024,
		"created_at": "2026-08-20T10:00:00Z", "downloadable": false, "expires_at": nil,
	}))
	client := s.anthropicClient()
	mark := len(s.Model.RequestsTo("/v1/files/" + id))
	meta, err := client.Beta.Files.GetMetadata(context.Background(), id, anthropic.BetaFileGetMetadataParams{})
	require.NoError(t, err, "GetMetadata of the model's file")
	assert.Equal(t, "upload.pdf", meta.Filename, "the model's answer")
	sent := s.Model.RequestsTo("/v1/files/" + id)[mark:]
	require.Len(t, sent, 1, "the call reached the model")
	assert.Equal(t, messagesAPIKey, sent[0].Header.Get("X-Api-Key"), "with the caller's key")
}

func testAnthropicFilesDelete(t *testing.T, s *Stack, fileID string) {
	client := s.anthropicClient()
	ctx := context.Background()
	del, err := client.Beta.Files.Delete(ctx, fileID, anthropic.BetaFileDeleteParams{})
	require.NoError(t, err, "delete %s", fileID)
	assert.EqualValues(t, "file_deleted", del.Type, "type")
	_, err = client.Beta.Files.Download(ctx, fileID, anthropic.BetaFileDownloadParams{})
	assertAnthropicNotFound(t, err, "download after delete")
}

// pyQuote is s as a Python string literal.
func pyQuote(s string) string {
	out := "'"
	for _, r := range s {
		switch r {
		case '\n':
			out += `\n`
		case '\'', '\\':
			out += `\` + string(r)
		default:
			out += string(r)
		}
	}
	return out + "'"
}
