package responses

import (
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/schema/internal/schematest"
)

// FuzzRewriteRequest checks RewriteRequest's promises on arbitrary bodies (see
// schematest.FuzzRewriteRequest): it never panics or modifies its input, every error is a
// *RequestError, and a successful rewrite that found the tool holds no code_interpreter tool
// (nor code_interpreter_call input item) and exactly one function tool of ours. The seeds are
// testdata/fuzz/FuzzRewriteRequest and the golden request bodies of both surfaces.
func FuzzRewriteRequest(f *testing.F) {
	schematest.FuzzRewriteRequest(f, schematest.RewriteFuzz{
		Rewrite: RewriteRequest,
		// The golden bodies of both of OpenAI's surfaces: a body of the other's shape is a seed too.
		Golden:   []string{"testdata", filepath.Join("..", "chat", "testdata")},
		ToolName: func(tool map[string]any) any { return tool["name"] },
		Check: func(t *testing.T, body []byte, got schema.Request) {
			if n := reqFuzzCountReplayed(t, got.Body); n != 0 {
				t.Fatalf("RewriteRequest(%q) = %q: %d code_interpreter_call input items left", body, got.Body, n)
			}
		},
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
