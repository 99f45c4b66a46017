package processor

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/codeinterp/codeinterp/pkg/loop"
	"github.com/codeinterp/codeinterp/pkg/schema"
)

// A small Chat request that repeats the assistant message of a mixed turn hundreds of times
// gets the pending code call once: the server put it after every repeat (a 92 KiB request
// became 562 MB).
func TestChatReplayRepeatsGetPendingCallOnce(t *testing.T) {
	output := strings.Repeat("o", 32<<10)
	ts := mixedTurn(t, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"q"}],"tools":[{"type":"code_interpreter"}]}`,
		loop.Response{ClientCallIDs: []string{"call_w"}, Pending: []schema.PendingCall{{CallID: "call_ci", Arguments: `{"code":"print('o'*32768)"}`, Output: output}}})
	var b strings.Builder
	b.WriteString(`{"model":"m","messages":[{"role":"user","content":"q"}`)
	const repeats = 300
	for range repeats {
		b.WriteString(`,{"role":"assistant","tool_calls":[{"id":"call_w","type":"function","function":{"name":"w","arguments":"{}"}}]},{"role":"tool","tool_call_id":"call_w","content":"sunny"}`)
	}
	b.WriteString(`]}`)
	give := b.String()

	ex := ts.open(t)
	ex.send(postHeaders("/v1/chat/completions"))
	resp := ex.send(reqBody(give))
	got := resp.GetRequestBody().GetResponse().GetBodyMutation().GetBody()
	require.NotNil(t, got, "the replay of %d repeats gets the code call back", repeats)
	assert.Equal(t, 1, strings.Count(string(got), `"tool_call_id":"call_ci"`), "the pending call is put in once, not after each of %d repeats", repeats)
	assert.Less(t, len(got), len(give)+len(output)+1024, "the %d-byte request grows by one output", len(give))
}
