package openai

import (
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/codeinterp/codeinterp/pkg/schema/internal/jsonscan"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// DeltaMax is the largest delta, in bytes, the streams split text into. A delta ends at the
// last newline inside that window, else after its last space, else at a rune boundary: a few
// deltas for a typical answer, a bounded event count for a long one, and never a split UTF-8
// sequence.
const DeltaMax = 128

// Cut returns the length of the first delta of s (len(s) when s fits in one).
func Cut(s string) int {
	if len(s) <= DeltaMax {
		return len(s)
	}
	space := -1
	for i := DeltaMax - 1; i >= 0; i-- {
		switch s[i] {
		case '\n':
			return i + 1
		case ' ':
			if space < 0 {
				space = i + 1
			}
		}
	}
	if space > 0 {
		return space
	}
	// No newline or space: cut at the last rune start that fits, stepping exactly as a JSON
	// encoder does, so that invalid bytes are replaced the same way in the pieces as in the whole.
	n := 0
	for n < len(s) {
		_, size := utf8.DecodeRuneInString(s[n:])
		if n+size > DeltaMax {
			break
		}
		n += size
	}
	return n
}

// Writer builds a Responses event stream: each event is an `event: <type>` line, one
// `data: <json>` line and a blank line, numbered with sequence_number from 0.
type Writer struct {
	Buf []byte
	seq int
	Err error // the first failure of an edit; the stream is discarded when set
}

// Open starts a Responses event of type typ: its event line and the data object up to and
// including sequence_number.
func (w *Writer) Open(typ string) {
	w.Buf = append(w.Buf, "event: "...)
	w.Buf = append(w.Buf, typ...)
	w.Buf = append(w.Buf, "\ndata: {\"type\":\""...)
	w.Buf = append(w.Buf, typ...)
	w.Buf = append(w.Buf, `","sequence_number":`...)
	w.Buf = strconv.AppendInt(w.Buf, int64(w.seq), 10)
}

// Close ends the current event's data object and the event.
func (w *Writer) Close() {
	w.Buf = append(w.Buf, "}\n\n"...)
	w.seq++
}

// Key appends `,"<k>":`; k must need no escaping.
func (w *Writer) Key(k string) {
	w.Buf = append(w.Buf, ',', '"')
	w.Buf = append(w.Buf, k...)
	w.Buf = append(w.Buf, '"', ':')
}

func (w *Writer) Str(k, v string) {
	w.Key(k)
	w.Buf = jsonscan.AppendString(w.Buf, v)
}

func (w *Writer) Num(k string, v int) {
	w.Key(k)
	w.Buf = strconv.AppendInt(w.Buf, int64(v), 10)
}

// Raw appends k with the JSON value v, which must already be one compact, sanitized line: a
// part of a body from CompactBody, or built from literals and AppendString.
func (w *Writer) Raw(k, v string) {
	w.Key(k)
	w.Buf = append(w.Buf, v...)
}

// Literal appends k with v as is; v must be a constant, compact JSON value.
func (w *Writer) Literal(k, v string) {
	w.Key(k)
	w.Buf = append(w.Buf, v...)
}

// CompactBody validates that b is a JSON object and returns it as one compact, sanitized line
// (AppendCompact), so that every part of it can be copied into a data line as is.
func CompactBody(b []byte) (string, bool) {
	if !gjson.ValidBytes(b) || !jsonscan.IsObjectText(View(b)) {
		return "", false
	}
	// The compacted bytes are never modified: viewing them as a string saves a copy.
	return View(AppendCompact(make([]byte, 0, len(b)), View(b))), true
}

// AppendCompact appends the valid JSON value raw to dst without insignificant whitespace,
// with U+2028 and U+2029 escaped and each byte of an invalid UTF-8 sequence replaced by \ufffd
// (as AppendString does for strings it encodes). The result is one line that every SSE
// parser reads whole and every JSON parser decodes to the same value as raw.
func AppendCompact(dst []byte, raw string) []byte {
	inString := false
	start := 0
	for i := 0; i < len(raw); {
		c := raw[i]
		if !inString {
			switch c {
			case ' ', '\t', '\n', '\r':
				dst = append(dst, raw[start:i]...)
				i++
				start = i
				continue
			case '"':
				inString = true
			}
			i++
			continue
		}
		switch {
		case c == '"':
			inString = false
			i++
		case c == '\\':
			i += 2 // valid JSON: an escape is never the last byte
		case c < utf8.RuneSelf:
			i++
		default:
			r, size := utf8.DecodeRuneInString(raw[i:])
			switch {
			case r == utf8.RuneError && size == 1:
				dst = append(dst, raw[start:i]...)
				dst = append(dst, `\ufffd`...)
				start = i + 1
			case r == '\u2028' || r == '\u2029':
				dst = append(dst, raw[start:i]...)
				dst = append(dst, '\\', 'u', '2', '0', '2', jsonscan.HexDigits[r&0xF])
				start = i + size
			}
			i += size
		}
	}
	return append(dst, raw[start:]...)
}

// RawOr returns v's raw JSON, or def when v is absent.
func RawOr(v gjson.Result, def string) string {
	if v.Exists() {
		return v.Raw
	}
	return def
}

// Edit returns the JSON object raw with path set to the raw JSON value, or raw unchanged when
// path is absent and always is false. The first failure is kept in w.Err.
func (w *Writer) Edit(raw, path, value string, always bool) string {
	if !always && !gjson.Get(raw, path).Exists() {
		return raw
	}
	out, err := sjson.SetRaw(raw, path, value)
	if err != nil {
		if w.Err == nil {
			w.Err = fmt.Errorf("set %s: %w", path, err)
		}
		return raw
	}
	return out
}
