package loop

import (
	"context"
	"net/http"

	"github.com/codeinterp/codeinterp/pkg/sandbox"
	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/telemetry"
)

// A request that answers the calls a paused run made of the client's tools
// (schema.Request.Resume) owns its first step: the loop resumes the run in the request's
// container with the results before any model call. The run's end is round 0's call, whose
// output the first model call gets, as a follow-up gets a run's; a new pause ends the answer
// at once (StopToolCalls), with no model call at all.

// resumedCall is round 0's call of a request that resumed a paused run: its item and the text
// fed back to the model, reported when the round is.
type resumedCall struct {
	item   schema.CodeCall
	output schema.CallOutput
}

// resume gives the paused run of the request's container the results of rs and waits for it
// to end or pause again, before anything is sent upstream or shown to the client. A run that
// is no longer paused (it ended, its pause was abandoned, its container is gone) refuses the
// request with rs.Gone, a 400: resume then returns nil and that answer.
func (lr *loopRun) resume(ctx context.Context, rs *schema.Resume) (*resumedCall, Response) {
	turn, err := lr.r.Exchange.ParseTurn(rs.Turn)
	if err != nil || len(turn.Calls) != 1 {
		lr.e.log.Error("read the resumed run's turn")
		return nil, lr.errorResponse(http.StatusInternalServerError, "codeinterp could not resume the paused code execution.", "resume_failed", StopUpstreamError)
	}
	c := turn.Calls[0]
	item := schema.CodeCall{ID: lr.callID(0, 0, c.CallID), Code: c.Code, Status: statusCompleted, Outputs: []schema.CodeOutput{}}
	ctx, tool := lr.agent.StartTool(ctx, c.CallID, c.Tool, c.Code)
	results := make([]sandbox.ToolResult, len(rs.Results))
	for i, r := range rs.Results {
		results[i] = sandbox.ToolResult{Content: r.Content, IsError: r.IsError, CallID: r.CallID}
	}
	text, _, errType := lr.runOne(ctx, &item, results)
	if lr.gone {
		tool.End(telemetry.Container{ID: item.ContainerID}, errType, "")
		body := lr.r.Exchange.ErrorBody(&schema.RequestError{Status: http.StatusBadRequest, Message: rs.Gone})
		return nil, lr.fail(http.StatusBadRequest, body, StopNotPaused)
	}
	if item.ContainerID == "" {
		if lease, err := lr.ensureLease(ctx); err == nil {
			item.ContainerID = lease.ContainerID()
		}
	}
	if text != "" && item.Status != statusCompleted && len(item.Outputs) == 0 {
		item.Outputs = append(item.Outputs, schema.CodeOutput{Type: "logs", Logs: text})
	}
	tool.End(lr.toolContainer(item.ContainerID), errType, text)
	return &resumedCall{item: item, output: schema.CallOutput{CallID: c.CallID, Output: text}}, Response{}
}

// show reports the resumed call to the Sink as round 0's, as runCalls reports a call it runs,
// and returns the round's calls and outputs.
func (rc *resumedCall) show(lr *loopRun) ([]schema.CodeCall, []schema.CallOutput) {
	started := schema.CodeCall{ID: rc.item.ID, Code: rc.item.Code, Status: schema.CodeCallInProgress,
		ContainerID: rc.item.ContainerID, Outputs: []schema.CodeOutput{}}
	lr.emit(schema.Event{Kind: schema.EventCallStarted, Call: &started})
	done := rc.item
	lr.emit(schema.Event{Kind: schema.EventCallDone, Call: &done})
	return []schema.CodeCall{rc.item}, []schema.CallOutput{rc.output}
}
