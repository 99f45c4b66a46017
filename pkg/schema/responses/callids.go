package responses

import (
	"github.com/codeinterp/codeinterp/pkg/schema"
)

var _ schema.CallIDs = (*exchange)(nil)

// liveCalls is what the exchange's event stream learned of the rounds as they streamed.
type liveCalls struct {
	// ids are the item ids the stream gave the calls it showed, by round and index.
	ids map[liveKey]liveID
	// followUps counts the follow-ups built; textOnly reports that the last one told the
	// model to answer in text (tool_choice "none"): the calls of its answer never run, and
	// the answer leaves them out.
	followUps int
	textOnly  bool
	// named is the id of the response.created of the first answer's stream, when that
	// started the client's: the answer keeps it.
	named string
}

type liveKey struct{ round, index int }

type liveID struct{ id, callID string }

// CodeCallID implements [schema.CallIDs].
func (x *exchange) CodeCallID(round, index int, callID string) string {
	if _, ok := x.shellCalls[callID]; ok {
		// A shell call: its items are named "sh_…" and "sho_…".
		return schema.NewItemID(shellCallPrefix)
	}
	v, ok := x.live.ids[liveKey{round, index}]
	if !ok || v.callID != callID {
		return ""
	}
	return v.id
}

// streamCallID names the call of the function number index of round, with call id callID,
// that the stream shows before it runs.
func (x *exchange) streamCallID(round, index int, callID string) string {
	if x.live.ids == nil {
		x.live.ids = make(map[liveKey]liveID)
	}
	id := schema.NewItemID("ci_")
	x.live.ids[liveKey{round, index}] = liveID{id: id, callID: callID}
	return id
}

// textOnlyRound reports whether the answer of round was asked for in text only: its calls of
// the function never run.
func (x *exchange) textOnlyRound(round int) bool {
	return round > 0 && round == x.live.followUps && x.live.textOnly
}

// FollowUp implements [schema.Exchange].
func (x *exchange) FollowUp(outputs []schema.CallOutput, o schema.FollowUpOptions) ([]byte, error) {
	body, err := x.Exchange.FollowUp(x.shellOutputs(outputs), o)
	if err == nil {
		x.live.followUps++
		x.live.textOnly = o.ToolChoiceNone
	}
	return body, err
}
