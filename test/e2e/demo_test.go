package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/codeinterp/codeinterp/internal/demo"
)

// demoScripts returns the shell blocks of the page (a path from the repository root) that talk
// to a running `make run`: those naming its listener and not starting it.
func demoScripts(t *testing.T, page string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", page))
	require.NoError(t, err, "read %s", page)
	var out []string
	for _, m := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(string(b), -1) {
		if strings.Contains(m[1], "127.0.0.1:10000") && !strings.Contains(m[1], "make run") {
			out = append(out, m[1])
		}
	}
	require.NotEmpty(t, out, "%s has commands to run against make run", page)
	return out
}

// readmeRequest is the body of the README's first example, verbatim.
const readmeRequest = `{"model":"gpt-4.1","tools":[{"type":"code_interpreter","container":{"type":"auto"}}],"include":["code_interpreter_call.outputs"],"input":"What is 6*7? Use Python."}`

// TestDemoModel runs the README's first conversation, and the getting-started page's, against the
// demo model `make run` starts when no upstream is given: through both fronts, the real server
// and real sandboxes, on every surface, plain and streamed.
func TestDemoModel(t *testing.T) {
	env := NewEnv(t, EnvOptions{})
	model := &demo.Model{}
	for _, path := range []string{"/v1/responses", "/v1/chat/completions", "/v1/messages"} {
		env.Model.Handle(path, model.ServeHTTP)
	}
	env.Fronts(t, func(t *testing.T, s *Stack) {
		ctx := context.Background()
		t.Run("README curl", func(t *testing.T) {
			resp, err := http.Post(s.Front.URL()+"/v1/responses", "application/json", strings.NewReader(readmeRequest))
			require.NoError(t, err)
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, resp.StatusCode, "answer: %s", body)
			var r responses.Response
			require.NoError(t, json.Unmarshal(body, &r), "answer: %s", body)
			require.Len(t, r.Output, 2, "answer: %s", body)
			call := r.Output[0].AsCodeInterpreterCall()
			assert.Equal(t, "code_interpreter_call", r.Output[0].Type)
			assert.Equal(t, "print(6*7)", call.Code)
			require.Len(t, call.Outputs, 1, "answer: %s", body)
			assert.Equal(t, "42\n", call.Outputs[0].Logs)
			assert.Equal(t, "[demo model] The code ran. Its output:\n\n```\n42\n```", r.OutputText())
		})
		client := s.Client("demo")
		tool := responses.ToolUnionParam{OfCodeInterpreter: &responses.ToolCodeInterpreterParam{
			Container: responses.ToolCodeInterpreterContainerUnionParam{OfCodeInterpreterToolAuto: &responses.ToolCodeInterpreterContainerCodeInterpreterContainerAutoParam{}}}}
		t.Run("streamed chart, then state kept in the container", func(t *testing.T) {
			stream := client.Responses.NewStreaming(ctx, responses.ResponseNewParams{
				Model:   "gpt-4.1",
				Tools:   []responses.ToolUnionParam{tool},
				Include: []responses.ResponseIncludable{responses.ResponseIncludableCodeInterpreterCallOutputs},
				Input:   responses.ResponseNewParamsInputUnion{OfString: openai.String("Draw a chart of 3, 1, 4, 1, 5")},
			})
			var final responses.Response
			for stream.Next() {
				if ev := stream.Current(); ev.Type == "response.completed" {
					final = ev.Response
				}
			}
			require.NoError(t, stream.Err())
			require.Len(t, final.Output, 2)
			call := final.Output[0].AsCodeInterpreterCall()
			var image bool
			for _, o := range call.Outputs {
				image = image || o.Type == "image" && strings.HasPrefix(o.URL, "data:image/png;base64,")
			}
			assert.True(t, image, "the chart is an image output: %+v", call.Outputs)
			assert.Contains(t, final.OutputText(), "sum 14")

			r, err := client.Responses.New(ctx, responses.ResponseNewParams{
				Model: "gpt-4.1",
				Tools: []responses.ToolUnionParam{{OfCodeInterpreter: &responses.ToolCodeInterpreterParam{
					Container: responses.ToolCodeInterpreterContainerUnionParam{OfString: openai.String(call.ContainerID)}}}},
				Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("```python\nprint(len(values))\n```")},
			})
			require.NoError(t, err)
			assert.Contains(t, r.OutputText(), "```\n5\n```", "the chart's variables live on in container %s", call.ContainerID)
		})
		t.Run("chat", func(t *testing.T) {
			c, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
				Model:    "gpt-4.1",
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("What is 2**10?")},
			}, withChatTool())
			require.NoError(t, err)
			require.Len(t, c.Choices, 1)
			assert.Contains(t, c.Choices[0].Message.Content, "```\n1024\n```")
		})
		// The blocks are independent: they run side by side (each a parallel subtest, the
		// longest first), and all have ended when this subtest has.
		t.Run("the docs' commands", func(t *testing.T) {
			type block struct {
				page   string
				i      int
				script string
			}
			var blocks []block
			for _, page := range []string{"README.md", "docs/getting-started.md"} {
				for i, script := range demoScripts(t, page) {
					blocks = append(blocks, block{page, i, script})
				}
			}
			sort.SliceStable(blocks, func(a, b int) bool { return len(blocks[a].script) > len(blocks[b].script) })
			for _, b := range blocks {
				page, i, script := b.page, b.i, b.script
				t.Run(fmt.Sprintf("%s block %d", page, i), func(t *testing.T) {
					t.Parallel()
					script = strings.ReplaceAll(script, "http://127.0.0.1:10000", s.Front.URL())
					cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script)
					cmd.Dir = filepath.Join("..", "..")
					out, err := cmd.CombinedOutput()
					require.NoError(t, err, "%s, block %d:\n%s\n%s", page, i, script, out)
					assert.Contains(t, string(out), "[demo model]", "%s, block %d: the model's answer", page, i)
					if strings.Contains(script, "curl") {
						assert.Contains(t, string(out), `"logs":"42\n"`, "%s, block %d: curl prints the call's logs", page, i)
					}
					if strings.Contains(script, "input=\"What is 6*7? Use Python.\"") {
						assert.Contains(t, string(out), `code_interpreter_call [OutputLogs(logs='42\n', type='logs')]`, "%s, block %d: the SDK prints the call", page, i)
					}
				})
			}
		})
		t.Run("messages bash", func(t *testing.T) {
			ac := s.anthropicClient()
			m, err := ac.Messages.New(ctx, anthropic.MessageNewParams{
				Model:     "claude-sonnet-4-5",
				MaxTokens: 1024,
				Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("```bash\necho hello from $(uname -s)\n```"))},
				Tools:     []anthropic.ToolUnionParam{{OfCodeExecutionTool20250825: &anthropic.CodeExecutionTool20250825Param{}}},
			})
			require.NoError(t, err)
			types := make([]string, len(m.Content))
			for i, b := range m.Content {
				types[i] = b.Type
			}
			assert.Equal(t, []string{"server_tool_use", "bash_code_execution_tool_result", "text"}, types)
			assert.Contains(t, m.Content[2].Text, "hello from Linux")
		})
	})
}
