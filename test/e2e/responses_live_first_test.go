package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/codeinterp/codeinterp/test/e2e/fakemodel"
)

// TestResponsesLiveFirstAnswer: a first answer that streams reaches the client as the model
// writes it, through both fronts: the client's stream starts (response.created, named as the
// final answer is, with the client's tools) and the first call's code arrives while the model
// still holds the rest of its arguments, and the accumulated stream is the plain answer.
func TestResponsesLiveFirstAnswer(t *testing.T) {
	env := NewEnv(t, EnvOptions{})
	pieces := []string{`{"code":"y = 2`, `0 + 22\n`, `print(y)"}`}
	env.Fronts(t, func(t *testing.T, s *Stack) {
		args, created := newLiveRelease(t), newLiveRelease(t)
		usage := fakemodel.Usage{Input: 10, Output: 3}
		first := liveStream(t, fakemodel.ResponsesStream(testModel, usage,
			fakemodel.FunctionCall("code_interpreter", "call_1", strings.Join(pieces, ""))),
			args.ch, args.ch, 100*time.Millisecond, pieces...)
		// The first call's events wait until the client has read response.created.
		for i := range first {
			if first[i].Name == "response.output_item.added" {
				first[i].Wait = created.ch
			}
		}
		s.Model.Enqueue("/v1/responses",
			fakemodel.SSE(first...),
			fakemodel.JSON(fakemodel.Responses(testModel, usage, fakemodel.Message("It printed 42."))))
		got := readStream(t, s, t.Context(), "sk-live-first", "/v1/responses",
			`{"model":"m","stream":true,"input":"compute","tools":[{"type":"code_interpreter","container":{"type":"auto"}}]}`, true,
			func(line string) bool {
				switch {
				case strings.HasPrefix(line, `data: {"type":"response.created"`):
					created.read()
				case isLine(line, "response.code_interpreter_call_code.delta", 0):
					args.read()
				}
				return false
			})
		assert.True(t, created.byClient.Load(), "the client's stream started while the model held its first answer")
		assert.True(t, args.byClient.Load(), "the client read the first call's code while the model held the rest of its arguments")
		assert.Less(t, firstWith(got, "response.code_interpreter_call_code.delta", 0), firstWith(got, "response.code_interpreter_call.interpreting", 0),
			"the code streams before the call is interpreting")
		final := checkResponsesEvents(t, streamEvents(t, got))
		require.Len(t, final.Output, 2, "the call and the message")
		assert.Equal(t, "y = 20 + 22\nprint(y)", final.Output[0].Code, "the call's code")
	})
}
