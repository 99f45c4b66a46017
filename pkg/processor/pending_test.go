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

func TestPendingOutputs(t *testing.T) {
	now := time.Unix(1000, 0)
	p := newPendingOutputs(func() time.Time { return now })
	outs := []schema.CallOutput{{CallID: "call_1", Output: "42\n"}}
	p.put("id-a", "resp_1", "conv_1", outs)

	assert.Nil(t, p.take("id-b", "resp_1", ""), "another identity never gets them")
	assert.Nil(t, p.take("id-a", "resp_2", ""), "another answer's continuation gets nothing")
	assert.Nil(t, p.take("id-a", "", ""), "a request that continues from nothing gets nothing")
	assert.Equal(t, outs, p.take("id-a", "resp_1", ""), "continuation by previous_response_id")
	assert.Equal(t, outs, p.take("id-a", "resp_1", ""), "a second branch from the same answer")

	assert.Equal(t, outs, p.take("id-a", "", "conv_1"), "continuation in the conversation")
	assert.Nil(t, p.take("id-a", "", "conv_1"), "the conversation holds them after one use")

	now = now.Add(pendingTTL + time.Second)
	assert.Nil(t, p.take("id-a", "resp_1", ""), "expired")
}

func TestPendingOutputsBounds(t *testing.T) {
	now := time.Unix(1000, 0)
	p := newPendingOutputs(func() time.Time { return now })
	big := []schema.CallOutput{{CallID: "c", Output: strings.Repeat("x", pendingMaxBytes/4)}}
	for i := range 5 {
		p.put("id", "resp_"+strconv.Itoa(i), "", big)
	}
	assert.Nil(t, p.take("id", "resp_0", ""), "the oldest entry goes when the bytes bound is reached")
	assert.NotNil(t, p.take("id", "resp_4", ""), "the newest entry stays")
	assert.LessOrEqual(t, p.bytes, pendingMaxBytes, "bytes kept")

	p.put("id", "huge", "", []schema.CallOutput{{CallID: "c", Output: strings.Repeat("x", pendingMaxBytes+1)}})
	assert.Nil(t, p.take("id", "huge", ""), "outputs larger than the whole store are not kept")

	q := newPendingOutputs(func() time.Time { return now })
	small := []schema.CallOutput{{CallID: "c", Output: "1"}}
	for i := range pendingMaxEntries + 10 {
		q.put("id", "resp_"+strconv.Itoa(i), "", small)
	}
	require.LessOrEqual(t, q.order.Len(), pendingMaxEntries, "entries kept")
	assert.Equal(t, len(q.byKey), q.order.Len(), "index and order agree")

	q.put("id", "early", "", small)
	now = now.Add(pendingTTL + time.Second)
	q.put("id", "late", "", small)
	assert.Equal(t, 1, q.order.Len(), "expired entries are dropped when a new one is stored")
}
