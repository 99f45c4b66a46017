package openai

import (
	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/schema/internal/jsonscan"
)

// Dialect is what one of OpenAI's API surfaces does its own way where the code they share
// reads and writes bodies: OpenAI's Responses and Chat Completions have the same error shape,
// tool and tool_choice conventions and usage arithmetic, and differ in where a request keeps
// its conversation, where an answer keeps the model's calls, and how typed objects nest. Each
// surface package defines its Dialect; nothing here knows which surfaces exist.
type Dialect struct {
	// Spec is how closely a request is scanned: the members the rewrite reads or edits are
	// checked byte by byte, and the items Rewrite edits are reported.
	Spec *jsonscan.Spec
	// FieldsUnderType reports whether a typed object keeps its fields under a member named
	// after its type, as Chat Completions does: {"type":"function","function":{"name":…}} and
	// {"type":"allowed_tools","allowed_tools":{"mode":…,"tools":[…]}}; otherwise (Responses)
	// they sit beside "type".
	FieldsUnderType bool
	// Previous and Conversation, when set, name the top-level members that say what a request
	// continues from: an earlier answer's id, and a conversation (its id, or an object with
	// "id"). They are read into the Request for every request, one without the hosted tool too.
	Previous, Conversation string
	// Rewrite, if set, returns the surface's own edits of a request that has the hosted tool:
	// the replayed calls of the function named name become ordinary tool calls, and the ids
	// of the containers they name are returned. items are what the scan reported under Spec.
	Rewrite func(t jsonscan.TopLevel, items []jsonscan.Item, name string) (edits []jsonscan.Edit, containerIDs []string)
	// ReadTurn reads the calls of the function named name, and the client's calls, in an
	// answer whose top-level members are t.
	ReadTurn func(t jsonscan.TopLevel, name string) schema.Turn
	// Extend returns the edits of request rq, and the members to add to it, that extend it
	// by answer rs and the outputs of its calls.
	Extend func(rq, rs jsonscan.TopLevel, outs []schema.CallOutput) ([]jsonscan.Edit, []AddedMember, error)
	// KeepStream reports whether a request that asks for a stream is sent upstream asking for
	// one (the surface reads upstream event streams, and the first answer streams through to
	// the client); otherwise stream:true becomes stream:false.
	KeepStream bool
	// StreamOptions, when KeepStream, is the stream_options a streamed request is sent
	// upstream with instead of the client's (nil: none).
	StreamOptions []byte
	// OwnHosted reports that the request has a hosted tool of the surface's own, which the
	// surface rewrote into its function tool before this rewrite (Responses' shell): a request
	// without a code_interpreter tool is then rewritten too (Found, stream, tool_choice,
	// metadata, replays), without what only the code_interpreter tool gives (Tool, its
	// container).
	OwnHosted bool
}
