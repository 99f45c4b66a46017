package loop

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/codeinterp/codeinterp/pkg/sandbox"
	"github.com/codeinterp/codeinterp/pkg/schema"
)

// Programmatic tool calling: the client's tools a request lets the code call
// (schema.Request.CodeTools) are async functions of the container's Python, wrappers of the
// sandbox's __codeinterp_tool_call__. A run that awaits them pauses (sandbox.Result.Calls); the
// loop then ends its answer with the calls, as it does for a client's own calls in a mixed turn
// (StopToolCalls), and the paused cell waits in the container for their results.

// pyIdent is a tool name the code can call by name: a Python identifier of ASCII letters,
// digits and underscores (a name with "-" cannot be one).
var pyIdent = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// TextUnknownTool is the error a call from code of a tool the request does not let the code
// call gets, raised as ToolCallError in the code.
const TextUnknownTool = "the code may call only the client's tools marked callable from code (allowed_callers)"

// ToolsPrelude is the Python that defines each of names (those that are identifiers) in the
// cell's globals as an async function calling the client's tool of that name with one dict
// argument (await tool({...}), as natively) or keyword arguments.
func ToolsPrelude(names []string) string {
	var b strings.Builder
	b.WriteString("def __codeinterp_tools__(names):\n" +
		"    import keyword\n" +
		"    g = globals()\n" +
		"    def wrap(name):\n" +
		"        async def call(input=None, /, **kwargs):\n" +
		"            return await __codeinterp_tool_call__(name, kwargs if input is None else input)\n" +
		"        call.__name__ = call.__qualname__ = name\n" +
		"        return call\n" +
		"    for name in names:\n" +
		"        if not keyword.iskeyword(name):\n" +
		"            g[name] = wrap(name)\n" +
		"__codeinterp_tools__([")
	for _, n := range names {
		if pyIdent.MatchString(n) {
			b.WriteString("'" + n + "', ")
		}
	}
	b.WriteString("])\ndel __codeinterp_tools__\n")
	return b.String()
}

// runPausable runs code as the request's code tools allow: with none, every call of the
// client's tools is refused in the code (sandbox.Lease.RunRefusingToolCalls); with some, their
// wrappers are defined in the container first (once for each container), and a run that pauses
// on them returns with its Calls. A pause that calls another name is resumed at once with each
// call failing (TextUnknownTool), within what is left of timeout.
//
// With resume, the container's paused run is resumed with those results instead (see
// resumeCall): its code tools were defined before it ran.
func (lr *loopRun) runPausable(ctx context.Context, lease *sandbox.Lease, code string, resume []sandbox.ToolResult, timeout time.Duration) (sandbox.Result, error) {
	tools := lr.r.Exchange.Request().CodeTools
	if len(tools) == 0 && resume == nil {
		return lease.RunRefusingToolCalls(ctx, code, timeout)
	}
	start := time.Now()
	if resume != nil {
		lr.toolsIn = lease.ContainerID()
	}
	if lr.toolsIn != lease.ContainerID() {
		res, err := lease.Run(ctx, ToolsPrelude(tools), timeout)
		switch {
		case err != nil:
			return res, err
		case res.Error != nil:
			return sandbox.Result{}, fmt.Errorf("define the client's tools in the container: %s: %s", res.Error.Name, res.Error.Value)
		}
		lr.toolsIn = lease.ContainerID()
	}
	left := func() time.Duration {
		if timeout <= 0 {
			return 0
		}
		return max(timeout-time.Since(start), time.Millisecond)
	}
	var res sandbox.Result
	var err error
	if resume != nil {
		res, err = lease.Resume(ctx, resume, left())
	} else {
		res, err = lease.Run(ctx, code, left())
	}
	for err == nil && len(res.Calls) > 0 && !lr.callable(res.Calls) {
		refused := make([]sandbox.ToolResult, len(res.Calls))
		for i := range refused {
			refused[i] = sandbox.ToolResult{Content: TextUnknownTool, IsError: true}
		}
		res, err = lease.Resume(ctx, refused, left())
	}
	return res, err
}

// callable reports whether each of a pause's calls names one of the request's code tools.
func (lr *loopRun) callable(calls []sandbox.ToolCall) bool {
	tools := lr.r.Exchange.Request().CodeTools
	for _, c := range calls {
		if !slices.Contains(tools, c.Name) {
			return false
		}
	}
	return true
}

// pauseItem fills item, whose run paused on calls, with the calls the answer asks the client
// for, each with a new "toolu_" id.
func (lr *loopRun) pauseItem(item *schema.CodeCall, calls []sandbox.ToolCall) {
	item.Status = schema.CodeCallInProgress
	item.ToolCalls = make([]schema.ToolCall, len(calls))
	ids := make([]string, len(calls))
	for i, c := range calls {
		ids[i] = lr.e.newID("toolu_")
		item.ToolCalls[i] = schema.ToolCall{ID: ids[i], Name: c.Name, Input: c.Input}
	}
	if lr.lease != nil {
		// The request that resumes the run must answer these calls, not an earlier pause's.
		lr.lease.NamePause(ids)
	}
	lr.paused = true
}
