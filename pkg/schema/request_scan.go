package schema

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// This file holds the byte-level JSON scanner shared by the request rewriter, the turn reader and
// the follow-up builder. reqScan reads a whole body in one pass and remembers where the
// top-level members are: reqScanTop validates every byte (the turn reader, the follow-up
// builder), reqScanRequest only what the rewriter reads (see reqScan). The other helpers walk
// values that have already been checked.

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

// reqTopObject scans b, which must hold a JSON object, and indexes its top-level members; its
// errors start with what.
func reqTopObject(b []byte, what string) (reqTopLevel, error) {
	members, isObject, err := reqScanTop(b)
	if err != nil {
		return reqTopLevel{}, fmt.Errorf("%s: %w", what, err)
	}
	if !isObject {
		return reqTopLevel{}, fmt.Errorf("%s: the body is not a JSON object", what)
	}
	return reqNewTopLevel(b, members), nil
}

// reqCloseAt returns the index of the last byte of b that is not white space: the closing
// brace or bracket of the JSON value b holds.
func reqCloseAt(b []byte) int {
	i := len(b) - 1
	for i > 0 && reqIsWS(b[i]) {
		i--
	}
	return i
}

// reqScanMode says how closely reqScan checks a body.
type reqScanMode uint8

const (
	// reqScanStrict checks every byte: reqScan accepts exactly what json.Valid accepts.
	reqScanStrict reqScanMode = iota
	// reqScanRequest checks a request body as closely as RewriteRequest needs (see
	// reqScanStrictKeys): the values it reads or edits are checked byte by byte; in the other
	// values (the conversation above all) strings are only followed to their closing quote.
	reqScanRequest
	// reqScanRequestItems is reqScanRequest that also reports the elements of the top-level
	// "input" array that may be code_interpreter_call items, each checked byte by byte.
	reqScanRequestItems
)

// reqScanned is what reqScan learned of a body.
type reqScanned struct {
	// members holds the top-level members in order when the body is an object.
	members []reqMember
	// isObject reports whether the body is a JSON object.
	isObject bool
	// items holds, under reqScanRequestItems, the elements of the top-level "input" array that
	// may be code_interpreter_call items, in order: the objects with a member whose key decodes
	// to "type" and whose value is a string that decodes to "code_interpreter_call". (When
	// "type" repeats, the last one decides what the item is; such an object is reported if any
	// of them qualifies.) Each was checked byte by byte.
	items []reqItem
}

// reqItem is an element of an array: its index and its span in the body.
type reqItem struct{ idx, start, end int }

// reqScanTop validates b as one JSON value (RFC 8259, nesting at most reqMaxDepth, surrounding
// whitespace allowed) in a single pass, accepting exactly what json.Valid accepts. When the
// value is an object it also returns the object's members in order. Like encoding/json it does
// not check that strings are valid UTF-8.
func reqScanTop(b []byte) (members []reqMember, isObject bool, err error) {
	sc, err := reqScan(b, reqScanStrict, nil)
	return sc.members, sc.isObject, err
}

// reqScanStrictKeys reports whether key names a top-level member of a request whose value
// RewriteRequest reads or edits, so that reqScanRequest checks it byte by byte.
func reqScanStrictKeys(key string) bool {
	switch key {
	case "tools", "tool_choice", "stream", "stream_options", "metadata":
		return true
	}
	return false
}

// reqScan reads b as one JSON value (nesting at most reqMaxDepth, surrounding whitespace
// allowed) in a single pass, checking it as mode says, and returns what it learned. The
// top-level members go into members[:0], so a caller can lend reqScan room on its stack; nil
// is fine.
//
// Under reqScanStrict it accepts exactly what json.Valid accepts. Under reqScanRequest and
// reqScanRequestItems the structure is checked everywhere (brackets and braces balanced and
// matched, commas and colons in place, keys are strings, literals and numbers well formed,
// nothing after the value) and so are the top-level keys, the values reqScanStrictKeys names and
// the reported items; inside every other string only the end is looked for: the first quote
// preceded by an even number of backslashes. Raw control characters and malformed escapes in
// those strings are therefore not rejected. On valid JSON every mode sees the same structure a
// JSON parser sees.
func reqScan(b []byte, mode reqScanMode, members []reqMember) (reqScanned, error) {
	var stackBuf [64]byte
	stack := stackBuf[:0] // open containers: '{' or '['
	sc := reqScanned{members: members[:0]}
	i := reqSkipWS(b, 0)
	if i >= len(b) {
		return reqScanned{}, &reqSyntaxError{off: i, msg: "unexpected end of input"}
	}
	if sc.isObject = b[i] == '{'; sc.isObject && sc.members == nil {
		sc.members = make([]reqMember, 0, 16)
	}
	var (
		strict  = mode == reqScanStrict // the strings of the value being read are checked byte by byte
		pending bool                    // a top-level member's value is being read
		track   bool                    // the value being read is the "input" array whose items are reported
		item    = reqItem{idx: -1}      // the element of the tracked array being read
		maybe   bool                    // the element may be a code_interpreter_call item
		err     error
	)
	expectKey, expectValue := false, true
	for {
		if expectKey {
			// An object member: its key, the colon and the whitespace after it.
			if i >= len(b) || b[i] != '"' {
				return reqScanned{}, &reqSyntaxError{off: i, msg: "expected a string key"}
			}
			ks := i
			top := sc.isObject && len(stack) == 1
			if strict || top {
				i, err = reqScanString(b, i)
			} else {
				i, err = reqSkipString(b, i)
			}
			if err != nil {
				return reqScanned{}, err
			}
			ke := i
			i = reqSkipWS(b, i)
			if i >= len(b) || b[i] != ':' {
				return reqScanned{}, &reqSyntaxError{off: i, msg: "expected ':' after an object key"}
			}
			i = reqSkipWS(b, i+1)
			switch {
			case top:
				sc.members = append(sc.members, reqMember{keyStart: ks, keyEnd: ke, valStart: i})
				pending = true
				if mode != reqScanStrict {
					var input bool
					strict, input = reqScanTopKey(b[ks:ke])
					track = input && mode == reqScanRequestItems && i < len(b) && b[i] == '['
					item.idx = -1
				}
			case track && len(stack) == 3 && !maybe:
				maybe = reqMayBeCallType(b, ks, ke, i)
			}
			expectKey = false
		}
		if expectValue {
			if i >= len(b) {
				return reqScanned{}, &reqSyntaxError{off: i, msg: "unexpected end of input"}
			}
			if track && len(stack) == 2 {
				item = reqItem{idx: item.idx + 1, start: i}
				maybe = false
			}
			switch c := b[i]; {
			case c == '"':
				if strict {
					i, err = reqScanString(b, i)
				} else {
					i, err = reqSkipString(b, i)
				}
			case c == '{' || c == '[':
				if len(stack) >= reqMaxDepth {
					return reqScanned{}, &reqSyntaxError{off: i, msg: "nesting too deep"}
				}
				stack = append(stack, c)
				i = reqSkipWS(b, i+1)
				if i < len(b) && b[i] == c+2 { // '}' is '{'+2 and ']' is '['+2
					stack = stack[:len(stack)-1]
					i++
					break
				}
				expectKey = c == '{'
				continue
			case c == 't':
				i, err = reqScanLiteral(b, i, "true")
			case c == 'f':
				i, err = reqScanLiteral(b, i, "false")
			case c == 'n':
				i, err = reqScanLiteral(b, i, "null")
			case c == '-' || (c >= '0' && c <= '9'):
				i, err = reqScanNumber(b, i)
			default:
				err = &reqSyntaxError{off: i, msg: fmt.Sprintf("invalid character %q looking for a value", c)}
			}
			if err != nil {
				return reqScanned{}, err
			}
		}
		// A value ended at i.
		expectValue = false
		switch len(stack) {
		case 1:
			if pending {
				sc.members[len(sc.members)-1].valEnd = i
				pending, track, strict = false, false, mode == reqScanStrict
			}
		case 2:
			if track && maybe {
				item.end = i
				if err := reqScanItem(b, item); err != nil {
					return reqScanned{}, err
				}
				sc.items = append(sc.items, item)
				maybe = false
			}
		}
		i = reqSkipWS(b, i)
		if len(stack) == 0 {
			if i != len(b) {
				return reqScanned{}, &reqSyntaxError{off: i, msg: "invalid data after the top-level value"}
			}
			return sc, nil
		}
		if i >= len(b) {
			return reqScanned{}, &reqSyntaxError{off: i, msg: "unexpected end of input"}
		}
		switch top := stack[len(stack)-1]; b[i] {
		case ',':
			i = reqSkipWS(b, i+1)
			expectKey, expectValue = top == '{', true
		case top + 2:
			stack = stack[:len(stack)-1]
			i++
		default:
			return reqScanned{}, &reqSyntaxError{off: i, msg: fmt.Sprintf("invalid character %q after a value", b[i])}
		}
	}
}

// reqScanTopKey reports, for the top-level key raw of a request (a valid JSON string with its
// quotes), whether reqScanStrictKeys names it and whether it is "input".
func reqScanTopKey(raw []byte) (strict, input bool) {
	inner := raw[1 : len(raw)-1]
	if bytes.IndexByte(inner, '\\') < 0 {
		key := string(inner) // not kept, so the conversion costs no allocation
		return reqScanStrictKeys(key), key == "input"
	}
	key, _ := reqDecodeString(raw)
	return reqScanStrictKeys(key), key == "input"
}

// reqMayBeCallType reports whether the member whose key spans b[ks:ke] and whose value starts at
// b[vs] makes its object a possible code_interpreter_call item: the key decodes to "type" and
// the value is a string that decodes to "code_interpreter_call". Neither has been checked byte
// by byte; a malformed escape makes it false, and the scan does not report it (the item is not
// read).
func reqMayBeCallType(b []byte, ks, ke, vs int) bool {
	if !reqRawIs(b[ks:ke], "type") || vs >= len(b) || b[vs] != '"' {
		return false
	}
	ve, err := reqSkipString(b, vs)
	return err == nil && reqRawIs(b[vs:ve], "code_interpreter_call")
}

// reqRawIs reports whether raw, a string with its quotes that ends at its first unescaped quote,
// decodes to want, which must consist of ASCII letters, digits and underscores. It costs no
// allocation unless raw has an escape and a length that can spell want: each escape of such a
// character is six bytes (\u0074), so raw holds either want itself or 5 to 5*len(want) more
// bytes.
func reqRawIs(raw []byte, want string) bool {
	n := len(raw) - 2
	switch {
	case n == len(want):
		return string(raw[1:len(raw)-1]) == want
	case n < len(want)+5 || n > 6*len(want) || bytes.IndexByte(raw, '\\') < 0:
		return false
	}
	got, ok := reqDecodeString(raw)
	return ok && got == want
}

// reqScanItem checks the array element it spans byte by byte, as reqScanTop does.
func reqScanItem(b []byte, it reqItem) error {
	_, err := reqScan(b[it.start:it.end], reqScanStrict, nil)
	var se *reqSyntaxError
	if errors.As(err, &se) {
		se.off += it.start
	}
	return err
}

// reqSkipString returns the offset past the string whose opening quote is at b[i], looking only
// for its end: the first quote preceded by an even number of backslashes. What lies between the
// quotes is not checked; in a valid string, that quote is the one a JSON parser ends it at.
func reqSkipString(b []byte, i int) (int, error) {
	if j := reqStringEndAt(b, i); j >= 0 {
		return j, nil
	}
	return 0, &reqSyntaxError{off: len(b), msg: "unterminated string"}
}

// reqStringEndAt returns the offset past the first quote after b[i] that an even number of
// backslashes precedes (counting back no further than b[i+1]), or -1 when there is none.
func reqStringEndAt(b []byte, i int) int {
	j := i + 1
	for {
		// Most keys, short values and runs between escaped quotes end within 16 bytes: look at
		// two words in registers before paying for a call that searches the rest.
		if k := reqQuoteIn16(b, j); k >= 0 {
			j = k
		} else if k := bytes.IndexByte(b[j:], '"'); k >= 0 {
			j += k
		} else {
			return -1
		}
		if b[j-1] != '\\' {
			return j + 1
		}
		n := 1
		for p := j - 2; p > i && b[p] == '\\'; p-- {
			n++
		}
		if n%2 == 0 {
			return j + 1
		}
		j++
	}
}

// reqQuoteIn16 returns the offset of the first quote in b[j:j+16], or -1 when there is none or
// fewer than 16 bytes are left.
func reqQuoteIn16(b []byte, j int) int {
	if j+16 > len(b) {
		return -1
	}
	if m := reqQuoteMask(binary.LittleEndian.Uint64(b[j:])); m != 0 {
		return j + bits.TrailingZeros64(m)/8
	}
	if m := reqQuoteMask(binary.LittleEndian.Uint64(b[j+8:])); m != 0 {
		return j + 8 + bits.TrailingZeros64(m)/8
	}
	return -1
}

// reqQuoteMask returns a word whose lowest set bit is the high bit of the first quote byte of w
// (in little-endian order), or 0 when w has no quote. Bits above the first quote may be set
// wrongly: the "has a zero byte" trick is exact only up to the first zero byte.
func reqQuoteMask(w uint64) uint64 {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	x := w ^ (ones * '"')
	return (x - ones) & ^x & highs
}

// reqScanString validates the string starting at b[i] (a quote) and returns the offset past it.
func reqScanString(b []byte, i int) (int, error) {
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
	if j := reqStringEndAt(b, i); j >= 0 {
		return j
	}
	return len(b)
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

// reqRawEqual reports whether x and y, valid JSON strings with their quotes, decode to the same
// text; it allocates nothing when neither has an escape.
func reqRawEqual(x, y []byte) bool {
	if bytes.IndexByte(x, '\\') < 0 && bytes.IndexByte(y, '\\') < 0 && utf8.Valid(x) && utf8.Valid(y) {
		return bytes.Equal(x, y)
	}
	xs, xok := reqDecodeString(x)
	ys, yok := reqDecodeString(y)
	return xok && yok && xs == ys
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

// reqEdit replaces b[start:end] with repl.
type reqEdit struct {
	start, end int
	repl       []byte
}

// reqApply returns b with the edits applied, in a new slice of exactly the right size that
// shares no memory with b or the edits. Edits must not overlap; two insertions at the same offset
// keep their order.
func reqApply(b []byte, edits []reqEdit) ([]byte, error) {
	if len(edits) == 0 {
		return bytes.Clone(b), nil
	}
	slices.SortStableFunc(edits, func(x, y reqEdit) int { return x.start - y.start })
	pieces := make([][]byte, 0, 2*len(edits)+1)
	prev := 0
	for _, e := range edits {
		if e.start < prev || e.end < e.start || e.end > len(b) {
			return nil, fmt.Errorf("apply edits: overlapping edit at offset %d", e.start)
		}
		pieces = append(pieces, b[prev:e.start], e.repl)
		prev = e.end
	}
	pieces = append(pieces, b[prev:])
	// bytes.Join makes one allocation of the exact size and, unlike make, does not zero it
	// before the pieces overwrite it: on megabyte bodies that is a pass over memory saved.
	return bytes.Join(pieces, nil), nil
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
	repl = appendJSONString(repl, key)
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
