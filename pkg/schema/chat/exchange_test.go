package chat_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
	"go.uber.org/goleak"

	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/schema/chat"
	"github.com/codeinterp/codeinterp/pkg/store"
	"github.com/codeinterp/codeinterp/pkg/store/memory"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func answerWithCall(round int, client string) []byte {
	return fmt.Appendf(nil, `{"id":"c%d","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[`+
		`{"id":"call_%d","type":"function","function":{"name":"code_interpreter","arguments":"{\"code\":\"print(%d)\"}"}}%s]},"finish_reason":"tool_calls"}],`+
		`"usage":{"prompt_tokens":%d,"completion_tokens":1,"total_tokens":%d}}`, round, round, round, client, 10*round, 10*round+1)
}

// The exchange builds every round's follow-up from what it read and built before, without
// scanning again: the bodies are byte for byte what FollowUp builds from the bodies alone.
func TestExchangeFollowUpsMatchFollowUp(t *testing.T) {
	clients := []string{
		`{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"q"}],"tool_choice":"required","tools":[{"type":"code_interpreter"}]}`,
		`{"tool_choice":{"type":"allowed_tools","allowed_tools":{"mode":"required","tools":[{"type":"code_interpreter"}]}},"messages":[ ],"tools":[{"type":"code_interpreter"}]}`,
	}
	for _, client := range clients {
		x, err := chat.Surface{}.NewExchange([]byte(client), schema.Options{})
		require.NoError(t, err)
		rq := x.Request()
		require.True(t, rq.Found)
		sent := rq.Body
		for round := 1; round <= 3; round++ {
			answer := answerWithCall(round, "")
			_, err := x.ParseTurn(answer)
			require.NoError(t, err)
			o := schema.FollowUpOptions{DropToolChoice: rq.ForcedChoice, ToolChoice: rq.LaterChoice, ToolChoiceNone: round == 3}
			outputs := []schema.CallOutput{{CallID: fmt.Sprintf("call_%d", round), Output: fmt.Sprint(round)}}
			got, err := x.FollowUp(outputs, o)
			require.NoError(t, err, "round %d of %s", round, client)
			want, err := chat.FollowUp(sent, answer, outputs, o)
			require.NoError(t, err)
			require.Equal(t, string(want), string(got), "round %d of %s", round, client)
			sent = got
		}
	}
}

// A turn that called the code function and a client function stores our call under the
// client's; every later request of the same caller that replays the message gets it back.
func TestExchangeContinuation(t *testing.T) {
	p := memory.NewPending(nil)
	first, err := chat.Surface{}.NewExchange([]byte(`{"model":"m","messages":[{"role":"user","content":"q"}],"tools":[{"type":"code_interpreter"}]}`), schema.Options{})
	require.NoError(t, err)
	answer := answerWithCall(1, `,{"id":"call_w","type":"function","function":{"name":"w","arguments":"{}"}}`)
	turn, err := first.ParseTurn(answer)
	require.NoError(t, err)
	require.Equal(t, []string{"call_w"}, turn.ClientCallIDs)
	first.(schema.Continuation).Remember(p, "id-a", answer, []store.PendingCall{{CallID: "call_1", Arguments: `{"code":"print(1)"}`, Output: "1\n"}})

	replay := `{"model":"m","messages":[{"role":"user","content":"q"},{"role":"assistant","tool_calls":[{"id":"call_w","type":"function","function":{"name":"w","arguments":"{}"}}]},{"role":"tool","tool_call_id":"call_w","content":"sunny"}]}`
	for range 2 {
		x, err := chat.Surface{}.NewExchange([]byte(replay), schema.Options{})
		require.NoError(t, err)
		changed, err := x.(schema.Continuation).Continue(p, func() string { return "id-a" })
		require.NoError(t, err)
		require.True(t, changed)
		assert.Contains(t, string(x.Request().Body), `{"role":"tool","tool_call_id":"call_1","content":"1\n"}`)
	}
	x, err := chat.Surface{}.NewExchange([]byte(replay), schema.Options{})
	require.NoError(t, err)
	asked := false
	changed, err := x.(schema.Continuation).Continue(memory.NewPending(nil), func() string { asked = true; return "id-a" })
	require.NoError(t, err)
	assert.False(t, changed)
	assert.False(t, asked, "an empty store needs no identity")
	changed, err = x.(schema.Continuation).Continue(p, func() string { return "id-b" })
	require.NoError(t, err)
	assert.False(t, changed, "another identity's request is left as it is")
}

// A streaming client's requests go upstream as streams asking for usage, its own
// stream_options kept for its stream; a follow-up asked to stream asks for usage too, one that
// is not asks for a whole answer without stream_options.
func TestExchangeFollowUpStreams(t *testing.T) {
	x, err := chat.Surface{}.NewExchange([]byte(`{"model":"m","stream":true,"stream_options":{"include_usage":false},"messages":[],"tools":[{"type":"code_interpreter"}]}`), schema.Options{})
	require.NoError(t, err)
	rq := x.Request()
	assert.Equal(t, `{"include_usage":false}`, string(rq.StreamOptions), "the client's stream_options")
	assert.Contains(t, string(rq.Body), `"stream":true,"stream_options":{"include_usage":true}`, "the first call")
	tests := []struct {
		stream      bool
		wantOptions string
	}{
		{stream: true, wantOptions: `{"include_usage":true}`},
		{stream: false},
		{stream: true, wantOptions: `{"include_usage":true}`},
	}
	for round, tt := range tests {
		_, err := x.ParseTurn(answerWithCall(round+1, ""))
		require.NoError(t, err)
		got, err := x.FollowUp([]schema.CallOutput{{CallID: fmt.Sprintf("call_%d", round+1), Output: "1"}}, schema.FollowUpOptions{Stream: tt.stream})
		require.NoError(t, err, "round %d", round+1)
		assert.Equal(t, tt.stream, gjson.GetBytes(got, "stream").Bool(), "round %d: stream of %s", round+1, got)
		assert.Equal(t, tt.wantOptions, gjson.GetBytes(got, "stream_options").Raw, "round %d: stream_options of %s", round+1, got)
		assert.Equal(t, 1, strings.Count(string(got), `"stream"`), "round %d: one stream member in %s", round+1, got)
	}
}
