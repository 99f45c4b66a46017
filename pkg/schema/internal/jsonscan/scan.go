// Package jsonscan is a byte-level JSON scanner and editor for large bodies that are edited in
// a few places: Scan reads a whole body in one pass and remembers where the top-level members
// are, checking every byte (a nil Spec) or only what the caller reads (see Scan); the other
// helpers walk values that have already been checked, and Apply splices edits in, leaving every
// other byte as it was.
package jsonscan

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

// MaxDepth bounds nesting as encoding/json does, so a hostile body cannot make scanning deep.
const MaxDepth = 10000

// Member is one member of a JSON object: where its key and its value lie.
type Member struct {
	KeyStart int // offset of the key's opening quote
	KeyEnd   int // offset just past the key's closing quote
	ValStart int // offset of the value's first byte
	ValEnd   int // offset just past the value
}

// Is reports whether the member's key, in b, decodes to key.
func (m Member) Is(b []byte, key string) bool {
	return StringIs(b[m.KeyStart:m.KeyEnd], key)
}

// SyntaxError is a JSON syntax error at a byte offset.
type SyntaxError struct {
	off int
	msg string
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("%s at offset %d", e.msg, e.off)
}

// IsWS reports whether c is JSON whitespace.
func IsWS(c byte) bool {
	return c == ' ' || c == '\n' || c == '\r' || c == '\t'
}

// SkipWS returns the offset of the first non-whitespace byte at or after i.
func SkipWS(b []byte, i int) int {
	for i < len(b) && IsWS(b[i]) {
		i++
	}
	return i
}

// TopObject scans b, which must hold a JSON object, and indexes its top-level members; its
// errors start with what.
func (k *Keys) TopObject(b []byte, what string) (TopLevel, error) {
	members, isObject, err := ScanTop(b)
	if err != nil {
		return TopLevel{}, fmt.Errorf("%s: %w", what, err)
	}
	if !isObject {
		return TopLevel{}, fmt.Errorf("%s: the body is not a JSON object", what)
	}
	return k.Index(b, members), nil
}

// CloseAt returns the index of the last byte of b that is not white space: the closing
// brace or bracket of the JSON value b holds.
func CloseAt(b []byte) int {
	i := len(b) - 1
	for i > 0 && IsWS(b[i]) {
		i--
	}
	return i
}

// Spec says what a loose scan checks closely. A nil *Spec asks for a strict scan: every byte
// is checked, and Scan accepts exactly what json.Valid accepts.
type Spec struct {
	// Strict names the top-level members whose values are checked byte by byte; inside the
	// strings of every other value only the closing quote is looked for.
	Strict []string
	// Items, when set, names a top-level array whose elements that may be objects of type
	// ItemType are reported (see [Scanned.Items]), each checked byte by byte.
	Items, ItemType string
}

// Scanned is what Scan learned of a body.
type Scanned struct {
	// Members holds the top-level Members in order when the body is an object.
	Members []Member
	// IsObject reports whether the body is a JSON object.
	IsObject bool
	// Items holds, under LooseItems, the elements of the top-level "input" array that
	// may be code_interpreter_call Items, in order: the objects with a member whose key decodes
	// to "type" and whose value is a string that decodes to "code_interpreter_call". (When
	// "type" repeats, the last one decides what the item is; such an object is reported if any
	// of them qualifies.) Each was checked byte by byte.
	Items []Item
}

// Item is an element of an array: its index and its span in the body.
type Item struct{ Index, Start, End int }

// ScanTop validates b as one JSON value (RFC 8259, nesting at most MaxDepth, surrounding
// whitespace allowed) in a single pass, accepting exactly what json.Valid accepts. When the
// value is an object it also returns the object's members in order. Like encoding/json it does
// not check that strings are valid UTF-8.
func ScanTop(b []byte) (members []Member, isObject bool, err error) {
	sc, err := Scan(b, nil, nil)
	return sc.Members, sc.IsObject, err
}

// Scan reads b as one JSON value (nesting at most MaxDepth, surrounding whitespace
// allowed) in a single pass, checking it as spec says, and returns what it learned. The
// top-level members go into members[:0], so a caller can lend Scan room on its stack; nil
// is fine.
//
// With a nil spec it accepts exactly what json.Valid accepts. With a spec the structure is
// checked everywhere (brackets and braces balanced and
// matched, commas and colons in place, keys are strings, literals and numbers well formed,
// nothing after the value) and so are the top-level keys, the values spec.Strict names and
// the reported items; inside every other string only the end is looked for: the first quote
// preceded by an even number of backslashes. Raw control characters and malformed escapes in
// those strings are therefore not rejected. On valid JSON every spec sees the same structure a
// JSON parser sees.
func Scan(b []byte, spec *Spec, members []Member) (Scanned, error) {
	var stackBuf [64]byte
	stack := stackBuf[:0] // open containers: '{' or '['
	sc := Scanned{Members: members[:0]}
	i := SkipWS(b, 0)
	if i >= len(b) {
		return Scanned{}, &SyntaxError{off: i, msg: "unexpected end of input"}
	}
	if sc.IsObject = b[i] == '{'; sc.IsObject && sc.Members == nil {
		sc.Members = make([]Member, 0, 16)
	}
	var (
		strict  = spec == nil     // the strings of the value being read are checked byte by byte
		pending bool              // a top-level member's value is being read
		track   bool              // the value being read is the "input" array whose items are reported
		item    = Item{Index: -1} // the element of the tracked array being read
		maybe   bool              // the element may be a code_interpreter_call item
		err     error
	)
	expectKey, expectValue := false, true
	for {
		if expectKey {
			// An object member: its key, the colon and the whitespace after it.
			if i >= len(b) || b[i] != '"' {
				return Scanned{}, &SyntaxError{off: i, msg: "expected a string key"}
			}
			ks := i
			top := sc.IsObject && len(stack) == 1
			if strict || top {
				i, err = scanString(b, i)
			} else {
				i, err = SkipString(b, i)
			}
			if err != nil {
				return Scanned{}, err
			}
			ke := i
			i = SkipWS(b, i)
			if i >= len(b) || b[i] != ':' {
				return Scanned{}, &SyntaxError{off: i, msg: "expected ':' after an object key"}
			}
			i = SkipWS(b, i+1)
			switch {
			case top:
				sc.Members = append(sc.Members, Member{KeyStart: ks, KeyEnd: ke, ValStart: i})
				pending = true
				if spec != nil {
					var items bool
					strict, items = spec.topKey(b[ks:ke])
					track = items && i < len(b) && b[i] == '['
					item.Index = -1
				}
			case track && len(stack) == 3 && !maybe:
				maybe = mayBeItemType(b, ks, ke, i, spec.ItemType)
			}
			expectKey = false
		}
		if expectValue {
			if i >= len(b) {
				return Scanned{}, &SyntaxError{off: i, msg: "unexpected end of input"}
			}
			if track && len(stack) == 2 {
				item = Item{Index: item.Index + 1, Start: i}
				maybe = false
			}
			switch c := b[i]; {
			case c == '"':
				if strict {
					i, err = scanString(b, i)
				} else {
					i, err = SkipString(b, i)
				}
			case c == '{' || c == '[':
				if len(stack) >= MaxDepth {
					return Scanned{}, &SyntaxError{off: i, msg: "nesting too deep"}
				}
				stack = append(stack, c)
				i = SkipWS(b, i+1)
				if i < len(b) && b[i] == c+2 { // '}' is '{'+2 and ']' is '['+2
					stack = stack[:len(stack)-1]
					i++
					break
				}
				expectKey = c == '{'
				continue
			case c == 't':
				i, err = scanLiteral(b, i, "true")
			case c == 'f':
				i, err = scanLiteral(b, i, "false")
			case c == 'n':
				i, err = scanLiteral(b, i, "null")
			case c == '-' || (c >= '0' && c <= '9'):
				i, err = scanNumber(b, i)
			default:
				err = &SyntaxError{off: i, msg: fmt.Sprintf("invalid character %q looking for a value", c)}
			}
			if err != nil {
				return Scanned{}, err
			}
		}
		// A value ended at i.
		expectValue = false
		switch len(stack) {
		case 1:
			if pending {
				sc.Members[len(sc.Members)-1].ValEnd = i
				pending, track, strict = false, false, spec == nil
			}
		case 2:
			if track && maybe {
				item.End = i
				if err := scanItem(b, item); err != nil {
					return Scanned{}, err
				}
				sc.Items = append(sc.Items, item)
				maybe = false
			}
		}
		i = SkipWS(b, i)
		if len(stack) == 0 {
			if i != len(b) {
				return Scanned{}, &SyntaxError{off: i, msg: "invalid data after the top-level value"}
			}
			return sc, nil
		}
		if i >= len(b) {
			return Scanned{}, &SyntaxError{off: i, msg: "unexpected end of input"}
		}
		switch top := stack[len(stack)-1]; b[i] {
		case ',':
			i = SkipWS(b, i+1)
			expectKey, expectValue = top == '{', true
		case top + 2:
			stack = stack[:len(stack)-1]
			i++
		default:
			return Scanned{}, &SyntaxError{off: i, msg: fmt.Sprintf("invalid character %q after a value", b[i])}
		}
	}
}

// topKey reports, for a top-level key raw (a valid JSON string with its quotes), whether
// the Spec checks its value strictly and whether it names the Items array.
func (sp *Spec) topKey(raw []byte) (strict, items bool) {
	inner := raw[1 : len(raw)-1]
	if bytes.IndexByte(inner, '\\') < 0 {
		key := string(inner) // not kept, so the conversion costs no allocation
		return slices.Contains(sp.Strict, key), sp.Items != "" && key == sp.Items
	}
	key, _ := DecodeString(raw)
	return slices.Contains(sp.Strict, key), sp.Items != "" && key == sp.Items
}

// mayBeItemType reports whether the member whose key spans b[ks:ke] and whose value starts at
// b[vs] makes its object a possible item of itemType: the key decodes to "type" and the value
// is a string that decodes to itemType. Neither has been checked byte
// by byte; a malformed escape makes it false, and the scan does not report it (the item is not
// read).
func mayBeItemType(b []byte, ks, ke, vs int, itemType string) bool {
	if !RawIs(b[ks:ke], "type") || vs >= len(b) || b[vs] != '"' {
		return false
	}
	ve, err := SkipString(b, vs)
	return err == nil && RawIs(b[vs:ve], itemType)
}

// RawIs reports whether raw, a string with its quotes that ends at its first unescaped quote,
// decodes to want, which must consist of ASCII letters, digits and underscores. It costs no
// allocation unless raw has an escape and a length that can spell want: each escape of such a
// character is six bytes (\u0074), so raw holds either want itself or 5 to 5*len(want) more
// bytes.
func RawIs(raw []byte, want string) bool {
	n := len(raw) - 2
	switch {
	case n == len(want):
		return string(raw[1:len(raw)-1]) == want
	case n < len(want)+5 || n > 6*len(want) || bytes.IndexByte(raw, '\\') < 0:
		return false
	}
	got, ok := DecodeString(raw)
	return ok && got == want
}

// scanItem checks the array element it spans byte by byte, as ScanTop does.
func scanItem(b []byte, it Item) error {
	_, err := Scan(b[it.Start:it.End], nil, nil)
	var se *SyntaxError
	if errors.As(err, &se) {
		se.off += it.Start
	}
	return err
}

// SkipString returns the offset past the string whose opening quote is at b[i], looking only
// for its end: the first quote preceded by an even number of backslashes. What lies between the
// quotes is not checked; in a valid string, that quote is the one a JSON parser ends it at.
func SkipString(b []byte, i int) (int, error) {
	if j := stringEndAt(b, i); j >= 0 {
		return j, nil
	}
	return 0, &SyntaxError{off: len(b), msg: "unterminated string"}
}

// stringEndAt returns the offset past the first quote after b[i] that an even number of
// backslashes precedes (counting back no further than b[i+1]), or -1 when there is none.
func stringEndAt(b []byte, i int) int {
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
	if m := quoteMask(binary.LittleEndian.Uint64(b[j:])); m != 0 {
		return j + bits.TrailingZeros64(m)/8
	}
	if m := quoteMask(binary.LittleEndian.Uint64(b[j+8:])); m != 0 {
		return j + 8 + bits.TrailingZeros64(m)/8
	}
	return -1
}

// quoteMask returns a word whose lowest set bit is the high bit of the first quote byte of w
// (in little-endian order), or 0 when w has no quote. Bits above the first quote may be set
// wrongly: the "has a zero byte" trick is exact only up to the first zero byte.
func quoteMask(w uint64) uint64 {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	x := w ^ (ones * '"')
	return (x - ones) & ^x & highs
}

// scanString validates the string starting at b[i] (a quote) and returns the offset past it.
func scanString(b []byte, i int) (int, error) {
	j := i + 1
	for {
		// Bytes from 0x20 up other than the quote and the backslash need no further look; skip
		// them eight at a time while a whole word holds none of the others.
		for j+8 <= len(b) && !wordSpecial(binary.LittleEndian.Uint64(b[j:])) {
			j += 8
		}
		for j < len(b) && b[j] >= 0x20 && b[j] != '"' && b[j] != '\\' {
			j++
		}
		if j >= len(b) {
			return 0, &SyntaxError{off: j, msg: "unterminated string"}
		}
		switch c := b[j]; c {
		case '"':
			return j + 1, nil
		case '\\':
			if j+1 >= len(b) {
				return 0, &SyntaxError{off: j, msg: "unterminated string"}
			}
			switch b[j+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				j += 2
			case 'u':
				if j+6 > len(b) {
					return 0, &SyntaxError{off: j, msg: "unterminated string"}
				}
				for _, h := range b[j+2 : j+6] {
					if !(h >= '0' && h <= '9' || h >= 'a' && h <= 'f' || h >= 'A' && h <= 'F') {
						return 0, &SyntaxError{off: j, msg: "invalid \\u escape in string"}
					}
				}
				j += 6
			default:
				return 0, &SyntaxError{off: j, msg: "invalid escape in string"}
			}
		default:
			return 0, &SyntaxError{off: j, msg: fmt.Sprintf("invalid control character %q in string", c)}
		}
	}
}

// wordSpecial reports whether any byte of w is a control character (below 0x20), a quote or a
// backslash: the bytes a string scan must stop at. It uses the classic "has a zero byte" bit
// tricks, which have no false negatives.
func wordSpecial(w uint64) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	hasZero := func(v uint64) uint64 { return (v - ones) & ^v & highs }
	return (w-ones*0x20)&^w&highs|hasZero(w^(ones*'"'))|hasZero(w^(ones*'\\')) != 0
}

// scanLiteral checks that lit (true, false or null) starts at b[i].
func scanLiteral(b []byte, i int, lit string) (int, error) {
	if !bytes.HasPrefix(b[i:], []byte(lit)) {
		return 0, &SyntaxError{off: i, msg: "invalid literal"}
	}
	return i + len(lit), nil
}

// scanNumber validates the number starting at b[i].
func scanNumber(b []byte, i int) (int, error) {
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
		return 0, &SyntaxError{off: start, msg: "invalid number"}
	}
	if i < len(b) && b[i] == '.' {
		i++
		if !digits() {
			return 0, &SyntaxError{off: start, msg: "invalid number"}
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if !digits() {
			return 0, &SyntaxError{off: start, msg: "invalid number"}
		}
	}
	return i, nil
}

// The helpers below walk JSON that ScanTop has already validated; they do not check syntax.

// StringEnd returns the offset past the string whose opening quote is at b[i].
func StringEnd(b []byte, i int) int {
	if j := stringEndAt(b, i); j >= 0 {
		return j
	}
	return len(b)
}

// ValueEnd returns the offset past the value starting at b[i].
func ValueEnd(b []byte, i int) int {
	switch b[i] {
	case '"':
		return StringEnd(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				j = StringEnd(b, j) - 1
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
		for j < len(b) && !IsWS(b[j]) && b[j] != ',' && b[j] != '}' && b[j] != ']' {
			j++
		}
		return j
	}
}

// EachMember calls fn for each member of the object starting at b[i], in order, with the raw
// key (quotes included) and the value's span; it stops when fn returns false.
func EachMember(b []byte, i int, fn func(rawKey []byte, valStart, valEnd int) bool) {
	i = SkipWS(b, i+1)
	for i < len(b) && b[i] == '"' {
		ke := StringEnd(b, i)
		vs := SkipWS(b, SkipWS(b, ke)+1)
		ve := ValueEnd(b, vs)
		if !fn(b[i:ke], vs, ve) {
			return
		}
		i = SkipWS(b, ve)
		if i >= len(b) || b[i] != ',' {
			return
		}
		i = SkipWS(b, i+1)
	}
}

// EachElem calls fn for each element of the array starting at b[i] with its index and span; it
// stops when fn returns false.
func EachElem(b []byte, i int, fn func(idx, start, end int) bool) {
	i = SkipWS(b, i+1)
	for idx := 0; i < len(b) && b[i] != ']'; idx++ {
		end := ValueEnd(b, i)
		if !fn(idx, i, end) {
			return
		}
		i = SkipWS(b, end)
		if i >= len(b) || b[i] != ',' {
			return
		}
		i = SkipWS(b, i+1)
	}
}

// Span is a value's position in a body; a zero span (end 0) means absent.
type Span struct{ Start, End int }

func (s Span) OK() bool { return s.End > 0 }

// Field returns the span of the member named key of the object starting at b[i], or a zero
// span when b[i] is not an object or has no such member. When the key repeats, the last member
// counts, as in the JSON decoders of Python, JavaScript and Go that upstreams use.
func Field(b []byte, i int, key string) Span {
	var sp Span
	if i >= len(b) || b[i] != '{' {
		return sp
	}
	EachMember(b, i, func(rawKey []byte, vs, ve int) bool {
		if StringIs(rawKey, key) {
			sp = Span{vs, ve}
		}
		return true
	})
	return sp
}

// Path follows keys through nested objects from the value starting at b[i].
func Path(b []byte, i int, keys ...string) Span {
	sp := Span{i, i + 1}
	for _, k := range keys {
		if sp = Field(b, sp.Start, k); !sp.OK() {
			return sp
		}
	}
	return sp
}

// FieldIs reports whether the object starting at b[i] has a member key (the last one when it
// repeats) whose value is the string want; it allocates nothing for plain strings.
func FieldIs(b []byte, i int, key, want string) bool {
	sp := Field(b, i, key)
	return sp.OK() && StringIs(b[sp.Start:sp.End], want)
}

// Str returns the decoded string at span sp and whether sp holds a string.
func Str(b []byte, sp Span) (string, bool) {
	if !sp.OK() || b[sp.Start] != '"' {
		return "", false
	}
	return DecodeString(b[sp.Start:sp.End])
}

// StringIs reports whether raw, a JSON string with its quotes, decodes to want.
func StringIs(raw []byte, want string) bool {
	if len(raw) < 2 || raw[0] != '"' {
		return false
	}
	inner := raw[1 : len(raw)-1]
	if bytes.IndexByte(inner, '\\') < 0 && utf8.Valid(inner) {
		return string(inner) == want
	}
	s, ok := DecodeString(raw)
	return ok && s == want
}

// RawEqual reports whether x and y, valid JSON strings with their quotes, decode to the same
// text; it allocates nothing when neither has an escape.
func RawEqual(x, y []byte) bool {
	if bytes.IndexByte(x, '\\') < 0 && bytes.IndexByte(y, '\\') < 0 && utf8.Valid(x) && utf8.Valid(y) {
		return bytes.Equal(x, y)
	}
	xs, xok := DecodeString(x)
	ys, yok := DecodeString(y)
	return xok && yok && xs == ys
}

// DecodeString decodes raw, a valid JSON string with its quotes, as encoding/json does:
// invalid UTF-8 and unpaired surrogate escapes become U+FFFD.
func DecodeString(raw []byte) (string, bool) {
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
