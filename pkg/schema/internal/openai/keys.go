package openai

import "github.com/codeinterp/codeinterp/pkg/schema/internal/jsonscan"

// TopKeys are the top-level keys the rewriter, the turn reader and the follow-up builder look up.
var TopKeys = jsonscan.Keys{
	"tools", "tool_choice", "stream", "stream_options", "metadata", "input",
	"messages", "output", "choices", "store", "conversation", "code", "background",
}

// RequestSpec is how closely a request body is checked: the values RewriteRequest reads or
// edits byte by byte; in the other values (the conversation above all) strings are only
// followed to their closing quote.
var RequestSpec = jsonscan.Spec{Strict: []string{"tools", "tool_choice", "stream", "stream_options", "metadata"}}
