package chat

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
	"go.uber.org/goleak"
)

// TestSSEWithRealClient serves the streams over HTTP to the real openai-go client, the way the
// processor answers a client that asked for stream:true, and checks that the client's streaming
// API rebuilds the non-streaming answer.
func TestSSEWithRealClient(t *testing.T) {
	defer goleak.VerifyNone(t)

	chatFinal, err := os.ReadFile(filepath.Join("testdata", "final", "chat_mixed_turn", "want.json"))
	require.NoError(t, err, "read chat_mixed_turn")

	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, err := io.ReadAll(r.Body)
		if err != nil || !gjson.GetBytes(req, "stream").Bool() {
			http.Error(w, "want a streaming request", http.StatusBadRequest)
			return
		}
		var stream []byte
		switch r.URL.Path {
		case "/chat/completions":
			var opts []byte
			if o := gjson.GetBytes(req, "stream_options"); o.Exists() {
				opts = []byte(o.Raw)
			}
			stream, err = SSE(chatFinal, opts)
		default:
			http.NotFound(w, r)
			return
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write(stream)
	}))
	defer srv.Close()
	transport := &http.Transport{}
	defer transport.CloseIdleConnections()
	client := openai.NewClient(
		option.WithBaseURL(srv.URL),
		option.WithAPIKey("test-key"),
		option.WithHTTPClient(&http.Client{Transport: transport}),
		option.WithMaxRetries(0),
	)

	t.Run("chat", func(t *testing.T) {
		stream := client.Chat.Completions.NewStreaming(t.Context(), openai.ChatCompletionNewParams{
			Model:         "gpt-4.1",
			Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage("What is 2**10, and the weather in Paris?")},
			StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
		})
		var acc openai.ChatCompletionAccumulator
		for stream.Next() {
			require.True(t, acc.AddChunk(stream.Current()), "accumulate chunk")
		}
		require.NoError(t, stream.Err(), "Chat.Completions.NewStreaming")
		var want openai.ChatCompletion
		require.NoError(t, json.Unmarshal(chatFinal, &want), "SDK parse of the non-streaming answer")
		assert.Equal(t, sseViewChat(want), sseViewChat(acc.ChatCompletion), "accumulated chat stream")
		require.Len(t, acc.Choices, 1, "choices of the accumulated chat stream")
		require.Len(t, acc.Choices[0].Message.ToolCalls, 1, "tool calls of the accumulated chat stream")
		assert.Equal(t, `{"city": "Paris"}`, acc.Choices[0].Message.ToolCalls[0].Function.Arguments, "client tool call arguments")
		assert.Equal(t, int64(140), acc.Usage.TotalTokens, "usage of the accumulated chat stream")
	})
}
