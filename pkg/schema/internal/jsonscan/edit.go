package jsonscan

import (
	"bytes"
	"fmt"
	"slices"
)

// Edit replaces b[start:end] with repl.
type Edit struct {
	Start, End int
	Repl       []byte
}

// Apply returns b with the edits applied, in a new slice of exactly the right size that
// shares no memory with b or the edits. Edits must not overlap; two insertions at the same offset
// keep their order.
func Apply(b []byte, edits []Edit) ([]byte, error) {
	if len(edits) == 0 {
		return bytes.Clone(b), nil
	}
	slices.SortStableFunc(edits, func(x, y Edit) int { return x.Start - y.Start })
	pieces := make([][]byte, 0, 2*len(edits)+1)
	prev := 0
	for _, e := range edits {
		if e.Start < prev || e.End < e.Start || e.End > len(b) {
			return nil, fmt.Errorf("apply edits: overlapping edit at offset %d", e.Start)
		}
		pieces = append(pieces, b[prev:e.Start], e.Repl)
		prev = e.End
	}
	pieces = append(pieces, b[prev:])
	// bytes.Join makes one allocation of the exact size and, unlike make, does not zero it
	// before the pieces overwrite it: on megabyte bodies that is a pass over memory saved.
	return bytes.Join(pieces, nil), nil
}

// RemoveMember returns the edit that deletes members[k] from its object together with one
// separating comma, leaving the other members' bytes as they were.
func RemoveMember(members []Member, k int) Edit {
	switch {
	case k+1 < len(members):
		return Edit{Start: members[k].KeyStart, End: members[k+1].KeyStart}
	case k > 0:
		return Edit{Start: members[k-1].ValEnd, End: members[k].ValEnd}
	default:
		return Edit{Start: members[k].KeyStart, End: members[k].ValEnd}
	}
}

// AppendMember returns the edit that adds the member "key":value at the end of the object
// whose closing brace is at b[closeAt].
func AppendMember(b []byte, closeAt int, key string, value []byte) Edit {
	p := closeAt - 1
	for p >= 0 && IsWS(b[p]) {
		p--
	}
	var repl []byte
	if p >= 0 && b[p] != '{' {
		repl = append(repl, ',')
	}
	repl = AppendString(repl, key)
	repl = append(repl, ':')
	repl = append(repl, value...)
	return Edit{Start: p + 1, End: p + 1, Repl: repl}
}

// AppendElems returns the edit that appends elems (comma-separated JSON values, no leading
// comma) at the end of the array whose closing bracket is at b[closeAt].
func AppendElems(b []byte, closeAt int, elems []byte) Edit {
	p := closeAt - 1
	for p >= 0 && IsWS(b[p]) {
		p--
	}
	var repl []byte
	if p >= 0 && b[p] != '[' && len(elems) > 0 {
		repl = append(repl, ',')
	}
	repl = append(repl, elems...)
	return Edit{Start: p + 1, End: p + 1, Repl: repl}
}

// KeyCount is how many keys a [Keys] indexes.
const KeyCount = 13

// Keys are the top-level keys a caller looks up often; [Keys.Index] indexes them in one pass
// so that lookups stay cheap on bodies with very many members. Unused slots are "".
type Keys [KeyCount]string

// TopLevel indexes the top-level members of an object by key.
type TopLevel struct {
	B       []byte
	Members []Member
	keys    [KeyCount]string
	last    [KeyCount]int // index of the last member with the key, or -1
	n       [KeyCount]int // number of members with the key
}

// Index indexes members, the top-level members of the object in b, by the keys of k.
func (k *Keys) Index(b []byte, members []Member) TopLevel {
	t := TopLevel{B: b, Members: members, keys: *k}
	longest := 0
	for _, key := range k {
		longest = max(longest, len(key))
	}
	for j := range t.last {
		t.last[j] = -1
	}
	for k, m := range members {
		raw := b[m.KeyStart:m.KeyEnd]
		inner := raw[1 : len(raw)-1]
		plain := bytes.IndexByte(inner, '\\') < 0
		if plain && len(inner) > longest {
			continue // longer than every indexed key
		}
		key := string(inner) // short and not kept, so the compiler converts it on the stack
		if !plain {
			key, _ = DecodeString(raw)
		}
		for j, want := range t.keys {
			if key == want {
				t.last[j] = k
				t.n[j]++
				break
			}
		}
	}
	return t
}

// slot returns the index of key in t.keys, or -1.
func (t TopLevel) slot(key string) int {
	for j, k := range t.keys {
		if k == key {
			return j
		}
	}
	return -1
}

// Find returns the index of the member named key, or -1; when the key repeats, the last member
// counts (see Field).
func (t TopLevel) Find(key string) int {
	if j := t.slot(key); j >= 0 {
		return t.last[j]
	}
	for k := len(t.Members) - 1; k >= 0; k-- {
		if t.Members[k].Is(t.B, key) {
			return k
		}
	}
	return -1
}

// Count returns how many members are named key.
func (t TopLevel) Count(key string) int {
	if j := t.slot(key); j >= 0 {
		return t.n[j]
	}
	n := 0
	for _, m := range t.Members {
		if m.Is(t.B, key) {
			n++
		}
	}
	return n
}

// Span returns the value Span of the member named key (the last when it repeats), or a zero
// Span.
func (t TopLevel) Span(key string) Span {
	if k := t.Find(key); k >= 0 {
		return Span{t.Members[k].ValStart, t.Members[k].ValEnd}
	}
	return Span{}
}
