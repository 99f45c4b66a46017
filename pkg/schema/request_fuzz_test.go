package schema_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/schema/internal/jsonscan"
)

// FuzzRewriteRequest checks RewriteRequest's promises on arbitrary bodies for both surfaces: it
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
	f.Fuzz(func(t *testing.T, surface byte, body []byte) {
		s := Responses
		if surface%2 == 1 {
			s = Chat
		}
		in := bytes.Clone(body)
		got, err := RewriteRequest(s, body, schema.Options{})
		if !bytes.Equal(in, body) {
			t.Fatalf("RewriteRequest(%s, %q) modified its input", s, in)
		}
		valid := json.Valid(body)
		var re *schema.RequestError
		if err != nil {
			if !errors.As(err, &re) {
				t.Fatalf("RewriteRequest(%s, %q) error %v is not a *RequestError", s, body, err)
			}
			if re.Code == "invalid_json" && valid {
				t.Fatalf("RewriteRequest(%s, %q) refused valid JSON: %v", s, body, err)
			}
			return
		}
		if !valid {
			reqFuzzCheckLoose(t, s, body, got)
			return
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
				s, body, got.Body, cis, ours, schema.DefaultFunctionName)
		}
		if s == Responses {
			if n := reqFuzzCountReplayed(t, got.Body); n != 0 {
				t.Fatalf("RewriteRequest(%s, %q) = %q: %d code_interpreter_call input items left", s, body, got.Body, n)
			}
		}
	})
}

// reqFuzzAddGolden adds each golden request body as a seed, for both surfaces.
func reqFuzzAddGolden(f *testing.F) {
	f.Helper()
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
}

// reqFuzzCheckLoose checks got, what RewriteRequest made of body, a body json.Valid refuses.
func reqFuzzCheckLoose(t *testing.T, s Surface, body []byte, got schema.Request) {
	t.Helper()
	clean := reqFuzzSanitize(body)
	if !json.Valid(clean) {
		t.Fatalf("RewriteRequest(%s, %q) accepted a body that is malformed outside the strings it may let through (sanitized: %q)", s, body, clean)
	}
	want, err := RewriteRequest(s, clean, schema.Options{})
	if err != nil {
		t.Fatalf("RewriteRequest(%s, %q) accepted the body but refused it sanitized, %q: %v", s, body, clean, err)
	}
	if !got.Found {
		if !bytes.Equal(got.Body, body) || want.Found {
			t.Fatalf("RewriteRequest(%s, %q) = found %v, %q; sanitized: found %v", s, body, got.Found, got.Body, want.Found)
		}
		return
	}
	if back := reqFuzzSanitize(got.Body); !bytes.Equal(back, want.Body) {
		t.Fatalf("RewriteRequest(%s, %q) = %q, which sanitizes to %q; the sanitized body rewrites to %q", s, body, got.Body, back, want.Body)
	}
	got.Body, want.Body = nil, nil
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("RewriteRequest(%s, %q) = %+v; the sanitized body gives %+v", s, body, got, want)
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
		if name == schema.DefaultFunctionName {
			ours++
		}
	}
	return cis, ours
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
		_, _, scanErr := jsonscan.ScanTop(q)
		if (wantErr == nil) != (scanErr == nil) {
			t.Fatalf("ScanTop(%q) error %v, encoding/json error %v", q, scanErr, wantErr)
		}
		if wantErr != nil {
			return
		}
		got, ok := jsonscan.DecodeString(q)
		if !ok || got != want {
			t.Fatalf("DecodeString(%q) = %q, %v; encoding/json gives %q", q, got, ok, want)
		}
		if !jsonscan.StringIs(q, want) {
			t.Fatalf("StringIs(%q, %q) = false", q, want)
		}
		back := jsonscan.AppendString(nil, want)
		var again string
		if err := json.Unmarshal(back, &again); err != nil || again != want {
			t.Fatalf("AppendString(%q) = %q, which decodes to %q (error %v)", want, back, again, err)
		}
	})
}

// FuzzScanRequest checks Scan against encoding/json. Strict accepts exactly what
// json.Valid accepts. On valid JSON every mode accepts, and sees what encoding/json sees: the
// same top-level keys (decoded) with the same value spans, and under LooseItems the
// code_interpreter_call items of each top-level "input" array with their exact spans (every
// element whose "type" decodes to code_interpreter_call is among them; every one reported has
// such a "type" member). On malformed JSON the relaxed modes may accept only a body whose
// sanitized form (reqFuzzSanitize) is valid, with the same view as the sanitized body.
func FuzzScanRequest(f *testing.F) {
	reqFuzzAddGolden(f)
	for _, s := range []string{
		`{"input":[{"type":"code_interpreter_call","id":"a"},{"type":"message"},1,{"t\u0079pe":"code\u005finterpreter_call"}]}`,
		`{"input":[{"type":"code_interpreter_call","type":"message"}],"input":[[],{"type":"code_interpreter_call"}]}`,
		"{\"model\":\"a\x01\\q\",\"input\":[{\"content\":\"\\\\\\\"\"}],\"tools\":[]}",
		` [ {"input" : [ {"type" : "code_interpreter_call"} ] } ] `,
	} {
		f.Add(byte(0), []byte(s))
	}
	f.Fuzz(func(t *testing.T, _ byte, body []byte) {
		valid := json.Valid(body)
		strict, err := jsonscan.Scan(body, nil, nil)
		if (err == nil) != valid {
			t.Fatalf("Scan(%q, strict) error %v, json.Valid = %v", body, err, valid)
		}
		for _, mode := range []*jsonscan.Spec{&requestSpec, &requestItemsSpec} {
			got, err := jsonscan.Scan(body, mode, nil)
			switch {
			case err != nil && valid:
				t.Fatalf("Scan(%q, %p) refused valid JSON: %v", body, mode, err)
			case err != nil:
				continue
			case valid:
				if !reflect.DeepEqual(got.Members, strict.Members) || got.IsObject != strict.IsObject {
					t.Fatalf("Scan(%q, %p) members %v, strict scan %v", body, mode, got.Members, strict.Members)
				}
				reqFuzzCheckView(t, body, body, got, mode)
			default:
				clean := reqFuzzSanitize(body)
				if !json.Valid(clean) {
					t.Fatalf("Scan(%q, %p) accepted a body malformed outside strings (sanitized: %q)", body, mode, clean)
				}
				reqFuzzCheckView(t, body, clean, got, mode)
			}
		}
	})
}

// reqFuzzCheckView checks sc, what Scan(body, mode) returned, against encoding/json's view of
// clean, which is body or its sanitized form (same length, same structure).
func reqFuzzCheckView(t *testing.T, body, clean []byte, sc jsonscan.Scanned, mode *jsonscan.Spec) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(clean))
	tok, err := dec.Token()
	if err != nil {
		t.Fatalf("decode %q: %v", clean, err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		if sc.IsObject || len(sc.Members) != 0 || len(sc.Items) != 0 {
			t.Fatalf("Scan(%q, %p) = %+v for a body that is not an object", body, mode, sc)
		}
		return
	}
	if !sc.IsObject {
		t.Fatalf("Scan(%q, %p) missed the object", body, mode)
	}
	var wantItems []jsonscan.Item
	k := 0
	for ; dec.More(); k++ {
		tok, err := dec.Token()
		if err != nil {
			t.Fatalf("decode %q: %v", clean, err)
		}
		key := tok.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			t.Fatalf("decode %q: %v", clean, err)
		}
		end := int(dec.InputOffset())
		if k >= len(sc.Members) {
			t.Fatalf("Scan(%q, %p) found %d members, encoding/json more", body, mode, len(sc.Members))
		}
		m := sc.Members[k]
		gotKey, _ := jsonscan.DecodeString(clean[m.KeyStart:m.KeyEnd])
		if gotKey != key || m.ValStart != end-len(raw) || m.ValEnd != end {
			t.Fatalf("Scan(%q, %p) member %d = key %q value %d:%d, encoding/json: key %q value %d:%d",
				body, mode, k, gotKey, m.ValStart, m.ValEnd, key, end-len(raw), end)
		}
		if key == "input" && mode == &requestItemsSpec {
			wantItems = append(wantItems, reqFuzzCalls(t, clean, m.ValStart, raw)...)
		}
	}
	if k != len(sc.Members) {
		t.Fatalf("Scan(%q, %p) found %d members, encoding/json %d", body, mode, len(sc.Members), k)
	}
	// Every item encoding/json calls a code_interpreter_call must be reported; a reported item
	// may also be one whose last "type" says otherwise, as long as some "type" member qualifies.
	reported := map[jsonscan.Item]bool{}
	for _, it := range sc.Items {
		reported[it] = true
		if !reqFuzzHasCallType(clean[it.Start:it.End]) {
			t.Fatalf("Scan(%q, %p) reported item %+v %q, which has no code_interpreter_call type", body, mode, it, clean[it.Start:it.End])
		}
	}
	for _, it := range wantItems {
		if !reported[it] {
			t.Fatalf("Scan(%q, %p) items %+v miss %+v %q", body, mode, sc.Items, it, clean[it.Start:it.End])
		}
	}
}

// reqFuzzCalls returns the elements of raw, a top-level value starting at body[start], that
// encoding/json reads as objects whose "type" is "code_interpreter_call".
func reqFuzzCalls(t *testing.T, body []byte, start int, raw json.RawMessage) []jsonscan.Item {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('[') {
		return nil
	}
	var items []jsonscan.Item
	for idx := 0; dec.More(); idx++ {
		var elem json.RawMessage
		if err := dec.Decode(&elem); err != nil {
			t.Fatalf("decode %q: %v", raw, err)
		}
		end := start + int(dec.InputOffset())
		var obj struct {
			Type any `json:"type"`
		}
		if reqFuzzExactType(elem, &obj) && obj.Type == "code_interpreter_call" {
			items = append(items, jsonscan.Item{Index: idx, Start: end - len(elem), End: end})
		}
	}
	return items
}

// reqFuzzExactType decodes the "type" member of elem, an object, into obj with an exact
// (case-sensitive) key match, the last member winning; it reports whether elem is an object.
func reqFuzzExactType(elem json.RawMessage, obj *struct {
	Type any `json:"type"`
}) bool {
	var m map[string]json.RawMessage
	if json.Unmarshal(elem, &m) != nil {
		return false
	}
	if v, ok := m["type"]; ok {
		_ = json.Unmarshal(v, &obj.Type)
	}
	return true
}

// reqFuzzHasCallType reports whether elem, valid JSON, is an object with some member whose key
// is "type" and whose value is the string "code_interpreter_call".
func reqFuzzHasCallType(elem []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(elem))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return false
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		var v any
		if dec.Decode(&v) != nil {
			return false
		}
		if tok == "type" && v == "code_interpreter_call" {
			return true
		}
	}
	return false
}
