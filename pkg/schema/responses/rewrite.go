package responses

import (
	"fmt"

	"github.com/codeinterp/codeinterp/pkg/schema/internal/jsonscan"
)

// reqReplayInput returns the edits that turn each code_interpreter_call item of the Responses
// input array at sp into a function_call item and a function_call_output item, and the
// container ids of those items. items are the elements of the array that may be such items, as
// Scan reported them (checked byte by byte); every other element is left as it is.
func reqReplayInput(b []byte, sp jsonscan.Span, items []jsonscan.Item, name string) (edits []jsonscan.Edit, containerIDs []string) {
	for _, it := range items {
		st, en := it.Start, it.End
		if st < sp.Start || en > sp.End || b[st] != '{' || !jsonscan.FieldIs(b, st, "type", "code_interpreter_call") {
			continue
		}
		var id, code, containerID string
		var outputs []byte
		jsonscan.EachMember(b, st, func(rawKey []byte, vs, ve int) bool {
			switch k, _ := jsonscan.DecodeString(rawKey); k {
			case "id":
				id, _ = jsonscan.Str(b, jsonscan.Span{Start: vs, End: ve})
			case "code":
				code, _ = jsonscan.Str(b, jsonscan.Span{Start: vs, End: ve})
			case "container_id":
				containerID, _ = jsonscan.Str(b, jsonscan.Span{Start: vs, End: ve})
			case "outputs":
				outputs = b[vs:ve]
			}
			return true
		})
		if id == "" {
			id = fmt.Sprintf("ci_replay_%d", it.Index)
		}
		if containerID != "" {
			containerIDs = append(containerIDs, containerID)
		}
		edits = append(edits, jsonscan.Edit{Start: st, End: en, Repl: reqCallPair(id, name, codeArguments(code), renderOutputs(outputs))})
	}
	return edits, containerIDs
}

// codeArguments is the function's arguments for code, as the model writes them.
func codeArguments(code string) string {
	return string(jsonscan.AppendString([]byte(`{"code":`), code)) + "}"
}

// reqCallPair returns a function_call item calling the function with arguments (a JSON text)
// and its function_call_output item, separated by a comma.
func reqCallPair(callID, name, arguments, output string) []byte {
	out := []byte(`{"type":"function_call","call_id":`)
	out = jsonscan.AppendString(out, callID)
	out = append(out, `,"name":`...)
	out = jsonscan.AppendString(out, name)
	out = append(out, `,"arguments":`...)
	out = jsonscan.AppendString(out, arguments)
	out = append(out, `},{"type":"function_call_output","call_id":`...)
	out = jsonscan.AppendString(out, callID)
	out = append(out, `,"output":`...)
	out = jsonscan.AppendString(out, output)
	return append(out, '}')
}
