package responses

import (
	"encoding/json"
	"testing"

	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/schema/internal/schematest"
	"github.com/codeinterp/codeinterp/pkg/store"
	"github.com/openai/openai-go/v3/responses"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestFollowUpGolden(t *testing.T) {
	tests := []schematest.FollowUpCase{
		{
			Name:    "responses_list_input",
			Outputs: []schema.CallOutput{{CallID: "call_1", Output: "2432902008176640000\n"}},
			Opts:    schema.FollowUpOptions{DropToolChoice: true},
		},
		{
			Name:    "responses_string_input",
			Outputs: []schema.CallOutput{{CallID: "call_a", Output: "2"}, {CallID: "call_b", Output: "4"}, {CallID: "call_a", Output: "ignored: a repeat"}},
			Opts:    schema.FollowUpOptions{ToolChoiceNone: true},
		},
		{
			Name:    "responses_store_false",
			Outputs: []schema.CallOutput{{CallID: "call_1", Output: "1"}},
			Opts:    schema.FollowUpOptions{DropToolChoice: true},
		},
		{
			Name:    "responses_conversation",
			Outputs: []schema.CallOutput{{CallID: "call_1", Output: "1"}},
		},
		{
			Name:    "responses_no_input",
			Outputs: []schema.CallOutput{{CallID: "call_b", Output: "4"}, {CallID: "call_a", Output: "2"}},
			Opts:    schema.FollowUpOptions{ToolChoiceNone: true, DropToolChoice: true},
		},
	}
	schematest.RunFollowUpGolden(t, FollowUp, tests, *reqUpdateGolden)
}

// TestFollowUpParsesWithSDK checks that follow-ups parse as the SDK's request params and end with
// one output per call.
func TestFollowUpParsesWithSDK(t *testing.T) {
	t.Run("responses", func(t *testing.T) {
		req := schematest.ReadFile(t, "followup/responses_list_input.req.json")
		resp := schematest.ReadFile(t, "followup/responses_list_input.resp.json")
		got, err := FollowUp(req, resp, []schema.CallOutput{{CallID: "call_1", Output: "42"}}, schema.FollowUpOptions{DropToolChoice: true})
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
			got, err := FollowUp([]byte(tt.give), []byte(resp), out, tt.opts)
			require.NoError(t, err, "FollowUp(%s)", tt.give)
			assert.Equal(t, tt.want, string(got), "FollowUp(%s)", tt.give)
		})
	}
}

func TestFollowUpErrors(t *testing.T) {
	respCall := `{"output":[{"type":"function_call","call_id":"c1","name":"code_interpreter","arguments":"{\"code\":\"1\"}"}]}`
	one := []schema.CallOutput{{CallID: "c1", Output: "1"}}
	tests := []struct {
		name    string
		req     string
		resp    string
		outputs []schema.CallOutput
	}{
		{"request malformed", `{"input":`, respCall, one},
		{"request not an object", `[]`, respCall, one},
		{"response malformed", `{}`, `{"output":[}`, one},
		{"output for a call the response does not make", `{}`, respCall, []schema.CallOutput{{CallID: "c1", Output: "1"}, {CallID: "c2", Output: "2"}}},
		{"call without output", `{}`, respCall, nil},
		{"client call in the response", `{}`, `{"output":[{"type":"function_call","call_id":"c1","name":"code_interpreter","arguments":"{}"},{"type":"function_call","call_id":"c2","name":"lookup","arguments":"{}"}]}`, one},
		{"response without output", `{}`, `{"id":"resp_1"}`, nil},
		{"input a number", `{"input":7}`, respCall, one},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := FollowUp([]byte(tt.req), []byte(tt.resp), tt.outputs, schema.FollowUpOptions{})
			assert.Error(t, err, "FollowUp(%s, %s) = %s", tt.req, tt.resp, got)
		})
	}
}

// TestFollowUpRoundTrip runs the pieces the way the loop does: rewrite, read the turn, follow up,
// and read the follow-up's own turn again.
func TestFollowUpRoundTrip(t *testing.T) {
	give := schematest.ReadFile(t, "request/responses_tool_middle.give.json")
	rw, err := RewriteRequest(give, schema.Options{})
	require.NoError(t, err, "RewriteRequest(responses_tool_middle)")
	resp := schematest.ReadFile(t, "followup/responses_string_input.resp.json")
	turn, err := ParseTurn(resp, "")
	require.NoError(t, err, "ParseTurn(responses_string_input)")
	var outs []schema.CallOutput
	for _, c := range turn.Calls {
		require.NoError(t, c.ArgsErr, "ParseTurn(responses_string_input) call %s", c.CallID)
		outs = append(outs, schema.CallOutput{CallID: c.CallID, Output: "ran " + c.Code})
	}
	next, err := FollowUp(rw.Body, resp, outs, schema.FollowUpOptions{DropToolChoice: rw.ForcedChoice})
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
// bodies, and that a follow-up built without error is valid JSON that ParseTurn reads
// (schematest.FuzzFollowUp).
func FuzzFollowUp(f *testing.F) {
	schematest.FuzzFollowUp(f, []string{"responses_list_input", "responses_string_input", "responses_store_false", "responses_conversation", "responses_no_input"}, ParseTurn, FollowUp)
}

// TestFollowUpAcceptsWhatRewriteAccepts: a request RewriteRequest accepted (a raw control
// character inside a conversation string is not its concern) must not fail the next round.
func TestFollowUpAcceptsWhatRewriteAccepts(t *testing.T) {
	client := []byte("{\"model\":\"m\",\"input\":[{\"role\":\"user\",\"content\":\"tab\there\"}],\"tools\":[{\"type\":\"code_interpreter\",\"container\":{\"type\":\"auto\"}}]}")
	rw, err := RewriteRequest(client, schema.Options{})
	require.NoError(t, err, "rewrite accepts a loose conversation string")
	require.True(t, rw.Found)
	resp := []byte(`{"output":[{"type":"function_call","call_id":"c1","name":"code_interpreter","arguments":"{\"code\":\"1\"}"}]}`)
	next, err := FollowUp(rw.Body, resp, []schema.CallOutput{{CallID: "c1", Output: "1"}}, schema.FollowUpOptions{})
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
			got, err := prependCallOutputs([]byte(tt.give), outs)
			require.NoError(t, err, "prependCallOutputs(%s)", tt.give)
			assert.Equal(t, tt.want, string(got), "prependCallOutputs(%s)", tt.give)
		})
	}
	for _, give := range []string{`[]`, `{"input":3}`, `{"input":`} {
		_, err := prependCallOutputs([]byte(give), outs)
		assert.Error(t, err, "prependCallOutputs(%s)", give)
	}
	same, err := prependCallOutputs([]byte(`{"input":"x"}`), nil)
	require.NoError(t, err, "prependCallOutputs without outputs")
	assert.Equal(t, `{"input":"x"}`, string(same), "prependCallOutputs without outputs")
}
