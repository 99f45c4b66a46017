package memory

import (
	"container/list"
	"slices"
	"sync"
	"time"

	"github.com/codeinterp/codeinterp/pkg/store"
)

// Bounds of the pending-call store: how long an answer's pending calls are kept for the
// requests that continue from it, and how many entries and bytes are kept at most, in all and
// for one identity (the least recently stored go first), so that one tenant cannot push the
// others' out.
const (
	PendingTTL                   = time.Hour
	PendingMaxEntries            = 10000
	PendingMaxBytes              = 16 << 20
	PendingMaxEntriesPerIdentity = 256
	// PendingMaxBytesPerIdentity bounds what one identity holds; a single Put of more is not
	// kept.
	PendingMaxBytesPerIdentity = store.MaxPendingBytesPerIdentity
)

// Pending is a [store.Pending] in the process's memory, bounded by PendingTTL and the
// pending bounds. The zero value is not usable; use NewPending.
type Pending struct {
	aliases    // an answer's name is kept apart from the pending calls, with bounds of its own
	containers // so are the containers its calls ran in

	lim PendingLimits

	mu    sync.Mutex
	now   func() time.Time
	byKey map[entryKey]*list.Element // of *entry
	order *list.List                 // least recently stored first
	bytes int
	per   map[string]*usage // per identity
	kinds map[string]int    // entries of each kind, of all identities
}

var _ store.Continuations = (*Pending)(nil)

// usage is what one identity holds in the store.
type usage struct {
	entries, bytes int
	ids            map[string]map[string]struct{} // the ids of its entries, by kind
}

type entryKey struct {
	identity string
	key      store.Key
}

type entry struct {
	key     entryKey
	calls   []store.PendingCall
	size    int
	expires time.Time
}

// PendingLimits are the bounds of a [Pending]; a zero field is the package's constant
// (PendingTTL, PendingMaxEntries, …).
type PendingLimits struct {
	TTL                   time.Duration
	MaxEntries, MaxBytes  int
	MaxEntriesPerIdentity int
	MaxBytesPerIdentity   int
}

// withDefaults returns l with every zero field set to the package's constant.
func (l PendingLimits) withDefaults() PendingLimits {
	if l.TTL <= 0 {
		l.TTL = PendingTTL
	}
	for _, f := range []struct {
		v *int
		d int
	}{{&l.MaxEntries, PendingMaxEntries}, {&l.MaxBytes, PendingMaxBytes}, {&l.MaxEntriesPerIdentity, PendingMaxEntriesPerIdentity}, {&l.MaxBytesPerIdentity, PendingMaxBytesPerIdentity}} {
		if *f.v <= 0 {
			*f.v = f.d
		}
	}
	return l
}

// NewPending returns an empty store that reads the time from now (time.Now when nil).
func NewPending(now func() time.Time) *Pending { return NewPendingLimited(now, PendingLimits{}) }

// NewPendingLimited is NewPending with the bounds lim (the stored answers' store, whose
// bounds the configuration sets).
func NewPendingLimited(now func() time.Time, lim PendingLimits) *Pending {
	if now == nil {
		now = time.Now
	}
	return &Pending{
		lim:        lim.withDefaults(),
		aliases:    aliases{now: now, byKey: make(map[aliasKey]*list.Element), order: list.New()},
		containers: newContainers(now),
		now:        now, byKey: make(map[entryKey]*list.Element), order: list.New(),
		per: make(map[string]*usage), kinds: make(map[string]int),
	}
}

// Put implements [store.Pending]. Nothing is stored for the anonymous identity "": every
// caller without a credential has it, so one anonymous caller's code and output would be put
// into another's request that names the same id.
func (p *Pending) Put(identity string, calls []store.PendingCall, keys ...store.Key) {
	if len(calls) == 0 || len(keys) == 0 || identity == "" {
		return
	}
	size := 0
	for _, c := range calls {
		size += c.Size()
	}
	p.put(identity, &entry{calls: calls, size: size}, keys...)
}

// Swap implements [store.Pending].
func (p *Pending) Swap(identity string, key store.Key, old, calls []store.PendingCall) bool {
	if len(old) == 0 || len(calls) == 0 || identity == "" || key.ID == "" {
		return false
	}
	size := 0
	for _, c := range calls {
		size += c.Size()
	}
	if size > p.lim.MaxBytesPerIdentity {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	if cur := p.getLocked(boundedKey(identity, key), now); !slices.Equal(cur, old) {
		return false
	}
	p.putLocked(identity, &entry{calls: calls, size: size}, now, key)
	return true
}

// put stores what proto holds (its calls and their size) under each of keys.
func (p *Pending) put(identity string, proto *entry, keys ...store.Key) {
	if proto.size > p.lim.MaxBytesPerIdentity {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.putLocked(identity, proto, p.now(), keys...)
}

// putLocked is put with p.mu held; proto's size is within an identity's bound.
func (p *Pending) putLocked(identity string, proto *entry, now time.Time, keys ...store.Key) {
	size := proto.size
	for _, k := range keys {
		if k.ID == "" {
			continue
		}
		ek := boundedKey(identity, k)
		p.removeLocked(ek)
		p.byKey[ek] = p.order.PushBack(&entry{key: ek, calls: proto.calls, size: size, expires: now.Add(p.lim.TTL)})
		p.bytes += size
		p.kinds[k.Kind]++
		u := p.per[identity]
		if u == nil {
			u = &usage{ids: make(map[string]map[string]struct{})}
			p.per[identity] = u
		}
		u.entries++
		u.bytes += size
		if ek.key.ID == k.ID { // a hashed id cannot be listed back (see MaxKeyBytes)
			if u.ids[k.Kind] == nil {
				u.ids[k.Kind] = make(map[string]struct{})
			}
			u.ids[k.Kind][k.ID] = struct{}{}
		}
		// The identity's oldest entries go first when it holds more than its share; a walk from
		// the front, on the rare path of a turn that left calls pending.
		for el := p.order.Front(); el != nil && (u.entries > p.lim.MaxEntriesPerIdentity || u.bytes > p.lim.MaxBytesPerIdentity); {
			next := el.Next()
			if old := el.Value.(*entry); old.key.identity == identity && old.key != ek {
				p.removeLocked(old.key)
			}
			el = next
		}
	}
	// Every entry lives PendingTTL from when it was stored, so the expired ones are at the front.
	for p.order.Len() > 0 {
		front := p.order.Front().Value.(*entry)
		if p.bytes <= p.lim.MaxBytes && p.order.Len() <= p.lim.MaxEntries && !now.After(front.expires) {
			break
		}
		p.removeLocked(front.key)
	}
}

// Get implements [store.Pending].
func (p *Pending) Get(identity string, key store.Key) []store.PendingCall {
	if identity == "" {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.getLocked(boundedKey(identity, key), p.now())
}

// Drop implements [store.Pending].
func (p *Pending) Drop(identity string, key store.Key) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.removeLocked(boundedKey(identity, key))
}

// IDs implements [store.Pending].
func (p *Pending) IDs(identity, kind string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	u := p.per[identity]
	if u == nil || len(u.ids[kind]) == 0 {
		return nil
	}
	now := p.now()
	ids := make([]string, 0, len(u.ids[kind]))
	for id := range u.ids[kind] {
		if p.getLocked(entryKey{identity, store.Key{Kind: kind, ID: id}}, now) != nil {
			ids = append(ids, id)
		}
	}
	return ids
}

// Holds implements [store.Pending].
func (p *Pending) Holds(kind string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.kinds[kind] > 0
}

// getLocked returns the calls of k's live entry.
func (p *Pending) getLocked(k entryKey, now time.Time) []store.PendingCall {
	if e := p.entryLocked(k, now); e != nil {
		return e.calls
	}
	return nil
}

// entryLocked returns k's live entry, dropping it when it has expired, or nil.
func (p *Pending) entryLocked(k entryKey, now time.Time) *entry {
	el, ok := p.byKey[k]
	if !ok {
		return nil
	}
	e := el.Value.(*entry)
	if now.After(e.expires) {
		p.removeLocked(k)
		return nil
	}
	return e
}

func (p *Pending) removeLocked(k entryKey) {
	el, ok := p.byKey[k]
	if !ok {
		return
	}
	size := el.Value.(*entry).size
	p.bytes -= size
	p.order.Remove(el)
	delete(p.byKey, k)
	if p.kinds[k.key.Kind]--; p.kinds[k.key.Kind] <= 0 {
		delete(p.kinds, k.key.Kind)
	}
	if u := p.per[k.identity]; u != nil {
		u.entries--
		u.bytes -= size
		delete(u.ids[k.key.Kind], k.key.ID)
		if u.entries <= 0 {
			delete(p.per, k.identity)
		}
	}
}
