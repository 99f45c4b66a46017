package schema

// CallIDs is an [Exchange] that names some code calls itself: those its event stream showed
// the client while the model wrote them, before the loop ran them, so that the answer's
// code_interpreter_call items keep the ids the stream gave them.
type CallIDs interface {
	// CodeCallID returns the item id ("ci_…") the exchange gave the call of the function
	// number index (from 0, in the answer's order) of round (from 0), whose call id is callID;
	// or "" when it gave that call none, and the loop names it.
	CodeCallID(round, index int, callID string) string
}
