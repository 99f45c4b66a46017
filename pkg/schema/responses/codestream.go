package responses

import (
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/codeinterp/codeinterp/pkg/schema/internal/jsonscan"
)

// codeStream decodes, as a function call's arguments arrive piece by piece, the text of their
// "code" property: arguments {"code": "…"} (other properties before it allowed) give the code
// as the JSON string decodes, exactly as [jsonscan.DecodeString] decodes it whole (escapes and
// \u surrogate pairs split across pieces, invalid UTF-8 and unpaired surrogates as U+FFFD).
// Arguments of another shape stop it: it gives nothing more (failed). Its zero value is ready.
type codeStream struct {
	st     codeState
	failed bool
	// key is the raw text of the key being read, quotes included; isCode reports that the
	// value that follows is the code.
	key    []byte
	isCode bool
	// depth, inStr and esc skip a value of another property: its nesting, whether it is in a
	// string, and whether a backslash escapes the next byte there.
	depth      int
	inStr, esc bool
	// The code string's escape being read: hex holds the \u digits read so far (nhex of
	// them, -1 when no \u), and surrogate a surrogate escape waiting for its pair.
	backslash bool
	nhex      int
	hex       rune
	surrogate rune
	// out is the decoded code not yet returned: a trailing incomplete UTF-8 sequence waits
	// for its next bytes.
	out []byte
}

type codeState uint8

const (
	csStart    codeState = iota // before the object
	csKeyOrEnd                  // after { or ,: a key or }
	csKey                       // in a key
	csColon                     // after a key
	csValue                     // after the colon
	csSkip                      // in another property's value
	csNext                      // after a value: , or }
	csCode                      // in the code string
	csDone                      // the code string ended
)

// write takes the next piece of the arguments and returns the code it completes.
func (c *codeStream) write(s string) string {
	if c.failed || c.st == csDone {
		return ""
	}
	for i := 0; i < len(s) && !c.failed && c.st != csDone; i++ {
		c.byte(s[i])
	}
	if c.failed {
		c.out = c.out[:0]
		return ""
	}
	n := len(c.out)
	if c.st != csDone {
		// Keep a trailing sequence that more bytes may complete.
		for k := 1; k <= 3 && k <= n; k++ {
			if b := c.out[n-k]; b >= utf8.RuneSelf && utf8.RuneStart(b) {
				if !utf8.FullRune(c.out[n-k:]) {
					n -= k
				}
				break
			}
		}
	}
	got := validUTF8(c.out[:n])
	c.out = append(c.out[:0], c.out[n:]...)
	return got
}

// validUTF8 returns b as a string with each byte of an invalid UTF-8 sequence as U+FFFD.
func validUTF8(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	out := make([]byte, 0, len(b)+8)
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		out = utf8.AppendRune(out, r)
		i += size
	}
	return string(out)
}

func isSpace(b byte) bool { return b == ' ' || b == '\t' || b == '\n' || b == '\r' }

func (c *codeStream) byte(b byte) {
	switch c.st {
	case csStart:
		switch {
		case isSpace(b):
		case b == '{':
			c.st = csKeyOrEnd
		default:
			c.failed = true
		}
	case csKeyOrEnd:
		switch {
		case isSpace(b):
		case b == '"':
			c.st, c.key, c.esc = csKey, append(c.key[:0], b), false
		default:
			c.failed = true // } before a code property, or not JSON
		}
	case csKey:
		c.key = append(c.key, b)
		switch {
		case c.esc:
			c.esc = false
		case b == '\\':
			c.esc = true
		case b == '"':
			k, ok := jsonscan.DecodeString(c.key)
			c.st, c.isCode = csColon, ok && k == "code"
			if !ok {
				c.failed = true
			}
		}
	case csColon:
		switch {
		case isSpace(b):
		case b == ':':
			c.st = csValue
		default:
			c.failed = true
		}
	case csValue:
		switch {
		case isSpace(b):
		case c.isCode && b == '"':
			c.st, c.nhex = csCode, -1
		case c.isCode:
			c.failed = true // "code" is not a string
		default:
			c.st, c.depth, c.inStr, c.esc = csSkip, 0, false, false
			c.skip(b)
		}
	case csSkip:
		c.skip(b)
	case csNext:
		switch {
		case isSpace(b):
		case b == ',':
			c.st = csKeyOrEnd
		default:
			c.failed = true
		}
	case csCode:
		c.code(b)
	}
}

// skip reads a byte of another property's value (a scalar, a string, an object or an array).
func (c *codeStream) skip(b byte) {
	switch {
	case c.inStr:
		switch {
		case c.esc:
			c.esc = false
		case b == '\\':
			c.esc = true
		case b == '"':
			c.inStr = false
			if c.depth == 0 {
				c.st = csNext
			}
		}
	case b == '"':
		c.inStr = true
	case b == '{' || b == '[':
		c.depth++
	case b == '}' || b == ']':
		if c.depth == 0 {
			c.failed = true // the object ended before a code property
			return
		}
		c.depth--
		if c.depth == 0 {
			c.st = csNext
		}
	case c.depth == 0 && (b == ',' || isSpace(b)):
		// The end of a scalar.
		c.st = csNext
		if b == ',' {
			c.st = csKeyOrEnd
		}
	}
}

// code reads a byte of the code string.
func (c *codeStream) code(b byte) {
	switch {
	case c.nhex >= 0:
		var h rune
		switch {
		case b >= '0' && b <= '9':
			h = rune(b - '0')
		case b >= 'a' && b <= 'f':
			h = rune(b-'a') + 10
		case b >= 'A' && b <= 'F':
			h = rune(b-'A') + 10
		default:
			c.failed = true
			return
		}
		c.hex, c.nhex = c.hex<<4|h, c.nhex+1
		if c.nhex == 4 {
			c.nhex = -1
			c.escaped(c.hex)
		}
	case c.backslash:
		c.backslash = false
		if b == 'u' {
			c.nhex, c.hex = 0, 0
			return
		}
		c.pairless()
		switch b {
		case '"', '\\', '/':
			c.out = append(c.out, b)
		case 'b':
			c.out = append(c.out, '\b')
		case 'f':
			c.out = append(c.out, '\f')
		case 'n':
			c.out = append(c.out, '\n')
		case 'r':
			c.out = append(c.out, '\r')
		case 't':
			c.out = append(c.out, '\t')
		default:
			c.failed = true
		}
	case b == '\\':
		c.backslash = true
	case b == '"':
		c.pairless()
		c.st = csDone
	default:
		c.pairless()
		c.out = append(c.out, b)
	}
}

// escaped takes the rune of a \u escape: a surrogate waits for the escape after it.
func (c *codeStream) escaped(r rune) {
	if c.surrogate != 0 {
		if pair := utf16.DecodeRune(c.surrogate, r); pair != unicode.ReplacementChar {
			c.surrogate = 0
			c.out = utf8.AppendRune(c.out, pair)
			return
		}
		c.pairless()
	}
	if utf16.IsSurrogate(r) {
		c.surrogate = r
		return
	}
	c.out = utf8.AppendRune(c.out, r)
}

// pairless writes a surrogate that no pair followed as U+FFFD.
func (c *codeStream) pairless() {
	if c.surrogate != 0 {
		c.surrogate = 0
		c.out = utf8.AppendRune(c.out, unicode.ReplacementChar)
	}
}
