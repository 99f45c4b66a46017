package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/codeinterp/codeinterp/test/e2e/fakemodel"
)

// TestChatFirstAnswerStreams: a streaming client's first upstream call is answered with a
// chunk stream, through both fronts. When it calls the code function, the code runs and the
// streamed follow-up's text reaches the client delta by delta; when it is the answer, its text
// does; either way the SDK's accumulated stream equals the plain answer of the same script.
func TestChatFirstAnswerStreams(t *testing.T) {
	env := NewEnv(t, EnvOptions{})
	pieces := []string{"It ", "printed ", "42."}
	text := strings.Join(pieces, "")
	firstUsage, usage := fakemodel.Usage{Input: 10, Output: 3}, fakemodel.Usage{Input: 20, Output: 4}
	call := chatRunCode("call_1", "print(42)")
	params := chatStreamParams
	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}

	env.Fronts(t, func(t *testing.T, s *Stack) {
		client := s.Client("sk-chat-first")
		t.Run("a code call, then the answer", func(t *testing.T) {
			s.Model.Enqueue(chatPath, fakemodel.JSON(fakemodel.Chat(testModel, firstUsage, "", call)), fakemodel.JSON(fakemodel.Chat(testModel, usage, text)))
			plain, err := client.Chat.Completions.New(t.Context(), chatStreamParams, withChatTool())
			require.NoError(t, err, "the plain request")

			before := len(s.Model.RequestsTo(chatPath))
			held := newLiveRelease(t)
			s.Model.Enqueue(chatPath,
				fakemodel.SSE(fakemodel.ChatStream(testModel, firstUsage, "", call)...),
				fakemodel.SSE(chatSplitDeltas(t, fakemodel.ChatStream(testModel, usage, text), held.ch, 100*time.Millisecond, pieces...)...))
			got, deltas := readChatStream(t, s, "sk-chat-first", params, held.read)

			reqs := s.Model.RequestsTo(chatPath)
			require.Len(t, reqs, before+2, "the first call and one follow-up")
			for i, r := range reqs[before:] {
				var asked streamRequestOf
				require.NoError(t, r.Decode(&asked), "request %d", i)
				assert.True(t, asked.Stream, "request %d asks for a stream", i)
				require.NotNil(t, asked.StreamOptions, "request %d has stream_options", i)
				assert.True(t, asked.StreamOptions.IncludeUsage, "request %d asks for usage", i)
			}
			assert.True(t, held.byClient.Load(), "the client read the first text delta while the model held the rest of its stream")
			assert.Equal(t, pieces, deltas, "the text arrives in the model's deltas")
			assert.Equal(t, viewChat(*plain), viewChat(got), "the accumulated stream is the plain answer")
		})
		t.Run("the first answer is the answer", func(t *testing.T) {
			s.Model.Enqueue(chatPath, fakemodel.JSON(fakemodel.Chat(testModel, usage, text)))
			plain, err := client.Chat.Completions.New(t.Context(), chatStreamParams, withChatTool())
			require.NoError(t, err, "the plain request")

			held := newLiveRelease(t)
			s.Model.Enqueue(chatPath, fakemodel.SSE(chatSplitDeltas(t, fakemodel.ChatStream(testModel, usage, text), held.ch, 100*time.Millisecond, pieces...)...))
			got, deltas := readChatStream(t, s, "sk-chat-first", params, held.read)
			assert.True(t, held.byClient.Load(), "the client read the first text delta while the model held the rest of its stream")
			assert.Equal(t, pieces, deltas, "the text arrives in the model's deltas")
			assert.Equal(t, viewChat(*plain), viewChat(got), "the accumulated stream is the plain answer")
		})
	})
}
