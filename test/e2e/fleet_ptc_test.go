package e2e

import (
	"net/http"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/codeinterp/codeinterp/test/e2e/fakemodel"
)

// fleetPTCCell calls the client's roll tool once, then once more after that pause, and prints
// the total: two pauses of one call each, so that only their calls' names tell them apart.
const fleetPTCCell = "import asyncio\n" +
	"async def main():\n" +
	"    a = await roll({'player': 'p1'})\n" +
	"    b = await roll({'player': 'p2'})\n" +
	"    return int(a) + int(b)\n" +
	"print('total', asyncio.run(main()))\n"

// scenarioPTC is programmatic tool calling in a fleet (fleetScenarios), with anthropic-sdk-go:
// each request lands on another gateway, the cell's container on a sandbox node. The cell
// pauses on a call of the client's tool; the client's next request, on another gateway, resumes
// it on the node that holds it (no model call), and it pauses on a second call; the first
// pause's results sent again are the native 400 (the pause's naming reached the node); the
// second pause's results end the cell, whose output, which used both results, goes to the model.
func scenarioPTC(t *testing.T, x *scene) string {
	s := x.s
	mark := len(s.Model.RequestsTo(messagesPath))
	s.Model.Enqueue(messagesPath,
		fakemodel.JSON(fakemodel.AnthropicMessage("claude-e2e", fakemodel.Usage{Input: 10, Output: 5},
			fakemodel.ToolUse("toolu_f1", "code_execution", map[string]any{"code": fleetPTCCell}))),
		fakemodel.JSON(fakemodel.AnthropicMessage("claude-e2e", fakemodel.Usage{Input: 30, Output: 4}, fakemodel.Text("The total is 7."))),
	)
	t.Cleanup(func() { assert.Zero(t, s.Model.Pending(), "every scripted answer was used") })
	client := s.anthropicClient()
	params := askPTC("Roll for two players and add up.")

	first, err := sendMessages(t, client, params, x.v.stream)
	require.NoError(t, err, "the first request")
	require.Len(t, first.Content, 2, "server_tool_use, the call made from code: %s", first.RawJSON())
	cell := first.Content[0]
	assert.Equal(t, cell.ID, first.Content[1].AsToolUse().Caller.ToolID, "the cell's call")
	assert.Equal(t, anthropic.StopReasonToolUse, first.StopReason, "paused")
	require.NotEmpty(t, first.Container.ID, "the container")

	params.Container = anthropic.MessageCreateParamsContainerUnion{OfString: anthropic.String(first.Container.ID)}
	params.Messages = append(params.Messages, first.ToParam(), answerCalls(t, first, "3"))
	again := params
	again.Messages = append([]anthropic.MessageParam(nil), params.Messages...)
	second, err := sendMessages(t, client, params, x.v.stream)
	require.NoError(t, err, "the resume, on another gateway")
	require.Len(t, second.Content, 1, "only the cell's next call: %s", second.RawJSON())
	use := second.Content[0].AsToolUse()
	assert.JSONEq(t, `{"player":"p2"}`, string(use.Input), "the call after the pause")
	assert.Equal(t, cell.ID, use.Caller.ToolID, "the same cell")
	assert.Equal(t, first.Container.ID, second.Container.ID, "the same container")
	require.Len(t, s.Model.RequestsTo(messagesPath)[mark:], 1, "no model call for the resume")

	_, err = client.Messages.New(t.Context(), again)
	var apiErr *anthropic.Error
	require.ErrorAs(t, err, &apiErr, "the first pause's results sent again")
	assert.Equal(t, http.StatusBadRequest, apiErr.StatusCode, "a 400: %s", apiErr.RawJSON())

	params.Messages = append(params.Messages, second.ToParam(), answerCalls(t, second, "4"))
	final, err := sendMessages(t, client, params, x.v.stream)
	require.NoError(t, err, "the second resume")
	require.Len(t, final.Content, 2, "the cell's result, the model's text: %s", final.RawJSON())
	assert.Equal(t, "total 7\n", final.Content[0].AsCodeExecutionToolResult().Content.Stdout, "the code used both results")
	assert.Equal(t, "The total is 7.", final.Content[1].Text, "the model's answer")
	assert.Equal(t, anthropic.StopReasonEndTurn, final.StopReason, "done")
	assert.Len(t, s.Model.RequestsTo(messagesPath)[mark:], 2, "two model calls in all")
	return ""
}
