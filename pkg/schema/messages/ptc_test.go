package messages

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/pkg/schema"
)

// TestFinalPausedOnToolCalls: a Python run paused on the client's tools shows as the native
// paused answer (reference §1.3): its server_tool_use without a result, then one tool_use block
// for each call with the caller naming the cell, stop_reason "tool_use" and the container; the
// SDK reads each caller.
func TestFinalPausedOnToolCalls(t *testing.T) {
	for _, tt := range []struct{ version, caller string }{
		{Version20260120, Version20260120},
		{Version20260521, Version20260120}, // the API's types know no 20260521 caller
	} {
		t.Run(tt.version, func(t *testing.T) {
			x, err := Surface{}.NewExchange([]byte(`{"model":"m","max_tokens":10,"tools":[{"type":"`+tt.version+`","name":"code_execution"}],`+
				`"messages":[{"role":"user","content":"roll"}]}`), schema.Options{})
			require.NoError(t, err, "new exchange")
			answer := `{"id":"msg_1","type":"message","role":"assistant","model":"m","stop_reason":"tool_use","stop_sequence":null,` +
				`"content":[{"type":"text","text":"Rolling."},{"type":"tool_use","id":"toolu_c1","name":"code_execution","input":{"code":"await roll({})"}}],` +
				`"usage":{"input_tokens":10,"output_tokens":5}}`
			_, err = x.ParseTurn([]byte(answer))
			require.NoError(t, err, "parse turn")
			out, err := x.Final([]schema.Round{{Body: []byte(answer), Calls: []schema.CodeCall{{
				ID: "ci_1", Status: schema.CodeCallInProgress, ContainerID: "cntr_1",
				ToolCalls: []schema.ToolCall{{ID: "toolu_a", Name: "roll", Input: `{"player":"p1"}`}, {ID: "toolu_b", Name: "roll", Input: `"not an object"`}},
			}}}}, "")
			require.NoError(t, err, "final")
			content := gjson.GetBytes(out, "content").Array()
			require.Len(t, content, 4, "text, the cell, two calls: %s", out)
			assert.Equal(t, "server_tool_use", content[1].Get("type").String(), "the cell")
			assert.Equal(t, "srvtoolu_c1", content[1].Get("id").String(), "the cell's id")
			caller := `{"type":"` + tt.caller + `","tool_id":"srvtoolu_c1"}`
			assert.JSONEq(t, `{"type":"tool_use","id":"toolu_a","name":"roll","input":{"player":"p1"},"caller":`+caller+`}`, content[2].Raw, "first call")
			assert.JSONEq(t, `{"type":"tool_use","id":"toolu_b","name":"roll","input":{},"caller":`+caller+`}`, content[3].Raw, "an input that is no object")
			assert.Equal(t, "tool_use", gjson.GetBytes(out, "stop_reason").String(), "stop_reason")
			assert.Equal(t, "cntr_1", gjson.GetBytes(out, "container.id").String(), "the container")
			assert.Equal(t, int64(1), gjson.GetBytes(out, "usage.server_tool_use.code_execution_requests").Int(), "the cell ran")

			var msg anthropic.Message
			require.NoError(t, json.Unmarshal(out, &msg), "the SDK reads the answer")
			tu := msg.Content[2].AsToolUse()
			assert.Equal(t, tt.caller, tu.Caller.Type, "the SDK's caller type")
			assert.Equal(t, "srvtoolu_c1", tu.Caller.ToolID, "the SDK's caller tool_id")
			assert.Equal(t, anthropic.StopReasonToolUse, msg.StopReason, "the SDK's stop_reason")
		})
	}
}

// TestRewriteCodeTools: a tool whose allowed_callers name the request's REPL-state version is
// one the code may call: one callable only from code leaves the model's tools and is told in
// the Python tool's description; one callable both ways stays, its allowed_callers removed. A
// tool callable only from another version is refused.
func TestRewriteCodeTools(t *testing.T) {
	body := func(callers string) string {
		return `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"go"}],"tools":[` +
			`{"type":"code_execution_20260120","name":"code_execution"},` +
			`{"name":"roll","description":"Roll a die.","input_schema":{"type":"object","properties":{"player":{"type":"string"}}},"allowed_callers":` + callers + `},` +
			`{"name":"both","input_schema":{"type":"object"},"allowed_callers":["direct","code_execution_20260120"]},` +
			`{"name":"plain","input_schema":{"type":"object"}}]}`
	}
	x, err := Surface{}.NewExchange([]byte(body(`["code_execution_20260120"]`)), schema.Options{})
	require.NoError(t, err, "new exchange")
	rq := x.Request()
	assert.Equal(t, []string{"roll", "both"}, rq.CodeTools, "the code tools")
	tools := gjson.GetBytes(rq.Body, "tools")
	assert.Equal(t, []string{"code_execution", "bash_code_execution", "text_editor_code_execution", "both", "plain"}, strs(tools.Get("#.name")), "roll only from code")
	assert.False(t, tools.Get("3.allowed_callers").Exists(), "no allowed_callers upstream")
	desc := tools.Get("0.description").String()
	assert.Contains(t, desc, "await name({...})", "how to call them")
	assert.Contains(t, desc, `- roll: Roll a die. Input schema: {"type":"object","properties":{"player":{"type":"string"}}}`, "roll told")
	assert.Contains(t, desc, "- both Input schema:", "both told")
	assert.NotContains(t, desc, "plain", "a direct tool is not")

	_, err = Surface{}.NewExchange([]byte(body(`["code_execution_20250825"]`)), schema.Options{})
	assert.ErrorContains(t, err, "tools.1.allowed_callers: the tool is callable only from a code execution version this request does not use", "another version")
}

// TestEventsPausedOnToolCalls: the stream of a paused answer shows the cell's server_tool_use,
// then its calls' tool_use blocks with their caller, and message_delta with stop_reason
// "tool_use" and the container: the SDK's accumulator rebuilds the plain answer.
func TestEventsPausedOnToolCalls(t *testing.T) {
	x, err := Surface{}.NewExchange([]byte(`{"model":"m","max_tokens":10,"stream":true,"tools":[{"type":"code_execution_20260120","name":"code_execution"}],`+
		`"messages":[{"role":"user","content":"roll"}]}`), schema.Options{})
	require.NoError(t, err, "new exchange")
	answer := `{"id":"msg_1","type":"message","role":"assistant","model":"m","stop_reason":"tool_use","stop_sequence":null,` +
		`"content":[{"type":"text","text":"Rolling."},{"type":"tool_use","id":"toolu_c1","name":"code_execution","input":{"code":"await roll({})"}}],` +
		`"usage":{"input_tokens":10,"output_tokens":5}}`
	var b bytes.Buffer
	sink := x.Events(&b)
	ev := func(e schema.Event) { require.NoError(t, sink.Event(e), "event %d", e.Kind) }
	_, err = x.ParseTurn([]byte(answer))
	require.NoError(t, err, "parse turn")
	ev(schema.Event{Kind: schema.EventRound, Body: []byte(answer)})
	started := schema.CodeCall{ID: "ci_1", Status: "in_progress", ContainerID: "cntr_1"}
	ev(schema.Event{Kind: schema.EventCallStarted, Call: &started})
	paused := schema.CodeCall{ID: "ci_1", Status: "in_progress", ContainerID: "cntr_1",
		ToolCalls: []schema.ToolCall{{ID: "toolu_a", Name: "roll", Input: `{"player":"p1"}`}, {ID: "toolu_b", Name: "roll", Input: `{"player":"p2"}`}}}
	ev(schema.Event{Kind: schema.EventCallDone, Call: &paused})
	final, err := x.Final([]schema.Round{{Body: []byte(answer), Calls: []schema.CodeCall{paused}}}, "")
	require.NoError(t, err, "final")
	ev(schema.Event{Kind: schema.EventDone, Body: final})
	got := b.String()
	assert.Equal(t, 4, strings.Count(got, "event: content_block_start"), "text, the cell, two calls: %s", got)
	assert.Contains(t, got, `"stop_reason":"tool_use"`, "message_delta's stop_reason")
	acc := accumulate(t, got)
	assertSameMessage(t, final, acc)
	assert.Equal(t, "srvtoolu_c1", acc.Content[3].AsToolUse().Caller.ToolID, "the caller streamed")
	// As natively (the reference's recorded stream), a call made from code arrives whole in
	// its content_block_start: its input there, no input_json_delta.
	assert.Contains(t, got, `"content_block":{"type":"tool_use","id":"toolu_a","name":"roll","input":{"player":"p1"},"caller":`, "the call's input in its start")
	assert.Equal(t, 1, strings.Count(got, `"type":"input_json_delta"`), "input deltas only for the cell's server_tool_use: %s", got)
}

// TestRewriteResume: a request answering a paused cell's calls (its last message tool_results
// for the tool_use blocks called from code in the assistant message before) names the cell and
// the results in the calls' order; the native errors for a missing container, a missing result
// and a text block beside the results.
func TestRewriteResume(t *testing.T) {
	assistant := `{"role":"assistant","content":[{"type":"server_tool_use","id":"srvtoolu_c1","name":"code_execution","input":{"code":"x"},"caller":{"type":"direct"}},` +
		`{"type":"tool_use","id":"toolu_a","name":"roll","input":{},"caller":{"type":"code_execution_20260120","tool_id":"srvtoolu_c1"}},` +
		`{"type":"tool_use","id":"toolu_b","name":"roll","input":{},"caller":{"type":"code_execution_20260120","tool_id":"srvtoolu_c1"}}]}`
	body := func(container, results string) string {
		return `{"model":"m","max_tokens":10,` + container + `"tools":[{"type":"code_execution_20260120","name":"code_execution"},` +
			`{"name":"roll","input_schema":{"type":"object"},"allowed_callers":["code_execution_20260120"]}],` +
			`"messages":[{"role":"user","content":"roll"},` + assistant + `,{"role":"user","content":[` + results + `]}]}`
	}
	both := `{"type":"tool_result","tool_use_id":"toolu_b","content":"6"},{"type":"tool_result","tool_use_id":"toolu_a","content":[{"type":"text","text":"4"}],"is_error":true}`
	o := schema.Options{}
	x, err := Surface{}.NewExchange([]byte(body(`"container":"cntr_1",`, both)), o)
	require.NoError(t, err, "new exchange")
	rs := x.Request().Resume
	require.NotNil(t, rs, "a resume")
	assert.Equal(t, "toolu_c1", rs.CellID, "the cell")
	assert.Equal(t, []schema.ToolResult{{CallID: "toolu_a", Content: "4", IsError: true}, {CallID: "toolu_b", Content: "6"}}, rs.Results,
		"the results in the calls' order")
	assert.Equal(t, "source tool `srvtoolu_c1` not found for tool use block `toolu_a`", rs.Gone, "the error of a cell no longer paused")
	turn, err := x.ParseTurn(rs.Turn)
	require.NoError(t, err, "the resumed turn parses")
	require.Len(t, turn.Calls, 1, "the cell's call")
	assert.Equal(t, schema.Call{ItemID: "srvtoolu_c1", CallID: "srvtoolu_c1", Arguments: `{"code":"x"}`, Code: "x", Tool: "code_execution"}, turn.Calls[0],
		"the cell's call, with its history's id")
	assert.Equal(t, "m", gjson.GetBytes(rs.Turn, "model").String(), "the request's model")
	assert.Zero(t, gjson.GetBytes(rs.Turn, "usage.input_tokens").Int(), "no inference")
	// The model sees the cell's call last, and nothing of the calls made from code.
	msgs := gjson.GetBytes(x.Request().Body, "messages").Array()
	require.Len(t, msgs, 2, "the prompt and the cell's call: the results message left out")
	assert.JSONEq(t, `{"role":"assistant","content":[{"type":"tool_use","id":"srvtoolu_c1","name":"code_execution","input":{"code":"x"}}]}`, msgs[1].Raw,
		"the calls from code left out")

	// A later pause of the cell: its call's answer holds no server_tool_use, the first pause's does.
	later := `{"model":"m","max_tokens":10,"container":"cntr_1","tools":[{"type":"code_execution_20260120","name":"code_execution"},` +
		`{"name":"roll","input_schema":{"type":"object"},"allowed_callers":["code_execution_20260120"]}],` +
		`"messages":[{"role":"user","content":"roll"},` + assistant + `,` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_a","content":"1"},{"type":"tool_result","tool_use_id":"toolu_b","content":"2"}]},` +
		`{"role":"assistant","content":[{"type":"tool_use","id":"toolu_c","name":"roll","input":{},"caller":{"type":"code_execution_20260120","tool_id":"srvtoolu_c1"}}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_c","content":"3"}]}]}`
	x, err = Surface{}.NewExchange([]byte(later), o)
	require.NoError(t, err, "a later pause")
	require.NotNil(t, x.Request().Resume, "resumes")
	assert.Equal(t, []schema.ToolResult{{CallID: "toolu_c", Content: "3"}}, x.Request().Resume.Results, "the later pause's result")
	turn, err = x.ParseTurn(x.Request().Resume.Turn)
	require.NoError(t, err, "the resumed turn parses")
	require.Len(t, turn.Calls, 1, "the cell's call")
	assert.Equal(t, "x", turn.Calls[0].Code, "the cell's code, from the answer that first paused it")
	assert.Len(t, gjson.GetBytes(x.Request().Body, "messages").Array(), 2, "the model sees the prompt and the cell's call: %s", x.Request().Body)

	orphan := strings.Replace(body(`"container":"cntr_1",`, both), `"type":"server_tool_use","id":"srvtoolu_c1"`, `"type":"server_tool_use","id":"srvtoolu_c0"`, 1)
	_, err = Surface{}.NewExchange([]byte(orphan), o)
	assert.ErrorContains(t, err, "source tool `srvtoolu_c1` not found for tool use block `toolu_a`", "a cell missing from the history")

	for _, tt := range []struct{ name, body, want string }{
		{"no container", body("", both), TextContainerRequired},
		{"a result missing", body(`"container":"cntr_1",`, `{"type":"tool_result","tool_use_id":"toolu_a","content":"4"}`),
			"messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_b."},
		{"text beside", body(`"container":"cntr_1",`, both+`,{"type":"text","text":"hi"}`), "messages.2.content.2: a message answering tool calls made from code must hold only tool_result blocks"},
	} {
		_, err := Surface{}.NewExchange([]byte(tt.body), o)
		assert.ErrorContains(t, err, tt.want, tt.name)
	}
	x, err = Surface{}.NewExchange([]byte(`{"model":"m","max_tokens":10,"tools":[{"type":"code_execution_20260120","name":"code_execution"}],"messages":[{"role":"user","content":"hi"}]}`), o)
	require.NoError(t, err, "a first request")
	assert.Nil(t, x.Request().Resume, "resumes nothing")
}

// TestResumedExchange: a request resuming a paused cell shows of round 0 (schema.Resume.Turn)
// only the cell's result, or the calls it paused on again, with no inference; its follow-up
// puts the cell's output after the history's last turn, the cell's call.
func TestResumedExchange(t *testing.T) {
	body := `{"model":"m","max_tokens":10,"container":"container_1","tools":[{"type":"code_execution_20260120","name":"code_execution"},` +
		`{"name":"roll","input_schema":{"type":"object"},"allowed_callers":["code_execution_20260120"]}],` +
		`"messages":[{"role":"user","content":"roll"},{"role":"assistant","content":[{"type":"text","text":"Rolling."},` +
		`{"type":"server_tool_use","id":"srvtoolu_c1","name":"code_execution","input":{"code":"x"},"caller":{"type":"direct"}},` +
		`{"type":"tool_use","id":"toolu_a","name":"roll","input":{},"caller":{"type":"code_execution_20260120","tool_id":"srvtoolu_c1"}}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_a","content":"4"}]}]}`
	newX := func() schema.Exchange {
		x, err := Surface{}.NewExchange([]byte(body), schema.Options{})
		require.NoError(t, err, "new exchange")
		require.NotNil(t, x.Request().Resume, "a resume")
		return x
	}

	x := newX()
	turn := x.Request().Resume.Turn
	_, err := x.ParseTurn(turn)
	require.NoError(t, err, "parse the resumed turn")
	next, err := x.FollowUp([]schema.CallOutput{{CallID: "srvtoolu_c1", Output: "4\n"}}, schema.FollowUpOptions{})
	require.NoError(t, err, "follow up")
	msgs := gjson.GetBytes(next, "messages").Array()
	require.Len(t, msgs, 3, "the prompt, the cell's call, its output")
	assert.JSONEq(t, `{"role":"assistant","content":[{"type":"text","text":"Rolling."},{"type":"tool_use","id":"srvtoolu_c1","name":"code_execution","input":{"code":"x"}}]}`,
		msgs[1].Raw, "the cell's call once, without the calls from code")
	assert.JSONEq(t, `{"role":"user","content":[{"type":"tool_result","tool_use_id":"srvtoolu_c1","content":"4\n"}]}`, msgs[2].Raw, "the cell's output")

	answer := `{"id":"msg_2","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"You rolled 4."}],` +
		`"stop_reason":"end_turn","usage":{"input_tokens":50,"output_tokens":5}}`
	ended := schema.CodeCall{ID: "srvtoolu_c1", Status: schema.CodeCallCompleted, ContainerID: "container_1", Run: &schema.CodeRun{Stdout: "4\n"}}
	out, err := x.Final([]schema.Round{{Body: turn, Calls: []schema.CodeCall{ended}}, {Body: []byte(answer)}}, "")
	require.NoError(t, err, "final")
	assert.JSONEq(t, `[{"type":"code_execution_tool_result","tool_use_id":"srvtoolu_c1","content":{"type":"code_execution_result","stdout":"4\n","stderr":"","return_code":0,"content":[]}},`+
		`{"type":"text","text":"You rolled 4."}]`, gjson.GetBytes(out, "content").Raw, "the cell's result, then the model's answer")
	assert.Equal(t, "end_turn", gjson.GetBytes(out, "stop_reason").String(), "the model's stop")
	assert.False(t, gjson.GetBytes(out, "container").Exists(), "no container in the final answer of a resumed cell, as natively")

	x = newX()
	turn = x.Request().Resume.Turn
	_, err = x.ParseTurn(turn)
	require.NoError(t, err, "parse the resumed turn")
	again := schema.CodeCall{ID: "srvtoolu_c1", Status: schema.CodeCallInProgress, ContainerID: "container_1",
		ToolCalls: []schema.ToolCall{{ID: "toolu_b", Name: "roll", Input: `{"n":2}`}}}
	out, err = x.Final([]schema.Round{{Body: turn, Calls: []schema.CodeCall{again}}}, "")
	require.NoError(t, err, "final")
	assert.JSONEq(t, `[{"type":"tool_use","id":"toolu_b","name":"roll","input":{"n":2},"caller":{"type":"code_execution_20260120","tool_id":"srvtoolu_c1"}}]`,
		gjson.GetBytes(out, "content").Raw, "only the new calls")
	assert.Equal(t, "tool_use", gjson.GetBytes(out, "stop_reason").String(), "paused again")
	assert.Zero(t, gjson.GetBytes(out, "usage.input_tokens").Int(), "no inference")
	assert.Equal(t, "container_1", gjson.GetBytes(out, "container.id").String(), "the container")

	// Streamed, the same blocks: no server_tool_use for the resumed cell.
	x = newX()
	var sse bytes.Buffer
	sink := x.Events(&sse)
	_, err = x.ParseTurn(turn)
	require.NoError(t, err, "parse the resumed turn")
	require.NoError(t, sink.Event(schema.Event{Kind: schema.EventRound, Body: turn}), "round")
	require.NoError(t, sink.Event(schema.Event{Kind: schema.EventCallStarted, Call: &schema.CodeCall{ID: "srvtoolu_c1"}}), "started")
	require.NoError(t, sink.Event(schema.Event{Kind: schema.EventCallDone, Call: &again}), "done")
	out, err = x.Final([]schema.Round{{Body: turn, Calls: []schema.CodeCall{again}}}, "")
	require.NoError(t, err, "final")
	require.NoError(t, sink.Event(schema.Event{Kind: schema.EventDone, Body: out}), "end")
	assert.NotContains(t, sse.String(), `"type":"server_tool_use"`, "the cell's server_tool_use is in an earlier answer")
	assert.Contains(t, sse.String(), `"id":"toolu_b"`, "the new call")
	assert.Contains(t, sse.String(), `"stop_reason":"tool_use"`, "paused again")
	// As natively: a cell paused again with no inference is one message_start holding the
	// whole message (content, container, stop_reason), then message_stop; nothing else.
	assert.Equal(t, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":"+string(out)+"}\n\n"+
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n", sse.String(), "the whole stream")
	assertSameMessage(t, out, accumulate(t, sse.String()))

	// Streamed, a cell that ends: message_start, the cell's result, the model's answer.
	x = newX()
	sse.Reset()
	sink = x.Events(&sse)
	_, err = x.ParseTurn(turn)
	require.NoError(t, err, "parse the resumed turn")
	require.NoError(t, sink.Event(schema.Event{Kind: schema.EventRound, Body: turn}), "round")
	require.NoError(t, sink.Event(schema.Event{Kind: schema.EventCallStarted, Call: &schema.CodeCall{ID: "srvtoolu_c1"}}), "started")
	require.NoError(t, sink.Event(schema.Event{Kind: schema.EventCallDone, Call: &ended}), "done")
	_, err = x.FollowUp([]schema.CallOutput{{CallID: "srvtoolu_c1", Output: "4\n"}}, schema.FollowUpOptions{})
	require.NoError(t, err, "follow up")
	_, err = x.ParseTurn([]byte(answer))
	require.NoError(t, err, "parse the answer")
	require.NoError(t, sink.Event(schema.Event{Kind: schema.EventRound, Round: 1, Body: []byte(answer)}), "the model's round")
	out, err = x.Final([]schema.Round{{Body: turn, Calls: []schema.CodeCall{ended}}, {Body: []byte(answer)}}, "")
	require.NoError(t, err, "final")
	require.NoError(t, sink.Event(schema.Event{Kind: schema.EventDone, Body: out}), "end")
	assert.True(t, strings.HasPrefix(sse.String(), "event: message_start\n"), "the stream starts with message_start: %s", sse.String())
	assert.Equal(t, 1, strings.Count(sse.String(), "event: message_start"), "one message_start")
	assertSameMessage(t, out, accumulate(t, sse.String()))
}

// TestHistoryLeavesOutCallsFromCode: once a cell that called the client's tools ended, the
// model's history has the cell's call and result, and nothing of the calls made from code.
func TestHistoryLeavesOutCallsFromCode(t *testing.T) {
	caller := `"caller":{"type":"code_execution_20260120","tool_id":"srvtoolu_c1"}`
	body := `{"model":"m","max_tokens":10,"tools":[{"type":"code_execution_20260120","name":"code_execution"},` +
		`{"name":"roll","input_schema":{"type":"object"},"allowed_callers":["code_execution_20260120"]}],"messages":[` +
		`{"role":"user","content":"roll"},` +
		`{"role":"assistant","content":[{"type":"text","text":"Rolling."},{"type":"server_tool_use","id":"srvtoolu_c1","name":"code_execution","input":{"code":"x"},"caller":{"type":"direct"}},` +
		`{"type":"tool_use","id":"toolu_a","name":"roll","input":{},` + caller + `}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_a","content":"4"}]},` +
		`{"role":"assistant","content":[{"type":"tool_use","id":"toolu_b","name":"roll","input":{},` + caller + `}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_b","content":"5"}]},` +
		`{"role":"assistant","content":[{"type":"code_execution_tool_result","tool_use_id":"srvtoolu_c1","content":{"type":"code_execution_result","stdout":"9\n","stderr":"","return_code":0,"content":[]}},{"type":"text","text":"9."}]},` +
		`{"role":"user","content":"again"}]}`
	x, err := Surface{}.NewExchange([]byte(body), schema.Options{})
	require.NoError(t, err, "new exchange")
	assert.Nil(t, x.Request().Resume, "resumes nothing")
	assert.JSONEq(t, `[{"role":"user","content":"roll"},`+
		`{"role":"assistant","content":[{"type":"text","text":"Rolling."},{"type":"tool_use","id":"srvtoolu_c1","name":"code_execution","input":{"code":"x"}}]},`+
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"srvtoolu_c1","content":"9\n"}]},`+
		`{"role":"assistant","content":[{"type":"text","text":"9."}]},`+
		`{"role":"user","content":"again"}]`, gjson.GetBytes(x.Request().Body, "messages").Raw, "the model's history")
}
