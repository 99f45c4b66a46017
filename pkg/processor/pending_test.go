package processor

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/codeinterp/codeinterp/pkg/loop"
	"github.com/codeinterp/codeinterp/pkg/schema"
)

func TestPendingCallsResponses(t *testing.T) {
	now := time.Unix(1000, 0)
	p := newPendingCalls(func() time.Time { return now })
	outs := []schema.PendingCall{{CallID: "call_1", Arguments: `{"code":"print(42)"}`, Output: "42\n"}}
	p.putResponses("id-a", "resp_1", "conv_1", outs)

	get := func(identity, prev, conv string) []schema.PendingCall {
		calls, _ := p.responses(identity, prev, conv)
		return calls
	}
	assert.Nil(t, get("id-b", "resp_1", ""), "another identity never gets them")
	assert.Nil(t, get("id-a", "resp_2", ""), "another answer's continuation gets nothing")
	assert.Nil(t, get("id-a", "", ""), "a request that continues from nothing gets nothing")
	assert.Equal(t, outs, get("id-a", "resp_1", ""), "continuation by previous_response_id")
	assert.Equal(t, outs, get("id-a", "resp_1", ""), "a second branch from the same answer")

	calls, conversation := p.responses("id-a", "", "conv_1")
	assert.Equal(t, outs, calls, "continuation in the conversation")
	assert.True(t, conversation, "the conversation's entry")
	assert.Equal(t, outs, get("id-a", "", "conv_1"), "a retry before the upstream took the request gets them again")
	p.dropConversation("id-a", "conv_1")
	assert.Nil(t, get("id-a", "", "conv_1"), "the conversation holds them once the upstream took them")

	now = now.Add(pendingTTL + time.Second)
	assert.Nil(t, get("id-a", "resp_1", ""), "expired")
}

func TestPendingCallsBounds(t *testing.T) {
	now := time.Unix(1000, 0)
	p := newPendingCalls(func() time.Time { return now })
	get := func(identity, prev string) []schema.PendingCall {
		calls, _ := p.responses(identity, prev, "")
		return calls
	}
	// One identity cannot push the others out.
	other := []schema.PendingCall{{CallID: "c", Output: "other"}}
	p.putResponses("quiet", "resp_q", "", other)
	big := []schema.PendingCall{{CallID: "c", Output: strings.Repeat("x", pendingMaxBytesPerIdentity/4)}}
	for i := range 10 {
		p.putResponses("noisy", "resp_"+strconv.Itoa(i), "", big)
	}
	assert.Equal(t, other, get("quiet", "resp_q"), "another identity's entry survives a noisy one")
	assert.Nil(t, get("noisy", "resp_0"), "the noisy identity's oldest entry goes at its bytes share")
	assert.NotNil(t, get("noisy", "resp_9"), "its newest entry stays")
	assert.LessOrEqual(t, p.per["noisy"].bytes, pendingMaxBytesPerIdentity, "bytes kept for one identity")

	p.putResponses("noisy", "huge", "", []schema.PendingCall{{CallID: "c", Output: strings.Repeat("x", pendingMaxBytesPerIdentity+1)}})
	assert.Nil(t, get("noisy", "huge"), "calls larger than an identity's share are not kept")

	small := []schema.PendingCall{{CallID: "c", Output: "1"}}
	for i := range pendingMaxEntriesPerIdentity + 10 {
		p.putResponses("many", "resp_"+strconv.Itoa(i), "", small)
	}
	assert.Equal(t, pendingMaxEntriesPerIdentity, p.per["many"].entries, "entries kept for one identity")
	assert.Nil(t, get("many", "resp_0"), "the oldest went")

	q := newPendingCalls(func() time.Time { return now })
	for i := range pendingMaxEntries + 10 {
		q.putResponses("id"+strconv.Itoa(i%100), "resp_"+strconv.Itoa(i), "", small)
	}
	require.LessOrEqual(t, q.order.Len(), pendingMaxEntries, "entries kept in all")
	assert.Equal(t, len(q.byKey), q.order.Len(), "index and order agree")

	r := newPendingCalls(func() time.Time { return now })
	r.putResponses("id", "early", "", small)
	now = now.Add(pendingTTL + time.Second)
	r.putResponses("id", "late", "", small)
	assert.Equal(t, 1, r.order.Len(), "expired entries are dropped when a new one is stored")
	assert.Equal(t, 1, r.per["id"].entries, "and no longer counted")
}

func TestPendingCallsChat(t *testing.T) {
	now := time.Unix(1000, 0)
	p := newPendingCalls(func() time.Time { return now })
	assert.Empty(t, p.chatIDs("id-a"), "no ids for an identity without Chat entries")
	assert.False(t, p.anyChat(), "no Chat entries at all")
	calls := []schema.PendingCall{{CallID: "call_ci", Arguments: `{"code":"1"}`, Output: "1"}}
	p.putChat("id-a", []string{"call_w", "call_x"}, calls)
	assert.Empty(t, p.chatIDs("id-b"), "another identity has none")
	assert.Equal(t, []string{"call_w"}, p.chatIDs("id-a"), "the message is found by its first client call")
	assert.True(t, p.anyChat(), "Chat entries held")
	assert.Equal(t, calls, p.chat("id-a", "call_w"), "by the first client call")
	assert.Nil(t, p.chat("id-b", "call_w"), "not for another identity")
	assert.Equal(t, calls, p.chat("id-a", "call_w"), "every later request replays the message")
	assert.Nil(t, p.chat("id-a", "call_q"), "another call")
	now = now.Add(pendingTTL + time.Second)
	assert.Empty(t, p.chatIDs("id-a"), "expired entries are dropped when looked for")
	assert.Nil(t, p.chat("id-a", "call_w"), "expired")
	assert.Empty(t, p.per, "nothing is counted for the identity any more")
	assert.False(t, p.anyChat(), "no Chat entries left")
}

// anonymousHeaders are the request headers of a caller with no credential.
func anonymousHeaders(path string) *extprocv3.ProcessingRequest {
	return reqHeaders(false, ":authority", "llm.local", ":path", path, ":method", "POST", ":scheme", "http",
		"content-type", "application/json")
}

// Callers without a credential all have the empty identity: a pending call of one must never
// reach another's request, so none is stored for them (Chat replay and Responses
// continuation alike).
func TestAnonymousCallersGetNoContinuations(t *testing.T) {
	tests := []struct {
		name, path, first, next string
		res                     loop.Response
	}{
		{
			name:  "chat replay",
			path:  "/v1/chat/completions",
			first: `{"model":"m","messages":[{"role":"user","content":"q"}],"tools":[{"type":"code_interpreter"}]}`,
			next:  `{"model":"m","messages":[{"role":"user","content":"q"},{"role":"assistant","tool_calls":[{"id":"call_w","type":"function","function":{"name":"w","arguments":"{}"}}]},{"role":"tool","tool_call_id":"call_w","content":"sunny"}]}`,
			res:   loop.Response{ClientCallIDs: []string{"call_w"}, Pending: []schema.PendingCall{{CallID: "call_ci", Arguments: `{"code":"print(secret)"}`, Output: "secret of caller one\n"}}},
		},
		{
			name:  "responses continuation",
			path:  "/v1/responses",
			first: `{"model":"m","conversation":"conv_1","input":"q","tools":[{"type":"code_interpreter"}]}`,
			next:  `{"model":"m","previous_response_id":"resp_mixed","conversation":"conv_1","input":[{"type":"function_call_output","call_id":"call_w","output":"sunny"}]}`,
			res:   loop.Response{ResponseID: "resp_mixed", Pending: []schema.PendingCall{{CallID: "call_ci", Output: "secret of caller one\n"}}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := tt.res
			res.Status, res.Header, res.Body, res.Stop = 200, http.Header{"Content-Type": {"application/json"}}, []byte(`{}`), loop.StopClientCall
			ts := newTestServer(t, nil, &fakeLoop{resp: res}, nil)
			ex := ts.open(t)
			ex.send(anonymousHeaders(tt.path))
			ex.send(reqBody(tt.first))
			ex.send(respHeaders(":status", "200"))
			ex.send(respBody([]byte(`{}`)))

			ex = ts.open(t)
			ex.send(anonymousHeaders(tt.path))
			resp := ex.send(reqBody(tt.next))
			assert.NotContains(t, string(resp.GetRequestBody().GetResponse().GetBodyMutation().GetBody()), "secret",
				"%s: another anonymous caller's request %s gets nothing of the first one's", tt.name, tt.next)
			assert.Nil(t, resp.GetRequestBody().GetResponse().GetBodyMutation(), "%s: the request is left as it is", tt.name)
		})
	}
	p := newPendingCalls(time.Now)
	p.putChat("", []string{"call_w"}, []schema.PendingCall{{CallID: "call_ci", Output: "x"}})
	p.putResponses("", "resp_1", "conv_1", []schema.PendingCall{{CallID: "call_ci", Output: "x"}})
	assert.False(t, p.anyChat(), "no Chat entry is stored for the anonymous identity")
	assert.Zero(t, p.order.Len(), "no entry at all is stored for the anonymous identity")
}
