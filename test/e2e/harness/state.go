package harness

import (
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// direction is a side of the filter: decoding (the request) or encoding (the response).
type direction int

const (
	decoding direction = iota
	encoding
)

func (d direction) String() string {
	if d == decoding {
		return "request"
	}
	return "response"
}

// cbState is ProcessorState::CallbackState: which answer the direction is waiting for.
type cbState int

const (
	cbIdle cbState = iota
	cbHeaders
	cbBufferedBody
	cbStreamedBody
)

// chunk is one queued STREAMED body chunk awaiting its response (§1.2). FULL_DUPLEX_STREAMED
// queues nothing: the data goes to the server and is drained (FD §2).
type chunk struct {
	data []byte
	eos  bool
}

// procState is one direction's state: Envoy's ProcessorState (processing mode, callback
// state, timer, held headers, STREAMED chunk queue) plus the filter manager's view of the
// direction (iteration stopped or not, the buffered body, what was passed on). Only the
// filter's event loop touches it.
type procState struct {
	dir direction

	// Processing mode (ProcessorState::setProcessingModeInternal, §1): DEFAULT header mode
	// means SEND, DEFAULT trailer mode means SKIP.
	sendHeaders  bool
	sendTrailers bool
	bodyMode     extprocv3.ProcessingMode_BodySendMode

	cb cbState
	// timer is the per-direction message timer (§5.2); timerOn reports whether it runs.
	timer   *time.Timer
	timerOn bool
	// newTimeoutReceived reports whether an override_message_timeout was accepted for the
	// outstanding call (only one is, §5.2).
	newTimeoutReceived bool

	// paused reports whether the filter stopped the filter manager's iteration and owes a
	// continue (ProcessorState::paused_).
	paused bool
	// headers are the headers the server may still mutate (ProcessorState::headers_); nil once
	// released.
	headers *headerMap
	noBody  bool
	// complete reports whether the whole body has arrived (end of stream seen).
	complete bool
	// bodyReceived reports whether a body chunk (possibly empty) reached the filter
	// (ProcessorState::bodyReceived).
	bodyReceived bool
	bodyReplaced bool
	queue        []chunk
	// lastResponse reports whether the server's last answer in this direction was its last
	// (ProcessorState::last_response_for_direction_, set by the 1.37 close optimization).
	lastResponse bool

	// Filter manager state of the direction.
	fm fmState
}

// fmState is the filter manager's side of one direction.
type fmState struct {
	// started reports whether headers reached the filter in this direction.
	started bool
	// headers is the direction's header map (the one passed on).
	headers *headerMap
	// stopped reports whether iteration is stopped at this filter (headers or data held).
	stopped       bool
	headersPassed bool
	endPassed     bool
	// buf is the filter manager's buffered body (decodingBuffer/encodingBuffer); hasBuf
	// reports whether it exists (it may exist and be empty).
	buf    []byte
	hasBuf bool
}

func (fm *fmState) appendBuf(b []byte) {
	fm.buf = append(fm.buf, b...)
	fm.hasBuf = true
}

// setMode applies a ProcessingMode to the direction.
func (d *procState) setMode(pm *extprocv3.ProcessingMode) {
	if d.dir == decoding {
		d.sendHeaders = pm.GetRequestHeaderMode() != extprocv3.ProcessingMode_SKIP
		d.sendTrailers = pm.GetRequestTrailerMode() == extprocv3.ProcessingMode_SEND
		d.bodyMode = pm.GetRequestBodyMode()
		return
	}
	d.sendHeaders = pm.GetResponseHeaderMode() != extprocv3.ProcessingMode_SKIP
	d.sendTrailers = pm.GetResponseTrailerMode() == extprocv3.ProcessingMode_SEND
	d.bodyMode = pm.GetResponseBodyMode()
}

// shouldRemoveContentLength is ProcessorState::shouldRemoveContentLength (§3.4): the body may
// change after the headers are gone, so content-length cannot be kept.
func (d *procState) shouldRemoveContentLength() bool {
	switch d.bodyMode {
	case extprocv3.ProcessingMode_STREAMED, extprocv3.ProcessingMode_FULL_DUPLEX_STREAMED, extprocv3.ProcessingMode_BUFFERED_PARTIAL:
		return true
	case extprocv3.ProcessingMode_BUFFERED:
		return !d.sendHeaders
	}
	return false
}

// noExternalProcess reports whether nothing in this direction goes to the server.
func (d *procState) noExternalProcess() bool {
	return !d.sendHeaders && !d.sendTrailers && d.bodyMode == extprocv3.ProcessingMode_NONE
}

// noMoreExternalProcess reports whether nothing more in this direction goes to the server.
func (d *procState) noMoreExternalProcess() bool {
	return d.noExternalProcess() || d.lastResponse
}

// isLastResponseAfterHeaders is ProcessorState::isLastResponseAfterHeaderResp for traffic
// without trailers.
func (d *procState) isLastResponseAfterHeaders() bool {
	if d.cb != cbIdle {
		return false
	}
	if d.noBody {
		return true
	}
	return d.bodyMode == extprocv3.ProcessingMode_NONE && (!d.sendTrailers || d.complete)
}

// isLastResponseAfterBody is ProcessorState::isLastResponseAfterBodyResp for traffic without
// trailers.
func (d *procState) isLastResponseAfterBody(eosSeen bool) bool {
	return d.cb == cbIdle && eosSeen
}

// fullDuplex reports whether the direction's body mode is FULL_DUPLEX_STREAMED.
func (d *procState) fullDuplex() bool {
	return d.bodyMode == extprocv3.ProcessingMode_FULL_DUPLEX_STREAMED
}

// canFailOpen is ProcessorState::canFailOpen: once a FULL_DUPLEX_STREAMED direction received
// body bytes, they are drained (sent to the server, not kept), so the request cannot go on
// unmodified (FD §5).
func (d *procState) canFailOpen() bool {
	return !d.fullDuplex() || !d.bodyReceived
}

// callbackAfterHeaders is ProcessorState::getCallbackStateAfterHeaderResp (without
// send_body_without_waiting_for_header_response, which the harness refuses, and trailers,
// which HTTP/1.1 traffic does not have): FULL_DUPLEX_STREAMED waits for body answers if body
// chunks already went to the server.
func (d *procState) callbackAfterHeaders(common *extprocsvc.CommonResponse) cbState {
	if common.GetStatus() != extprocsvc.CommonResponse_CONTINUE_AND_REPLACE && d.fullDuplex() && d.bodyReceived {
		return cbStreamedBody
	}
	return cbIdle
}

// startCall is ProcessorState::onStartProcessorCall: enter cb and (re)start the timer, which
// FULL_DUPLEX_STREAMED never arms, for any message of the direction (FD §2,
// FD §8): a headers message sent before a mode_override to it is timed.
func (d *procState) startCall(cb cbState, timeout time.Duration) {
	d.cb = cb
	d.newTimeoutReceived = false
	if d.fullDuplex() {
		return
	}
	if d.timer == nil {
		d.timer = time.NewTimer(timeout)
	} else {
		d.timer.Reset(timeout)
	}
	d.timerOn = true
}

// finishCall is ProcessorState::onFinishProcessorCall: stop the timer, enter next.
func (d *procState) finishCall(next cbState) {
	d.stopTimer()
	d.cb = next
	d.newTimeoutReceived = false
}

func (d *procState) stopTimer() {
	if d.timer != nil {
		d.timer.Stop()
	}
	d.timerOn = false
}

// restartTimer is ProcessorState::restartMessageTimer: only a running timer, and only once
// per outstanding call.
func (d *procState) restartTimer(timeout time.Duration) bool {
	if !d.timerOn || d.newTimeoutReceived {
		return false
	}
	d.timer.Reset(timeout)
	d.newTimeoutReceived = true
	return true
}

// timerC is the timer's channel while it runs, else nil (never ready).
func (d *procState) timerC() <-chan time.Time {
	if !d.timerOn {
		return nil
	}
	return d.timer.C
}

// effectiveModeOverride merges a mode_override into the filter config's mode (§2): DEFAULT
// header and trailer modes keep the base; body modes always come from the override, so an
// omitted body mode is NONE.
func effectiveModeOverride(override, base *extprocv3.ProcessingMode) *extprocv3.ProcessingMode {
	m := &extprocv3.ProcessingMode{
		RequestHeaderMode:   base.GetRequestHeaderMode(),
		ResponseHeaderMode:  base.GetResponseHeaderMode(),
		RequestTrailerMode:  base.GetRequestTrailerMode(),
		ResponseTrailerMode: base.GetResponseTrailerMode(),
		RequestBodyMode:     override.GetRequestBodyMode(),
		ResponseBodyMode:    override.GetResponseBodyMode(),
	}
	if v := override.GetRequestHeaderMode(); v != extprocv3.ProcessingMode_DEFAULT {
		m.RequestHeaderMode = v
	}
	if v := override.GetResponseHeaderMode(); v != extprocv3.ProcessingMode_DEFAULT {
		m.ResponseHeaderMode = v
	}
	if v := override.GetRequestTrailerMode(); v != extprocv3.ProcessingMode_DEFAULT {
		m.RequestTrailerMode = v
	}
	if v := override.GetResponseTrailerMode(); v != extprocv3.ProcessingMode_DEFAULT {
		m.ResponseTrailerMode = v
	}
	return m
}

// overrideAllowed checks the merged mode against allowed_override_modes (all fields but
// request_header_mode, §2). An empty list allows everything.
func overrideAllowed(m *extprocv3.ProcessingMode, allowed []*extprocv3.ProcessingMode) bool {
	if len(allowed) == 0 {
		return true
	}
	for _, o := range allowed {
		if m.GetRequestBodyMode() == o.GetRequestBodyMode() && m.GetRequestTrailerMode() == o.GetRequestTrailerMode() &&
			m.GetResponseHeaderMode() == o.GetResponseHeaderMode() && m.GetResponseBodyMode() == o.GetResponseBodyMode() &&
			m.GetResponseTrailerMode() == o.GetResponseTrailerMode() {
			return true
		}
	}
	return false
}
