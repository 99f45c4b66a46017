package chat

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/schema/internal/schematest"
	"github.com/codeinterp/codeinterp/pkg/store"
	"github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestFollowUpGolden(t *testing.T) {
	tests := []schematest.FollowUpCase{
		{
			Name:    "chat_basic",
			Outputs: []schema.CallOutput{{CallID: "call_x", Output: "1267650600228229401496703205376\n"}},
			Opts:    schema.FollowUpOptions{DropToolChoice: true},
		},
		{
			Name:    "chat_audio_reasoning",
			Outputs: []schema.CallOutput{{CallID: "call_1", Output: "é\n"}, {CallID: "call_2", Output: "Traceback (most recent call last):\n  NameError: name 'x' is not defined"}},
			Opts:    schema.FollowUpOptions{ToolChoiceNone: true},
		},
	}
	schematest.RunFollowUpGolden(t, FollowUp, tests, *reqUpdateGolden)
}

// TestFollowUpParsesWithSDK checks that follow-ups parse as the SDK's request params and end with
// one output per call.
func TestFollowUpParsesWithSDK(t *testing.T) {
	t.Run("chat", func(t *testing.T) {
		req := schematest.ReadFile(t, "followup/chat_audio_reasoning.req.json")
		resp := schematest.ReadFile(t, "followup/chat_audio_reasoning.resp.json")
		got, err := FollowUp(req, resp, []schema.CallOutput{{CallID: "call_1", Output: "a"}, {CallID: "call_2", Output: "b"}}, schema.FollowUpOptions{ToolChoiceNone: true})
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
			got, err := FollowUp([]byte(req), []byte(resp), []schema.CallOutput{{CallID: "c1", Output: "1"}}, schema.FollowUpOptions{})
			require.NoError(t, err, "FollowUp(chat, %s)", resp)
			want := `{"messages":[` + tt.want + `,{"role":"tool","tool_call_id":"c1","content":"1"}]}`
			assert.Equal(t, want, string(got), "FollowUp(chat, %s)", resp)
		})
	}
}

func TestFollowUpErrors(t *testing.T) {
	chatCall := `{"choices":[{"message":{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"code_interpreter","arguments":"{}"}}]}}]}`
	one := []schema.CallOutput{{CallID: "c1", Output: "1"}}
	tests := []struct {
		name    string
		req     string
		resp    string
		outputs []schema.CallOutput
	}{
		{"response not an object", `{"messages":[]}`, `null`, one},
		{"chat request without messages", `{"model":"m"}`, chatCall, one},
		{"chat messages not a list", `{"messages":"hi"}`, chatCall, one},
		{"chat response without message", `{"messages":[]}`, `{"choices":[]}`, nil},
		{"chat call without output", `{"messages":[]}`, chatCall, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := FollowUp([]byte(tt.req), []byte(tt.resp), tt.outputs, schema.FollowUpOptions{})
			assert.Error(t, err, "FollowUp(%s, %s) = %s", tt.req, tt.resp, got)
		})
	}
}

// FuzzFollowUp checks that ParseTurn and FollowUp never panic on arbitrary request and response
// bodies, and that a follow-up built without error is valid JSON that ParseTurn reads
// (schematest.FuzzFollowUp).
func FuzzFollowUp(f *testing.F) {
	schematest.FuzzFollowUp(f, []string{"chat_basic", "chat_audio_reasoning"}, ParseTurn, FollowUp)
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
			got, err := insertCalls([]byte(tt.give), "", 0, lookup)
			require.NoError(t, err, "insertCalls(%s)", tt.give)
			if tt.want == "" {
				assert.Nil(t, got, "insertCalls(%s) adds nothing", tt.give)
				return
			}
			assert.Equal(t, tt.want, string(got), "insertCalls(%s)", tt.give)
			assert.True(t, json.Valid(got), "insertCalls(%s) is valid JSON", tt.give)
		})
	}
	_, err := insertCalls([]byte(`{"messages":[`), "", 0, lookup)
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

	got, err := insertCalls(give, "", 1<<20, lookup)
	require.NoError(t, err, "insertCalls of %d repeats", repeats)
	assert.True(t, json.Valid(got), "the result is valid JSON")
	assert.Equal(t, 1, strings.Count(string(got), `"tool_call_id":"call_ci"`), "the pending call is put in once, not after each of %d repeats", repeats)
	assert.Less(t, len(got)-len(give), len(out)+1024, "the body grew by one call's output")
	assert.Equal(t, 1, lookups, "a repeated client call id is looked up once")

	_, err = insertCalls(give, "", 32<<10, lookup)
	assert.ErrorIs(t, err, schema.ErrRewriteTooLarge, "a 64 KiB insertion is beyond a 32 KiB limit")
}
