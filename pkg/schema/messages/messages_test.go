package messages

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/ssestream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
)

func TestRewriteCodeExecution20250825(t *testing.T) {
	body := `{"model":"claude-x","max_tokens":1024,` +
		`"tools":[{"name":"lookup","description":"d","input_schema":{"type":"object"}},{"type":"code_execution_20250825","name":"code_execution","cache_control":{"type":"ephemeral"}}],` +
		`"tool_choice":{"type":"tool","name":"code_execution","disable_parallel_tool_use":true},` +
		`"container":"container_abc","stream":true,` +
		`"messages":[{"role":"user","content":"keep   these   bytes"}]}`
	rq, err := Rewrite([]byte(body), Options{})
	require.NoError(t, err, "rewrite")
	require.True(t, rq.Found, "found the tool")
	assert.Equal(t, Version20250825, rq.Version, "version")
	assert.True(t, rq.Stream, "the client streams")
	assert.Equal(t, "container_abc", rq.ContainerID, "container")
	assert.True(t, rq.ForcedChoice, "forced choice")
	assert.JSONEq(t, `{"type":"auto","disable_parallel_tool_use":true}`, string(rq.LaterChoice), "later choice")

	out := gjson.ParseBytes(rq.Body)
	names := []string{}
	for _, tl := range out.Get("tools").Array() {
		names = append(names, tl.Get("name").String())
		assert.False(t, tl.Get("type").Exists(), "tool %s is a plain tool", tl.Get("name"))
	}
	assert.Equal(t, []string{"lookup", "bash_code_execution", "text_editor_code_execution"}, names, "tools in place")
	assert.False(t, out.Get("tools.1.cache_control").Exists(), "cache_control only on the last tool")
	assert.Equal(t, "ephemeral", out.Get("tools.2.cache_control.type").String(), "the breakpoint stays at the end of the tool list")
	assert.Equal(t, []string{"command"}, strs(out.Get("tools.1.input_schema.required")), "bash schema")
	assert.JSONEq(t, `{"type":"tool","name":"bash_code_execution","disable_parallel_tool_use":true}`, out.Get("tool_choice").Raw, "tool_choice")
	assert.True(t, out.Get("stream").Bool(), "the upstream streams as the client asked")
	assert.False(t, out.Get("container").Exists(), "container removed")
	assert.Contains(t, string(rq.Body), `"keep   these   bytes"`, "other bytes untouched")
}

func strs(r gjson.Result) []string {
	var out []string
	for _, v := range r.Array() {
		out = append(out, v.String())
	}
	return out
}

func TestRewriteCodeExecution20250522(t *testing.T) {
	rq, err := Rewrite([]byte(`{"tools":[{"type":"code_execution_20250522","name":"code_execution"}],"container":{"id":"c1"},"messages":[]}`), Options{})
	require.NoError(t, err, "rewrite")
	assert.Equal(t, "c1", rq.ContainerID, "container object")
	tools := gjson.GetBytes(rq.Body, "tools").Array()
	require.Len(t, tools, 1, "one tool")
	assert.Equal(t, "code_execution", tools[0].Get("name").String(), "python tool")
	assert.Equal(t, []string{"code"}, strs(tools[0].Get("input_schema.required")), "python schema")
}

func TestRewriteRefuses(t *testing.T) {
	tests := []struct{ name, give, want string }{
		{"not JSON", `{"tools":`, "not valid JSON"},
		{"not an object", `[1]`, "JSON object"},
		{"two tools", `{"tools":[{"type":"code_execution_20250825","name":"code_execution"},{"type":"code_execution_20250522","name":"code_execution"}]}`, "only one"},
		{"unknown version", `{"tools":[{"type":"code_execution_20991231","name":"code_execution"}]}`, "unknown code execution tool version"},
		{"reserved name", `{"tools":[{"type":"code_execution_20250825","name":"code_execution"},{"name":"bash_code_execution","input_schema":{}}]}`, "reserved"},
		{"bad stream", `{"tools":[{"type":"code_execution_20250825","name":"code_execution"}],"stream":"yes"}`, "stream"},
		{"bad container", `{"tools":[{"type":"code_execution_20250825","name":"code_execution"}],"container":5}`, "container"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Rewrite([]byte(tt.give), Options{})
			var re *RequestError
			require.ErrorAs(t, err, &re, "a client error for %s", tt.give)
			assert.Contains(t, re.Message, tt.want, "message for %s", tt.give)
			assert.Equal(t, http.StatusBadRequest, re.HTTPStatus(), "status")
			assert.JSONEq(t, `{"type":"error","error":{"type":"invalid_request_error","message":`+quote(re.Message)+`}}`,
				string(ErrorBody(re.HTTPStatus(), re.Message)), "Anthropic error shape")
		})
	}
}

func TestRewriteWithoutTheTool(t *testing.T) {
	body := `{"tools":[{"name":"lookup","input_schema":{}}],"stream":true,"messages":[{"role":"user","content":"hi"}]}`
	rq, err := Rewrite([]byte(body), Options{})
	require.NoError(t, err, "rewrite")
	assert.False(t, rq.Found, "no tool")
	assert.Equal(t, body, string(rq.Body), "body unchanged")
}

// TestRewriteReplayedHistory: the server tool blocks of a replayed assistant turn become
// tool_use / tool_result pairs in alternating turns; other turns keep their bytes.
func TestRewriteReplayedHistory(t *testing.T) {
	body := `{"tools":[{"type":"code_execution_20250825","name":"code_execution"}],"messages":[` +
		`{"role":"user","content":"first   question"},` +
		`{"role":"assistant","content":[{"type":"text","text":"Let me look."},` +
		`{"type":"server_tool_use","id":"srvtoolu_1","name":"bash_code_execution","input":{"command":"ls"},"caller":{"type":"direct"}},` +
		`{"type":"bash_code_execution_tool_result","tool_use_id":"srvtoolu_1","content":{"type":"bash_code_execution_result","stdout":"a.csv\n","stderr":"","return_code":0,"content":[]}},` +
		`{"type":"text","text":"Now the file."},` +
		`{"type":"server_tool_use","id":"srvtoolu_2","name":"text_editor_code_execution","input":{"command":"view","path":"a.csv"}},` +
		`{"type":"text_editor_code_execution_tool_result","tool_use_id":"srvtoolu_2","content":{"type":"text_editor_code_execution_tool_result_error","error_code":"file_not_found","error_message":"no a.csv"}}]},` +
		`{"role":"user","content":"thanks"}]}`
	rq, err := Rewrite([]byte(body), Options{})
	require.NoError(t, err, "rewrite")
	msgs := gjson.GetBytes(rq.Body, "messages").Array()
	var roles []string
	for _, m := range msgs {
		roles = append(roles, m.Get("role").String())
	}
	assert.Equal(t, []string{"user", "assistant", "user", "assistant", "user"}, roles, "turns alternate")
	assert.Equal(t, `{"role":"user","content":"first   question"}`, msgs[0].Raw, "an untouched turn keeps its bytes")
	assert.JSONEq(t, `{"role":"assistant","content":[{"type":"text","text":"Let me look."},{"type":"tool_use","id":"srvtoolu_1","name":"bash_code_execution","input":{"command":"ls"}}]}`, msgs[1].Raw, "first assistant part")
	assert.JSONEq(t, `{"role":"user","content":[{"type":"tool_result","tool_use_id":"srvtoolu_1","content":"a.csv\n"}]}`, msgs[2].Raw, "its result")
	assert.JSONEq(t, `{"role":"assistant","content":[{"type":"text","text":"Now the file."},{"type":"tool_use","id":"srvtoolu_2","name":"text_editor_code_execution","input":{"command":"view","path":"a.csv"}}]}`, msgs[3].Raw, "second assistant part")
	assert.JSONEq(t, `{"role":"user","content":[{"type":"tool_result","tool_use_id":"srvtoolu_2","content":"[error: file_not_found: no a.csv]","is_error":true},{"type":"text","text":"thanks"}]}`, msgs[4].Raw, "the next user turn takes the result first")
}

const answer1 = `{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[` +
	`{"type":"text","text":"Let me run it."},` +
	`{"type":"tool_use","id":"toolu_A","name":"bash_code_execution","input":{"command":"echo hi"}},` +
	`{"type":"tool_use","id":"toolu_B","name":"text_editor_code_execution","input":{"command":"create","path":"n.txt","file_text":"x"}}],` +
	`"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":5,"cache_read_input_tokens":2}}`

const answer2 = `{"id":"msg_2","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"It printed hi."}],` +
	`"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":30,"output_tokens":7,"cache_read_input_tokens":3}}`

func testRequest(t *testing.T) Request {
	t.Helper()
	rq, err := Rewrite([]byte(`{"model":"m","max_tokens":100,"tools":[{"type":"code_execution_20250825","name":"code_execution"},{"name":"weather","input_schema":{"type":"object"}}],"messages":[{"role":"user","content":"go"}]}`), Options{})
	require.NoError(t, err, "rewrite")
	return rq
}

func TestParseTurnAndFollowUp(t *testing.T) {
	rq := testRequest(t)
	turn, err := ParseTurn([]byte(answer1), rq)
	require.NoError(t, err, "parse")
	require.Len(t, turn.Calls, 2, "two code calls")
	assert.Equal(t, Call{ID: "toolu_A", Kind: Bash, Input: []byte(`{"command":"echo hi"}`), Code: "echo hi"}, turn.Calls[0], "bash call")
	assert.Equal(t, "create", turn.Calls[1].Command, "editor command")
	assert.Equal(t, "x", turn.Calls[1].FileText, "editor text")
	assert.NoError(t, turn.Calls[1].InputErr, "editor input")
	assert.Equal(t, "tool_use", turn.StopReason, "stop reason")

	mixed, err := ParseTurn([]byte(`{"content":[{"type":"tool_use","id":"toolu_W","name":"weather","input":{}},{"type":"tool_use","id":"toolu_C","name":"text_editor_code_execution","input":{"command":"delete","path":"x"}}]}`), rq)
	require.NoError(t, err, "parse mixed")
	assert.Equal(t, []string{"toolu_W"}, mixed.ClientCallIDs, "the client's call")
	require.Len(t, mixed.Calls, 1, "one code call")
	assert.Error(t, mixed.Calls[0].InputErr, "an unknown editor command")

	next, err := FollowUp(rq.Body, []byte(answer1), []CallResult{
		{ID: "toolu_A", Result: Result{Kind: Bash, Stdout: "hi\n"}},
		{ID: "toolu_B", Result: Result{Kind: Editor, Create: &Create{}}},
	}, FollowUpOptions{ToolChoiceNone: true})
	require.NoError(t, err, "follow-up")
	msgs := gjson.GetBytes(next, "messages").Array()
	require.Len(t, msgs, 3, "user, assistant, user")
	assert.Equal(t, gjson.Get(answer1, "content").Raw, msgs[1].Get("content").Raw, "the answer's blocks as the model wrote them")
	assert.JSONEq(t, `[{"type":"tool_result","tool_use_id":"toolu_A","content":"hi\n"},{"type":"tool_result","tool_use_id":"toolu_B","content":"[file created]"}]`, msgs[2].Get("content").Raw, "results")
	assert.JSONEq(t, `{"type":"none"}`, gjson.GetBytes(next, "tool_choice").Raw, "tool_choice none")
	assert.True(t, bytes.HasPrefix(next, rq.Body[:bytes.Index(rq.Body, []byte(`"messages"`))]), "the request's bytes before messages are kept")
}

func finalOf(t *testing.T) []byte {
	t.Helper()
	rq := testRequest(t)
	final, err := Final(FinalInput{
		Request: rq,
		Rounds: []Round{
			{Body: []byte(answer1), Results: map[string]Result{
				"toolu_A": {Kind: Bash, Stdout: "hi\n", FileIDs: []string{"file_1"}},
				"toolu_B": {Kind: Editor, Create: &Create{IsFileUpdate: false}},
			}},
			{Body: []byte(answer2)},
		},
		Container: &Container{ID: "container_1", ExpiresAt: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)},
	})
	require.NoError(t, err, "final")
	return final
}

// TestFinal: the answer the SDK decodes: the block order, the server tool blocks and their
// results, usage summed, the container.
func TestFinal(t *testing.T) {
	final := finalOf(t)
	var msg anthropic.Message
	require.NoError(t, json.Unmarshal(final, &msg), "decode with anthropic-sdk-go: %s", final)
	var types []string
	for _, b := range msg.Content {
		types = append(types, b.Type)
	}
	assert.Equal(t, []string{"text", "server_tool_use", "bash_code_execution_tool_result", "server_tool_use",
		"text_editor_code_execution_tool_result", "text"}, types, "block order")
	use := msg.Content[1].AsServerToolUse()
	assert.Equal(t, "srvtoolu_A", use.ID, "server tool id")
	assert.Equal(t, "bash_code_execution", string(use.Name), "server tool name")
	assert.Equal(t, "direct", use.Caller.Type, "caller")
	bash := msg.Content[2].AsBashCodeExecutionToolResult()
	assert.Equal(t, "srvtoolu_A", bash.ToolUseID, "result names its call")
	res := bash.Content.AsResponseBashCodeExecutionResultBlock()
	assert.Equal(t, "hi\n", res.Stdout, "stdout")
	require.Len(t, res.Content, 1, "output files")
	assert.Equal(t, "file_1", res.Content[0].FileID, "output file id")
	editor := msg.Content[4].AsTextEditorCodeExecutionToolResult()
	assert.Equal(t, "text_editor_code_execution_create_result", editor.Content.Type, "editor result")
	assert.Equal(t, "msg_2", msg.ID, "the last round's id")
	assert.Equal(t, anthropic.StopReasonEndTurn, msg.StopReason, "stop reason")
	assert.Equal(t, int64(40), msg.Usage.InputTokens, "input tokens summed")
	assert.Equal(t, int64(12), msg.Usage.OutputTokens, "output tokens summed")
	assert.Equal(t, int64(5), msg.Usage.CacheReadInputTokens, "cache reads summed")
	assert.Equal(t, int64(2), gjson.GetBytes(final, "usage.server_tool_use.code_execution_requests").Int(), "code runs counted")
	assert.Equal(t, "container_1", msg.Container.ID, "container")
	assert.Equal(t, "2026-12-01T12:00:00Z", msg.Container.ExpiresAt.Format(time.RFC3339), "container expiry")

	paused, err := Final(FinalInput{Request: testRequest(t), Rounds: []Round{{Body: []byte(answer1), Results: map[string]Result{}}}, Paused: true})
	require.NoError(t, err, "final paused")
	assert.Equal(t, "pause_turn", gjson.GetBytes(paused, "stop_reason").String(), "paused")
	assert.Len(t, gjson.GetBytes(paused, "content").Array(), 1, "calls that did not run are left out")
}

var eventName = regexp.MustCompile(`(?m)^event: (\S+)$`)

// TestStream: the event order is the native one, and the SDK's accumulator rebuilds the plain
// answer from it.
func TestStream(t *testing.T) {
	final := finalOf(t)
	var buf bytes.Buffer
	require.NoError(t, writeSSE(&buf, final), "write the stream")
	var names []string
	for _, m := range eventName.FindAllStringSubmatch(buf.String(), -1) {
		names = append(names, m[1])
	}
	block := func(deltas int) []string {
		out := []string{"content_block_start"}
		for range deltas {
			out = append(out, "content_block_delta")
		}
		return append(out, "content_block_stop")
	}
	want := []string{"message_start", "ping"}
	for _, n := range []int{1, 1, 0, 1, 0, 1} {
		want = append(want, block(n)...)
	}
	want = append(want, "message_delta", "message_stop")
	assert.Equal(t, want, names, "event order")

	res := &http.Response{Header: http.Header{"Content-Type": {"text/event-stream"}}, Body: io.NopCloser(&buf)}
	stream := ssestream.NewStream[anthropic.MessageStreamEventUnion](ssestream.NewDecoder(res), nil)
	var acc anthropic.Message
	for stream.Next() {
		require.NoError(t, acc.Accumulate(stream.Current()), "accumulate %s", stream.Current().Type)
	}
	require.NoError(t, stream.Err(), "stream")
	var plain anthropic.Message
	require.NoError(t, json.Unmarshal(final, &plain), "decode plain")
	assert.Equal(t, summary(plain), summary(acc), "the accumulated message is the plain one")

	var ebuf bytes.Buffer
	require.NoError(t, writeErrorSSE(&ebuf, 529, "busy"), "error event")
	assert.Equal(t, "event: error\ndata: {\"error\":{\"message\":\"busy\",\"type\":\"overloaded_error\"},\"type\":\"error\"}\n\n", ebuf.String(), "error event")
}

// summary is what must agree between a plain and an accumulated message.
func summary(m anthropic.Message) string {
	var b strings.Builder
	b.WriteString(m.ID + " " + string(m.StopReason) + " " + m.Container.ID + "\n")
	for _, c := range m.Content {
		js, _ := json.Marshal(c.Input)
		b.WriteString(c.Type + " " + c.ID + " " + c.Text + " " + string(js) + " " + c.ToolUseID + "\n")
	}
	js, _ := json.Marshal(map[string]int64{"in": m.Usage.InputTokens, "out": m.Usage.OutputTokens, "cache": m.Usage.CacheReadInputTokens})
	b.Write(js)
	return b.String()
}

func TestResultForModel(t *testing.T) {
	tests := []struct {
		name    string
		give    Result
		want    string
		wantErr bool
	}{
		{"stdout", Result{Kind: Bash, Stdout: "a\n"}, "a\n", false},
		{"stderr and code", Result{Kind: Bash, Stdout: "a", Stderr: "boom\n", ReturnCode: 2}, "a\n[stderr]\nboom\n[return code 2]", true},
		{"nothing", Result{Kind: Python}, "[no output]", false},
		{"error", Result{Kind: Bash, ErrorCode: ErrTimeExceeded}, "[error: execution_time_exceeded]", true},
		{"view", Result{Kind: Editor, View: &View{Content: "x\ny\n", NumLines: 2, StartLine: 1, TotalLines: 5}}, "     1\tx\n     2\ty\n[3 more lines not shown]", false},
		{"update", Result{Kind: Editor, Create: &Create{IsFileUpdate: true}}, "[file updated]", false},
	}
	for _, tt := range tests {
		got, isErr := tt.give.ForModel()
		assert.Equal(t, tt.want, got, "%s: text", tt.name)
		assert.Equal(t, tt.wantErr, isErr, "%s: is_error", tt.name)
	}
	r := Result{Kind: Editor, Replace: &Replace{OldStart: 3, OldLines: 1, NewStart: 3, NewLines: 2, Lines: []string{"a", "b"}}}
	back := resultFromBlock(Editor, gjson.Get(r.Block("srvtoolu_1"), "content"))
	assert.Equal(t, r, back, "a str_replace result reads back")
}

// writeErrorSSE writes an error in the middle of a stream as the native API does, and as the
// event stream writes one: an "error" event with the error body.
func writeErrorSSE(w io.Writer, status int, message string) error {
	ew := &eventWriter{w: w}
	ew.event("error", string(ErrorBody(status, message)))
	return ew.err
}
