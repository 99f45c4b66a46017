package processor

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"go.uber.org/zap"

	"github.com/codeinterp/codeinterp/pkg/admission"
	"github.com/codeinterp/codeinterp/pkg/schema"
)

// streamKind says what the server does with a stream's request after its request headers.
type streamKind int

const (
	kindUndecided   streamKind = iota
	kindPassThrough            // not ours: no bodies, no response phase
	kindServed                 // a served path: the body decides
	kindNoTool                 // served, but the body has no code_interpreter tool
	kindRewritten              // the body's code_interpreter tool was rewritten
)

// streamState is the per-stream state. It is used by the stream's goroutine only.
type streamState struct {
	srv   *Server
	ctx   context.Context
	send  func(*extprocv3.ProcessingResponse) error
	route *Route
	// log is made on first use (see logger): most streams never log.
	log *zap.Logger

	kind      streamKind
	surface   schema.Surface
	path      string
	headers   headerMap
	requestID string
	// callerID is the caller's identity once computed (see Identity), nil before.
	callerID *string
	// exchange is the request's exchange on its surface, once its body has been read, and
	// admitted what admission decided of it.
	exchange schema.Exchange
	admitted *admission.Admitted
	// stored is a GET about a stored answer whose body is awaited (see storedAnswer).
	stored *storedRequest
	// following is a running background response's stream the server writes once the
	// upstream has answered (see followLive), nil otherwise.
	following *liveStored
	// protocol is the filter's configured modes, as Envoy's first message gave them.
	protocol *extprocv3.ProtocolConfiguration
	// request is a served request whose body arrives FULL_DUPLEX_STREAMED (the configured
	// mode) while its headers answer is held; nil otherwise, and once it has been answered.
	request *heldRequest
	// requestEcho answers the request body chunks of a configured FULL_DUPLEX_STREAMED request
	// that the server leaves as they are.
	requestEcho echo
	// delivery sends the response, chosen once at the response headers (see responseHeaders).
	delivery delivery
	// live is the client's stream while a loop streams it (see runStreamed), else nil.
	live *liveAnswer
	// outcome is the stream's outcome, as the metrics count it; see setOutcome.
	outcome string
	// sentAt is when the rewritten request went upstream (the loop's first round, for
	// telemetry).
	sentAt time.Time
}

// liveAnswer is a client's stream that a loop is writing: how it reaches Envoy, and the
// surface's encoder of its events.
type liveAnswer struct {
	em   *emitter
	sink schema.Sink
}

// logger returns the stream's logger, with the request id.
func (st *streamState) logger() *zap.Logger {
	if st.log == nil {
		st.log = st.srv.log.With(zap.String("request_id", st.requestID))
	}
	return st.log
}

// setOutcome records how the stream ended, for the metrics (see finish). It is the only
// writer of st.outcome; a later outcome replaces an earlier one.
func (st *streamState) setOutcome(o string) { st.outcome = o }

// handle answers one message from Envoy.
func (st *streamState) handle(req *extprocv3.ProcessingRequest) error {
	if pc := req.GetProtocolConfig(); pc != nil && st.protocol == nil {
		st.protocol = pc
		st.noteConfiguredFullDuplex()
	}
	switch r := req.Request.(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		return st.reply(st.requestHeaders(r.RequestHeaders))
	case *extprocv3.ProcessingRequest_RequestBody:
		if st.streamedRequest() {
			return st.requestChunk(r.RequestBody)
		}
		return st.send(st.requestBody(r.RequestBody))
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		return st.reply(st.responseHeaders(r.ResponseHeaders))
	case *extprocv3.ProcessingRequest_ResponseBody:
		return st.deliver().body(st, req, r.ResponseBody)
	case *extprocv3.ProcessingRequest_RequestTrailers:
		if st.request != nil {
			// The body ended with trailers (in FULL_DUPLEX_STREAMED, Envoy sends them after
			// the last chunk, which then does not end the stream).
			if err := st.requestEnd(false); err != nil {
				return err
			}
		}
		return st.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestTrailers{
			RequestTrailers: &extprocv3.TrailersResponse{}}})
	case *extprocv3.ProcessingRequest_ResponseTrailers:
		if done, err := st.deliver().trailers(st, req); err != nil || done {
			return err
		}
		return st.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseTrailers{
			ResponseTrailers: &extprocv3.TrailersResponse{}}})
	default:
		return fmt.Errorf("unexpected message %T", req.Request)
	}
}

// deliver returns the stream's delivery; a stream whose response headers the server did not
// see passes its response through.
func (st *streamState) deliver() delivery {
	if st.delivery == nil {
		st.delivery = st.passThrough()
	}
	return st.delivery
}

// finish records the stream's outcome when it ends.
func (st *streamState) finish() {
	if st.delivery != nil {
		st.delivery.close()
	}
	if st.following != nil {
		// A live stream whose upstream never answered (the client left first).
		st.following.close()
	}
	outcome := st.outcome
	if outcome == "" {
		switch st.kind {
		case kindPassThrough:
			outcome = "pass_through"
		case kindNoTool:
			outcome = "plain"
		default:
			outcome = "incomplete"
		}
	}
	st.srv.metrics.stream(outcome)
}

// requestHeaders decides what the stream is: a served API call, our loop's own follow-up, or
// anything else. Client-sent x-codeinterp-* headers are always removed.
func (st *streamState) requestHeaders(h *extprocv3.HttpHeaders) *extprocv3.ProcessingResponse {
	st.headers = newHeaderMap(h.GetHeaders())
	st.requestID = st.headers.get("x-request-id")
	reserved := st.headers.reserved()

	st.path = st.headers.get(":path")
	path := pathOnly(st.path)
	surface, served := st.srv.paths[path]

	if sig := st.headers.get(followUpHeader); sig != "" {
		if st.srv.signer.verifyFollowUp(sig, path, st.Identity(), st.srv.now()) {
			st.setOutcome("follow_up")
			return passThrough(reserved)
		}
	}
	if !served {
		if ans := st.storedAnswer(path, h.GetEndOfStream()); ans != nil {
			return ans
		}
	}
	if !served || st.headers.get(":method") != http.MethodPost || st.route.Disabled || h.GetEndOfStream() {
		st.kind = kindPassThrough
		return passThrough(reserved)
	}
	st.kind = kindServed
	st.surface = surface
	id, err := st.srv.signer.identity(st.headers, st.route.IdentityHeader)
	if err != nil {
		// One credential, one identity: a request carrying two credentials, or the identity
		// header twice, is refused before it reaches the model.
		st.logger().Debug("client error", zap.Error(err))
		return st.errorAnswer(&schema.RequestError{Message: err.Error(), Code: "invalid_credentials"}, "codeinterp_invalid_credentials")
	}
	st.callerID = &id
	if st.streamedRequest() {
		// The body comes while this answer is pending: it waits for the body (see requestEnd).
		st.request = &heldRequest{reserved: reserved, body: collector{limit: st.srv.maxRequestBody}}
		return nil
	}
	if len(reserved) == 0 {
		return continueServed
	}
	return &extprocv3.ProcessingResponse{
		Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{
			Response: &extprocv3.CommonResponse{HeaderMutation: &extprocv3.HeaderMutation{RemoveHeaders: reserved}},
		}},
		ModeOverride: servedMode,
	}
}

// Identity returns the identity of the request's caller: a keyed hash of its credential or
// identity header (see signer.identity). It implements [admission.Caller].
func (st *streamState) Identity() string {
	if st.callerID == nil {
		// A request whose identity cannot be told was refused at its headers (see
		// requestHeaders); anything else without one is anonymous.
		id, _ := st.srv.signer.identity(st.headers, st.route.IdentityHeader)
		st.callerID = &id
	}
	return *st.callerID
}

var _ admission.Caller = (*streamState)(nil)

// Credentials implements [admission.Caller]: the caller's credential headers.
func (st *streamState) Credentials() http.Header {
	return st.headers.forward(st.srv.signer.identities.CredentialHeaders(), nil)
}

// rewrite is what the request phase decided of a served request's body: the body to send
// upstream (nil: the client's, unchanged) and the headers to remove, or the immediate answer
// that refuses it. Each mode encodes it its own way (requestBody, requestEnd).
type rewrite struct {
	body   []byte
	remove []string
	refuse *extprocv3.ProcessingResponse
}

// requestBody answers a BUFFERED request body.
func (st *streamState) requestBody(b *extprocv3.HttpBody) *extprocv3.ProcessingResponse {
	if st.stored != nil {
		return st.storedBody(b.GetBody())
	}
	if st.kind != kindServed {
		return continueBody
	}
	switch rw := st.readRequest(b.GetBody()); {
	case rw.refuse != nil:
		return rw.refuse
	case rw.body == nil:
		return continueBody
	default:
		return continueRequestBody(rw.body, rw.remove)
	}
}

// readRequest rewrites a served request's body and admits it.
func (st *streamState) readRequest(body []byte) rewrite {
	x, err := st.surface.NewExchange(body, schema.Options{
		FunctionName:        st.route.FunctionName,
		FunctionDescription: st.route.FunctionDescription,
		WholeFirst:          st.replayReason() != "",
		RunTimeout:          st.route.RunTimeout,
	})
	if err != nil {
		var re *schema.RequestError
		if !errors.As(err, &re) {
			// Not the client's mistake: the details go to the log, the client reads a fixed text.
			st.logger().Error("rewrite request", zap.Error(err))
			return rewrite{refuse: st.serverError("rewrite_failed", "codeinterp could not process the request.")}
		}
		st.logger().Debug("client error", zap.Error(err))
		return rewrite{refuse: st.errorAnswer(re, "codeinterp_invalid_request")}
	}
	st.exchange = x
	ad, refused := st.srv.admission.Prepare(st.ctx, x, st, admission.Request{
		Path:                   st.path,
		Upstream:               st.route.Upstream,
		Session:                st.sessionHeader(),
		AllowAnonymousSessions: st.route.AllowAnonymousSessions,
	})
	if refused != nil {
		return rewrite{refuse: st.refuse(refused)}
	}
	st.admitted = ad
	rq := x.Request()
	if ad.Continued() {
		st.logger().Debug("put back pending code calls")
	}
	if !rq.Found {
		st.kind = kindNoTool
		if ad.Continued() {
			return rewrite{body: rq.Body}
		}
		return rewrite{}
	}
	if bx, ok := x.(backgroundExchange); ok && bx.Background() {
		st.kind = kindRewritten
		st.srv.metrics.rewrites.WithLabelValues(st.surface.Name()).Inc()
		return rewrite{refuse: st.startBackground(bx)}
	}
	if rq.Resume != nil {
		// The request answers a paused run's calls: the loop resumes it before any model
		// call, and makes those calls itself.
		st.kind = kindRewritten
		st.srv.metrics.rewrites.WithLabelValues(st.surface.Name()).Inc()
		return rewrite{refuse: st.resume()}
	}
	if !st.answerReadable() {
		// The configured mode stays (Envoy ignores mode_override) and would pass the model's
		// answer by unread: its internal code call would reach the client.
		st.logger().Error("the filter's configured response body mode lets the server not read the answer; configure BUFFERED or FULL_DUPLEX_STREAMED",
			zap.String("response_body_mode", st.protocol.GetResponseBodyMode().String()))
		return rewrite{refuse: st.serverError("mode_unsupported", "codeinterp cannot run code_interpreter on this route: its processing mode does not send the model's answer whole.")}
	}
	st.kind = kindRewritten
	st.sentAt = st.srv.now()
	st.srv.metrics.rewrites.WithLabelValues(st.surface.Name()).Inc()
	// The upstream must answer uncompressed: the loop reads the answer and rewrites it.
	return rewrite{body: rq.Body, remove: []string{"accept-encoding"}}
}

// sessionHeader returns the value of the route's session header, "" when it has none.
func (st *streamState) sessionHeader() string {
	if st.route.SessionHeader == "" {
		return ""
	}
	return st.headers.get(st.route.SessionHeader)
}

// refuse answers a request admission refused, in the surface's error shape: a client mistake
// (logged at debug), or a failure that is not the client's (logged: an error of our own, a
// warning of a dependency's).
func (st *streamState) refuse(r *admission.Refusal) *extprocv3.ProcessingResponse {
	status := r.Err.HTTPStatus()
	switch {
	case status == http.StatusInternalServerError:
		st.logger().Error("admit request", zap.Error(r.Cause))
	case status > http.StatusInternalServerError:
		st.logger().Warn("admit request", zap.Error(r.Cause))
	case r.Cause != nil:
		st.logger().Debug("client error", zap.Error(r.Cause))
	}
	return st.errorAnswer(r.Err, r.Details)
}

// errorAnswer answers with the error re in the surface's shape, as an immediate response. The
// stream's outcome is "client_error" for a 4xx, else the error's code.
func (st *streamState) errorAnswer(re *schema.RequestError, details string) *extprocv3.ProcessingResponse {
	status := re.HTTPStatus()
	if status < http.StatusInternalServerError {
		st.setOutcome("client_error")
	} else {
		st.setOutcome(re.Code)
	}
	return immediate(status, jsonContentType, st.surface.ErrorBody(re), details)
}

// serverError answers a failure that is not the client's in the surface's error shape: a 500
// with a fixed text, the details having gone to the log.
func (st *streamState) serverError(code, message string) *extprocv3.ProcessingResponse {
	return st.errorAnswer(&schema.RequestError{Status: http.StatusInternalServerError, Message: message, Code: code}, "codeinterp_"+code)
}

// gatewayError answers, in the surface's error shape, a 502 with code for an upstream answer
// codeinterp cannot use; the stream's outcome is outcome.
func (st *streamState) gatewayError(outcome, code, message string) *extprocv3.ProcessingResponse {
	resp := st.errorAnswer(&schema.RequestError{Status: http.StatusBadGateway, Message: message, Code: code}, "codeinterp_"+outcome)
	st.setOutcome(outcome)
	return resp
}

// responseHeaders chooses the stream's delivery: a rewritten request's 200 answer comes to the
// loop whole (buffered, or collected from a configured FULL_DUPLEX_STREAMED body) or as a
// stream switched to FULL_DUPLEX_STREAMED; everything else passes through, without its body
// being sent here where the mode allows.
func (st *streamState) responseHeaders(h *extprocv3.HttpHeaders) *extprocv3.ProcessingResponse {
	if st.following != nil {
		st.delivery = st.following
		return st.following.headers(st, h.GetEndOfStream())
	}
	rh := newHeaderMap(h.GetHeaders())
	code := rh.get(":status")
	if st.admitted != nil && len(code) == 3 && code[0] == '2' {
		st.admitted.Accepted()
	}
	st.noteAccepted(code)
	st.delivery = st.passThrough()
	if st.kind != kindRewritten {
		return skipResponseBody
	}
	if code != "200" {
		st.setOutcome("upstream_status")
		st.logger().Debug("upstream answered non-200; passing it through", zap.String("status", code))
		return skipResponseBody
	}
	a := upstreamAnswer{
		encoding:    strings.ToLower(strings.TrimSpace(rh.get("content-encoding"))),
		eventStream: isEventStream(rh.get("content-type")),
	}
	switch reason := st.replayReason(); {
	case h.GetEndOfStream():
		// A bodyless answer gives Envoy no body message to switch on: it stays as it is.
		st.delivery = &bufferedDelivery{a: a}
		return bufferResponseBody
	case st.exchange.Request().Stream && reason == "":
		st.srv.metrics.streamMode("progressive")
		// A streamed answer the server can read as it comes is: the client sees the model's
		// first tokens as they arrive. One it must decode first is collected.
		if a.eventStream && (a.encoding == "" || a.encoding == "identity") {
			st.delivery = &switchedLive{}
		} else {
			st.delivery = &switchedCollected{collecting{a: a, collected: collector{limit: st.route.MaxResponseBytes}}}
		}
		return switchToFullDuplex
	case st.exchange.Request().Stream:
		st.srv.metrics.streamMode(reason)
		st.logger().Debug("streaming answer replayed after the loop", zap.String("reason", reason))
	}
	if st.streamedResponse() {
		// The loop needs the answer whole: its chunks are collected, and this answer is held
		// until the loop is over (see configuredCollected).
		st.delivery = &configuredCollected{collecting{a: a, collected: collector{limit: st.route.MaxResponseBytes}}}
		return nil
	}
	st.delivery = &bufferedDelivery{a: a}
	return bufferResponseBody
}

// replayReason says why a streaming answer cannot be switched to FULL_DUPLEX_STREAMED and is
// replayed after the loop instead, or "" when it can: the route asks for replay, or the filter
// sends bodies without waiting for header answers or has a configured FULL_DUPLEX_STREAMED
// request body, either of which makes Envoy ignore mode_override (see docs/architecture.md,
// "Envoy's modes"). A configured FULL_DUPLEX_STREAMED response needs no switch. A filter whose
// allowed_override_modes leave the mode out is not visible from here: its profile must say
// stream_mode "replay".
func (st *streamState) replayReason() string {
	switch {
	case !st.route.Progressive:
		return "replay_configured"
	case st.streamedResponse():
		// The response body is FULL_DUPLEX_STREAMED already: nothing to switch.
	case st.noOverride(), st.protocol.GetSendBodyWithoutWaitingForHeaderResponse():
		return "replay_filter_no_override"
	}
	return ""
}

// The configured processing mode (Envoy's protocol_config on its first message). A filter
// whose configured body mode is FULL_DUPLEX_STREAMED (envoy's "design A", or a route's
// ExtProcPerRoute) makes Envoy ignore every mode_override on the stream, so the server cannot
// switch modes and answers each message in the shape the configured mode wants: in a
// FULL_DUPLEX_STREAMED direction every body answer is a streamed_response (any other is
// spurious, a 500), no message timer runs, and Envoy removes content-length. The body chunks of
// such a direction reach the server even while its headers answer is pending, so the server
// may hold that answer until the body is whole, and then still change the headers.

// streamedRequest reports whether the configured request body mode is FULL_DUPLEX_STREAMED.
func (st *streamState) streamedRequest() bool {
	return st.protocol.GetRequestBodyMode() == filterv3.ProcessingMode_FULL_DUPLEX_STREAMED
}

// streamedResponse reports whether the configured response body mode is FULL_DUPLEX_STREAMED.
func (st *streamState) streamedResponse() bool {
	return st.protocol.GetResponseBodyMode() == filterv3.ProcessingMode_FULL_DUPLEX_STREAMED
}

// noOverride reports whether Envoy ignores mode_override on the stream: its configured mode
// has a FULL_DUPLEX_STREAMED body.
func (st *streamState) noOverride() bool { return st.streamedRequest() || st.streamedResponse() }

// noteConfiguredFullDuplex logs and counts, once per stream, a configured mode with
// FULL_DUPLEX_STREAMED bodies.
func (st *streamState) noteConfiguredFullDuplex() {
	var which string
	switch req, resp := st.streamedRequest(), st.streamedResponse(); {
	case req && resp:
		which = "both"
	case req:
		which = "request"
	case resp:
		which = "response"
	default:
		return
	}
	st.srv.metrics.configuredFullDuplex(which)
	st.logger().Debug("configured processing mode has FULL_DUPLEX_STREAMED bodies; mode_override is ignored",
		zap.String("full_duplex", which))
}

// answerReadable reports whether the loop can read a rewritten request's answer: always when
// the server can choose the response body mode with mode_override; where Envoy ignores it,
// only when the configured mode sends the answer whole (BUFFERED) or all of it in chunks
// (FULL_DUPLEX_STREAMED).
func (st *streamState) answerReadable() bool {
	if !st.noOverride() {
		return true
	}
	switch st.protocol.GetResponseBodyMode() {
	case filterv3.ProcessingMode_BUFFERED, filterv3.ProcessingMode_FULL_DUPLEX_STREAMED:
		return true
	}
	return false
}

// reply sends a headers answer: without its mode_override when Envoy ignores it on this
// stream (the configured mode stays, and the server answers in its shape); nothing when resp is
// nil (the answer is held).
func (st *streamState) reply(resp *extprocv3.ProcessingResponse) error {
	if resp == nil {
		return nil
	}
	if st.noOverride() && resp.GetModeOverride() != nil {
		// The shared answers are never modified: a copy without the override.
		resp = &extprocv3.ProcessingResponse{Response: resp.Response, DynamicMetadata: resp.DynamicMetadata}
	}
	return st.send(resp)
}

// pathOnly returns p without its query string or fragment.
func pathOnly(p string) string {
	if i := strings.IndexAny(p, "?#"); i >= 0 {
		return p[:i]
	}
	return p
}
