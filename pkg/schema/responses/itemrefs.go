package responses

import (
	"bytes"
	"strings"

	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/schema/internal/jsonscan"
	"github.com/codeinterp/codeinterp/pkg/store"
)

// kindItem is the kind of [store.Key] under which a code_interpreter_call item this server minted
// is kept, by its id: clients that keep their history as references (the Vercel AI SDK sends
// earlier items as {"type":"item_reference","id":…} when store is on) name it so, and no
// upstream can resolve an id it never issued. The entry is one [store.PendingCall]: the call's
// id, its arguments and the output the model read.
const kindItem = "responses.item"

// itemRefPrefix starts every code_interpreter_call id this server mints.
const itemRefPrefix = "ci_"

// rememberItems keeps, for identity, the code calls of the answer's rounds by their item ids,
// with the container each ran in, for the requests that reference them.
func rememberItems(p store.Continuations, identity string, rounds []schema.Round) {
	for _, rd := range rounds {
		for _, c := range rd.Calls {
			if !strings.HasPrefix(c.ID, itemRefPrefix) {
				continue
			}
			key := store.Key{Kind: kindItem, ID: c.ID}
			p.Put(identity, []store.PendingCall{{CallID: c.ID, Arguments: codeArguments(c.Code), Output: schema.RenderCodeOutputs(c.Outputs)}}, key)
			if c.ContainerID != "" {
				p.PutContainers(identity, []string{c.ContainerID}, key)
			}
		}
	}
}

// expandItemRefs returns body with each input item that references a code call kept for
// identity ({"type":"item_reference","id":"ci_…"}, or {"id":"ci_…"}, as the SDKs send a
// reference) replaced by the function_call and function_call_output pair the model saw, and the
// containers those calls ran in, in input order. A reference to any other id is left as it is,
// for the upstream to resolve. It reports whether it changed body.
func expandItemRefs(body []byte, input jsonscan.Span, name string, p store.Continuations, identity string) ([]byte, []string, bool, error) {
	if !input.OK() || body[input.Start] != '[' || !mayReference(body[input.Start:input.End]) {
		return body, nil, false, nil
	}
	var edits []jsonscan.Edit
	var containers []string
	jsonscan.EachElem(body, input.Start, func(_, st, en int) bool {
		id, ok := itemRef(body, st)
		if !ok {
			return true
		}
		key := store.Key{Kind: kindItem, ID: id}
		calls := p.Get(identity, key)
		if len(calls) != 1 {
			return true
		}
		c := calls[0]
		repl := reqCallPair(c.CallID, name, c.Arguments, c.Output)
		switch {
		case strings.HasPrefix(id, shellCallPrefix):
			// A shell call's two items are referenced one by one (the Vercel AI SDK references
			// the call and rebuilds its output): each becomes its half of the pair.
			repl = functionCallItem(c.CallID, ShellFunctionName, c.Arguments)
		case strings.HasPrefix(id, shellOutputPrefix):
			repl = functionCallOutputItem(c.CallID, c.Output)
		}
		edits = append(edits, jsonscan.Edit{Start: st, End: en, Repl: repl})
		containers = append(containers, p.Containers(identity, key)...)
		return true
	})
	if len(edits) == 0 {
		return body, nil, false, nil
	}
	out, err := jsonscan.Apply(body, edits)
	if err != nil {
		return nil, nil, false, err
	}
	return out, containers, true, nil
}

// itemRef returns the id of the item reference at b[st], when it is one to a code call this
// server may have minted: an object with an "id" starting with "ci_" and, besides it, at most
// "type": "item_reference".
func itemRef(b []byte, st int) (string, bool) {
	if b[st] != '{' {
		return "", false
	}
	var id string
	ok := true
	jsonscan.EachMember(b, st, func(rawKey []byte, vs, ve int) bool {
		switch k, _ := jsonscan.DecodeString(rawKey); k {
		case "id":
			id, ok = jsonscan.Str(b, jsonscan.Span{Start: vs, End: ve})
		case "type":
			ok = jsonscan.StringIs(b[vs:ve], "item_reference")
		default:
			ok = false
		}
		return ok
	})
	return id, ok && minted(id)
}

// minted reports whether id may be the id of an item this server minted: a code call's
// ("ci_…"), or a shell call's ("sh_…") or its output's ("sho_…").
func minted(id string) bool {
	return strings.HasPrefix(id, itemRefPrefix) || strings.HasPrefix(id, shellCallPrefix) || strings.HasPrefix(id, shellOutputPrefix)
}

// mayReference reports whether the input b may reference an item this server minted.
func mayReference(b []byte) bool {
	return bytes.Contains(b, []byte(`"`+itemRefPrefix)) || bytes.Contains(b, []byte(`"`+shellCallPrefix)) ||
		bytes.Contains(b, []byte(`"`+shellOutputPrefix))
}
