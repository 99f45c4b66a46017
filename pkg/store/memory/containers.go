package memory

import (
	"container/list"
	"slices"
	"sync"
	"time"

	"github.com/codeinterp/codeinterp/pkg/store"
)

// Bounds of the context containers: a container expires after 20 idle minutes, so ids older
// than a day name dead containers; an entry holds at most store.MaxContextContainers ids of at
// most store.MaxContainerIDBytes, under a kilobyte.
const (
	ContainersTTL        = 24 * time.Hour
	ContainersMaxEntries = 100000
)

// containers is the [store.ContextContainers] part of Pending: the least recently stored
// entries go first once there are ContainersMaxEntries.
type containers struct {
	mu    sync.Mutex
	now   func() time.Time
	byKey map[entryKey]*list.Element // of *containersEntry
	order *list.List                 // least recently stored first
}

type containersEntry struct {
	key     entryKey
	ids     []string
	expires time.Time
}

func newContainers(now func() time.Time) containers {
	return containers{now: now, byKey: make(map[entryKey]*list.Element), order: list.New()}
}

// PutContainers implements [store.ContextContainers].
func (c *containers) PutContainers(identity string, ids []string, keys ...store.Key) {
	if identity == "" || len(ids) == 0 {
		return
	}
	kept := make([]string, 0, min(len(ids), store.MaxContextContainers))
	for i := len(ids) - 1; i >= 0 && len(kept) < store.MaxContextContainers; i-- {
		if id := ids[i]; id != "" && len(id) <= store.MaxContainerIDBytes && !slices.Contains(kept, id) {
			kept = append(kept, id)
		}
	}
	if len(kept) == 0 {
		return
	}
	slices.Reverse(kept)
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	for _, key := range keys {
		if key.ID == "" {
			continue
		}
		k := boundedKey(identity, key)
		if el, ok := c.byKey[k]; ok {
			c.order.Remove(el)
		}
		c.byKey[k] = c.order.PushBack(&containersEntry{key: k, ids: kept, expires: now.Add(ContainersTTL)})
	}
	for c.order.Len() > 0 {
		front := c.order.Front().Value.(*containersEntry)
		if c.order.Len() <= ContainersMaxEntries && !now.After(front.expires) {
			break
		}
		c.order.Remove(c.order.Front())
		delete(c.byKey, front.key)
	}
}

// Containers implements [store.ContextContainers].
func (c *containers) Containers(identity string, key store.Key) []string {
	if identity == "" {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	k := boundedKey(identity, key)
	el, ok := c.byKey[k]
	if !ok {
		return nil
	}
	e := el.Value.(*containersEntry)
	if c.now().After(e.expires) {
		c.order.Remove(el)
		delete(c.byKey, k)
		return nil
	}
	return slices.Clone(e.ids)
}
