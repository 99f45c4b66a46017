package openai

import (
	"errors"
	"fmt"

	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/schema/internal/jsonscan"
)

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
// is an error. When several outputs share a call id the first is used. With o.Stream the request
// asks for a stream (stream:true, and the dialect's StreamOptions when it has them); without, a
// stream:true becomes false and stream_options go. Everything else in req is kept byte for byte.
// FollowUp does not keep or modify its arguments.
func (d *Dialect) FollowUp(req, resp []byte, outputs []schema.CallOutput, o schema.FollowUpOptions) ([]byte, error) {
	// The request was read by RewriteRequest (or built by an earlier FollowUp): check it as
	// RewriteRequest does, so a body it accepted is accepted here too, and fast.
	scanned, err := jsonscan.Scan(req, &RequestSpec, nil)
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
	rs := TopKeys.Index(resp, respMembers)
	turn := d.readTurn(rs, schema.Options{FunctionName: o.FunctionName}.Name())
	body, _, err := d.followUp(TopKeys.Index(req, reqMembers), rs, turn, outputs, o)
	return body, err
}

// followUp is FollowUp on a request and an answer already read: rq and rs are their top-level
// members, turn the answer's calls. It also returns the top-level members of the body it
// builds, so that the next round need not scan it.
func (d *Dialect) followUp(rq, rs jsonscan.TopLevel, turn schema.Turn, outputs []schema.CallOutput, o schema.FollowUpOptions) ([]byte, []jsonscan.Member, error) {
	req, reqMembers := rq.B, rq.Members
	outs, err := followUpOutputs(turn, outputs)
	if err != nil {
		return nil, nil, err
	}

	var (
		edits   []jsonscan.Edit
		appends []AddedMember
	)
	if edits, appends, err = d.Extend(rq, rs, outs); err != nil {
		return nil, nil, err
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
		appends = append(appends, AddedMember{Key: "tool_choice", Value: choice})
	case o.DropToolChoice && k >= 0:
		edits = append(edits, jsonscan.RemoveMember(reqMembers, k))
	}

	switch k := rq.Find("stream"); {
	case o.Stream && k >= 0:
		m := reqMembers[k]
		edits = append(edits, jsonscan.Edit{Start: m.ValStart, End: m.ValEnd, Repl: []byte("true")})
	case o.Stream:
		appends = append(appends, AddedMember{Key: "stream", Value: []byte("true")})
	case k >= 0 && string(req[reqMembers[k].ValStart:reqMembers[k].ValEnd]) == "true":
		// The request before streamed (the client's, kept): this one asks for a whole answer.
		m := reqMembers[k]
		edits = append(edits, jsonscan.Edit{Start: m.ValStart, End: m.ValEnd, Repl: []byte("false")})
	}
	// stream_options go with a stream only (the API refuses them without one): a streamed
	// follow-up carries the dialect's, a whole answer none.
	switch k := rq.Find("stream_options"); {
	case o.Stream && d.StreamOptions != nil && k >= 0:
		m := reqMembers[k]
		edits = append(edits, jsonscan.Edit{Start: m.ValStart, End: m.ValEnd, Repl: d.StreamOptions})
	case o.Stream && d.StreamOptions != nil:
		appends = append(appends, AddedMember{Key: "stream_options", Value: d.StreamOptions})
	case !o.Stream && k >= 0:
		edits = append(edits, jsonscan.RemoveMember(reqMembers, k))
	}

	body, err := jsonscan.Apply(req, edits)
	if err != nil {
		return nil, nil, fmt.Errorf("follow up: %w", err)
	}
	members := jsonscan.Track(reqMembers, edits)
	if len(appends) == 0 {
		return body, members, nil
	}
	// Members are added once the other edits are in, so the comma before them reflects whether
	// any member is left.
	closeAt := jsonscan.CloseAt(body)
	adds := make([]jsonscan.Edit, 0, len(appends))
	for _, a := range appends {
		e := jsonscan.AppendMember(body, closeAt, a.Key, a.Value)
		if len(adds) > 0 && e.Repl[0] != ',' {
			e.Repl = append([]byte{','}, e.Repl...)
		}
		adds = append(adds, e)
	}
	if body, err = jsonscan.Apply(body, adds); err != nil {
		return nil, nil, fmt.Errorf("follow up: %w", err)
	}
	return body, jsonscan.Appended(body, members, adds), nil
}

// AddedMember is a top-level member FollowUp adds to the request.
type AddedMember struct {
	Key   string
	Value []byte
}

// followUpOutputs checks outputs against the function calls of resp and returns them with
// repeated call ids dropped.
func followUpOutputs(turn schema.Turn, outputs []schema.CallOutput) ([]schema.CallOutput, error) {
	if turn.ClientCalls > 0 {
		return nil, fmt.Errorf("follow up: the response also calls %d client tool(s), which only the client can answer", turn.ClientCalls)
	}
	calls := make(map[string]bool, len(turn.Calls))
	for _, c := range turn.Calls {
		calls[c.CallID] = true
	}
	answered := make(map[string]bool, len(outputs))
	outs := make([]schema.CallOutput, 0, len(outputs))
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
