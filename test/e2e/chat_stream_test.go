package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/codeinterp/codeinterp/pkg/config"
	"github.com/codeinterp/codeinterp/test/e2e/fakemodel"
)

// chatSplitDeltas returns the events of a ChatStream with its one content delta split into a
// delta per piece; every piece after the first waits for release, then delay.
func chatSplitDeltas(t *testing.T, evs []fakemodel.Event, release <-chan struct{}, delay time.Duration, pieces ...string) []fakemodel.Event {
	t.Helper()
	var out []fakemodel.Event
	for _, ev := range evs {
		var c struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if ev.Data == "[DONE]" || json.Unmarshal([]byte(ev.Data), &c) != nil || len(c.Choices) == 0 || c.Choices[0].Delta.Content == "" {
			out = append(out, ev)
			continue
		}
		for i, p := range pieces {
			data := strings.Replace(ev.Data, mustMarshal(t, c.Choices[0].Delta.Content), mustMarshal(t, p), 1)
			d := fakemodel.Event{Data: data}
			if i > 0 {
				d.Wait, d.Delay = release, delay
			}
			out = append(out, d)
		}
	}
	return out
}

// mustMarshal is v's JSON.
func mustMarshal(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

// streamRequestOf is what the model was asked for: whether a stream, and with usage.
type streamRequestOf struct {
	Stream        bool `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

// chatStreamParams is the chat request of the streaming tests.
var chatStreamParams = openai.ChatCompletionNewParams{
	Model:    testModel,
	Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("print 42")},
}

// readChatStream streams a chat request through the SDK, accumulating its chunks, and calls
// onText with each text delta as it arrives; it returns the accumulated completion and the
// text deltas.
func readChatStream(t *testing.T, s *Stack, apiKey string, params openai.ChatCompletionNewParams, onText func()) (openai.ChatCompletion, []string) {
	t.Helper()
	client := s.Client(apiKey)
	stream := client.Chat.Completions.NewStreaming(t.Context(), params, withChatTool())
	defer stream.Close()
	var acc openai.ChatCompletionAccumulator
	var deltas []string
	n := 0
	for stream.Next() {
		c := stream.Current()
		n++
		require.True(t, acc.AddChunk(c), "accumulate chunk %d", n)
		for _, ch := range c.Choices {
			if ch.Delta.Content != "" {
				deltas = append(deltas, ch.Delta.Content)
				onText()
			}
		}
	}
	require.NoError(t, stream.Err(), "Chat stream")
	return acc.ChatCompletion, deltas
}

// TestChatStreamedFollowUp: for a client that streams, the first call asks the model for a
// stream with usage, the loop's follow-up too, and the model's text reaches the client delta by
// delta as the model sends it, through both fronts: the client reads the first text delta
// while the model still holds the rest of its stream, and the SDK's accumulated stream equals
// the plain answer of the same script.
func TestChatStreamedFollowUp(t *testing.T) {
	env := NewEnv(t, EnvOptions{})
	pieces := []string{"It ", "printed ", "42."}
	text := strings.Join(pieces, "")
	first := fakemodel.Chat(testModel, fakemodel.Usage{Input: 10, Output: 3}, "", chatRunCode("call_1", "print(42)"))
	usage := fakemodel.Usage{Input: 20, Output: 4}
	env.Fronts(t, func(t *testing.T, s *Stack) {
		s.Model.Enqueue(chatPath, fakemodel.JSON(first), fakemodel.JSON(fakemodel.Chat(testModel, usage, text)))
		client := s.Client("sk-chat-stream")
		plain, err := client.Chat.Completions.New(t.Context(), chatStreamParams, withChatTool())
		require.NoError(t, err, "the plain request")
		require.Equal(t, text, plain.Choices[0].Message.Content, "the plain answer")

		before := len(s.Model.RequestsTo(chatPath))
		// The model holds the rest of its stream until the client has read the first delta.
		held := newLiveRelease(t)
		s.Model.Enqueue(chatPath, fakemodel.JSON(first),
			fakemodel.SSE(chatSplitDeltas(t, fakemodel.ChatStream(testModel, usage, text), held.ch, 100*time.Millisecond, pieces...)...))
		params := chatStreamParams
		params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
		got, deltas := readChatStream(t, s, "sk-chat-stream", params, held.read)

		reqs := s.Model.RequestsTo(chatPath)
		require.Len(t, reqs, before+2, "the first call and one follow-up")
		for i, r := range reqs[before:] {
			var asked streamRequestOf
			require.NoError(t, r.Decode(&asked), "request %d", i)
			assert.True(t, asked.Stream, "request %d asks the model for a stream", i)
			require.NotNil(t, asked.StreamOptions, "request %d has stream_options", i)
			assert.True(t, asked.StreamOptions.IncludeUsage, "request %d asks for usage", i)
		}
		assert.True(t, held.byClient.Load(), "the client read the first text delta while the model held the rest of its stream")
		assert.Equal(t, pieces, deltas, "the text arrives in the model's deltas")
		assert.Equal(t, viewChat(*plain), viewChat(got), "the accumulated stream is the plain answer")
		assert.Equal(t, int64(37), got.Usage.TotalTokens, "usage summed over the rounds")
	})
}

// TestChatStreamedFollowUpWithoutUsage: a client that did not ask for usage gets no usage
// chunk, though the model is asked for usage (the loop sums it).
func TestChatStreamedFollowUpWithoutUsage(t *testing.T) {
	env := NewEnv(t, EnvOptions{})
	env.Fronts(t, func(t *testing.T, s *Stack) {
		before := len(s.Model.RequestsTo(chatPath))
		s.Model.Enqueue(chatPath,
			fakemodel.JSON(fakemodel.Chat(testModel, fakemodel.Usage{Input: 10, Output: 3}, "", chatRunCode("call_1", "print(42)"))),
			fakemodel.SSE(fakemodel.ChatStream(testModel, fakemodel.Usage{Input: 20, Output: 4}, "It printed 42.")...))
		client := s.Client("sk-chat-nousage")
		stream := client.Chat.Completions.NewStreaming(t.Context(), chatStreamParams, withChatTool())
		defer stream.Close()
		var acc openai.ChatCompletionAccumulator
		n := 0
		for stream.Next() {
			c := stream.Current()
			n++
			assert.NotEmpty(t, c.Choices, "chunk %d has choices (no usage chunk)", n)
			assert.Zero(t, c.Usage.TotalTokens, "chunk %d carries no usage", n)
			require.True(t, acc.AddChunk(c), "accumulate chunk %d", n)
		}
		require.NoError(t, stream.Err(), "Chat stream")
		assert.Equal(t, "It printed 42.", acc.Choices[0].Message.Content, "the answer")
		assert.Equal(t, "stop", acc.Choices[0].FinishReason, "finish_reason")
		reqs := s.Model.RequestsTo(chatPath)
		require.Len(t, reqs, before+2, "the first call and one follow-up")
		var asked streamRequestOf
		require.NoError(t, reqs[len(reqs)-1].Decode(&asked))
		require.NotNil(t, asked.StreamOptions, "the follow-up has stream_options")
		assert.True(t, asked.StreamOptions.IncludeUsage, "the follow-up asks for usage")
	})
}

// checkChatUpstreamRequests checks the model calls of a chat scenario: the client's
// credentials and none of our headers, as checkUpstreamRequests does; for a streaming client
// every call (the first and the follow-ups) asks for a stream with usage, for another none.
func checkChatUpstreamRequests(t *testing.T, s *Stack, reqs []fakemodel.Request, auth, what string, streams bool) {
	t.Helper()
	replayed := s.Config.GetDefaultProfile().GetStreamMode() == config.StreamReplay
	for i, r := range reqs {
		stream := streams && (i > 0 || !replayed) // a replayed stream's first call asks for a whole answer
		assert.Equal(t, auth, r.Header.Get("Authorization"), "%s: credentials of model call %d", what, i+1)
		for k := range r.Header {
			assert.False(t, strings.HasPrefix(strings.ToLower(k), "x-codeinterp-"), "%s: model call %d carries %s", what, i+1, k)
		}
		var asked streamRequestOf
		require.NoError(t, r.Decode(&asked), "%s: model call %d", what, i+1)
		assert.Equal(t, stream, asked.Stream, "%s: whether model call %d streams", what, i+1)
		if stream {
			require.NotNil(t, asked.StreamOptions, "%s: model call %d has stream_options", what, i+1)
			assert.True(t, asked.StreamOptions.IncludeUsage, "%s: model call %d asks for usage", what, i+1)
		} else {
			assert.Nil(t, asked.StreamOptions, "%s: model call %d has no stream_options", what, i+1)
		}
	}
}
