package e2e

import (
	"context"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	configv1 "github.com/codeinterp/codeinterp/api/codeinterp/config/v1"
	"github.com/codeinterp/codeinterp/test/e2e/fakemodel"
)

// askMessagesTools is a Messages request with the code_execution_20250825 tool (bash and the
// text editor).
func askMessagesTools(text string) anthropic.MessageNewParams {
	p := askMessages(text)
	p.Tools = []anthropic.ToolUnionParam{{OfCodeExecutionTool20250825: &anthropic.CodeExecutionTool20250825Param{}}}
	return p
}

// TestMessagesTools runs the code_execution_20250825 tool through both fronts: the model's
// bash and text editor calls run in the request's container, they share its files, the model
// reads what the native tools give it, and the client gets the native result blocks, plainly
// and as a stream.
func TestMessagesTools(t *testing.T) {
	env := NewEnv(t, EnvOptions{})
	env.Fronts(t, func(t *testing.T, s *Stack) {
		var plain *anthropic.Message
		t.Run("plain", func(t *testing.T) { plain = testMessagesTools(t, s, false) })
		t.Run("stream", func(t *testing.T) {
			streamed := testMessagesTools(t, s, true)
			if plain == nil || streamed == nil {
				return
			}
			assert.Equal(t, toolBlockSummary(plain), toolBlockSummary(streamed), "the accumulated stream has the plain answer's blocks")
		})
		t.Run("continued in its container", func(t *testing.T) { testMessagesToolsContinued(t, s) })
		t.Run("timeout", func(t *testing.T) { testMessagesToolsTimeout(t, s) })
		t.Run("a bash session", func(t *testing.T) { testMessagesBashSession(t, s) })
	})
}

// testMessagesTools scripts three rounds of bash and text editor calls and checks what the
// model and the client got; it returns the client's message.
func testMessagesTools(t *testing.T, s *Stack, stream bool) *anthropic.Message {
	mark := len(s.Model.RequestsTo(messagesPath))
	s.Model.Enqueue(messagesPath,
		fakemodel.JSON(fakemodel.AnthropicMessage("claude-e2e", fakemodel.Usage{Input: 10, Output: 5},
			fakemodel.ToolUse("toolu_b1", "bash_code_execution", map[string]any{"command": `printf 'alpha\n"beta" ✓\n' > notes.txt && echo written`}),
			fakemodel.ToolUse("toolu_v1", "text_editor_code_execution", map[string]any{"command": "view", "path": "notes.txt"}),
			fakemodel.ToolUse("toolu_v2", "text_editor_code_execution", map[string]any{"command": "view", "path": "missing.txt"}))),
		fakemodel.JSON(fakemodel.AnthropicMessage("claude-e2e", fakemodel.Usage{Input: 20, Output: 5},
			fakemodel.ToolUse("toolu_c1", "text_editor_code_execution", map[string]any{"command": "create", "path": "app.py", "file_text": "print('hi')\n"}),
			fakemodel.ToolUse("toolu_r1", "text_editor_code_execution", map[string]any{"command": "str_replace", "path": "app.py", "old_str": "hi", "new_str": "hé ✓"}),
			fakemodel.ToolUse("toolu_b2", "bash_code_execution", map[string]any{"command": "python3 app.py; cat notes.txt | wc -l; ls /nope"}))),
		fakemodel.JSON(fakemodel.AnthropicMessage("claude-e2e", fakemodel.Usage{Input: 30, Output: 3}, fakemodel.Text("Done."))),
	)
	t.Cleanup(func() { assert.Zero(t, s.Model.Pending(), "every scripted answer was used") })

	client := s.anthropicClient()
	ctx := context.Background()
	params := askMessagesTools("Write some files.")
	var msg *anthropic.Message
	if stream {
		st := client.Messages.NewStreaming(ctx, params)
		acc := anthropic.Message{}
		for st.Next() {
			require.NoError(t, acc.Accumulate(st.Current()), "accumulate %s", st.Current().Type)
		}
		require.NoError(t, st.Err(), "the stream")
		require.NoError(t, st.Close(), "close the stream")
		msg = &acc
	} else {
		var err error
		msg, err = client.Messages.New(ctx, params)
		require.NoError(t, err, "POST /v1/messages")
	}

	sent := s.Model.RequestsTo(messagesPath)[mark:]
	require.Len(t, sent, 3, "three rounds")
	tools := gjson.GetBytes(sent[0].Body, "tools.#.name").Array()
	require.Len(t, tools, 2, "the model sees two tools: %s", sent[0].Body)
	assert.Equal(t, "bash_code_execution", tools[0].String(), "bash")
	assert.Equal(t, "text_editor_code_execution", tools[1].String(), "the text editor")
	r1 := gjson.GetBytes(sent[1].Body, "messages.@reverse.0.content").Array()
	require.Len(t, r1, 3, "round 1: three tool results: %s", sent[1].Body)
	assert.Equal(t, "written\n", r1[0].Get("content").String(), "bash: the model reads the command's output")
	assert.Equal(t, "     1\talpha\n     2\t\"beta\" ✓", r1[1].Get("content").String(), "view: the file bash wrote, numbered")
	assert.Equal(t, "[error: file_not_found: The file missing.txt does not exist.]", r1[2].Get("content").String(), "view of a missing file")
	assert.True(t, r1[2].Get("is_error").Bool(), "is an error")
	r2 := gjson.GetBytes(sent[2].Body, "messages.@reverse.0.content").Array()
	require.Len(t, r2, 3, "round 2: three tool results: %s", sent[2].Body)
	assert.Equal(t, "[file created]", r2[0].Get("content").String(), "create")
	assert.Equal(t, "[replaced; the changed lines now read:]\nprint('hé ✓')", r2[1].Get("content").String(), "str_replace")
	failed := r2[2].Get("content").String()
	assert.Contains(t, failed, "hé ✓\n2\n", "bash: the edited script ran, and saw bash's file")
	assert.Contains(t, failed, "[stderr]\n", "the failing command's stderr")
	assert.Contains(t, failed, "[return code 2]", "and its return code")
	assert.True(t, r2[2].Get("is_error").Bool(), "a failed command is an error for the model")

	require.Len(t, msg.Content, 13, "6 × (server_tool_use, result), text: %s", msg.RawJSON())
	assert.Equal(t, "bash_code_execution", msg.Content[0].Name, "bash's server_tool_use")
	assert.Equal(t, "srvtoolu_b1", msg.Content[0].ID, "its id")
	b1 := msg.Content[1].AsBashCodeExecutionToolResult()
	assert.Equal(t, "bash_code_execution_result", b1.Content.Type, "bash result")
	assert.Equal(t, "written\n", b1.Content.Stdout, "bash stdout")
	v1 := msg.Content[3].AsTextEditorCodeExecutionToolResult()
	assert.Equal(t, "text_editor_code_execution_view_result", v1.Content.Type, "view result")
	assert.Equal(t, "alpha\n\"beta\" ✓\n", v1.Content.Content, "view content")
	assert.Equal(t, int64(2), v1.Content.NumLines, "num_lines")
	assert.Equal(t, int64(2), v1.Content.TotalLines, "total_lines")
	v2 := msg.Content[5].AsTextEditorCodeExecutionToolResult()
	assert.EqualValues(t, "file_not_found", v2.Content.ErrorCode, "missing file")
	assert.Equal(t, "The file missing.txt does not exist.", v2.Content.ErrorMessage, "its message")
	c1 := msg.Content[7].AsTextEditorCodeExecutionToolResult()
	assert.Equal(t, "text_editor_code_execution_create_result", c1.Content.Type, "create result")
	assert.False(t, c1.Content.IsFileUpdate, "a new file")
	r := msg.Content[9].AsTextEditorCodeExecutionToolResult()
	assert.Equal(t, "text_editor_code_execution_str_replace_result", r.Content.Type, "str_replace result")
	assert.Equal(t, []string{"print('hé ✓')"}, r.Content.Lines, "the changed lines")
	assert.Equal(t, int64(1), r.Content.OldStart, "old_start")
	b2 := msg.Content[11].AsBashCodeExecutionToolResult()
	assert.Equal(t, "hé ✓\n2\n", b2.Content.Stdout, "the failing command's stdout")
	assert.Contains(t, b2.Content.Stderr, "nope", "its stderr")
	assert.Equal(t, int64(2), b2.Content.ReturnCode, "its return code")
	assert.Equal(t, "Done.", msg.Content[12].Text, "the final text")
	assert.NotEmpty(t, msg.Container.ID, "the container is named")
	assert.Equal(t, anthropic.StopReasonEndTurn, msg.StopReason, "stop reason")
	return msg
}

// testMessagesToolsTimeout has bash run past the analyst profile's run timeout: the command is
// stopped and the client gets execution_time_exceeded.
func testMessagesToolsTimeout(t *testing.T, s *Stack) {
	mark := len(s.Model.RequestsTo(messagesPath))
	s.Model.Enqueue(messagesPath,
		fakemodel.JSON(fakemodel.AnthropicMessage("claude-e2e", fakemodel.Usage{Input: 10, Output: 5},
			fakemodel.ToolUse("toolu_t1", "bash_code_execution", map[string]any{"command": "echo started; sleep 60"}))),
		fakemodel.JSON(fakemodel.AnthropicMessage("claude-e2e", fakemodel.Usage{Input: 20, Output: 3}, fakemodel.Text("Too slow."))),
	)
	t.Cleanup(func() { assert.Zero(t, s.Model.Pending(), "every scripted answer was used") })
	client := anthropic.NewClient(
		option.WithBaseURL(s.Front.URL()+"/analyst/"),
		option.WithHeader("x-api-key", messagesAPIKey),
		option.WithMaxRetries(0),
		option.WithHTTPClient(&http.Client{Transport: s.transport}),
	)
	start := time.Now()
	msg, err := client.Messages.New(context.Background(), askMessagesTools("Wait a minute."))
	require.NoError(t, err, "the request")
	assert.Less(t, time.Since(start), 30*time.Second, "the command is stopped at the run timeout")
	require.Len(t, msg.Content, 3, "server_tool_use, result, text: %s", msg.RawJSON())
	res := msg.Content[1].AsBashCodeExecutionToolResult()
	assert.Equal(t, "bash_code_execution_tool_result_error", res.Content.Type, "an error block")
	assert.EqualValues(t, "execution_time_exceeded", res.Content.ErrorCode, "execution_time_exceeded")
	sent := s.Model.RequestsTo(messagesPath)[mark:]
	require.Len(t, sent, 2, "the call and the answer")
	told := gjson.GetBytes(sent[1].Body, "messages.@reverse.0.content.0.content").String()
	assert.Contains(t, told, "timed out", "the model is told")
	assert.Contains(t, told, "the shell session was reset", "and that its shell session is a new one: %s", told)
}

// toolBlockSummary is what two answers of the same script share: each block's type, text, id,
// input and result.
func toolBlockSummary(m *anthropic.Message) []string {
	var out []string
	for _, b := range m.Content {
		// Container file ids are the container's own: two answers in two containers name the same
		// files by different ids.
		content := cfileID.ReplaceAllString(gjson.Get(b.RawJSON(), "content").Raw, "cfile_…")
		out = append(out, b.Type+"|"+b.Text+"|"+b.ID+"|"+string(b.Input)+"|"+content)
	}
	return out
}

// cfileID matches a container file id.
var cfileID = regexp.MustCompile(`cfile_[0-9a-f]{32}`)

// testMessagesToolsContinued continues a code_execution_20250825 conversation in its
// container: the model gets the replayed calls and their results as the native tools gave
// them, and a file the first request wrote is there for the second.
func testMessagesToolsContinued(t *testing.T, s *Stack) {
	mark := len(s.Model.RequestsTo(messagesPath))
	s.Model.Enqueue(messagesPath,
		fakemodel.JSON(fakemodel.AnthropicMessage("claude-e2e", fakemodel.Usage{Input: 10, Output: 5},
			fakemodel.ToolUse("toolu_k1", "text_editor_code_execution", map[string]any{"command": "create", "path": "kept.txt", "file_text": "kept\n"}))),
		fakemodel.JSON(fakemodel.AnthropicMessage("claude-e2e", fakemodel.Usage{Input: 20, Output: 3}, fakemodel.Text("Saved."))),
		fakemodel.JSON(fakemodel.AnthropicMessage("claude-e2e", fakemodel.Usage{Input: 30, Output: 5},
			fakemodel.ToolUse("toolu_k2", "bash_code_execution", map[string]any{"command": "cat kept.txt"}))),
		fakemodel.JSON(fakemodel.AnthropicMessage("claude-e2e", fakemodel.Usage{Input: 40, Output: 3}, fakemodel.Text("Still there."))),
	)
	t.Cleanup(func() { assert.Zero(t, s.Model.Pending(), "every scripted answer was used") })
	client := s.anthropicClient()
	ctx := context.Background()
	params := askMessagesTools("Save a file.")
	first, err := client.Messages.New(ctx, params)
	require.NoError(t, err, "the first request")
	require.NotEmpty(t, first.Container.ID, "the first answer names its container")

	params.Messages = append(params.Messages, first.ToParam(), anthropic.NewUserMessage(anthropic.NewTextBlock("Is it there?")))
	params.Container = anthropic.MessageCreateParamsContainerUnion{OfString: anthropic.String(first.Container.ID)}
	second, err := client.Messages.New(ctx, params)
	require.NoError(t, err, "the continuation")

	sent := s.Model.RequestsTo(messagesPath)[mark:]
	require.Len(t, sent, 4, "two requests of two rounds each")
	msgs := gjson.GetBytes(sent[2].Body, "messages").Array()
	require.Len(t, msgs, 5, "user, the replayed call, its result, the replayed text, user: %s", sent[2].Body)
	assert.Equal(t, "text_editor_code_execution", msgs[1].Get("content.0.name").String(), "the replayed call is the model's tool")
	assert.Equal(t, "[file created]", msgs[2].Get("content.0.content").String(), "its result as the model read it")
	require.Len(t, second.Content, 3, "server_tool_use, result, text: %s", second.RawJSON())
	assert.Equal(t, "kept\n", second.Content[1].AsBashCodeExecutionToolResult().Content.Stdout, "the file lived on in the container")
	assert.Equal(t, first.Container.ID, second.Container.ID, "the same container")
}

// testMessagesBashSession runs bash commands in three rounds of one request and a later
// request in the same container: the working directory, an exported variable and a function
// carry over as in one shell session; a failing command's return code and stderr come apart.
func testMessagesBashSession(t *testing.T, s *Stack) {
	mark := len(s.Model.RequestsTo(messagesPath))
	s.Model.Enqueue(messagesPath,
		fakemodel.JSON(fakemodel.AnthropicMessage("claude-e2e", fakemodel.Usage{Input: 10, Output: 5},
			fakemodel.ToolUse("toolu_s1", "bash_code_execution", map[string]any{"command": `mkdir -p work && cd work && export STAGE=one && greet() { echo "hello $1"; }`}))),
		fakemodel.JSON(fakemodel.AnthropicMessage("claude-e2e", fakemodel.Usage{Input: 20, Output: 5},
			fakemodel.ToolUse("toolu_s2", "bash_code_execution", map[string]any{"command": `pwd; echo "$STAGE"; greet you; ls /nowhere`}))),
		fakemodel.JSON(fakemodel.AnthropicMessage("claude-e2e", fakemodel.Usage{Input: 30, Output: 3}, fakemodel.Text("Set up."))),
		fakemodel.JSON(fakemodel.AnthropicMessage("claude-e2e", fakemodel.Usage{Input: 40, Output: 5},
			fakemodel.ToolUse("toolu_s3", "bash_code_execution", map[string]any{"command": `pwd; sh -c 'echo "child sees $STAGE"'`}))),
		fakemodel.JSON(fakemodel.AnthropicMessage("claude-e2e", fakemodel.Usage{Input: 50, Output: 3}, fakemodel.Text("Still there."))),
	)
	t.Cleanup(func() { assert.Zero(t, s.Model.Pending(), "every scripted answer was used") })
	client := s.anthropicClient()
	ctx := context.Background()
	params := askMessagesTools("Set up a shell.")
	first, err := client.Messages.New(ctx, params)
	require.NoError(t, err, "the first request")
	require.Len(t, first.Content, 5, "2 × (server_tool_use, result), text: %s", first.RawJSON())
	read := first.Content[3].AsBashCodeExecutionToolResult().Content
	assert.Equal(t, "/mnt/data/work\none\nhello you\n", read.Stdout, "cd, export and the function carried over to the next round")
	assert.Contains(t, read.Stderr, "nowhere", "stderr apart")
	assert.Equal(t, int64(2), read.ReturnCode, "the failing command's return code")

	params.Messages = append(params.Messages, first.ToParam(), anthropic.NewUserMessage(anthropic.NewTextBlock("Again?")))
	params.Container = anthropic.MessageCreateParamsContainerUnion{OfString: anthropic.String(first.Container.ID)}
	second, err := client.Messages.New(ctx, params)
	require.NoError(t, err, "the continuation")
	require.Len(t, second.Content, 3, "server_tool_use, result, text: %s", second.RawJSON())
	assert.Equal(t, "/mnt/data/work\nchild sees one\n", second.Content[1].AsBashCodeExecutionToolResult().Content.Stdout,
		"the session lives on in the container for the next request")
	sent := s.Model.RequestsTo(messagesPath)[mark:]
	require.Len(t, sent, 5, "two requests")
	assert.Contains(t, gjson.GetBytes(sent[2].Body, "messages.@reverse.0.content.0.content").String(), "[return code 2]", "the model reads the return code")
}

// TestMessagesToolsLimits runs the native limits through both fronts, with a profile that runs
// two calls a turn: an image viewed by type, a command whose output is beyond what the tool
// returns (output_file_too_large), and a third call of the turn (too_many_requests).
func TestMessagesToolsLimits(t *testing.T) {
	env := NewEnv(t, EnvOptions{Configure: func(c *configv1.Config) {
		if c.DefaultProfile == nil {
			c.DefaultProfile = &configv1.Profile{}
		}
		c.DefaultProfile.MaxCallsPerTurn = 2
	}})
	env.Fronts(t, func(t *testing.T, s *Stack) {
		mark := len(s.Model.RequestsTo(messagesPath))
		s.Model.Enqueue(messagesPath,
			fakemodel.JSON(fakemodel.AnthropicMessage("claude-e2e", fakemodel.Usage{Input: 10, Output: 5},
				fakemodel.ToolUse("toolu_i1", "bash_code_execution", map[string]any{"command": `printf '\211PNG\r\n\032\nfake' > pic.png && head -c 3000000 /dev/zero`}),
				fakemodel.ToolUse("toolu_i2", "text_editor_code_execution", map[string]any{"command": "view", "path": "pic.png"}),
				fakemodel.ToolUse("toolu_i3", "bash_code_execution", map[string]any{"command": "echo third"}))),
			fakemodel.JSON(fakemodel.AnthropicMessage("claude-e2e", fakemodel.Usage{Input: 20, Output: 3}, fakemodel.Text("Limits."))),
		)
		t.Cleanup(func() { assert.Zero(t, s.Model.Pending(), "every scripted answer was used") })
		client := s.anthropicClient()
		msg, err := client.Messages.New(context.Background(), askMessagesTools("Test the limits."))
		require.NoError(t, err, "the request")
		require.Len(t, msg.Content, 7, "3 × (server_tool_use, result), text: %s", msg.RawJSON())
		big := msg.Content[1].AsBashCodeExecutionToolResult().Content
		assert.EqualValues(t, "output_file_too_large", big.ErrorCode, "output beyond the tool's limit: %s", msg.Content[1].RawJSON())
		img := msg.Content[3].AsTextEditorCodeExecutionToolResult().Content
		assert.EqualValues(t, "image", img.FileType, "an image by type: %s", msg.Content[3].RawJSON())
		assert.Equal(t, "iVBORw0KGgpmYWtl", img.Content, "its bytes as base64")
		third := msg.Content[5].AsBashCodeExecutionToolResult().Content
		assert.EqualValues(t, "too_many_requests", third.ErrorCode, "a call beyond the turn's limit: %s", msg.Content[5].RawJSON())

		sent := s.Model.RequestsTo(messagesPath)[mark:]
		require.Len(t, sent, 2, "one round and the answer")
		results := gjson.GetBytes(sent[1].Body, "messages.@reverse.0.content").Array()
		require.Len(t, results, 3, "three tool results")
		assert.Contains(t, results[0].Get("content").String(), "output_file_too_large", "the model is told")
		assert.Contains(t, results[1].Get("content").String(), "[image file, 12 bytes", "the model reads what the view is")
		assert.Contains(t, results[2].Get("content").String(), "not run", "and why the third did not run")
	})
}
