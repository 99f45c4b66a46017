package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
	"google.golang.org/protobuf/types/known/durationpb"

	configv1 "github.com/codeinterp/codeinterp/api/codeinterp/config/v1"
	"github.com/codeinterp/codeinterp/pkg/sandbox"
	"github.com/codeinterp/codeinterp/test/e2e/fakemodel"
)

// Issue 24, item 5 end to end: an Anthropic conversation resumed after its container idled out
// goes on, as pydantic-ai, LangChain (reuse_last_container) and Vercel resend the last container
// id. The container is hibernated (its files on disk, its process ended) and restored by its id:
// the file the code wrote is there, and the model is told that the variables did not survive.
// The first request is plain, the resumed one streamed. An unknown container_ id gets
// Anthropic's 404 not_found_error, which the SDK reads as such.
func TestHibernate(t *testing.T) {
	env := NewEnv(t, EnvOptions{Configure: func(c *configv1.Config) {
		c.Sandbox.SessionIdleTtl = durationpb.New(time.Second)
		c.Hibernation = &configv1.Hibernation{Dir: filepath.Join(t.TempDir(), "hibernation")}
	}})
	env.Fronts(t, func(t *testing.T, s *Stack) {
		t.Run("restored after idle", func(t *testing.T) { testHibernateRestored(t, s) })
		t.Run("an unknown container is not found", func(t *testing.T) { testHibernateUnknown(t, s) })
	})
}

func testHibernateRestored(t *testing.T, s *Stack) {
	mark := len(s.Model.RequestsTo(messagesPath))
	s.Model.Enqueue(messagesPath,
		fakemodel.JSON(fakemodel.AnthropicMessage("claude-e2e", fakemodel.Usage{Input: 10, Output: 5},
			fakemodel.ToolUse("toolu_h1", "code_execution", map[string]any{
				"code": "notes = 'kept in memory'\nopen('/mnt/data/notes.txt', 'w').write('kept on disk')\nprint('saved')",
			}))),
		fakemodel.JSON(fakemodel.AnthropicMessage("claude-e2e", fakemodel.Usage{Input: 20, Output: 3}, fakemodel.Text("Saved."))),
		fakemodel.JSON(fakemodel.AnthropicMessage("claude-e2e", fakemodel.Usage{Input: 30, Output: 5},
			fakemodel.ToolUse("toolu_h2", "code_execution", map[string]any{
				"code": "print(open('/mnt/data/notes.txt').read(), 'notes' in globals())",
			}))),
		fakemodel.JSON(fakemodel.AnthropicMessage("claude-e2e", fakemodel.Usage{Input: 40, Output: 3}, fakemodel.Text("The file is there."))),
	)
	t.Cleanup(func() { assert.Zero(t, s.Model.Pending(), "every scripted answer was used") })
	client := s.anthropicClient()
	ctx := context.Background()
	params := askMessages("Save some notes.")
	first, err := client.Messages.New(ctx, params)
	require.NoError(t, err, "the first request")
	id := first.Container.ID
	require.True(t, strings.HasPrefix(id, "container_"), "a native container id: %q", id)

	require.Eventually(t, func() bool { n, _ := s.Manager.Hibernated(); return n == 1 }, 15*time.Second, 50*time.Millisecond,
		"the container hibernates once idle past its idle time")

	params.Messages = append(params.Messages, first.ToParam(), anthropic.NewUserMessage(anthropic.NewTextBlock("Read them back.")))
	params.Container = anthropic.MessageCreateParamsContainerUnion{OfString: anthropic.String(id)}
	st := client.Messages.NewStreaming(ctx, params)
	second := anthropic.Message{}
	for st.Next() {
		require.NoError(t, second.Accumulate(st.Current()), "accumulate %s", st.Current().Type)
	}
	require.NoError(t, st.Err(), "the resumed request's stream")
	require.NoError(t, st.Close(), "close the stream")

	require.Len(t, second.Content, 3, "server_tool_use, result, text: %s", second.RawJSON())
	assert.Equal(t, "kept on disk False\n", second.Content[1].AsCodeExecutionToolResult().Content.Stdout,
		"the file is back, the variable is not")
	assert.Equal(t, id, second.Container.ID, "the same container")
	n, _ := s.Manager.Hibernated()
	assert.Zero(t, n, "restored: no longer hibernated")

	sent := s.Model.RequestsTo(messagesPath)[mark:]
	require.Len(t, sent, 4, "two requests of two rounds each")
	result := gjson.GetBytes(sent[3].Body, "messages.@reverse.0.content.0.content").String()
	assert.Contains(t, result, "kept on disk", "the model reads the output: %s", result)
	assert.Contains(t, result, sandbox.RestoredNote, "and is told what did not survive: %s", result)
	assert.NotContains(t, gjson.GetBytes(sent[1].Body, "messages.@reverse.0.content.0.content").String(), "restored",
		"a container never hibernated says nothing")
}

func testHibernateUnknown(t *testing.T, s *Stack) {
	params := askMessages("Go on.")
	params.Container = anthropic.MessageCreateParamsContainerUnion{OfString: anthropic.String("container_011CWHQB57xVregfCMPrKgew")}
	client := s.anthropicClient()
	_, err := client.Messages.New(context.Background(), params)
	assertAnthropicNotFound(t, err, "an unknown container_ id")
}
