package memory

import (
	"container/list"
	"sync"
	"time"
)

// Bounds of the aliases: an answer's name is needed as long as a client may continue from the
// answer, which upstreams keep for weeks (OpenAI: 30 days); a name costs about a hundred bytes.
const (
	AliasTTL        = 30 * 24 * time.Hour
	AliasMaxEntries = 100000
)

// aliases is the [store.Aliases] part of Pending: the least recently stored names go first once
// there are AliasMaxEntries. Unlike pending calls they are kept for the anonymous identity too:
// a name is the upstream's unguessable response id, and the upstream still checks the
// credential of whoever continues from it.
type aliases struct {
	mu    sync.Mutex
	now   func() time.Time
	byKey map[aliasKey]*list.Element // of *aliasEntry
	order *list.List                 // least recently stored first
}

type aliasKey struct{ identity, from string }

type aliasEntry struct {
	key     aliasKey
	to      string
	expires time.Time
}

// PutAlias implements [store.Aliases].
func (a *aliases) PutAlias(identity, from, to string) {
	if from == "" || to == "" || len(to) > MaxAliasBytes {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	k := aliasKey{identity, boundedID(from)}
	if el, ok := a.byKey[k]; ok {
		a.order.Remove(el)
	}
	now := a.now()
	a.byKey[k] = a.order.PushBack(&aliasEntry{key: k, to: to, expires: now.Add(AliasTTL)})
	for a.order.Len() > 0 {
		front := a.order.Front().Value.(*aliasEntry)
		if a.order.Len() <= AliasMaxEntries && !now.After(front.expires) {
			break
		}
		a.order.Remove(a.order.Front())
		delete(a.byKey, front.key)
	}
}

// Alias implements [store.Aliases].
func (a *aliases) Alias(identity, from string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	k := aliasKey{identity, boundedID(from)}
	el, ok := a.byKey[k]
	if !ok {
		return ""
	}
	e := el.Value.(*aliasEntry)
	if a.now().After(e.expires) {
		a.order.Remove(el)
		delete(a.byKey, k)
		return ""
	}
	return e.to
}
