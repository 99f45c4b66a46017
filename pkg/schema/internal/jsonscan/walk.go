package jsonscan

import (
	"bytes"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

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
