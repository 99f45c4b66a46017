package schema_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/store"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestFollowUpGolden(t *testing.T) {
	tests := []struct {
		name    string
		surface Surface
		outputs []schema.CallOutput
		opts    schema.FollowUpOptions
	}{
		{
			name: "responses_list_input", surface: Responses,
			outputs: []schema.CallOutput{{CallID: "call_1", Output: "2432902008176640000\n"}},
			opts:    schema.FollowUpOptions{DropToolChoice: true},
		},
		{
			name: "responses_string_input", surface: Responses,
			outputs: []schema.CallOutput{{CallID: "call_a", Output: "2"}, {CallID: "call_b", Output: "4"}, {CallID: "call_a", Output: "ignored: a repeat"}},
			opts:    schema.FollowUpOptions{ToolChoiceNone: true},
		},
		{
			name: "responses_store_false", surface: Responses,
			outputs: []schema.CallOutput{{CallID: "call_1", Output: "1"}},
			opts:    schema.FollowUpOptions{DropToolChoice: true},
		},
		{
			name: "responses_conversation", surface: Responses,
			outputs: []schema.CallOutput{{CallID: "call_1", Output: "1"}},
		},
		{
			name: "responses_no_input", surface: Responses,
			outputs: []schema.CallOutput{{CallID: "call_b", Output: "4"}, {CallID: "call_a", Output: "2"}},
			opts:    schema.FollowUpOptions{ToolChoiceNone: true, DropToolChoice: true},
		},
		{
			name: "chat_basic", surface: Chat,
			outputs: []schema.CallOutput{{CallID: "call_x", Output: "1267650600228229401496703205376\n"}},
			opts:    schema.FollowUpOptions{DropToolChoice: true},
		},
		{
			name: "chat_audio_reasoning", surface: Chat,
			outputs: []schema.CallOutput{{CallID: "call_1", Output: "é\n"}, {CallID: "call_2", Output: "Traceback (most recent call last):\n  NameError: name 'x' is not defined"}},
			opts:    schema.FollowUpOptions{ToolChoiceNone: true},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := reqReadFile(t, "followup/"+tt.name+".req.json")
			resp := reqReadFile(t, "followup/"+tt.name+".resp.json")
			got, err := FollowUp(tt.surface, req, resp, tt.outputs, tt.opts)
			require.NoError(t, err, "FollowUp(%s)", tt.name)
			reqCheckGolden(t, "followup/"+tt.name+".want.json", got)
			assert.True(t, json.Valid(got), "FollowUp(%s) is not valid JSON: %s", tt.name, got)
		})
	}
}

// TestFollowUpParsesWithSDK checks that follow-ups parse as the SDK's request params and end with
// one output per call.
func TestFollowUpParsesWithSDK(t *testing.T) {
	t.Run("responses", func(t *testing.T) {
		req := reqReadFile(t, "followup/responses_list_input.req.json")
		resp := reqReadFile(t, "followup/responses_list_input.resp.json")
		got, err := FollowUp(Responses, req, resp, []schema.CallOutput{{CallID: "call_1", Output: "42"}}, schema.FollowUpOptions{DropToolChoice: true})
		require.NoError(t, err, "FollowUp(responses_list_input)")
		var p responses.ResponseNewParams
		require.NoError(t, json.Unmarshal(got, &p), "unmarshal FollowUp(responses_list_input) as ResponseNewParams: %s", got)
		assert.NotContains(t, string(got), "tool_choice", "FollowUp(responses_list_input) kept tool_choice")
		items := reqSDKInput(t, got)
		require.Len(t, items, 5, "FollowUp(responses_list_input) input items: user, reasoning, message, call, output")
		require.NotNil(t, items[1], "FollowUp(responses_list_input) item 1")
		require.NotNil(t, items[1].OfReasoning, "FollowUp(responses_list_input) item 1 is the reasoning item")
		assert.Equal(t, "gAAAA==", items[1].OfReasoning.EncryptedContent.Value, "FollowUp(responses_list_input) encrypted_content")
		require.NotNil(t, items[2], "FollowUp(responses_list_input) item 2")
		assert.True(t, items[2].OfOutputMessage != nil || items[2].OfMessage != nil || items[2].OfInputMessage != nil,
			"FollowUp(responses_list_input) item 2 is the message")
		require.NotNil(t, items[3], "FollowUp(responses_list_input) item 3")
		require.NotNil(t, items[3].OfFunctionCall, "FollowUp(responses_list_input) item 3 is the function call")
		assert.Equal(t, "call_1", items[3].OfFunctionCall.CallID, "FollowUp(responses_list_input) call id")
		require.NotNil(t, items[4], "FollowUp(responses_list_input) item 4")
		require.NotNil(t, items[4].OfFunctionCallOutput, "FollowUp(responses_list_input) item 4 is the output")
		assert.Equal(t, "call_1", items[4].OfFunctionCallOutput.CallID.Value, "FollowUp(responses_list_input) output call id")
		assert.Equal(t, "42", items[4].OfFunctionCallOutput.Output.OfString.Value, "FollowUp(responses_list_input) output")
	})
	t.Run("chat", func(t *testing.T) {
		req := reqReadFile(t, "followup/chat_audio_reasoning.req.json")
		resp := reqReadFile(t, "followup/chat_audio_reasoning.resp.json")
		got, err := FollowUp(Chat, req, resp, []schema.CallOutput{{CallID: "call_1", Output: "a"}, {CallID: "call_2", Output: "b"}}, schema.FollowUpOptions{ToolChoiceNone: true})
		require.NoError(t, err, "FollowUp(chat_audio_reasoning)")
		var p openai.ChatCompletionNewParams
		require.NoError(t, json.Unmarshal(got, &p), "unmarshal FollowUp(chat_audio_reasoning) as ChatCompletionNewParams: %s", got)
		require.Len(t, p.Messages, 4, "FollowUp(chat_audio_reasoning) messages: user, assistant, 2 tool")
		a := p.Messages[1].OfAssistant
		require.NotNil(t, a, "FollowUp(chat_audio_reasoning) message 1 is the assistant's")
		assert.Equal(t, "audio_1", a.Audio.ID, "FollowUp(chat_audio_reasoning) audio id")
		require.Len(t, a.ToolCalls, 2, "FollowUp(chat_audio_reasoning) tool calls")
		assert.Equal(t, "call_2", a.ToolCalls[1].OfFunction.ID, "FollowUp(chat_audio_reasoning) second tool call")
		for i, id := range []string{"call_1", "call_2"} {
			tm := p.Messages[2+i].OfTool
			require.NotNil(t, tm, "FollowUp(chat_audio_reasoning) message %d is a tool message", 2+i)
			assert.Equal(t, id, tm.ToolCallID, "FollowUp(chat_audio_reasoning) tool message %d", 2+i)
		}
		assert.Equal(t, "none", string(p.ToolChoice.OfAuto.Value), "FollowUp(chat_audio_reasoning) tool_choice")
	})
}

func TestFollowUpEdgeBodies(t *testing.T) {
	resp := `{"output":[{"type":"function_call","call_id":"c1","name":"code_interpreter","arguments":"{\"code\":\"1\"}"}]}`
	out := []schema.CallOutput{{CallID: "c1", Output: "1"}}
	call := `{"type":"function_call","call_id":"c1","name":"code_interpreter","arguments":"{\"code\":\"1\"}"},{"type":"function_call_output","call_id":"c1","output":"1"}`
	tests := []struct {
		name string
		give string
		opts schema.FollowUpOptions
		want string
	}{
		{"only member removed, input added", `{"tool_choice":"required"}`, schema.FollowUpOptions{DropToolChoice: true}, `{"input":[` + call + `]}`},
		{"empty object gets input and tool_choice", ` { } `, schema.FollowUpOptions{ToolChoiceNone: true}, ` {"input":[` + call + `],"tool_choice":"none" } `},
		{"input null", `{"input":null}`, schema.FollowUpOptions{}, `{"input":[` + call + `]}`},
		{"empty list keeps its spacing", "{\"input\":[ \n ]}", schema.FollowUpOptions{}, "{\"input\":[" + call + " \n ]}"},
		{"tool_choice last removed", `{"input":[1], "tool_choice":"required" }`, schema.FollowUpOptions{DropToolChoice: true}, `{"input":[1,` + call + `] }`},
		{"tool_choice first removed", `{"tool_choice":"required", "input":[]}`, schema.FollowUpOptions{DropToolChoice: true}, `{"input":[` + call + `]}`},
		{"drop without tool_choice", `{"input":[]}`, schema.FollowUpOptions{DropToolChoice: true}, `{"input":[` + call + `]}`},
		{"tool_choice relaxed", `{"tool_choice":{"mode":"required"}, "input":[]}`, schema.FollowUpOptions{DropToolChoice: true, ToolChoice: []byte(`{"mode":"auto"}`)}, `{"tool_choice":{"mode":"auto"}, "input":[` + call + `]}`},
		{"relaxed choice added", `{"input":[]}`, schema.FollowUpOptions{ToolChoice: []byte(`{"mode":"auto"}`)}, `{"input":[` + call + `],"tool_choice":{"mode":"auto"}}`},
		{"none wins over a relaxed choice", `{"tool_choice":"required","input":[]}`, schema.FollowUpOptions{ToolChoice: []byte(`{"mode":"auto"}`), ToolChoiceNone: true}, `{"tool_choice":"none","input":[` + call + `]}`},
		{"conversation without input", `{"conversation":{"id":"conv_1"}}`, schema.FollowUpOptions{}, `{"conversation":{"id":"conv_1"},"input":[{"type":"function_call_output","call_id":"c1","output":"1"}]}`},
		{"conversation null is no conversation", `{"conversation":null,"input":[]}`, schema.FollowUpOptions{}, `{"conversation":null,"input":[` + call + `]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := FollowUp(Responses, []byte(tt.give), []byte(resp), out, tt.opts)
			require.NoError(t, err, "FollowUp(%s)", tt.give)
			assert.Equal(t, tt.want, string(got), "FollowUp(%s)", tt.give)
		})
	}
}

func TestFollowUpChatAssistantMessage(t *testing.T) {
	req := `{"messages":[]}`
	tests := []struct {
		name    string
		message string
		want    string
	}{
		{
			"role added when missing, nulls and response-only fields dropped",
			`{"content":null,"refusal":null,"annotations":[],"audio":null,"function_call":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"code_interpreter","arguments":"{\"code\":\"1\"}"}}]}`,
			`{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"code_interpreter","arguments":"{\"code\":\"1\"}"}}]}`,
		},
		{
			"refusal and name kept when strings, key order kept",
			`{"tool_calls":[{"id":"c1","type":"function","function":{"name":"code_interpreter","arguments":"{\"code\":\"1\"}"}}],"name":"bot","refusal":"no","role":"assistant","extra":1}`,
			`{"tool_calls":[{"id":"c1","type":"function","function":{"name":"code_interpreter","arguments":"{\"code\":\"1\"}"}}],"name":"bot","refusal":"no","role":"assistant"}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := `{"choices":[{"index":0,"message":` + tt.message + `}]}`
			got, err := FollowUp(Chat, []byte(req), []byte(resp), []schema.CallOutput{{CallID: "c1", Output: "1"}}, schema.FollowUpOptions{})
			require.NoError(t, err, "FollowUp(chat, %s)", resp)
			want := `{"messages":[` + tt.want + `,{"role":"tool","tool_call_id":"c1","content":"1"}]}`
			assert.Equal(t, want, string(got), "FollowUp(chat, %s)", resp)
		})
	}
}

func TestFollowUpErrors(t *testing.T) {
	respCall := `{"output":[{"type":"function_call","call_id":"c1","name":"code_interpreter","arguments":"{\"code\":\"1\"}"}]}`
	chatCall := `{"choices":[{"message":{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"code_interpreter","arguments":"{}"}}]}}]}`
	one := []schema.CallOutput{{CallID: "c1", Output: "1"}}
	tests := []struct {
		name    string
		surface Surface
		req     string
		resp    string
		outputs []schema.CallOutput
	}{
		{"request malformed", Responses, `{"input":`, respCall, one},
		{"request not an object", Responses, `[]`, respCall, one},
		{"response malformed", Responses, `{}`, `{"output":[}`, one},
		{"response not an object", Chat, `{"messages":[]}`, `null`, one},
		{"output for a call the response does not make", Responses, `{}`, respCall, []schema.CallOutput{{CallID: "c1", Output: "1"}, {CallID: "c2", Output: "2"}}},
		{"call without output", Responses, `{}`, respCall, nil},
		{"client call in the response", Responses, `{}`, `{"output":[{"type":"function_call","call_id":"c1","name":"code_interpreter","arguments":"{}"},{"type":"function_call","call_id":"c2","name":"lookup","arguments":"{}"}]}`, one},
		{"response without output", Responses, `{}`, `{"id":"resp_1"}`, nil},
		{"input a number", Responses, `{"input":7}`, respCall, one},
		{"chat request without messages", Chat, `{"model":"m"}`, chatCall, one},
		{"chat messages not a list", Chat, `{"messages":"hi"}`, chatCall, one},
		{"chat response without message", Chat, `{"messages":[]}`, `{"choices":[]}`, nil},
		{"chat call without output", Chat, `{"messages":[]}`, chatCall, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := FollowUp(tt.surface, []byte(tt.req), []byte(tt.resp), tt.outputs, schema.FollowUpOptions{})
			assert.Error(t, err, "FollowUp(%s, %s, %s) = %s", tt.surface, tt.req, tt.resp, got)
		})
	}
}

// TestFollowUpRoundTrip runs the pieces the way the loop does: rewrite, read the turn, follow up,
// and read the follow-up's own turn again.
func TestFollowUpRoundTrip(t *testing.T) {
	give := reqReadFile(t, "request/responses_tool_middle.give.json")
	rw, err := RewriteRequest(Responses, give, schema.Options{})
	require.NoError(t, err, "RewriteRequest(responses_tool_middle)")
	resp := reqReadFile(t, "followup/responses_string_input.resp.json")
	turn, err := ParseTurn(Responses, resp, "")
	require.NoError(t, err, "ParseTurn(responses_string_input)")
	var outs []schema.CallOutput
	for _, c := range turn.Calls {
		require.NoError(t, c.ArgsErr, "ParseTurn(responses_string_input) call %s", c.CallID)
		outs = append(outs, schema.CallOutput{CallID: c.CallID, Output: "ran " + c.Code})
	}
	next, err := FollowUp(Responses, rw.Body, resp, outs, schema.FollowUpOptions{DropToolChoice: rw.ForcedChoice})
	require.NoError(t, err, "FollowUp(responses_tool_middle)")
	var p responses.ResponseNewParams
	require.NoError(t, json.Unmarshal(next, &p), "unmarshal follow-up %s", next)
	assert.NotContains(t, string(next), "tool_choice", "follow-up kept the forced tool_choice")
	items := reqSDKInput(t, next)
	require.Len(t, items, 5, "follow-up input: user, 2 calls, 2 outputs")
	require.NotNil(t, items[4], "follow-up input[4]")
	require.NotNil(t, items[4].OfFunctionCallOutput, "follow-up input[4] is an output")
	assert.Equal(t, "ran 2+2", items[4].OfFunctionCallOutput.Output.OfString.Value, "follow-up last output")
	assert.Contains(t, string(next), `"stream":false`, "a follow-up not asked to stream asks for a whole answer")
}

// FuzzFollowUp checks that ParseTurn and FollowUp never panic on arbitrary request and response
// bodies, and that a follow-up built without error is valid JSON that ParseTurn reads.
func FuzzFollowUp(f *testing.F) {
	for _, name := range []string{"responses_list_input", "responses_string_input", "responses_store_false", "responses_conversation", "responses_no_input", "chat_basic", "chat_audio_reasoning"} {
		req, err := os.ReadFile(filepath.Join("testdata", "followup", name+".req.json"))
		if err != nil {
			f.Fatalf("read %s: %v", name, err)
		}
		resp, err := os.ReadFile(filepath.Join("testdata", "followup", name+".resp.json"))
		if err != nil {
			f.Fatalf("read %s: %v", name, err)
		}
		s := byte(0)
		if strings.HasPrefix(name, "chat") {
			s = 1
		}
		f.Add(s, req, resp, byte(0))
	}
	f.Fuzz(func(t *testing.T, surface byte, req, resp []byte, opts byte) {
		s := Responses
		if surface%2 == 1 {
			s = Chat
		}
		turn, err := ParseTurn(s, resp, "")
		if err != nil {
			return
		}
		var outs []schema.CallOutput
		for _, c := range turn.Calls {
			outs = append(outs, schema.CallOutput{CallID: c.CallID, Output: "out " + c.CallID})
		}
		o := schema.FollowUpOptions{DropToolChoice: opts&1 != 0, ToolChoiceNone: opts&2 != 0}
		next, err := FollowUp(s, req, resp, outs, o)
		if err != nil {
			return
		}
		if !json.Valid(req) {
			// The request is checked as RewriteRequest checks it: loose bytes inside strings it
			// does not read pass through (the upstream refuses them), so the output is only as
			// valid as the input.
			return
		}
		if !json.Valid(next) {
			t.Fatalf("FollowUp(%s, %q, %q) = %q, not valid JSON", s, req, resp, next)
		}
		if _, err := ParseTurn(s, next, ""); err != nil {
			t.Fatalf("ParseTurn(FollowUp(%s, %q, %q)) = %v", s, req, resp, err)
		}
	})
}

// TestFollowUpAcceptsWhatRewriteAccepts: a request RewriteRequest accepted (a raw control
// character inside a conversation string is not its concern) must not fail the next round.
func TestFollowUpAcceptsWhatRewriteAccepts(t *testing.T) {
	client := []byte("{\"model\":\"m\",\"input\":[{\"role\":\"user\",\"content\":\"tab\there\"}],\"tools\":[{\"type\":\"code_interpreter\",\"container\":{\"type\":\"auto\"}}]}")
	rw, err := RewriteRequest(Responses, client, schema.Options{})
	require.NoError(t, err, "rewrite accepts a loose conversation string")
	require.True(t, rw.Found)
	resp := []byte(`{"output":[{"type":"function_call","call_id":"c1","name":"code_interpreter","arguments":"{\"code\":\"1\"}"}]}`)
	next, err := FollowUp(Responses, rw.Body, resp, []schema.CallOutput{{CallID: "c1", Output: "1"}}, schema.FollowUpOptions{})
	require.NoError(t, err, "follow-up of an accepted request")
	assert.Contains(t, string(next), "tab\there", "the loose bytes pass through unchanged")
	assert.Contains(t, string(next), `"function_call_output"`)
}

func TestPrependCallOutputs(t *testing.T) {
	outs := []store.PendingCall{{CallID: "c1", Arguments: "{}", Output: "4\n"}, {CallID: "c2", Output: `"q"`}}
	items := `{"type":"function_call_output","call_id":"c1","output":"4\n"},{"type":"function_call_output","call_id":"c2","output":"\"q\""}`
	tests := []struct {
		name string
		give string
		want string
	}{
		{"list", `{"previous_response_id":"resp_1","input":[{"type":"function_call_output","call_id":"x","output":"ok"}]}`,
			`{"previous_response_id":"resp_1","input":[` + items + `,{"type":"function_call_output","call_id":"x","output":"ok"}]}`},
		{"empty list", `{"input":[ ]}`, `{"input":[` + items + ` ]}`},
		{"string", `{"input":"next?","store":true}`, `{"input":[` + items + `,{"role":"user","content":"next?"}],"store":true}`},
		{"null", `{"input":null}`, `{"input":[` + items + `]}`},
		{"absent", `{"conversation":"conv_1" } `, `{"conversation":"conv_1","input":[` + items + `] } `},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := PrependCallOutputs([]byte(tt.give), outs)
			require.NoError(t, err, "PrependCallOutputs(%s)", tt.give)
			assert.Equal(t, tt.want, string(got), "PrependCallOutputs(%s)", tt.give)
		})
	}
	for _, give := range []string{`[]`, `{"input":3}`, `{"input":`} {
		_, err := PrependCallOutputs([]byte(give), outs)
		assert.Error(t, err, "PrependCallOutputs(%s)", give)
	}
	same, err := PrependCallOutputs([]byte(`{"input":"x"}`), nil)
	require.NoError(t, err, "PrependCallOutputs without outputs")
	assert.Equal(t, `{"input":"x"}`, string(same), "PrependCallOutputs without outputs")
}

func TestInsertChatCalls(t *testing.T) {
	pending := map[string][]store.PendingCall{
		"call_w": {{CallID: "call_ci", Arguments: `{"code":"print(6*7)"}`, Output: "42\n"}},
		"call_x": {{CallID: "call_ci", Arguments: `{"code":"print(6*7)"}`, Output: "42\n"}},
		"call_v": {{CallID: "call_c2", Arguments: `{"code":"1"}`, Output: "1"}},
	}
	lookup := func(id string) []store.PendingCall { return pending[id] }
	ci := `{"id":"call_ci","type":"function","function":{"name":"code_interpreter","arguments":"{\"code\":\"print(6*7)\"}"}}`
	tool := `{"role":"tool","tool_call_id":"call_ci","content":"42\n"}`
	tests := []struct {
		name string
		give string
		want string // empty: nothing added
	}{
		{
			name: "after the client's call",
			give: `{"messages":[{"role":"user","content":"q"},{"role":"assistant","content":null,"tool_calls":[{"id":"call_w","type":"function","function":{"name":"w","arguments":"{}"}}]},{"role":"tool","tool_call_id":"call_w","content":"sunny"}]}`,
			want: `{"messages":[{"role":"user","content":"q"},{"role":"assistant","content":null,"tool_calls":[{"id":"call_w","type":"function","function":{"name":"w","arguments":"{}"}},` + ci + `]},` + tool + `,{"role":"tool","tool_call_id":"call_w","content":"sunny"}]}`,
		},
		{
			name: "two client calls of one turn add ours once",
			give: `{"messages":[{"role":"assistant","tool_calls":[{"id":"call_w"},{"id":"call_x"}]}]}`,
			want: `{"messages":[{"role":"assistant","tool_calls":[{"id":"call_w"},{"id":"call_x"},` + ci + `]},` + tool + `]}`,
		},
		{
			name: "every mixed turn of the history",
			give: `{"messages":[{"role":"assistant","tool_calls":[{"id":"call_w"}]},{"role":"assistant","tool_calls":[ {"id":"call_v"} ]}]}`,
			want: `{"messages":[{"role":"assistant","tool_calls":[{"id":"call_w"},` + ci + `]},` + tool + `,{"role":"assistant","tool_calls":[ {"id":"call_v"},{"id":"call_c2","type":"function","function":{"name":"code_interpreter","arguments":"{\"code\":\"1\"}"}} ]},{"role":"tool","tool_call_id":"call_c2","content":"1"}]}`,
		},
		{
			name: "a message replayed twice gets the call after the first only",
			give: `{"messages":[{"role":"assistant","tool_calls":[{"id":"call_w"}]},{"role":"assistant","tool_calls":[{"id":"call_w"}]}]}`,
			want: `{"messages":[{"role":"assistant","tool_calls":[{"id":"call_w"},` + ci + `]},` + tool + `,{"role":"assistant","tool_calls":[{"id":"call_w"}]}]}`,
		},
		{name: "already there in another message", give: `{"messages":[{"role":"assistant","tool_calls":[{"id":"call_ci"}]},{"role":"assistant","tool_calls":[{"id":"call_w"}]}]}`},
		{name: "already there", give: `{"messages":[{"role":"assistant","tool_calls":[{"id":"call_w"},{"id":"call_ci"}]}]}`},
		{name: "unknown call", give: `{"messages":[{"role":"assistant","tool_calls":[{"id":"call_q"}]}]}`},
		{name: "a user message is not looked at", give: `{"messages":[{"role":"user","tool_calls":[{"id":"call_w"}]}]}`},
		{name: "no messages", give: `{"input":"x"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := InsertChatCalls([]byte(tt.give), "", 0, lookup)
			require.NoError(t, err, "InsertChatCalls(%s)", tt.give)
			if tt.want == "" {
				assert.Nil(t, got, "InsertChatCalls(%s) adds nothing", tt.give)
				return
			}
			assert.Equal(t, tt.want, string(got), "InsertChatCalls(%s)", tt.give)
			assert.True(t, json.Valid(got), "InsertChatCalls(%s) is valid JSON", tt.give)
		})
	}
	_, err := InsertChatCalls([]byte(`{"messages":[`), "", 0, lookup)
	assert.Error(t, err, "malformed body")
}

// A small request that repeats one assistant message with a pending call hundreds of times
// gets the call once (it grew by the call's size times the repeats before), and an insertion
// beyond the limit is refused while it is built.
func TestInsertChatCallsBounded(t *testing.T) {
	out := strings.Repeat("o", 64<<10)
	lookups := 0
	lookup := func(id string) []store.PendingCall {
		lookups++
		if id != "call_w" {
			return nil
		}
		return []store.PendingCall{{CallID: "call_ci", Arguments: `{"code":"print('o'*65536)"}`, Output: out}}
	}
	var b strings.Builder
	b.WriteString(`{"model":"m","messages":[{"role":"user","content":"q"}`)
	const repeats = 500
	for range repeats {
		b.WriteString(`,{"role":"assistant","tool_calls":[{"id":"call_w","type":"function","function":{"name":"w","arguments":"{}"}}]},{"role":"tool","tool_call_id":"call_w","content":"sunny"}`)
	}
	b.WriteString(`]}`)
	give := []byte(b.String())

	got, err := InsertChatCalls(give, "", 1<<20, lookup)
	require.NoError(t, err, "InsertChatCalls of %d repeats", repeats)
	assert.True(t, json.Valid(got), "the result is valid JSON")
	assert.Equal(t, 1, strings.Count(string(got), `"tool_call_id":"call_ci"`), "the pending call is put in once, not after each of %d repeats", repeats)
	assert.Less(t, len(got)-len(give), len(out)+1024, "the body grew by one call's output")
	assert.Equal(t, 1, lookups, "a repeated client call id is looked up once")

	_, err = InsertChatCalls(give, "", 32<<10, lookup)
	assert.ErrorIs(t, err, schema.ErrRewriteTooLarge, "a 64 KiB insertion is beyond a 32 KiB limit")
}
