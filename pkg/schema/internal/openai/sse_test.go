package openai

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSSECut(t *testing.T) {
	tests := []struct {
		name string
		give string
		want []string
	}{
		{name: "empty"},
		{name: "short", give: "print(1)\nprint(2)\n", want: []string{"print(1)\nprint(2)\n"}},
		{
			name: "at the last newline in the window",
			give: strings.Repeat("a", 100) + "\n" + strings.Repeat("b", 20) + "\n" + strings.Repeat("c", 20),
			want: []string{strings.Repeat("a", 100) + "\n" + strings.Repeat("b", 20) + "\n", strings.Repeat("c", 20)},
		},
		{
			name: "after the last space without a newline",
			give: strings.Repeat("word ", 30),
			want: []string{strings.Repeat("word ", 25), strings.Repeat("word ", 5)},
		},
		{
			name: "never inside a rune",
			give: strings.Repeat("é", 70),
			want: []string{strings.Repeat("é", 64), strings.Repeat("é", 6)},
		},
		{
			name: "never inside a rune, odd offset",
			give: "x" + strings.Repeat("🎲", 40),
			want: []string{"x" + strings.Repeat("🎲", 31), strings.Repeat("🎲", 9)},
		},
		{
			name: "invalid bytes count one each",
			give: strings.Repeat("\xff", 130),
			want: []string{strings.Repeat("\xff", 128), "\xff\xff"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for s := tt.give; len(s) > 0; {
				n := Cut(s)
				require.Positive(t, n, "Cut must make progress on %q", s)
				got = append(got, s[:n])
				s = s[n:]
			}
			assert.Equal(t, tt.want, got, "pieces of %q", tt.give)
		})
	}
}

func TestSSEAppendCompact(t *testing.T) {
	tests := []struct {
		name string
		give string
		want string
	}{
		{name: "pretty", give: "{\n  \"a\" : [ 1 ,\t2 ],\r\n  \"b\": \"x y\"\n}", want: `{"a":[1,2],"b":"x y"}`},
		{name: "escapes kept", give: `{"a":"q\"\\ \n\u2028"}`, want: `{"a":"q\"\\ \n\u2028"}`},
		{name: "raw separators escaped", give: "\"a\u2028b\u2029c\"", want: `"a\u2028b\u2029c"`},
		{name: "invalid utf8 replaced", give: "\"a\xffb\xe2\x82\"", want: `"a\ufffdb\ufffd\ufffd"`},
		{name: "unicode kept", give: `"héllo 世界 🎲"`, want: `"héllo 世界 🎲"`},
		{name: "whitespace in strings kept", give: `[" a ", "b c"]`, want: `[" a ","b c"]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := AppendCompact(nil, tt.give)
			assert.Equal(t, tt.want, string(got), "compact of %q", tt.give)
			var a, b any
			require.NoError(t, json.Unmarshal([]byte(tt.give), &a), "decode %q", tt.give)
			require.NoError(t, json.Unmarshal(got, &b), "decode compact of %q", tt.give)
			assert.Equal(t, a, b, "compact of %q decodes to the same value", tt.give)
		})
	}
}
