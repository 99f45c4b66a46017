package schema

import (
	"errors"
	"fmt"
	"github.com/codeinterp/codeinterp/pkg/schema/internal/jsonscan"
	"slices"
)

// CallOutput is the text fed back to the model for one call.
type CallOutput struct {
	// CallID is the call's [Call.CallID].
	CallID string
	// Output is the text the model reads as the call's result.
	Output string
}

// FollowUpOptions tunes FollowUp. The zero value uses DefaultFunctionName and keeps tool_choice.
type FollowUpOptions struct {
	// FunctionName is the function's name; empty means DefaultFunctionName.
	FunctionName string
	// DropToolChoice removes tool_choice: a forced choice applies to the first round only.
	DropToolChoice bool
	// ToolChoice, when non-nil, is the raw tool_choice to send instead (for example a forced
	// allowed_tools relaxed to mode "auto"); it wins over DropToolChoice.
	ToolChoice []byte
	// ToolChoiceNone sets tool_choice to "none" (the loop's last round, so the model must answer
	// in text); it wins over the other two.
	ToolChoiceNone bool
}

// FollowUp builds the next upstream request from the previous request body req (what was last
// sent upstream), the model's answer resp, and the outputs of the calls run from it:
//
//   - Responses: input (a string becomes [{"role":"user","content":s}], an absent input an
//     empty list) + every item of resp.output in order (reasoning items, messages, the function
//     calls) + one function_call_output per output. Two exceptions: with store:false a
//     reasoning item without encrypted_content is left out (the upstream kept no copy to resolve
//     it by id), and when req names a conversation, input becomes the function_call_outputs
//     alone (the conversation already holds the earlier input and resp.output).
//   - Chat: messages + the assistant message of choices[0] (role, content, tool_calls and the
//     other fields a request accepts; response-only fields are dropped) + one
//     {"role":"tool","tool_call_id":…,"content":…} per output.
//
// Every call of the function in resp needs an output, and every output must answer one: a
// mismatch, or a call of a client tool in resp (which the client, not a follow-up, must answer),
// is an error. When several outputs share a call id the first is used. Everything else in req is
// kept byte for byte. FollowUp does not keep or modify its arguments.
func FollowUp(s Surface, req, resp []byte, outputs []CallOutput, o FollowUpOptions) ([]byte, error) {
	if s != Responses && s != Chat {
		return nil, fmt.Errorf("follow up: unknown surface %v", s)
	}
	// The request was read by RewriteRequest (or built by an earlier FollowUp): check it as
	// RewriteRequest does, so a body it accepted is accepted here too, and fast.
	scanned, err := jsonscan.Scan(req, &requestSpec, nil)
	if err != nil {
		return nil, fmt.Errorf("follow up: parse request: %w", err)
	}
	reqMembers, isObject := scanned.Members, scanned.IsObject
	if !isObject {
		return nil, errors.New("follow up: the request is not a JSON object")
	}
	respMembers, isObject, err := jsonscan.ScanTop(resp)
	if err != nil {
		return nil, fmt.Errorf("follow up: parse response: %w", err)
	}
	if !isObject {
		return nil, errors.New("follow up: the response is not a JSON object")
	}
	rq := topKeys.Index(req, reqMembers)
	rs := topKeys.Index(resp, respMembers)
	name := Options{FunctionName: o.FunctionName}.Name()

	outs, err := followUpOutputs(s, rs, name, outputs)
	if err != nil {
		return nil, err
	}

	var (
		edits   []jsonscan.Edit
		appends []followUpMember
	)
	switch s {
	case Responses:
		edits, appends, err = followUpResponses(rq, rs, outs)
	case Chat:
		edits, err = followUpChat(rq, rs, outs)
	}
	if err != nil {
		return nil, err
	}

	choice := o.ToolChoice
	if o.ToolChoiceNone {
		choice = []byte(`"none"`)
	}
	switch k := rq.Find("tool_choice"); {
	case choice != nil && k >= 0:
		m := reqMembers[k]
		edits = append(edits, jsonscan.Edit{Start: m.ValStart, End: m.ValEnd, Repl: choice})
	case choice != nil:
		appends = append(appends, followUpMember{key: "tool_choice", value: choice})
	case o.DropToolChoice && k >= 0:
		edits = append(edits, jsonscan.RemoveMember(reqMembers, k))
	}

	body, err := jsonscan.Apply(req, edits)
	if err != nil {
		return nil, fmt.Errorf("follow up: %w", err)
	}
	if len(appends) == 0 {
		return body, nil
	}
	// Members are added once the other edits are in, so the comma before them reflects whether
	// any member is left.
	closeAt := jsonscan.CloseAt(body)
	adds := make([]jsonscan.Edit, 0, len(appends))
	for _, a := range appends {
		e := jsonscan.AppendMember(body, closeAt, a.key, a.value)
		if len(adds) > 0 && e.Repl[0] != ',' {
			e.Repl = append([]byte{','}, e.Repl...)
		}
		adds = append(adds, e)
	}
	if body, err = jsonscan.Apply(body, adds); err != nil {
		return nil, fmt.Errorf("follow up: %w", err)
	}
	return body, nil
}

// followUpMember is a top-level member FollowUp adds to the request.
type followUpMember struct {
	key   string
	value []byte
}

// followUpOutputs checks outputs against the function calls of resp and returns them with
// repeated call ids dropped.
func followUpOutputs(s Surface, rs jsonscan.TopLevel, name string, outputs []CallOutput) ([]CallOutput, error) {
	turn, err := turnRead(s, rs, name)
	if err != nil {
		return nil, fmt.Errorf("follow up: %w", err)
	}
	if turn.ClientCalls > 0 {
		return nil, fmt.Errorf("follow up: the response also calls %d client tool(s), which only the client can answer", turn.ClientCalls)
	}
	calls := make(map[string]bool, len(turn.Calls))
	for _, c := range turn.Calls {
		calls[c.CallID] = true
	}
	answered := make(map[string]bool, len(outputs))
	outs := make([]CallOutput, 0, len(outputs))
	for _, out := range outputs {
		if !calls[out.CallID] {
			return nil, fmt.Errorf("follow up: output for call id %q, which the response does not call", out.CallID)
		}
		if answered[out.CallID] {
			continue
		}
		answered[out.CallID] = true
		outs = append(outs, out)
	}
	for id := range calls {
		if !answered[id] {
			return nil, fmt.Errorf("follow up: no output for call id %q", id)
		}
	}
	return outs, nil
}

// followUpResponses returns the edits that extend a Responses request's input, or the input
// member to add when the request has none.
func followUpResponses(rq, rs jsonscan.TopLevel, outs []CallOutput) ([]jsonscan.Edit, []followUpMember, error) {
	req, resp := rq.B, rs.B
	outItems := followUpOutputItems(outs)

	in := rq.Span("input")
	if conv := rq.Span("conversation"); conv.OK() && string(req[conv.Start:conv.End]) != "null" {
		// The conversation already holds the earlier input and the response's output.
		list := append(append([]byte{'['}, outItems...), ']')
		if !in.OK() {
			return nil, []followUpMember{{key: "input", value: list}}, nil
		}
		return []jsonscan.Edit{{Start: in.Start, End: in.End, Repl: list}}, nil, nil
	}

	output := rs.Span("output")
	if !output.OK() || resp[output.Start] != '[' {
		return nil, nil, errors.New("follow up: the response has no output list")
	}
	storeOff := false
	if sp := rq.Span("store"); sp.OK() {
		storeOff = string(req[sp.Start:sp.End]) == "false"
	}
	items := make([]byte, 0, output.End-output.Start+len(outItems)+1)
	jsonscan.EachElem(resp, output.Start, func(_, st, en int) bool {
		if storeOff && followUpUnresolvableReasoning(resp, st) {
			return true
		}
		if len(items) > 0 {
			items = append(items, ',')
		}
		items = append(items, resp[st:en]...)
		return true
	})
	if len(outItems) > 0 {
		if len(items) > 0 {
			items = append(items, ',')
		}
		items = append(items, outItems...)
	}

	e, ok, err := responsesInputEdit(req, in, items, false)
	switch {
	case err != nil:
		return nil, nil, fmt.Errorf("follow up: %w", err)
	case !ok:
		return nil, []followUpMember{{key: "input", value: append(append([]byte{'['}, items...), ']')}}, nil
	}
	return []jsonscan.Edit{e}, nil, nil
}

// responsesInputEdit returns the edit that adds items (comma-separated values) to the Responses
// input at in, at its front or at its end: a list gets them inside, a string s becomes
// [{"role":"user","content":s}] with the items after it (before it, front), null becomes the
// items' list. It returns false when there is no input (the caller adds the member), and an
// error when the input is something else.
func responsesInputEdit(b []byte, in jsonscan.Span, items []byte, front bool) (jsonscan.Edit, bool, error) {
	if !in.OK() {
		return jsonscan.Edit{}, false, nil
	}
	switch {
	case b[in.Start] == '[':
		if !front {
			return jsonscan.AppendElems(b, in.End-1, items), true, nil
		}
		repl := items
		if len(items) > 0 && jsonscan.SkipWS(b, in.Start+1) != in.End-1 {
			repl = append(slices.Clip(items), ',')
		}
		return jsonscan.Edit{Start: in.Start + 1, End: in.Start + 1, Repl: repl}, true, nil
	case b[in.Start] == '"':
		msg := append([]byte(`{"role":"user","content":`), b[in.Start:in.End]...)
		msg = append(msg, '}')
		parts := [2][]byte{msg, items}
		if front {
			parts = [2][]byte{items, msg}
		}
		list := []byte{'['}
		for _, p := range parts {
			if len(p) == 0 {
				continue
			}
			if len(list) > 1 {
				list = append(list, ',')
			}
			list = append(list, p...)
		}
		return jsonscan.Edit{Start: in.Start, End: in.End, Repl: append(list, ']')}, true, nil
	case string(b[in.Start:in.End]) == "null":
		return jsonscan.Edit{Start: in.Start, End: in.End, Repl: append(append([]byte{'['}, items...), ']')}, true, nil
	}
	return jsonscan.Edit{}, false, errors.New("the request's input is neither a string nor a list")
}

// followUpOutputItems returns the function_call_output items of outs, comma-separated.
func followUpOutputItems(outs []CallOutput) []byte {
	var items []byte
	for i, out := range outs {
		if i > 0 {
			items = append(items, ',')
		}
		items = append(items, `{"type":"function_call_output","call_id":`...)
		items = jsonscan.AppendString(items, out.CallID)
		items = append(items, `,"output":`...)
		items = jsonscan.AppendString(items, out.Output)
		items = append(items, '}')
	}
	return items
}

// PendingCall is a call of the internal function that an answer left out because the same turn
// also called a client function (the client got its own call to run), with the call's output:
// what a request continuing from that answer must carry for the model.
type PendingCall struct {
	// CallID is the call's id (Responses call_id, Chat tool call id).
	CallID string
	// Arguments is the call's arguments, as the model sent them.
	Arguments string
	// Output is the text the call's run fed back.
	Output string
}

// PrependCallOutputs puts a function_call_output item for each of calls at the front of a
// Responses request's input (a string input becomes [outputs…, {"role":"user","content":s}]),
// every other byte as it was. It answers the calls an earlier answer left pending upstream,
// which a request continuing from that answer (previous_response_id, conversation) must carry;
// the upstream holds the calls themselves.
func PrependCallOutputs(body []byte, calls []PendingCall) ([]byte, error) {
	if len(calls) == 0 {
		return body, nil
	}
	outs := make([]CallOutput, len(calls))
	for i, c := range calls {
		outs[i] = CallOutput{CallID: c.CallID, Output: c.Output}
	}
	t, err := topKeys.TopObject(body, "prepend call outputs")
	if err != nil {
		return nil, err
	}
	items := followUpOutputItems(outs)
	e, ok, err := responsesInputEdit(body, t.Span("input"), items, true)
	if err != nil {
		return nil, fmt.Errorf("prepend call outputs: %w", err)
	}
	if !ok {
		e = jsonscan.AppendMember(body, jsonscan.CloseAt(body), "input", append(append([]byte{'['}, items...), ']'))
	}
	return jsonscan.Apply(body, []jsonscan.Edit{e})
}

// followUpUnresolvableReasoning reports whether the item starting at b[st] is a reasoning item
// without encrypted_content, which an upstream that stored nothing cannot resolve.
func followUpUnresolvableReasoning(b []byte, st int) bool {
	if b[st] != '{' {
		return false
	}
	if typ, _ := jsonscan.Str(b, jsonscan.Field(b, st, "type")); typ != "reasoning" {
		return false
	}
	enc, _ := jsonscan.Str(b, jsonscan.Field(b, st, "encrypted_content"))
	return enc == ""
}

// followUpChat returns the edit that appends the assistant message and the tool messages to a
// Chat request's messages.
func followUpChat(rq, rs jsonscan.TopLevel, outs []CallOutput) ([]jsonscan.Edit, error) {
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

// ErrRewriteTooLarge is returned by a rewrite that would add more bytes to a request than its
// limit allows; the request is then left as it was.
var ErrRewriteTooLarge = errors.New("the rewrite would add more than its limit to the request")

// InsertChatCalls puts calls of the internal function back into a Chat request's history. For
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
func InsertChatCalls(body []byte, functionName string, limit int, pending func(callID string) []PendingCall) ([]byte, error) {
	// The same check RewriteRequest makes of a request, not a full one: conversation text is
	// only scanned for its end.
	sc, err := jsonscan.Scan(body, &requestSpec, nil)
	if err != nil {
		return nil, fmt.Errorf("insert chat calls: %w", err)
	}
	if !sc.IsObject {
		return nil, errors.New("insert chat calls: the body is not a JSON object")
	}
	b := body
	msgs := topKeys.Index(b, sc.Members).Span("messages")
	if !msgs.OK() || b[msgs.Start] != '[' {
		return nil, nil
	}
	name := Options{FunctionName: functionName}.Name()
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
		return nil, fmt.Errorf("insert chat calls: %w (%d bytes)", ErrRewriteTooLarge, limit)
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
