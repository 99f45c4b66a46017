package openai

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/codeinterp/codeinterp/pkg/schema/internal/jsonscan"
	"github.com/codeinterp/codeinterp/pkg/schema/internal/schematest"
)

// requestItemsSpec is the Responses surface's scan of a request: with its replayed
// code_interpreter_call input items.
var requestItemsSpec = jsonscan.Spec{Strict: RequestSpec.Strict, Items: "input", ItemType: "code_interpreter_call"}

// scanFuzzAddGolden adds the golden request bodies of OpenAI's surfaces as seeds.
func scanFuzzAddGolden(f *testing.F) {
	f.Helper()
	for _, surface := range []string{"responses", "chat"} {
		gives, err := filepath.Glob(filepath.Join("..", "..", surface, "testdata", "request", "*.give.json"))
		if err != nil || len(gives) == 0 {
			f.Fatalf("list the golden bodies of %s: %v", surface, err)
		}
		for _, path := range gives {
			b, err := os.ReadFile(path)
			if err != nil {
				f.Fatalf("read %s: %v", path, err)
			}
			f.Add(b)
		}
	}
}

// FuzzScanRequest checks Scan against encoding/json. Strict accepts exactly what
// json.Valid accepts. On valid JSON every mode accepts, and sees what encoding/json sees: the
// same top-level keys (decoded) with the same value spans, and under LooseItems the
// code_interpreter_call items of each top-level "input" array with their exact spans (every
// element whose "type" decodes to code_interpreter_call is among them; every one reported has
// such a "type" member). On malformed JSON the relaxed modes may accept only a body whose
// sanitized form (schematest.Sanitize) is valid, with the same view as the sanitized body.
func FuzzScanRequest(f *testing.F) {
	scanFuzzAddGolden(f)
	for _, s := range []string{
		`{"input":[{"type":"code_interpreter_call","id":"a"},{"type":"message"},1,{"t\u0079pe":"code\u005finterpreter_call"}]}`,
		`{"input":[{"type":"code_interpreter_call","type":"message"}],"input":[[],{"type":"code_interpreter_call"}]}`,
		"{\"model\":\"a\x01\\q\",\"input\":[{\"content\":\"\\\\\\\"\"}],\"tools\":[]}",
		` [ {"input" : [ {"type" : "code_interpreter_call"} ] } ] `,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		valid := json.Valid(body)
		strict, err := jsonscan.Scan(body, nil, nil)
		if (err == nil) != valid {
			t.Fatalf("Scan(%q, strict) error %v, json.Valid = %v", body, err, valid)
		}
		for _, mode := range []*jsonscan.Spec{&RequestSpec, &requestItemsSpec} {
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
				clean := schematest.Sanitize(body)
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
