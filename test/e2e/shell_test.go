package e2e

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/test/e2e/fakemodel"
)

// Issue 30 (the hosted shell tool) end to end, through the real Envoy and our harness, with
// openai-go parsing what we return. Every scenario runs plain and streamed; the streaming
// client's final response must equal the plain answer, and the stream must carry the shell
// items' events in the order the native API sends them.
func TestShell(t *testing.T) {
	env := NewEnv(t, EnvOptions{})
	env.Fronts(t, func(t *testing.T, s *Stack) {
		m := newModel(t, s.Model)
		for _, sc := range shellScenarios {
			t.Run(sc.name, func(t *testing.T) {
				got := map[variant]string{}
				for _, v := range variants {
					t.Run(v.String(), func(t *testing.T) {
						m.clear()
						x := &scene{s: s, m: m, v: v, mark: len(m.Requests())}
						got[v] = x.unnamed(shellNormalized(sc.run(t, x)))
						assert.Zero(t, m.pending(), "%s (%s): every scripted answer was used", sc.name, v)
					})
				}
				plain, stream := got[variants[0]], got[variants[1]]
				if plain == "" || stream == "" {
					return
				}
				assert.Equal(t, plain, stream, "%s: the streaming client reconstructs the plain answer", sc.name)
			})
		}
		t.Run("the native event order", func(t *testing.T) { testShellEventOrder(t, s, m) })
	})
}

var shellScenarios = []loopScenario{
	{name: "a shell command writes a file a code_interpreter call reads", run: scenarioShellThenCode},
	{name: "several commands: exit codes, stderr, a timeout, an output cap", run: scenarioShellCommands},
	{name: "a container_reference environment", run: scenarioShellContainerReference},
	{name: "a replayed conversation and tool_choice shell", run: scenarioShellReplay},
	{name: "a local shell passes through", run: scenarioShellLocal},
	{name: "item references to shell items", run: scenarioShellItemReferences},
}

// shellIDs are the ids of shell items we mint.
var shellIDs = regexp.MustCompile(`\b(sh|sho)_[0-9a-f]{16,}\b`)

// shellNormalized is normalized, with the shell items' ids too.
func shellNormalized(raw string) string {
	if raw == "" {
		return ""
	}
	seen := map[string]string{}
	n := 0
	raw = shellIDs.ReplaceAllStringFunc(raw, func(id string) string {
		kind, suffix, _ := strings.Cut(id, "_")
		if _, ok := seen[suffix]; !ok {
			n++
			seen[suffix] = fmt.Sprint(n)
		}
		return kind + "_" + seen[suffix]
	})
	return normalized(raw)
}

// autoShell is the shell tool with a container_auto environment.
func autoShell() responses.ToolUnionParam {
	return responses.ToolUnionParam{OfShell: &responses.FunctionShellToolParam{
		Environment: responses.FunctionShellToolEnvironmentUnionParam{OfContainerAuto: &responses.ContainerAutoParam{}},
	}}
}

// runShell is a call of the shell function the shell tool becomes.
func runShell(callID string, action map[string]any) fakemodel.Item {
	b, _ := json.Marshal(action) // strings and numbers always marshal
	return fakemodel.FunctionCall("shell", callID, string(b))
}

// shellItems returns the shell_call and shell_call_output items at i and i+1.
func shellItems(t *testing.T, resp responses.Response, i int) (responses.ResponseFunctionShellToolCall, responses.ResponseFunctionShellToolCallOutput) {
	t.Helper()
	require.Greater(t, len(resp.Output), i+1, "output items: %s", resp.RawJSON())
	require.Equal(t, "shell_call", resp.Output[i].Type, "item %d: %s", i, resp.Output[i].RawJSON())
	require.Equal(t, "shell_call_output", resp.Output[i+1].Type, "item %d: %s", i+1, resp.Output[i+1].RawJSON())
	call, out := resp.Output[i].AsShellCall(), resp.Output[i+1].AsShellCallOutput()
	assert.True(t, strings.HasPrefix(call.ID, "sh_"), "shell_call id %q", call.ID)
	assert.Equal(t, "sho_"+strings.TrimPrefix(call.ID, "sh_"), out.ID, "shell_call_output id")
	assert.Equal(t, call.CallID, out.CallID, "the output names its call")
	assert.Equal(t, "container_reference", call.Environment.Type, "shell_call environment")
	assert.True(t, strings.HasPrefix(call.Environment.ContainerID, "cntr_"), "shell_call container %q", call.Environment.ContainerID)
	var keys map[string]json.RawMessage
	require.NoError(t, json.Unmarshal([]byte(resp.Output[i].RawJSON()), &keys))
	assert.ElementsMatch(t, []string{"id", "type", "status", "call_id", "action", "environment", "caller"}, mapKeys(keys), "shell_call keys")
	keys = nil
	require.NoError(t, json.Unmarshal([]byte(resp.Output[i+1].RawJSON()), &keys))
	assert.ElementsMatch(t, []string{"id", "type", "status", "call_id", "max_output_length", "output", "caller"}, mapKeys(keys), "shell_call_output keys")
	return call, out
}

func mapKeys(m map[string]json.RawMessage) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// testShellEventOrder streams a shell call and checks its events, event by event, against the
// order of OpenAI's recorded traffic (docs/surfaces.md, "shell").
func testShellEventOrder(t *testing.T, s *Stack, m *model) {
	m.clear()
	m.script(responsesPath,
		responsesReply(usage(10, 5), runShell("call_1", map[string]any{"commands": []string{"echo one", "echo two >&2"}})),
		responsesReply(usage(20, 7), fakemodel.Message("ok")))
	client := s.Client("sk-shell-events")
	stream := client.Responses.NewStreaming(t.Context(), responses.ResponseNewParams{
		Model: testModel,
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("events")},
		Tools: []responses.ToolUnionParam{autoShell()},
	})
	defer stream.Close()
	var events []responses.ResponseStreamEventUnion
	for stream.Next() {
		events = append(events, stream.Current())
	}
	require.NoError(t, stream.Err(), "shell events: the stream")
	final := checkResponsesEvents(t, events)
	var got []string
	for _, ev := range events {
		if ev.OutputIndex > 1 || !strings.Contains(ev.Type, "shell") && !strings.HasPrefix(ev.Type, "response.output_item") {
			continue
		}
		desc := ev.Type
		switch ev.Type {
		case "response.output_item.added", "response.output_item.done":
			desc += fmt.Sprintf(" %d %s %s", ev.OutputIndex, ev.Item.Type, ev.Item.Status)
		case "response.shell_call_command.added", "response.shell_call_command.done":
			desc += fmt.Sprintf(" %d %q", ev.CommandIndex, ev.Command)
		case "response.shell_call_command.delta":
			desc += fmt.Sprintf(" %d %q", ev.CommandIndex, ev.Delta)
		case "response.shell_call_output_content.delta":
			desc += fmt.Sprintf(" %d %s", ev.CommandIndex, ev.JSON.Delta.Raw())
		case "response.shell_call_output_content.done":
			desc += fmt.Sprintf(" %d %s", ev.CommandIndex, ev.JSON.Output.Raw())
			assert.Equal(t, final.Output[1].ID, ev.ItemID, "shell events: item_id of %s", ev.Type)
		}
		got = append(got, desc)
	}
	assert.Equal(t, []string{
		"response.output_item.added 0 shell_call in_progress",
		`response.shell_call_command.added 0 ""`,
		`response.shell_call_command.delta 0 "echo one"`,
		`response.shell_call_command.done 0 "echo one"`,
		`response.shell_call_command.added 1 ""`,
		`response.shell_call_command.delta 1 "echo two >&2"`,
		`response.shell_call_command.done 1 "echo two >&2"`,
		"response.output_item.done 0 shell_call completed",
		"response.output_item.added 1 shell_call_output completed",
		`response.shell_call_output_content.delta 0 {"stdout":"one\n"}`,
		`response.shell_call_output_content.done 0 [{"stdout":"one\n","stderr":"","outcome":{"type":"exit","exit_code":0}}]`,
		`response.shell_call_output_content.delta 1 {"stderr":"two\n"}`,
		`response.shell_call_output_content.done 1 [{"stdout":"","stderr":"two\n","outcome":{"type":"exit","exit_code":0}}]`,
		"response.output_item.done 1 shell_call_output completed",
	}, got, "shell events: the native order")
	assert.Equal(t, []string{"echo one", "echo two >&2"}, final.Output[0].AsShellCall().Action.Commands, "shell events: commands in the final call")
}

func scenarioShellThenCode(t *testing.T, x *scene) string {
	x.m.script(responsesPath,
		responsesReply(usage(10, 5), runShell("call_sh", map[string]any{"commands": []string{"echo from-shell > /mnt/data/shared.txt", "pwd; ls /mnt/data"}})),
		responsesReply(usage(20, 7), runCode("call_ci", "print(open('/mnt/data/shared.txt').read().strip())")),
		responsesReply(usage(30, 9), fakemodel.Message("done")))
	p := ask("write a file with the shell, read it with python")
	p.Tools = append(p.Tools, autoShell())
	resp := x.responses(t, "sk-shell", p)

	reqs := x.sent()
	require.Len(t, reqs, 3, "shell then code: requests the model got")
	tools := gjson.GetBytes(reqs[0].Body, "tools")
	assert.Equal(t, `["code_interpreter","shell"]`, gjson.Get(tools.Raw, "#.name").Raw, "the model sees both tools as functions")
	assert.Equal(t, "[command 1: exit code 0]\n[command 2: exit code 0]\n/mnt/data\nshared.txt\n[files written: /mnt/data/shared.txt (11 bytes)]", outputOf(t, reqs[1], "call_sh"),
		"shell then code: what the model reads of the commands")
	assert.Equal(t, "from-shell\n", outputOf(t, reqs[2], "call_ci"), "shell then code: python reads the file the shell wrote")

	assert.Equal(t, []string{"shell_call", "shell_call_output", "code_interpreter_call", "message"}, itemTypes(resp), "shell then code: output items")
	call, out := shellItems(t, resp, 0)
	assert.Equal(t, "completed", string(call.Status), "shell_call status")
	assert.Equal(t, []string{"echo from-shell > /mnt/data/shared.txt", "pwd; ls /mnt/data"}, call.Action.Commands, "shell_call commands")
	assert.Equal(t, "completed", string(out.Status), "shell_call_output status")
	require.Len(t, out.Output, 2, "one output per command")
	assert.Equal(t, "", out.Output[0].Stdout, "command 1 stdout")
	assert.Equal(t, "exit", out.Output[0].Outcome.Type, "command 1 outcome")
	assert.Equal(t, "/mnt/data\nshared.txt\n", out.Output[1].Stdout, "command 2 stdout")
	ci := codeCall(t, resp, 2)
	assert.Equal(t, call.Environment.ContainerID, ci.ContainerID, "the shell and code_interpreter calls share one container")
	var tt []string
	for _, tool := range resp.Tools {
		tt = append(tt, tool.Type)
	}
	assert.Equal(t, []string{"code_interpreter", "shell"}, tt, "the client's tools echoed")
	assert.Equal(t, "container_auto", resp.Tools[1].Environment.Type, "the shell tool echoed as sent")
	return resp.RawJSON()
}

func scenarioShellCommands(t *testing.T, x *scene) string {
	x.m.script(responsesPath,
		responsesReply(usage(10, 5), runShell("call_1", map[string]any{
			"commands":   []string{"echo out; echo err >&2; exit 3", "printf 0123456789", "sleep 5; echo never"},
			"timeout_ms": 700, "max_output_length": 8,
		})),
		responsesReply(usage(20, 7), fakemodel.Message("ok")))
	p := responses.ResponseNewParams{
		Model: testModel,
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("run things")},
		Tools: []responses.ToolUnionParam{autoShell()},
	}
	resp := x.responses(t, "sk-shell", p)
	reqs := x.sent()
	require.Len(t, reqs, 2, "commands: requests the model got")
	assert.Equal(t, "[command 1: exit code 3]\nout\n[stderr]\nerr\n[command 2: exit code 0]\n01234567\n[command 3: timed out]\n", outputOf(t, reqs[1], "call_1"),
		"commands: what the model reads")
	assert.Equal(t, []string{"shell_call", "shell_call_output", "message"}, itemTypes(resp), "commands: output items")
	call, out := shellItems(t, resp, 0)
	assert.Equal(t, int64(700), call.Action.TimeoutMs, "timeout_ms echoed")
	assert.Equal(t, int64(8), call.Action.MaxOutputLength, "max_output_length echoed")
	assert.Equal(t, int64(8), out.MaxOutputLength, "max_output_length on the output")
	require.Len(t, out.Output, 3, "commands: outputs")
	assert.Equal(t, "out\n", out.Output[0].Stdout, "command 1 stdout")
	assert.Equal(t, "err\n", out.Output[0].Stderr, "command 1 stderr")
	assert.Equal(t, int64(3), out.Output[0].Outcome.ExitCode, "command 1 exit code")
	assert.Equal(t, "01234567", out.Output[1].Stdout, "command 2 cut to max_output_length")
	assert.Equal(t, "timeout", out.Output[2].Outcome.Type, "command 3 timed out")
	assert.NotContains(t, out.Output[2].Stdout, "never", "command 3 was stopped")
	return resp.RawJSON()
}

func scenarioShellContainerReference(t *testing.T, x *scene) string {
	x.m.script(responsesPath,
		responsesReply(usage(10, 5), runShell("call_1", map[string]any{"commands": []string{"echo kept > /mnt/data/kept.txt"}})),
		responsesReply(usage(20, 7), fakemodel.Message("written")),
		responsesReply(usage(10, 5), runShell("call_2", map[string]any{"commands": []string{"cat kept.txt"}})),
		responsesReply(usage(20, 7), fakemodel.Message("read")))
	p := responses.ResponseNewParams{
		Model: testModel,
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("write")},
		Tools: []responses.ToolUnionParam{autoShell()},
	}
	first := x.responses(t, "sk-shell-ref", p)
	call, _ := shellItems(t, first, 0)
	p.Input = responses.ResponseNewParamsInputUnion{OfString: openai.String("read")}
	p.Tools = []responses.ToolUnionParam{{OfShell: &responses.FunctionShellToolParam{
		Environment: responses.FunctionShellToolEnvironmentUnionParam{OfContainerReference: &responses.ContainerReferenceParam{
			ContainerID: call.Environment.ContainerID,
		}},
	}}}
	second := x.responses(t, "sk-shell-ref", p)
	call2, out := shellItems(t, second, 0)
	assert.Equal(t, call.Environment.ContainerID, call2.Environment.ContainerID, "container_reference: the same container")
	require.Len(t, out.Output, 1, "container_reference: outputs")
	assert.Equal(t, "kept\n", out.Output[0].Stdout, "container_reference: the file of the first request")
	return "[" + first.RawJSON() + "," + second.RawJSON() + "]"
}

func scenarioShellReplay(t *testing.T, x *scene) string {
	x.m.script(responsesPath,
		responsesReply(usage(10, 5), runShell("call_2", map[string]any{"commands": []string{"echo again"}})),
		responsesReply(usage(20, 7), fakemodel.Message("again")))
	input := responses.ResponseInputParam{
		responses.ResponseInputItemParamOfMessage("list", responses.EasyInputMessageRoleUser),
		responses.ResponseInputItemParamOfShellCall(responses.ResponseInputItemShellCallActionParam{Commands: []string{"ls"}}, "call_1"),
		responses.ResponseInputItemParamOfShellCallOutput("call_1", []responses.ResponseFunctionShellCallOutputContentParam{{
			Stdout: "a.txt\n", Stderr: "",
			Outcome: responses.ResponseFunctionShellCallOutputContentOutcomeUnionParam{
				OfExit: &responses.ResponseFunctionShellCallOutputContentOutcomeExitParam{ExitCode: 0},
			},
		}}),
		responses.ResponseInputItemParamOfMessage("again", responses.EasyInputMessageRoleUser),
	}
	p := responses.ResponseNewParams{
		Model:      testModel,
		Input:      responses.ResponseNewParamsInputUnion{OfInputItemList: input},
		Tools:      []responses.ToolUnionParam{autoShell()},
		ToolChoice: responses.ResponseNewParamsToolChoiceUnion{OfSpecificShellToolChoice: &responses.ToolChoiceShellParam{}},
	}
	resp := x.responses(t, "sk-shell-replay", p)
	reqs := x.sent()
	require.Len(t, reqs, 2, "replay: requests the model got")
	in := gjson.GetBytes(reqs[0].Body, "input")
	require.Equal(t, int64(4), in.Get("#").Int(), "replay: input items")
	assert.Equal(t, "function_call", in.Get("1.type").String(), "replay: the shell_call becomes a function call")
	assert.Equal(t, "function_call_output", in.Get("2.type").String(), "replay: the shell_call_output becomes its output")
	assert.JSONEq(t, `{"commands":["ls"],"timeout_ms":null,"max_output_length":null}`, in.Get("1.arguments").String(), "replay: the call's arguments")
	assert.Equal(t, "shell", in.Get("1.name").String(), "replay: the call's function")
	assert.Equal(t, "[command 1: exit code 0]\na.txt\n", in.Get("2.output").String(), "replay: the output as the model read it")
	assert.JSONEq(t, `{"type":"function","name":"shell"}`, gjson.GetBytes(reqs[0].Body, "tool_choice").Raw, "tool_choice shell names the function")
	assert.False(t, gjson.GetBytes(reqs[1].Body, "tool_choice").Exists(), "a forced choice applies to the first round only")
	assert.Equal(t, "shell", resp.ToolChoice.Type, "the client's tool_choice echoed")
	_, out := shellItems(t, resp, 0)
	require.Len(t, out.Output, 1, "replay: outputs")
	assert.Equal(t, "again\n", out.Output[0].Stdout, "replay: the new command ran")
	return resp.RawJSON()
}

func scenarioShellLocal(t *testing.T, x *scene) string {
	x.m.script(responsesPath, responsesReply(usage(10, 5), fakemodel.Message("local")))
	p := responses.ResponseNewParams{
		Model: testModel,
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("local")},
		Tools: []responses.ToolUnionParam{{OfShell: &responses.FunctionShellToolParam{
			Environment: responses.FunctionShellToolEnvironmentUnionParam{OfLocal: &responses.LocalEnvironmentParam{}},
		}}},
	}
	// The model's answer to a request we do not serve passes through as it is: plain only.
	client := x.s.Client("sk-shell-local")
	resp, err := client.Responses.New(t.Context(), p)
	require.NoError(t, err, "local: the request")
	reqs := x.sent()
	require.Len(t, reqs, 1, "local: requests the model got")
	assert.JSONEq(t, `[{"type":"shell","environment":{"type":"local"}}]`, gjson.GetBytes(reqs[0].Body, "tools").Raw, "local: the tool reaches the model untouched")
	return resp.RawJSON()
}

func scenarioShellItemReferences(t *testing.T, x *scene) string {
	x.m.script(responsesPath,
		responsesReply(usage(10, 5), runShell("call_1", map[string]any{"commands": []string{"echo ref > /mnt/data/ref.txt; echo wrote"}})),
		responsesReply(usage(20, 7), fakemodel.Message("wrote")),
		responsesReply(usage(10, 5), runShell("call_2", map[string]any{"commands": []string{"cat ref.txt"}})),
		responsesReply(usage(20, 7), fakemodel.Message("read")))
	key := "sk-shell-refs-" + x.v.String()
	p := responses.ResponseNewParams{
		Model: testModel,
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("write")},
		Tools: []responses.ToolUnionParam{autoShell()},
	}
	first := x.responses(t, key, p)
	call, out := shellItems(t, first, 0)

	// As the Vercel AI SDK replays it with store on: the call by reference, its output rebuilt.
	p.Input = responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
		responses.ResponseInputItemParamOfMessage("write", responses.EasyInputMessageRoleUser),
		responses.ResponseInputItemParamOfItemReference(call.ID),
		responses.ResponseInputItemParamOfShellCallOutput(call.CallID, []responses.ResponseFunctionShellCallOutputContentParam{{
			Stdout: out.Output[0].Stdout, Stderr: out.Output[0].Stderr,
			Outcome: responses.ResponseFunctionShellCallOutputContentOutcomeUnionParam{
				OfExit: &responses.ResponseFunctionShellCallOutputContentOutcomeExitParam{ExitCode: out.Output[0].Outcome.ExitCode},
			},
		}}),
		responses.ResponseInputItemParamOfMessage("read it", responses.EasyInputMessageRoleUser),
	}}
	second := x.responses(t, key, p)
	reqs := x.sent()
	require.Len(t, reqs, 4, "item references: requests the model got")
	in := gjson.GetBytes(reqs[2].Body, "input")
	assert.Equal(t, "function_call", in.Get("1.type").String(), "item references: the reference is the function call the model made")
	assert.Equal(t, "call_1", in.Get("1.call_id").String(), "item references: its call id")
	assert.Equal(t, "[command 1: exit code 0]\nwrote\n", in.Get("2.output").String(), "item references: the rebuilt output")
	call2, out2 := shellItems(t, second, 0)
	assert.Equal(t, call.Environment.ContainerID, call2.Environment.ContainerID, "item references: the referenced call's container is reused")
	require.Len(t, out2.Output, 1)
	assert.Equal(t, "ref\n", out2.Output[0].Stdout, "item references: the file is there")
	return "[" + first.RawJSON() + "," + second.RawJSON() + "]"
}
