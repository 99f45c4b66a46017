package processor

import (
	"container/list"
	"sync"
	"time"

	"github.com/codeinterp/codeinterp/pkg/schema"
)

// Bounds of the pending-output store: how long an answer's pending outputs are kept for the
// request that continues from it, and how many entries and bytes of outputs are kept at most
// (the least recently stored go first).
const (
	pendingTTL        = time.Hour
	pendingMaxEntries = 10000
	pendingMaxBytes   = 16 << 20
)

// pendingOutputs remembers the outputs of internal calls that a Responses answer left unanswered
// upstream: a turn that called both the code function and a client function is returned to the
// client with the client's call pending, and the upstream, when it stores responses, holds that
// turn with the code call unanswered too. A request that continues from the answer by
// previous_response_id, or in the same conversation, carries only the client's outputs; it gets
// these prepended, or the upstream would refuse it for the unanswered call. Clients that replay
// the items themselves need nothing from here.
//
// Entries are scoped by the caller's identity and bounded by pendingTTL, pendingMaxEntries and
// pendingMaxBytes. The zero value is not usable; use newPendingOutputs.
type pendingOutputs struct {
	mu    sync.Mutex
	now   func() time.Time
	byKey map[pendingKey]*list.Element // of *pendingEntry
	order *list.List                   // least recently stored first
	bytes int
}

// pendingKey names what a continuation refers to: an answer's id, or a conversation's.
type pendingKey struct {
	identity     string
	conversation bool
	id           string
}

type pendingEntry struct {
	key     pendingKey
	outs    []schema.CallOutput
	size    int
	expires time.Time
}

func newPendingOutputs(now func() time.Time) *pendingOutputs {
	return &pendingOutputs{now: now, byKey: make(map[pendingKey]*list.Element), order: list.New()}
}

// put remembers outs for the continuation of the answer responseID (and of conversationID when
// the request was in a conversation), for identity.
func (p *pendingOutputs) put(identity, responseID, conversationID string, outs []schema.CallOutput) {
	if len(outs) == 0 {
		return
	}
	size := 0
	for _, o := range outs {
		size += len(o.CallID) + len(o.Output)
	}
	if size > pendingMaxBytes {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	for _, k := range []pendingKey{{identity, false, responseID}, {identity, true, conversationID}} {
		if k.id == "" {
			continue
		}
		p.removeLocked(k)
		e := &pendingEntry{key: k, outs: outs, size: size, expires: now.Add(pendingTTL)}
		p.byKey[k] = p.order.PushBack(e)
		p.bytes += size
	}
	// Every entry lives pendingTTL from when it was stored, so the expired ones are at the front.
	for p.order.Len() > 0 {
		front := p.order.Front().Value.(*pendingEntry)
		if p.bytes <= pendingMaxBytes && p.order.Len() <= pendingMaxEntries && !now.After(front.expires) {
			break
		}
		p.removeLocked(front.key)
	}
}

// take returns the outputs a request of identity continuing from previousResponseID or in
// conversationID must carry, or nil. An answer's entry stays until it expires (a client may
// branch from one answer several times); a conversation's is used once, since the conversation
// holds the outputs from then on.
func (p *pendingOutputs) take(identity, previousResponseID, conversationID string) []schema.CallOutput {
	if previousResponseID == "" && conversationID == "" {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	if previousResponseID != "" {
		if outs := p.getLocked(pendingKey{identity, false, previousResponseID}, now); outs != nil {
			return outs
		}
	}
	if conversationID != "" {
		k := pendingKey{identity, true, conversationID}
		if outs := p.getLocked(k, now); outs != nil {
			p.removeLocked(k)
			return outs
		}
	}
	return nil
}

// getLocked returns the live entry of k's outputs, dropping it when it has expired.
func (p *pendingOutputs) getLocked(k pendingKey, now time.Time) []schema.CallOutput {
	el, ok := p.byKey[k]
	if !ok {
		return nil
	}
	e := el.Value.(*pendingEntry)
	if now.After(e.expires) {
		p.removeLocked(k)
		return nil
	}
	return e.outs
}

func (p *pendingOutputs) removeLocked(k pendingKey) {
	el, ok := p.byKey[k]
	if !ok {
		return
	}
	p.bytes -= el.Value.(*pendingEntry).size
	p.order.Remove(el)
	delete(p.byKey, k)
}
