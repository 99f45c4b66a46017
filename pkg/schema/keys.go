package schema

import "github.com/codeinterp/codeinterp/pkg/schema/internal/jsonscan"

// topKeys are the top-level keys the rewriter, the turn reader and the follow-up builder look up.
var topKeys = jsonscan.Keys{
	"tools", "tool_choice", "stream", "stream_options", "metadata", "input",
	"messages", "output", "choices", "store", "conversation", "code",
}

// requestSpec is how closely a request body is checked: the values RewriteRequest reads or
// edits byte by byte; in the other values (the conversation above all) strings are only
// followed to their closing quote. requestItemsSpec also reports the elements of "input" that
// may be code_interpreter_call items, each checked byte by byte.
var (
	requestSpec      = jsonscan.Spec{Strict: []string{"tools", "tool_choice", "stream", "stream_options", "metadata"}}
	requestItemsSpec = jsonscan.Spec{Strict: requestSpec.Strict, Items: "input", ItemType: "code_interpreter_call"}
)
