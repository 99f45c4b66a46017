package remote

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/codeinterp/codeinterp/pkg/sandbox"
	"github.com/codeinterp/codeinterp/pkg/sandbox/sandboxtest"
)

// pausingProvider's runs of "await tool()" pause for one call; its resumes record their
// results (in got) and end the run.
func pausingProvider() (*sandboxtest.Provider, func() []sandbox.ToolResult) {
	var mu sync.Mutex
	var got []sandbox.ToolResult
	p := &sandboxtest.Provider{
		Run: func(_ context.Context, c *sandboxtest.Container, code string) (sandbox.Result, error) {
			if code == "await tool()" {
				return sandbox.Result{Calls: []sandbox.ToolCall{{Name: "tool", Input: `{"q":1}`}}}, nil
			}
			return c.Eval(code), nil
		},
		Resume: func(_ context.Context, _ *sandboxtest.Container, results []sandbox.ToolResult) (sandbox.Result, error) {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, results...)
			return sandbox.Result{Stdout: "resumed\n"}, nil
		},
	}
	return p, func() []sandbox.ToolResult {
		mu.Lock()
		defer mu.Unlock()
		return append([]sandbox.ToolResult(nil), got...)
	}
}

// TestPausedRunCrossesTheService: a run on a node that awaits the client's tools returns its
// calls through the service, the container refusing other runs (ErrPaused); another gateway's
// lease on the container (another Client) resumes it, the pause's naming (NamePause) holding
// on the node: results answering other calls fail with ErrNotPaused and leave it paused; the
// run's end comes back, and a resume sent again gets ErrNotPaused.
func TestPausedRunCrossesTheService(t *testing.T) {
	p, got := pausingProvider()
	s := serve(t, newManager(t, p), ServerOptions{}, ClientOptions{})
	l, err := s.client.Acquire(t.Context(), sandbox.AcquireRequest{Identity: "alice", Session: "s"})
	require.NoError(t, err, "Acquire")
	res, err := l.Run(t.Context(), "await tool()", 0)
	require.NoError(t, err, "Run")
	assert.Equal(t, sandbox.Result{Calls: []sandbox.ToolCall{{Name: "tool", Input: `{"q":1}`}}}, res, "the paused run's calls")
	l.NamePause([]string{"toolu_a"})
	_, err = l.Run(t.Context(), "x = 1", 0)
	assert.ErrorIs(t, err, sandbox.ErrPaused, "a run in the paused container")
	id := l.ContainerID()
	l.Release()

	other, err := Dial(s.addr, ClientOptions{Secret: testSecret})
	require.NoError(t, err, "Dial from another gateway")
	defer func() { assert.NoError(t, other.Close(), "close the other client") }()
	l2, err := other.Acquire(t.Context(), sandbox.AcquireRequest{Identity: "alice", ContainerID: id})
	require.NoError(t, err, "Acquire the container by id from another gateway")
	defer l2.Release()
	_, err = l2.Resume(t.Context(), []sandbox.ToolResult{{Content: "x", CallID: "toolu_other"}}, 0)
	assert.ErrorIs(t, err, sandbox.ErrNotPaused, "results answering another call")
	assert.Empty(t, got(), "nothing resumed with results answering another call")

	res, err = l2.Resume(t.Context(), []sandbox.ToolResult{{Content: "42", IsError: true, CallID: "toolu_a"}}, 0)
	require.NoError(t, err, "Resume")
	assert.Equal(t, sandbox.Result{Stdout: "resumed\n"}, res, "the resumed run's end")
	assert.Equal(t, []sandbox.ToolResult{{Content: "42", IsError: true, CallID: "toolu_a"}}, got(), "the results the node's container got")
	assert.Equal(t, id, l2.ContainerID(), "the lease's container after the resume")

	_, err = l2.Resume(t.Context(), []sandbox.ToolResult{{Content: "42", CallID: "toolu_a"}}, 0)
	assert.ErrorIs(t, err, sandbox.ErrNotPaused, "a resume sent again")
	_, err = l2.Run(t.Context(), "x = 1", 0)
	assert.NoError(t, err, "a run once the cell ended")
}

// TestPauseAbandonedOnTheNode: a pause nothing resumes is abandoned by the node's own timer
// (ManagerConfig.PauseTimeout), each call timing out in the code, with no client call at all:
// a later Resume through the service fails with ErrNotPaused.
func TestPauseAbandonedOnTheNode(t *testing.T) {
	p, got := pausingProvider()
	m := sandbox.NewManager(p, sandbox.ManagerConfig{PauseTimeout: 50 * time.Millisecond}, zaptest.NewLogger(t))
	t.Cleanup(func() { _ = m.Close(context.Background()) })
	s := serve(t, m, ServerOptions{}, ClientOptions{})
	l, err := s.client.Acquire(t.Context(), sandbox.AcquireRequest{Identity: "alice", Session: "s"})
	require.NoError(t, err, "Acquire")
	defer l.Release()
	res, err := l.Run(t.Context(), "await tool()", 0)
	require.NoError(t, err, "Run")
	require.Len(t, res.Calls, 1, "the paused run's calls")
	assert.Eventually(t, func() bool { return len(got()) == 1 }, 5*time.Second, 10*time.Millisecond, "the pause abandoned on the node")
	assert.Equal(t, []sandbox.ToolResult{{Timeout: true}}, got(), "the abandoned call times out in the code")
	_, err = l.Resume(t.Context(), []sandbox.ToolResult{{Content: "late"}}, 0)
	assert.ErrorIs(t, err, sandbox.ErrNotPaused, "a resume after the pause was abandoned")
}
