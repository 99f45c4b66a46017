package processor

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/pkg/loop"
	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/schema/messages"
)

// resumeBody answers the calls a paused cell of container_1 made from code.
const resumeBody = `{"model":"m","max_tokens":10,"container":"container_1",` +
	`"tools":[{"type":"code_execution_20260120","name":"code_execution"},{"name":"roll","input_schema":{"type":"object"},"allowed_callers":["code_execution_20260120"]}],` +
	`"messages":[{"role":"user","content":"roll"},{"role":"assistant","content":[` +
	`{"type":"server_tool_use","id":"srvtoolu_c1","name":"code_execution","input":{"code":"x"},"caller":{"type":"direct"}},` +
	`{"type":"tool_use","id":"toolu_a","name":"roll","input":{},"caller":{"type":"code_execution_20260120","tool_id":"srvtoolu_c1"}}]},` +
	`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_a","content":"4"}]}]}`

// TestResumeIsAnsweredAtItsBody: a Messages request answering a paused cell's calls goes
// nowhere upstream: the loop runs at its body, with the resume and no first answer, after
// Envoy's message timer was extended, and its answer is the immediate answer.
func TestResumeIsAnsweredAtItsBody(t *testing.T) {
	answer := []byte(`{"id":"msg_1","type":"message","role":"assistant","content":[{"type":"text","text":"4."}],"stop_reason":"end_turn","usage":{}}`)
	fl := &fakeLoop{calls: true, resp: loop.Response{Status: http.StatusOK, Header: http.Header{"Content-Type": {"application/json"}}, Body: answer, Stop: loop.StopDone}}
	containers := fakeContainers{}
	ts := newTestServerWith(t, func(o *testOptions) { o.Surfaces = append(o.Surfaces, messages.Surface{}) }, nil, fl, containers)
	identity, _ := ts.srv.signer.identity(newHeaderMap(headerMapOf("authorization", "Bearer sk-one")), "")
	containers["container_1"] = identity

	ex := ts.open(t)
	ex.send(postHeaders("/v1/messages"))
	resp := ex.send(reqBody(resumeBody))
	assert.Equal(t, ts.srv.routes[""].LoopDeadline, resp.GetOverrideMessageTimeout().AsDuration(),
		"the message timer extended for the loop")
	resp, err := ex.stream.Recv()
	require.NoError(t, err, "the answer")
	ir := resp.GetImmediateResponse()
	require.NotNil(t, ir, "answered at the body: %v", resp)
	assert.Equal(t, http.StatusOK, int(ir.GetStatus().GetCode()), "the loop's status")
	assert.Equal(t, "4.", gjson.GetBytes(ir.GetBody(), "content.0.text").String(), "the loop's answer")

	reqs := fl.requests()
	require.Len(t, reqs, 1, "one loop")
	assert.Nil(t, reqs[0].First, "no first answer")
	rs := reqs[0].Exchange.Request().Resume
	require.NotNil(t, rs, "the resume")
	assert.Equal(t, []schema.ToolResult{{CallID: "toolu_a", Content: "4"}}, rs.Results, "the results")
	assert.Equal(t, "container_1", reqs[0].Sandbox.ContainerID, "in the paused cell's container")
}
