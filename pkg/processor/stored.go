package processor

import (
	"net/http"
	"strings"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/codeinterp/codeinterp/pkg/schema"
)

// storedAnswer answers, at its request headers, a GET or DELETE under a surface's path
// (GET /v1/responses/{id}, its input_items, DELETE /v1/responses/{id}) that is about an
// answer admission kept for the caller: the loop assembled that answer, and the upstream
// knows only its raw rounds (issue 24). It returns nil for any other request, which then goes
// on as before (upstream, untouched). Envoy sends a GET's request headers to the server on
// every route with the filter on (request_header_mode SEND): no route needs more.
func (st *streamState) storedAnswer(path string) *extprocv3.ProcessingResponse {
	m := st.headers.get(":method")
	if m != http.MethodGet && m != http.MethodDelete || st.route.Disabled {
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
	ans := st.srv.admission.Stored(sf, m, rest, query, st)
	if ans == nil {
		return nil
	}
	st.setOutcome("stored_answer")
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
