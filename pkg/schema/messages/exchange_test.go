package messages

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/pkg/loop"
	"github.com/codeinterp/codeinterp/pkg/schema"
)

const (
	exchangeRequest = `{"model":"claude-x","max_tokens":1024,"tools":[{"type":"code_execution_20250522","name":"code_execution"}],` +
		`"stream":true,"messages":[{"role":"user","content":"compute 40+2"}]}`
	exchangeAnswer1 = `{"id":"msg_1","type":"message","role":"assistant","model":"claude-x","stop_reason":"tool_use","stop_sequence":null,` +
		`"content":[{"type":"text","text":"Let me run it."},{"type":"tool_use","id":"toolu_1","name":"code_execution","input":{"code":"print(40+2)"}},` +
		`{"type":"tool_use","id":"toolu_2","name":"code_execution","input":{"code":7}}],` +
		`"usage":{"input_tokens":10,"output_tokens":5}}`
	exchangeAnswer2 = `{"id":"msg_2","type":"message","role":"assistant","model":"claude-x","stop_reason":"end_turn","stop_sequence":null,` +
		`"content":[{"type":"text","text":"It is 42."}],"usage":{"input_tokens":20,"output_tokens":3}}`
)

func TestExchangeRound(t *testing.T) {
	x, err := Surface{}.NewExchange([]byte(exchangeRequest), schema.Options{FunctionName: "code_interpreter"})
	require.NoError(t, err, "new exchange")
	rq := x.Request()
	assert.True(t, rq.Found, "found the tool")
	assert.True(t, rq.Stream, "the client streams")
	assert.Equal(t, "code_execution", gjson.GetBytes(rq.Body, "tools.0.name").String(), "the model sees the native name")
	assert.NotEmpty(t, rq.SessionID, "a container of its own, kept past the reply")
	assert.True(t, rq.Hibernate, "its container hibernates when idle, as Anthropic's")
	assert.Equal(t, "container_", rq.IDPrefix, "and has a native id")

	turn, err := x.ParseTurn([]byte(exchangeAnswer1))
	require.NoError(t, err, "parse turn")
	require.Len(t, turn.Calls, 2, "two code calls")
	assert.Equal(t, "toolu_1", turn.Calls[0].CallID, "call id is the tool_use id")
	assert.Equal(t, "print(40+2)", turn.Calls[0].Code, "code")
	assert.NoError(t, turn.Calls[0].ArgsErr, "valid input")
	var ae *schema.ArgumentsError
	assert.True(t, errors.As(turn.Calls[1].ArgsErr, &ae), "a non-string code is an arguments error")

	next, err := x.FollowUp([]schema.CallOutput{{CallID: "toolu_1", Output: "42\n"}, {CallID: "toolu_2", Output: "[invalid]"}},
		schema.FollowUpOptions{})
	require.NoError(t, err, "follow up")
	msgs := gjson.GetBytes(next, "messages").Array()
	require.Len(t, msgs, 3, "user, assistant, tool results")
	assert.Equal(t, "assistant", msgs[1].Get("role").String(), "the answer is replayed")
	assert.Equal(t, "toolu_1", msgs[2].Get("content.0.tool_use_id").String(), "first result")
	assert.Equal(t, "42\n", msgs[2].Get("content.0.content").String(), "the loop's text goes to the model")

	_, err = x.ParseTurn([]byte(exchangeAnswer2))
	require.NoError(t, err, "parse the last turn")
	final, err := x.Final([]schema.Round{
		{Body: []byte(exchangeAnswer1), Calls: []schema.CodeCall{
			{ID: "ci_1", Status: "completed", ContainerID: "cntr_1", Run: &schema.CodeRun{Stdout: "42\n"}},
			{ID: "ci_2", Status: "failed", ContainerID: "cntr_1"},
		}},
		{Body: []byte(exchangeAnswer2)},
	}, "")
	require.NoError(t, err, "final")
	var m anthropic.Message
	require.NoError(t, json.Unmarshal(final, &m), "the SDK decodes the answer: %s", final)
	require.Len(t, m.Content, 6, "text, 2 × (server_tool_use, result), text: %s", final)
	assert.Equal(t, "srvtoolu_1", m.Content[1].ID, "server tool use id")
	assert.Equal(t, "code_execution", m.Content[1].Name, "server tool name")
	res := m.Content[2].AsCodeExecutionToolResult()
	assert.Equal(t, "42\n", res.Content.Stdout, "stdout")
	assert.Equal(t, int64(0), res.Content.ReturnCode, "return code")
	assert.Equal(t, "invalid_tool_input", gjson.GetBytes(final, "content.4.content.error_code").String(), "invalid input")
	assert.Equal(t, "It is 42.", m.Content[5].Text, "final text")
	assert.Equal(t, int64(30), m.Usage.InputTokens, "input tokens summed")
	assert.Equal(t, int64(8), m.Usage.OutputTokens, "output tokens summed")
	assert.Equal(t, "cntr_1", m.Container.ID, "container")
	assert.Equal(t, anthropic.StopReasonEndTurn, m.StopReason, "stop reason")

	paused, err := x.Final([]schema.Round{{Body: []byte(exchangeAnswer1), Calls: []schema.CodeCall{{Status: "incomplete"}, {Status: "incomplete"}}}}, "loop_deadline")
	require.NoError(t, err, "final cut short")
	assert.Equal(t, "pause_turn", gjson.GetBytes(paused, "stop_reason").String(), "cut short: pause_turn")
	require.Len(t, gjson.GetBytes(paused, "content").Array(), 5, "calls the loop left show why: %s", paused)
	assert.Equal(t, "execution_time_exceeded", gjson.GetBytes(paused, "content.2.content.error_code").String(), "the deadline came first")
}

func TestExchangeRefuses(t *testing.T) {
	tests := []struct{ name, give, want string }{
		{"not JSON", `{"tools":`, "not valid JSON"},
		{"reserved name", `{"tools":[{"type":"code_execution_20250522","name":"code_execution"},{"name":"code_execution","input_schema":{}}],"messages":[]}`, "reserved"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Surface{}.NewExchange([]byte(tt.give), schema.Options{})
			var re *schema.RequestError
			require.True(t, errors.As(err, &re), "%s: a client error, got %v", tt.give, err)
			body := Surface{}.ErrorBody(re)
			assert.Equal(t, "invalid_request_error", gjson.GetBytes(body, "error.type").String(), "%s: error type", tt.give)
			assert.Contains(t, gjson.GetBytes(body, "error.message").String(), tt.want, "%s: message", tt.give)
		})
	}
}

func TestExchangeUpstreamErrorBody(t *testing.T) {
	x, err := Surface{}.NewExchange([]byte(exchangeRequest), schema.Options{})
	require.NoError(t, err, "new exchange")
	native := `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`
	assert.Equal(t, native, string(x.UpstreamErrorBody(529, []byte(native))), "an Anthropic error passes as is")
	other := x.UpstreamErrorBody(502, []byte("<html>bad gateway</html>"))
	assert.Equal(t, "api_error", gjson.GetBytes(other, "error.type").String(), "anything else: an Anthropic error")
	assert.Contains(t, gjson.GetBytes(other, "error.message").String(), "<html>bad gateway</html>", "quoting the upstream")
}

func TestExchangeEvents(t *testing.T) {
	x, err := Surface{}.NewExchange([]byte(exchangeRequest), schema.Options{})
	require.NoError(t, err, "new exchange")
	var b bytes.Buffer
	sink := x.Events(&b)
	require.NoError(t, sink.Event(schema.Event{Kind: schema.EventRound, Body: []byte(exchangeAnswer1)}), "round")
	require.NoError(t, sink.Event(schema.Event{Kind: schema.EventDone, Body: []byte(exchangeAnswer2)}), "done")
	out := b.String()
	assert.Contains(t, out, "event: message_start\n", "the message stream")
	assert.Contains(t, out, "event: message_stop\n", "the stream ends")
	assert.True(t, sink.(interface{ Ended() bool }).Ended(), "and says so")

}

// TestResultOfCallsNotRun: a call the loop did not run gets the native error code of why; the
// loop's own text for a call beyond the turn's limit is what tells it.
func TestResultOfCallsNotRun(t *testing.T) {
	bash := Call{ID: "toolu_1", Kind: Bash, Code: "ls"}
	limited := schema.CodeCall{Status: "failed", Outputs: []schema.CodeOutput{{Type: "logs", Logs: fmt.Sprintf(loop.TextCallLimit, 4) + "\n" + loop.TextRoundLimit}}}
	tests := []struct {
		name string
		give schema.CodeCall
		call Call
		want string
	}{
		{"deadline", schema.CodeCall{Status: "incomplete"}, bash, ErrTimeExceeded},
		{"call limit", limited, bash, ErrTooManyRequests},
		{"no sandbox", schema.CodeCall{Status: "failed", Outputs: []schema.CodeOutput{{Type: "logs", Logs: loop.TextSandboxUnavailable}}}, bash, ErrUnavailable},
		{"repeat", schema.CodeCall{Status: "failed", Outputs: []schema.CodeOutput{{Type: "logs", Logs: loop.TextRepeated}}}, bash, ErrUnavailable},
		{"timeout", schema.CodeCall{Status: "failed", Run: &schema.CodeRun{TimedOut: true}}, bash, ErrTimeExceeded},
		{"bad input", schema.CodeCall{Status: "failed"}, Call{ID: "toolu_2", Kind: Editor, InputErr: errors.New("path must be a string")}, ErrInvalidInput},
		{"editor, call limit", limited, Call{ID: "toolu_3", Kind: Editor, Command: "view", Path: "a"}, ErrTooManyRequests},
	}
	for _, tt := range tests {
		r := result(tt.call, tt.give, nil)
		assert.Equal(t, tt.want, r.ErrorCode, "%s: error code", tt.name)
		if tt.call.Kind == Editor {
			assert.NotEmpty(t, r.ErrorMessage, "%s: the text editor's error has a message", tt.name)
		}
	}
}

// TestResultFileIDs: the files a run wrote are its result's *_output entries, by their
// container file ids; a file without one is left out.
func TestResultFileIDs(t *testing.T) {
	files := []schema.CodeFile{{ID: "cfile_1", Path: "/mnt/data/a.csv"}, {Path: "/mnt/data/b.csv"}, {ID: "cfile_3", Path: "/mnt/data/c.png"}}
	py := result(Call{ID: "toolu_p", Kind: Python}, schema.CodeCall{Status: "completed", Run: &schema.CodeRun{Stdout: "ok\n"}, Files: files}, nil)
	assert.Equal(t, `[{"type":"code_execution_output","file_id":"cfile_1"},{"type":"code_execution_output","file_id":"cfile_3"}]`,
		gjson.Get(py.Block("srvtoolu_p"), "content.content").Raw, "Python's outputs")
	key := []byte("k")
	out := marker(key, "toolu_b") + `{"k":"bash","rc":0,"out":"","err":""}` + "\n"
	sh := result(Call{ID: "toolu_b", Kind: Bash}, schema.CodeCall{Status: "completed", Run: &schema.CodeRun{Stdout: out}, Files: files}, key)
	assert.Equal(t, `[{"type":"bash_code_execution_output","file_id":"cfile_1"},{"type":"bash_code_execution_output","file_id":"cfile_3"}]`,
		gjson.Get(sh.Block("srvtoolu_b"), "content.content").Raw, "bash's outputs")
	none := result(Call{ID: "toolu_p", Kind: Python}, schema.CodeCall{Status: "completed", Run: &schema.CodeRun{}}, nil)
	assert.Equal(t, `[]`, gjson.Get(none.Block("srvtoolu_p"), "content.content").Raw, "no files: an empty list")
}
