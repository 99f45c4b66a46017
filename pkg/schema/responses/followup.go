package responses

import (
	"errors"
	"fmt"
	"slices"

	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/schema/internal/openai"

	"github.com/codeinterp/codeinterp/pkg/schema/internal/jsonscan"
	"github.com/codeinterp/codeinterp/pkg/store"
)

// followUpResponses returns the edits that extend a Responses request's input, or the input
// member to add when the request has none.
func followUpResponses(rq, rs jsonscan.TopLevel, outs []schema.CallOutput) ([]jsonscan.Edit, []openai.AddedMember, error) {
	req, resp := rq.B, rs.B
	outItems := followUpOutputItems(outs)

	in := rq.Span("input")
	if conv := rq.Span("conversation"); conv.OK() && string(req[conv.Start:conv.End]) != "null" {
		// The conversation already holds the earlier input and the response's output.
		list := append(append([]byte{'['}, outItems...), ']')
		if !in.OK() {
			return nil, []openai.AddedMember{{Key: "input", Value: list}}, nil
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
		return nil, []openai.AddedMember{{Key: "input", Value: append(append([]byte{'['}, items...), ']')}}, nil
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
func followUpOutputItems(outs []schema.CallOutput) []byte {
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

// prependCallOutputs puts a function_call_output item for each of calls at the front of a
// Responses request's input (a string input becomes [outputs…, {"role":"user","content":s}]),
// every other byte as it was. It answers the calls an earlier answer left pending upstream,
// which a request continuing from that answer (previous_response_id, conversation) must carry;
// the upstream holds the calls themselves.
func prependCallOutputs(body []byte, calls []store.PendingCall) ([]byte, error) {
	if len(calls) == 0 {
		return body, nil
	}
	outs := make([]schema.CallOutput, len(calls))
	for i, c := range calls {
		outs[i] = schema.CallOutput{CallID: c.CallID, Output: c.Output}
	}
	t, err := openai.TopKeys.TopObject(body, "prepend call outputs")
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
