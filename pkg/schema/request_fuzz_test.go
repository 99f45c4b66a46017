package schema

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzRewriteRequest checks RewriteRequest's promises on arbitrary bodies for both surfaces: it
// never panics; it refuses exactly the bodies encoding/json calls invalid, as *RequestError with
// code invalid_json; any other error is a *RequestError too; on success the body is valid JSON,
// is the input itself when nothing was found, and otherwise holds no code_interpreter tool and
// exactly one function tool of ours. The seeds are testdata/fuzz/FuzzRewriteRequest and the
// golden request bodies.
func FuzzRewriteRequest(f *testing.F) {
	gives, err := filepath.Glob(filepath.Join("testdata", "request", "*.give.json"))
	if err != nil {
		f.Fatalf("list golden bodies: %v", err)
	}
	for _, path := range gives {
		b, err := os.ReadFile(path)
		if err != nil {
			f.Fatalf("read %s: %v", path, err)
		}
		f.Add(byte(0), b)
		f.Add(byte(1), b)
	}
	f.Fuzz(func(t *testing.T, surface byte, body []byte) {
		s := Responses
		if surface%2 == 1 {
			s = Chat
		}
		in := bytes.Clone(body)
		got, err := RewriteRequest(s, body, Options{})
		if !bytes.Equal(in, body) {
			t.Fatalf("RewriteRequest(%s, %q) modified its input", s, in)
		}
		valid := json.Valid(body)
		var re *RequestError
		if err != nil {
			if !errors.As(err, &re) {
				t.Fatalf("RewriteRequest(%s, %q) error %v is not a *RequestError", s, body, err)
			}
			if (re.Code == "invalid_json") == valid {
				t.Fatalf("RewriteRequest(%s, %q) error %v, but json.Valid = %v", s, body, err, valid)
			}
			return
		}
		if !valid {
			t.Fatalf("RewriteRequest(%s, %q) accepted a body json.Valid refuses", s, body)
		}
		if !json.Valid(got.Body) {
			t.Fatalf("RewriteRequest(%s, %q) = %q, not valid JSON", s, body, got.Body)
		}
		if !got.Found {
			if !bytes.Equal(got.Body, body) {
				t.Fatalf("RewriteRequest(%s, %q) found no tool but changed the body to %q", s, body, got.Body)
			}
			return
		}
		cis, ours := reqFuzzCountTools(t, s, got.Body)
		if cis != 0 || ours != 1 {
			t.Fatalf("RewriteRequest(%s, %q) = %q: %d code_interpreter tools and %d functions named %q, want 0 and 1",
				s, body, got.Body, cis, ours, DefaultFunctionName)
		}
		if s == Responses {
			if n := reqFuzzCountReplayed(t, got.Body); n != 0 {
				t.Fatalf("RewriteRequest(%s, %q) = %q: %d code_interpreter_call input items left", s, body, got.Body, n)
			}
		}
	})
}

// reqFuzzCountReplayed counts the code_interpreter_call items in body's input list.
func reqFuzzCountReplayed(t *testing.T, body []byte) int {
	t.Helper()
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil {
		t.Fatalf("unmarshal %q: %v", body, err)
	}
	var items []map[string]any
	if json.Unmarshal(top["input"], &items) != nil {
		var loose []json.RawMessage // a list with items that are not objects
		if json.Unmarshal(top["input"], &loose) != nil {
			return 0
		}
		for _, raw := range loose {
			var item map[string]any
			if json.Unmarshal(raw, &item) == nil {
				items = append(items, item)
			}
		}
	}
	n := 0
	for _, item := range items {
		if item["type"] == "code_interpreter_call" {
			n++
		}
	}
	return n
}

// reqFuzzCountTools counts, in body's tools (decoded the way upstreams decode JSON: exact keys,
// the last of repeated keys), the code_interpreter tools and the function tools named
// DefaultFunctionName.
func reqFuzzCountTools(t *testing.T, s Surface, body []byte) (cis, ours int) {
	t.Helper()
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil {
		t.Fatalf("unmarshal %q: %v", body, err)
	}
	var tools []json.RawMessage
	if err := json.Unmarshal(top["tools"], &tools); err != nil {
		t.Fatalf("unmarshal tools of %q: %v", body, err)
	}
	for _, raw := range tools {
		var tool map[string]any
		if json.Unmarshal(raw, &tool) != nil {
			continue
		}
		if tool["type"] == "code_interpreter" {
			cis++
		}
		if tool["type"] != "function" {
			continue
		}
		name := tool["name"]
		if s == Chat {
			fn, _ := tool["function"].(map[string]any)
			name = fn["name"]
		}
		if name == DefaultFunctionName {
			ours++
		}
	}
	return cis, ours
}

// FuzzRequestDecodeString checks that the scanner accepts exactly the JSON strings encoding/json
// accepts and decodes them to the same text.
func FuzzRequestDecodeString(f *testing.F) {
	for _, s := range []string{`plain`, `caf\u00e9`, `\ud83d\ude00`, `\ud83d`, `\ud83d\u0041`, `\"\\\/\b\f\n\r\t`, "\xff\xfe", `\u00`, "a\nb", `\x`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, inner []byte) {
		q := append(append([]byte{'"'}, inner...), '"')
		var want string
		wantErr := json.Unmarshal(q, &want)
		_, _, scanErr := reqScanTop(q)
		if (wantErr == nil) != (scanErr == nil) {
			t.Fatalf("reqScanTop(%q) error %v, encoding/json error %v", q, scanErr, wantErr)
		}
		if wantErr != nil {
			return
		}
		got, ok := reqDecodeString(q)
		if !ok || got != want {
			t.Fatalf("reqDecodeString(%q) = %q, %v; encoding/json gives %q", q, got, ok, want)
		}
		if !reqStringIs(q, want) {
			t.Fatalf("reqStringIs(%q, %q) = false", q, want)
		}
		if back := reqAppendString(nil, want); !json.Valid(back) {
			t.Fatalf("reqAppendString(%q) = %q, not valid JSON", want, back)
		}
	})
}
