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
