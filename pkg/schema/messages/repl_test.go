package messages

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/pkg/schema"
)

// TestRewriteREPLVersions: the REPL-state versions offer Python beside bash and the text
// editor, _20260521 discloses the per-cell time limit, and a forced choice forces Python.
func TestRewriteREPLVersions(t *testing.T) {
	tests := []struct {
		name      string
		give      string
		cellLimit time.Duration
		wantLimit string
	}{
		{name: "20260120", give: Version20260120, cellLimit: 30 * time.Second},
		{name: "20260521", give: Version20260521, cellLimit: 30 * time.Second, wantLimit: "at most 30s"},
		{name: "20260521 without a limit", give: Version20260521},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := `{"model":"m","max_tokens":10,"tools":[{"type":"` + tt.give + `","name":"code_execution","cache_control":{"type":"ephemeral"}}],` +
				`"tool_choice":{"type":"tool","name":"code_execution"},"messages":[{"role":"user","content":"go"}]}`
			rq, err := Rewrite([]byte(body), Options{CellLimit: tt.cellLimit})
			require.NoError(t, err, "rewrite %s", body)
			assert.Equal(t, tt.give, rq.Version, "version")
			tools := gjson.GetBytes(rq.Body, "tools")
			assert.Equal(t, []string{"code_execution", "bash_code_execution", "text_editor_code_execution"}, strs(tools.Get("#.name")), "%s: the tools", tt.give)
			assert.Equal(t, []string{"code"}, strs(tools.Get("0.input_schema.required")), "%s: Python's schema", tt.give)
			desc := tools.Get("0.description").String()
			assert.Contains(t, desc, "across requests that reuse the container", "%s: state persists across requests", tt.give)
			if tt.wantLimit != "" {
				assert.Contains(t, desc, tt.wantLimit, "%s: the per-cell limit", tt.give)
			} else {
				assert.NotContains(t, desc, "at most", "%s: no limit told", tt.give)
			}
			assert.False(t, tools.Get("0.cache_control").Exists(), "%s: cache_control only on the last tool", tt.give)
			assert.True(t, tools.Get("2.cache_control").Exists(), "%s: the breakpoint at the end", tt.give)
			assert.JSONEq(t, `{"type":"tool","name":"code_execution"}`, gjson.GetBytes(rq.Body, "tool_choice").Raw, "%s: forced Python", tt.give)
		})
	}
}

// TestExchangeREPLCellLimit: the exchange tells _20260521's model the route's run timeout.
func TestExchangeREPLCellLimit(t *testing.T) {
	x, err := Surface{}.NewExchange([]byte(`{"model":"m","max_tokens":10,"tools":[{"type":"code_execution_20260521","name":"code_execution"}],"messages":[]}`),
		schema.Options{RunTimeout: 90 * time.Second})
	require.NoError(t, err, "new exchange")
	assert.Contains(t, gjson.GetBytes(x.Request().Body, "tools.0.description").String(), "at most 1m30s", "the run timeout")
}

const (
	replStreamRequest = `{"model":"m","max_tokens":100,"stream":true,"tools":[{"type":"code_execution_20260120","name":"code_execution"},` +
		`{"name":"weather","input_schema":{"type":"object"}}],"messages":[{"role":"user","content":"go"}]}`
	replAnswer1 = `{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[` +
		`{"type":"tool_use","id":"toolu_P","name":"code_execution","input":{"code":"x = 41\nprint(x + 1)"}},` +
		`{"type":"tool_use","id":"toolu_B","name":"bash_code_execution","input":{"command":"echo hi"}}],` +
		`"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":5}}`
	replAnswer2 = `{"id":"msg_2","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"It is 42."},` +
		`{"type":"tool_use","id":"toolu_W","name":"weather","input":{"city":"Paris"}}],` +
		`"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":30,"output_tokens":7}}`
)

// TestExchangeREPL: with code_execution_20260120 a Python call runs as Python code beside a
// bash call; the client gets code_execution_tool_result, and its own tool_use carries a
// direct caller, plainly and in the stream, which the SDK's accumulator rebuilds.
func TestExchangeREPL(t *testing.T) {
	sx, err := Surface{}.NewExchange([]byte(replStreamRequest), schema.Options{})
	require.NoError(t, err, "new exchange")
	x := sx.(*exchange)
	x.now = func() time.Time { return time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC) }
	turn, err := x.ParseTurn([]byte(replAnswer1))
	require.NoError(t, err, "parse turn")
	require.Len(t, turn.Calls, 2, "two code calls")
	assert.Equal(t, "x = 41\nprint(x + 1)", turn.Calls[0].Code, "Python runs as it is")
	assert.Equal(t, "code_execution", turn.Calls[0].Tool, "the Python tool")
	assert.NotEqual(t, "echo hi", turn.Calls[1].Code, "bash runs as its program")

	next, err := x.FollowUp([]schema.CallOutput{{CallID: "toolu_P", Output: "42\n"}, {CallID: "toolu_B", Output: bashOutput(x, "toolu_B", "hi\n")}}, schema.FollowUpOptions{})
	require.NoError(t, err, "follow up")
	results := gjson.GetBytes(next, "messages.@reverse.0.content")
	assert.Equal(t, "42\n", results.Get("0.content").String(), "Python: the loop's text")
	assert.Equal(t, "hi\n", results.Get("1.content").String(), "bash: its output")

	calls := []schema.CodeCall{
		{ID: "ci_1", Status: "completed", ContainerID: "cntr_1", Run: &schema.CodeRun{Stdout: "42\n"}},
		{ID: "ci_2", Status: "completed", ContainerID: "cntr_1", Run: &schema.CodeRun{Stdout: bashOutput(x, "toolu_B", "hi\n")}},
	}
	final, err := x.Final([]schema.Round{{Body: []byte(replAnswer1), Calls: calls}, {Body: []byte(replAnswer2)}}, "")
	require.NoError(t, err, "final")
	var m anthropic.Message
	require.NoError(t, json.Unmarshal(final, &m), "the SDK decodes the answer: %s", final)
	var types []string
	for _, b := range m.Content {
		types = append(types, b.Type)
	}
	assert.Equal(t, []string{"server_tool_use", "code_execution_tool_result", "server_tool_use", "bash_code_execution_tool_result", "text", "tool_use"}, types, "blocks: %s", final)
	assert.Equal(t, "code_execution", m.Content[0].Name, "Python's server_tool_use")
	assert.Equal(t, "direct", m.Content[0].AsServerToolUse().Caller.Type, "its caller")
	assert.Equal(t, "42\n", m.Content[1].AsCodeExecutionToolResult().Content.Stdout, "Python's stdout")
	assert.Equal(t, "hi\n", m.Content[3].AsBashCodeExecutionToolResult().Content.AsResponseBashCodeExecutionResultBlock().Stdout, "bash's stdout")
	assert.Equal(t, "direct", m.Content[5].AsToolUse().Caller.Type, "the client's tool_use: a direct caller")
	assert.JSONEq(t, directCaller, gjson.GetBytes(final, "content.5.caller").Raw, "as the native answer writes it")

	var b bytes.Buffer
	sink := x.Events(&b)
	ev := func(e schema.Event) { require.NoError(t, sink.Event(e), "event %d", e.Kind) }
	ev(schema.Event{Kind: schema.EventRound, Body: []byte(replAnswer1)})
	for i := range calls {
		started := schema.CodeCall{ID: calls[i].ID, Status: "in_progress", ContainerID: "cntr_1"}
		ev(schema.Event{Kind: schema.EventCallStarted, Call: &started})
		ev(schema.Event{Kind: schema.EventCallDone, Call: &calls[i]})
	}
	ev(schema.Event{Kind: schema.EventRound, Round: 1, Body: []byte(replAnswer2)})
	ev(schema.Event{Kind: schema.EventDone, Body: final})
	assert.Contains(t, b.String(), `"type":"tool_use","id":"toolu_W","name":"weather","input":{},"caller":{"type":"direct"}`, "the stream's tool_use start")
	assertSameMessage(t, final, accumulate(t, b.String()))
}

// TestExchangeREPLLive: a client tool_use relayed as the upstream streams it carries its
// caller.
func TestExchangeREPLLive(t *testing.T) {
	sx, err := Surface{}.NewExchange([]byte(replStreamRequest), schema.Options{})
	require.NoError(t, err, "new exchange")
	var b bytes.Buffer
	sink := sx.Events(&b)
	require.NoError(t, sink.Event(schema.Event{Kind: schema.EventDelta, Body: []byte(`{"type":"message_start","message":` + replAnswer2 + `}`)}), "start")
	for _, d := range streamDeltas {
		require.NoError(t, sink.Event(schema.Event{Kind: schema.EventDelta, Body: []byte(d)}), "delta %s", d)
	}
	assert.Contains(t, b.String(), `"content_block":{"type":"tool_use","id":"toolu_W","name":"weather","input":{},"caller":{"type":"direct"}}`, "relayed with its caller")
}

// TestRewriteREPLReplay: a replayed REPL-state answer maps back: Python's server_tool_use to a
// code_execution tool_use with its result, and the client's tool_use without its caller.
func TestRewriteREPLReplay(t *testing.T) {
	body := `{"tools":[{"type":"code_execution_20260521","name":"code_execution"},{"name":"weather","input_schema":{"type":"object"}}],"messages":[` +
		`{"role":"user","content":"go"},` +
		`{"role":"assistant","content":[` +
		`{"type":"server_tool_use","id":"srvtoolu_P","name":"code_execution","input":{"code":"x = 1"},"caller":{"type":"direct"}},` +
		`{"type":"code_execution_tool_result","tool_use_id":"srvtoolu_P","content":{"type":"code_execution_result","stdout":"","stderr":"","return_code":0,"content":[]}},` +
		`{"type":"tool_use","id":"toolu_W","name":"weather","input":{"city":"Paris"},"caller":{"type":"direct"}}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_W","content":"sunny"}]},` +
		`{"role":"assistant","content":[{"type":"tool_use","id":"toolu_V","name":"weather","input":{},"caller":{"type":"direct"}}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_V","content":"rain"}]}]}`
	rq, err := Rewrite([]byte(body), Options{})
	require.NoError(t, err, "rewrite")
	msgs := gjson.GetBytes(rq.Body, "messages").Array()
	require.Len(t, msgs, 7, "user, assistant, user, assistant, user, assistant, user: %s", rq.Body)
	assert.JSONEq(t, `{"role":"assistant","content":[{"type":"tool_use","id":"srvtoolu_P","name":"code_execution","input":{"code":"x = 1"}}]}`, msgs[1].Raw, "Python's call")
	assert.JSONEq(t, `{"role":"user","content":[{"type":"tool_result","tool_use_id":"srvtoolu_P","content":"[no output]"}]}`, msgs[2].Raw, "its result")
	assert.JSONEq(t, `{"role":"assistant","content":[{"type":"tool_use","id":"toolu_W","name":"weather","input":{"city":"Paris"}}]}`, msgs[3].Raw, "the client's call, without its caller")
	assert.JSONEq(t, `{"role":"assistant","content":[{"type":"tool_use","id":"toolu_V","name":"weather","input":{}}]}`, msgs[5].Raw, "a turn of client calls only, without their callers")
}

// TestRewriteAllowedCallers: a client tool callable directly loses its allowed_callers.
func TestRewriteAllowedCallers(t *testing.T) {
	tests := []struct{ name, give, want string }{
		{name: "none", give: `{"name":"w","input_schema":{"type":"object"}}`, want: `{"name":"w","input_schema":{"type":"object"}}`},
		{name: "direct", give: `{"name":"w","input_schema":{"type":"object"},"allowed_callers":["direct"]}`, want: `{"name":"w","input_schema":{"type":"object"}}`},
		{name: "direct and code", give: `{"name":"w","input_schema":{"type":"object"},"allowed_callers":["code_execution_20260120","direct"]}`, want: `{"name":"w","input_schema":{"type":"object"}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := `{"model":"m","max_tokens":10,"tools":[{"type":"code_execution_20260120","name":"code_execution"},` + tt.give + `],"messages":[]}`
			rq, err := Rewrite([]byte(body), Options{})
			require.NoError(t, err, "rewrite %s", tt.give)
			assert.JSONEq(t, tt.want, gjson.GetBytes(rq.Body, "tools.3").Raw, "%s: the tool the model gets", tt.give)
		})
	}
}

// TestRewriteAllowedCallersRefused: a tool callable only from code with
// code_execution_20250825 (programmatic tool calling needs a REPL-state version) and a
// malformed allowed_callers are client errors.
func TestRewriteAllowedCallersRefused(t *testing.T) {
	tests := []struct{ name, version, give, want string }{
		{name: "code only, 20250825", version: "code_execution_20250825", give: `{"name":"w","input_schema":{"type":"object"},"allowed_callers":["code_execution_20250825"]}`, want: "tools.1.allowed_callers: programmatic tool calling requires code_execution_20260120 or later"},
		{name: "unknown caller", version: "code_execution_20260120", give: `{"name":"w","input_schema":{"type":"object"},"allowed_callers":["robot"]}`, want: "tools.1.allowed_callers.0"},
		{name: "not a list", version: "code_execution_20260120", give: `{"name":"w","input_schema":{"type":"object"},"allowed_callers":"direct"}`, want: "valid list"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := `{"model":"m","max_tokens":10,"tools":[{"type":"` + tt.version + `","name":"code_execution"},` + tt.give + `],"messages":[]}`
			_, err := Rewrite([]byte(body), Options{})
			var re *RequestError
			require.ErrorAs(t, err, &re, "%s: a client error", tt.give)
			assert.Contains(t, re.Message, tt.want, "%s: the message", tt.give)
			assert.Equal(t, 400, re.HTTPStatus(), "%s: a 400", tt.give)
		})
	}
}
