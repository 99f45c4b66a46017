package schematest

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

// RewriteFuzz is what FuzzRewriteRequest needs of a surface.
type RewriteFuzz struct {
	// Rewrite is the surface's RewriteRequest.
	Rewrite RewriteFunc
	// Golden lists the directories whose request/*.give.json bodies are seeds.
	Golden []string
	// ToolName returns the name of a function tool as the surface spells it.
	ToolName func(tool map[string]any) any
	// Check, if set, makes the surface's own checks of got, the rewrite of the valid body
	// body that found the tool.
	Check func(t *testing.T, body []byte, got schema.Request)
}

// FuzzRewriteRequest checks rf.Rewrite's promises on arbitrary bodies: it never panics or
// modifies its input, and every error is a *RequestError. A body json.Valid accepts is never
// refused as invalid_json; on success the body is valid JSON, is the input itself when nothing
// was found, and otherwise holds no code_interpreter tool and exactly one function tool of
// ours (and passes rf.Check). A body refused as invalid_json is one json.Valid refuses. A
// malformed body may be accepted only when what is wrong with it lies inside strings
// RewriteRequest does not read (see Sanitize): then its rewrite is exactly the rewrite of the
// sanitized body with the same malformed bytes back in place.
func FuzzRewriteRequest(f *testing.F, rf RewriteFuzz) {
	addGolden(f, rf.Golden)
	f.Fuzz(func(t *testing.T, body []byte) {
		in := bytes.Clone(body)
		got, err := rf.Rewrite(body, schema.Options{})
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
			checkLoose(t, rf.Rewrite, body, got)
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
		cis, ours := countTools(t, got.Body, rf.ToolName)
		if cis != 0 || ours != 1 {
			t.Fatalf("RewriteRequest(%q) = %q: %d code_interpreter tools and %d functions named %q, want 0 and 1",
				body, got.Body, cis, ours, schema.DefaultFunctionName)
		}
		if rf.Check != nil {
			rf.Check(t, body, got)
		}
	})
}

// addGolden adds each golden request body in dirs as a seed.
func addGolden(f *testing.F, dirs []string) {
	f.Helper()
	var gives []string
	for _, dir := range dirs {
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

// checkLoose checks got, what rewrite made of body, a body json.Valid refuses.
func checkLoose(t *testing.T, rewrite RewriteFunc, body []byte, got schema.Request) {
	t.Helper()
	clean := Sanitize(body)
	if !json.Valid(clean) {
		t.Fatalf("RewriteRequest(%q) accepted a body that is malformed outside the strings it may let through (sanitized: %q)", body, clean)
	}
	want, err := rewrite(clean, schema.Options{})
	if err != nil {
		t.Fatalf("RewriteRequest(%q) accepted the body but refused it sanitized, %q: %v", body, clean, err)
	}
	if !got.Found {
		if !bytes.Equal(got.Body, body) || want.Found {
			t.Fatalf("RewriteRequest(%q) = found %v, %q; sanitized: found %v", body, got.Found, got.Body, want.Found)
		}
		return
	}
	if back := Sanitize(got.Body); !bytes.Equal(back, want.Body) {
		t.Fatalf("RewriteRequest(%q) = %q, which sanitizes to %q; the sanitized body rewrites to %q", body, got.Body, back, want.Body)
	}
	got.Body, want.Body = nil, nil
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("RewriteRequest(%q) = %+v; the sanitized body gives %+v", body, got, want)
	}
}

// Sanitize returns b with what RewriteRequest may let through replaced by spaces, byte
// for byte: inside strings, raw control characters and the backslash of each malformed escape.
// It reads b as a JSON parser would, one byte at a time; a valid body comes back unchanged.
func Sanitize(b []byte) []byte {
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

// countTools counts, in body's tools (decoded the way upstreams decode JSON: exact keys,
// the last of repeated keys), the code_interpreter tools and the function tools whose
// name (as toolName reads it) is DefaultFunctionName.
func countTools(t *testing.T, body []byte, toolName func(tool map[string]any) any) (cis, ours int) {
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
		if toolName(tool) == schema.DefaultFunctionName {
			ours++
		}
	}
	return cis, ours
}
