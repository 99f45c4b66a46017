package admission

import (
	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/store"
)

// Keeper is an exchange that keeps its assembled answer (and its input) for the requests that
// later read it by id (GET /v1/responses/{id}). Admission calls Keep after a 200 answer of a
// request whose hosted tool was rewritten, with the store of Config.Stored.
type Keeper interface {
	Keep(p store.Pending, identity string, final []byte)
}

// StoredServer is a surface that serves the answers its exchanges kept: rest is the request
// path after the surface's path, query its raw query string, body the request's body (nil
// when it has none); the answer's body is JSON, or an event
// stream when stream is set, which with live is not over yet (a background response still
// running: asked again later, it has more). It reports false for a request that is not about
// an answer kept for the caller, which then goes upstream untouched. identity is called only
// when the store may hold something.
type StoredServer interface {
	ServeStored(p store.Pending, identity func() string, method, rest, query string, body []byte) (status int, answer []byte, stream, live, ok bool)
}

// StoredAnswer is an answer admission gives in place of the upstream's.
type StoredAnswer struct {
	Status int
	// Body is JSON, or a text/event-stream when Stream is set.
	Body   []byte
	Stream bool
	// Live reports that the stream is not over: the response is still running, and the same
	// request asked again later answers more.
	Live bool
}

// StoredAnswers returns the store the answers are kept in (Config.Stored), nil when none is:
// a background response's record lives there.
func (a *Admission) StoredAnswers() store.Pending { return a.stored }

// Stored answers a request (GET, DELETE, POST …/cancel) under surface sf's path about an
// answer kept for the caller (see [StoredServer]); nil means the request is not one: it goes
// upstream untouched.
func (a *Admission) Stored(sf schema.Surface, method, rest, query string, body []byte, c Caller) *StoredAnswer {
	ss, ok := sf.(StoredServer)
	if !ok || a.stored == nil {
		return nil
	}
	status, answer, stream, live, ok := ss.ServeStored(a.stored, c.Identity, method, rest, query, body)
	if !ok {
		return nil
	}
	return &StoredAnswer{Status: status, Body: answer, Stream: stream, Live: live}
}

// keep keeps the answer final of the admitted request, when its exchange keeps answers.
func (ad *Admitted) keep(final []byte) {
	if k, ok := ad.x.(Keeper); ok && ad.a.stored != nil {
		k.Keep(ad.a.stored, ad.callerIdentity(), final)
	}
}
