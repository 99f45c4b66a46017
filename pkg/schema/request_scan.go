package schema

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// This file holds the byte-level JSON scanner shared by the request rewriter, the turn reader and
// the follow-up builder. reqScanTop validates a whole body in one pass and remembers where the
// top-level members are; the other helpers walk values that are already known to be valid.

// reqMaxDepth bounds nesting as encoding/json does, so a hostile body cannot make scanning deep.
const reqMaxDepth = 10000

// reqMember is one member of a JSON object: where its key and its value lie.
type reqMember struct {
	keyStart int // offset of the key's opening quote
	keyEnd   int // offset just past the key's closing quote
	valStart int // offset of the value's first byte
	valEnd   int // offset just past the value
}

// is reports whether the member's key, in b, decodes to key.
func (m reqMember) is(b []byte, key string) bool {
	return reqStringIs(b[m.keyStart:m.keyEnd], key)
}

// reqSyntaxError is a JSON syntax error at a byte offset.
type reqSyntaxError struct {
	off int
	msg string
}

func (e *reqSyntaxError) Error() string {
	return fmt.Sprintf("%s at offset %d", e.msg, e.off)
}

// reqIsWS reports whether c is JSON whitespace.
func reqIsWS(c byte) bool {
	return c == ' ' || c == '\n' || c == '\r' || c == '\t'
}

// reqSkipWS returns the offset of the first non-whitespace byte at or after i.
func reqSkipWS(b []byte, i int) int {
	for i < len(b) && reqIsWS(b[i]) {
		i++
	}
	return i
}

// reqScanTop validates b as one JSON value (RFC 8259, nesting at most reqMaxDepth, surrounding
// whitespace allowed) in a single pass. When the value is an object it also returns the object's
// members in order. Like encoding/json it does not check that strings are valid UTF-8.
func reqScanTop(b []byte) (members []reqMember, isObject bool, err error) {
	members, isObject, _, err = reqScanTopEscapes(b)
	return members, isObject, err
}

// reqScanTopEscapes is reqScanTop that also reports whether a string or key of b holds a \u
// escape of a character from 'P' to DEL (\u0050 to \u007f), the range of the lowercase letters
// and the underscore that spell the API's type names: only then can such a name hide behind
// escapes.
func reqScanTopEscapes(b []byte) (members []reqMember, isObject, asciiEscape bool, err error) {
	var stack []byte // open containers: '{' or '['
	i := reqSkipWS(b, 0)
	if i >= len(b) {
		return nil, false, false, &reqSyntaxError{off: i, msg: "unexpected end of input"}
	}
	isObject = b[i] == '{'
	pending := false // a top-level member's value is being read
	expectValue := true
	for {
		if expectValue {
			if i >= len(b) {
				return nil, false, false, &reqSyntaxError{off: i, msg: "unexpected end of input"}
			}
			switch c := b[i]; {
			case c == '{' || c == '[':
				if len(stack) >= reqMaxDepth {
					return nil, false, false, &reqSyntaxError{off: i, msg: "nesting too deep"}
				}
				stack = append(stack, c)
				i = reqSkipWS(b, i+1)
				if i < len(b) && b[i] == c+2 { // '}' is '{'+2 and ']' is '['+2
					stack = stack[:len(stack)-1]
					i++
					break
				}
				if c == '[' {
					continue
				}
				top := isObject && len(stack) == 1
				if i, err = reqScanKey(b, i, &members, top, &asciiEscape); err != nil {
					return nil, false, false, err
				}
				pending = pending || top
				continue
			case c == '"':
				if i, err = reqScanString(b, i, &asciiEscape); err != nil {
					return nil, false, false, err
				}
			case c == 't':
				if i, err = reqScanLiteral(b, i, "true"); err != nil {
					return nil, false, false, err
				}
			case c == 'f':
				if i, err = reqScanLiteral(b, i, "false"); err != nil {
					return nil, false, false, err
				}
			case c == 'n':
				if i, err = reqScanLiteral(b, i, "null"); err != nil {
					return nil, false, false, err
				}
			case c == '-' || (c >= '0' && c <= '9'):
				if i, err = reqScanNumber(b, i); err != nil {
					return nil, false, false, err
				}
			default:
				return nil, false, false, &reqSyntaxError{off: i, msg: fmt.Sprintf("invalid character %q looking for a value", c)}
			}
		}
		// A value ended at i.
		expectValue = false
		if pending && len(stack) == 1 {
			members[len(members)-1].valEnd = i
			pending = false
		}
		i = reqSkipWS(b, i)
		if len(stack) == 0 {
			if i != len(b) {
				return nil, false, false, &reqSyntaxError{off: i, msg: "invalid data after the top-level value"}
			}
			return members, isObject, asciiEscape, nil
		}
		if i >= len(b) {
			return nil, false, false, &reqSyntaxError{off: i, msg: "unexpected end of input"}
		}
		top := stack[len(stack)-1]
		switch b[i] {
		case ',':
			i = reqSkipWS(b, i+1)
			expectValue = true
			if top == '{' {
				top := isObject && len(stack) == 1
				if i, err = reqScanKey(b, i, &members, top, &asciiEscape); err != nil {
					return nil, false, false, err
				}
				pending = pending || top
			}
		case top + 2:
			stack = stack[:len(stack)-1]
			i++
		default:
			return nil, false, false, &reqSyntaxError{off: i, msg: fmt.Sprintf("invalid character %q after a value", b[i])}
		}
	}
}

// reqScanKey reads an object key, the colon and the whitespace after it, starting at the key's
// opening quote, and returns the offset of the member's value. When record is set the member is
// appended to members.
func reqScanKey(b []byte, i int, members *[]reqMember, record bool, asciiEscape *bool) (int, error) {
	if i >= len(b) || b[i] != '"' {
		return 0, &reqSyntaxError{off: i, msg: "expected a string key"}
	}
	start := i
	i, err := reqScanString(b, i, asciiEscape)
	if err != nil {
		return 0, err
	}
	end := i
	i = reqSkipWS(b, i)
	if i >= len(b) || b[i] != ':' {
		return 0, &reqSyntaxError{off: i, msg: "expected ':' after an object key"}
	}
	i = reqSkipWS(b, i+1)
	if record {
		*members = append(*members, reqMember{keyStart: start, keyEnd: end, valStart: i})
	}
	return i, nil
}

// reqScanString validates the string starting at b[i] (a quote) and returns the offset past it.
// It sets *asciiEscape when the string holds an escape from \u0050 to \u007f.
func reqScanString(b []byte, i int, asciiEscape *bool) (int, error) {
	j := i + 1
	for {
		// Bytes from 0x20 up other than the quote and the backslash need no further look; skip
		// them eight at a time while a whole word holds none of the others.
		for j+8 <= len(b) && !reqWordSpecial(binary.LittleEndian.Uint64(b[j:])) {
			j += 8
		}
		for j < len(b) && b[j] >= 0x20 && b[j] != '"' && b[j] != '\\' {
			j++
		}
		if j >= len(b) {
			return 0, &reqSyntaxError{off: j, msg: "unterminated string"}
		}
		switch c := b[j]; c {
		case '"':
			return j + 1, nil
		case '\\':
			if j+1 >= len(b) {
				return 0, &reqSyntaxError{off: j, msg: "unterminated string"}
			}
			switch b[j+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				j += 2
			case 'u':
				if j+6 > len(b) {
					return 0, &reqSyntaxError{off: j, msg: "unterminated string"}
				}
				for _, h := range b[j+2 : j+6] {
					if !(h >= '0' && h <= '9' || h >= 'a' && h <= 'f' || h >= 'A' && h <= 'F') {
						return 0, &reqSyntaxError{off: j, msg: "invalid \\u escape in string"}
					}
				}
				if b[j+2] == '0' && b[j+3] == '0' && b[j+4] >= '5' && b[j+4] <= '7' {
					*asciiEscape = true
				}
				j += 6
			default:
				return 0, &reqSyntaxError{off: j, msg: "invalid escape in string"}
			}
		default:
			return 0, &reqSyntaxError{off: j, msg: fmt.Sprintf("invalid control character %q in string", c)}
		}
	}
}

// reqWordSpecial reports whether any byte of w is a control character (below 0x20), a quote or a
// backslash: the bytes a string scan must stop at. It uses the classic "has a zero byte" bit
// tricks, which have no false negatives.
func reqWordSpecial(w uint64) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	hasZero := func(v uint64) uint64 { return (v - ones) & ^v & highs }
	return (w-ones*0x20)&^w&highs|hasZero(w^(ones*'"'))|hasZero(w^(ones*'\\')) != 0
}

// reqScanLiteral checks that lit (true, false or null) starts at b[i].
func reqScanLiteral(b []byte, i int, lit string) (int, error) {
	if !bytes.HasPrefix(b[i:], []byte(lit)) {
		return 0, &reqSyntaxError{off: i, msg: "invalid literal"}
	}
	return i + len(lit), nil
}

// reqScanNumber validates the number starting at b[i].
func reqScanNumber(b []byte, i int) (int, error) {
	start := i
	if b[i] == '-' {
		i++
	}
	digits := func() bool {
		s := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		return i > s
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case !digits():
		return 0, &reqSyntaxError{off: start, msg: "invalid number"}
	}
	if i < len(b) && b[i] == '.' {
		i++
		if !digits() {
			return 0, &reqSyntaxError{off: start, msg: "invalid number"}
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if !digits() {
			return 0, &reqSyntaxError{off: start, msg: "invalid number"}
		}
	}
	return i, nil
}

// The helpers below walk JSON that reqScanTop has already validated; they do not check syntax.

// reqStringEnd returns the offset past the string whose opening quote is at b[i].
func reqStringEnd(b []byte, i int) int {
	j := i + 1
	for {
		k := bytes.IndexByte(b[j:], '"')
		if k < 0 {
			return len(b)
		}
		j += k
		// The quote is escaped when an odd number of backslashes precedes it.
		n := 0
		for p := j - 1; p > i && b[p] == '\\'; p-- {
			n++
		}
		if n%2 == 0 {
			return j + 1
		}
		j++
	}
}

// reqValueEnd returns the offset past the value starting at b[i].
func reqValueEnd(b []byte, i int) int {
	switch b[i] {
	case '"':
		return reqStringEnd(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				j = reqStringEnd(b, j) - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
		}
		return len(b)
	default:
		j := i
		for j < len(b) && !reqIsWS(b[j]) && b[j] != ',' && b[j] != '}' && b[j] != ']' {
			j++
		}
		return j
	}
}

// reqEachMember calls fn for each member of the object starting at b[i], in order, with the raw
// key (quotes included) and the value's span; it stops when fn returns false.
func reqEachMember(b []byte, i int, fn func(rawKey []byte, valStart, valEnd int) bool) {
	i = reqSkipWS(b, i+1)
	for i < len(b) && b[i] == '"' {
		ke := reqStringEnd(b, i)
		vs := reqSkipWS(b, reqSkipWS(b, ke)+1)
		ve := reqValueEnd(b, vs)
		if !fn(b[i:ke], vs, ve) {
			return
		}
		i = reqSkipWS(b, ve)
		if i >= len(b) || b[i] != ',' {
			return
		}
		i = reqSkipWS(b, i+1)
	}
}

// reqEachElem calls fn for each element of the array starting at b[i] with its index and span; it
// stops when fn returns false.
func reqEachElem(b []byte, i int, fn func(idx, start, end int) bool) {
	i = reqSkipWS(b, i+1)
	for idx := 0; i < len(b) && b[i] != ']'; idx++ {
		end := reqValueEnd(b, i)
		if !fn(idx, i, end) {
			return
		}
		i = reqSkipWS(b, end)
		if i >= len(b) || b[i] != ',' {
			return
		}
		i = reqSkipWS(b, i+1)
	}
}

// reqSpan is a value's position in a body; a zero span (end 0) means absent.
type reqSpan struct{ start, end int }

func (s reqSpan) ok() bool { return s.end > 0 }

// reqField returns the span of the member named key of the object starting at b[i], or a zero
// span when b[i] is not an object or has no such member. When the key repeats, the last member
// counts, as in the JSON decoders of Python, JavaScript and Go that upstreams use.
func reqField(b []byte, i int, key string) reqSpan {
	var sp reqSpan
	if i >= len(b) || b[i] != '{' {
		return sp
	}
	reqEachMember(b, i, func(rawKey []byte, vs, ve int) bool {
		if reqStringIs(rawKey, key) {
			sp = reqSpan{vs, ve}
		}
		return true
	})
	return sp
}

// reqPath follows keys through nested objects from the value starting at b[i].
func reqPath(b []byte, i int, keys ...string) reqSpan {
	sp := reqSpan{i, i + 1}
	for _, k := range keys {
		if sp = reqField(b, sp.start, k); !sp.ok() {
			return sp
		}
	}
	return sp
}

// reqFieldIs reports whether the object starting at b[i] has a member key (the last one when it
// repeats) whose value is the string want; it allocates nothing for plain strings.
func reqFieldIs(b []byte, i int, key, want string) bool {
	sp := reqField(b, i, key)
	return sp.ok() && reqStringIs(b[sp.start:sp.end], want)
}

// reqStr returns the decoded string at span sp and whether sp holds a string.
func reqStr(b []byte, sp reqSpan) (string, bool) {
	if !sp.ok() || b[sp.start] != '"' {
		return "", false
	}
	return reqDecodeString(b[sp.start:sp.end])
}

// reqStringIs reports whether raw, a JSON string with its quotes, decodes to want.
func reqStringIs(raw []byte, want string) bool {
	if len(raw) < 2 || raw[0] != '"' {
		return false
	}
	inner := raw[1 : len(raw)-1]
	if bytes.IndexByte(inner, '\\') < 0 && utf8.Valid(inner) {
		return string(inner) == want
	}
	s, ok := reqDecodeString(raw)
	return ok && s == want
}

// reqDecodeString decodes raw, a valid JSON string with its quotes, as encoding/json does:
// invalid UTF-8 and unpaired surrogate escapes become U+FFFD.
func reqDecodeString(raw []byte) (string, bool) {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return "", false
	}
	inner := raw[1 : len(raw)-1]
	if bytes.IndexByte(inner, '\\') < 0 && utf8.Valid(inner) {
		return string(inner), true
	}
	out := make([]byte, 0, len(inner))
	for i := 0; i < len(inner); {
		c := inner[i]
		switch {
		case c == '\\':
			if i+1 >= len(inner) {
				return "", false
			}
			switch e := inner[i+1]; e {
			case '"', '\\', '/':
				out = append(out, e)
			case 'b':
				out = append(out, '\b')
			case 'f':
				out = append(out, '\f')
			case 'n':
				out = append(out, '\n')
			case 'r':
				out = append(out, '\r')
			case 't':
				out = append(out, '\t')
			case 'u':
				r, ok := reqHex4(inner, i+2)
				if !ok {
					return "", false
				}
				i += 6
				if utf16.IsSurrogate(r) {
					// A high surrogate pairs with the escape after it, as in encoding/json.
					pair := unicode.ReplacementChar
					if i+1 < len(inner) && inner[i] == '\\' && inner[i+1] == 'u' {
						if r2, ok := reqHex4(inner, i+2); ok {
							if pair = utf16.DecodeRune(r, r2); pair != unicode.ReplacementChar {
								i += 6
							}
						}
					}
					r = pair
				}
				out = utf8.AppendRune(out, r)
				continue
			default:
				return "", false
			}
			i += 2
		case c < utf8.RuneSelf:
			out = append(out, c)
			i++
		default:
			r, size := utf8.DecodeRune(inner[i:])
			out = utf8.AppendRune(out, r) // an invalid byte decodes to U+FFFD with size 1
			i += size
		}
	}
	return string(out), true
}

// reqHex4 reads the four hex digits at b[i:i+4].
func reqHex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, h := range b[i : i+4] {
		switch {
		case h >= '0' && h <= '9':
			h -= '0'
		case h >= 'a' && h <= 'f':
			h = h - 'a' + 10
		case h >= 'A' && h <= 'F':
			h = h - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(h)
	}
	return r, true
}

// reqAppendString appends s to dst as a JSON string. Like encoding/json it replaces invalid UTF-8
// with U+FFFD; unlike it, it leaves <, > and & as they are.
func reqAppendString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i++
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// reqEdit replaces b[start:end] with repl.
type reqEdit struct {
	start, end int
	repl       []byte
}

// reqApply returns b with the edits applied. Edits must not overlap; two insertions at the same
// offset keep their order.
func reqApply(b []byte, edits []reqEdit) ([]byte, error) {
	slices.SortStableFunc(edits, func(x, y reqEdit) int { return x.start - y.start })
	n := len(b)
	prev := 0
	for _, e := range edits {
		if e.start < prev || e.end < e.start || e.end > len(b) {
			return nil, fmt.Errorf("apply edits: overlapping edit at offset %d", e.start)
		}
		prev = e.end
		n += len(e.repl) - (e.end - e.start)
	}
	out := make([]byte, 0, n)
	at := 0
	for _, e := range edits {
		out = append(out, b[at:e.start]...)
		out = append(out, e.repl...)
		at = e.end
	}
	return append(out, b[at:]...), nil
}

// reqRemoveMember returns the edit that deletes members[k] from its object together with one
// separating comma, leaving the other members' bytes as they were.
func reqRemoveMember(members []reqMember, k int) reqEdit {
	switch {
	case k+1 < len(members):
		return reqEdit{start: members[k].keyStart, end: members[k+1].keyStart}
	case k > 0:
		return reqEdit{start: members[k-1].valEnd, end: members[k].valEnd}
	default:
		return reqEdit{start: members[k].keyStart, end: members[k].valEnd}
	}
}

// reqAppendMember returns the edit that adds the member "key":value at the end of the object
// whose closing brace is at b[closeAt].
func reqAppendMember(b []byte, closeAt int, key string, value []byte) reqEdit {
	p := closeAt - 1
	for p >= 0 && reqIsWS(b[p]) {
		p--
	}
	var repl []byte
	if p >= 0 && b[p] != '{' {
		repl = append(repl, ',')
	}
	repl = reqAppendString(repl, key)
	repl = append(repl, ':')
	repl = append(repl, value...)
	return reqEdit{start: p + 1, end: p + 1, repl: repl}
}

// reqAppendElems returns the edit that appends elems (comma-separated JSON values, no leading
// comma) at the end of the array whose closing bracket is at b[closeAt].
func reqAppendElems(b []byte, closeAt int, elems []byte) reqEdit {
	p := closeAt - 1
	for p >= 0 && reqIsWS(b[p]) {
		p--
	}
	var repl []byte
	if p >= 0 && b[p] != '[' && len(elems) > 0 {
		repl = append(repl, ',')
	}
	repl = append(repl, elems...)
	return reqEdit{start: p + 1, end: p + 1, repl: repl}
}

// reqTopKeys are the top-level keys the rewriter, the turn reader and the follow-up builder look
// up; reqNewTopLevel indexes them in one pass so that lookups stay cheap on bodies with very many
// members.
const reqTopKeyCount = 12

func reqTopKeys() [reqTopKeyCount]string {
	return [reqTopKeyCount]string{
		"tools", "tool_choice", "stream", "stream_options", "metadata", "input",
		"messages", "output", "choices", "store", "conversation", "code",
	}
}

// reqTopLevel indexes the top-level members of an object by key.
type reqTopLevel struct {
	b       []byte
	members []reqMember
	keys    [reqTopKeyCount]string
	last    [reqTopKeyCount]int // index of the last member with the key, or -1
	n       [reqTopKeyCount]int // number of members with the key
}

// reqNewTopLevel indexes members, the top-level members of the object in b.
func reqNewTopLevel(b []byte, members []reqMember) reqTopLevel {
	t := reqTopLevel{b: b, members: members, keys: reqTopKeys()}
	for j := range t.last {
		t.last[j] = -1
	}
	for k, m := range members {
		raw := b[m.keyStart:m.keyEnd]
		inner := raw[1 : len(raw)-1]
		plain := bytes.IndexByte(inner, '\\') < 0
		if plain && len(inner) > len("stream_options") {
			continue // longer than every indexed key
		}
		key := string(inner) // short and not kept, so the compiler converts it on the stack
		if !plain {
			key, _ = reqDecodeString(raw)
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
func (t reqTopLevel) slot(key string) int {
	for j, k := range t.keys {
		if k == key {
			return j
		}
	}
	return -1
}

// find returns the index of the member named key, or -1; when the key repeats, the last member
// counts (see reqField).
func (t reqTopLevel) find(key string) int {
	if j := t.slot(key); j >= 0 {
		return t.last[j]
	}
	for k := len(t.members) - 1; k >= 0; k-- {
		if t.members[k].is(t.b, key) {
			return k
		}
	}
	return -1
}

// count returns how many members are named key.
func (t reqTopLevel) count(key string) int {
	if j := t.slot(key); j >= 0 {
		return t.n[j]
	}
	n := 0
	for _, m := range t.members {
		if m.is(t.b, key) {
			n++
		}
	}
	return n
}

// span returns the value span of the member named key (the last when it repeats), or a zero
// span.
func (t reqTopLevel) span(key string) reqSpan {
	if k := t.find(key); k >= 0 {
		return reqSpan{t.members[k].valStart, t.members[k].valEnd}
	}
	return reqSpan{}
}
