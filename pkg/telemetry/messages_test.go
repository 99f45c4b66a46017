package telemetry

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The key a request carries in its tools and network policy, and a header would: no
// content attribute may hold it.
const planted = "sk-planted-credential-0123456789"

func TestMessagesCapture(t *testing.T) {
	tests := []struct {
		name       string
		surface    string
		give       string // the round's request body
		answer     string
		wantSystem string
		wantInput  string
		wantOutput string
	}{
		{
			name:    "responses",
			surface: "responses",
			give: `{"model":"m","instructions":"be brief","tools":[{"type":"mcp","server_url":"https://x","authorization":"` + planted + `"},` +
				`{"type":"code_interpreter","container":{"type":"auto","network_policy":{"type":"allowlist","domain_secrets":[{"domain":"x","name":"K","value":"` + planted + `"}]}}}],` +
				`"input":[{"role":"user","content":[{"type":"input_text","text":"sum 1..10"}]},` +
				`{"type":"code_interpreter_call","id":"ci_1","code":"print(55)","outputs":[]},` +
				`{"type":"function_call","call_id":"call_1","name":"f","arguments":"{\"a\":1}"},` +
				`{"type":"function_call_output","call_id":"call_1","output":"ok"}]}`,
			answer:     `{"id":"resp_1","status":"completed","output":[{"type":"reasoning","summary":[]},{"type":"message","role":"assistant","content":[{"type":"output_text","text":"55"}]}]}`,
			wantSystem: `[{"type":"text","content":"be brief"}]`,
			wantInput: `[{"role":"user","parts":[{"type":"text","content":"sum 1..10"}]},` +
				`{"role":"assistant","parts":[{"type":"tool_call","id":"ci_1","name":"code_interpreter","arguments":{"code":"print(55)"}}]},` +
				`{"role":"assistant","parts":[{"type":"tool_call","id":"call_1","name":"f","arguments":{"a":1}}]},` +
				`{"role":"tool","parts":[{"type":"tool_call_response","id":"call_1","result":"ok"}]}]`,
			wantOutput: `[{"role":"assistant","parts":[{"type":"text","content":"55"}],"finish_reason":"completed"}]`,
		},
		{
			name:       "responses, input a string",
			surface:    "responses",
			give:       `{"model":"m","input":"hi"}`,
			answer:     `{"status":"completed","output":[]}`,
			wantInput:  `[{"role":"user","parts":[{"type":"text","content":"hi"}]}]`,
			wantOutput: `[{"role":"assistant","parts":[],"finish_reason":"completed"}]`,
		},
		{
			name:    "chat completions",
			surface: "chat_completions",
			give: `{"model":"m","messages":[{"role":"system","content":"sys"},{"role":"user","content":[{"type":"text","text":"q"}]},` +
				`{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"code_interpreter","arguments":"{\"code\":\"1+1\"}"}}]},` +
				`{"role":"tool","tool_call_id":"call_1","content":"2"}]}`,
			answer: `{"choices":[{"message":{"role":"assistant","content":"two"},"finish_reason":"stop"}]}`,
			wantInput: `[{"role":"system","parts":[{"type":"text","content":"sys"}]},{"role":"user","parts":[{"type":"text","content":"q"}]},` +
				`{"role":"assistant","parts":[{"type":"tool_call","id":"call_1","name":"code_interpreter","arguments":{"code":"1+1"}}]},` +
				`{"role":"tool","parts":[{"type":"tool_call_response","id":"call_1","result":"2"}]}]`,
			wantOutput: `[{"role":"assistant","parts":[{"type":"text","content":"two"}],"finish_reason":"stop"}]`,
		},
		{
			name:    "messages",
			surface: "messages",
			give: `{"model":"claude","system":[{"type":"text","text":"sys"}],"mcp_servers":[{"authorization_token":"` + planted + `"}],` +
				`"messages":[{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"server_tool_use","id":"srvtoolu_1","name":"code_execution","input":{"code":"1+1"}},` +
				`{"type":"code_execution_tool_result","tool_use_id":"srvtoolu_1","content":{"stdout":"2"}}]}]}`,
			answer:     `{"stop_reason":"end_turn","content":[{"type":"text","text":"two"}]}`,
			wantSystem: `[{"type":"text","content":"sys"}]`,
			wantInput: `[{"role":"user","parts":[{"type":"text","content":"q"}]},{"role":"assistant","parts":[` +
				`{"type":"tool_call","id":"srvtoolu_1","name":"code_execution","arguments":{"code":"1+1"}},` +
				`{"type":"tool_call_response","id":"srvtoolu_1","result":"{\"stdout\":\"2\"}"}]}]`,
			wantOutput: `[{"role":"assistant","parts":[{"type":"text","content":"two"}],"finish_reason":"end_turn"}]`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRecorded(t, Content{Messages: true, MaxBytes: 4096})
			ctx, agent := r.g.StartAgent(context.Background(), tt.surface, []byte(tt.give))
			_, chat := agent.StartChat(ctx, 1, time.Time{}, false)
			chat.Input([]byte(tt.give))
			chat.End(http.StatusOK, []byte(tt.answer), nil)
			agent.End("done", http.StatusOK, 1, 0)
			var a map[string]string
			for _, s := range r.spans.Ended() {
				if strings.HasPrefix(s.Name(), "chat") {
					a = map[string]string{}
					for k, v := range attrs(s) {
						a[k] = v.Emit()
					}
				}
				for _, kv := range s.Attributes() {
					assert.NotContains(t, kv.Value.Emit(), planted, "%s: span %s attribute %s", tt.name, s.Name(), kv.Key)
				}
			}
			require.NotNil(t, a, "the chat span")
			assert.Equal(t, tt.wantSystem, a["gen_ai.system_instructions"], "gen_ai.system_instructions of %s", tt.give)
			assert.Equal(t, tt.wantInput, a["gen_ai.input.messages"], "gen_ai.input.messages of %s", tt.give)
			assert.Equal(t, tt.wantOutput, a["gen_ai.output.messages"], "gen_ai.output.messages of %s", tt.answer)
		})
	}
}

// Messages are off unless asked for, also with tool content on.
func TestMessagesOff(t *testing.T) {
	r := newRecorded(t, Content{Tools: true})
	ctx, agent := r.g.StartAgent(context.Background(), "responses", nil)
	_, chat := agent.StartChat(ctx, 1, time.Time{}, false)
	chat.Input([]byte(`{"input":"secret prompt"}`))
	chat.End(http.StatusOK, []byte(`{"status":"completed","output":[{"type":"message","role":"assistant","content":[{"type":"output_text","text":"secret answer"}]}]}`), nil)
	agent.End("done", http.StatusOK, 1, 0)
	for _, s := range r.spans.Ended() {
		for _, kv := range s.Attributes() {
			assert.NotContains(t, kv.Value.Emit(), "secret", "span %s attribute %s", s.Name(), kv.Key)
		}
	}
}

// A long conversation is cut to the bound and stays JSON: the latest messages are kept,
// and a single message too long has its text cut.
func TestMessagesBounded(t *testing.T) {
	long := strings.Repeat("x", 500)
	body := `{"input":[{"role":"user","content":"first ` + long + `"},{"role":"assistant","content":"second"},{"role":"user","content":"third ` + long + `"}]}`
	tests := []struct {
		name    string
		max     int
		wantHas []string
		wantNot []string
	}{
		{"the last messages that fit", 700, []string{"third", "second"}, []string{"first"}},
		{"one message, cut", 100, []string{"third"}, []string{"second", "first"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, msgs := inputMessages("responses", []byte(body))
			got := encodeBounded(msgs, tt.max, cutMessage)
			assert.LessOrEqual(t, len(got), tt.max, "encoded length at bound %d", tt.max)
			assert.True(t, json.Valid([]byte(got)), "valid JSON at bound %d: %s", tt.max, got)
			for _, w := range tt.wantHas {
				assert.Contains(t, got, w, "at bound %d", tt.max)
			}
			for _, w := range tt.wantNot {
				assert.NotContains(t, got, w, "at bound %d", tt.max)
			}
		})
	}
}
