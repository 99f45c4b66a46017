package processor

import (
	"net/http"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/codeinterp/codeinterp/pkg/admission"
	"github.com/codeinterp/codeinterp/pkg/schema"
)

// storedAnswer answers, at its request headers, a GET, DELETE or POST …/cancel under a
// surface's path (GET /v1/responses/{id}, its input_items, DELETE /v1/responses/{id}, POST
// /v1/responses/{id}/cancel of a background response) that is about an
// answer admission kept for the caller: the loop assembled that answer, and the upstream
// knows only its raw rounds (issue 24). A GET with a body (openai-go sends retrieve's
// "stream": true as a JSON body) is answered at its body instead: the answer asks for it. It
// returns nil for any other request, which then goes on as before (upstream, untouched).
// Envoy sends a GET's request headers to the server on every route with the filter on
// (request_header_mode SEND): no route needs more.
func (st *streamState) storedAnswer(path string, end bool) *extprocv3.ProcessingResponse {
	m := st.headers.get(":method")
	if m != http.MethodGet && m != http.MethodDelete && m != http.MethodPost || st.route.Disabled {
		return nil
	}
	sf, rest, ok := st.srv.resourceOf(path)
	if !ok {
		return nil
	}
	_, query, _ := strings.Cut(st.path, "?")
	if i := strings.IndexByte(query, '#'); i >= 0 {
		query = query[:i]
	}
	if m == http.MethodPost {
		if _, ok := cancelledID(rest); !ok {
			return nil
		}
	}
	ans := st.srv.admission.Stored(sf, m, rest, query, nil, st)
	if ans == nil {
		return nil
	}
	if id, ok := cancelledID(rest); ok && m == http.MethodPost && ans.Status == http.StatusOK {
		// The run stops at once when it runs here; elsewhere its replica reads the store.
		st.srv.bg.cancelRun(id)
	}
	if !end && m == http.MethodGet && !st.streamedRequest() {
		// Reading it has no effect: asked again with the body, it answers the same or more.
		st.stored = &storedRequest{surface: sf, rest: rest, query: query}
		return &extprocv3.ProcessingResponse{
			Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{
				Response: &extprocv3.CommonResponse{HeaderMutation: removeReserved(st.headers.reserved())},
			}},
			ModeOverride: storedBodyMode,
		}
	}
	var release func()
	if ans.Live {
		var refused *extprocv3.ProcessingResponse
		if release, refused = st.followReader(sf); refused != nil {
			return refused
		}
	}
	if ans.Live && st.canStreamLive() {
		st.followLive(sf, startingAfterOf(query), askAfter(query, func(q string) *admission.StoredAnswer {
			return st.srv.admission.Stored(sf, m, rest, q, nil, st)
		}), release)
		st.setOutcome("stored_answer")
		return &extprocv3.ProcessingResponse{
			Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{
				Response: &extprocv3.CommonResponse{HeaderMutation: removeReserved(st.headers.reserved())},
			}},
			ModeOverride: liveHeadersMode,
		}
	}
	if release != nil {
		defer release()
	}
	return st.followStored(ans, func() *admission.StoredAnswer { return st.srv.admission.Stored(sf, m, rest, query, nil, st) })
}

// followReader takes a place for the caller's reader of a running response's stream, and
// returns the func that gives it back, or, past the caller's bound (see runner.follow), the
// native 429 that answers the request instead.
func (st *streamState) followReader(sf schema.Surface) (func(), *extprocv3.ProcessingResponse) {
	release, err := st.srv.bg.follow(st.Identity())
	if err != nil {
		st.setOutcome("client_error")
		return nil, immediate(http.StatusTooManyRequests, jsonContentType,
			sf.ErrorBody(&schema.RequestError{Status: http.StatusTooManyRequests, Message: err.Error(), Code: "rate_limit_exceeded"}),
			"codeinterp_live_stream_limit")
	}
	return release, nil
}

// removeReserved is the header mutation that removes the reserved headers named, nil for none.
func removeReserved(names []string) *extprocv3.HeaderMutation {
	if len(names) == 0 {
		return nil
	}
	return &extprocv3.HeaderMutation{RemoveHeaders: names}
}

// storedRequest is a GET about a stored answer whose body the server waits for.
type storedRequest struct {
	surface     schema.Surface
	rest, query string
}

// storedBodyMode asks for a GET's body, and its response headers: a running response's stream
// is delivered live through the upstream's answer (see followLive); any other answer is an
// ImmediateResponse at the body, which has no response phase.
var storedBodyMode = &filterv3.ProcessingMode{
	RequestBodyMode:    filterv3.ProcessingMode_BUFFERED,
	ResponseHeaderMode: filterv3.ProcessingMode_SEND,
	ResponseBodyMode:   filterv3.ProcessingMode_NONE,
}

// storedBody answers the body of a GET about a stored answer (see storedAnswer).
func (st *streamState) storedBody(body []byte) *extprocv3.ProcessingResponse {
	r := st.stored
	st.stored = nil
	ans := st.srv.admission.Stored(r.surface, http.MethodGet, r.rest, r.query, body, st)
	if ans == nil {
		// Gone meanwhile (expired): the upstream answers, as for any other id.
		return continueBody
	}
	var release func()
	if ans.Live {
		var refused *extprocv3.ProcessingResponse
		if release, refused = st.followReader(r.surface); refused != nil {
			return refused
		}
	}
	if ans.Live && st.canStreamLive() {
		st.followLive(r.surface, startingAfterOf(r.query), askAfter(r.query, func(q string) *admission.StoredAnswer {
			return st.srv.admission.Stored(r.surface, http.MethodGet, r.rest, q, body, st)
		}), release)
		st.setOutcome("stored_answer")
		return continueBody
	}
	if release != nil {
		defer release()
	}
	return st.followStored(ans, func() *admission.StoredAnswer {
		return st.srv.admission.Stored(r.surface, http.MethodGet, r.rest, r.query, body, st)
	})
}

// storedImmediate is the client's answer of a stored answer.
func (st *streamState) storedImmediate(ans *admission.StoredAnswer) *extprocv3.ProcessingResponse {
	st.setOutcome("stored_answer")
	if ans.Stream {
		return immediateWith(ans.Status, []*corev3.HeaderValueOption{
			setHeader("content-type", "text/event-stream; charset=utf-8"), setHeader("cache-control", "no-cache"),
		}, ans.Body, "codeinterp_stored_answer")
	}
	return immediate(ans.Status, "application/json", ans.Body, "codeinterp_stored_answer")
}

// resourceOf returns the surface whose served path path is under ("/v1/responses/{id}" is
// under "/v1/responses"), and the rest of path after it.
func (s *Server) resourceOf(path string) (schema.Surface, string, bool) {
	for p, sf := range s.paths {
		if rest, ok := strings.CutPrefix(path, p); ok && strings.HasPrefix(rest, "/") {
			return sf, rest, true
		}
	}
	return nil, "", false
}
