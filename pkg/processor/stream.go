package processor

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/codeinterp/codeinterp/pkg/config"
	"github.com/codeinterp/codeinterp/pkg/loop"
	"github.com/codeinterp/codeinterp/pkg/memlimit"
	"github.com/codeinterp/codeinterp/pkg/sandbox"
	"github.com/codeinterp/codeinterp/pkg/schema"
)

// streamKind says what the server does with a stream's request after its request headers.
type streamKind int

const (
	kindUndecided   streamKind = iota
	kindPassThrough            // not ours: no bodies, no response phase
	kindServed                 // a served path: the body decides
	kindPlain                  // served, but the body has no code_interpreter tool
	kindRewritten              // the body's code_interpreter tool was rewritten
)

// streamState is the per-stream state. It is used by the stream's goroutine only.
type streamState struct {
	srv     *Server
	ctx     context.Context
	send    func(*extprocv3.ProcessingResponse) error
	profile *config.Profile
	// log is made on first use (see logger): most streams never log.
	log *zap.Logger

	kind      streamKind
	surface   schema.Surface
	path      string
	headers   headerMap
	requestID string
	// identity is the caller's identity once identityKnown (see callerIdentity).
	identity      string
	identityKnown bool
	// exchange is the request's exchange on its surface, once its body has been read.
	exchange schema.Exchange
	// respEncoding is the upstream answer's content-encoding.
	respEncoding string
	// protocol is the filter's configured modes, as Envoy's first message gave them.
	protocol *extprocv3.ProtocolConfiguration
	// fullDuplex reports that the response body was switched to FULL_DUPLEX_STREAMED: the
	// upstream answer arrives in chunks (collected in fdBody), and the answer goes out as
	// streamed_response chunks while the loop runs.
	fullDuplex bool
	fdBody     []byte
	fdTooLarge bool
	// fdDone reports that the answer was streamed: Envoy may send the last chunk again
	// (reference envoy-full-duplex.md §10), and nothing after it is answered.
	fdDone bool
	// eventStream reports that the upstream answered with an event stream (the client's
	// stream:true was kept): the loop reads its first answer as one.
	eventStream bool
	// first is the loop over a streamed first answer that runs while Envoy sends it (see
	// startFirstStream), nil when none; firstLive reports that the answer is read so.
	first     *firstStream
	firstLive bool
	outcome   string
	// inputFiles are the files of the tool's container.file_ids, as the Files API named them,
	// which the loop copies into the container.
	inputFiles []loop.InputFile
	// live is the client's stream while a loop streams it (see streamLoop), else nil.
	live *liveAnswer

	// The configured processing mode (see configuredfd.go). fdRequest and fdResponse report
	// that the request or the response body is FULL_DUPLEX_STREAMED; noOverride that Envoy
	// ignores mode_override on the stream, so the configured modes stay.
	fdRequest, fdResponse, noOverride bool
	// reqHeld reports that a served request's headers answer waits for its body, collected
	// in reqBody (reqTooLarge once beyond max_request_bytes); reqReserved are the headers
	// that answer removes. reqEchoed and respEchoed report that the server ended the
	// direction's body.
	reqHeld     bool
	reqBody     []byte
	reqTooLarge bool
	reqReserved []string
	reqEchoed   bool
	respEchoed  bool
	// collect reports that a rewritten request's answer is collected from a configured
	// FULL_DUPLEX_STREAMED response (in fdBody) while its headers answer is held, for a
	// loop that needs it whole (see collectAnswer).
	collect bool
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

// handle answers one message from Envoy.
func (st *streamState) handle(req *extprocv3.ProcessingRequest) error {
	if pc := req.GetProtocolConfig(); pc != nil && st.protocol == nil {
		st.protocol = pc
		st.configuredFullDuplex(pc)
	}
	switch r := req.Request.(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		return st.reply(st.requestHeaders(r.RequestHeaders))
	case *extprocv3.ProcessingRequest_RequestBody:
		if st.fdRequest {
			return st.requestChunk(r.RequestBody)
		}
		return st.send(st.requestBody(r.RequestBody))
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		return st.reply(st.responseHeaders(r.ResponseHeaders))
	case *extprocv3.ProcessingRequest_ResponseBody:
		resp, err := st.responseBody(req, r.ResponseBody)
		if err != nil || resp == nil {
			return err // nil: a FULL_DUPLEX_STREAMED chunk, answered once the body is whole
		}
		return st.send(resp)
	case *extprocv3.ProcessingRequest_RequestTrailers:
		if st.reqHeld {
			// The body ended with trailers (reference envoy-full-duplex.md §2).
			if err := st.requestEnd(false); err != nil {
				return err
			}
		}
		return st.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestTrailers{
			RequestTrailers: &extprocv3.TrailersResponse{}}})
	case *extprocv3.ProcessingRequest_ResponseTrailers:
		switch {
		case st.collect && !st.fdDone:
			if err := st.collectAnswer(false); err != nil {
				return err
			}
		case st.first != nil:
			// The upstream body ended with trailers (reference envoy-full-duplex.md §2): the
			// answer is streamed, and the trailers answer ends it.
			st.fdDone = true
			if ended, err := st.finishFirstStream(req, false); err != nil || ended {
				return err
			}
		case st.fullDuplex && !st.fdDone:
			if err := st.fullDuplexEnd(false); err != nil {
				return err
			}
		}
		return st.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseTrailers{
			ResponseTrailers: &extprocv3.TrailersResponse{}}})
	default:
		return fmt.Errorf("unexpected message %T", req.Request)
	}
}

// finish records the stream's outcome when it ends.
func (st *streamState) finish() {
	st.closeFirstStream()
	outcome := st.outcome
	if outcome == "" {
		switch st.kind {
		case kindPassThrough:
			outcome = "pass_through"
		case kindPlain:
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
		if st.srv.signer.verifyFollowUp(sig, path, st.callerIdentity(), st.srv.now()) {
			st.outcome = "follow_up"
			return passThrough(reserved)
		}
	}
	if !served || st.headers.get(":method") != http.MethodPost || st.profile.Disabled || h.GetEndOfStream() {
		st.kind = kindPassThrough
		return passThrough(reserved)
	}
	st.kind = kindServed
	st.surface = surface
	if _, err := st.srv.signer.identity(st.headers, st.profile.IdentityHeader); err != nil {
		// One credential, one identity (issue 23): a request the identity cannot be told of.
		return st.clientError(&schema.RequestError{Message: err.Error(), Code: "invalid_credentials"}, "codeinterp_invalid_credentials", nil)
	}
	if st.holdRequest(reserved) {
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

// requestBody rewrites a served request's body.
func (st *streamState) requestBody(b *extprocv3.HttpBody) *extprocv3.ProcessingResponse {
	if st.kind != kindServed {
		return continueBody
	}
	x, err := st.surface.NewExchange(b.GetBody(), schema.Options{
		FunctionName:        st.profile.FunctionName,
		FunctionDescription: st.profile.FunctionDescription,
		WholeFirst:          st.replayReason() != "",
	})
	if err != nil {
		var re *schema.RequestError
		if !errors.As(err, &re) {
			// Not the client's mistake: the details go to the log, the client reads a fixed text.
			st.logger().Error("rewrite request", zap.Error(err))
			return st.serverError("rewrite_failed", "codeinterp could not process the request.")
		}
		return st.clientError(re, "codeinterp_invalid_request", err)
	}
	st.exchange = x
	rw := x.Request()
	continued, err := x.Continue(st.srv.pending, st.callerIdentity)
	if err != nil {
		// The request continues from an answer whose code calls it must carry, and they could
		// not be put back: sent without them, the upstream would refuse it or the model would
		// not see its own code.
		st.logger().Error("put back pending code calls", zap.Error(err))
		return st.serverError("continuation_failed", "codeinterp could not put back the code calls of the answer this request continues from.")
	}
	if continued {
		st.logger().Debug("put back pending code calls")
	}
	if !rw.Found {
		st.kind = kindPlain
		if continued {
			return continueRequestBody(rw.Body, nil)
		}
		return continueBody
	}
	st.callerIdentity()
	if rw.ContainerID != "" {
		if resp := st.checkContainer(rw.ContainerID); resp != nil {
			return resp
		}
	}
	if rw.MemoryLimit != "" {
		if re := st.checkMemoryLimit(rw.MemoryLimit); re != nil {
			return st.clientError(re, "codeinterp_invalid_request", nil)
		}
	}
	if len(rw.FileIDs) > 0 {
		if resp := st.statFiles(rw.FileIDs); resp != nil {
			return resp
		}
	}
	if !st.answerReadable() {
		// The configured mode stays (Envoy ignores mode_override) and would pass the model's
		// answer by unread: its internal code call would reach the client.
		st.logger().Error("the filter's configured response body mode lets the server not read the answer; configure BUFFERED or FULL_DUPLEX_STREAMED",
			zap.String("response_body_mode", st.protocol.GetResponseBodyMode().String()))
		return st.serverError("mode_unsupported", "codeinterp cannot run code_interpreter on this route: its processing mode does not send the model's answer whole.")
	}
	st.kind = kindRewritten
	st.srv.metrics.rewrites.WithLabelValues(st.surface.Name()).Inc()
	// The upstream must answer uncompressed: the loop reads the answer and rewrites it.
	return continueRequestBody(rw.Body, []string{"accept-encoding"})
}

// checkContainer returns the answer to a request whose tool names container id, when it may
// not run there: a 404 when the id was not issued to the caller, a 400 when it expired (as
// natively: an expired container cannot be used again), a 503 when the sandboxes cannot tell.
func (st *streamState) checkContainer(id string) *extprocv3.ProcessingResponse {
	info, err := st.srv.containers.Container(st.ctx, st.identity, id)
	switch {
	case errors.Is(err, sandbox.ErrExpiredContainer) || err == nil && info.Status == sandbox.StatusExpired:
		return st.clientError(&schema.RequestError{
			Message: fmt.Sprintf("Container '%s' is expired: a container expires once it has not been used for its expiry, and cannot be used again. Use another container.", id),
			Param:   "tools",
			Code:    "container_expired",
		}, "codeinterp_expired_container", nil)
	case errors.Is(err, sandbox.ErrUnknownContainer):
		return st.clientError(&schema.RequestError{
			Status:  http.StatusNotFound,
			Message: fmt.Sprintf("Container '%s' not found.", id),
			Param:   "tools",
			Code:    "container_not_found",
		}, "codeinterp_unknown_container", nil)
	case err != nil:
		st.logger().Warn("look up container", zap.Error(err))
		st.outcome = "sandbox_unavailable"
		body := st.surface.ErrorBody(&schema.RequestError{Status: http.StatusServiceUnavailable,
			Message: "codeinterp could not look up the container; try again.", Code: "sandbox_unavailable"})
		return immediate(http.StatusServiceUnavailable, jsonContentType, body, "codeinterp_sandbox_unavailable")
	}
	return nil
}

// checkMemoryLimit returns the client error for a container memory_limit that may not be
// created: not one of the API's sizes, or above the operator's cap.
func (st *streamState) checkMemoryLimit(limit string) *schema.RequestError {
	if !memlimit.Valid(limit) {
		return &schema.RequestError{
			Message: fmt.Sprintf("Invalid memory_limit '%s': expected one of %s.", limit, strings.Join(memlimit.Sizes(), ", ")),
			Param:   "tools",
			Code:    "invalid_value",
		}
	}
	var se *sandbox.SpecError
	if err := st.srv.containers.CheckSpec(sandbox.Spec{MemoryLimit: limit}); errors.As(err, &se) {
		return &schema.RequestError{
			Message: fmt.Sprintf("Invalid memory_limit '%s': %s.", limit, se.Reason),
			Param:   "tools",
			Code:    "invalid_value",
		}
	}
	return nil
}

// clientError answers a mistake in the client's request in the surface's error shape.
func (st *streamState) clientError(re *schema.RequestError, details string, err error) *extprocv3.ProcessingResponse {
	st.outcome = "client_error"
	if err != nil {
		st.logger().Debug("client error", zap.Error(err))
	}
	return immediate(re.HTTPStatus(), jsonContentType, st.surface.ErrorBody(re), details)
}

// serverError answers a failure that is not the client's in the surface's error shape: a 500
// with a fixed text, the details having gone to the log.
func (st *streamState) serverError(code, message string) *extprocv3.ProcessingResponse {
	st.outcome = code
	body := st.surface.ErrorBody(&schema.RequestError{Status: http.StatusInternalServerError, Message: message, Code: code})
	return immediate(http.StatusInternalServerError, jsonContentType, body, "codeinterp_"+code)
}

// callerIdentity returns the identity of the request's caller (a keyed hash of its credential
// or identity header), computed once.
func (st *streamState) callerIdentity() string {
	if !st.identityKnown {
		// A served request without one identity was refused at its headers; any other is anonymous.
		st.identity, _ = st.srv.signer.identity(st.headers, st.profile.IdentityHeader)
		st.identityKnown = true
	}
	return st.identity
}

// responseHeaders has a rewritten request's 200 answer come to the server buffered, whatever the
// route's mode; everything else passes through without its body being sent here.
func (st *streamState) responseHeaders(h *extprocv3.HttpHeaders) *extprocv3.ProcessingResponse {
	if st.exchange != nil {
		if code := newHeaderMap(h.GetHeaders()).get(":status"); len(code) == 3 && code[0] == '2' {
			st.exchange.Accepted(st.srv.pending, st.callerIdentity())
		}
	}
	if st.kind != kindRewritten {
		return skipResponseBody
	}
	rh := newHeaderMap(h.GetHeaders())
	if code := rh.get(":status"); code != "200" {
		st.outcome = "upstream_status"
		st.logger().Debug("upstream answered non-200; passing it through", zap.String("status", code))
		return skipResponseBody
	}
	st.respEncoding = strings.ToLower(strings.TrimSpace(rh.get("content-encoding")))
	st.eventStream = isEventStream(rh.get("content-type"))
	if h.GetEndOfStream() {
		// A bodyless answer gives Envoy no body message to switch on (§1 of
		// envoy-full-duplex.md): it stays as it is.
		return bufferResponseBody
	}
	if !st.exchange.Request().Stream {
		return st.bufferAnswer()
	}
	if reason := st.replayReason(); reason != "" {
		st.srv.metrics.streamMode(reason)
		st.logger().Debug("streaming answer replayed after the loop", zap.String("reason", reason))
		return st.bufferAnswer()
	}
	st.srv.metrics.streamMode("progressive")
	st.fullDuplex = true
	// A streamed answer the server can read as it comes is: the client sees the model's
	// first tokens as they arrive. One it must decode first is collected.
	st.firstLive = st.eventStream && (st.respEncoding == "" || st.respEncoding == "identity")
	return switchToFullDuplex
}

// bufferAnswer answers a rewritten request's 200 response headers when the loop needs the
// whole answer first: the answer comes BUFFERED; or, in a configured FULL_DUPLEX_STREAMED
// response, the server collects its chunks and holds this answer until the loop is over
// (see collectAnswer).
func (st *streamState) bufferAnswer() *extprocv3.ProcessingResponse {
	if st.fdResponse {
		st.collect = true
		return nil
	}
	return bufferResponseBody
}

// replayReason says why a streaming answer cannot be switched to FULL_DUPLEX_STREAMED and is
// replayed after the loop instead, or "" when it can: the profile asks for replay, or the
// filter sends bodies without waiting for header answers or has a configured
// FULL_DUPLEX_STREAMED request body, either of which makes Envoy ignore mode_override
// (reference envoy-full-duplex.md §5). A configured FULL_DUPLEX_STREAMED response needs no
// switch. A filter whose allowed_override_modes
// leave the mode out is not visible from here: its profile must say stream_mode "replay".
func (st *streamState) replayReason() string {
	switch {
	case !st.profile.Progressive:
		return "replay_configured"
	case st.fdResponse:
		// The response body is FULL_DUPLEX_STREAMED already: nothing to switch.
	case st.noOverride, st.protocol.GetSendBodyWithoutWaitingForHeaderResponse():
		return "replay_filter_no_override"
	}
	return ""
}

// responseBody runs the loop over a rewritten request's answer and replaces it with the final one.
func (st *streamState) responseBody(msg *extprocv3.ProcessingRequest, b *extprocv3.HttpBody) (*extprocv3.ProcessingResponse, error) {
	switch {
	case st.collect:
		if st.fdDone {
			return nil, nil
		}
		st.collectChunk(b.GetBody())
		if !b.GetEndOfStream() {
			return nil, nil
		}
		return nil, st.collectAnswer(true)
	case st.fdResponse && !st.fullDuplex:
		// Not the loop's: passed on as it is, in the configured mode's shape.
		return nil, st.echoBody(false, b)
	case st.kind != kindRewritten:
		return continueResponseBody, nil
	}
	if st.fullDuplex {
		if st.fdDone {
			return nil, nil
		}
		if st.firstLive {
			// The loop reads the answer as Envoy sends it, from its first chunk on (a
			// streamed_response before one would be spurious: envoy-full-duplex.md §1).
			if st.first == nil {
				st.startFirstStream()
			}
			st.first.pipe.Write(b.GetBody())
			if !b.GetEndOfStream() {
				return nil, nil
			}
			st.fdDone = true
			_, err := st.finishFirstStream(msg, true)
			return nil, err
		}
		st.collectChunk(b.GetBody())
		if !b.GetEndOfStream() {
			return nil, nil
		}
		return nil, st.fullDuplexEnd(true)
	}
	body, err := decodeBody(st.respEncoding, b.GetBody(), st.profile.MaxResponseBytes)
	if resp := st.answerError(err, len(b.GetBody())); resp != nil {
		return resp, nil
	}
	return st.runBuffered(body, true)
}

// runBuffered runs the loop over a rewritten request's whole upstream answer, body, and
// returns the answer that replaces it: a body mutation with the answer's headers, or an
// immediate answer when it is not a 200. With timed, Envoy's message timer runs for the
// response direction and is extended when the loop starts.
func (st *streamState) runBuffered(body []byte, timed bool) (*extprocv3.ProcessingResponse, error) {
	var sendErr error
	req := st.loopRequest(body)
	if st.eventStream {
		req.First, req.FirstStream = nil, bytes.NewReader(body)
	}
	var events *bytes.Buffer
	if st.exchange.Request().Stream {
		// The client asked for a stream: it gets the events of the loop, replayed once it is over.
		events = &bytes.Buffer{}
		req.Sink = st.exchange.Events(events)
	}
	deadline := st.profile.LoopDeadline
	if timed {
		req.OnLoop = func() {
			// Envoy's message timer covers the whole loop unless it is extended once per
			// message, up to max_message_timeout (reference §5.2).
			sendErr = st.send(&extprocv3.ProcessingResponse{OverrideMessageTimeout: durationpb.New(deadline)})
		}
	}
	ctx, cancel := context.WithTimeout(st.ctx, deadline-config.LoopDeadlineMargin)
	defer cancel()
	started := st.srv.now()
	res := st.srv.loop.Run(ctx, req)
	if sendErr != nil {
		return nil, fmt.Errorf("send override_message_timeout: %w", sendErr)
	}
	st.afterLoop(res, started, 0)
	status, header, answer := res.Status, res.Header, res.Body
	if e, ok := req.Sink.(interface{ Ended() bool }); ok && events.Len() > 0 && !e.Ended() && res.Stop != loop.StopAnswerTooLarge {
		// The stream was begun and the loop did not finish it: it ends with a failure event.
		errBody := st.surface.ErrorBody(&schema.RequestError{Status: http.StatusBadGateway,
			Message: "codeinterp could not finish the answer's event stream.", Code: "stream_failed"})
		_ = req.Sink.Event(schema.Event{Kind: schema.EventFailed, Status: http.StatusBadGateway, Body: errBody})
	}
	// An answer too large to send is a JSON error to every client: its stream would be larger.
	if events != nil && events.Len() > 0 && res.Stop != loop.StopAnswerTooLarge {
		status, answer = http.StatusOK, events.Bytes()
		header = http.Header{"Content-Type": {"text/event-stream; charset=utf-8"}, "Cache-Control": {"no-cache"}}
	}
	if max := st.profile.MaxAnswerBytes; len(answer) > max {
		// The loop keeps its JSON within it, an event stream may still be larger; a body beyond
		// it would fail the gRPC send, and Envoy would answer a bare 500.
		st.outcome = string(loop.StopAnswerTooLarge)
		st.logger().Error("answer too large to send", zap.Int("bytes", len(answer)), zap.Int("limit", max))
		return immediate(http.StatusBadGateway, jsonContentType, st.surface.ErrorBody(loop.AnswerTooLarge(len(answer), max)), "codeinterp_answer_too_large"), nil
	}
	set := headerOptions(header)
	if status != http.StatusOK {
		return immediateWith(status, set, answer, "codeinterp_"+string(res.Stop)), nil
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{
		ResponseBody: &extprocv3.BodyResponse{Response: bodyMutation(answer, set, []string{"content-encoding"})},
	}}, nil
}

// collectChunk keeps a chunk of a FULL_DUPLEX_STREAMED upstream answer: Envoy sends the
// answer as it arrives, the loop needs all of it, and no more than max_response_bytes of it is
// kept.
func (st *streamState) collectChunk(raw []byte) {
	switch {
	case st.fdTooLarge:
	case int64(len(st.fdBody)+len(raw)) > st.profile.MaxResponseBytes:
		st.fdTooLarge, st.fdBody = true, nil
	default:
		st.fdBody = append(st.fdBody, raw...)
	}
}

// gatewayError answers, in the surface's error shape, a 502 for an upstream answer codeinterp
// cannot use.
func (st *streamState) gatewayError(code, message, details string) *extprocv3.ProcessingResponse {
	body := st.surface.ErrorBody(&schema.RequestError{Status: http.StatusBadGateway, Message: message, Code: code})
	return immediate(http.StatusBadGateway, jsonContentType, body, details)
}

// answerError is the answer to an upstream answer that could not be read (err from decodeBody,
// size its bytes as they came), or nil when err is nil.
func (st *streamState) answerError(err error, size int) *extprocv3.ProcessingResponse {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errBodyTooLarge):
		st.outcome = "upstream_too_large"
		st.logger().Warn("upstream answer too large", zap.String("content_encoding", st.respEncoding), zap.Int("bytes", size), zap.Error(err))
		msg := fmt.Sprintf("The model's answer is larger than the %d bytes codeinterp accepts.", st.profile.MaxResponseBytes)
		return st.gatewayError("upstream_response_too_large", msg, "codeinterp_upstream_too_large")
	default:
		st.outcome = "upstream_encoding"
		st.logger().Warn("decode upstream answer", zap.String("content_encoding", st.respEncoding), zap.Error(err))
		msg := fmt.Sprintf("The upstream answered with content-encoding %q, which codeinterp cannot read.", st.respEncoding)
		return st.gatewayError("upstream_encoding", msg, "codeinterp_upstream_encoding")
	}
}

// takeCollected ends the collection of a FULL_DUPLEX_STREAMED upstream answer and returns it
// decoded, or, when it cannot be read, the ordinary error answer to send instead (nothing was
// sent to the client yet).
func (st *streamState) takeCollected() ([]byte, *extprocv3.ProcessingResponse) {
	st.fdDone = true
	raw, tooLarge := st.fdBody, st.fdTooLarge
	st.fdBody = nil
	body, err := decodeBody(st.respEncoding, raw, st.profile.MaxResponseBytes)
	if tooLarge {
		err = errBodyTooLarge
	}
	return body, st.answerError(err, len(raw))
}

// fullDuplexEnd answers the end of a FULL_DUPLEX_STREAMED upstream body: the loop runs over it
// and its events are streamed; with end, the body's end goes after them (without, the
// trailers answer that follows ends it).
func (st *streamState) fullDuplexEnd(end bool) error {
	body, resp := st.takeCollected()
	if resp != nil {
		return st.send(resp)
	}
	var stream io.Reader
	if st.eventStream {
		body, stream = nil, bytes.NewReader(body)
	}
	resp, err := st.streamLoop(body, stream, end)
	if err != nil || resp == nil {
		return err
	}
	return st.send(resp)
}

// streamLoop runs the loop over a rewritten request's answer whose body was switched to
// FULL_DUPLEX_STREAMED (see runStreamed) and returns the message that ends the body (nil
// without end: the trailers answer that follows ends it).
func (st *streamState) streamLoop(body []byte, stream io.Reader, end bool) (*extprocv3.ProcessingResponse, error) {
	resp, err := st.runStreamed(st.ctx, body, stream)
	if err != nil || resp != nil || !end {
		return resp, err
	}
	return streamedChunk(nil, true), nil
}

// runStreamed runs the loop over a rewritten request's answer whose body was switched to
// FULL_DUPLEX_STREAMED — first, or read from stream as it arrives — sending each event of the
// client's stream to Envoy as it happens. Until something has been sent the client has no
// headers yet, so an answer with nothing to stream (the model's answer was not JSON, say) is
// still an ordinary error answer, which it returns; once something was, a stream the loop did
// not finish gets a failure event, and it returns nil: the body's end is the caller's to send.
func (st *streamState) runStreamed(ctx context.Context, first []byte, stream io.Reader) (*extprocv3.ProcessingResponse, error) {
	req := st.loopRequest(first)
	req.FirstStream = stream
	em := newEmitter(st.send, st.profile.KeepAlive, st.srv.now)
	log := st.logger() // the keep-alive goroutine's, made here: logger is not safe for concurrent use
	em.onPanic = func(v any) { st.srv.reportPanic(log, v) }
	sink := st.exchange.Events(em)
	req.Sink = sink
	// No message timer runs for a FULL_DUPLEX_STREAMED direction (reference
	// envoy-full-duplex.md §2): nothing to extend.
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, st.profile.LoopDeadline-config.LoopDeadlineMargin)
	defer cancel()
	if p, ok := stream.(*chunkPipe); ok {
		// The answer's reader gives up with the loop: at its deadline, or when the stream ends.
		defer context.AfterFunc(ctx, func() { p.Close(context.Cause(ctx)) })()
	}
	started := st.srv.now()
	em.start()
	defer em.stop()
	st.live = &liveAnswer{em: em, sink: sink}
	res := st.srv.loop.Run(ctx, req)
	st.afterLoop(res, started, em.bytesSent())
	if err := parent.Err(); err != nil {
		// The client or Envoy went away, or the stream's goroutine stopped the loop (a panic
		// there answers the client's stream with st.live): nothing more to send here.
		return nil, err
	}
	st.live = nil
	if err := em.failure(); err != nil {
		return nil, err
	}
	if em.bytesSent() == 0 {
		em.stop()
		return immediateWith(res.Status, headerOptions(res.Header), res.Body, "codeinterp_"+string(res.Stop)), nil
	}
	if e, ok := sink.(interface{ Ended() bool }); ok && !e.Ended() {
		// The loop stopped without the stream's last event (an answer too large to build, an
		// event that could not be encoded): the client learns it failed.
		log.Warn("stream ended without its last event", zap.String("stop", string(res.Stop)), zap.Int("status", res.Status))
		errBody := st.surface.ErrorBody(&schema.RequestError{Status: http.StatusBadGateway,
			Message: "codeinterp could not finish the answer's event stream.", Code: "stream_failed"})
		if err := sink.Event(schema.Event{Kind: schema.EventFailed, Status: http.StatusBadGateway, Body: errBody}); err != nil {
			return nil, err
		}
	}
	return nil, nil
}

// afterLoop records a loop's end and keeps what a request continuing from its answer needs.
func (st *streamState) afterLoop(res loop.Response, started time.Time, streamed int) {
	st.outcome = string(res.Stop)
	st.srv.metrics.observeLoop(st.surface, res, st.srv.now().Sub(started))
	st.logger().Debug("loop finished", zap.String("stop", string(res.Stop)), zap.Int("rounds", res.Rounds),
		zap.Int("calls", res.Calls), zap.Int("status", res.Status), zap.Int("streamed_bytes", streamed))
	if res.Status == http.StatusOK {
		// The calls it left out, the name it has.
		st.exchange.Remember(st.srv.pending, st.identity, res.Body, res.Pending)
	}
}

// loopRequest builds the loop's request from the stream's state.
func (st *streamState) loopRequest(first []byte) loop.Request {
	p := st.profile
	upstream := strings.TrimSuffix(p.Upstream, "/")
	rw := st.exchange.Request()
	sb := sandbox.AcquireRequest{Identity: st.identity, Spec: sandbox.Spec{MemoryLimit: rw.MemoryLimit}}
	anonymous := st.identity == ""
	switch {
	case rw.ContainerID != "":
		sb.ContainerID = rw.ContainerID
	case anonymous && !p.AllowAnonymousSessions:
		// Without an identity a session name would be shared by every anonymous caller.
	default:
		sb.Session = rw.SessionID
		if p.SessionHeader != "" {
			if v := st.headers.get(p.SessionHeader); v != "" {
				sb.Session = v
			}
		}
		if sb.Session == "" {
			// OpenAI's auto containers reuse the last live container of an earlier call in the
			// context: the answers the request continues from, then its replayed items. One
			// that expired is not reused: the request gets a new container.
			named := append(slices.Clone(rw.ContextContainerIDs), rw.ReplayedContainerIDs...)
			for i := len(named) - 1; i >= 0; i-- {
				if id := named[i]; st.srv.containers.Known(st.identity, id) {
					sb.ContainerID = id
					break
				}
			}
		}
	}
	var fetcher loop.Fetcher
	if len(st.inputFiles) > 0 {
		fetcher = boundFiles{api: st.filesFor(), cred: st.credentials()}
	}
	header := st.headers.forward(p.ForwardHeaders)
	header.Set(followUpHeader, st.srv.signer.signFollowUp(pathOnly(st.path), st.identity, st.srv.now().Add(p.LoopDeadline+time.Minute)))
	return loop.Request{
		Exchange:    st.exchange,
		URL:         upstream + st.path,
		Header:      header,
		First:       first,
		MaxRounds:   p.MaxRounds,
		RunTimeout:  p.RunTimeout,
		OutputLimit: p.OutputLimit,
		Sandbox:     sb,
		InputFiles:  st.inputFiles,
		Files:       fetcher,

		MaxResponseBytes: p.MaxResponseBytes,
		MaxOutputBytes:   p.MaxOutputBytes,
		MaxImages:        p.MaxImages,
		MaxCallsPerTurn:  p.MaxCallsPerTurn,
		MaxAnswerBytes:   p.MaxAnswerBytes,

		MaxInputFileBytes: st.srv.maxInputFile,
	}
}

// pathOnly returns p without its query string or fragment.
func pathOnly(p string) string {
	if i := strings.IndexAny(p, "?#"); i >= 0 {
		return p[:i]
	}
	return p
}

// errBodyTooLarge reports an upstream answer beyond its bound (max_response_bytes).
var errBodyTooLarge = errors.New("the answer exceeds max_response_bytes")

// decodeBody undoes a content-encoding the upstream applied although the request asked for none:
// gzip (x-gzip) or deflate (zlib, or raw deflate as some servers send it). The decoded body may
// have at most limit bytes, checked while inflating, so a small compressed answer cannot
// inflate without bound; beyond it the error is errBodyTooLarge.
func decodeBody(encoding string, body []byte, limit int64) ([]byte, error) {
	var (
		r   io.Reader
		err error
	)
	switch encoding {
	case "", "identity":
		if int64(len(body)) > limit {
			return nil, fmt.Errorf("read answer: %w (%d bytes)", errBodyTooLarge, limit)
		}
		return body, nil
	case "gzip", "x-gzip":
		zr, zerr := gzip.NewReader(bytes.NewReader(body))
		r, err = zr, zerr
	case "deflate":
		if len(body) >= 2 && (uint16(body[0])<<8|uint16(body[1]))%31 == 0 && body[0]&0x0f == 8 {
			zr, zerr := zlib.NewReader(bytes.NewReader(body))
			r, err = zr, zerr
		} else {
			r = flate.NewReader(bytes.NewReader(body))
		}
	default:
		return nil, fmt.Errorf("unsupported content-encoding %q", encoding)
	}
	if err != nil {
		return nil, fmt.Errorf("decode %s: %w", encoding, err)
	}
	out, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, fmt.Errorf("decode %s: %w", encoding, err)
	}
	if int64(len(out)) > limit {
		return nil, fmt.Errorf("decode %s: %w (%d bytes)", encoding, errBodyTooLarge, limit)
	}
	return out, nil
}
