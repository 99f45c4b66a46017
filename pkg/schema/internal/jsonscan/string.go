package jsonscan

import (
	"encoding/binary"
	"unicode/utf8"
)

const HexDigits = "0123456789abcdef"

// AppendString appends s to dst as a JSON string literal. It escapes what JSON requires
// (quote, backslash, control characters), escapes U+2028 and U+2029 (JavaScript line
// terminators) and replaces each byte of an invalid UTF-8 sequence with \ufffd, as
// encoding/json does; unlike encoding/json it leaves <, > and & alone, as the OpenAI API does.
// The result never contains a raw newline.
func AppendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		// Skip eight bytes at a time while they are plain ASCII that needs no escape.
		for i+8 <= len(s) {
			w := binary.LittleEndian.Uint64([]byte(s[i : i+8]))
			if w&0x8080808080808080 != 0 || wordSpecial(w) {
				break
			}
			i += 8
		}
		if i >= len(s) {
			break
		}
		b := s[i]
		if b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '"', '\\':
				dst = append(dst, '\\', b)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', HexDigits[b>>4], HexDigits[b&0xF])
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
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', HexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// IsObjectText reports whether the valid JSON text s is an object (its first non-space byte is
// '{'), without scanning the rest of it.
func IsObjectText(s string) bool {
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case ' ', '\t', '\n', '\r':
			continue
		case '{':
			return true
		default:
			return false
		}
	}
	return false
}
