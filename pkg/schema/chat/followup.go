package chat

import (
	"errors"
	"fmt"

	"github.com/codeinterp/codeinterp/pkg/schema/internal/openai"

	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/schema/internal/jsonscan"
	"github.com/codeinterp/codeinterp/pkg/store"
)

// followUpChat returns the edit that appends the assistant message and the tool messages to a
// Chat request's messages.
func followUpChat(rq, rs jsonscan.TopLevel, outs []schema.CallOutput) ([]jsonscan.Edit, error) {
	req, resp := rq.B, rs.B
	msgs := rq.Span("messages")
	if !msgs.OK() || req[msgs.Start] != '[' {
		return nil, errors.New("follow up: the request has no messages list")
	}
	msg := turnChatMessage(rs)
	if !msg.OK() {
		return nil, errors.New("follow up: the response has no choices[0].message")
	}
	elems := followUpAssistant(resp, msg)
	for _, out := range outs {
		elems = append(elems, `,{"role":"tool","tool_call_id":`...)
		elems = jsonscan.AppendString(elems, out.CallID)
		elems = append(elems, `,"content":`...)
		elems = jsonscan.AppendString(elems, out.Output)
		elems = append(elems, '}')
	}
	return []jsonscan.Edit{jsonscan.AppendElems(req, msgs.End-1, elems)}, nil
}

// followUpAssistant returns the assistant message of a Chat response as a request message: the
// members a request accepts, with their bytes as the response had them. audio keeps only its id;
// null values, an empty tool_calls list and response-only fields (annotations, …) are dropped.
// reasoning_content, which some OpenAI-compatible backends want back, is kept.
func followUpAssistant(b []byte, msg jsonscan.Span) []byte {
	out := []byte{'{'}
	add := func(key []byte, val []byte) {
		if len(out) > 1 {
			out = append(out, ',')
		}
		out = append(out, key...)
		out = append(out, ':')
		out = append(out, val...)
	}
	hasRole := false
	jsonscan.EachMember(b, msg.Start, func(rawKey []byte, vs, ve int) bool {
		v := b[vs:ve]
		switch k, _ := jsonscan.DecodeString(rawKey); k {
		case "role":
			hasRole = true
			add(rawKey, v)
		case "content":
			add(rawKey, v)
		case "refusal", "name", "reasoning_content":
			if v[0] == '"' {
				add(rawKey, v)
			}
		case "tool_calls":
			if v[0] == '[' && jsonscan.SkipWS(b, vs+1) < ve-1 {
				add(rawKey, v)
			}
		case "function_call":
			if v[0] == '{' {
				add(rawKey, v)
			}
		case "audio":
			if id := jsonscan.Field(b, vs, "id"); id.OK() && b[id.Start] == '"' {
				add(rawKey, append(append([]byte(`{"id":`), b[id.Start:id.End]...), '}'))
			}
		}
		return true
	})
	if !hasRole {
		role := []byte(`"role":"assistant"`)
		if len(out) > 1 {
			role = append(role, ',')
		}
		out = append(out[:1], append(role, out[1:]...)...)
	}
	return append(out, '}')
}

// insertCalls puts calls of the internal function back into a Chat request's history. For
// every assistant message with a tool call for which pending returns calls (pending is asked
// each tool call id of each assistant message), those calls are appended to the message's
// tool_calls and a tool message with each one's output is put right after the message. Each
// pending call is put in at most once per body, after the first message that asks for it, and
// not at all when the body already has a tool call of its id: a request that replays one
// message many times gets it once. Every other byte stays as it was. It returns nil when
// nothing was added, and ErrRewriteTooLarge (checked while building) when the additions would
// exceed limit bytes; limit ≤ 0 means no limit.
//
// A Chat answer that called the code function and a client function is returned with the
// client's call only; the client's next request replays that message, and this gives the model
// back its code call and what it printed.
func insertCalls(body []byte, functionName string, limit int, pending func(callID string) []store.PendingCall) ([]byte, error) {
	// The same check RewriteRequest makes of a request, not a full one: conversation text is
	// only scanned for its end.
	sc, err := jsonscan.Scan(body, &openai.RequestSpec, nil)
	if err != nil {
		return nil, fmt.Errorf("insert chat calls: %w", err)
	}
	if !sc.IsObject {
		return nil, errors.New("insert chat calls: the body is not a JSON object")
	}
	b := body
	msgs := openai.TopKeys.Index(b, sc.Members).Span("messages")
	if !msgs.OK() || b[msgs.Start] != '[' {
		return nil, nil
	}
	name := schema.Options{FunctionName: functionName}.Name()
	// have holds the ids of every tool call of the body and of every call put in so far.
	have := map[string]bool{}
	eachAssistantCall := func(fn func(st, en int, tc jsonscan.Span, ids []string) bool) {
		jsonscan.EachElem(b, msgs.Start, func(_, st, en int) bool {
			if b[st] != '{' || !jsonscan.FieldIs(b, st, "role", "assistant") {
				return true
			}
			tc := jsonscan.Field(b, st, "tool_calls")
			if !tc.OK() || b[tc.Start] != '[' {
				return true
			}
			var ids []string
			jsonscan.EachElem(b, tc.Start, func(_, cs, _ int) bool {
				if b[cs] == '{' {
					if id, ok := jsonscan.Str(b, jsonscan.Field(b, cs, "id")); ok {
						ids = append(ids, id)
					}
				}
				return true
			})
			return fn(st, en, tc, ids)
		})
	}
	eachAssistantCall(func(_, _ int, _ jsonscan.Span, ids []string) bool {
		for _, id := range ids {
			have[id] = true
		}
		return true
	})
	var (
		edits  []jsonscan.Edit
		added  int
		tooBig bool
	)
	// asked holds the client call ids already looked up: a repeated message asks nothing more.
	asked := map[string]bool{}
	eachAssistantCall(func(_, en int, tc jsonscan.Span, ids []string) bool {
		var calls, tools []byte
		for _, id := range ids {
			if asked[id] {
				continue
			}
			asked[id] = true
			for _, c := range pending(id) {
				if have[c.CallID] {
					continue
				}
				have[c.CallID] = true
				calls = append(calls, ',')
				calls = append(calls, `{"id":`...)
				calls = jsonscan.AppendString(calls, c.CallID)
				calls = append(calls, `,"type":"function","function":{"name":`...)
				calls = jsonscan.AppendString(calls, name)
				calls = append(calls, `,"arguments":`...)
				calls = jsonscan.AppendString(calls, c.Arguments)
				calls = append(calls, "}}"...)
				tools = append(tools, `,{"role":"tool","tool_call_id":`...)
				tools = jsonscan.AppendString(tools, c.CallID)
				tools = append(tools, `,"content":`...)
				tools = jsonscan.AppendString(tools, c.Output)
				tools = append(tools, '}')
				if limit > 0 && added+len(calls)+len(tools) > limit {
					tooBig = true
					return false
				}
			}
		}
		if calls != nil {
			added += len(calls) + len(tools)
			edits = append(edits, jsonscan.AppendElems(b, tc.End-1, calls[1:]), jsonscan.Edit{Start: en, End: en, Repl: tools})
		}
		return true
	})
	if tooBig {
		return nil, fmt.Errorf("insert chat calls: %w (%d bytes)", schema.ErrRewriteTooLarge, limit)
	}
	if edits == nil {
		return nil, nil
	}
	out, err := jsonscan.Apply(b, edits)
	if err != nil {
		return nil, fmt.Errorf("insert chat calls: %w", err)
	}
	return out, nil
}
