package responses_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
	"go.uber.org/goleak"

	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/schema/responses"
	"github.com/codeinterp/codeinterp/pkg/store"
	"github.com/codeinterp/codeinterp/pkg/store/memory"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func answerWithCall(round int) []byte {
	return fmt.Appendf(nil, `{"id":"resp_%d","object":"response","status":"completed","output":[`+
		`{"type":"reasoning","id":"rs_%d","summary":[],"encrypted_content":"e"},`+
		`{"type":"function_call","id":"fc_%d","call_id":"call_%d","name":"code_interpreter","arguments":"{\"code\":\"print(%d)\"}"}],`+
		`"usage":{"input_tokens":%d,"output_tokens":1,"total_tokens":%d}}`, round, round, round, round, round, 10*round, 10*round+1)
}

// The exchange builds every round's follow-up from what it read and built before, without
// scanning again: the bodies are byte for byte what FollowUp builds from the bodies alone.
func TestExchangeFollowUpsMatchFollowUp(t *testing.T) {
	clients := []string{
		`{"model":"m","input":"q","stream":true,"stream_options":{"include_usage":true},"tool_choice":"required","tools":[{"type":"code_interpreter","container":{"type":"auto"}}]}`,
		`{"model":"m","tools":[{"type":"code_interpreter","container":{"type":"auto"}}],"tool_choice":{"type":"allowed_tools","mode":"required","tools":[{"type":"code_interpreter"}]}}`,
		`{ "tools" : [ {"type":"code_interpreter","container":"cntr_1"} ] , "input" : [ {"role":"user","content":"q"} ] , "store" : false }`,
	}
	for _, client := range clients {
		x, err := responses.Surface{}.NewExchange([]byte(client), schema.Options{})
		require.NoError(t, err)
		rq := x.Request()
		require.True(t, rq.Found)
		sent := rq.Body
		for round := 1; round <= 3; round++ {
			answer := answerWithCall(round)
			_, err := x.ParseTurn(answer)
			require.NoError(t, err)
			o := schema.FollowUpOptions{DropToolChoice: rq.ForcedChoice, ToolChoice: rq.LaterChoice, ToolChoiceNone: round == 3}
			outputs := []schema.CallOutput{{CallID: fmt.Sprintf("call_%d", round), Output: fmt.Sprint(round)}}
			got, err := x.FollowUp(outputs, o)
			require.NoError(t, err, "round %d of %s", round, client)
			want, err := responses.FollowUp(sent, answer, outputs, o)
			require.NoError(t, err)
			require.Equal(t, string(want), string(got), "round %d of %s", round, client)
			sent = got
		}
	}
}

// A turn that leaves the client's call pending stores our calls; the request that continues
// from the answer, or in the conversation, gets them back, and the conversation's go once the
// upstream has taken a request that carried them.
func TestExchangeContinuation(t *testing.T) {
	p := memory.NewPending(nil)
	first, err := responses.Surface{}.NewExchange([]byte(`{"model":"m","conversation":"conv_1","input":"q","tools":[{"type":"code_interpreter"}]}`), schema.Options{})
	require.NoError(t, err)
	pending := []store.PendingCall{{CallID: "call_ci", Output: "42\n"}}
	first.(schema.Continuation).Remember(p, "id-a", []byte(`{"id":"resp_mixed","output":[]}`), pending)

	continues := func(identity, body string) (schema.Exchange, bool) {
		x, err := responses.Surface{}.NewExchange([]byte(body), schema.Options{})
		require.NoError(t, err)
		changed, err := x.(schema.Continuation).Continue(p, func() string { return identity })
		require.NoError(t, err)
		return x, changed
	}
	byID := `{"model":"m","previous_response_id":"resp_mixed","input":[{"type":"function_call_output","call_id":"call_w","output":"sunny"}]}`
	x, changed := continues("id-a", byID)
	require.True(t, changed)
	assert.Equal(t, `{"model":"m","previous_response_id":"resp_mixed","input":[{"type":"function_call_output","call_id":"call_ci","output":"42\n"},{"type":"function_call_output","call_id":"call_w","output":"sunny"}]}`, string(x.Request().Body))
	_, changed = continues("id-b", byID)
	assert.False(t, changed, "another identity's request is left as it is")

	inConversation := `{"model":"m","conversation":"conv_1","input":[{"type":"function_call_output","call_id":"call_w","output":"sunny"}]}`
	x, changed = continues("id-a", inConversation)
	require.True(t, changed)
	x.(schema.Continuation).Accepted(p, "id-a")
	_, changed = continues("id-a", inConversation)
	assert.False(t, changed, "the conversation holds them once the upstream took a request that carried them")
	_, changed = continues("id-a", byID)
	assert.True(t, changed, "the answer's entry stays: a client may branch from it again")
}

// A streamed answer of several turns keeps the first turn's id, the one its response.created
// named; a request continuing from it goes upstream as one from the last turn.
func TestExchangeStreamedAnswerName(t *testing.T) {
	p := memory.NewPending(nil)
	x, err := responses.Surface{}.NewExchange([]byte(`{"model":"m","stream":true,"input":"q","tools":[{"type":"code_interpreter"}]}`), schema.Options{})
	require.NoError(t, err)
	rounds := []schema.Round{
		{Body: answerWithCall(1), Calls: []schema.CodeCall{{ID: "ci_1", Status: "completed", Code: "print(1)"}}},
		{Body: []byte(`{"id":"resp_2","object":"response","status":"completed","output":[]}`)},
	}
	final, err := x.Final(rounds, "")
	require.NoError(t, err)
	assert.Contains(t, string(final), `"id":"resp_1"`, "the answer keeps the name the stream gave it")
	x.(schema.Continuation).Remember(p, "id-a", final, nil)

	next, err := responses.Surface{}.NewExchange([]byte(`{"model":"m","previous_response_id":"resp_1","input":"and then?"}`), schema.Options{})
	require.NoError(t, err)
	changed, err := next.(schema.Continuation).Continue(p, func() string { return "id-a" })
	require.NoError(t, err)
	require.True(t, changed)
	assert.Equal(t, `{"model":"m","previous_response_id":"resp_2","input":"and then?"}`, string(next.Request().Body))
	answer, err := next.Final([]schema.Round{{Body: []byte(`{"id":"resp_3","object":"response","previous_response_id":"resp_2","output":[]}`)}}, "")
	require.NoError(t, err)
	assert.Contains(t, string(answer), `"previous_response_id":"resp_1"`, "the answer echoes the client's previous_response_id")

	plain, err := responses.Surface{}.NewExchange([]byte(`{"model":"m","input":"q","tools":[{"type":"code_interpreter"}]}`), schema.Options{})
	require.NoError(t, err)
	final, err = plain.Final(rounds, "")
	require.NoError(t, err)
	assert.Contains(t, string(final), `"id":"resp_2"`, "a plain answer is the last turn")
}

// FollowUpOptions.Stream asks the upstream for an event stream: stream is true in every
// follow-up, and the rest of the body is what it is without the option.
func TestExchangeFollowUpStream(t *testing.T) {
	clients := []string{
		`{"model":"m","input":"q","stream":true,"tools":[{"type":"code_interpreter","container":{"type":"auto"}}]}`,
		`{"model":"m","input":"q","tools":[{"type":"code_interpreter","container":{"type":"auto"}}]}`,
	}
	for _, client := range clients {
		streamed, err := responses.Surface{}.NewExchange([]byte(client), schema.Options{})
		require.NoError(t, err)
		plain, err := responses.Surface{}.NewExchange([]byte(client), schema.Options{})
		require.NoError(t, err)
		for round := 1; round <= 2; round++ {
			_, err = streamed.ParseTurn(answerWithCall(round))
			require.NoError(t, err)
			_, err = plain.ParseTurn(answerWithCall(round))
			require.NoError(t, err)
			out := []schema.CallOutput{{CallID: fmt.Sprintf("call_%d", round), Output: "ok"}}
			got, err := streamed.FollowUp(out, schema.FollowUpOptions{Stream: true})
			require.NoError(t, err, "client %s round %d", client, round)
			want, err := plain.FollowUp(out, schema.FollowUpOptions{})
			require.NoError(t, err, "client %s round %d", client, round)
			assert.Equal(t, true, gjsonBool(t, got, "stream"), "client %s round %d: %s", client, round, got)
			wantStreamed, err := sjson.SetBytes(want, "stream", true)
			require.NoError(t, err)
			assert.JSONEq(t, string(wantStreamed), string(got), "client %s round %d", client, round)
		}
	}
}

func gjsonBool(t *testing.T, body []byte, path string) bool {
	t.Helper()
	return gjson.GetBytes(body, path).Bool()
}

// An answer's calls' containers are remembered under its id and its conversation: a request
// continuing from it learns them, with those of the answers before it, and another identity
// learns nothing.
func TestExchangeContextContainers(t *testing.T) {
	p := memory.NewPending(nil)
	run := func(identity, body string, containers ...string) schema.Exchange {
		x, err := responses.Surface{}.NewExchange([]byte(body), schema.Options{})
		require.NoError(t, err)
		_, err = x.(schema.Continuation).Continue(p, func() string { return identity })
		require.NoError(t, err)
		var calls []schema.CodeCall
		var items []string
		for i, c := range containers {
			calls = append(calls, schema.CodeCall{ID: fmt.Sprint("ci_", i), Status: "completed", ContainerID: c, Outputs: []schema.CodeOutput{}})
			items = append(items, fmt.Sprintf(`{"type":"function_call","id":"fc_%d","call_id":"call_%d","name":"code_interpreter","arguments":"{}"}`, i, i))
		}
		first := []byte(`{"id":"resp_` + identity + fmt.Sprint(len(containers)) + `","output":[` + join(items) + `]}`)
		final, err := x.Final([]schema.Round{{Body: first, Calls: calls}}, "")
		require.NoError(t, err)
		x.(schema.Continuation).Remember(p, identity, final, nil)
		return x
	}
	tool := `"tools":[{"type":"code_interpreter","container":{"type":"auto"}}]`
	run("id-a", `{"model":"m","conversation":"conv_1","input":"q",`+tool+`}`, "cntr_1", "cntr_1", "cntr_2")
	x := run("id-a", `{"model":"m","previous_response_id":"resp_id-a3","input":"q",`+tool+`}`)
	assert.Equal(t, []string{"cntr_1", "cntr_2"}, x.Request().ContextContainerIDs, "continuing from the answer")
	x = run("id-a", `{"model":"m","previous_response_id":"resp_id-a0","input":"q",`+tool+`}`, "cntr_3")
	assert.Equal(t, []string{"cntr_1", "cntr_2"}, x.Request().ContextContainerIDs, "continuing from an answer that ran nothing, the chain goes on")
	x = run("id-a", `{"model":"m","previous_response_id":"resp_id-a1","input":"q",`+tool+`}`)
	assert.Equal(t, []string{"cntr_1", "cntr_2", "cntr_3"}, x.Request().ContextContainerIDs, "the chain, oldest first")
	x = run("id-a", `{"model":"m","conversation":{"id":"conv_1"},"input":"q",`+tool+`}`)
	assert.Equal(t, []string{"cntr_1", "cntr_2"}, x.Request().ContextContainerIDs, "continuing in the conversation")
	x = run("id-b", `{"model":"m","previous_response_id":"resp_id-a3","input":"q",`+tool+`}`)
	assert.Nil(t, x.Request().ContextContainerIDs, "another identity")
}
