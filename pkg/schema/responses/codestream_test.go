package responses

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/codeinterp/codeinterp/pkg/schema/internal/openai"
)

// streamCode feeds args to a codeStream in the pieces cut at the given byte offsets and
// returns the code it gave, piece by piece.
func streamCode(args string, cuts ...int) ([]string, *codeStream) {
	var c codeStream
	var out []string
	from := 0
	for _, at := range append(cuts, len(args)) {
		out = append(out, c.write(args[from:at]))
		from = at
	}
	return out, &c
}

// The code decoded as the arguments arrive is the code of the whole arguments, wherever they
// are cut: inside an escape, between the halves of a surrogate pair, inside a key.
func TestCodeStreamEveryCut(t *testing.T) {
	tests := []struct {
		name, give string
	}{
		{name: "plain", give: `{"code":"print(1)"}`},
		{name: "spaces", give: " {\n \"code\" :  \"x = 1\\ny = 2\" } "},
		{name: "escapes", give: `{"code":"print(\"a\\tb\")\n\/\\\b\f\r"}`},
		{name: "unicode escape", give: `{"code":"caf\u00e9 \u2028"}`},
		{name: "surrogate pair", give: `{"code":"x = '\ud83d\ude00'"}`},
		{name: "lone high surrogate", give: `{"code":"\ud83d\n"}`},
		{name: "lone low surrogate", give: `{"code":"\ude00x"}`},
		{name: "high then pair", give: `{"code":"\ud83d\ud83d\ude00"}`},
		{name: "high at the end", give: `{"code":"a\ud83d"}`},
		{name: "raw utf-8", give: `{"code":"s = 'é☕😀'"}`},
		{name: "keys before", give: `{"timeout":5,"lang":"py\"}{","opts":{"a":[1,{"b":"]"}]},"ok":true,"none":null,"code":"print(2)"}`},
		{name: "keys after", give: `{"code":"print(3)","timeout":5}`},
		{name: "escaped key", give: `{"c\u006fde":"print(4)"}`},
		{name: "empty code", give: `{"code":""}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want, err := openai.ParseArguments(tt.give)
			require.NoError(t, err, "ParseArguments(%s)", tt.give)
			whole, _ := streamCode(tt.give)
			assert.Equal(t, want, strings.Join(whole, ""), "code of %s whole", tt.give)
			for i := 0; i <= len(tt.give); i++ {
				got, _ := streamCode(tt.give, i)
				assert.Equal(t, want, strings.Join(got, ""), "code of %s cut at %d", tt.give, i)
				for _, p := range got {
					assert.True(t, utf8.ValidString(p), "piece %q of %s cut at %d", p, tt.give, i)
				}
			}
			bytes := make([]int, 0, len(tt.give))
			for i := 1; i < len(tt.give); i++ {
				bytes = append(bytes, i)
			}
			got, _ := streamCode(tt.give, bytes...)
			assert.Equal(t, want, strings.Join(got, ""), "code of %s byte by byte", tt.give)
		})
	}
}

// Code streams as it arrives: a piece gives the code it completes, and an escape split across
// pieces waits for its end.
func TestCodeStreamPieces(t *testing.T) {
	args := `{"code":"a\u00e9\ud83d\ude00b"}`
	got, _ := streamCode(args, len(`{"code":"a\u00`), len(`{"code":"a\u00e9\ud83d`), len(`{"code":"a\u00e9\ud83d\ude00`))
	assert.Equal(t, []string{"a", "é", "😀", "b"}, got, "pieces of %s", args)
}

// Arguments of another shape give nothing more once they show it.
func TestCodeStreamOtherShapes(t *testing.T) {
	tests := []struct {
		name, give string
	}{
		{name: "no code", give: `{"cmd":"ls"}`},
		{name: "code not a string", give: `{"code":5}`},
		{name: "nested code", give: `{"a":{"code":"x"}}`},
		{name: "not an object", give: `["code","x"]`},
		{name: "bad escape", give: `{"code":"a\qb"}`},
		{name: "bad hex", give: `{"code":"\u12g4"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, c := streamCode(tt.give)
			assert.True(t, c.failed, "%s fails", tt.give)
			assert.Empty(t, strings.Join(got, ""), "code of %s", tt.give)
		})
	}
}

// FuzzCodeStream: for arguments {"code": …} cut anywhere, the code streamed is the code of the
// whole arguments; for any other, nothing panics.
func FuzzCodeStream(f *testing.F) {
	f.Add(`{"code":"print(1)"}`, uint16(3), uint16(9))
	f.Add(`{"x":[1,"}"],"code":"\ud83d\ude00\n"}`, uint16(20), uint16(26))
	f.Add(`{"c\u006fde":"\u00e9"}`, uint16(4), uint16(17))
	f.Fuzz(func(t *testing.T, args string, a, b uint16) {
		i, j := int(a)%(len(args)+1), int(b)%(len(args)+1)
		if i > j {
			i, j = j, i
		}
		got, _ := streamCode(args, i, j)
		want, err := openai.ParseArguments(args)
		if err != nil || !utf8.ValidString(args) {
			return
		}
		assert.Equal(t, want, strings.Join(got, ""), "code of %q cut at %d and %d", args, i, j)
	})
}
