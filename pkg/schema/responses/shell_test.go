package responses_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/schema/responses"
	"github.com/codeinterp/codeinterp/pkg/store"
	"github.com/codeinterp/codeinterp/pkg/store/memory"
)

const shellClient = `{"model":"m","stream":true,"input":"q","tools":[{"type":"shell","environment":{"type":"container_auto","memory_limit":"4g","file_ids":["file-1"]}},{"type":"function","name":"w","parameters":{}}]}`

func shellCallItem(id, arguments string) string {
	return `{"type":"function_call","id":"fc_` + id + `","call_id":"call_` + id + `","name":"shell","arguments":` + strings.ReplaceAll(string(mustQuote(arguments)), "\n", `\n`) + `,"status":"completed"}`
}

// shellAnswer is an upstream answer with items that echoes the tools of x's upstream request,
// as the API does.
func shellAnswer(x schema.Exchange, id string, items ...string) []byte {
	b := answer(id, items...)
	out, _ := sjson.SetRawBytes(b, "tools", []byte(gjson.GetBytes(x.Request().Body, "tools").Raw))
	return out
}

// collapsed is the event lines with each run of one delta type as one line.
func collapsed(lines []string) []string {
	var out []string
	for _, l := range lines {
		if len(out) > 0 && out[len(out)-1] == l && strings.Contains(l, ".delta ") {
			continue
		}
		out = append(out, l)
	}
	return out
}

func mustQuote(s string) []byte {
	b := []byte{'"'}
	b = append(b, strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s)...)
	return append(b, '"')
}

// The request's hosted shell tool becomes the shell function; everything about it that the
// loop needs is read; what it cannot serve is refused, and a local shell is not ours.
func TestShellRewrite(t *testing.T) {
	tests := []struct {
		name, give string
		// wantTools and wantChoice are the upstream's tools and tool_choice (gjson paths
		// #.type/#.name joined), wantErr the param of a refusal.
		wantTools, wantChoice, wantErr string
		wantFound                      bool
		wantContainer, wantMemory      string
		wantFiles                      []string
	}{
		{
			name:      "container_auto",
			give:      `{"model":"m","input":"q","tools":[{"type":"shell","environment":{"type":"container_auto","memory_limit":"4g","file_ids":["file-1"]}}]}`,
			wantTools: `function:shell`, wantFound: true, wantMemory: "4g", wantFiles: []string{"file-1"},
		},
		{
			name:      "container_reference and code_interpreter share its container",
			give:      `{"model":"m","input":"q","tools":[{"type":"code_interpreter","container":{"type":"auto"}},{"type":"shell","environment":{"type":"container_reference","container_id":"cntr_x"}}]}`,
			wantTools: `function:code_interpreter,function:shell`, wantFound: true, wantContainer: "cntr_x",
		},
		{
			name:      "tool_choice shell",
			give:      `{"model":"m","input":"q","tool_choice":{"type":"shell"},"tools":[{"type":"shell","environment":{"type":"container_auto"}}]}`,
			wantTools: `function:shell`, wantChoice: `{"type":"function","name":"shell"}`, wantFound: true,
		},
		{
			name:      "a local shell is the client's",
			give:      `{"model":"m","input":"q","tools":[{"type":"shell","environment":{"type":"local"}},{"type":"shell"}]}`,
			wantTools: `shell:,shell:`,
		},
		{
			name:    "two hosted shells",
			give:    `{"model":"m","input":"q","tools":[{"type":"shell","environment":{"type":"container_auto"}},{"type":"shell","environment":{"type":"container_auto"}}]}`,
			wantErr: "tools[1]",
		},
		{
			name:    "a client function named shell",
			give:    `{"model":"m","input":"q","tools":[{"type":"function","name":"shell","parameters":{}},{"type":"shell","environment":{"type":"container_auto"}}]}`,
			wantErr: "tools[0].name",
		},
		{
			name:    "a container_reference without its id",
			give:    `{"model":"m","input":"q","tools":[{"type":"shell","environment":{"type":"container_reference"}}]}`,
			wantErr: "tools[0].environment.container_id",
		},
		{
			name:    "skills not an array",
			give:    `{"model":"m","input":"q","tools":[{"type":"shell","environment":{"type":"container_auto","skills":{"type":"skill_reference","skill_id":"skill_1"}}}]}`,
			wantErr: "tools[0].environment.skills",
		},
		{
			name:    "two containers",
			give:    `{"model":"m","input":"q","tools":[{"type":"code_interpreter","container":"cntr_a"},{"type":"shell","environment":{"type":"container_reference","container_id":"cntr_b"}}]}`,
			wantErr: "tools",
		},
		{
			name:    "too many file_ids",
			give:    `{"model":"m","input":"q","tools":[{"type":"shell","environment":{"type":"container_auto","file_ids":[` + strings.Repeat(`"f",`, 50) + `"f"]}}]}`,
			wantErr: "tools[0].environment.file_ids",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x, err := responses.Surface{}.NewExchange([]byte(tt.give), schema.Options{})
			if tt.wantErr != "" {
				var re *schema.RequestError
				require.True(t, errors.As(err, &re), "%s: a request error, got %v", tt.give, err)
				assert.Equal(t, tt.wantErr, re.Param, "%s: param", tt.give)
				return
			}
			require.NoError(t, err, tt.give)
			r := x.Request()
			assert.Equal(t, tt.wantFound, r.Found, "%s: found", tt.give)
			var tools []string
			gjson.GetBytes(r.Body, "tools").ForEach(func(_, v gjson.Result) bool {
				tools = append(tools, v.Get("type").String()+":"+v.Get("name").String())
				return true
			})
			assert.Equal(t, tt.wantTools, strings.Join(tools, ","), "%s: upstream tools", tt.give)
			if tt.wantChoice != "" {
				assert.JSONEq(t, tt.wantChoice, gjson.GetBytes(r.Body, "tool_choice").Raw, "%s: upstream tool_choice", tt.give)
				assert.True(t, r.ForcedChoice, "%s: the first round is forced", tt.give)
				assert.Equal(t, `{"type":"shell"}`, string(r.ToolChoice), "%s: the client's choice is echoed", tt.give)
			}
			if !tt.wantFound {
				assert.Equal(t, tt.give, string(r.Body), "%s: untouched", tt.give)
			}
			assert.Equal(t, tt.wantContainer, r.ContainerID, "%s: container", tt.give)
			assert.Equal(t, tt.wantMemory, r.MemoryLimit, "%s: memory_limit", tt.give)
			assert.Equal(t, tt.wantFiles, r.FileIDs, "%s: file_ids", tt.give)
		})
	}
}

// Replayed shell items become the function call pair the model saw: the call's action as its
// arguments, the outputs rendered as the loop renders a run, and the call's container reused.
func TestShellReplay(t *testing.T) {
	body := `{"model":"m","tools":[{"type":"shell","environment":{"type":"container_auto"}}],"input":[` +
		`{"type":"shell_call","call_id":"call_1","id":"sh_1","status":"completed","action":{"commands":["ls","false"],"timeout_ms":1000,"max_output_length":null},"environment":{"type":"container_reference","container_id":"cntr_r"}},` +
		`{"type":"shell_call_output","call_id":"call_1","output":[{"stdout":"a\n","stderr":"","outcome":{"type":"exit","exit_code":0}},{"stdout":"","stderr":"no","outcome":{"type":"timeout"}}]}]}`
	x, err := responses.Surface{}.NewExchange([]byte(body), schema.Options{})
	require.NoError(t, err)
	in := gjson.GetBytes(x.Request().Body, "input")
	assert.JSONEq(t, `[{"type":"function_call","call_id":"call_1","name":"shell","arguments":"{\"commands\":[\"ls\",\"false\"],\"timeout_ms\":1000,\"max_output_length\":null}"},`+
		`{"type":"function_call_output","call_id":"call_1","output":"[command 1: exit code 0]\na\n[command 2: timed out]\n[stderr]\nno"}]`, in.Raw, "the replayed items")
	assert.Equal(t, []string{"cntr_r"}, x.Request().ReplayedContainerIDs, "the replayed call's container")

	_, err = responses.Surface{}.NewExchange([]byte(`{"model":"m","tools":[{"type":"shell","environment":{"type":"container_auto"}}],"input":[{"type":"shell_call","call_id":"c","action":{}}]}`), schema.Options{})
	var re *schema.RequestError
	require.True(t, errors.As(err, &re), "a shell_call without commands is refused: %v", err)
	assert.Equal(t, "input[0].action", re.Param)
}

// runPython runs code with the host's python3 in dir and returns its stdout.
func runPython(t *testing.T, dir, code string) string {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3 on this host")
	}
	cmd := exec.Command(py, "-c", code)
	cmd.Dir = dir
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	require.NoError(t, cmd.Run(), "the program runs: %s", errOut.String())
	return out.String()
}

// A loop of a streamed answer with text, a shell call and text, run as the loop runs it (the
// program in python3), then a last answer: the shell call is never relayed as the function
// call it is upstream; the stream carries the native shell events; a client that accumulates
// it gets the plain answer; the model reads the commands' outputs.
func TestShellLoopStreamed(t *testing.T) {
	x, err := responses.Surface{}.NewExchange([]byte(shellClient), schema.Options{})
	require.NoError(t, err)
	var buf bytes.Buffer
	sink := x.Events(&buf)
	emit := func(ev schema.Event) { require.NoError(t, sink.Event(ev), "event %v", ev.Kind) }

	round0 := shellAnswer(x, "1", message("msg_1", "Let me look."), shellCallItem("s", `{"commands":["echo hi","echo oops >&2; exit 2"]}`), message("msg_1b", "Ran."))
	body := streamRound(t, x, sink, 0, round0, rand.New(rand.NewPCG(3, 4)), "", func(string) {})
	relayed := buf.String()
	assert.NotContains(t, relayed, `"name":"shell"`, "the shell function call is not relayed")
	assert.Contains(t, relayed, "Let me look.", "the text before it streams")
	assert.NotContains(t, relayed, "Ran.", "the items after it wait for the answer")

	turn, err := x.ParseTurn(body)
	require.NoError(t, err)
	emit(schema.Event{Kind: schema.EventRound, Round: 0, Body: body})
	require.Len(t, turn.Calls, 1, "the shell call is a call the loop runs")
	c := turn.Calls[0]
	require.NoError(t, c.ArgsErr)
	id := x.(schema.CallIDs).CodeCallID(0, 0, c.CallID)
	assert.True(t, strings.HasPrefix(id, "sh_"), "the call's item id %q", id)
	started := schema.CodeCall{ID: id, Status: schema.CodeCallInProgress, ContainerID: "cntr_1", Outputs: []schema.CodeOutput{}}
	emit(schema.Event{Kind: schema.EventCallStarted, Round: 0, Call: &started})
	stdout := runPython(t, t.TempDir(), c.Code)
	run := schema.CodeCall{ID: id, Status: schema.CodeCallCompleted, Code: c.Code, ContainerID: "cntr_1",
		Outputs: []schema.CodeOutput{{Type: "logs", Logs: stdout}}, Run: &schema.CodeRun{Stdout: stdout}}
	emit(schema.Event{Kind: schema.EventCallDone, Round: 0, Call: &run})

	follow, err := x.FollowUp([]schema.CallOutput{{CallID: c.CallID, Output: stdout}}, schema.FollowUpOptions{Stream: true})
	require.NoError(t, err)
	assert.Equal(t, "[command 1: exit code 0]\nhi\n[command 2: exit code 2]\n[stderr]\noops\n",
		gjson.GetBytes(follow, `input.#(type=="function_call_output").output`).String(), "what the model reads")

	round1 := shellAnswer(x, "2", message("msg_2", "Done."))
	body1 := streamRound(t, x, sink, 1, round1, nil, "", func(string) {})
	_, err = x.ParseTurn(body1)
	require.NoError(t, err)
	emit(schema.Event{Kind: schema.EventRound, Round: 1, Body: body1})
	final, err := x.Final([]schema.Round{{Body: body, Calls: []schema.CodeCall{run}}, {Body: body1}}, "")
	require.NoError(t, err)
	emit(schema.Event{Kind: schema.EventDone, Body: final})

	checkWhole(t, buf.Bytes(), final)
	out := gjson.GetBytes(final, "output")
	assert.Equal(t, `["message","shell_call","shell_call_output","message","message"]`, out.Get("#.type").Raw, "the answer's items")
	assert.JSONEq(t, `{"id":"`+id+`","type":"shell_call","status":"completed","call_id":"call_s","action":{"commands":["echo hi","echo oops >&2; exit 2"],"max_output_length":null,"timeout_ms":null},"environment":{"type":"container_reference","container_id":"cntr_1"},"caller":{"type":"direct"}}`,
		out.Get("1").Raw, "the shell_call")
	assert.JSONEq(t, `{"id":"sho_`+strings.TrimPrefix(id, "sh_")+`","type":"shell_call_output","status":"completed","call_id":"call_s","max_output_length":null,"output":[`+
		`{"stdout":"hi\n","stderr":"","outcome":{"type":"exit","exit_code":0}},{"stdout":"","stderr":"oops\n","outcome":{"type":"exit","exit_code":2}}],"caller":null}`,
		out.Get("2").Raw, "the shell_call_output")
	assert.JSONEq(t, `[{"type":"shell","environment":{"type":"container_auto","memory_limit":"4g","file_ids":["file-1"]}},{"type":"function","name":"w","parameters":{}}]`,
		gjson.GetBytes(final, "tools").Raw, "the client's tools echoed")

	// The replay of the answer as a stream (the fallback) is the stream the loop wrote, item
	// for item.
	replay, err := responses.SSE(final)
	require.NoError(t, err)
	a, b := accumulate(t, buf.Bytes()), accumulate(t, replay)
	assert.Equal(t, collapsed(b.types[2:]), collapsed(a.types[2:]), "the replayed stream's events are the live one's")
}

// A shell call whose arguments are not an action does not run: the model reads why, and the
// client sees the call with an incomplete output.
func TestShellInvalidArguments(t *testing.T) {
	x, err := responses.Surface{}.NewExchange([]byte(shellClient), schema.Options{})
	require.NoError(t, err)
	body := answer("1", shellCallItem("s", `{"commands":"ls"}`))
	turn, err := x.ParseTurn(body)
	require.NoError(t, err)
	require.Len(t, turn.Calls, 1)
	require.Error(t, turn.Calls[0].ArgsErr, "invalid arguments")
	follow, err := x.FollowUp([]schema.CallOutput{{CallID: "call_s", Output: "[invalid tool arguments]"}}, schema.FollowUpOptions{})
	require.NoError(t, err)
	assert.Contains(t, gjson.GetBytes(follow, `input.#(type=="function_call_output").output`).String(), "[invalid shell call: ",
		"the model reads why")
	final, err := x.Final([]schema.Round{{Body: body, Calls: []schema.CodeCall{{ID: "sh_1", Status: schema.CodeCallFailed,
		Outputs: []schema.CodeOutput{{Type: "logs", Logs: "[invalid tool arguments]"}}}}}}, "")
	require.NoError(t, err)
	assert.Equal(t, "incomplete", gjson.GetBytes(final, "output.1.status").String(), "the output is incomplete")
	assert.Equal(t, "[invalid tool arguments]", gjson.GetBytes(final, "output.1.output.0.stderr").String(), "the reason is its stderr")
}

// A turn with a shell call and a client call: the request that continues from the answer gets
// the shell call's output as the model reads it, not as its program printed it.
func TestShellContinuation(t *testing.T) {
	p := memory.NewPending(nil)
	x, err := responses.Surface{}.NewExchange([]byte(`{"model":"m","input":"q","tools":[{"type":"shell","environment":{"type":"container_auto"}},{"type":"function","name":"w","parameters":{}}]}`), schema.Options{})
	require.NoError(t, err)
	body := shellAnswer(x, "mixed", shellCallItem("s", `{"commands":["echo hi"]}`),
		`{"type":"function_call","id":"fc_w","call_id":"call_w","name":"w","arguments":"{}","status":"completed"}`)
	turn, err := x.ParseTurn(body)
	require.NoError(t, err)
	require.Len(t, turn.Calls, 1)
	assert.Equal(t, 1, turn.ClientCalls, "the client's call is pending")
	stdout := runPython(t, t.TempDir(), turn.Calls[0].Code)
	x.(schema.Continuation).Remember(p, "id-a", []byte(`{"id":"resp_mixed","output":[]}`),
		[]store.PendingCall{{CallID: "call_s", Arguments: turn.Calls[0].Arguments, Output: stdout}})

	next, err := responses.Surface{}.NewExchange([]byte(`{"model":"m","previous_response_id":"resp_mixed","input":[{"type":"function_call_output","call_id":"call_w","output":"sunny"}],"tools":[{"type":"shell","environment":{"type":"container_auto"}}]}`), schema.Options{})
	require.NoError(t, err)
	changed, err := next.(schema.Continuation).Continue(p, func() string { return "id-a" })
	require.NoError(t, err)
	require.True(t, changed)
	assert.Equal(t, "[command 1: exit code 0]\nhi\n", gjson.GetBytes(next.Request().Body, `input.#(call_id=="call_s").output`).String(),
		"the shell call's output as the model reads it")
}

// In a request with the shell tool and no code_interpreter tool, a client's function named as
// the code function would be is the client's: its calls are not run, and its tool is echoed.
func TestShellWithoutCodeInterpreter(t *testing.T) {
	x, err := responses.Surface{}.NewExchange([]byte(`{"model":"m","input":"q","tools":[{"type":"shell","environment":{"type":"container_auto"}},{"type":"function","name":"code_interpreter","parameters":{}}]}`), schema.Options{})
	require.NoError(t, err)
	body := shellAnswer(x, "1", `{"type":"function_call","id":"fc_c","call_id":"call_c","name":"code_interpreter","arguments":"{\"code\":\"1\"}","status":"completed"}`)
	turn, err := x.ParseTurn(body)
	require.NoError(t, err)
	assert.Empty(t, turn.Calls, "no call the loop runs")
	assert.Equal(t, 1, turn.ClientCalls, "the client's call")
	final, err := x.Final([]schema.Round{{Body: body}}, "")
	require.NoError(t, err)
	assert.Equal(t, `["function_call"]`, gjson.GetBytes(final, "output.#.type").Raw, "the client's call is shown")
	assert.Equal(t, `["shell","function"]`, gjson.GetBytes(final, "tools.#.type").Raw, "the client's tools echoed")
}

// The event stream of an answer with a shell call, from the shape of OpenAI's recorded traffic
// (docs/surfaces.md; the reference's openai-shell-skills fixture): the shell_call added in
// progress without commands, each command added, streamed and done, the call done before its
// output; the output added completed and empty, each command's content delta and done, the
// output done. The golden file is that stream, event for event.
func TestShellEventsGolden(t *testing.T) {
	final := `{"id":"resp_1","object":"response","created_at":1,"status":"completed","model":"m","output":[` +
		`{"id":"sh_0493","type":"shell_call","status":"completed","call_id":"call_ck","action":{"commands":["ls -R /mnt/data","echo done >&2"],"max_output_length":null,"timeout_ms":null},"environment":{"type":"container_reference","container_id":"cntr_698f"},"caller":{"type":"direct"}},` +
		`{"id":"sho_0493","type":"shell_call_output","status":"completed","call_id":"call_ck","max_output_length":null,"output":[{"stdout":"/mnt/data:\nSKILL.md\n","stderr":"","outcome":{"type":"exit","exit_code":0}},{"stdout":"","stderr":"done\n","outcome":{"type":"exit","exit_code":0}}],"caller":null},` +
		message("msg_1", "Listed.") + `],"tools":[{"type":"shell","environment":{"type":"container_auto"}}],"usage":{"input_tokens":1,"output_tokens":1,"total_tokens":2}}`
	stream, err := responses.SSE([]byte(final))
	require.NoError(t, err)
	checkWhole(t, stream, []byte(final))
	golden(t, filepath.Join("testdata", "shell_events.golden"), stream)
}

// A later request that references the answer's shell items by id (as the Vercel AI SDK does
// with store on) gets them back as the function call and output the model saw, and reuses
// their container.
func TestShellItemReferences(t *testing.T) {
	p := memory.NewPending(nil)
	x, err := responses.Surface{}.NewExchange([]byte(`{"model":"m","input":"q","tools":[{"type":"shell","environment":{"type":"container_auto"}}]}`), schema.Options{})
	require.NoError(t, err)
	body := shellAnswer(x, "1", shellCallItem("s", `{"commands":["echo hi"]}`))
	turn, err := x.ParseTurn(body)
	require.NoError(t, err)
	require.Len(t, turn.Calls, 1)
	id := x.(schema.CallIDs).CodeCallID(0, 0, "call_s")
	stdout := runPython(t, t.TempDir(), turn.Calls[0].Code)
	run := schema.CodeCall{ID: id, Status: schema.CodeCallCompleted, ContainerID: "cntr_r", Run: &schema.CodeRun{Stdout: stdout}}
	final, err := x.Final([]schema.Round{{Body: body, Calls: []schema.CodeCall{run}}, {Body: shellAnswer(x, "2", message("msg_2", "ok"))}}, "")
	require.NoError(t, err)
	x.(schema.Continuation).Remember(p, "id-a", final, nil)

	refs := `{"model":"m","tools":[{"type":"shell","environment":{"type":"container_auto"}}],"input":[{"type":"item_reference","id":"` + id + `"},` +
		`{"type":"shell_call_output","call_id":"call_s","output":[{"stdout":"hi\n","stderr":"","outcome":{"type":"exit","exit_code":0}}]},` +
		`{"type":"item_reference","id":"` + id + `"},{"type":"item_reference","id":"sho_` + strings.TrimPrefix(id, "sh_") + `"},{"type":"item_reference","id":"sh_other"}]}`
	next, err := responses.Surface{}.NewExchange([]byte(refs), schema.Options{})
	require.NoError(t, err)
	changed, err := next.(schema.Continuation).Continue(p, func() string { return "id-a" })
	require.NoError(t, err)
	require.True(t, changed)
	in := gjson.GetBytes(next.Request().Body, "input")
	assert.JSONEq(t, `[{"type":"function_call","call_id":"call_s","name":"shell","arguments":"{\"commands\":[\"echo hi\"],\"timeout_ms\":null,\"max_output_length\":null}"},`+
		`{"type":"function_call_output","call_id":"call_s","output":"[command 1: exit code 0]\nhi\n"},`+
		`{"type":"function_call","call_id":"call_s","name":"shell","arguments":"{\"commands\":[\"echo hi\"],\"timeout_ms\":null,\"max_output_length\":null}"},`+
		`{"type":"function_call_output","call_id":"call_s","output":"[command 1: exit code 0]\nhi\n"},`+
		`{"type":"item_reference","id":"sh_other"}]`, in.Raw, "the references expanded, an unknown one left as it is")
	assert.Contains(t, next.Request().ReplayedContainerIDs, "cntr_r", "the container of the referenced call is reused")

	other, err := responses.Surface{}.NewExchange([]byte(refs), schema.Options{})
	require.NoError(t, err)
	changed, err = other.(schema.Continuation).Continue(p, func() string { return "id-b" })
	require.NoError(t, err)
	assert.False(t, changed, "another identity's references are left as they are")
}

// FuzzShellRewrite checks the shell rewrite's promises on arbitrary bodies: it never panics or
// modifies its input, every error is a *RequestError, and a request it rewrote has no hosted
// shell tool left, nor, when it had one, a shell_call or shell_call_output input item.
func FuzzShellRewrite(f *testing.F) {
	for _, s := range []string{
		shellClient,
		`{"model":"m","tool_choice":{"type":"shell"},"tools":[{"type":"shell","environment":{"type":"container_reference","container_id":"c"}},{"type":"code_interpreter","container":"c"}],"input":[{"type":"shell_call","call_id":"a","action":{"commands":["ls"]}},{"type":"shell_call_output","call_id":"a","output":[{"stdout":"x","stderr":"","outcome":{"type":"timeout"}}]},{"type":"shell_call_output","output":7}]}`,
		`{"tools":[{"type":"shell","environment":{"type":"local"}},{"type":"shell","environment":{"type":"container_auto","file_ids":null,"memory_limit":null,"skills":[]}}],"input":"shell"}`,
		`{"tools":[{"type":"shell","environment":{"type":"container_auto"}}],"input":[{"type":"shell_call","action":{"commands":[1]}}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		in := bytes.Clone(body)
		x, err := responses.Surface{}.NewExchange(body, schema.Options{})
		require.Equal(t, in, body, "the input is not modified")
		if err != nil {
			var re *schema.RequestError
			require.True(t, errors.As(err, &re), "NewExchange(%q): %v is a *RequestError", body, err)
			return
		}
		r := x.Request()
		if !r.Found {
			return
		}
		// As a JSON parser reads them (the last of repeated keys wins).
		var before, after struct {
			Tools []map[string]any `json:"tools"`
			Input []map[string]any `json:"input"`
		}
		hostedIn := func(tools []map[string]any) bool {
			for _, tool := range tools {
				env, _ := tool["environment"].(map[string]any)
				if tool["type"] == "shell" && env != nil && (env["type"] == "container_auto" || env["type"] == "container_reference") {
					return true
				}
			}
			return false
		}
		_ = json.Unmarshal(body, &before)
		if json.Unmarshal(r.Body, &after) != nil || !hostedIn(before.Tools) {
			return // shell items without the hosted tool are the client's
		}
		assert.False(t, hostedIn(after.Tools), "NewExchange(%q) = %q: a hosted shell tool left", body, r.Body)
		for _, item := range after.Input {
			assert.False(t, item["type"] == "shell_call" || item["type"] == "shell_call_output", "NewExchange(%q) = %q: a shell item left", body, r.Body)
		}
	})
}

// An allowed_tools tool_choice naming the shell tool names the shell function instead, as one
// naming the code_interpreter tool names the code function: mode "required" forces the first
// round only, and the client's choice is echoed.
func TestShellAllowedTools(t *testing.T) {
	tests := []struct {
		name, give string
		// wantTools is the upstream's allowed tools (#.type:#.name joined).
		wantTools  string
		wantForced bool
		wantLater  string
	}{
		{
			name:       "required, shell only",
			give:       `{"model":"m","input":"q","tool_choice":{"type":"allowed_tools","mode":"required","tools":[{"type":"shell"}]},"tools":[{"type":"shell","environment":{"type":"container_auto"}},{"type":"function","name":"f","parameters":{}}]}`,
			wantTools:  `function:shell`,
			wantForced: true,
			wantLater:  `{"type":"allowed_tools","mode":"auto","tools":[{"type":"function","name":"shell"}]}`,
		},
		{
			name:      "auto, shell and code_interpreter and a function",
			give:      `{"model":"m","input":"q","tool_choice":{"type":"allowed_tools","mode":"auto","tools":[{"type":"code_interpreter"},{"type":"shell"},{"type":"function","name":"f"}]},"tools":[{"type":"code_interpreter","container":{"type":"auto"}},{"type":"shell","environment":{"type":"container_auto"}},{"type":"function","name":"f","parameters":{}}]}`,
			wantTools: `function:code_interpreter,function:shell,function:f`,
		},
		{
			name:       "required, both hosted tools",
			give:       `{"model":"m","input":"q","tool_choice":{"type":"allowed_tools","mode":"required","tools":[{"type":"shell"},{"type":"code_interpreter"}]},"tools":[{"type":"code_interpreter","container":{"type":"auto"}},{"type":"shell","environment":{"type":"container_auto"}}]}`,
			wantTools:  `function:shell,function:code_interpreter`,
			wantForced: true,
			wantLater:  `{"type":"allowed_tools","mode":"auto","tools":[{"type":"function","name":"shell"},{"type":"function","name":"code_interpreter"}]}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x, err := responses.Surface{}.NewExchange([]byte(tt.give), schema.Options{})
			require.NoError(t, err, tt.give)
			r := x.Request()
			var tools []string
			gjson.GetBytes(r.Body, "tool_choice.tools").ForEach(func(_, v gjson.Result) bool {
				tools = append(tools, v.Get("type").String()+":"+v.Get("name").String())
				return true
			})
			assert.Equal(t, tt.wantTools, strings.Join(tools, ","), "%s: upstream allowed tools", tt.give)
			assert.Equal(t, tt.wantForced, r.ForcedChoice, "%s: forced", tt.give)
			if tt.wantLater != "" {
				assert.JSONEq(t, tt.wantLater, string(r.LaterChoice), "%s: later rounds' choice", tt.give)
			}
			assert.Equal(t, gjson.Get(tt.give, "tool_choice").Raw, string(r.ToolChoice), "%s: the client's choice is echoed", tt.give)
		})
	}
}

// A container_auto environment's skills go to admission raw, named; the skills admission
// mounted are announced in the shell function's description the model gets.
func TestShellSkills(t *testing.T) {
	give := `{"model":"m","input":"q","tools":[{"type":"function","name":"f","description":"mine","parameters":{}},` +
		`{"type":"shell","environment":{"type":"container_auto","skills":[{"type":"skill_reference","skill_id":"skill_1"}]}}]}`
	x, err := responses.Surface{}.NewExchange([]byte(give), schema.Options{})
	require.NoError(t, err)
	r := x.Request()
	assert.JSONEq(t, `[{"type":"skill_reference","skill_id":"skill_1"}]`, string(r.Skills), "the skills, raw")
	assert.Equal(t, "tools[1].environment.skills", r.SkillsParam)
	before := gjson.GetBytes(r.Body, "tools.1.description").String()
	require.NotEmpty(t, before, "the shell function's description")

	sa, ok := x.(schema.SkillsAnnouncer)
	require.True(t, ok, "a Responses exchange announces skills")
	sa.AnnounceSkills("\n- csv: Reads \"CSV\" files (path: /home/oai/skills/csv-1/SKILL.md)")
	require.True(t, gjson.ValidBytes(r.Body), "the body stays JSON: %s", r.Body)
	assert.Equal(t, before+"\n- csv: Reads \"CSV\" files (path: /home/oai/skills/csv-1/SKILL.md)",
		gjson.GetBytes(r.Body, "tools.1.description").String(), "the shell function's description names the skill")
	assert.Equal(t, "mine", gjson.GetBytes(r.Body, "tools.0.description").String(), "another tool's is untouched")

	for _, empty := range []string{`[]`, `null`} {
		x, err := responses.Surface{}.NewExchange([]byte(`{"model":"m","input":"q","tools":[{"type":"shell","environment":{"type":"container_auto","skills":`+empty+`}}]}`), schema.Options{})
		require.NoError(t, err, empty)
		assert.Nil(t, x.Request().Skills, "%s: no skills", empty)
	}
}
