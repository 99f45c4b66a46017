package sandbox

import (
	"container/list"
	"time"
)

// tombstones orders the ids of a Manager's expired containers, oldest first, within the
// bounds TombstoneTTL, MaxTombstonesPerIdentity and MaxTombstones; the registrations
// themselves are in the Registry. Guarded by Manager.mu.
type tombstones struct {
	order      *list.List // of tomb, oldest first
	byIdentity map[string]int
}

type tomb struct {
	id, identity string
	at           time.Time
}

func newTombstones() tombstones {
	return tombstones{order: list.New(), byIdentity: map[string]int{}}
}

// add records that container id of identity expired at t, and returns the ids to forget to
// stay within the bounds.
func (ts *tombstones) add(id, identity string, t time.Time) (forget []string) {
	ts.order.PushBack(tomb{id: id, identity: identity, at: t})
	ts.byIdentity[identity]++
	if ts.byIdentity[identity] > MaxTombstonesPerIdentity {
		for el := ts.order.Front(); el != nil; el = el.Next() {
			if tb := el.Value.(tomb); tb.identity == identity {
				forget = append(forget, ts.removeEl(el))
				break
			}
		}
	}
	for ts.order.Len() > MaxTombstones {
		forget = append(forget, ts.removeEl(ts.order.Front()))
	}
	return forget
}

// older removes and returns the ids of the tombstones from before t.
func (ts *tombstones) older(t time.Time) (forget []string) {
	for el := ts.order.Front(); el != nil && el.Value.(tomb).at.Before(t); el = ts.order.Front() {
		forget = append(forget, ts.removeEl(el))
	}
	return forget
}

// drain removes and returns every id.
func (ts *tombstones) drain() (forget []string) {
	for el := ts.order.Front(); el != nil; el = ts.order.Front() {
		forget = append(forget, ts.removeEl(el))
	}
	return forget
}

func (ts *tombstones) removeEl(el *list.Element) string {
	tb := ts.order.Remove(el).(tomb)
	if ts.byIdentity[tb.identity]--; ts.byIdentity[tb.identity] <= 0 {
		delete(ts.byIdentity, tb.identity)
	}
	return tb.id
}
