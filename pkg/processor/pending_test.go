package processor

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/codeinterp/codeinterp/pkg/schema"
)

func TestPendingCallsResponses(t *testing.T) {
	now := time.Unix(1000, 0)
	p := newPendingCalls(func() time.Time { return now })
	outs := []schema.PendingCall{{CallID: "call_1", Arguments: `{"code":"print(42)"}`, Output: "42\n"}}
	p.putResponses("id-a", "resp_1", "conv_1", outs)

	assert.Nil(t, p.takeResponses("id-b", "resp_1", ""), "another identity never gets them")
	assert.Nil(t, p.takeResponses("id-a", "resp_2", ""), "another answer's continuation gets nothing")
	assert.Nil(t, p.takeResponses("id-a", "", ""), "a request that continues from nothing gets nothing")
	assert.Equal(t, outs, p.takeResponses("id-a", "resp_1", ""), "continuation by previous_response_id")
	assert.Equal(t, outs, p.takeResponses("id-a", "resp_1", ""), "a second branch from the same answer")

	assert.Equal(t, outs, p.takeResponses("id-a", "", "conv_1"), "continuation in the conversation")
	assert.Nil(t, p.takeResponses("id-a", "", "conv_1"), "the conversation holds them after one use")

	now = now.Add(pendingTTL + time.Second)
	assert.Nil(t, p.takeResponses("id-a", "resp_1", ""), "expired")
}

func TestPendingCallsBounds(t *testing.T) {
	now := time.Unix(1000, 0)
	p := newPendingCalls(func() time.Time { return now })
	big := []schema.PendingCall{{CallID: "c", Output: strings.Repeat("x", pendingMaxBytes/4)}}
	for i := range 5 {
		p.putResponses("id", "resp_"+strconv.Itoa(i), "", big)
	}
	assert.Nil(t, p.takeResponses("id", "resp_0", ""), "the oldest entry goes when the bytes bound is reached")
	assert.NotNil(t, p.takeResponses("id", "resp_4", ""), "the newest entry stays")
	assert.LessOrEqual(t, p.bytes, pendingMaxBytes, "bytes kept")

	p.putResponses("id", "huge", "", []schema.PendingCall{{CallID: "c", Output: strings.Repeat("x", pendingMaxBytes+1)}})
	assert.Nil(t, p.takeResponses("id", "huge", ""), "outputs larger than the whole store are not kept")

	q := newPendingCalls(func() time.Time { return now })
	small := []schema.PendingCall{{CallID: "c", Output: "1"}}
	for i := range pendingMaxEntries + 10 {
		q.putResponses("id", "resp_"+strconv.Itoa(i), "", small)
	}
	require.LessOrEqual(t, q.order.Len(), pendingMaxEntries, "entries kept")
	assert.Equal(t, len(q.byKey), q.order.Len(), "index and order agree")

	q.putResponses("id", "early", "", small)
	now = now.Add(pendingTTL + time.Second)
	q.putResponses("id", "late", "", small)
	assert.Equal(t, 1, q.order.Len(), "expired entries are dropped when a new one is stored")
}

func TestPendingCallsChat(t *testing.T) {
	now := time.Unix(1000, 0)
	p := newPendingCalls(func() time.Time { return now })
	assert.Nil(t, p.chatLookup("id-a"), "no lookup for an identity without Chat entries")
	calls := []schema.PendingCall{{CallID: "call_ci", Arguments: `{"code":"1"}`, Output: "1"}}
	p.putChat("id-a", []string{"call_w", "call_x"}, calls)
	assert.Nil(t, p.chatLookup("id-b"), "another identity has none")
	lookup := p.chatLookup("id-a")
	require.NotNil(t, lookup, "a lookup for the identity")
	assert.Equal(t, calls, lookup("call_w"), "by the first client call")
	assert.Equal(t, calls, lookup("call_x"), "by the second client call")
	assert.Equal(t, calls, lookup("call_w"), "every later request replays the message")
	assert.Nil(t, lookup("call_q"), "another call")
	now = now.Add(pendingTTL + time.Second)
	assert.Nil(t, lookup("call_w"), "expired")
	assert.Nil(t, lookup("call_x"), "expired")
	assert.Nil(t, p.chatLookup("id-a"), "no lookup once every entry is gone")
}
