package schematest

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/codeinterp/codeinterp/pkg/schema/internal/jsonscan"
)

// RawJSONString encodes s as a JSON string escaping only what JSON requires (quote,
// backslash, control characters): invalid UTF-8, U+2028 and U+2029 stay raw, as an upstream may
// send them.
func RawJSONString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20:
			b.WriteString(`\u00`)
			b.WriteByte(jsonscan.HexDigits[c>>4])
			b.WriteByte(jsonscan.HexDigits[c&0xF])
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// Decoded is what a JSON decoder makes of s: s itself when it is valid UTF-8, else s with each
// invalid byte replaced by U+FFFD.
func Decoded(t testing.TB, s string) string {
	t.Helper()
	var out string
	require.NoError(t, json.Unmarshal([]byte(RawJSONString(s)), &out), "decode %q", s)
	return out
}

// SSEFuzzSeeds adds the shared seed strings: unicode, control characters, invalid UTF-8, JS line
// terminators, SSE-significant text and very long lines.
func SSEFuzzSeeds(f *testing.F, add func(a, b, c string)) {
	long := strings.Repeat("0123456789abcdef", 4096) // a 64 KiB line without a newline or space
	add("print(1 + 1)\n", "The answer is 2.", `{"city":"Paris"}`)
	add("x = 'héllo 世界 🎲'\nprint(x)", "Ünïcödé — 世界 🎲", `{"q":"ü"}`)
	add("a\x00b\x01\x1f\x7f\tc\r\nd", "ctrl\x00\x08\x0c\x1b", "\x00")
	add("bad \xff\xfe utf8 \xe2\x82", "trunc \xe2\x82\xac\xe2\x82", "\xed\xa0\x80")
	add("ls = '\u2028'\nps = '\u2029'", "line\u2028sep\u2029para", "\u2028")
	add("data: [DONE]\n\nevent: error\n", "data: {\"error\":1}\n\n", "\n\ndata: x")
	add(long, long+" "+long, strings.Repeat("é", 40000))
	add("", "", "")
}
