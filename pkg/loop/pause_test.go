package loop

import (
	"context"
	"net/http"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/pkg/sandbox"
	"github.com/codeinterp/codeinterp/pkg/sandbox/sandboxtest"
	"github.com/codeinterp/codeinterp/pkg/schema"
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

// TestPausedRunEndsTheAnswer: with code tools (programmatic tool calling), their wrappers are
// defined in the container before the first run, and a run paused on them ends the loop
// (StopToolCalls) without a follow-up: its item carries the calls, each with a new toolu_ id.
func TestPausedRunEndsTheAnswer(t *testing.T) {
	f := newFixture(t)
	var codes []string
	f.provider.run = func(code string) (sandbox.Result, error) {
		codes = append(codes, code)
		if len(codes) == 1 {
			return sandbox.Result{}, nil // the wrappers
		}
		return sandbox.Result{Calls: []sandbox.ToolCall{{Name: "weather", Input: `{"city":"Paris"}`}, {Name: "weather", Input: `{"city":"Oslo"}`}}}, nil
	}
	resumed := 0
	f.provider.Provider.Resume = func(context.Context, *sandboxtest.Container, []sandbox.ToolResult) (sandbox.Result, error) {
		resumed++
		return sandbox.Result{}, nil
	}
	req := f.request(t, respSurface, responsesClient, respCall("1", "await weather({})", 10))
	req.Exchange.Request().CodeTools = []string{"weather", "not-an-identifier"}
	x := &finalRecorder{Exchange: req.Exchange}
	req.Exchange = x
	res := f.engine.Run(context.Background(), req)
	require.Equal(t, http.StatusOK, res.Status, "body: %s", res.Body)
	assert.Equal(t, StopToolCalls, res.Stop, "the answer asks for the calls")
	assert.Empty(t, f.model.sent(), "no follow-up")
	assert.Zero(t, resumed, "the run stays paused")
	require.Len(t, codes, 2, "the wrappers, then the code")
	assert.Contains(t, codes[0], "'weather'", "weather is defined")
	assert.NotContains(t, codes[0], "not-an-identifier", "a name Python cannot call is left out")
	assert.Equal(t, "await weather({})", codes[1], "the code runs as written")
	require.Len(t, x.rounds, 1, "one round")
	require.Len(t, x.rounds[0].Calls, 1, "one call")
	call := x.rounds[0].Calls[0]
	assert.Equal(t, "in_progress", call.Status, "the run has no result yet")
	assert.Equal(t, []schema.ToolCall{{ID: "toolu_2", Name: "weather", Input: `{"city":"Paris"}`}, {ID: "toolu_3", Name: "weather", Input: `{"city":"Oslo"}`}},
		call.ToolCalls, "the calls, with their ids")
}

// TestPausedRunOnAnotherNameIsRefused: a pause on a name that is not one of the request's code
// tools (the code called __codeinterp_tool_call__ itself) is resumed at once, each call failing
// with TextUnknownTool; the loop goes on as for any run.
func TestPausedRunOnAnotherNameIsRefused(t *testing.T) {
	f := newFixture(t, scripted{status: 200, body: respText("2", "done")})
	runs := 0
	f.provider.run = func(string) (sandbox.Result, error) {
		if runs++; runs == 1 {
			return sandbox.Result{}, nil
		}
		return sandbox.Result{Calls: []sandbox.ToolCall{{Name: "weather", Input: `{}`}, {Name: "secret", Input: `{}`}}}, nil
	}
	var got [][]sandbox.ToolResult
	f.provider.Provider.Resume = func(_ context.Context, _ *sandboxtest.Container, results []sandbox.ToolResult) (sandbox.Result, error) {
		got = append(got, results)
		return sandbox.Result{Stdout: "refused\n"}, nil
	}
	req := f.request(t, respSurface, responsesClient, respCall("1", "x", 10))
	req.Exchange.Request().CodeTools = []string{"weather"}
	res := f.engine.Run(context.Background(), req)
	require.Equal(t, http.StatusOK, res.Status, "body: %s", res.Body)
	assert.Equal(t, StopDone, res.Stop, "the loop went on")
	refused := sandbox.ToolResult{Content: TextUnknownTool, IsError: true}
	assert.Equal(t, [][]sandbox.ToolResult{{refused, refused}}, got, "the whole pause refused")
	require.Len(t, f.model.sent(), 1, "one follow-up")
}

// TestToolsPrelude runs the wrappers' Python with a stand-in for the sandbox's
// __codeinterp_tool_call__: a call with one dict, with keyword arguments, and in parallel.
func TestToolsPrelude(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	code := "import asyncio, builtins, json\n" +
		"async def fake(name, args):\n    return name + ':' + json.dumps(args, sort_keys=True)\n" +
		"builtins.__codeinterp_tool_call__ = fake\n" +
		ToolsPrelude([]string{"weather", "class", "a-b"}) +
		"async def main():\n" +
		"    print(await weather({'city': 'Paris'}))\n" +
		"    print(await weather(city='Oslo'))\n" +
		"    print(await asyncio.gather(weather({'n': 1}), weather({'n': 2})))\n" +
		"    print(weather.__name__, 'class' in globals(), '__codeinterp_tools__' in globals())\n" +
		"asyncio.run(main())\n"
	out, err := exec.Command(py, "-c", code).CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Equal(t, "weather:{\"city\": \"Paris\"}\nweather:{\"city\": \"Oslo\"}\n['weather:{\"n\": 1}', 'weather:{\"n\": 2}']\nweather False False\n", string(out))
}

// finalRecorder is an Exchange that keeps the rounds its Final was given.
type finalRecorder struct {
	schema.Exchange
	rounds []schema.Round
}

func (x *finalRecorder) Final(rounds []schema.Round, incomplete string) ([]byte, error) {
	x.rounds = rounds
	return x.Exchange.Final(rounds, incomplete)
}

// pausedContainer returns the container of identity id-1 whose run f's provider paused on
// calls, as an earlier request leaves it.
func pausedContainer(t *testing.T, f *fixture, calls int) string {
	t.Helper()
	f.provider.run = func(string) (sandbox.Result, error) {
		return sandbox.Result{Calls: make([]sandbox.ToolCall, calls)}, nil
	}
	lease, err := f.manager.Acquire(context.Background(), sandbox.AcquireRequest{Identity: "id-1", Session: "s1"})
	require.NoError(t, err, "acquire")
	defer lease.Release()
	res, err := lease.Run(context.Background(), "await roll({})", 0)
	require.NoError(t, err, "run")
	require.Len(t, res.Calls, calls, "paused")
	return lease.ContainerID()
}

// resumeRequest is f's request answering the paused run of container with results: no first
// answer, round 0 the resumed turn.
func resumeRequest(t *testing.T, f *fixture, container string, results ...string) Request {
	t.Helper()
	req := f.request(t, respSurface, responsesClient, "")
	req.First = nil
	req.Sandbox = sandbox.AcquireRequest{Identity: "id-1", ContainerID: container}
	rs := &schema.Resume{Turn: []byte(respCall("0", "await roll({})", 0)), Gone: "the cell is gone"}
	for _, r := range results {
		rs.Results = append(rs.Results, schema.ToolResult{Content: r})
	}
	req.Exchange.Request().Resume = rs
	req.Exchange.Request().CodeTools = []string{"roll"}
	return req
}

// TestResumeBeforeModelCall: a request answering a paused run's calls resumes it with their
// results before any model call; the run's end is what the first model call gets.
func TestResumeBeforeModelCall(t *testing.T) {
	f := newFixture(t, scripted{status: 200, body: respText("2", "You rolled 4.")})
	container := pausedContainer(t, f, 2)
	var got []sandbox.ToolResult
	f.provider.Provider.Resume = func(_ context.Context, _ *sandboxtest.Container, results []sandbox.ToolResult) (sandbox.Result, error) {
		got = results
		return sandbox.Result{Stdout: "4\n"}, nil
	}
	onLoop := 0
	req := resumeRequest(t, f, container, "3", "1")
	req.OnLoop = func() { onLoop++ }
	res := f.engine.Run(context.Background(), req)
	require.Equal(t, http.StatusOK, res.Status, "body: %s", res.Body)
	assert.Equal(t, StopDone, res.Stop, "the model answered")
	assert.Equal(t, 1, onLoop, "OnLoop once, before the resume")
	assert.Equal(t, []sandbox.ToolResult{{Content: "3"}, {Content: "1"}}, got, "the results, in order")
	sent := f.model.sent()
	require.Len(t, sent, 1, "one model call, after the resume")
	assert.Equal(t, "4\n", gjson.GetBytes(sent[0], "input.#(type==\"function_call_output\").output").String(), "the model reads the run's end")
}

// TestResumePausesAgain: a resumed run that pauses again ends the answer with its new calls,
// with no model call.
func TestResumePausesAgain(t *testing.T) {
	f := newFixture(t)
	container := pausedContainer(t, f, 1)
	f.provider.Provider.Resume = func(context.Context, *sandboxtest.Container, []sandbox.ToolResult) (sandbox.Result, error) {
		return sandbox.Result{Calls: []sandbox.ToolCall{{Name: "roll", Input: `{"n":3}`}}}, nil
	}
	req := resumeRequest(t, f, container, "4")
	x := &finalRecorder{Exchange: req.Exchange}
	req.Exchange = x
	res := f.engine.Run(context.Background(), req)
	require.Equal(t, http.StatusOK, res.Status, "body: %s", res.Body)
	assert.Equal(t, StopToolCalls, res.Stop, "paused again")
	assert.Empty(t, f.model.sent(), "no model call")
	require.Len(t, x.rounds, 1, "round 0 only")
	require.Len(t, x.rounds[0].Calls, 1, "the resumed call")
	assert.Equal(t, []schema.ToolCall{{ID: "toolu_2", Name: "roll", Input: `{"n":3}`}}, x.rounds[0].Calls[0].ToolCalls, "its new calls")
	assert.Equal(t, container, x.rounds[0].Calls[0].ContainerID, "in the container")
}

// TestResumeOfNoPausedRun: a request answering calls of a run that is no longer paused (or
// with results not of its calls' number) is a 400 with the surface's message, and no model
// call.
func TestResumeOfNoPausedRun(t *testing.T) {
	f := newFixture(t)
	container := pausedContainer(t, f, 2)
	resumed := 0
	f.provider.Provider.Resume = func(context.Context, *sandboxtest.Container, []sandbox.ToolResult) (sandbox.Result, error) {
		resumed++
		return sandbox.Result{Stdout: "done\n"}, nil
	}
	res := f.engine.Run(context.Background(), resumeRequest(t, f, container, "1"))
	assert.Equal(t, http.StatusBadRequest, res.Status, "too few results: body %s", res.Body)
	assert.Equal(t, StopNotPaused, res.Stop, "not this pause's results")
	assert.Zero(t, resumed, "the run stays paused")

	f.model.mu.Lock()
	f.model.answers = []scripted{{status: 200, body: respText("2", "ok")}}
	f.model.mu.Unlock()
	res = f.engine.Run(context.Background(), resumeRequest(t, f, container, "1", "2"))
	require.Equal(t, http.StatusOK, res.Status, "the right results: body %s", res.Body)

	res = f.engine.Run(context.Background(), resumeRequest(t, f, container, "1", "2"))
	assert.Equal(t, http.StatusBadRequest, res.Status, "ended: body %s", res.Body)
	assert.Equal(t, StopNotPaused, res.Stop, "nothing paused")
	assert.Contains(t, string(res.Body), "the cell is gone", "the surface's message")
	assert.Len(t, f.model.sent(), 1, "no model call for either 400")
}

// TestResumeSentAgain: a pause the loop answered names its calls, so that a request answering
// an earlier pause of the same run, sent again, cannot resume the later one with its results.
func TestResumeSentAgain(t *testing.T) {
	f := newFixture(t)
	container := pausedContainer(t, f, 1)
	resumed := 0
	f.provider.Provider.Resume = func(context.Context, *sandboxtest.Container, []sandbox.ToolResult) (sandbox.Result, error) {
		if resumed++; resumed == 1 {
			return sandbox.Result{Calls: []sandbox.ToolCall{{Name: "roll", Input: `{}`}}}, nil
		}
		return sandbox.Result{Stdout: "done\n"}, nil
	}
	res := f.engine.Run(context.Background(), resumeRequest(t, f, container, "4"))
	require.Equal(t, StopToolCalls, res.Stop, "paused again: body %s", res.Body)
	res = f.engine.Run(context.Background(), resumeRequest(t, f, container, "4"))
	assert.Equal(t, http.StatusBadRequest, res.Status, "the first resume sent again: body %s", res.Body)
	assert.Equal(t, 1, resumed, "the later pause stays paused")

	f.model.mu.Lock()
	f.model.answers = []scripted{{status: 200, body: respText("2", "ok")}}
	f.model.mu.Unlock()
	req := resumeRequest(t, f, container, "5")
	req.Exchange.Request().Resume.Results[0].CallID = "toolu_2"
	res = f.engine.Run(context.Background(), req)
	require.Equal(t, http.StatusOK, res.Status, "the later pause's results: body %s", res.Body)
	assert.Equal(t, 2, resumed, "resumed")
}
