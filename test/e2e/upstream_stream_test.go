package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/codeinterp/codeinterp/test/e2e/fakemodel"
)

// splitDeltas returns the events of a ResponsesStream with its events named name (a *.delta
// whose delta the pieces make) each split into a delta per piece; every piece after the first
// waits for release, then delay.
func splitDeltas(t *testing.T, evs []fakemodel.Event, name string, release <-chan struct{}, delay time.Duration, pieces ...string) []fakemodel.Event {
	t.Helper()
	var out []fakemodel.Event
	for _, ev := range evs {
		if ev.Name != name {
			out = append(out, ev)
			continue
		}
		var fields map[string]any
		require.NoError(t, json.Unmarshal([]byte(ev.Data), &fields))
		require.Equal(t, strings.Join(pieces, ""), fields["delta"], "the pieces make the delta")
		for i, p := range pieces {
			fields["delta"] = p
			data, err := json.Marshal(fields)
			require.NoError(t, err)
			d := fakemodel.Event{Name: ev.Name, Data: string(data)}
			if i > 0 {
				d.Wait, d.Delay = release, delay
			}
			out = append(out, d)
		}
	}
	return out
}

// TestStreamedFollowUp: for a client that streams, the loop's follow-up asks the model for a
// stream and the model's text reaches the client delta by delta as the model sends it, through
// both fronts: the client reads the first text delta while the model still holds the rest of
// its stream, and the accumulated stream is the plain answer.
func TestStreamedFollowUp(t *testing.T) {
	env := NewEnv(t, EnvOptions{})
	pieces := []string{"It ", "printed ", "42."}
	text := strings.Join(pieces, "")
	env.Fronts(t, func(t *testing.T, s *Stack) {
		before := len(s.Model.RequestsTo("/v1/responses"))
		// The model holds the rest of its stream until the client has read the first delta.
		held := newLiveRelease(t)
		usage := fakemodel.Usage{Input: 10, Output: 3}
		s.Model.Enqueue("/v1/responses",
			fakemodel.JSON(fakemodel.Responses(testModel, usage, fakemodel.FunctionCall("code_interpreter", "call_1", `{"code":"print(42)"}`))),
			fakemodel.SSE(splitDeltas(t, fakemodel.ResponsesStream(testModel, usage, fakemodel.Message(text)), "response.output_text.delta", held.ch, 100*time.Millisecond, pieces...)...))
		got := readStream(t, s, t.Context(), "sk-upstream-stream", "/v1/responses",
			`{"model":"m","stream":true,"input":"print 42","tools":[{"type":"code_interpreter","container":{"type":"auto"}}]}`, true,
			func(line string) bool {
				if strings.HasPrefix(line, `data: {"type":"response.output_text.delta"`) {
					held.read()
				}
				return false
			})

		reqs := s.Model.RequestsTo("/v1/responses")
		require.Len(t, reqs, before+2, "the first call and one follow-up")
		var followUp struct {
			Stream bool `json:"stream"`
		}
		require.NoError(t, reqs[len(reqs)-1].Decode(&followUp))
		assert.True(t, followUp.Stream, "the follow-up asks the model for a stream")

		assert.True(t, held.byClient.Load(), "the client read the first text delta while the model held the rest of its stream")
		var deltas []string
		for _, a := range got {
			if strings.HasPrefix(a.line, `data: {"type":"response.output_text.delta"`) {
				var ev struct {
					Delta string `json:"delta"`
				}
				require.NoError(t, json.Unmarshal([]byte(strings.TrimPrefix(a.line, "data: ")), &ev))
				deltas = append(deltas, ev.Delta)
			}
		}
		assert.Equal(t, pieces, deltas, "the text arrives in the model's deltas")
		assert.Less(t, first(t, got, `data: {"type":"response.output_text.delta"`).at, first(t, got, "event: response.completed").at,
			"the first delta comes before the answer")
		completed := first(t, got, `data: {"type":"response.completed"`).line
		var ev struct {
			Response struct {
				Output []struct {
					Type    string `json:"type"`
					Content []struct {
						Text string `json:"text"`
					} `json:"content"`
				} `json:"output"`
			} `json:"response"`
		}
		require.NoError(t, json.Unmarshal([]byte(strings.TrimPrefix(completed, "data: ")), &ev))
		require.Len(t, ev.Response.Output, 2, "the code call and the message: %s", completed)
		assert.Equal(t, "code_interpreter_call", ev.Response.Output[0].Type)
		assert.Equal(t, text, ev.Response.Output[1].Content[0].Text, "the final answer")
	})
}
