package harness

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// filter is one HTTP request's pass through the harness: the ext_proc filter (filter.go) with
// the filter manager, router and client ends around it. Envoy is event driven on one thread;
// so is filter: run's loop is the only goroutine that touches its state, and the goroutines
// it starts (downstream reader, side stream, upstream call and reader) only hand it events.
// They all end before run returns.
type filter struct {
	e      *Envoy
	w      http.ResponseWriter
	r      *http.Request
	rc     *http.ResponseController
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	rec   Record
	stats Stats
	// began is when the request reached the front.
	began time.Time

	route        Route
	routeOK      bool
	routeCleared bool
	// failureModeAllow is the filter's (or the route's) failure_mode_allow.
	failureModeAllow bool
	md               metadata.MD

	dec, enc *procState
	// complete is processing_complete_: nothing more goes to or is taken from the server.
	complete           bool
	stream             *sideStream
	protocolConfigSent bool
	sentImmediate      bool

	// downCh delivers the client's body; nil once it ended.
	downCh chan bodyEvent

	// Router state. routerDone reports that nothing more goes upstream.
	routerDone bool
	upRoute    Route
	upPipe     *bodyPipe
	// upLeft is how many body bytes the upstream request's content-length still allows; -1
	// without one. clientLeft is the same for the client's response.
	upLeft, clientLeft int64
	upCancel           context.CancelFunc
	upAborted          bool
	upStart            time.Time
	upRespCh           chan upResult
	upDataCh           chan bodyEvent
	// upComplete reports that the upstream response ended: the route timeout is disarmed
	// for good.
	upComplete  bool
	routeTimer  *time.Timer
	routeTimerC <-chan time.Time
	// idleTimer is the connection manager's stream_idle_timeout (nil when disabled); any
	// headers or data passing a filter-manager stage restart it.
	idleTimer  *time.Timer
	idleTimerC <-chan time.Time
	// downEnded reports that the client's request has arrived whole.
	downEnded bool

	clientHeadersSent bool
	// clientChunked reports that Go's server frames the client's response chunked (no
	// content-length, a body allowed): its end is the last chunk, written on close.
	clientChunked bool
	clientDone    bool
	// unfinished reports that the response ended before the client's request arrived whole:
	// the connection is closed after it (see closeConnection).
	unfinished bool
	// reset reports that the downstream stream is reset (ends the loop without a response).
	reset bool
}

// bodyEvent is a body chunk from the client or the upstream; err is a read failure.
type bodyEvent struct {
	data []byte
	eos  bool
	err  error
}

type upResult struct {
	resp *http.Response
	err  error
}

// errUpstreamAborted ends an upstream request body the router gave up on.
var errUpstreamAborted = errors.New("upstream request aborted")

func newFilter(e *Envoy, w http.ResponseWriter, r *http.Request) *filter {
	ctx, cancel := context.WithCancel(context.Background())
	f := &filter{
		e: e, w: w, r: r, rc: http.NewResponseController(w),
		ctx: ctx, cancel: cancel,
		dec:   &procState{dir: decoding},
		enc:   &procState{dir: encoding},
		rec:   Record{Method: r.Method, Path: r.RequestURI},
		began: time.Now(),
	}
	f.route, f.routeOK = e.cfg.matchRoute(r.RequestURI)
	if f.routeOK {
		f.rec.Route = f.route.name()
	}
	f.mergePerRouteConfig()
	return f
}

// mergePerRouteConfig is Filter::mergePerRouteConfig for the route matched at decodeHeaders
// (§5.3): disabled turns both header modes to SKIP (and bodies to NONE); overrides set the
// processing mode, add grpc initial metadata (same key replaced) and failure_mode_allow.
func (f *filter) mergePerRouteConfig() {
	cfg := f.e.filter
	f.dec.setMode(cfg.GetProcessingMode())
	f.enc.setMode(cfg.GetProcessingMode())
	f.failureModeAllow = cfg.GetFailureModeAllow()
	md := append([]*corev3.HeaderValue(nil), cfg.GetGrpcService().GetInitialMetadata()...)
	pr := f.route.PerRoute
	if f.routeOK && pr != nil {
		if pr.GetDisabled() {
			f.dec.sendHeaders, f.dec.sendTrailers, f.dec.bodyMode = false, false, 0
			f.enc.sendHeaders, f.enc.sendTrailers, f.enc.bodyMode = false, false, 0
		} else if o := pr.GetOverrides(); o != nil {
			if pm := o.GetProcessingMode(); pm != nil {
				f.dec.setMode(pm)
				f.enc.setMode(pm)
			}
			// Same key: replaced; new key: appended (mergeHeaderValuesField).
			for _, hv := range o.GetGrpcInitialMetadata() {
				replaced := false
				for i := range md {
					if md[i].GetKey() == hv.GetKey() {
						md[i], replaced = hv, true
					}
				}
				if !replaced {
					md = append(md, hv)
				}
			}
			if fma := o.GetFailureModeAllow(); fma != nil {
				f.failureModeAllow = fma.GetValue()
			}
		}
	}
	f.md = metadata.MD{}
	for _, hv := range md {
		v := hv.GetValue()
		if v == "" {
			v = string(hv.GetRawValue())
		}
		f.md.Append(strings.ToLower(hv.GetKey()), v)
	}
	f.rec.InitialMetadata = f.md.Copy()
}

// run handles the request to its end, then releases everything the filter started.
func (f *filter) run() {
	f.start()
	for !f.clientDone && !f.reset {
		var sideEvents chan sideEvent
		if f.stream != nil {
			sideEvents = f.stream.events
		}
		select {
		case ev := <-f.downCh:
			f.onDownstream(ev)
		case ev := <-sideEvents:
			f.onSide(ev)
		case <-f.dec.timerC():
			f.dec.timerOn = false
			f.onMessageTimeout()
		case <-f.enc.timerC():
			f.enc.timerOn = false
			f.onMessageTimeout()
		case res := <-f.upRespCh:
			f.onUpstreamResponse(res)
		case ev := <-f.upDataCh:
			f.onUpstreamData(ev)
		case <-f.routeTimerC:
			f.routeTimerC = nil
			f.sendLocalReply(http.StatusGatewayTimeout, "upstream request timeout", nil, "upstream_response_timeout")
		case <-f.idleTimerC:
			f.idleTimerC = nil
			f.onIdleTimeout()
		case <-f.r.Context().Done():
			// The client went away.
			f.reset = true
		}
	}
	f.destroy()
}

// start is the codec delivering the request headers: the HCM adds x-request-id and
// x-forwarded-proto (§0), then the filter's decodeHeaders runs, and the body is read.
func (f *filter) start() {
	pseudo := []header{
		{":authority", f.r.Host},
		{":path", f.r.RequestURI},
		{":method", f.r.Method},
		{":scheme", "http"},
	}
	h := newHeaderMap(pseudo, f.r.Header)
	if !h.has("x-forwarded-proto") {
		h.add("x-forwarded-proto", "http")
	}
	if !h.has("x-request-id") {
		h.add("x-request-id", newRequestID())
	}
	f.rec.RequestID, _ = h.get("x-request-id")
	if d := f.e.cfg.StreamIdleTimeout; d > 0 {
		f.idleTimer = time.NewTimer(d)
		f.idleTimerC = f.idleTimer.C
	}

	// Envoy reads the request and writes the response independently; Go's HTTP/1 server
	// would otherwise discard the unread request body before the first response write.
	_ = f.rc.EnableFullDuplex()
	// Go's server reports no body as ContentLength 0; a chunked body as -1.
	hasBody := f.r.ContentLength != 0
	f.downEnded = !hasBody
	if hasBody {
		ch := make(chan bodyEvent)
		f.downCh = ch
		f.wg.Go(func() { readBody(f.ctx, f.r.Body, ch) })
	}
	f.decodeHeaders(h, !hasBody)
}

// readBody delivers body chunks as the codec reads them; the last one (possibly empty)
// carries eos. It ends at the end of the body, on a read error or when ctx is done.
func readBody(ctx context.Context, body io.Reader, ch chan<- bodyEvent) {
	buf := make([]byte, 64<<10)
	for {
		n, err := body.Read(buf)
		ev := bodyEvent{data: append([]byte{}, buf[:n]...)}
		switch {
		case errors.Is(err, io.EOF):
			ev.eos = true
		case err != nil:
			ev.err = err
		case n == 0:
			continue
		}
		select {
		case ch <- ev:
		case <-ctx.Done():
			return
		}
		if err != nil {
			return
		}
	}
}

func (f *filter) onDownstream(ev bodyEvent) {
	if ev.err != nil {
		f.downCh = nil
		f.reset = true
		return
	}
	if ev.eos {
		f.downCh = nil
		f.downEnded = true
	}
	f.resetIdleTimer()
	if ev.eos && len(ev.data) > 0 && f.dec.fullDuplex() && !f.complete {
		// As for the upstream's response (onUpstreamData): Envoy's HTTP/1 codec hands the
		// filters the body as it reads it, then the end of the message as an empty chunk of
		// its own, which FULL_DUPLEX_STREAMED sends as a body message of its own (verified
		// against Envoy 1.40). The other modes hold or buffer a body that came with the
		// headers, so it goes to the server whole either way: there the harness keeps the
		// body and its end one chunk (a headers answer handled between them would split what
		// Envoy, having both at once, sends whole).
		f.downstreamChunk(ev.data, false)
		if f.reset || f.clientDone {
			return
		}
		ev.data = nil
	}
	f.downstreamChunk(ev.data, ev.eos)
}

// downstreamChunk is the codec passing a chunk of the client's body to the filter.
func (f *filter) downstreamChunk(data []byte, eos bool) {
	d := f.dec
	st, out := f.onData(d, data, eos)
	f.afterData(d, out, eos, st)
	if h := f.e.hooks; h != nil && h.downstreamData != nil {
		h.downstreamData(eos)
	}
}

func (f *filter) onSide(ev sideEvent) {
	if ev.end {
		if ev.err == nil {
			f.rec.StreamEnd = "server-ok"
			f.onGrpcClose()
			return
		}
		f.rec.StreamEnd = "server-error"
		st := status.Convert(ev.err)
		f.onGrpcError(st.Code(), st.Message())
		return
	}
	f.rec.Messages = append(f.rec.Messages, Message{Received: ev.resp})
	f.onReceiveMessage(ev.resp)
	if h := f.e.hooks; h != nil && h.serverMessage != nil {
		h.serverMessage(responseKind(ev.resp))
	}
}

// --- Filter manager -------------------------------------------------------------------

// afterHeaders is the filter manager acting on the filter's decode/encodeHeaders status.
func (f *filter) afterHeaders(d *procState, st headersStatus) {
	if st == headersStop {
		d.fm.stopped = true
		return
	}
	d.fm.headersPassed = true
	f.passHeaders(d, d.fm.headers, d.complete)
}

// afterData is the filter manager acting on the filter's decode/encodeData status.
func (f *filter) afterData(d *procState, data []byte, eos bool, st dataStatus) {
	switch st {
	case dataContinue:
		if d.fm.stopped {
			d.fm.appendBuf(data)
			f.continueProcessing(d)
			return
		}
		f.passData(d, data, eos)
	case dataStopBuffer:
		d.fm.stopped = true
		d.fm.appendBuf(data)
		f.overBufferLimit(d)
	case dataStopWatermark:
		// Held, with flow control instead of a size limit (§1.2).
		d.fm.stopped = true
		d.fm.appendBuf(data)
	case dataStopNoBuffer:
		d.fm.stopped = true
		if eos && !d.fm.hasBuf {
			// commonHandleAfterDataCallback: the end of stream must survive the stop, so the
			// filter manager makes an empty buffer; a later continue passes the headers
			// without end of stream and then the end as an empty chunk, which an HTTP/1
			// client sees as a chunked (empty) body, not content-length 0 (verified against
			// Envoy 1.40).
			d.fm.hasBuf = true
		}
	}
}

// overBufferLimit applies the buffer limit to a buffering direction (§1.6) and reports
// whether it was exceeded: a request is answered 413, a response 500 (straight to the client,
// whose headers are still held).
func (f *filter) overBufferLimit(d *procState) bool {
	if len(d.fm.buf) <= f.e.bufferLimit {
		return false
	}
	if d.dir == decoding {
		// The request body is gone with the 413: a headers response that arrives later sends no
		// request_body (verified against Envoy 1.40).
		d.fm.buf, d.fm.hasBuf = nil, false
		f.sendLocalReply(http.StatusRequestEntityTooLarge, "Payload Too Large", nil, "request_payload_too_large")
	} else {
		f.sendLocalReply(http.StatusInternalServerError, "Internal Server Error", nil, "response_payload_too_large")
	}
	return true
}

// continueIfNecessary is ProcessorState::continueIfNecessary.
func (f *filter) continueIfNecessary(d *procState) {
	if d.paused {
		d.paused = false
		f.continueProcessing(d)
	}
}

// continueProcessing is continueDecoding/continueEncoding: pass on the held headers, the
// buffered body and the end of stream.
func (f *filter) continueProcessing(d *procState) {
	if !d.fm.stopped {
		return
	}
	d.fm.stopped = false
	if !d.fm.headersPassed {
		d.fm.headersPassed = true
		f.passHeaders(d, d.fm.headers, d.complete && !d.fm.hasBuf)
	}
	if d.fm.hasBuf {
		data := d.fm.buf
		d.fm.buf, d.fm.hasBuf = nil, false
		f.passData(d, data, d.complete)
	} else if d.complete && !d.fm.endPassed {
		f.passData(d, nil, true)
	}
}

// inject is inject{De,En}codedDataToFilterChain: data goes straight to the next stage, after
// the held headers if they have not gone on yet (headers_continued_, FD §3:
// the first injection releases them, without end of stream). Like any FilterManager data
// stage it restarts stream_idle_timeout, even for an empty chunk.
func (f *filter) inject(d *procState, data []byte, eos bool) {
	if !d.fm.headersPassed {
		d.fm.headersPassed = true
		f.passHeaders(d, d.fm.headers, false)
	}
	f.resetIdleTimer()
	f.passData(d, data, eos)
}

func (f *filter) passHeaders(d *procState, h *headerMap, eos bool) {
	if d.dir == encoding {
		// FilterManager::encodeHeaders restarts stream_idle_timeout; decodeHeaders (a filter
		// continuing held request headers) does not (verified against Envoy 1.40).
		f.resetIdleTimer()
	}
	if eos {
		d.fm.endPassed = true
	}
	if d.dir == decoding {
		f.routerHeaders(h, eos)
	} else {
		f.clientHeaders(h, eos)
	}
}

func (f *filter) passData(d *procState, data []byte, eos bool) {
	if len(data) == 0 && !eos {
		return
	}
	f.resetIdleTimer()
	if eos {
		if d.fm.endPassed {
			return
		}
		d.fm.endPassed = true
	}
	if d.dir == decoding {
		f.routerData(data, eos)
	} else {
		f.clientData(data, eos)
	}
}

// --- Local replies ----------------------------------------------------------------------

// sendLocalReply is the filter manager's sendLocalReply with prepareLocalReply (§4.3): the
// upstream request is reset; the reply goes through the filter chain (so an active ext_proc
// filter sees it as a response, §1.6) unless response headers already reached the filter, in
// which case it goes straight to the client; once the client has headers it is a reset. So a
// second local reply (say a message timeout while the server processes a 413) goes direct.
func (f *filter) sendLocalReply(code int, body string, mutate func(*headerMap), details string) {
	if f.clientDone || f.reset {
		return
	}
	f.rec.LocalReply = &LocalReply{Status: code, Details: details, Body: body}
	f.routerDone = true
	f.abortUpstream()
	if f.clientHeadersSent {
		f.reset = true
		return
	}
	h := &headerMap{}
	h.add(":status", strconv.Itoa(code))
	if mutate != nil {
		mutate(h)
	}
	if body != "" {
		h.set("content-length", strconv.Itoa(len(body)))
		if !h.has("content-type") {
			h.set("content-type", "text/plain")
		}
	} else {
		h.remove("content-length")
		h.remove("content-type")
	}
	if f.r.Method == http.MethodHead {
		body = ""
	}
	if !f.enc.fm.started {
		// FilterManager::encodeHeaders and encodeData restart stream_idle_timeout.
		f.resetIdleTimer()
		f.encodeHeaders(h, body == "")
		if body != "" && !f.clientDone && !f.reset {
			d := f.enc
			st, data := f.onData(d, []byte(body), true)
			f.afterData(d, data, true, st)
		}
		return
	}
	f.clientHeaders(h, body == "")
	if body != "" {
		f.clientData([]byte(body), true)
	}
}

// --- Client -----------------------------------------------------------------------------

// clientHeaders is the downstream codec sending the response headers. Headers are flushed at
// once, as Envoy's codec sends them; without content-length the body is chunked.
func (f *filter) clientHeaders(h *headerMap, eos bool) {
	if f.clientHeadersSent || f.reset {
		return
	}
	code := http.StatusOK
	if v, ok := h.get(":status"); ok {
		if n, err := strconv.Atoi(v); err == nil && n >= 100 && n <= 999 {
			code = n
		}
	}
	out := f.w.Header()
	for k, vs := range h.httpHeader() {
		out[k] = vs
	}
	// The connection manager's server_header_transformation (OVERWRITE by default).
	out.Set("Server", "envoy")
	if eos && !h.has("content-length") && code != http.StatusNoContent && code != http.StatusNotModified && f.r.Method != http.MethodHead {
		// Envoy's HTTP/1 codec frames a headers-only response with content-length: 0.
		out.Set("Content-Length", "0")
	}
	f.clientLeft = -1
	if v, ok := h.get("content-length"); ok {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			f.clientLeft = n
		}
	}
	f.clientChunked = !eos && f.clientLeft < 0 && f.r.Method != http.MethodHead && f.r.ProtoAtLeast(1, 1) &&
		code >= 200 && code != http.StatusNoContent && code != http.StatusNotModified
	f.w.WriteHeader(code)
	f.clientHeadersSent = true
	f.rec.Status = code
	if err := f.rc.Flush(); err != nil {
		f.reset = true
		return
	}
	f.delivered(Delivery{Headers: true, End: eos})
	if eos {
		f.clientDone = true
	}
}

func (f *filter) clientData(data []byte, eos bool) {
	if f.clientDone || f.reset {
		return
	}
	// The client reads what content-length says (Envoy 1.40 sends the rest too).
	data = limitTo(data, &f.clientLeft)
	if len(data) > 0 {
		if _, err := f.w.Write(data); err != nil {
			f.reset = true
			return
		}
	}
	if err := f.rc.Flush(); err != nil {
		f.reset = true
		return
	}
	f.delivered(Delivery{Body: append([]byte(nil), data...), End: eos})
	if eos {
		f.clientDone = true
	}
}

// delivered records a write to the client.
func (f *filter) delivered(d Delivery) {
	if f.e.noRecords {
		return
	}
	d.At = time.Since(f.began)
	d.AfterMessages = len(f.rec.Messages)
	f.rec.Downstream = append(f.rec.Downstream, d)
}

// destroy is Filter::onDestroy plus the end of the HTTP stream: the side stream is closed
// (half-close, then reset, §0), the upstream released, and every goroutine waited for.
func (f *filter) destroy() {
	if f.idleTimer != nil {
		f.idleTimer.Stop()
	}
	f.complete = true
	f.dec.stopTimer()
	f.enc.stopTimer()
	f.closeStream()
	f.abortUpstream()
	if f.downCh != nil {
		// Unblock the body reader; a client that stops sending must not hold the handler.
		_ = f.rc.SetReadDeadline(time.Now())
		f.unfinished = !f.reset
	}
	f.cancel()
	f.wg.Wait()
	if f.reset {
		f.rec.Status = 0
		f.rec.Reset = true
	}
	f.rec.Stats = f.stats
}

// closeConnection ends the connection of a stream whose response completed before its
// request did, as Envoy does: ConnectionManagerImpl::doEndStream resets such a stream, and an
// HTTP/1 connection with a reset stream is closed (DrainState::Closing). Go's server would
// keep it for the next request once its discard of the unread body failed on the read
// deadline that stopped the body reader, and would read the rest of this request's body as
// the next request (a 400 with no JSON). A chunked response gets its last chunk first.
func (f *filter) closeConnection() {
	conn, buf, err := f.rc.Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	if f.clientChunked {
		_, _ = buf.WriteString("0\r\n\r\n")
		_ = buf.Flush()
	}
	_ = conn.Close()
}

func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// replaceSpaces is StringUtil::replaceAllEmptySpace.
func replaceSpaces(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsSpace(r) {
			return '_'
		}
		return r
	}, s)
}

// limitTo returns the part of data that *left (a byte count, -1 for no limit) allows and
// takes it from *left.
func limitTo(data []byte, left *int64) []byte {
	if *left < 0 {
		return data
	}
	if int64(len(data)) > *left {
		data = data[:*left]
	}
	*left -= int64(len(data))
	return data
}
