package responses

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/codeinterp/codeinterp/pkg/schema"
)

// FuzzRewriteRequest checks RewriteRequest's promises on arbitrary bodies: it
// never panics or modifies its input, and every error is a *RequestError. A body json.Valid
// accepts is never refused as invalid_json; on success the body is valid JSON, is the input
// itself when nothing was found, and otherwise holds no code_interpreter tool (nor, on
// Responses, code_interpreter_call input item) and exactly one function tool of ours. A body
// refused as invalid_json is one json.Valid refuses. A malformed body may be accepted only when
// what is wrong with it lies inside strings RewriteRequest does not read (see
// reqFuzzSanitize): then its rewrite is exactly the rewrite of the sanitized body with the same
// malformed bytes back in place, so the edits are as correct as on valid input and the result
// is no more malformed than the input. The seeds are testdata/fuzz/FuzzRewriteRequest and the
// golden request bodies.
func FuzzRewriteRequest(f *testing.F) {
	reqFuzzAddGolden(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		in := bytes.Clone(body)
		got, err := RewriteRequest(body, schema.Options{})
		if !bytes.Equal(in, body) {
			t.Fatalf("RewriteRequest(%q) modified its input", in)
		}
		valid := json.Valid(body)
		var re *schema.RequestError
		if err != nil {
			if !errors.As(err, &re) {
				t.Fatalf("RewriteRequest(%q) error %v is not a *RequestError", body, err)
			}
			if re.Code == "invalid_json" && valid {
				t.Fatalf("RewriteRequest(%q) refused valid JSON: %v", body, err)
			}
			return
		}
		if !valid {
			reqFuzzCheckLoose(t, body, got)
			return
		}
		if !json.Valid(got.Body) {
			t.Fatalf("RewriteRequest(%q) = %q, not valid JSON", body, got.Body)
		}
		if !got.Found {
			if !bytes.Equal(got.Body, body) {
				t.Fatalf("RewriteRequest(%q) found no tool but changed the body to %q", body, got.Body)
			}
			return
		}
		cis, ours := reqFuzzCountTools(t, got.Body)
		if cis != 0 || ours != 1 {
			t.Fatalf("RewriteRequest(%q) = %q: %d code_interpreter tools and %d functions named %q, want 0 and 1",
				body, got.Body, cis, ours, schema.DefaultFunctionName)
		}
		if n := reqFuzzCountReplayed(t, got.Body); n != 0 {
			t.Fatalf("RewriteRequest(%q) = %q: %d code_interpreter_call input items left", body, got.Body, n)
		}
	})
}

// reqFuzzAddGolden adds each golden request body of both surfaces as a seed.
func reqFuzzAddGolden(f *testing.F) {
	f.Helper()
	var gives []string
	// The golden bodies of both of OpenAI's surfaces: a body of the other's shape is a seed too.
	for _, dir := range []string{"testdata", filepath.Join("..", "chat", "testdata")} {
		g, err := filepath.Glob(filepath.Join(dir, "request", "*.give.json"))
		if err != nil {
			f.Fatalf("list golden bodies: %v", err)
		}
		gives = append(gives, g...)
	}
	for _, path := range gives {
		b, err := os.ReadFile(path)
		if err != nil {
			f.Fatalf("read %s: %v", path, err)
		}
		f.Add(b)
	}
}

// reqFuzzCheckLoose checks got, what RewriteRequest made of body, a body json.Valid refuses.
func reqFuzzCheckLoose(t *testing.T, body []byte, got schema.Request) {
	t.Helper()
	clean := reqFuzzSanitize(body)
	if !json.Valid(clean) {
		t.Fatalf("RewriteRequest(%q) accepted a body that is malformed outside the strings it may let through (sanitized: %q)", body, clean)
	}
	want, err := RewriteRequest(clean, schema.Options{})
	if err != nil {
		t.Fatalf("RewriteRequest(%q) accepted the body but refused it sanitized, %q: %v", body, clean, err)
	}
	if !got.Found {
		if !bytes.Equal(got.Body, body) || want.Found {
			t.Fatalf("RewriteRequest(%q) = found %v, %q; sanitized: found %v", body, got.Found, got.Body, want.Found)
		}
		return
	}
	if back := reqFuzzSanitize(got.Body); !bytes.Equal(back, want.Body) {
		t.Fatalf("RewriteRequest(%q) = %q, which sanitizes to %q; the sanitized body rewrites to %q", body, got.Body, back, want.Body)
	}
	got.Body, want.Body = nil, nil
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("RewriteRequest(%q) = %+v; the sanitized body gives %+v", body, got, want)
	}
}

// reqFuzzSanitize returns b with what RewriteRequest may let through replaced by spaces, byte
// for byte: inside strings, raw control characters and the backslash of each malformed escape.
// It reads b as a JSON parser would, one byte at a time; a valid body comes back unchanged.
func reqFuzzSanitize(b []byte) []byte {
	out := bytes.Clone(b)
	hex := func(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }
	inString := false
	for i := 0; i < len(out); i++ {
		c := out[i]
		switch {
		case !inString:
			inString = c == '"'
		case c == '"':
			inString = false
		case c < 0x20:
			out[i] = ' '
		case c == '\\':
			switch {
			case i+1 < len(out) && bytes.IndexByte([]byte(`"\\/bfnrt`), out[i+1]) >= 0:
				i++
			case i+5 < len(out) && out[i+1] == 'u' && hex(out[i+2]) && hex(out[i+3]) && hex(out[i+4]) && hex(out[i+5]):
				i += 5
			default:
				out[i] = ' '
			}
		}
	}
	return out
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
func reqFuzzCountTools(t *testing.T, body []byte) (cis, ours int) {
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
		if name == schema.DefaultFunctionName {
			ours++
		}
	}
	return cis, ours
}
