package chat

import (
	"path/filepath"
	"testing"

	"github.com/codeinterp/codeinterp/pkg/schema/internal/schematest"
)

// FuzzRewriteRequest checks RewriteRequest's promises on arbitrary bodies (see
// schematest.FuzzRewriteRequest): it never panics or modifies its input, every error is a
// *RequestError, and a successful rewrite that found the tool holds no code_interpreter tool
// and exactly one function tool of ours (a tool's "function" object names it). The seeds are
// testdata/fuzz/FuzzRewriteRequest and the golden request bodies of both surfaces.
func FuzzRewriteRequest(f *testing.F) {
	schematest.FuzzRewriteRequest(f, schematest.RewriteFuzz{
		Rewrite: RewriteRequest,
		// The golden bodies of both of OpenAI's surfaces: a body of the other's shape is a seed too.
		Golden: []string{"testdata", filepath.Join("..", "responses", "testdata")},
		ToolName: func(tool map[string]any) any {
			fn, _ := tool["function"].(map[string]any)
			return fn["name"]
		},
	})
}
