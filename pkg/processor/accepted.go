package processor

// Acceptances hears of the callers the upstream has accepted on a real model call, so that a
// key check that cannot tell a key the upstream takes (a public GET /v1/models) need not be
// trusted: the Containers API then serves only identities it heard of (see
// containers.ModelCalls).
type Acceptances interface {
	// Accepted records that the upstream answered a model call of identity with a 2xx. It is
	// called on the stream's goroutine and must not block long.
	Accepted(identity string)
}

// noteAccepted tells the server's Acceptances, if any, that the upstream answered a served
// request with status code, when that is a 2xx and the caller has an identity (derived from
// the one credential the request carried upstream, or the identity header). A follow-up of the loop or a
// request passed through is not noted: its response phase is skipped.
func (st *streamState) noteAccepted(code string) {
	if st.srv.accepted == nil || st.callerID == nil || *st.callerID == "" || len(code) != 3 || code[0] != '2' {
		return
	}
	st.srv.accepted.Accepted(*st.callerID)
}
