package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3/responses"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/test/e2e/fakemodel"
)

// liveStream returns the events of a ResponsesStream with its function_call_arguments.delta
// split into a delta per piece (every piece after the first waits for args, then delay) and
// its response.completed waiting for done.
func liveStream(t *testing.T, evs []fakemodel.Event, args, done <-chan struct{}, delay time.Duration, pieces ...string) []fakemodel.Event {
	t.Helper()
	out := splitDeltas(t, evs, "response.function_call_arguments.delta", args, delay, pieces...)
	for i := range out {
		if out[i].Name == "response.completed" {
			out[i].Wait = done
		}
	}
	return out
}

// streamEvents decodes the data lines of a Responses stream as the SDK's events.
func streamEvents(t *testing.T, got []arrival) []responses.ResponseStreamEventUnion {
	t.Helper()
	var evs []responses.ResponseStreamEventUnion
	for _, a := range got {
		if data, ok := strings.CutPrefix(a.line, "data: "); ok {
			var ev responses.ResponseStreamEventUnion
			require.NoError(t, json.Unmarshal([]byte(data), &ev), "event %s", data)
			evs = append(evs, ev)
		}
	}
	return evs
}

// firstWith returns the index of the first arrival that is a data line of type typ about
// output index idx, or -1.
func firstWith(got []arrival, typ string, idx int) int {
	for i, a := range got {
		if isLine(a.line, typ, idx) {
			return i
		}
	}
	return -1
}

// isLine reports whether line is a data line of type typ about output index idx.
func isLine(line, typ string, idx int) bool {
	data, ok := strings.CutPrefix(line, "data: ")
	return ok && gjson.Get(data, "type").String() == typ && gjson.Get(data, "output_index").Int() == int64(idx)
}

// TestResponsesLiveCodeCall: a streamed follow-up's call of the internal function reaches the
// client as the model writes it, through both fronts: its code arrives in code.delta events
// while the model still holds the rest of its arguments (before the upstream stream ended,
// and before the call is interpreting), the text after the call in the same answer arrives
// while the model still holds its answer's end, and the accumulated stream is the plain
// answer, the call's item id included.
func TestResponsesLiveCodeCall(t *testing.T) {
	env := NewEnv(t, EnvOptions{})
	pieces := []string{`{"code":"x = 6`, ` * 7\nprint(`, `\"x =\", x)"}`}
	const code = "x = 6 * 7\nprint(\"x =\", x)"
	env.Fronts(t, func(t *testing.T, s *Stack) {
		args, after := newLiveRelease(t), newLiveRelease(t)
		usage := fakemodel.Usage{Input: 10, Output: 3}
		second := liveStream(t, fakemodel.ResponsesStream(testModel, usage,
			fakemodel.FunctionCall("code_interpreter", "call_2", strings.Join(pieces, "")), fakemodel.Message("It printed x = 42.")),
			args.ch, after.ch, 100*time.Millisecond, pieces...)
		s.Model.Enqueue("/v1/responses",
			fakemodel.JSON(fakemodel.Responses(testModel, usage, fakemodel.FunctionCall("code_interpreter", "call_1", `{"code":"print(1)"}`))),
			fakemodel.SSE(second...),
			fakemodel.JSON(fakemodel.Responses(testModel, usage, fakemodel.Message("Done."))))
		// Output indexes: 0 the first call, 1 the second (streamed), 2 the text after it, 3 the last answer.
		got := readStream(t, s, t.Context(), "sk-live-code", "/v1/responses",
			`{"model":"m","stream":true,"input":"compute","include":["code_interpreter_call.outputs"],"tools":[{"type":"code_interpreter","container":{"type":"auto"}}]}`, true,
			func(line string) bool {
				switch {
				case isLine(line, "response.code_interpreter_call_code.delta", 1):
					args.read()
				case isLine(line, "response.output_text.delta", 2):
					after.read()
				}
				return false
			})

		assert.True(t, args.byClient.Load(), "the client read the call's code while the model held the rest of its arguments")
		assert.True(t, after.byClient.Load(), "the client read the text after the call while the model held its answer's end")
		codeDelta := firstWith(got, "response.code_interpreter_call_code.delta", 1)
		interpreting := firstWith(got, "response.code_interpreter_call.interpreting", 1)
		require.GreaterOrEqual(t, codeDelta, 0, "code deltas of the streamed call")
		assert.Less(t, codeDelta, interpreting, "the code streams before the call is interpreting")
		assert.Less(t, firstWith(got, "response.output_text.delta", 2), interpreting, "the text after the call streams before the call runs")

		evs := streamEvents(t, got)
		var deltas []string
		for _, ev := range evs {
			if ev.Type == "response.code_interpreter_call_code.delta" && ev.OutputIndex == 1 {
				deltas = append(deltas, ev.Delta)
			}
		}
		assert.Equal(t, []string{"x = 6", " * 7\nprint(", "\"x =\", x)"}, deltas, "the code arrives as the arguments did")
		final := checkResponsesEvents(t, evs)
		require.Len(t, final.Output, 4, "two calls and two messages")
		assert.Equal(t, code, final.Output[1].Code, "the streamed call's code")
		assert.Equal(t, "completed", string(final.Output[1].Status), "the streamed call ran")
		assert.Contains(t, final.Output[1].Outputs[0].Logs, "x = 42", "the streamed call's output")
		assert.Equal(t, "It printed x = 42.", outputText(final.Output[2]), "the text after the call")
	})
}
