package remote

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/codeinterp/codeinterp/pkg/sandbox"
	"github.com/codeinterp/codeinterp/pkg/sandbox/sandboxtest"
)

// TestRunPausedOnTheNodeIsResumedWithRefusals: the sandbox service carries no paused run yet: a
// run that awaits the client's tools is resumed on the node at once with the calls refused,
// and the caller gets the run's end; the container runs on.
func TestRunPausedOnTheNodeIsResumedWithRefusals(t *testing.T) {
	var got []sandbox.ToolResult
	p := &sandboxtest.Provider{
		Run: func(_ context.Context, c *sandboxtest.Container, code string) (sandbox.Result, error) {
			if code == "await tool()" {
				return sandbox.Result{Calls: []sandbox.ToolCall{{Name: "tool", Input: "{}"}}}, nil
			}
			return c.Eval(code), nil
		},
		Resume: func(_ context.Context, _ *sandboxtest.Container, results []sandbox.ToolResult) (sandbox.Result, error) {
			got = append(got, results...)
			return sandbox.Result{Stdout: "refused\n"}, nil
		},
	}
	s := serve(t, newManager(t, p), ServerOptions{}, ClientOptions{})
	l, err := s.client.Acquire(t.Context(), sandbox.AcquireRequest{Identity: "alice"})
	require.NoError(t, err, "Acquire")
	defer l.Release()
	res, err := l.Run(t.Context(), "await tool()", 0)
	require.NoError(t, err, "Run")
	assert.Equal(t, sandbox.Result{Stdout: "refused\n"}, res, "the run's end")
	assert.Equal(t, []sandbox.ToolResult{{Content: sandbox.TextToolCallRefused, IsError: true}}, got, "the call refused on the node")
	_, err = l.Run(t.Context(), "x=1", 0)
	assert.NoError(t, err, "the container is not left paused")
}
