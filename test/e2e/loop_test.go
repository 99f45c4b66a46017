package e2e

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"image/png"
	"net/http"
	"strings"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/openai/openai-go/v3/responses"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
	"google.golang.org/protobuf/proto"

	"github.com/codeinterp/codeinterp/pkg/config"
	"github.com/codeinterp/codeinterp/pkg/loop"
	"github.com/codeinterp/codeinterp/test/e2e/fakemodel"
	"github.com/codeinterp/codeinterp/test/e2e/harness"
)

// Issue 4 (the loop) and issue 5 (streaming) end to end. Every scenario runs twice, once with
// a plain request and once with stream:true through the SDK's streaming API, and the final
// object the streaming client reconstructs must equal the plain answer (the fake model is
// deterministic; only the minted ci_/cntr_ ids may differ, consistently).
func TestLoop(t *testing.T) {
	env := NewEnv(t, EnvOptions{})
	env.Fronts(t, func(t *testing.T, s *Stack) {
		m := newModel(t, s.Model)
		for _, sc := range loopScenarios {
			t.Run(sc.name, func(t *testing.T) {
				got := map[variant]string{}
				for _, v := range variants {
					t.Run(v.String(), func(t *testing.T) {
						m.clear()
						x := &scene{s: s, m: m, v: v, mark: len(m.Requests())}
						got[v] = x.unnamed(sc.run(t, x))
						assert.Zero(t, m.pending(), "%s (%s): every scripted answer was used", sc.name, v)
					})
				}
				plain, stream := got[variants[0]], got[variants[1]]
				if plain == "" || stream == "" {
					return // a variant failed; its own failure says why
				}
				assert.Equal(t, plain, stream, "%s: the streaming client reconstructs the plain answer", sc.name)
			})
		}
		t.Run("sandbox lifetime", func(t *testing.T) { testSandboxLifetime(t, s, m) })
		t.Run("a chat stream without include_usage has no usage chunk", func(t *testing.T) { testChatStreamWithoutUsage(t, s, m) })
	})
}

// TestLoopWhateverTheRouteMode runs scenarios on routes whose ExtProcPerRoute sets other body
// modes than the filter's (request body NONE, response body STREAMED): the server asks for the
// whole bodies with its mode_override, so the request is still rewritten and the loop still reads
// the whole answer.
func TestLoopWhateverTheRouteMode(t *testing.T) {
	cfg := harness.ShippedConfig(t)
	for i := range cfg.Routes {
		r := &cfg.Routes[i]
		if r.PerRoute.GetDisabled() {
			continue
		}
		per := &extprocv3.ExtProcPerRoute{}
		if r.PerRoute != nil {
			per = proto.Clone(r.PerRoute).(*extprocv3.ExtProcPerRoute)
		}
		if per.GetOverrides() == nil {
			per.Override = &extprocv3.ExtProcPerRoute_Overrides{Overrides: &extprocv3.ExtProcOverrides{}}
		}
		per.GetOverrides().ProcessingMode = &extprocv3.ProcessingMode{
			RequestHeaderMode:  extprocv3.ProcessingMode_SEND,
			RequestBodyMode:    extprocv3.ProcessingMode_NONE,
			ResponseHeaderMode: extprocv3.ProcessingMode_SEND,
			ResponseBodyMode:   extprocv3.ProcessingMode_STREAMED,
		}
		r.PerRoute = per
	}
	env := NewEnv(t, EnvOptions{Harness: harness.Options{Config: cfg}})
	env.Fronts(t, func(t *testing.T, s *Stack) {
		m := newModel(t, s.Model)
		for _, sc := range []loopScenario{
			{name: "compute 40+2 (responses)", run: scenarioComputeResponses},
			{name: "compute 40+2 (chat)", run: scenarioComputeChat},
		} {
			for _, v := range variants {
				t.Run(sc.name+"/"+v.String(), func(t *testing.T) {
					m.clear()
					x := &scene{s: s, m: m, v: v, mark: len(m.Requests())}
					sc.run(t, x)
					assert.Zero(t, m.pending(), "%s (%s): every scripted answer was used", sc.name, v)
				})
			}
		}
	})
}

// scene is one run of a scenario: the stack, the model, the variant, and the model's request
// count when it started.
type scene struct {
	s    *Stack
	m    *model
	v    variant
	mark int
	// names are the names made by name, by base name.
	names map[string]string
}

// sent returns the requests the model received during the scene.
func (x *scene) sent() []fakemodel.Request { return x.m.since(x.mark) }

// name makes a name (a session, a marker) unique to the variant, so that the two variants of a
// scenario do not share state.
func (x *scene) name(base string) string {
	if x.names == nil {
		x.names = map[string]string{}
	}
	n := base + "-" + x.v.String()
	x.names[base] = n
	return n
}

// unnamed replaces the names made by name with their base names in what a scenario returned,
// so that the two variants compare equal.
func (x *scene) unnamed(s string) string {
	for base, n := range x.names {
		s = strings.ReplaceAll(s, n, base)
	}
	return s
}

// ask is a Responses request with the code_interpreter tool (auto container) whose include
// asks for the calls' outputs (without it they are null, as natively: see askNoOutputs).
func ask(input string) responses.ResponseNewParams {
	p := askNoOutputs(input)
	p.Include = []responses.ResponseIncludable{responses.ResponseIncludableCodeInterpreterCallOutputs}
	return p
}

// askNoOutputs is ask without include.
func askNoOutputs(input string) responses.ResponseNewParams {
	return responses.ResponseNewParams{
		Model: testModel,
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(input)},
		Tools: []responses.ToolUnionParam{autoTool()},
	}
}

// askChat is a Chat request; the code_interpreter tool is added by withChatTool (the SDK has no
// such Chat tool type). A streaming request asks for the usage chunk.
func (x *scene) askChat(input string) openai.ChatCompletionNewParams {
	p := openai.ChatCompletionNewParams{
		Model:    testModel,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(input)},
	}
	if x.v.stream {
		p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	}
	return p
}

// withChatTool adds {"type":"code_interpreter"} (and more tools) to a Chat request.
func withChatTool(more ...any) option.RequestOption {
	return option.WithJSONSet("tools", append([]any{map[string]any{"type": "code_interpreter"}}, more...))
}

// responses sends a Responses request with apiKey and returns the final response.
func (x *scene) responses(t *testing.T, apiKey string, p responses.ResponseNewParams, opts ...option.RequestOption) responses.Response {
	t.Helper()
	resp, err := responsesCall(t, x.v, x.s.Client(apiKey), p, opts...)
	require.NoError(t, err, "Responses request (%s)", x.v)
	return resp
}

// chat sends a Chat request with apiKey and returns the completion.
func (x *scene) chat(t *testing.T, apiKey string, p openai.ChatCompletionNewParams, opts ...option.RequestOption) openai.ChatCompletion {
	t.Helper()
	resp, err := chatCall(t, x.v, x.s.Client(apiKey), p, opts...)
	require.NoError(t, err, "Chat request (%s)", x.v)
	return resp
}

// outputOf returns the output of the function call callID in a request the model got:
// function_call_output (Responses) or the tool message (Chat).
func outputOf(t *testing.T, r fakemodel.Request, callID string) string {
	t.Helper()
	if v := gjson.GetBytes(r.Body, `input.#(call_id=="`+callID+`")#|#(type=="function_call_output").output`); v.Exists() {
		return v.String()
	}
	if v := gjson.GetBytes(r.Body, `messages.#(tool_call_id=="`+callID+`").content`); v.Exists() {
		return v.String()
	}
	t.Errorf("the model's request has no output for call %s: %s", callID, r.Body)
	return ""
}

// checkUpstreamRequests checks what every model call of a loop carries: the client's
// credentials (also on the loop's own follow-ups), no x-codeinterp-* header (the signed
// follow-up header is removed before the model), and no stream_options whatever the client
// asked; every call has stream:false unless streams (a Responses client that streams: the
// first call keeps its stream:true, unless the profile replays streams, and the loop's own calls
// stream too).
func checkUpstreamRequests(t *testing.T, s *Stack, reqs []fakemodel.Request, auth, what string, streams bool) {
	t.Helper()
	replayed := s.Config.GetDefaultProfile().GetStreamMode() == config.StreamReplay
	for i, r := range reqs {
		streams := streams && (i > 0 || !replayed)
		assert.Equal(t, auth, r.Header.Get("Authorization"), "%s: credentials of model call %d", what, i+1)
		for k := range r.Header {
			assert.False(t, strings.HasPrefix(strings.ToLower(k), "x-codeinterp-"), "%s: model call %d carries %s", what, i+1, k)
		}
		assert.Equal(t, streams, gjson.GetBytes(r.Body, "stream").Bool(), "%s: whether model call %d streams", what, i+1)
		assert.False(t, gjson.GetBytes(r.Body, "stream_options").Exists(), "%s: model call %d has stream_options", what, i+1)
	}
}

// codeCall returns output item i as a code_interpreter_call, checking its type.
func codeCall(t *testing.T, resp responses.Response, i int) responses.ResponseCodeInterpreterToolCall {
	t.Helper()
	require.Greater(t, len(resp.Output), i, "output items: %s", resp.RawJSON())
	item := resp.Output[i]
	require.Equal(t, "code_interpreter_call", item.Type, "output item %d: %s", i, item.RawJSON())
	return item.AsCodeInterpreterCall()
}

// logsOf returns the logs outputs of a call, concatenated.
func logsOf(ci responses.ResponseCodeInterpreterToolCall) string {
	var b strings.Builder
	for _, o := range ci.Outputs {
		if o.Type == "logs" {
			b.WriteString(o.Logs)
		}
	}
	return b.String()
}

// itemTypes lists the output item types of a response.
func itemTypes(resp responses.Response) []string {
	out := make([]string, len(resp.Output))
	for i, it := range resp.Output {
		out[i] = it.Type
	}
	return out
}

// checkNativeAnswer checks what every Responses answer of a code_interpreter request must be:
// the client's own tool echoed, no internal function call visible, items with the native keys.
func checkNativeAnswer(t *testing.T, resp responses.Response, what string) {
	t.Helper()
	var tools []string
	for _, tool := range resp.Tools {
		tools = append(tools, tool.Type+":"+tool.Name)
	}
	assert.Contains(t, tools, "code_interpreter:", "%s: the client's tool echoed", what)
	assert.NotContains(t, tools, "function:code_interpreter", "%s: the internal function is not echoed", what)
	for i, it := range resp.Output {
		assert.False(t, it.Type == "function_call" && it.Name == "code_interpreter", "%s: item %d is the internal call", what, i)
		if it.Type != "code_interpreter_call" {
			continue
		}
		var keys map[string]json.RawMessage
		require.NoError(t, json.Unmarshal([]byte(it.RawJSON()), &keys), "%s: item %d", what, i)
		var names []string
		for k := range keys {
			names = append(names, k)
		}
		assert.ElementsMatch(t, []string{"id", "type", "status", "code", "container_id", "outputs"}, names, "%s: keys of item %d", what, i)
		out := bytes.TrimSpace(keys["outputs"])
		assert.True(t, bytes.HasPrefix(out, []byte("[")) || string(out) == "null", "%s: outputs of item %d is an array (include) or null, not %s", what, i, keys["outputs"])
		assert.True(t, strings.HasPrefix(it.ID, "ci_"), "%s: id of item %d", what, i)
		assert.True(t, strings.HasPrefix(it.ContainerID, "cntr_"),
			"%s: container_id of item %d is %q: every code_interpreter_call names the container of its request (docs/containers.md)", what, i, it.ContainerID)
	}
}

// loopScenario is one scenario of issue 4; run returns what the client got, normalized, for
// the plain/stream comparison.
type loopScenario struct {
	name string
	run  func(t *testing.T, x *scene) string
}

var loopScenarios = []loopScenario{
	{name: "compute 40+2 (responses)", run: scenarioComputeResponses},
	{name: "compute 40+2 (chat)", run: scenarioComputeChat},
	{name: "an error fed back and corrected (responses)", run: scenarioErrorCorrectedResponses},
	{name: "an error fed back and corrected (chat)", run: scenarioErrorCorrectedChat},
	{name: "two calls in one turn", run: scenarioTwoCallsOneTurn},
	{name: "no code run (responses)", run: scenarioNoCodeResponses},
	{name: "no code run (chat)", run: scenarioNoCodeChat},
	{name: "what a notebook shows", run: scenarioNotebookOutputs},
	{name: "a plot is an image output", run: scenarioImage},
	{name: "a forced tool_choice applies to the first round only (responses)", run: scenarioForcedChoiceResponses},
	{name: "a forced tool_choice applies to the first round only (chat)", run: scenarioForcedChoiceChat},
	{name: "repeated code is not run again", run: scenarioRepeat},
	{name: "arguments that are not code", run: scenarioInvalidArguments},
	{name: "the round limit (responses)", run: scenarioMaxRoundsResponses},
	{name: "the round limit (chat)", run: scenarioMaxRoundsChat},
	{name: "a run that exceeds the run timeout", run: scenarioRunTimeout},
	{name: "a session by metadata.session_id and by container id", run: scenarioSessionResponses},
	{name: "a session (chat)", run: scenarioSessionChat},
	{name: "a session by the profile's session header", run: scenarioSessionHeader},
	{name: "two API keys with the same session_id are isolated", run: scenarioIsolation},
	{name: "the sandbox killed mid-run", run: scenarioSandboxKilled},
	{name: "upstream 500 in round 2 (responses)", run: scenarioUpstreamErrorResponses},
	{name: "upstream 500 in round 2 (chat)", run: scenarioUpstreamErrorChat},
	{name: "a mixed client and internal call, then the client's replay", run: scenarioMixedReplay},
	{name: "a mixed client and internal call, then a continuation by previous_response_id", run: scenarioMixedContinue},
	{name: "a mixed client and internal call (chat)", run: scenarioMixedChat},
}

func scenarioComputeResponses(t *testing.T, x *scene) string {
	x.m.script(responsesPath,
		responsesReply(usage(10, 5), runCode("call_1", "print(40+2)")),
		responsesReply(usage(20, 7), fakemodel.Message("40+2 = 42")))
	resp := x.responses(t, "sk-compute", ask("compute 40+2"))

	reqs := x.sent()
	require.Len(t, reqs, 2, "compute: requests the model got")
	assert.Equal(t, "42\n", outputOf(t, reqs[1], "call_1"), "compute: the real output fed back to the model")
	checkUpstreamRequests(t, x.s, reqs, "Bearer sk-compute", "compute", x.v.stream)
	checkNativeAnswer(t, resp, "compute")
	assert.Equal(t, []string{"code_interpreter_call", "message"}, itemTypes(resp), "compute: output items")
	ci := codeCall(t, resp, 0)
	assert.Equal(t, responses.ResponseCodeInterpreterToolCallStatusCompleted, ci.Status, "compute: status")
	assert.Equal(t, "print(40+2)", ci.Code, "compute: code")
	require.Len(t, ci.Outputs, 1, "compute: outputs")
	assert.Equal(t, "42\n", ci.Outputs[0].AsLogs().Logs, "compute: logs")
	assert.Equal(t, "40+2 = 42", resp.OutputText(), "compute: answer text")
	assert.Equal(t, int64(30), resp.Usage.InputTokens, "compute: input tokens summed over the rounds")
	assert.Equal(t, int64(12), resp.Usage.OutputTokens, "compute: output tokens summed over the rounds")
	assert.Equal(t, int64(42), resp.Usage.TotalTokens, "compute: total tokens summed over the rounds")
	// A plain answer is the last turn's response, whose id a previous_response_id must name
	// upstream; a stream names its response with the first turn's id in response.created, and
	// a continuation from that name goes upstream as one from the last turn.
	wantID := fakemodel.Responses(testModel, usage(20, 7), fakemodel.Message("40+2 = 42"))["id"]
	if x.v.stream {
		wantID = fakemodel.Responses(testModel, usage(10, 5), runCode("call_1", "print(40+2)"))["id"]
	}
	assert.Equal(t, wantID, resp.ID, "compute: the response id")
	return normalized(resp.RawJSON())
}

func scenarioComputeChat(t *testing.T, x *scene) string {
	x.m.script(chatPath,
		chatReply(usage(10, 5), "", chatRunCode("call_1", "print(40+2)")),
		chatReply(usage(20, 7), "40+2 = 42"))
	resp := x.chat(t, "sk-compute", x.askChat("compute 40+2"), withChatTool())

	reqs := x.sent()
	require.Len(t, reqs, 2, "compute chat: requests the model got")
	checkChatUpstreamRequests(t, x.s, reqs, "Bearer sk-compute", "compute chat", x.v.stream)
	assert.Equal(t, "42\n", outputOf(t, reqs[1], "call_1"), "compute chat: the real output fed back to the model")
	assert.Equal(t, "call_1", gjson.GetBytes(reqs[1].Body, `messages.#(role=="assistant").tool_calls.0.id`).String(),
		"compute chat: the follow-up has the assistant's call")
	require.Len(t, resp.Choices, 1, "compute chat: choices")
	assert.Equal(t, "40+2 = 42", resp.Choices[0].Message.Content, "compute chat: answer")
	assert.Empty(t, resp.Choices[0].Message.ToolCalls, "compute chat: no internal call visible")
	assert.Equal(t, "stop", resp.Choices[0].FinishReason, "compute chat: finish_reason")
	assert.Equal(t, int64(42), resp.Usage.TotalTokens, "compute chat: usage summed over the rounds")
	assert.Equal(t, int64(30), resp.Usage.PromptTokens, "compute chat: prompt tokens summed")
	return viewChat(resp)
}

func scenarioErrorCorrectedResponses(t *testing.T, x *scene) string {
	reasoning := fakemodel.Item{"type": "reasoning", "id": "rs_1", "summary": []any{}, "encrypted_content": "gAAAA-e2e"}
	x.m.script(responsesPath,
		responsesReply(usage(10, 5), reasoning, fakemodel.Message("Let me look."), runCode("call_bad", "x = [1, 2, 3]\nprint(x[5])")),
		responsesReply(usage(20, 6), runCode("call_good", "print(x[2])")),
		responsesReply(usage(30, 7), fakemodel.Message("The last element is 3.")))
	resp := x.responses(t, "sk-rounds", ask("print the last element"))

	reqs := x.sent()
	require.Len(t, reqs, 3, "error corrected: requests the model got")
	fed := outputOf(t, reqs[1], "call_bad")
	assert.Contains(t, fed, "IndexError: list index out of range", "error corrected: the error fed back")
	assert.Contains(t, fed, "line 2", "error corrected: the traceback names the line")
	assert.Contains(t, fed, "Traceback", "error corrected: a traceback")
	assert.Equal(t, "3\n", outputOf(t, reqs[2], "call_good"), "error corrected: state kept between rounds")
	assert.Equal(t, fed, outputOf(t, reqs[2], "call_bad"), "error corrected: round 1 kept in round 2's request")
	input := gjson.GetBytes(reqs[1].Body, "input")
	assert.Equal(t, "gAAAA-e2e", gjson.Get(input.Raw, `#(id=="rs_1").encrypted_content`).String(), "error corrected: the reasoning item kept in the follow-up")
	assert.Equal(t, "Let me look.", gjson.Get(input.Raw, `#(type=="message").content.0.text`).String(), "error corrected: the assistant's text kept in the follow-up")

	checkNativeAnswer(t, resp, "error corrected")
	assert.Equal(t, []string{"reasoning", "message", "code_interpreter_call", "code_interpreter_call", "message"}, itemTypes(resp),
		"error corrected: every round's items, in order")
	assert.Equal(t, "rs_1", resp.Output[0].ID, "error corrected: the reasoning item")
	bad, good := codeCall(t, resp, 2), codeCall(t, resp, 3)
	assert.Equal(t, "x = [1, 2, 3]\nprint(x[5])", bad.Code, "error corrected: first call first")
	assert.Equal(t, fed, logsOf(bad), "error corrected: the client sees the traceback")
	assert.Equal(t, "print(x[2])", good.Code, "error corrected: second call second")
	assert.Equal(t, "3\n", logsOf(good), "error corrected: second call's logs")
	assert.Equal(t, bad.ContainerID, good.ContainerID, "error corrected: one container per request")
	assert.Equal(t, int64(60+18), resp.Usage.TotalTokens, "error corrected: usage of the three rounds")
	return normalized(resp.RawJSON())
}

func scenarioErrorCorrectedChat(t *testing.T, x *scene) string {
	x.m.script(chatPath,
		chatReply(usage(10, 5), "", chatRunCode("call_bad", "1/0")),
		chatReply(usage(20, 6), "Let me fix that.", chatRunCode("call_good", "print(1/2)")),
		chatReply(usage(30, 7), "Half is 0.5."))
	resp := x.chat(t, "sk-rounds", x.askChat("halve one"), withChatTool())

	reqs := x.sent()
	require.Len(t, reqs, 3, "error corrected chat: requests the model got")
	assert.Contains(t, outputOf(t, reqs[1], "call_bad"), "ZeroDivisionError: division by zero", "error corrected chat: the error fed back")
	assert.Equal(t, "0.5\n", outputOf(t, reqs[2], "call_good"), "error corrected chat: the corrected run")
	assert.Equal(t, "Let me fix that.", gjson.GetBytes(reqs[2].Body, `messages.#(role=="assistant")#.content|1`).String(),
		"error corrected chat: the assistant's text kept in the follow-up")
	require.Len(t, resp.Choices, 1, "error corrected chat: choices")
	assert.Equal(t, "Half is 0.5.", resp.Choices[0].Message.Content, "error corrected chat: answer")
	assert.Equal(t, int64(78), resp.Usage.TotalTokens, "error corrected chat: usage of the three rounds")
	return viewChat(resp)
}

func scenarioTwoCallsOneTurn(t *testing.T, x *scene) string {
	x.m.script(responsesPath,
		responsesReply(usage(1, 1), runCode("call_1", "a = 6\nprint('a set')"), runCode("call_2", "print(a * 7)")),
		responsesReply(usage(1, 1), fakemodel.Message("a * 7 = 42")))
	resp := x.responses(t, "sk-two", ask("two steps"))

	reqs := x.sent()
	require.Len(t, reqs, 2, "two calls: requests the model got")
	assert.Equal(t, "a set\n", outputOf(t, reqs[1], "call_1"), "two calls: the first ran first")
	assert.Equal(t, "42\n", outputOf(t, reqs[1], "call_2"), "two calls: the second saw the first's state")
	checkNativeAnswer(t, resp, "two calls")
	assert.Equal(t, []string{"code_interpreter_call", "code_interpreter_call", "message"}, itemTypes(resp), "two calls: items")
	assert.Equal(t, "print(a * 7)", codeCall(t, resp, 1).Code, "two calls: in the model's order")
	assert.Equal(t, codeCall(t, resp, 0).ContainerID, codeCall(t, resp, 1).ContainerID, "two calls: one container")
	return normalized(resp.RawJSON())
}

func scenarioNoCodeResponses(t *testing.T, x *scene) string {
	x.m.script(responsesPath, responsesReply(usage(3, 2), fakemodel.Message("No code needed.")))
	resp := x.responses(t, "sk-nocode", ask("say hi"))
	require.Len(t, x.sent(), 1, "no code: requests the model got")
	checkNativeAnswer(t, resp, "no code")
	assert.Equal(t, []string{"message"}, itemTypes(resp), "no code: items")
	assert.Equal(t, int64(5), resp.Usage.TotalTokens, "no code: usage")
	return normalized(resp.RawJSON())
}

func scenarioNoCodeChat(t *testing.T, x *scene) string {
	x.m.script(chatPath, chatReply(usage(3, 2), "No code needed."))
	resp := x.chat(t, "sk-nocode", x.askChat("say hi"), withChatTool())
	require.Len(t, x.sent(), 1, "no code chat: requests the model got")
	require.Len(t, resp.Choices, 1, "no code chat: choices")
	assert.Equal(t, "No code needed.", resp.Choices[0].Message.Content, "no code chat: answer")
	assert.Equal(t, int64(5), resp.Usage.TotalTokens, "no code chat: usage")
	return viewChat(resp)
}

func scenarioNotebookOutputs(t *testing.T, x *scene) string {
	code := "import sys\nprint('to stdout')\nprint('to stderr', file=sys.stderr)\n" +
		"open('/mnt/data/out.csv', 'w').write('a,b\\n1,2\\n')\n6 * 7"
	x.m.script(responsesPath,
		responsesReply(usage(1, 1), runCode("call_nb", code)),
		responsesReply(usage(1, 1), fakemodel.Message("All shown.")))
	resp := x.responses(t, "sk-notebook", ask("show everything"))

	want := "to stdout\n[stderr]\nto stderr\n42\n[files written: /mnt/data/out.csv (8 bytes)]"
	reqs := x.sent()
	require.Len(t, reqs, 2, "notebook: requests the model got")
	assert.Equal(t, want, outputOf(t, reqs[1], "call_nb"), "notebook: stdout, stderr, the last value and files fed back")
	checkNativeAnswer(t, resp, "notebook")
	assert.Equal(t, want, logsOf(codeCall(t, resp, 0)), "notebook: the client's logs")
	return normalized(resp.RawJSON())
}

func scenarioImage(t *testing.T, x *scene) string {
	code := "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.title('squares');"
	x.m.script(responsesPath,
		responsesReply(usage(1, 1), runCode("call_plot", code)),
		responsesReply(usage(1, 1), fakemodel.Message("Here is the plot.")))
	resp := x.responses(t, "sk-image", ask("plot squares"))

	reqs := x.sent()
	require.Len(t, reqs, 2, "image: requests the model got")
	assert.Equal(t, "[1 image was shown to the user]", outputOf(t, reqs[1], "call_plot"), "image: the model is told an image was shown")
	checkNativeAnswer(t, resp, "image")
	ci := codeCall(t, resp, 0)
	require.Len(t, ci.Outputs, 1, "image: outputs %s", ci.RawJSON())
	img := ci.Outputs[0]
	require.Equal(t, "image", img.Type, "image: output type")
	data, ok := strings.CutPrefix(img.AsImage().URL, "data:image/png;base64,")
	require.True(t, ok, "image: a PNG data URL, got %.40s", img.URL)
	raw, err := base64.StdEncoding.DecodeString(data)
	require.NoError(t, err, "image: base64")
	cfg, err := png.DecodeConfig(bytes.NewReader(raw))
	require.NoError(t, err, "image: a PNG")
	assert.Positive(t, cfg.Width, "image: width")
	assert.Positive(t, cfg.Height, "image: height")
	return normalized(resp.RawJSON())
}

func scenarioForcedChoiceResponses(t *testing.T, x *scene) string {
	x.m.script(responsesPath,
		responsesReply(usage(1, 1), runCode("call_f", "print('forced')")),
		responsesReply(usage(1, 1), fakemodel.Message("Done.")))
	p := ask("you must run code")
	p.ToolChoice = responses.ResponseNewParamsToolChoiceUnion{OfHostedTool: &responses.ToolChoiceTypesParam{Type: responses.ToolChoiceTypesTypeCodeInterpreter}}
	resp := x.responses(t, "sk-forced", p)

	reqs := x.sent()
	require.Len(t, reqs, 2, "forced: requests the model got")
	assert.JSONEq(t, `{"type":"function","name":"code_interpreter"}`, gjson.GetBytes(reqs[0].Body, "tool_choice").Raw, "forced: round 1 forces the function")
	assert.False(t, gjson.GetBytes(reqs[1].Body, "tool_choice").Exists(), "forced: round 2 does not force it again: %s", gjson.GetBytes(reqs[1].Body, "tool_choice").Raw)
	checkNativeAnswer(t, resp, "forced")
	assert.JSONEq(t, `{"type":"code_interpreter"}`, resp.ToolChoice.RawJSON(), "forced: the client's tool_choice echoed")
	return normalized(resp.RawJSON())
}

func scenarioForcedChoiceChat(t *testing.T, x *scene) string {
	x.m.script(chatPath,
		chatReply(usage(1, 1), "", chatRunCode("call_f", "print('forced')")),
		chatReply(usage(1, 1), "Done."))
	resp := x.chat(t, "sk-forced", x.askChat("you must run code"), withChatTool(),
		option.WithJSONSet("tool_choice", map[string]any{"type": "code_interpreter"}))

	reqs := x.sent()
	require.Len(t, reqs, 2, "forced chat: requests the model got")
	assert.JSONEq(t, `{"type":"function","function":{"name":"code_interpreter"}}`, gjson.GetBytes(reqs[0].Body, "tool_choice").Raw, "forced chat: round 1 forces the function")
	assert.False(t, gjson.GetBytes(reqs[1].Body, "tool_choice").Exists(), "forced chat: round 2 does not force it again")
	assert.Equal(t, "Done.", resp.Choices[0].Message.Content, "forced chat: answer")
	return viewChat(resp)
}

func scenarioRepeat(t *testing.T, x *scene) string {
	code := "n = globals().get('n', 0) + 1\nprint('run', n)"
	x.m.script(responsesPath,
		responsesReply(usage(1, 1), runCode("call_r1", code)),
		responsesReply(usage(1, 1), runCode("call_r2", code)),
		responsesReply(usage(1, 1), fakemodel.Message("It ran once.")))
	resp := x.responses(t, "sk-repeat", ask("run it twice"))

	reqs := x.sent()
	require.Len(t, reqs, 3, "repeat: requests the model got")
	assert.Equal(t, "run 1\n", outputOf(t, reqs[1], "call_r1"), "repeat: first run")
	assert.Equal(t, loop.TextRepeated, outputOf(t, reqs[2], "call_r2"), "repeat: the repeat is not run")
	assert.Equal(t, "none", gjson.GetBytes(reqs[2].Body, "tool_choice").String(), "repeat: the model must answer in text")
	checkNativeAnswer(t, resp, "repeat")
	assert.Equal(t, []string{"code_interpreter_call", "code_interpreter_call", "message"}, itemTypes(resp), "repeat: items")
	second := codeCall(t, resp, 1)
	assert.Equal(t, responses.ResponseCodeInterpreterToolCallStatusFailed, second.Status, "repeat: the repeated call failed")
	assert.Equal(t, loop.TextRepeated, logsOf(second), "repeat: its logs")
	return normalized(resp.RawJSON())
}

func scenarioInvalidArguments(t *testing.T, x *scene) string {
	x.m.script(responsesPath,
		responsesReply(usage(1, 1), fakemodel.FunctionCall("code_interpreter", "call_raw", "print('not JSON')")),
		responsesReply(usage(1, 1), fakemodel.Message("I will answer without code.")))
	resp := x.responses(t, "sk-args", ask("run it"))

	reqs := x.sent()
	require.Len(t, reqs, 2, "invalid arguments: requests the model got")
	assert.Equal(t, loop.TextInvalidArguments, outputOf(t, reqs[1], "call_raw"), "invalid arguments: the model is told, nothing ran")
	checkNativeAnswer(t, resp, "invalid arguments")
	ci := codeCall(t, resp, 0)
	assert.Equal(t, responses.ResponseCodeInterpreterToolCallStatusFailed, ci.Status, "invalid arguments: status")
	assert.Equal(t, loop.TextInvalidArguments, logsOf(ci), "invalid arguments: logs")
	return normalized(resp.RawJSON())
}

// analyst returns a client of the analyst route (profile: two rounds, run timeout, session
// header).
func (x *scene) analyst(apiKey string, opts ...option.RequestOption) openai.Client {
	return x.s.ClientAt("/analyst/v1/", apiKey, opts...)
}

func scenarioMaxRoundsResponses(t *testing.T, x *scene) string {
	x.m.script(responsesPath,
		responsesReply(usage(1, 1), runCode("call_a", "print('a')")),
		responsesReply(usage(1, 1), runCode("call_b", "print('b')")),
		// The model ignores tool_choice "none" and calls again: the call is dropped.
		responsesReply(usage(1, 1), runCode("call_c", "print('c')"), fakemodel.Message("Out of rounds.")))
	resp, err := responsesCall(t, x.v, x.analyst("sk-rounds"), ask("keep going"))
	require.NoError(t, err, "max rounds: request")

	reqs := x.sent()
	require.Len(t, reqs, 3, "max rounds: requests the model got (two rounds, then a text answer)")
	assert.Equal(t, "b\n\n"+loop.TextRoundLimit, outputOf(t, reqs[2], "call_b"), "max rounds: the model is told")
	assert.Equal(t, "none", gjson.GetBytes(reqs[2].Body, "tool_choice").String(), "max rounds: the last call asks for text")
	checkNativeAnswer(t, resp, "max rounds")
	assert.Equal(t, []string{"code_interpreter_call", "code_interpreter_call", "message"}, itemTypes(resp), "max rounds: items (call_c dropped)")
	assert.Equal(t, "Out of rounds.", resp.OutputText(), "max rounds: answer")
	assert.Equal(t, responses.ResponseStatusCompleted, resp.Status, "max rounds: status")
	return normalized(resp.RawJSON())
}

func scenarioMaxRoundsChat(t *testing.T, x *scene) string {
	x.m.script(chatPath,
		chatReply(usage(1, 1), "", chatRunCode("call_a", "print('a')")),
		chatReply(usage(1, 1), "", chatRunCode("call_b", "print('b')")),
		chatReply(usage(1, 1), "Out of rounds.", chatRunCode("call_c", "print('c')")))
	resp, err := chatCall(t, x.v, x.analyst("sk-rounds"), x.askChat("keep going"), withChatTool())
	require.NoError(t, err, "max rounds chat: request")

	reqs := x.sent()
	require.Len(t, reqs, 3, "max rounds chat: requests the model got")
	assert.Equal(t, "none", gjson.GetBytes(reqs[2].Body, "tool_choice").String(), "max rounds chat: the last call asks for text")
	require.Len(t, resp.Choices, 1, "max rounds chat: choices")
	assert.Equal(t, "Out of rounds.", resp.Choices[0].Message.Content, "max rounds chat: answer")
	assert.Empty(t, resp.Choices[0].Message.ToolCalls, "max rounds chat: the dropped call is not visible")
	assert.Equal(t, "stop", resp.Choices[0].FinishReason, "max rounds chat: finish_reason")
	return viewChat(resp)
}

func scenarioRunTimeout(t *testing.T, x *scene) string {
	x.m.script(responsesPath,
		responsesReply(usage(1, 1), runCode("call_slow", "import time\nprint('started', flush=True)\ntime.sleep(120)")),
		responsesReply(usage(1, 1), fakemodel.Message("It was too slow.")))
	resp, err := responsesCall(t, x.v, x.analyst("sk-slow"), ask("sleep"))
	require.NoError(t, err, "run timeout: request")

	reqs := x.sent()
	require.Len(t, reqs, 2, "run timeout: requests the model got")
	fed := outputOf(t, reqs[1], "call_slow")
	assert.True(t, strings.HasPrefix(fed, "[execution timed out after 2s and was interrupted]\n"), "run timeout: the model is told: %q", fed)
	assert.Contains(t, fed, "started", "run timeout: what it printed before")
	assert.Contains(t, fed, "KeyboardInterrupt", "run timeout: interrupted like a notebook")
	checkNativeAnswer(t, resp, "run timeout")
	ci := codeCall(t, resp, 0)
	assert.Equal(t, responses.ResponseCodeInterpreterToolCallStatusFailed, ci.Status, "run timeout: status")
	assert.Equal(t, fed, logsOf(ci), "run timeout: logs")
	return normalized(resp.RawJSON())
}

// withSession sets metadata.session_id.
func withSession(p *responses.ResponseNewParams, session string) {
	p.Metadata = map[string]string{"session_id": session}
}

// containerTool is the code_interpreter tool naming a container.
func containerTool(id string) responses.ToolUnionParam {
	return responses.ToolUnionParam{OfCodeInterpreter: &responses.ToolCodeInterpreterParam{
		Container: responses.ToolCodeInterpreterContainerUnionParam{OfString: openai.String(id)},
	}}
}

func scenarioSessionResponses(t *testing.T, x *scene) string {
	session := x.name("session")
	x.m.script(responsesPath,
		responsesReply(usage(1, 1), runCode("call_s1", "x = 10")),
		responsesReply(usage(1, 1), fakemodel.Message("Set.")),
		responsesReply(usage(1, 1), runCode("call_s2", "print(x)")),
		responsesReply(usage(1, 1), fakemodel.Message("x is 10.")),
		responsesReply(usage(1, 1), runCode("call_s3", "x += 1\nprint(x)")),
		responsesReply(usage(1, 1), fakemodel.Message("x is 11.")))

	p := ask("set x")
	withSession(&p, session)
	first := x.responses(t, "sk-session", p)
	p = ask("print x")
	withSession(&p, session)
	second := x.responses(t, "sk-session", p)
	id := codeCall(t, first, 0).ContainerID
	p = ask("increment x")
	p.Tools = []responses.ToolUnionParam{containerTool(id)}
	third := x.responses(t, "sk-session", p)

	reqs := x.sent()
	require.Len(t, reqs, 6, "session: requests the model got")
	assert.Equal(t, "[the code ran and produced no output]", outputOf(t, reqs[1], "call_s1"), "session: the assignment")
	assert.Equal(t, "10\n", outputOf(t, reqs[3], "call_s2"), "session: the variable survived by session_id")
	assert.Equal(t, "11\n", outputOf(t, reqs[5], "call_s3"), "session: the variable survived by container id")
	for i, r := range []responses.Response{first, second, third} {
		checkNativeAnswer(t, r, "session")
		assert.Equal(t, id, codeCall(t, r, 0).ContainerID, "session: request %d's container_id", i+1)
	}
	assert.Equal(t, id, gjson.Get(third.JSON.Tools.Raw(), "0.container").String(), "session: the named container echoed")
	return normalized("[" + first.RawJSON() + "," + second.RawJSON() + "," + third.RawJSON() + "]")
}

func scenarioSessionChat(t *testing.T, x *scene) string {
	session := x.name("chat-session")
	x.m.script(chatPath,
		chatReply(usage(1, 1), "", chatRunCode("call_s1", "greeting = 'hello'")),
		chatReply(usage(1, 1), "Stored."),
		chatReply(usage(1, 1), "", chatRunCode("call_s2", "greeting.upper()")),
		chatReply(usage(1, 1), "HELLO"))
	opts := []option.RequestOption{withChatTool(), option.WithJSONSet("metadata", map[string]string{"session_id": session})}
	first := x.chat(t, "sk-session", x.askChat("store a greeting"), opts...)
	second := x.chat(t, "sk-session", x.askChat("shout it"), opts...)

	reqs := x.sent()
	require.Len(t, reqs, 4, "chat session: requests the model got")
	assert.Equal(t, "'HELLO'", outputOf(t, reqs[3], "call_s2"), "chat session: the variable survived (the value of the last expression)")
	assert.Equal(t, "HELLO", second.Choices[0].Message.Content, "chat session: answer")
	return viewChat(first) + viewChat(second)
}

func scenarioSessionHeader(t *testing.T, x *scene) string {
	x.m.script(responsesPath,
		responsesReply(usage(1, 1), runCode("call_h1", "y = 7")),
		responsesReply(usage(1, 1), fakemodel.Message("Set.")),
		responsesReply(usage(1, 1), runCode("call_h2", "print(y * 6)")),
		responsesReply(usage(1, 1), fakemodel.Message("42.")))
	client := x.analyst("sk-header", option.WithHeader(SessionHeader, x.name("header-session")))
	first, err := responsesCall(t, x.v, client, ask("set y"))
	require.NoError(t, err, "session header: first request")
	second, err := responsesCall(t, x.v, client, ask("use y"))
	require.NoError(t, err, "session header: second request")

	reqs := x.sent()
	require.Len(t, reqs, 4, "session header: requests the model got")
	assert.Equal(t, "/v1/responses", reqs[0].Path, "session header: the analyst route rewrote the path for the model")
	assert.Equal(t, "42\n", outputOf(t, reqs[3], "call_h2"), "session header: the variable survived")
	assert.Equal(t, x.name("header-session"), reqs[3].Header.Get(SessionHeader), "session header: the follow-up carried the client's headers")
	assert.Equal(t, codeCall(t, first, 0).ContainerID, codeCall(t, second, 0).ContainerID, "session header: one container")
	return normalized("[" + first.RawJSON() + "," + second.RawJSON() + "]")
}

func scenarioIsolation(t *testing.T, x *scene) string {
	session := x.name("shared")
	x.m.script(responsesPath,
		responsesReply(usage(1, 1), runCode("call_a", "z = 'secret of A'")),
		responsesReply(usage(1, 1), fakemodel.Message("Stored.")),
		responsesReply(usage(1, 1), runCode("call_b", "print(z)")),
		responsesReply(usage(1, 1), fakemodel.Message("No z here.")))
	p := ask("store a secret")
	withSession(&p, session)
	a := x.responses(t, "sk-tenant-a", p)
	p = ask("read the secret")
	withSession(&p, session)
	b := x.responses(t, "sk-tenant-b", p)

	reqs := x.sent()
	require.Len(t, reqs, 4, "isolation: requests the model got")
	fed := outputOf(t, reqs[3], "call_b")
	assert.Contains(t, fed, "NameError: name 'z' is not defined", "isolation: B does not see A's variable")
	assert.NotContains(t, fed, "secret of A", "isolation: B does not see A's value")
	idA, idB := codeCall(t, a, 0).ContainerID, codeCall(t, b, 0).ContainerID
	assert.NotEqual(t, idA, idB, "isolation: two containers for one session_id under two keys")

	// B naming A's container: not found, as if it did not exist.
	mark := len(x.m.Requests())
	p = ask("use A's container")
	p.Tools = []responses.ToolUnionParam{containerTool(idA)}
	_, err := responsesCall(t, x.v, x.s.Client("sk-tenant-b"), p)
	apiErr := apiError(t, err, "isolation: another key's container")
	assert.Equal(t, http.StatusNotFound, apiErr.StatusCode, "isolation: status")
	assert.Equal(t, "container_not_found", apiErr.Code, "isolation: error code")
	assert.Equal(t, "Container '"+idA+"' not found.", apiErr.Message, "isolation: error message")
	assert.Empty(t, x.m.since(mark), "isolation: nothing reached the model")
	return normalized("[" + a.RawJSON() + "," + b.RawJSON() + "," + apiErr.RawJSON() + "]")
}

func scenarioSandboxKilled(t *testing.T, x *scene) string {
	session := x.name("killed")
	x.m.script(responsesPath,
		responsesReply(usage(1, 1), runCode("call_v", "v = 5")),
		responsesReply(usage(1, 1), runCode("call_kill", "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)")),
		responsesReply(usage(1, 1), fakemodel.Message("The sandbox died.")),
		responsesReply(usage(1, 1), runCode("call_fresh", "print('v' in globals(), 6 * 7)")),
		responsesReply(usage(1, 1), fakemodel.Message("A fresh sandbox.")))
	p := ask("set v, then die")
	withSession(&p, session)
	killed := x.responses(t, "sk-killed", p)
	p = ask("are you there?")
	withSession(&p, session)
	fresh := x.responses(t, "sk-killed", p)

	reqs := x.sent()
	require.Len(t, reqs, 5, "killed: requests the model got")
	assert.Equal(t, loop.TextSandboxLost, outputOf(t, reqs[2], "call_kill"), "killed: the model is told the sandbox was lost")
	assert.Equal(t, "False 42\n", outputOf(t, reqs[4], "call_fresh"), "killed: the next request runs in a fresh sandbox")

	checkNativeAnswer(t, killed, "killed")
	assert.Equal(t, []string{"code_interpreter_call", "code_interpreter_call", "message"}, itemTypes(killed), "killed: items")
	lost := codeCall(t, killed, 1)
	assert.Equal(t, responses.ResponseCodeInterpreterToolCallStatusFailed, lost.Status, "killed: the lost call failed")
	assert.Equal(t, loop.TextSandboxLost, logsOf(lost), "killed: its logs")
	assert.Equal(t, responses.ResponseCodeInterpreterToolCallStatusCompleted, codeCall(t, killed, 0).Status, "killed: the first call completed")
	assert.NotEqual(t, codeCall(t, killed, 0).ContainerID, codeCall(t, fresh, 0).ContainerID, "killed: a new container")
	assert.Equal(t, responses.ResponseCodeInterpreterToolCallStatusCompleted, codeCall(t, fresh, 0).Status, "killed: the fresh run completed")
	return normalized("[" + killed.RawJSON() + "," + fresh.RawJSON() + "]")
}

func scenarioUpstreamErrorResponses(t *testing.T, x *scene) string {
	x.m.script(responsesPath,
		responsesReply(usage(1, 1), runCode("call_1", "print('ran')")),
		errorReply(http.StatusInternalServerError, "the model fell over"))
	_, err := responsesCall(t, x.v, x.s.Client("sk-upstream"), ask("compute"))
	reqs := x.sent()
	require.Len(t, reqs, 2, "upstream 500: requests the model got")
	assert.Equal(t, "ran\n", outputOf(t, reqs[1], "call_1"), "upstream 500: round 1 ran")
	if x.v.stream {
		// A stream reports a failure in the middle of an answer as response.failed.
		var failed *failedStream
		require.True(t, errors.As(err, &failed), "upstream 500 stream: want response.failed, got %T: %v", err, err)
		assert.Equal(t, responses.ResponseStatusFailed, failed.Response.Status, "upstream 500 stream: status")
		assert.Equal(t, "the model fell over", failed.Response.Error.Message, "upstream 500 stream: the upstream's message")
		assert.Equal(t, "code_interpreter", failed.Response.Tools[0].Type, "upstream 500 stream: the hosted tool is echoed")
		return "error: " + failed.Response.Error.Message
	}
	apiErr := apiError(t, err, "upstream 500")
	assert.Equal(t, http.StatusInternalServerError, apiErr.StatusCode, "upstream 500: status")
	assert.Equal(t, "the model fell over", apiErr.Message, "upstream 500: the upstream's message")
	assert.Equal(t, "server_error", apiErr.Type, "upstream 500: type")
	assert.Equal(t, "application/json", apiErr.Response.Header.Get("Content-Type"), "upstream 500: content-type")
	return "error: " + apiErr.Message
}

func scenarioUpstreamErrorChat(t *testing.T, x *scene) string {
	x.m.script(chatPath,
		chatReply(usage(1, 1), "", chatRunCode("call_1", "print('ran')")),
		errorReply(http.StatusInternalServerError, "the model fell over"))
	_, err := chatCall(t, x.v, x.s.Client("sk-upstream"), x.askChat("compute"), withChatTool())
	require.Len(t, x.sent(), 2, "upstream 500 chat: requests the model got")
	if x.v.stream {
		// A chat stream reports it as an error chunk, which the SDK raises.
		var streamErr *ssestream.StreamError
		require.True(t, errors.As(err, &streamErr), "upstream 500 chat stream: want a stream error, got %T: %v", err, err)
		msg := gjson.GetBytes(streamErr.Event.Data, "error.message").String()
		assert.Equal(t, "the model fell over", msg, "upstream 500 chat stream: the upstream's message")
		return "error: " + msg
	}
	apiErr := apiError(t, err, "upstream 500 chat")
	assert.Equal(t, http.StatusInternalServerError, apiErr.StatusCode, "upstream 500 chat: status")
	assert.Equal(t, "the model fell over", apiErr.Message, "upstream 500 chat: the upstream's message")
	return "error: " + apiErr.Message
}

// weatherTool is a client function tool.
func weatherTool() responses.ToolUnionParam {
	return responses.ToolUnionParam{OfFunction: &responses.FunctionToolParam{
		Name:       "get_weather",
		Parameters: map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}},
	}}
}

func scenarioMixedReplay(t *testing.T, x *scene) string {
	x.m.script(responsesPath,
		responsesReply(usage(5, 5), runCode("call_ci", "print(6 * 7)"),
			fakemodel.FunctionCall("get_weather", "call_w", `{"city":"Paris"}`)),
		responsesReply(usage(9, 3), fakemodel.Message("42, and sunny in Paris.")))
	user := responses.ResponseInputItemParamOfMessage("compute and check the weather", responses.EasyInputMessageRoleUser)
	p := ask("")
	p.Input = responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{user}}
	p.Tools = append(p.Tools, weatherTool())
	first := x.responses(t, "sk-mixed", p)

	reqs := x.sent()
	require.Len(t, reqs, 1, "mixed: the client's call is pending, so the model is not called again")
	checkNativeAnswer(t, first, "mixed")
	assert.Equal(t, []string{"code_interpreter_call", "function_call"}, itemTypes(first), "mixed: our item, then the client's call")
	ci := codeCall(t, first, 0)
	assert.Equal(t, "42\n", logsOf(ci), "mixed: our call ran")
	call := first.Output[1].AsFunctionCall()
	assert.Equal(t, "get_weather", call.Name, "mixed: the client's call")
	assert.Equal(t, "call_w", call.CallID, "mixed: the client's call id")

	// The client replays our items with its function's output, statelessly.
	p.Input = responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
		user,
		{OfCodeInterpreterCall: ptr(ci.ToParam())},
		{OfFunctionCall: ptr(call.ToParam())},
		{OfFunctionCallOutput: &responses.ResponseInputItemFunctionCallOutputParam{
			CallID: openai.String("call_w"),
			Output: responses.ResponseInputItemFunctionCallOutputOutputUnionParam{OfString: openai.String("sunny")},
		}},
	}}
	second := x.responses(t, "sk-mixed", p)

	reqs = x.sent()
	require.Len(t, reqs, 2, "mixed: the replay reached the model")
	input := gjson.GetBytes(reqs[1].Body, "input")
	assert.False(t, gjson.Get(input.Raw, `#(type=="code_interpreter_call")`).Exists(), "mixed: no code_interpreter_call item reaches the model")
	replayed := gjson.Get(input.Raw, `#(call_id=="`+ci.ID+`")#`).Array()
	require.Len(t, replayed, 2, "mixed: our item became a function call pair: %s", input.Raw)
	assert.Equal(t, "function_call", replayed[0].Get("type").String(), "mixed: the call")
	assert.Equal(t, "code_interpreter", replayed[0].Get("name").String(), "mixed: the call's name")
	assert.JSONEq(t, codeArgs("print(6 * 7)"), replayed[0].Get("arguments").String(), "mixed: the call's code")
	assert.Equal(t, "function_call_output", replayed[1].Get("type").String(), "mixed: the output")
	assert.Equal(t, "42\n", replayed[1].Get("output").String(), "mixed: the output's logs")
	assert.Equal(t, "sunny", outputOf(t, reqs[1], "call_w"), "mixed: the client's output")
	checkNativeAnswer(t, second, "mixed replay")
	assert.Equal(t, "42, and sunny in Paris.", second.OutputText(), "mixed: the final answer")
	return normalized("[" + first.RawJSON() + "," + second.RawJSON() + "]")
}

func scenarioMixedContinue(t *testing.T, x *scene) string {
	x.m.script(responsesPath,
		responsesReply(usage(5, 5), runCode("call_ci", "print(6 * 7)"),
			fakemodel.FunctionCall("get_weather", "call_w", `{"city":"Paris"}`)),
		responsesReply(usage(9, 3), fakemodel.Message("42, and sunny in Paris.")),
		responsesReply(usage(9, 3), fakemodel.Message("Sunny in Paris.")))
	p := ask("compute and check the weather")
	p.Tools = append(p.Tools, weatherTool())
	first := x.responses(t, "sk-continue", p)
	require.Len(t, x.sent(), 1, "continue: the client's call is pending, so the model is not called again")
	checkNativeAnswer(t, first, "continue")
	assert.Equal(t, []string{"code_interpreter_call", "function_call"}, itemTypes(first), "continue: our item, then the client's call")

	// The client continues from the stored answer with its own call's output only, as it would
	// with OpenAI's hosted tool. The upstream stored that turn with our call unanswered too.
	p.PreviousResponseID = openai.String(first.ID)
	p.Input = responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
		{OfFunctionCallOutput: &responses.ResponseInputItemFunctionCallOutputParam{
			CallID: openai.String("call_w"),
			Output: responses.ResponseInputItemFunctionCallOutputOutputUnionParam{OfString: openai.String("sunny")},
		}},
	}}
	second := x.responses(t, "sk-continue", p)
	reqs := x.sent()
	require.Len(t, reqs, 2, "continue: the continuation reached the model")
	assert.Equal(t, first.ID, gjson.GetBytes(reqs[1].Body, "previous_response_id").String(), "continue: previous_response_id kept")
	assert.Equal(t, "42\n", outputOf(t, reqs[1], "call_ci"), "continue: our call's output added for the upstream")
	assert.Equal(t, "sunny", outputOf(t, reqs[1], "call_w"), "continue: the client's output")
	checkNativeAnswer(t, second, "continue")
	assert.Equal(t, "42, and sunny in Paris.", second.OutputText(), "continue: the final answer")

	// Another API key naming the same answer gets nothing of ours.
	_ = x.responses(t, "sk-other", p)
	reqs = x.sent()
	require.Len(t, reqs, 3, "continue: the other key's request reached the model")
	assert.False(t, gjson.GetBytes(reqs[2].Body, `input.#(call_id=="call_ci")`).Exists(), "continue: no output for another identity: %s", reqs[2].Body)
	return normalized("[" + first.RawJSON() + "," + second.RawJSON() + "]")
}

func scenarioMixedChat(t *testing.T, x *scene) string {
	weather := map[string]any{"type": "function", "function": map[string]any{"name": "get_weather", "parameters": map[string]any{"type": "object"}}}
	x.m.script(chatPath, chatReply(usage(5, 5), "Checking.",
		chatRunCode("call_ci", "print(6 * 7)"),
		fakemodel.ToolCall{ID: "call_w", Name: "get_weather", Arguments: `{"city":"Paris"}`}),
		chatReply(usage(9, 3), "42, and sunny in Paris."))
	p := x.askChat("compute and check the weather")
	resp := x.chat(t, "sk-mixed", p, withChatTool(weather))

	require.Len(t, x.sent(), 1, "mixed chat: the client's call is pending, so the model is not called again")
	require.Len(t, resp.Choices, 1, "mixed chat: choices")
	msg := resp.Choices[0].Message
	require.Len(t, msg.ToolCalls, 1, "mixed chat: only the client's call is visible")
	assert.Equal(t, "get_weather", msg.ToolCalls[0].Function.Name, "mixed chat: the client's call")
	assert.Equal(t, "call_w", msg.ToolCalls[0].ID, "mixed chat: the client's call id")
	assert.Equal(t, "tool_calls", resp.Choices[0].FinishReason, "mixed chat: finish_reason")

	// The client replays the message it got, with its call's output; the model gets its code
	// call and what it printed back in the history.
	p.Messages = append(p.Messages, msg.ToParam(), openai.ToolMessage("sunny", "call_w"))
	second := x.chat(t, "sk-mixed", p, withChatTool(weather))
	reqs := x.sent()
	require.Len(t, reqs, 2, "mixed chat: the replay reached the model")
	assert.Equal(t, "42\n", outputOf(t, reqs[1], "call_ci"), "mixed chat: our call's output is back in the history")
	assert.Equal(t, "sunny", outputOf(t, reqs[1], "call_w"), "mixed chat: the client's output")
	assert.JSONEq(t, codeArgs("print(6 * 7)"),
		gjson.GetBytes(reqs[1].Body, `messages.#(role=="assistant").tool_calls.#(id=="call_ci").function.arguments`).String(),
		"mixed chat: our call is back next to the client's: %s", reqs[1].Body)
	require.Len(t, second.Choices, 1, "mixed chat replay: choices")
	assert.Equal(t, "42, and sunny in Paris.", second.Choices[0].Message.Content, "mixed chat: the final answer")
	return viewChat(resp) + viewChat(second)
}

func ptr[T any](v T) *T { return &v }

func testChatStreamWithoutUsage(t *testing.T, s *Stack, m *model) {
	m.clear()
	m.script(chatPath,
		chatReply(usage(10, 5), "", chatRunCode("call_1", "print(40+2)")),
		chatReply(usage(20, 7), "40+2 = 42"))
	client := s.Client("sk-nousage")
	stream := client.Chat.Completions.NewStreaming(t.Context(), openai.ChatCompletionNewParams{
		Model:    testModel,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("compute 40+2")},
	}, withChatTool())
	defer stream.Close()
	var acc openai.ChatCompletionAccumulator
	n := 0
	for stream.Next() {
		chunk := stream.Current()
		n++
		assert.NotEmpty(t, chunk.Choices, "no usage: chunk %d has choices (no usage chunk)", n)
		assert.Zero(t, chunk.Usage.TotalTokens, "no usage: chunk %d carries no usage", n)
		acc.AddChunk(chunk)
	}
	require.NoError(t, stream.Err(), "no usage: stream")
	require.Len(t, acc.Choices, 1, "no usage: choices")
	assert.Equal(t, "40+2 = 42", acc.Choices[0].Message.Content, "no usage: answer")
	assert.Equal(t, "stop", acc.Choices[0].FinishReason, "no usage: finish_reason")
}
