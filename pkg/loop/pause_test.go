package loop

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/pkg/sandbox"
	"github.com/codeinterp/codeinterp/pkg/sandbox/sandboxtest"
)

// TestPausedRunIsResumedWithRefusals: a run whose code awaits the client's tools (no surface
// lets it yet) is resumed at once, each call failing with sandbox.TextToolCallRefused, until it ends;
// the model reads the run's final output.
func TestPausedRunIsResumedWithRefusals(t *testing.T) {
	f := newFixture(t, scripted{status: 200, body: respText("2", "done")})
	f.provider.run = func(string) (sandbox.Result, error) {
		return sandbox.Result{Calls: []sandbox.ToolCall{{Name: "weather", Input: `{"city":"Paris"}`}, {Name: "weather", Input: `{}`}}}, nil
	}
	var got [][]sandbox.ToolResult
	f.provider.Provider.Resume = func(_ context.Context, _ *sandboxtest.Container, results []sandbox.ToolResult) (sandbox.Result, error) {
		got = append(got, results)
		if len(got) == 1 {
			return sandbox.Result{Calls: []sandbox.ToolCall{{Name: "weather", Input: `{}`}}}, nil // pauses again
		}
		return sandbox.Result{Stdout: "caught\n"}, nil
	}
	res := f.engine.Run(context.Background(), f.request(t, respSurface, responsesClient, respCall("1", "await weather({})", 10)))
	require.Equal(t, http.StatusOK, res.Status, "body: %s", res.Body)
	refused := sandbox.ToolResult{Content: sandbox.TextToolCallRefused, IsError: true}
	assert.Equal(t, [][]sandbox.ToolResult{{refused, refused}, {refused}}, got, "each pause resumed with refusals")
	sent := f.model.sent()
	require.Len(t, sent, 1, "one follow-up")
	assert.Equal(t, "caught\n", gjson.GetBytes(sent[0], "input.2.output").String(), "the model reads the run's end")
}
