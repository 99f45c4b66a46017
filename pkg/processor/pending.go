package processor

import (
	"container/list"
	"sync"
	"time"

	"github.com/codeinterp/codeinterp/pkg/schema"
)

// Bounds of the pending-call store: how long an answer's pending calls are kept for the
// requests that continue from it, and how many entries and bytes are kept at most, in all and
// for one identity (the least recently stored go first), so that one tenant cannot push the
// others' out.
const (
	pendingTTL                   = time.Hour
	pendingMaxEntries            = 10000
	pendingMaxBytes              = 16 << 20
	pendingMaxEntriesPerIdentity = 256
	pendingMaxBytesPerIdentity   = 1 << 20
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
// Entries are scoped by the caller's identity and bounded by pendingTTL and the pendingMax
// constants. Callers without an identity (no credential, no identity header) share one, so
// nothing is stored for them: their continuations carry nothing. The zero value is not usable; use newPendingCalls.
type pendingCalls struct {
	mu    sync.Mutex
	now   func() time.Time
	byKey map[pendingKey]*list.Element // of *pendingEntry
	order *list.List                   // least recently stored first
	bytes int
	per   map[string]*pendingUsage // per identity
	chats int                      // Chat entries of all identities
}

// pendingUsage is what one identity holds in the store.
type pendingUsage struct {
	entries, bytes int
	chatIDs        map[string]struct{} // the ids of its Chat entries
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
	return &pendingCalls{now: now, byKey: make(map[pendingKey]*list.Element), order: list.New(), per: make(map[string]*pendingUsage)}
}

// putResponses remembers calls for the continuation of the Responses answer responseID (and of
// conversationID when the request was in a conversation), for identity.
func (p *pendingCalls) putResponses(identity, responseID, conversationID string, calls []schema.PendingCall) {
	p.put(calls, pendingKey{identity, pendingResponse, responseID}, pendingKey{identity, pendingConversation, conversationID})
}

// putChat remembers calls for the Chat requests of identity that replay the message with the
// client's tool calls clientCallIDs. The message is found by its first client call.
func (p *pendingCalls) putChat(identity string, clientCallIDs []string, calls []schema.PendingCall) {
	if len(clientCallIDs) > 0 {
		p.put(calls, pendingKey{identity, pendingChatCall, clientCallIDs[0]})
	}
}

// put stores calls under keys. Nothing is stored for the anonymous identity "": every caller
// without a credential has it, so one anonymous caller's code and output would be put into
// another's request that names the same id.
func (p *pendingCalls) put(calls []schema.PendingCall, keys ...pendingKey) {
	if len(calls) == 0 || len(keys) == 0 || keys[0].identity == "" {
		return
	}
	size := 0
	for _, c := range calls {
		size += len(c.CallID) + len(c.Arguments) + len(c.Output)
	}
	if size > pendingMaxBytesPerIdentity {
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
		u := p.per[k.identity]
		if u == nil {
			u = &pendingUsage{chatIDs: make(map[string]struct{})}
			p.per[k.identity] = u
		}
		u.entries++
		u.bytes += size
		if k.kind == pendingChatCall {
			u.chatIDs[k.id] = struct{}{}
			p.chats++
		}
		// The identity's oldest entries go first when it holds more than its share; a walk from
		// the front, on the rare path of a turn that left calls pending.
		for el := p.order.Front(); el != nil && (u.entries > pendingMaxEntriesPerIdentity || u.bytes > pendingMaxBytesPerIdentity); {
			next := el.Next()
			if old := el.Value.(*pendingEntry); old.key.identity == k.identity && old.key != k {
				p.removeLocked(old.key)
			}
			el = next
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

// responses returns the calls whose outputs a Responses request of identity continuing from
// previousResponseID or in conversationID must carry, or nil, and whether they are the
// conversation's. Entries stay until they expire (a client may branch from one answer several
// times, or retry); a conversation's goes once the upstream has taken a request that carried
// them (dropConversation), since the conversation holds the outputs from then on.
func (p *pendingCalls) responses(identity, previousResponseID, conversationID string) (calls []schema.PendingCall, conversation bool) {
	if previousResponseID == "" && conversationID == "" {
		return nil, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	if previousResponseID != "" {
		if calls := p.getLocked(pendingKey{identity, pendingResponse, previousResponseID}, now); calls != nil {
			return calls, false
		}
	}
	if conversationID != "" {
		if calls := p.getLocked(pendingKey{identity, pendingConversation, conversationID}, now); calls != nil {
			return calls, true
		}
	}
	return nil, false
}

// dropConversation forgets the calls of identity's conversation conversationID.
func (p *pendingCalls) dropConversation(identity, conversationID string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.removeLocked(pendingKey{identity, pendingConversation, conversationID})
}

// chatIDs returns the client tool call ids that identity's live Chat entries are found by.
// Chat entries stay until they expire: every later request of the conversation replays the
// message.
func (p *pendingCalls) chatIDs(identity string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	u := p.per[identity]
	if u == nil || len(u.chatIDs) == 0 {
		return nil
	}
	now := p.now()
	ids := make([]string, 0, len(u.chatIDs))
	for id := range u.chatIDs {
		if p.getLocked(pendingKey{identity, pendingChatCall, id}, now) != nil {
			ids = append(ids, id)
		}
	}
	return ids
}

// anyChat reports whether the store holds Chat entries at all: when it does not, a Chat
// request needs no look, nor its caller's identity.
func (p *pendingCalls) anyChat() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.chats > 0
}

// chat returns the calls to put back next to identity's client tool call callID, or nil.
func (p *pendingCalls) chat(identity, callID string) []schema.PendingCall {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.getLocked(pendingKey{identity, pendingChatCall, callID}, p.now())
}

// getLocked returns the live entry of k's calls, dropping it when it has expired. The anonymous
// identity has none (see put).
func (p *pendingCalls) getLocked(k pendingKey, now time.Time) []schema.PendingCall {
	if k.identity == "" {
		return nil
	}
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
	size := el.Value.(*pendingEntry).size
	p.bytes -= size
	p.order.Remove(el)
	delete(p.byKey, k)
	if u := p.per[k.identity]; u != nil {
		u.entries--
		u.bytes -= size
		if k.kind == pendingChatCall {
			delete(u.chatIDs, k.id)
			p.chats--
		}
		if u.entries <= 0 {
			delete(p.per, k.identity)
		}
	}
}
