package chat

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/codeinterp/codeinterp/pkg/schema/internal/schematest"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
)

func TestChatSSEErrors(t *testing.T) {
	tests := []struct {
		name string
		give string
	}{
		{name: "invalid JSON", give: `{"output":[`},
		{name: "array", give: `[]`},
		{name: "empty", give: ``},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := SSE([]byte(tt.give), nil)
			assert.ErrorContains(t, err, "encode chat stream", "SSE(%q)", tt.give)
		})
	}
}

func TestErrorSSE(t *testing.T) {
	t.Run("chat", func(t *testing.T) {
		stream := errorSSE("sandbox_unavailable", "no sandbox")
		frames := schematest.SSEFrames(t, stream, false)
		require.Len(t, frames, 1, "events of errorSSE")
		assert.JSONEq(t, `{"error":{"message":"no sandbox","type":"server_error","param":null,"code":"sandbox_unavailable"}}`,
			frames[0].Data, "data of errorSSE")
		s := schematest.SSESDKStream[openai.ChatCompletionChunk](stream)
		assert.False(t, s.Next(), "SDK stream of errorSSE must stop")
		var streamErr *ssestream.StreamError
		require.ErrorAs(t, s.Err(), &streamErr, "SDK error of errorSSE")
		assert.Contains(t, streamErr.Message, "no sandbox", "SDK error message of errorSSE")
	})
}

// sseChatView is the comparable part of a ChatCompletion.
type sseChatView struct {
	ID, Model, SystemFingerprint, ServiceTier string
	Created                                   int64
	Usage                                     [6]int64
	Choices                                   []sseChoiceView
}

type sseChoiceView struct {
	Index              int64
	FinishReason, Role string
	Content, Refusal   string
	ToolCalls          [][4]string // id, type, name, arguments
	LogprobTokens      []string
}

func sseViewChat(c openai.ChatCompletion) sseChatView {
	v := sseChatView{
		ID: c.ID, Model: c.Model, SystemFingerprint: c.SystemFingerprint, ServiceTier: string(c.ServiceTier), Created: c.Created,
		Usage: [6]int64{
			c.Usage.PromptTokens, c.Usage.CompletionTokens, c.Usage.TotalTokens, c.Usage.PromptTokensDetails.CachedTokens,
			c.Usage.CompletionTokensDetails.ReasoningTokens, c.Usage.CompletionTokensDetails.AudioTokens,
		},
	}
	for _, ch := range c.Choices {
		cv := sseChoiceView{
			Index: ch.Index, FinishReason: ch.FinishReason, Role: string(ch.Message.Role),
			Content: ch.Message.Content, Refusal: ch.Message.Refusal,
		}
		for _, tc := range ch.Message.ToolCalls {
			cv.ToolCalls = append(cv.ToolCalls, [4]string{tc.ID, tc.Type, tc.Function.Name, tc.Function.Arguments})
		}
		for _, lp := range ch.Logprobs.Content {
			cv.LogprobTokens = append(cv.LogprobTokens, lp.Token)
		}
		v.Choices = append(v.Choices, cv)
	}
	return v
}

// sseChatBodies are the Chat bodies streamed by the reconstruction tests.
func sseChatBodies(t *testing.T) map[string][]byte {
	t.Helper()
	bodies := map[string][]byte{}
	dirs, err := os.ReadDir(filepath.Join("testdata", "final"))
	require.NoError(t, err, "list testdata/final")
	for _, d := range dirs {
		if !strings.HasPrefix(d.Name(), "chat_") {
			continue
		}
		b, err := os.ReadFile(filepath.Join("testdata", "final", d.Name(), "want.json"))
		require.NoError(t, err, "read %s", d.Name())
		bodies["final/"+d.Name()] = b
	}
	long := strings.Repeat("Ünïcödé — 世界 🎲 ", 40) + "\u2028x\u2029\n" + strings.Repeat("word ", 100)
	longJSON, err := json.Marshal(long)
	require.NoError(t, err, "marshal long text")
	bodies["inline/two choices, refusal, logprobs, long text"] = []byte(`{"id":"chatcmpl-9","object":"chat.completion","created":1700000000,` +
		`"model":"gpt-4o","system_fingerprint":"fp_9","choices":[` +
		`{"index":0,"message":{"role":"assistant","content":` + string(longJSON) + `,"refusal":null},"logprobs":{"content":[{"token":"Ü","logprob":-0.1,"bytes":[195,156],"top_logprobs":[]}],"refusal":null},"finish_reason":"length"},` +
		`{"index":1,"message":{"role":"assistant","content":null,"refusal":"I can't help with that."},"logprobs":null,"finish_reason":"stop"}],` +
		`"usage":{"prompt_tokens":5,"completion_tokens":7,"total_tokens":12,"completion_tokens_details":{"reasoning_tokens":2,"audio_tokens":1}}}`)
	bodies["inline/two tool calls, long arguments"] = []byte(`{"id":"chatcmpl-8","object":"chat.completion","created":1700000001,"model":"m",` +
		`"choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[` +
		`{"id":"call_a","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"` + strings.Repeat("Zürich ", 60) + `\"}"}},` +
		`{"id":"call_b","type":"function","function":{"name":"get_time","arguments":"{}"}}]},"finish_reason":"tool_calls"}],` +
		`"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}`)
	return bodies
}

func TestChatSSEReconstructs(t *testing.T) {
	tests := []struct {
		name             string
		giveStreamOption string
		wantUsage        bool
	}{
		{name: "include_usage", giveStreamOption: `{"include_usage":true}`, wantUsage: true},
		{name: "include_usage false", giveStreamOption: `{"include_usage":false}`},
		{name: "no stream_options"},
	}
	for _, tt := range tests {
		for name, final := range sseChatBodies(t) {
			t.Run(tt.name+"/"+name, func(t *testing.T) {
				var opts []byte
				if tt.giveStreamOption != "" {
					opts = []byte(tt.giveStreamOption)
				}
				stream, err := SSE(final, opts)
				require.NoError(t, err, "SSE(%s)", name)
				require.True(t, bytes.HasSuffix(stream, []byte("data: [DONE]\n\n")), "stream of %s must end with [DONE]", name)
				frames := schematest.SSEFrames(t, stream, false)
				frames = frames[:len(frames)-1]
				usageChunks := map[bool]int{true: 1}[tt.wantUsage]
				var choicesPerChunk []int
				for i, f := range frames {
					require.True(t, json.Valid([]byte(f.Data)), "chunk %d of %s is not JSON: %.300s", i, name, f.Data)
					assert.Equal(t, "chat.completion.chunk", gjson.Get(f.Data, "object").String(), "object of chunk %d of %s", i, name)
					assert.Equal(t, tt.wantUsage, gjson.Get(f.Data, "usage").Exists(), "usage key in chunk %d of %s", i, name)
					choicesPerChunk = append(choicesPerChunk, len(gjson.Get(f.Data, "choices").Array()))
				}
				wantPerChunk := append(slices.Repeat([]int{1}, len(frames)-usageChunks), make([]int, usageChunks)...)
				assert.Equal(t, wantPerChunk, choicesPerChunk, "choices per chunk of %s (the usage chunk has none)", name)

				chunks := schematest.SSESDKEvents[openai.ChatCompletionChunk](t, stream)
				var acc openai.ChatCompletionAccumulator
				for i, c := range chunks {
					require.True(t, acc.AddChunk(c), "accumulate chunk %d of %s", i, name)
				}
				var want openai.ChatCompletion
				require.NoError(t, json.Unmarshal(final, &want), "SDK parse of %s", name)
				wantView, gotView := sseViewChat(want), sseViewChat(acc.ChatCompletion)
				wantUsage := map[bool][6]int64{true: wantView.Usage}[tt.wantUsage] // zero when usage is not streamed
				assert.Equal(t, wantUsage, gotView.Usage, "accumulated usage of %s", name)
				wantView.Usage, gotView.Usage = [6]int64{}, [6]int64{}
				assert.Equal(t, wantView, gotView, "accumulated stream of %s", name)
			})
		}
	}
}

func TestChatSSEChunkShapes(t *testing.T) {
	final := []byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","service_tier":"default",` +
		`"choices":[{"index":0,"message":{"role":"assistant","content":"hi","tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{}"}}]},"finish_reason":"tool_calls"}],` +
		`"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}`)
	stream, err := SSE(final, []byte(`{"include_usage":true}`))
	require.NoError(t, err, "ChatSSE")
	env := `"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","service_tier":"default"`
	want := "" +
		`data: {` + env + `,"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"usage":null}` + "\n\n" +
		`data: {` + env + `,"choices":[{"index":0,"delta":{"content":"hi"},"logprobs":null,"finish_reason":null}],"usage":null}` + "\n\n" +
		`data: {` + env + `,"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"f","arguments":""}}]},"logprobs":null,"finish_reason":null}],"usage":null}` + "\n\n" +
		`data: {` + env + `,"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{}"}}]},"logprobs":null,"finish_reason":null}],"usage":null}` + "\n\n" +
		`data: {` + env + `,"choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"tool_calls"}],"usage":null}` + "\n\n" +
		`data: {` + env + `,"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}` + "\n\n" +
		"data: [DONE]\n\n"
	assert.Equal(t, want, string(stream), "chunks of a tool-call answer")
}
