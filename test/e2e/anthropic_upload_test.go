package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"

	configv1 "github.com/codeinterp/codeinterp/api/codeinterp/config/v1"
	"github.com/codeinterp/codeinterp/envoy"
	"github.com/codeinterp/codeinterp/test/e2e/fakemodel"
	"github.com/codeinterp/codeinterp/test/e2e/harness"
)

// Issue 29, "Files in": with anthropic_files.own_uploads and the Envoy routes of `envoyconf
// -anthropic-uploads`, a file uploaded with anthropic-sdk-go's Beta.Files.Upload is kept by
// codeinterp, and a Messages request's container_upload block puts it in the container before
// the code runs (pandas reads it), plainly and streamed; another key cannot use the id; an
// oversized or stalled upload is refused natively.
func TestAnthropicUpload(t *testing.T) {
	env := NewEnv(t, EnvOptions{
		Configure: func(c *configv1.Config) {
			c.AnthropicFiles = &configv1.AnthropicFiles{OwnUploads: true, MaxFileBytes: 64 << 10}
			c.ApiUploadIdle = durationpb.New(time.Second)
		},
		Harness: harness.Options{Config: uploadsFilterConfig(t)},
	})
	env.Fronts(t, func(t *testing.T, s *Stack) {
		fileID := testAnthropicUploadFile(t, s)
		t.Run("plain", func(t *testing.T) { testAnthropicUploadRead(t, s, fileID, false) })
		t.Run("stream", func(t *testing.T) { testAnthropicUploadRead(t, s, fileID, true) })
		t.Run("another key cannot use the id", func(t *testing.T) { testAnthropicUploadOtherKey(t, s, fileID) })
		t.Run("oversized and stalled uploads", func(t *testing.T) { testAnthropicUploadRefused(t, s) })
	})
}

// uploadsFilterConfig is the shipped Envoy config with the routes of `envoyconf
// -anthropic-uploads`.
func uploadsFilterConfig(t *testing.T) harness.FilterConfig {
	t.Helper()
	path, err := harness.ShippedConfigPath()
	require.NoError(t, err, "find envoy.yaml")
	b, err := envoy.Load(path)
	require.NoError(t, err, "load envoy.yaml")
	require.NoError(t, envoy.RouteAnthropicUploads(b), "route the uploads")
	js, err := protojson.Marshal(b)
	require.NoError(t, err, "encode the bootstrap")
	out := filepath.Join(t.TempDir(), "envoy-uploads.json")
	require.NoError(t, os.WriteFile(out, js, 0o644), "write the bootstrap")
	cfg, err := harness.LoadFilterConfig(out)
	require.NoError(t, err, "load the filter config")
	return cfg
}

// salesCSV is the uploaded file the code reads.
const salesCSV = "region,amount\nnorth,120\nsouth,80\nnorth,30\n"

// testAnthropicUploadFile uploads salesCSV and checks its metadata; it returns its id.
func testAnthropicUploadFile(t *testing.T, s *Stack) string {
	t.Helper()
	client := s.anthropicClient()
	ctx := context.Background()
	meta, err := client.Beta.Files.Upload(ctx, anthropic.BetaFileUploadParams{
		File:  anthropic.File(strings.NewReader(salesCSV), "sales.csv", "text/csv"),
		Betas: []anthropic.AnthropicBeta{anthropic.AnthropicBetaFilesAPI2025_04_14},
	})
	require.NoError(t, err, "upload")
	assert.Regexp(t, `^file_`, meta.ID, "a native id")
	assert.Equal(t, "sales.csv", meta.Filename, "filename")
	assert.EqualValues(t, len(salesCSV), meta.SizeBytes, "size_bytes")
	assert.False(t, meta.Downloadable, "not downloadable, as natively")
	got, err := client.Beta.Files.GetMetadata(ctx, meta.ID, anthropic.BetaFileGetMetadataParams{})
	require.NoError(t, err, "metadata")
	assert.Equal(t, "sales.csv", got.Filename, "metadata's filename")
	list, err := client.Beta.Files.List(ctx, anthropic.BetaFileListParams{})
	require.NoError(t, err, "list")
	require.NotEmpty(t, list.Data, "the list has the upload")
	assert.Equal(t, meta.ID, list.Data[0].ID, "the newest first")
	for _, r := range s.Model.Requests() {
		assert.NotContains(t, r.Path, "/v1/files", "no Files API call reached the model")
	}
	return meta.ID
}

// uploadParams is a Messages request whose user turn hands fileID to the container.
func uploadParams(fileID string) anthropic.MessageNewParams {
	p := askMessages("")
	p.Messages = []anthropic.MessageParam{anthropic.NewUserMessage(
		anthropic.NewTextBlock("Total amount per region?"), anthropic.NewContainerUploadBlock(fileID))}
	return p
}

// testAnthropicUploadRead has the model run pandas on the uploaded CSV.
func testAnthropicUploadRead(t *testing.T, s *Stack, fileID string, stream bool) {
	mark := len(s.Model.RequestsTo(messagesPath))
	s.Model.Enqueue(messagesPath,
		fakemodel.JSON(fakemodel.AnthropicMessage("claude-e2e", fakemodel.Usage{Input: 30, Output: 12},
			fakemodel.ToolUse("toolu_up1", "code_execution", map[string]any{
				"code": "import pandas as pd\ndf = pd.read_csv('/mnt/data/sales.csv')\nprint(df.groupby('region')['amount'].sum().to_dict())",
			}))),
		fakemodel.JSON(fakemodel.AnthropicMessage("claude-e2e", fakemodel.Usage{Input: 50, Output: 7},
			fakemodel.Text("north 150, south 80."))),
	)
	t.Cleanup(func() { assert.Zero(t, s.Model.Pending(), "every scripted answer was used") })
	client := s.anthropicClient()
	ctx := context.Background()
	var msg *anthropic.Message
	if stream {
		st := client.Messages.NewStreaming(ctx, uploadParams(fileID))
		acc := anthropic.Message{}
		for st.Next() {
			require.NoError(t, acc.Accumulate(st.Current()), "accumulate %s", st.Current().Type)
		}
		require.NoError(t, st.Err(), "the stream")
		require.NoError(t, st.Close(), "close the stream")
		msg = &acc
	} else {
		var err error
		msg, err = client.Messages.New(ctx, uploadParams(fileID))
		require.NoError(t, err, "POST /v1/messages")
	}
	require.Len(t, msg.Content, 3, "server_tool_use, result, text: %s", msg.RawJSON())
	out := msg.Content[1].AsCodeExecutionToolResult().Content
	assert.Equal(t, "{'north': 150, 'south': 80}\n", out.Stdout, "pandas read the uploaded file: stderr %q", out.Stderr)
	assert.Equal(t, "north 150, south 80.", msg.Content[2].Text, "the final text")

	sent := s.Model.RequestsTo(messagesPath)[mark:]
	require.Len(t, sent, 2, "the first request and one follow-up")
	for i, r := range sent {
		assert.NotContains(t, string(r.Body), `"container_upload"`, "request %d: the model never sees the block", i)
	}
	note := gjson.GetBytes(sent[0].Body, "messages.0.content.1")
	assert.Equal(t, "text", note.Get("type").String(), "the block became text: %s", sent[0].Body)
	assert.Contains(t, note.Get("text").String(), "/mnt/data", "telling the model where the file is")
}

// testAnthropicUploadOtherKey: another key's request naming the id is refused before the model
// sees it, and the id is unknown to its Files API calls.
func testAnthropicUploadOtherKey(t *testing.T, s *Stack, fileID string) {
	other := anthropic.NewClient(
		option.WithBaseURL(s.Front.URL()+"/"),
		option.WithHeader("x-api-key", "sk-ant-someone-else"),
		option.WithMaxRetries(0),
		option.WithHTTPClient(&http.Client{Transport: s.transport}),
	)
	ctx := context.Background()
	mark := len(s.Model.RequestsTo(messagesPath))
	_, err := other.Messages.New(ctx, uploadParams(fileID))
	var apiErr *anthropic.Error
	require.ErrorAs(t, err, &apiErr, "another key's container_upload: an API error")
	assert.Equal(t, http.StatusBadRequest, apiErr.StatusCode, "status: %s", apiErr.RawJSON())
	assert.Equal(t, "invalid_request_error", gjson.Get(apiErr.RawJSON(), "error.type").String(), "type")
	assert.Contains(t, gjson.Get(apiErr.RawJSON(), "error.message").String(), fileID, "names the file")
	assert.Len(t, s.Model.RequestsTo(messagesPath), mark, "the model was not asked")

	_, err = other.Beta.Files.GetMetadata(ctx, fileID, anthropic.BetaFileGetMetadataParams{})
	assertAnthropicNotFound(t, err, "metadata with another key")
	_, err = other.Beta.Files.Delete(ctx, fileID, anthropic.BetaFileDeleteParams{})
	assertAnthropicNotFound(t, err, "delete with another key")
	owner := s.anthropicClient()
	_, err = owner.Beta.Files.GetMetadata(ctx, fileID, anthropic.BetaFileGetMetadataParams{})
	assert.NoError(t, err, "the owner still has it")
}

// testAnthropicUploadRefused: a file past max_file_bytes is a 413 request_too_large, an upload
// that stalls past api_upload_idle a 408; neither leaves a file.
func testAnthropicUploadRefused(t *testing.T, s *Stack) {
	client := s.anthropicClient()
	ctx := context.Background()
	before, err := client.Beta.Files.List(ctx, anthropic.BetaFileListParams{})
	require.NoError(t, err, "list")

	_, err = client.Beta.Files.Upload(ctx, anthropic.BetaFileUploadParams{
		File: anthropic.File(strings.NewReader(strings.Repeat("x", 64<<10+1)), "big.csv", "text/csv")})
	var apiErr *anthropic.Error
	require.ErrorAs(t, err, &apiErr, "oversized: an API error")
	assert.Equal(t, http.StatusRequestEntityTooLarge, apiErr.StatusCode, "oversized: status")
	assert.Equal(t, "request_too_large", gjson.Get(apiErr.RawJSON(), "error.type").String(), "oversized: type")

	u, err := hostOf(s.Front.URL())
	require.NoError(t, err, "front address")
	conn, err := net.Dial("tcp", u)
	require.NoError(t, err, "dial the front")
	defer conn.Close()
	head := "--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"slow.csv\"\r\n\r\na,b\n"
	_, err = fmt.Fprintf(conn, "POST /v1/files HTTP/1.1\r\nHost: x\r\nX-Api-Key: %s\r\n"+
		"Content-Type: multipart/form-data; boundary=B\r\nContent-Length: 100000\r\n\r\n%s", messagesAPIKey, head)
	require.NoError(t, err, "send the start of an upload")
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(20*time.Second)), "deadline")
	start := time.Now()
	// The status line only: a front may keep the connection open after the answer.
	answer, _ := bufio.NewReader(conn).ReadString('\n')
	assert.True(t, strings.HasPrefix(answer, "HTTP/1.1 408 "), "a stalled upload is a 408: %q", answer)
	assert.Less(t, time.Since(start), 10*time.Second, "ended by the idle deadline")

	after, err := client.Beta.Files.List(ctx, anthropic.BetaFileListParams{})
	require.NoError(t, err, "list")
	assert.Len(t, after.Data, len(before.Data), "neither left a file")
}

// hostOf is the host:port of a base URL.
func hostOf(base string) (string, error) {
	host, ok := strings.CutPrefix(base, "http://")
	if !ok {
		return "", fmt.Errorf("not an http URL: %s", base)
	}
	return strings.TrimSuffix(host, "/"), nil
}
