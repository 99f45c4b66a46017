package harness

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// This file is the ext_proc filter itself: Envoy's Filter (ext_proc.cc) and ProcessorState
// (processor_state.cc) ported to Go, with section references to
// docs/envoy-rules.md. The filter manager around it (what "continue", "buffer"
// and "inject" mean) and the router and client ends live in exchange.go.

// dataStatus is Http::FilterDataStatus.
type dataStatus int

const (
	dataContinue dataStatus = iota
	dataStopBuffer
	dataStopWatermark
	dataStopNoBuffer
)

// headersStatus is Http::FilterHeadersStatus (Continue or StopIteration).
type headersStatus int

const (
	headersContinue headersStatus = iota
	headersStop
)

// openState is Filter::StreamOpenState.
type openState int

const (
	openOK openState = iota
	openIgnore
	openError
)

// procError is a failed handling of a response. spurious errors are Envoy's
// FailedPrecondition ("spurious message"), which fail-open may ignore (§5.1); the others are
// answered with status_on_error whatever failure_mode_allow says.
type procError struct {
	msg      string
	spurious bool
}

func (e *procError) Error() string { return e.msg }

func spurious(msg string) error { return &procError{msg: msg, spurious: true} }

// openStream is Filter::openStream: lazily open the stream on the first message (§0); never
// again once processing is complete.
func (f *filter) openStream() openState {
	if f.complete {
		return openIgnore
	}
	if f.stream == nil {
		s, err := openSideStream(f.ctx, f.e.client, f.md, &f.wg)
		if err != nil {
			st := status.Convert(err)
			f.onGrpcError(st.Code(), st.Message())
			if f.sentImmediate {
				return openError
			}
			return openIgnore
		}
		f.stream = s
		f.rec.StreamOpened = true
		f.stats.StreamsStarted++
	}
	return openOK
}

// closeStream is Filter::closeStream (and closeStreamMaybeGraceful with the graceful-close
// runtime guard off, its default): half-close, then reset (§0).
func (f *filter) closeStream() {
	if f.stream == nil {
		return
	}
	f.stream.close()
	f.stream = nil
	f.stats.StreamsClosed++
	if f.rec.StreamEnd == "" {
		f.rec.StreamEnd = "envoy"
	}
}

// closeStreamMaybeGraceful also marks processing complete.
func (f *filter) closeStreamMaybeGraceful() {
	f.complete = true
	f.closeStream()
}

func (f *filter) sendRequest(req *extprocsvc.ProcessingRequest) {
	f.stream.send(req)
	f.rec.Messages = append(f.rec.Messages, Message{Sent: req})
	f.stats.StreamMsgsSent++
}

// newRequest starts a ProcessingRequest with what every message carries (§0):
// metadata_context always (empty: the harness has no dynamic metadata), protocol_config on
// the first message only. Attributes are not modelled (the harness refuses configs with any).
func (f *filter) newRequest() *extprocsvc.ProcessingRequest {
	req := &extprocsvc.ProcessingRequest{MetadataContext: &corev3.Metadata{}}
	if !f.protocolConfigSent {
		req.ProtocolConfig = &extprocsvc.ProtocolConfiguration{
			RequestBodyMode:  f.dec.bodyMode,
			ResponseBodyMode: f.enc.bodyMode,
		}
		f.protocolConfigSent = true
	}
	return req
}

func (f *filter) headersRequest(d *procState, h *headerMap, eos bool) *extprocsvc.ProcessingRequest {
	req := f.newRequest()
	hh := &extprocsvc.HttpHeaders{Headers: h.proto(), EndOfStream: eos}
	if d.dir == decoding {
		req.Request = &extprocsvc.ProcessingRequest_RequestHeaders{RequestHeaders: hh}
	} else {
		req.Request = &extprocsvc.ProcessingRequest_ResponseHeaders{ResponseHeaders: hh}
	}
	return req
}

func (f *filter) bodyRequest(d *procState, data []byte, eos bool) *extprocsvc.ProcessingRequest {
	req := f.newRequest()
	hb := &extprocsvc.HttpBody{Body: append([]byte{}, data...), EndOfStream: eos}
	if d.dir == decoding {
		req.Request = &extprocsvc.ProcessingRequest_RequestBody{RequestBody: hb}
	} else {
		req.Request = &extprocsvc.ProcessingRequest_ResponseBody{ResponseBody: hb}
	}
	return req
}

func (f *filter) sendBodyChunk(d *procState, cb cbState, req *extprocsvc.ProcessingRequest) {
	d.startCall(cb, f.e.messageTimeout)
	f.sendRequest(req)
}

// onHeaders is Filter::onHeaders: send the headers message and hold the headers (§1.1).
func (f *filter) onHeaders(d *procState, h *headerMap, eos bool) headersStatus {
	switch f.openStream() {
	case openError:
		return headersStop
	case openIgnore:
		return headersContinue
	}
	d.headers = h
	d.noBody = eos
	req := f.headersRequest(d, h, eos)
	d.startCall(cbHeaders, f.e.messageTimeout)
	f.sendRequest(req)
	d.paused = true
	return headersStop
}

// decodeHeaders is Filter::decodeHeaders (the per-route config was merged when the filter was
// made).
func (f *filter) decodeHeaders(h *headerMap, eos bool) {
	d := f.dec
	d.fm.started = true
	d.fm.headers = h
	if eos {
		d.complete = true
	}
	st := headersContinue
	if d.sendHeaders {
		st = f.onHeaders(d, h, eos)
	}
	// §3.4: content-length is removed right after the headers message is sent.
	if !f.complete && d.shouldRemoveContentLength() {
		h.remove("content-length")
	}
	f.afterHeaders(d, st)
}

// encodeHeaders is Filter::encodeHeaders, for upstream responses and for local replies that
// go through the filter chain (§1.6).
func (f *filter) encodeHeaders(h *headerMap, eos bool) {
	d := f.enc
	d.fm.started = true
	d.fm.headers = h
	if eos {
		d.complete = true
	}
	st := headersContinue
	if !f.complete && d.sendHeaders {
		st = f.onHeaders(d, h, eos)
	}
	if !f.complete && d.shouldRemoveContentLength() {
		h.remove("content-length")
	}
	// §0: nothing to process in the response direction: close the stream now.
	if d.noExternalProcess() {
		f.closeStreamMaybeGraceful()
	}
	f.afterHeaders(d, st)
}

// onData is Filter::onData: what to do with a body chunk of direction d.
func (f *filter) onData(d *procState, data []byte, eos bool) (dataStatus, []byte) {
	d.bodyReceived = true
	if eos {
		d.complete = true
	}
	if d.bodyReplaced {
		// CONTINUE_AND_REPLACE: later original chunks are dropped (§4.2).
		return dataContinue, nil
	}
	if f.complete {
		return dataContinue, data
	}
	if d.cb == cbHeaders && !d.fullDuplex() {
		// §1.1/§1.2: chunks arriving while the header response is pending are held. BUFFERED
		// holds them in the buffer (413/500 over the limit); others raise a watermark only.
		d.paused = true
		if d.bodyMode == extprocv3.ProcessingMode_BUFFERED {
			return dataStopBuffer, data
		}
		return dataStopWatermark, data
	}
	switch d.bodyMode {
	case extprocv3.ProcessingMode_BUFFERED:
		if !eos {
			d.paused = true
			return dataStopBuffer, data
		}
		switch f.openStream() {
		case openError:
			return dataStopNoBuffer, nil
		case openIgnore:
			return dataContinue, data
		}
		// The whole body is in: send it as one message (§1.1).
		d.fm.appendBuf(data)
		if f.overBufferLimit(d) {
			return dataStopNoBuffer, nil
		}
		f.sendBodyChunk(d, cbBufferedBody, f.bodyRequest(d, d.fm.buf, true))
		d.paused = true
		return dataStopNoBuffer, nil
	case extprocv3.ProcessingMode_STREAMED:
		switch f.openStream() {
		case openError:
			return dataStopNoBuffer, nil
		case openIgnore:
			return dataContinue, data
		}
		// §1.2: every chunk is one message, queued until its response; Envoy does not wait.
		req := f.bodyRequest(d, data, eos)
		d.queue = append(d.queue, chunk{data: data, eos: eos})
		f.sendBodyChunk(d, cbStreamedBody, req)
		if eos {
			d.paused = true
			return dataStopNoBuffer, nil
		}
		return dataContinue, nil
	case extprocv3.ProcessingMode_FULL_DUPLEX_STREAMED:
		switch f.openStream() {
		case openError:
			return dataStopNoBuffer, nil
		case openIgnore:
			return dataContinue, data
		}
		// FD §2: every chunk goes to the server at once, even while the
		// headers answer is pending (the direction then stays in that state), and is drained:
		// nothing is queued or passed on; only the server's streamed_response answers are.
		cb := cbStreamedBody
		if d.cb == cbHeaders {
			cb = cbHeaders
		}
		f.sendBodyChunk(d, cb, f.bodyRequest(d, data, eos))
		d.paused = true
		return dataStopNoBuffer, nil
	case extprocv3.ProcessingMode_NONE:
		// §1.4: the body passes untouched.
		return dataContinue, data
	}
	f.notModelled(fmt.Sprintf("%s body mode %s", d.dir, d.bodyMode))
	return dataStopNoBuffer, nil
}

// onReceiveMessage is Filter::onReceiveMessage.
func (f *filter) onReceiveMessage(resp *extprocsvc.ProcessingResponse) {
	if f.complete {
		return
	}
	// §5.2: a message with override_message_timeout is consumed for that alone.
	if resp.GetOverrideMessageTimeout() != nil {
		f.onNewTimeout(resp.GetOverrideMessageTimeout())
		return
	}
	// §2: mode_override is applied before the response itself is handled, only while a headers
	// message is outstanding, and only with allow_mode_override.
	cfg := f.e.filter
	if cfg.GetAllowModeOverride() && !cfg.GetSendBodyWithoutWaitingForHeaderResponse() &&
		cfg.GetProcessingMode().GetRequestBodyMode() != extprocv3.ProcessingMode_FULL_DUPLEX_STREAMED &&
		cfg.GetProcessingMode().GetResponseBodyMode() != extprocv3.ProcessingMode_FULL_DUPLEX_STREAMED &&
		(f.dec.cb == cbHeaders || f.enc.cb == cbHeaders) && resp.GetModeOverride() != nil {
		m := effectiveModeOverride(resp.GetModeOverride(), cfg.GetProcessingMode())
		if overrideAllowed(m, cfg.GetAllowedOverrideModes()) {
			if err := bodyModesModelled(m, false); err != nil {
				f.notModelled("mode_override to " + err.Error())
				return
			}
			f.dec.setMode(m)
			f.enc.setMode(m)
		}
	}

	var err error
	eosSeen := false
	switch r := resp.GetResponse().(type) {
	case *extprocsvc.ProcessingResponse_RequestHeaders:
		err = f.handleHeadersResponse(f.dec, r.RequestHeaders.GetResponse())
	case *extprocsvc.ProcessingResponse_ResponseHeaders:
		err = f.handleHeadersResponse(f.enc, r.ResponseHeaders.GetResponse())
	case *extprocsvc.ProcessingResponse_RequestBody:
		eosSeen = eosSeenInBody(f.dec, r.RequestBody)
		err = f.handleBodyResponse(f.dec, r.RequestBody.GetResponse())
	case *extprocsvc.ProcessingResponse_ResponseBody:
		eosSeen = eosSeenInBody(f.enc, r.ResponseBody)
		err = f.handleBodyResponse(f.enc, r.ResponseBody.GetResponse())
	case *extprocsvc.ProcessingResponse_RequestTrailers, *extprocsvc.ProcessingResponse_ResponseTrailers:
		// The harness never sends trailers (its HTTP/1.1 traffic has none), so no trailers
		// callback is ever outstanding.
		err = spurious("spurious message")
	case *extprocsvc.ProcessingResponse_ImmediateResponse:
		if cfg.GetDisableImmediateResponse() {
			err = spurious("unhandled immediate response due to config disabled it")
			break
		}
		// §4.3: processing complete, stream closed, local reply.
		f.complete = true
		f.finishCalls()
		f.closeStreamMaybeGraceful()
		f.sendImmediateResponse(r.ImmediateResponse)
	default:
		// Nothing set (or a type the modelled Envoy does not know, such as
		// streamed_immediate_response): spurious (§0, §5.1).
		err = spurious("unhandled message")
	}

	var pe *procError
	switch {
	case err == nil:
		f.stats.StreamMsgsReceived++
	case errors.As(err, &pe) && pe.spurious:
		// §5.1 (1.35+): fail closed unless failure_mode_allow.
		f.stats.SpuriousMsgsReceived++
		if f.failOpen() {
			f.stats.FailureModeAllowed++
			f.closeStream()
			f.clearAsyncState()
			f.complete = true
		} else {
			f.handleErrorResponse(err.Error())
		}
	default:
		// Invalid mutations, content-length mismatch: status_on_error regardless of
		// failure_mode_allow (§5.1).
		f.stats.StreamMsgsReceived++
		f.handleErrorResponse(err.Error())
	}
	f.closeIfLastResponse(resp, eosSeen)
}

// closeIfLastResponse is closeGrpcStreamIfLastRespReceived: the 1.37 close optimization
// (§0): the stream closes after the last answer of one direction if the other needs nothing
// more. A direction whose body was BUFFERED never counts as done (eosSeenInBody), so after a
// BUFFERED request the stream stays open until the HTTP stream ends.
func (f *filter) closeIfLastResponse(resp *extprocsvc.ProcessingResponse, eosSeen bool) {
	if f.stream == nil {
		return
	}
	last := false
	switch resp.GetResponse().(type) {
	case *extprocsvc.ProcessingResponse_RequestHeaders:
		f.dec.lastResponse = f.dec.isLastResponseAfterHeaders()
		last = f.dec.lastResponse && f.enc.noMoreExternalProcess()
	case *extprocsvc.ProcessingResponse_RequestBody:
		f.dec.lastResponse = f.dec.isLastResponseAfterBody(eosSeen)
		last = f.dec.lastResponse && f.enc.noMoreExternalProcess()
	case *extprocsvc.ProcessingResponse_ResponseHeaders:
		f.enc.lastResponse = f.enc.isLastResponseAfterHeaders()
		last = f.enc.lastResponse && f.dec.noMoreExternalProcess()
	case *extprocsvc.ProcessingResponse_ResponseBody:
		f.enc.lastResponse = f.enc.isLastResponseAfterBody(eosSeen)
		last = f.enc.lastResponse && f.dec.noMoreExternalProcess()
	}
	if last {
		f.closeStreamMaybeGraceful()
	}
}

// eosSeenInBody reports whether a body answer is the direction's last: the answer to the
// last STREAMED chunk, or a streamed_response with end_of_stream in FULL_DUPLEX_STREAMED;
// never a BUFFERED one.
func eosSeenInBody(d *procState, br *extprocsvc.BodyResponse) bool {
	switch d.bodyMode {
	case extprocv3.ProcessingMode_STREAMED:
		if len(d.queue) > 0 {
			return d.queue[0].eos
		}
	case extprocv3.ProcessingMode_FULL_DUPLEX_STREAMED:
		return br.GetResponse().GetBodyMutation().GetStreamedResponse().GetEndOfStream()
	}
	return false
}

// handleHeadersResponse is ProcessorState::handleHeadersResponse.
func (f *filter) handleHeadersResponse(d *procState, common *extprocsvc.CommonResponse) error {
	if d.cb != cbHeaders {
		return spurious("spurious message")
	}
	replace := common.GetStatus() == extprocsvc.CommonResponse_CONTINUE_AND_REPLACE
	if common.GetHeaderMutation() != nil {
		if err := f.applyMutation(common.GetHeaderMutation(), d.headers, replace, d.shouldRemoveContentLength()); err != nil {
			return err
		}
	}
	f.clearRouteCache(d, common)
	d.finishCall(d.callbackAfterHeaders(common))

	if replace {
		// §4.2: replace the body, drop what follows, no more messages in this direction.
		if common.GetBodyMutation() != nil {
			d.headers.remove("content-length")
			d.bodyReplaced = true
			d.fm.buf = applyBodyMutation(common.GetBodyMutation(), d.fm.buf)
			d.fm.hasBuf = true
		}
		d.queue = nil
		d.bodyMode = extprocv3.ProcessingMode_NONE
		d.sendTrailers = false
	} else {
		switch {
		case d.noBody:
			// No body ever: continue.
		case d.complete && d.bodyMode != extprocv3.ProcessingMode_NONE && d.cb == cbStreamedBody:
			// FULL_DUPLEX_STREAMED with the whole body in: what is held goes as one chunk,
			// the last; the headers stay held until the server's first streamed_response
			// is injected (FD §3).
			f.sendHeldDataFullDuplex(d, true)
			return nil
		case d.complete && d.bodyMode != extprocv3.ProcessingMode_NONE:
			// The whole body arrived before this response: whatever the mode, send it as one
			// buffered body message; the headers stay held for it (§1.2).
			if d.fm.hasBuf {
				f.sendBodyChunk(d, cbBufferedBody, f.bodyRequest(d, d.fm.buf, true))
				return nil
			}
		case d.bodyMode == extprocv3.ProcessingMode_BUFFERED:
			// §1.1: headers stay held until the body response, so that it may still change them.
			return nil
		case d.bodyMode == extprocv3.ProcessingMode_STREAMED:
			// §1.2: the held bytes go as one chunk, the headers go on now.
			f.sendHeldDataStreamed(d)
			f.continueIfNecessary(d)
			return nil
		case d.fullDuplex():
			// As STREAMED: the held bytes go as one chunk, the headers go on now. A reading
			// of the 1.39 source held them until the first injection here too (FD §12);
			// Envoy 1.40 releases them with this answer when the body has not arrived whole
			// (FD §3, verified against Envoy 1.40).
			f.sendHeldDataFullDuplex(d, false)
			f.continueIfNecessary(d)
			return nil
		}
	}
	d.headers = nil
	f.continueIfNecessary(d)
	return nil
}

// sendHeldDataStreamed is sendBufferedDataInStreamedMode(false).
func (f *filter) sendHeldDataStreamed(d *procState) {
	if len(d.fm.buf) == 0 {
		return
	}
	data := d.fm.buf
	d.fm.buf, d.fm.hasBuf = nil, false
	req := f.bodyRequest(d, data, false)
	d.queue = append(d.queue, chunk{data: data})
	f.sendBodyChunk(d, cbStreamedBody, req)
}

// sendHeldDataFullDuplex is sendBufferedDataInStreamedMode for FULL_DUPLEX_STREAMED: the bytes
// held while the headers answer was pending (under the mode before a mode_override) go to
// the server as one chunk and are drained. Nothing is sent when none are held. The filter
// manager's buffer stays, empty: so if the stream then ends without a chunk from the server
// (an OK close, fail-open), the held headers go on without end of stream and the end follows
// as an empty body chunk, which the client sees as a chunked empty body rather than
// content-length 0 (verified against Envoy 1.40).
func (f *filter) sendHeldDataFullDuplex(d *procState, eos bool) {
	if len(d.fm.buf) == 0 {
		return
	}
	data := d.fm.buf
	d.fm.buf = nil
	f.sendBodyChunk(d, cbStreamedBody, f.bodyRequest(d, data, eos))
}

// handleBodyResponse is ProcessorState::handleBodyResponse.
func (f *filter) handleBodyResponse(d *procState, common *extprocsvc.CommonResponse) error {
	var cont bool
	switch d.cb {
	case cbBufferedBody:
		// §3.3: headers are still held, so the body response may mutate them.
		if common.GetHeaderMutation() != nil && d.headers != nil {
			if err := f.applyMutation(common.GetHeaderMutation(), d.headers, false, d.shouldRemoveContentLength()); err != nil {
				return err
			}
		}
		if common.GetBodyMutation() != nil {
			// §3.4: content-length is kept and checked against the mutated body.
			if err := validateContentLength(d.headers, common.GetBodyMutation()); err != nil {
				return err
			}
			d.fm.buf = applyBodyMutation(common.GetBodyMutation(), d.fm.buf)
		}
		d.finishCall(cbIdle)
		cont = true
	case cbStreamedBody:
		sr := common.GetBodyMutation().GetStreamedResponse()
		switch {
		case sr != nil && !d.fullDuplex():
			return spurious("spurious message: streamed_response is received while body_mode_ is not FULL_DUPLEX_STREAMED")
		case sr != nil:
			cont = f.handleDuplexStreamedBodyResponse(d, sr)
		case d.fullDuplex():
			// A body, clear_body or no mutation at all (FD §3).
			return spurious("spurious message: Normal body mutation response is received while body_mode_ is FULL_DUPLEX_STREAMED")
		default:
			cont = f.handleStreamedBodyResponse(d, common)
		}
	default:
		return spurious("spurious message")
	}
	f.clearRouteCache(d, common)
	// finalizeBodyResponse.
	d.headers = nil
	if cont {
		f.continueIfNecessary(d)
	}
	return nil
}

// handleStreamedBodyResponse pops the oldest chunk, mutates it and passes it on (§1.2); a
// header mutation is ignored, the headers are gone.
func (f *filter) handleStreamedBodyResponse(d *procState, common *extprocsvc.CommonResponse) bool {
	c := d.queue[0]
	d.queue = d.queue[1:]
	data := c.data
	if common.GetBodyMutation() != nil {
		data = applyBodyMutation(common.GetBodyMutation(), data)
	}
	if len(data) > 0 {
		f.inject(d, data, c.eos)
	}
	if len(d.queue) == 0 {
		d.finishCall(cbIdle)
	} else {
		// Envoy stops the timer here too; the next chunk sent restarts it.
		d.finishCall(d.cb)
	}
	return c.eos
}

// handleDuplexStreamedBodyResponse is ProcessorState::handleDuplexStreamedBodyResponse
// (FD §3): the chunk is injected at once, whatever Envoy sent so far (the
// first one releases the response headers if they are still held); end_of_stream ends the
// direction, otherwise the direction waits for more. Header mutations are ignored.
func (f *filter) handleDuplexStreamedBodyResponse(d *procState, sr *extprocsvc.StreamedBodyResponse) bool {
	f.inject(d, sr.GetBody(), sr.GetEndOfStream())
	if sr.GetEndOfStream() {
		d.finishCall(cbIdle)
	} else {
		d.finishCall(cbStreamedBody)
	}
	return sr.GetEndOfStream()
}

// validateContentLength is ProcessorState::validateContentLength (§3.4). Note that a
// clear_body or an empty BodyMutation counts as length 0.
func validateContentLength(h *headerMap, mut *extprocsvc.BodyMutation) error {
	if h == nil {
		return nil
	}
	v, ok := h.get("content-length")
	if !ok {
		return nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return nil
	}
	if n != uint64(len(mut.GetBody())) {
		return &procError{msg: "mismatch between content length and the length of the mutated body"}
	}
	return nil
}

func (f *filter) applyMutation(mut *extprocsvc.HeaderMutation, h *headerMap, replacing, removeCL bool) error {
	if h == nil {
		return nil
	}
	return applyHeaderMutations(mut, h, replacing, f.e.checker, removeCL, f.e.limits, func() { f.stats.RejectedHeaderMutations++ })
}

// clearRouteCache is DecodingProcessorState::clearRouteCache (§3.5); responses are ignored.
func (f *filter) clearRouteCache(d *procState, common *extprocsvc.CommonResponse) {
	if d.dir != decoding {
		return
	}
	if common.GetHeaderMutation() == nil {
		if common.GetClearRouteCache() {
			f.stats.ClearRouteCacheIgnored++
		}
		return
	}
	action := f.e.filter.GetRouteCacheAction()
	if f.e.filter.GetDisableClearRouteCache() {
		action = extprocv3.ExternalProcessor_RETAIN
	}
	switch action {
	case extprocv3.ExternalProcessor_DEFAULT:
		if common.GetClearRouteCache() {
			f.routeCleared = true
		}
	case extprocv3.ExternalProcessor_CLEAR:
		f.routeCleared = true
	case extprocv3.ExternalProcessor_RETAIN:
		if common.GetClearRouteCache() {
			f.stats.ClearRouteCacheDisabled++
		}
	}
}

// onNewTimeout is Filter::onNewTimeout (§5.2).
func (f *filter) onNewTimeout(d *durationpb.Duration) {
	if d.CheckValid() != nil || d.AsDuration() < 0 {
		f.stats.OverrideMessageTimeoutIgnored++
		return
	}
	ms := d.AsDuration().Truncate(time.Millisecond)
	if ms < time.Millisecond || ms > f.e.maxMessageTimeout {
		f.stats.OverrideMessageTimeoutIgnored++
		return
	}
	// Only one direction can have a timer running.
	decRestarted := f.dec.restartTimer(ms)
	encRestarted := f.enc.restartTimer(ms)
	if !decRestarted && !encRestarted {
		f.stats.OverrideMessageTimeoutIgnored++
		return
	}
	f.stats.OverrideMessageTimeoutReceived++
}

// onMessageTimeout is Filter::onMessageTimeout (§5.1, §5.2).
func (f *filter) onMessageTimeout() {
	f.stats.MessageTimeouts++
	f.complete = true
	f.closeStream()
	if f.failOpen() {
		f.stats.FailureModeAllowed++
		f.clearAsyncState()
		return
	}
	f.finishCalls()
	f.sendImmediateResponse(&extprocsvc.ImmediateResponse{
		Status:  &typev3.HttpStatus{Code: typev3.StatusCode_GatewayTimeout},
		Details: "ext_proc_error_per-message_timeout_exceeded",
	})
}

// onGrpcError is Filter::onGrpcError: a non-OK end of the stream, or a failure to open it.
func (f *filter) onGrpcError(code codes.Code, msg string) {
	f.stats.StreamsFailed++
	if f.complete {
		return
	}
	if f.failOpen() {
		f.onGrpcClose()
		f.stats.FailureModeAllowed++
		return
	}
	f.complete = true
	f.finishCalls()
	f.closeStream()
	f.sendImmediateResponse(&extprocsvc.ImmediateResponse{
		Status:  &typev3.HttpStatus{Code: typev3.StatusCode(f.e.statusOnError)},
		Details: fmt.Sprintf("ext_proc_error_gRPC_error_%d{%s}", code, msg),
	})
}

// failOpen is Filter::failureModeAllow: the filter's (or route's) failure_mode_allow, unless a
// FULL_DUPLEX_STREAMED direction already received body bytes.
func (f *filter) failOpen() bool {
	return f.failureModeAllow && f.dec.canFailOpen() && f.enc.canFailOpen()
}

// onGrpcClose is Filter::onGrpcClose: the server ended the stream with OK (or fail-open
// treats an error so). Held data is released and the request continues unmodified (§0).
func (f *filter) onGrpcClose() {
	if f.complete {
		return
	}
	f.complete = true
	f.stats.StreamsClosed++
	f.closeStream()
	f.clearAsyncState()
}

// clearAsyncState resets both directions to idle and continues whatever is held, injecting
// queued STREAMED chunks unmodified.
func (f *filter) clearAsyncState() {
	for _, d := range []*procState{f.dec, f.enc} {
		d.finishCall(cbIdle)
		if len(d.queue) > 0 {
			var data []byte
			for _, c := range d.queue {
				data = append(data, c.data...)
			}
			eos := d.queue[len(d.queue)-1].eos
			d.queue = nil
			if len(data) > 0 {
				f.inject(d, data, eos)
			}
		}
		f.continueIfNecessary(d)
	}
}

func (f *filter) finishCalls() {
	f.dec.finishCall(cbIdle)
	f.enc.finishCall(cbIdle)
}

// handleErrorResponse answers with status_on_error and the error text as details.
func (f *filter) handleErrorResponse(msg string) {
	f.complete = true
	f.finishCalls()
	f.closeStream()
	f.sendImmediateResponse(&extprocsvc.ImmediateResponse{
		Status:  &typev3.HttpStatus{Code: typev3.StatusCode(f.e.statusOnError)},
		Details: msg,
	})
}

// sendImmediateResponse is Filter::sendImmediateResponse (§4.3).
func (f *filter) sendImmediateResponse(ir *extprocsvc.ImmediateResponse) {
	code := 200
	if ir.GetStatus() != nil {
		code = int(ir.GetStatus().GetCode())
	}
	if code < 200 || code > 999 {
		// Envoy only checks >= 200; above 999 the HTTP/1 status line would be invalid.
		code = 200
	}
	var mutate func(*headerMap)
	if ir.GetHeaders() != nil {
		mutate = func(h *headerMap) {
			// Failures are only logged by Envoy.
			_ = applyHeaderMutations(ir.GetHeaders(), h, false, f.e.checker, false, f.e.limits, func() { f.stats.RejectedHeaderMutations++ })
		}
	}
	f.sentImmediate = true
	// grpc_status only matters for gRPC downstream requests, which the harness never serves.
	f.sendLocalReply(code, string(ir.GetBody()), mutate, replaceSpaces(ir.GetDetails()))
}

// notModelled fails the test: the server drove the harness somewhere it does not model.
func (f *filter) notModelled(what string) {
	f.e.t.Errorf("harness: %s %s: %s is not modelled", f.r.Method, f.r.RequestURI, what)
	f.handleErrorResponse("harness_not_modelled")
}
