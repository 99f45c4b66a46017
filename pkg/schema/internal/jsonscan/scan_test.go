package jsonscan

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestReqObject(t *testing.T) {
	many := `{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"type":"x","t\u0079pe":"y","x":{"k":[1,"}"]}}`
	tests := []struct {
		name      string
		give      string
		key       string
		wantValue string // "" when absent
	}{
		{"first", `{"type":"function","name":"f"}`, "type", `"function"`},
		{"last of repeats", `{"type":"a","name":"f","type":"b"}`, "type", `"b"`},
		{"escaped key", `{"t\u0079pe" : "a" }`, "type", `"a"`},
		{"absent", `{"name":"f"}`, "type", ""},
		{"empty", `{ }`, "type", ""},
		{"nested value", `{"function":{"name":"f","parameters":{"a":"}"}}}`, "function", `{"name":"f","parameters":{"a":"}"}}`},
		{"past the kept members", many, "type", `"y"`},
		{"past the kept members, nested", many, "x", `{"k":[1,"}"]}`},
		{"kept member of a long object", many, "c", `3`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := []byte(tt.give + `,"tail"]`)
			var o Object
			end := o.Read(b, 0)
			assert.Equal(t, len(tt.give), end, "Object.read(%s) end", tt.give)
			var got, gotRaw string
			if sp := o.Field(tt.key); sp.OK() {
				got = string(b[sp.Start:sp.End])
			}
			if sp := o.FieldRaw(AppendString(nil, tt.key)); sp.OK() {
				gotRaw = string(b[sp.Start:sp.End])
			}
			assert.Equal(t, tt.wantValue, got, "Object(%s).field(%q)", tt.give, tt.key)
			assert.Equal(t, tt.wantValue, gotRaw, "Object(%s).fieldRaw(%q)", tt.give, tt.key)
		})
	}
}

// TestScanTopAgreesWithEncodingJSON checks the validator against encoding/json on tricky inputs.
func TestScanTopAgreesWithEncodingJSON(t *testing.T) {
	gives := []string{
		`{}`, `[]`, `""`, `0`, `-0`, `-0.5e+10`, `1E5`, `1.`, `.5`, `+1`, `01`, `-`, `1e`, `1e+`,
		`true`, `false`, `null`, `nul`, `truex`, `[1,]`, `[,1]`, `{"a":1,}`, `{"a"}`, `{"a":}`,
		`{"a":1 "b":2}`, `["\u00e9\ud83d\ude00"]`, `["\uZZZZ"]`, `["\a"]`, "[\"\x01\"]", "[\"\x7f\xff\"]",
		`[[[[]]]]`, `[[[[]]]`, `{"a":{"b":{"c":[]}}}`, ` {"a" : [ 1 , { } ] } `, "\t[]\r\n", `[] []`,
		`{"a":"\\"}`, `{"a":"\\\"}`, `{"\"":1}`, `"\/"`, `[1.5e-3,-2]`, `[1.e3]`, `[-01]`,
	}
	for _, give := range gives {
		_, _, err := ScanTop([]byte(give))
		assert.Equal(t, json.Valid([]byte(give)), err == nil, "ScanTop(%q) error = %v", give, err)
	}
}

func TestScanTopMembers(t *testing.T) {
	give := []byte(` { "a" : 1 , "b\u0021":{"x":[1,{"y":2}]},"c":"s" , "d":[] } `)
	members, isObject, err := ScanTop(give)
	require.NoError(t, err, "ScanTop(%s)", give)
	require.True(t, isObject, "ScanTop(%s) isObject", give)
	var got []string
	for _, m := range members {
		key, ok := DecodeString(give[m.KeyStart:m.KeyEnd])
		require.True(t, ok, "ScanTop(%s) key %s", give, give[m.KeyStart:m.KeyEnd])
		got = append(got, key+"="+string(give[m.ValStart:m.ValEnd]))
	}
	assert.Equal(t, []string{`a=1`, `b!={"x":[1,{"y":2}]}`, `c="s"`, `d=[]`}, got, "ScanTop(%s) members", give)
}

func TestDecodeStringAgreesWithEncodingJSON(t *testing.T) {
	gives := []string{
		`""`, `"plain"`, `"caf\u00e9"`, `"\ud83d\ude00"`, `"\ud83d"`, `"\ude00"`, `"\ud83dx"`, `"\ud83d\u0041"`,
		`"\ud83d\ud83d\ude00"`, `"\"\\\/\b\f\n\r\t"`, "\"\xff\xfe\"", "\"a\xe2\x82\"", `"\u0000"`, `"\uD83D\uDE00"`,
		"\"\xed\xa0\x80\"", `"\u00"`,
	}
	for _, give := range gives {
		var want string
		wantErr := json.Unmarshal([]byte(give), &want)
		got, ok := DecodeString([]byte(give))
		if wantErr != nil {
			assert.False(t, ok, "DecodeString(%q) = %q, encoding/json refuses it: %v", give, got, wantErr)
			continue
		}
		assert.True(t, ok, "DecodeString(%q)", give)
		assert.Equal(t, want, got, "DecodeString(%q)", give)
	}
}

func TestScanTopDepthLimit(t *testing.T) {
	for _, depth := range []int{MaxDepth - 1, MaxDepth, MaxDepth + 1} {
		give := []byte(strings.Repeat("[", depth) + strings.Repeat("]", depth))
		_, _, err := ScanTop(give)
		assert.Equal(t, json.Valid(give), err == nil, "ScanTop(depth %d) error = %v", depth, err)
		assert.Equal(t, depth <= MaxDepth, err == nil, "ScanTop(depth %d) error = %v", depth, err)
	}
}

func TestValueEnd(t *testing.T) {
	gives := []string{`"a\\"`, `"a\\\"b"`, `"\\\\"`, `{"a":"}\"]"}`, `[1,"]",[{}]]`, `-1.5e3`, `true`, `null`, `"\u0022"`}
	for _, give := range gives {
		b := []byte(give + ` , "tail"]`)
		assert.Equal(t, len(give), ValueEnd(b, 0), "ValueEnd(%s)", give)
	}
}

func TestAppendString(t *testing.T) {
	gives := []string{"", "plain", "q\"b\\s/", "\x00\x01\x1f\n\r\t", "<&>", "é☕😀", "bad\xffutf8\xe2\x82", "\u2028"}
	for _, give := range gives {
		got := AppendString(nil, give)
		require.True(t, json.Valid(got), "AppendString(%q) = %s is not valid JSON", give, got)
		var back string
		require.NoError(t, json.Unmarshal(got, &back), "unmarshal AppendString(%q)", give)
		want, _ := json.Marshal(give)
		var wantBack string
		require.NoError(t, json.Unmarshal(want, &wantBack), "unmarshal json.Marshal(%q)", give)
		assert.Equal(t, wantBack, back, "AppendString(%q) round trip", give)
		assert.False(t, bytes.Contains(got, []byte("\n")), "AppendString(%q) has a raw newline", give)
	}
}

func TestFinalAppendStringMatchesEncodingJSON(t *testing.T) {
	tests := []struct {
		name string
		give string
	}{
		{name: "empty", give: ""},
		{name: "ascii", give: "hello world"},
		{name: "controls", give: "a\x00b\x1f\n\r\t\b\f"},
		{name: "quotes", give: `"\/`},
		{name: "unicode", give: "héllo 世界 🎲"},
		{name: "line separators", give: "a\u2028b\u2029c"},
		{name: "invalid utf8", give: "a\xffb\xe2\x82c\xed\xa0\x80"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := AppendString(nil, tt.give)
			var decoded string
			require.NoError(t, json.Unmarshal(got, &decoded), "decode AppendString(%q) = %s", tt.give, got)
			want, err := json.Marshal(tt.give)
			require.NoError(t, err, "json.Marshal(%q)", tt.give)
			var wantDecoded string
			require.NoError(t, json.Unmarshal(want, &wantDecoded), "decode json.Marshal(%q)", tt.give)
			assert.Equal(t, wantDecoded, decoded, "decoded AppendString(%q)", tt.give)
			assert.NotContains(t, string(got), "\n", "raw newline in AppendString(%q)", tt.give)
		})
	}
}

// FuzzRequestDecodeString checks that the scanner accepts exactly the JSON strings encoding/json
// accepts and decodes them to the same text, and that AppendString encodes that text back to
// a JSON string that decodes to it.
func FuzzRequestDecodeString(f *testing.F) {
	for _, s := range []string{`plain`, `caf\u00e9`, `\ud83d\ude00`, `\ud83d`, `\ud83d\u0041`, `\"\\\/\b\f\n\r\t`, "\xff\xfe", `\u00`, "a\nb", `\x`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, inner []byte) {
		q := append(append([]byte{'"'}, inner...), '"')
		var want string
		wantErr := json.Unmarshal(q, &want)
		_, _, scanErr := ScanTop(q)
		if (wantErr == nil) != (scanErr == nil) {
			t.Fatalf("ScanTop(%q) error %v, encoding/json error %v", q, scanErr, wantErr)
		}
		if wantErr != nil {
			return
		}
		got, ok := DecodeString(q)
		if !ok || got != want {
			t.Fatalf("DecodeString(%q) = %q, %v; encoding/json gives %q", q, got, ok, want)
		}
		if !StringIs(q, want) {
			t.Fatalf("StringIs(%q, %q) = false", q, want)
		}
		back := AppendString(nil, want)
		var again string
		if err := json.Unmarshal(back, &again); err != nil || again != want {
			t.Fatalf("AppendString(%q) = %q, which decodes to %q (error %v)", want, back, again, err)
		}
	})
}
