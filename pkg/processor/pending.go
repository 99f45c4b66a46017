package processor

import (
	"container/list"
	"sync"
	"time"

	"github.com/codeinterp/codeinterp/pkg/schema"
)

// Bounds of the pending-call store: how long an answer's pending calls are kept for the
// requests that continue from it, and how many entries and bytes are kept at most (the least
// recently stored go first).
const (
	pendingTTL        = time.Hour
	pendingMaxEntries = 10000
	pendingMaxBytes   = 16 << 20
)

// pendingCalls remembers the internal calls, with their outputs, that an answer did not show
// because the same turn also called a client function: the client gets the answer with its own
// call to run, and its next request continues from there without ours.
//
//   - Responses: the upstream, when it stores responses, holds that turn with our call
//     unanswered. A request continuing from the answer by previous_response_id, or in the same
//     conversation, carries only the client's outputs; it gets ours prepended, or the upstream
//     would refuse it. (Clients that replay the items themselves need nothing from here.)
//   - Chat: the client replays the assistant message with its own tool calls only, in this and
//     every later request; ours are put back next to them so that the model sees its code and
//     what it printed.
//
// Entries are scoped by the caller's identity and bounded by pendingTTL, pendingMaxEntries and
// pendingMaxBytes. The zero value is not usable; use newPendingCalls.
type pendingCalls struct {
	mu    sync.Mutex
	now   func() time.Time
	byKey map[pendingKey]*list.Element // of *pendingEntry
	order *list.List                   // least recently stored first
	bytes int
	chats map[string]int // Chat entries per identity
}

// pendingKind is what a continuation refers to.
type pendingKind uint8

const (
	pendingResponse     pendingKind = iota // a Responses answer's id
	pendingConversation                    // a Responses conversation's id
	pendingChatCall                        // a client tool call id of a Chat answer
)

type pendingKey struct {
	identity string
	kind     pendingKind
	id       string
}

type pendingEntry struct {
	key     pendingKey
	calls   []schema.PendingCall
	size    int
	expires time.Time
}

func newPendingCalls(now func() time.Time) *pendingCalls {
	return &pendingCalls{now: now, byKey: make(map[pendingKey]*list.Element), order: list.New(), chats: make(map[string]int)}
}

// putResponses remembers calls for the continuation of the Responses answer responseID (and of
// conversationID when the request was in a conversation), for identity.
func (p *pendingCalls) putResponses(identity, responseID, conversationID string, calls []schema.PendingCall) {
	p.put(calls, pendingKey{identity, pendingResponse, responseID}, pendingKey{identity, pendingConversation, conversationID})
}

// putChat remembers calls for the Chat requests of identity that replay the client's tool calls
// clientCallIDs.
func (p *pendingCalls) putChat(identity string, clientCallIDs []string, calls []schema.PendingCall) {
	keys := make([]pendingKey, len(clientCallIDs))
	for i, id := range clientCallIDs {
		keys[i] = pendingKey{identity, pendingChatCall, id}
	}
	p.put(calls, keys...)
}

func (p *pendingCalls) put(calls []schema.PendingCall, keys ...pendingKey) {
	if len(calls) == 0 {
		return
	}
	size := 0
	for _, c := range calls {
		size += len(c.CallID) + len(c.Arguments) + len(c.Output)
	}
	if size > pendingMaxBytes {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	for _, k := range keys {
		if k.id == "" {
			continue
		}
		p.removeLocked(k)
		e := &pendingEntry{key: k, calls: calls, size: size, expires: now.Add(pendingTTL)}
		p.byKey[k] = p.order.PushBack(e)
		p.bytes += size
		if k.kind == pendingChatCall {
			p.chats[k.identity]++
		}
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

// takeResponses returns the calls whose outputs a Responses request of identity continuing from
// previousResponseID or in conversationID must carry, or nil. An answer's entry stays until it
// expires (a client may branch from one answer several times); a conversation's is used once,
// since the conversation holds the outputs from then on.
func (p *pendingCalls) takeResponses(identity, previousResponseID, conversationID string) []schema.PendingCall {
	if previousResponseID == "" && conversationID == "" {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	if previousResponseID != "" {
		if calls := p.getLocked(pendingKey{identity, pendingResponse, previousResponseID}, now); calls != nil {
			return calls
		}
	}
	if conversationID != "" {
		k := pendingKey{identity, pendingConversation, conversationID}
		if calls := p.getLocked(k, now); calls != nil {
			p.removeLocked(k)
			return calls
		}
	}
	return nil
}

// chatLookup returns, when identity has Chat entries, the function that gives the calls to put
// back next to a client tool call id (see schema.InsertChatCalls); nil otherwise. Chat entries
// stay until they expire: every later request of the conversation replays the message.
func (p *pendingCalls) chatLookup(identity string) func(callID string) []schema.PendingCall {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.chats[identity] == 0 {
		return nil
	}
	return func(callID string) []schema.PendingCall {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.getLocked(pendingKey{identity, pendingChatCall, callID}, p.now())
	}
}

// getLocked returns the live entry of k's calls, dropping it when it has expired.
func (p *pendingCalls) getLocked(k pendingKey, now time.Time) []schema.PendingCall {
	el, ok := p.byKey[k]
	if !ok {
		return nil
	}
	e := el.Value.(*pendingEntry)
	if now.After(e.expires) {
		p.removeLocked(k)
		return nil
	}
	return e.calls
}

func (p *pendingCalls) removeLocked(k pendingKey) {
	el, ok := p.byKey[k]
	if !ok {
		return
	}
	p.bytes -= el.Value.(*pendingEntry).size
	p.order.Remove(el)
	delete(p.byKey, k)
	if k.kind == pendingChatCall {
		if p.chats[k.identity]--; p.chats[k.identity] <= 0 {
			delete(p.chats, k.identity)
		}
	}
}
