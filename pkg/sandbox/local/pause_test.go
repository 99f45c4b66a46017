package local

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/codeinterp/codeinterp/pkg/loop"
	"github.com/codeinterp/codeinterp/pkg/sandbox"
)

// ptcCell defines two client tools as async callables, calls one twice in parallel and once
// more after, and uses the results.
const ptcCell = `
import asyncio
async def roll(args): return await __codeinterp_tool_call__('roll', args)
async def main():
    a, b = await asyncio.gather(roll({"player": 1}), roll({"player": 2}))
    print("parallel", a, b)
    c = await roll({"player": 3})
    return int(a) + int(b) + int(c)
total = asyncio.run(main())
print("total", total)
`

func resume(t *testing.T, c sandbox.Container, results ...sandbox.ToolResult) sandbox.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := c.(sandbox.Resumer).Resume(ctx, results)
	require.NoError(t, err, "resume with %+v", results)
	return res
}

// TestLocalPausesForToolCalls: a cell awaiting the client's tools pauses with the calls made
// together (two in parallel, then one), other runs wait for it, each resume gives the code its
// results, and what the cell printed before and after a pause is its output.
func TestLocalPausesForToolCalls(t *testing.T) {
	t.Parallel()
	c := newTestContainer(t, sharedLocal(t), sandbox.Spec{})
	res := runIn(t, c, ptcCell)
	assert.Equal(t, []sandbox.ToolCall{{Name: "roll", Input: `{"player": 1}`}, {Name: "roll", Input: `{"player": 2}`}}, res.Calls, "two calls in parallel")
	assert.Empty(t, res.Stdout, "a paused run shows nothing yet")

	_, err := runTimeout(c, "print(1)", 5*time.Second)
	assert.ErrorIs(t, err, sandbox.ErrPaused, "no other run while paused")
	_, err = c.(sandbox.Resumer).Resume(context.Background(), []sandbox.ToolResult{{Content: "1"}})
	assert.Error(t, err, "one result for two calls")

	res = resume(t, c, sandbox.ToolResult{Content: "4"}, sandbox.ToolResult{Content: "6"})
	assert.Equal(t, []sandbox.ToolCall{{Name: "roll", Input: `{"player": 3}`}}, res.Calls, "the next call after the pause")
	res = resume(t, c, sandbox.ToolResult{Content: "5"})
	assert.Empty(t, res.Calls, "the cell ended")
	assert.Equal(t, "parallel 4 6\ntotal 15\n", res.Stdout, "the results were the code's")
	assert.Equal(t, "15", runIn(t, c, "total").Value, "the REPL state lives on")

	_, err = c.(sandbox.Resumer).Resume(context.Background(), nil)
	assert.ErrorIs(t, err, sandbox.ErrNotPaused, "nothing to resume")
}

// TestLocalToolCallErrorsAndTimeout: an error result raises ToolCallError in the code, and a
// timeout TimeoutError naming the tool, which the code may catch.
func TestLocalToolCallErrorsAndTimeout(t *testing.T) {
	t.Parallel()
	c := newTestContainer(t, sharedLocal(t), sandbox.Spec{})
	res := runIn(t, c, `
import asyncio
async def q(args): return await __codeinterp_tool_call__('query_database', args)
async def main():
    try:
        await q({"sql": "bad"})
    except ToolCallError as e:
        print("error:", e)
    await q({"sql": "slow"})
asyncio.run(main())
`)
	require.Len(t, res.Calls, 1, "the first call")
	res = resume(t, c, sandbox.ToolResult{Content: "syntax error", IsError: true})
	require.Len(t, res.Calls, 1, "the second call")
	res = resume(t, c, sandbox.ToolResult{Timeout: true})
	assert.Equal(t, "error: syntax error\n", res.Stdout, "the error reached the code")
	require.NotNil(t, res.Error, "the timeout raised")
	assert.Equal(t, "TimeoutError", res.Error.Name, "a TimeoutError")
	assert.Equal(t, "Calling tool ['query_database'] timed out.", res.Error.Value, "naming the tool")
}

// TestLocalToolCallBounds: the code's calls are bounded in number and input size; the bounds
// raise in the code, and the container lives on.
func TestLocalToolCallBounds(t *testing.T) {
	t.Parallel()
	c := newTestContainer(t, sharedLocal(t), sandbox.Spec{})
	res := runIn(t, c, `
import asyncio
async def t(args): return await __codeinterp_tool_call__('t', args)
async def main():
    await asyncio.gather(*[t({"i": i}) for i in range(17)])
asyncio.run(main())
`)
	assert.Empty(t, res.Calls, "no pause beyond the bound")
	require.NotNil(t, res.Error, "the calls raised")
	assert.Contains(t, res.Error.Value, "17 calls of the client's tools at once, more than 16", "the bound")
	res = runIn(t, c, `
import asyncio
asyncio.run(__codeinterp_tool_call__('t', {"x": "a" * 300000}))
`)
	require.NotNil(t, res.Error, "a large input raised: %+v", res)
	assert.Contains(t, res.Error.Value, "more than 262144", "the bound")
	assert.Equal(t, "2", runIn(t, c, "1+1").Value, "the container lives on")
}

func TestDecodeCallsRefusesForgedFrames(t *testing.T) {
	big := make([]byte, sandbox.MaxToolInputBytes+1)
	tests := []struct {
		name string
		give map[string]any
	}{
		{"no seq", map[string]any{"op": "calls", "calls": []any{map[string]any{"name": "t", "input": "{}"}}}},
		{"no calls", map[string]any{"op": "calls", "seq": int64(1), "calls": []any{}}},
		{"too many", map[string]any{"op": "calls", "seq": int64(1), "calls": make([]any, sandbox.MaxToolCalls+1)}},
		{"no name", map[string]any{"op": "calls", "seq": int64(1), "calls": []any{map[string]any{"input": "{}"}}}},
		{"too large", map[string]any{"op": "calls", "seq": int64(1), "calls": []any{map[string]any{"name": "t", "input": string(big)}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := decodeAnswer(tt.give)
			assert.ErrorContains(t, err, "protocol violation", "%s: refused", tt.name)
		})
	}
}

// TestLocalPausedDeleted: a container deleted while paused refuses the resume.
func TestLocalPausedDeleted(t *testing.T) {
	t.Parallel()
	l := sharedLocal(t)
	c, err := l.Create(context.Background(), sandbox.Spec{})
	require.NoError(t, err, "create")
	res := runIn(t, c, "import asyncio\nasyncio.run(__codeinterp_tool_call__('t', {}))")
	require.Len(t, res.Calls, 1, "paused")
	require.NoError(t, c.Delete(context.Background()), "delete")
	_, err = c.(sandbox.Resumer).Resume(context.Background(), []sandbox.ToolResult{{Content: "x"}})
	assert.ErrorIs(t, err, sandbox.ErrClosed, "deleted")
}

// TestLocalResumeInterrupted: a resumed run past its deadline is interrupted as a run is.
func TestLocalResumeInterrupted(t *testing.T) {
	t.Parallel()
	c := newTestContainer(t, sharedLocal(t), sandbox.Spec{})
	res := runIn(t, c, "import asyncio, time\nasyncio.run(__codeinterp_tool_call__('t', {}))\ntime.sleep(60)")
	require.Len(t, res.Calls, 1, "paused")
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err := c.(sandbox.Resumer).Resume(ctx, []sandbox.ToolResult{{Content: "x"}})
	assert.ErrorIs(t, err, sandbox.ErrTimeout, "interrupted at the deadline")
	assert.Equal(t, "2", runIn(t, c, "1+1").Value, "the container lives on")
}

// TestManagerResumesAcrossRequests: through the Manager, a run paused in one request's lease is
// resumed by a later request's lease on the same container, pausing again, then ending.
func TestManagerResumesAcrossRequests(t *testing.T) {
	t.Parallel()
	m := sandbox.NewManager(sharedLocal(t), sandbox.ManagerConfig{}, zaptest.NewLogger(t))
	t.Cleanup(func() { assert.NoError(t, m.Close(context.Background()), "close the manager") })
	ctx := context.Background()
	first, err := m.Acquire(ctx, sandbox.AcquireRequest{Identity: "alice", Session: "ptc"})
	require.NoError(t, err, "acquire")
	res, err := first.Run(ctx, ptcCell, 30*time.Second)
	require.NoError(t, err, "run")
	require.Len(t, res.Calls, 2, "paused for two calls")
	id := first.ContainerID()
	first.Release()

	later, err := m.Acquire(ctx, sandbox.AcquireRequest{Identity: "alice", ContainerID: id})
	require.NoError(t, err, "acquire by id")
	defer later.Release()
	_, err = later.Run(ctx, "print(1)", 5*time.Second)
	assert.ErrorIs(t, err, sandbox.ErrPaused, "no run while paused")
	res, err = later.Resume(ctx, []sandbox.ToolResult{{Content: "1"}, {Content: "2"}}, 30*time.Second)
	require.NoError(t, err, "resume")
	require.Len(t, res.Calls, 1, "paused again")
	res, err = later.Resume(ctx, []sandbox.ToolResult{{Content: "3"}}, 30*time.Second)
	require.NoError(t, err, "resume again")
	assert.Equal(t, "parallel 1 2\ntotal 6\n", res.Stdout, "the cell ended")
	_, err = later.Resume(ctx, []sandbox.ToolResult{{Content: "3"}}, 30*time.Second)
	assert.ErrorIs(t, err, sandbox.ErrNotPaused, "nothing paused any more")
}

// TestManagerAbandonsPause: a pause not resumed within PauseTimeout is ended: the code's calls
// raise TimeoutError, a resume finds nothing paused, and the container runs on.
func TestManagerAbandonsPause(t *testing.T) {
	t.Parallel()
	m := sandbox.NewManager(sharedLocal(t), sandbox.ManagerConfig{PauseTimeout: 300 * time.Millisecond}, zaptest.NewLogger(t))
	t.Cleanup(func() { assert.NoError(t, m.Close(context.Background()), "close the manager") })
	ctx := context.Background()
	lease, err := m.Acquire(ctx, sandbox.AcquireRequest{Identity: "bob", Session: "ptc"})
	require.NoError(t, err, "acquire")
	defer lease.Release()
	res, err := lease.Run(ctx, `
import asyncio
async def main():
    try:
        await __codeinterp_tool_call__('query_database', {"sql": "x"})
    except TimeoutError as e:
        global seen
        seen = str(e)
asyncio.run(main())
`, 30*time.Second)
	require.NoError(t, err, "run")
	require.Len(t, res.Calls, 1, "paused")
	require.Eventually(t, func() bool {
		_, err := lease.Run(ctx, "1", 5*time.Second)
		return err == nil
	}, 10*time.Second, 50*time.Millisecond, "the pause is ended past its bound")
	_, err = lease.Resume(ctx, []sandbox.ToolResult{{Content: "late"}}, 5*time.Second)
	assert.ErrorIs(t, err, sandbox.ErrNotPaused, "too late")
	res, err = lease.Run(ctx, "seen", 5*time.Second)
	require.NoError(t, err, "run")
	assert.Equal(t, `"Calling tool ['query_database'] timed out."`, res.Value, "the code saw the timeout")
}

// TestLocalToolsPrelude: the loop's wrappers of the client's tools (loop.ToolsPrelude), run in
// the container, make a cell written as natively (await tool({...}), asyncio.gather) pause on
// the calls, and the results reach the code.
func TestLocalToolsPrelude(t *testing.T) {
	t.Parallel()
	c := newTestContainer(t, sharedLocal(t), sandbox.Spec{})
	res := runIn(t, c, loop.ToolsPrelude([]string{"rollDie", "query"}))
	require.Nil(t, res.Error, "the wrappers run")
	res = runIn(t, c, "import asyncio\nasync def main():\n"+
		"    a, b = await asyncio.gather(rollDie({'player': 'p1'}), rollDie(player='p2'))\n"+
		"    return a + b + await query({'sql': 'select 1'})\n"+
		"print(asyncio.run(main()))\n")
	assert.Equal(t, []sandbox.ToolCall{{Name: "rollDie", Input: `{"player": "p1"}`}, {Name: "rollDie", Input: `{"player": "p2"}`}}, res.Calls, "two calls at once")
	res = resume(t, c, sandbox.ToolResult{Content: "4"}, sandbox.ToolResult{Content: "6"})
	assert.Equal(t, []sandbox.ToolCall{{Name: "query", Input: `{"sql": "select 1"}`}}, res.Calls, "then one")
	res = resume(t, c, sandbox.ToolResult{Content: "!"})
	assert.Empty(t, res.Calls, "the cell ended")
	assert.Equal(t, "46!\n", res.Stdout, "the results were the code's")
}

// TestManagerAnonymousPause: an anonymous caller's container, ephemeral, outlives its lease
// while a run of it is paused, for a later request to resume the run by its id; it goes once
// the run ends and the lease is released, and, never resumed, once the pause is abandoned. One
// not paused is not shown (a request cannot name it: admission asks Container) and goes with
// its lease.
func TestManagerAnonymousPause(t *testing.T) {
	t.Parallel()
	m := sandbox.NewManager(sharedLocal(t), sandbox.ManagerConfig{PauseTimeout: 2 * time.Second}, zaptest.NewLogger(t))
	t.Cleanup(func() { assert.NoError(t, m.Close(context.Background()), "close the manager") })
	ctx := context.Background()
	pausedIn := func(code string) string {
		t.Helper()
		lease, err := m.Acquire(ctx, sandbox.AcquireRequest{})
		require.NoError(t, err, "acquire anonymously")
		defer lease.Release()
		res, err := lease.Run(ctx, code, 30*time.Second)
		require.NoError(t, err, "run")
		require.NotEmpty(t, res.Calls, "paused")
		return lease.ContainerID()
	}

	id := pausedIn(ptcCell)
	_, err := m.Container(ctx, "", id)
	require.NoError(t, err, "the paused container is there after its lease")
	_, err = m.Container(ctx, "alice", id)
	assert.ErrorIs(t, err, sandbox.ErrUnknownContainer, "another identity's")
	later, err := m.Acquire(ctx, sandbox.AcquireRequest{ContainerID: id})
	require.NoError(t, err, "acquire by id to resume")
	res, err := later.Resume(ctx, []sandbox.ToolResult{{Content: "1"}, {Content: "2"}}, 30*time.Second)
	require.NoError(t, err, "resume")
	require.Len(t, res.Calls, 1, "paused again")
	later.Release()
	later, err = m.Acquire(ctx, sandbox.AcquireRequest{ContainerID: id})
	require.NoError(t, err, "acquire by id to resume again")
	res, err = later.Resume(ctx, []sandbox.ToolResult{{Content: "3"}}, 30*time.Second)
	require.NoError(t, err, "resume again")
	assert.Equal(t, "parallel 1 2\ntotal 6\n", res.Stdout, "the cell ended")
	later.Release()
	_, err = m.Container(ctx, "", id)
	assert.ErrorIs(t, err, sandbox.ErrUnknownContainer, "gone once the run ended and its lease was released")
	_, err = m.Acquire(ctx, sandbox.AcquireRequest{ContainerID: id})
	assert.ErrorIs(t, err, sandbox.ErrUnknownContainer, "not acquired once gone")

	id = pausedIn("import asyncio\nasyncio.run(__codeinterp_tool_call__('t', {}))")
	assert.Eventually(t, func() bool {
		_, err := m.Container(ctx, "", id)
		return errors.Is(err, sandbox.ErrUnknownContainer)
	}, 10*time.Second, 50*time.Millisecond, "an abandoned pause's container goes")
	live, _ := m.Load()
	assert.Zero(t, live, "no container left")

	lease, err := m.Acquire(ctx, sandbox.AcquireRequest{})
	require.NoError(t, err, "acquire anonymously")
	_, err = lease.Run(ctx, "x = 1", 30*time.Second)
	require.NoError(t, err, "run")
	id = lease.ContainerID()
	_, err = m.Container(ctx, "", id)
	assert.ErrorIs(t, err, sandbox.ErrUnknownContainer, "a container not paused is not shown, even in use")
	lease.Release()
	_, err = m.Container(ctx, "", id)
	assert.ErrorIs(t, err, sandbox.ErrUnknownContainer, "gone with its lease")
}

// TestManagerAnonymousAbandonedWhileLeased: an anonymous caller's paused container whose pause
// is abandoned while a later request holds its lease (acquired to resume, not yet resuming),
// that request then leaving while the abandoned run still runs on, goes once that run ends: no
// lease, no pause, nothing else would ever delete it.
func TestManagerAnonymousAbandonedWhileLeased(t *testing.T) {
	t.Parallel()
	m := sandbox.NewManager(sharedLocal(t), sandbox.ManagerConfig{PauseTimeout: 500 * time.Millisecond}, zaptest.NewLogger(t))
	t.Cleanup(func() { assert.NoError(t, m.Close(context.Background()), "close the manager") })
	ctx := context.Background()
	lease, err := m.Acquire(ctx, sandbox.AcquireRequest{})
	require.NoError(t, err, "acquire anonymously")
	res, err := lease.Run(ctx, "import asyncio, time\ntry:\n    asyncio.run(__codeinterp_tool_call__('t', {}))\nexcept BaseException:\n    time.sleep(1.5)\n", 30*time.Second)
	require.NoError(t, err, "run")
	require.NotEmpty(t, res.Calls, "paused")
	id := lease.ContainerID()
	lease.Release()
	later, err := m.Acquire(ctx, sandbox.AcquireRequest{ContainerID: id})
	require.NoError(t, err, "acquire by id to resume")
	time.Sleep(time.Second) // the pause is abandoned (at 0.5 s) while later holds its lease
	later.Release()         // the resuming request failed, or its client left
	assert.Eventually(t, func() bool {
		live, _ := m.Load()
		return live == 0
	}, 10*time.Second, 50*time.Millisecond, "the container goes once the abandoned run ends")
	_, err = m.Container(ctx, "", id)
	assert.ErrorIs(t, err, sandbox.ErrUnknownContainer, "not shown once gone")
}

// TestManagerAnonymousPausesBounded: anonymous callers' paused containers, their requests gone,
// hold at most half of the anonymous identity's share (MaxContainersPerIdentity): beyond it a
// run's calls of the client's tools are refused in the code, as without programmatic tool
// calling, so another anonymous caller still gets a container.
func TestManagerAnonymousPausesBounded(t *testing.T) {
	t.Parallel()
	m := sandbox.NewManager(sharedLocal(t), sandbox.ManagerConfig{PauseTimeout: time.Minute, MaxContainers: 8, MaxContainersPerIdentity: 2, MaxSessionsPerIdentity: 1}, zaptest.NewLogger(t))
	t.Cleanup(func() { assert.NoError(t, m.Close(context.Background()), "close the manager") })
	ctx := context.Background()
	cell := "import asyncio\ntry:\n    asyncio.run(__codeinterp_tool_call__('t', {}))\nexcept Exception as e:\n    print(type(e).__name__, e)\n"
	lease, err := m.Acquire(ctx, sandbox.AcquireRequest{})
	require.NoError(t, err, "acquire anonymously")
	res, err := lease.Run(ctx, cell, 30*time.Second)
	require.NoError(t, err, "run")
	require.NotEmpty(t, res.Calls, "the first pauses")
	lease.Release() // its request ends; it never resumes

	lease, err = m.Acquire(ctx, sandbox.AcquireRequest{})
	require.NoError(t, err, "acquire anonymously")
	res, err = lease.Run(ctx, cell, 30*time.Second)
	require.NoError(t, err, "run")
	assert.Empty(t, res.Calls, "the second may not pause")
	assert.Equal(t, "ToolCallError "+sandbox.TextToolCallRefusedAnonymous+"\n", res.Stdout, "its call refused in the code")
	lease.Release()

	lease, err = m.Acquire(ctx, sandbox.AcquireRequest{})
	require.NoError(t, err, "another anonymous caller gets a container")
	lease.Release()
	live, _ := m.Load()
	assert.Equal(t, 1, live, "the paused one is kept")
}
