package harness

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"time"
)

// The router of one HTTP request through the harness (see filter in exchange.go): the route,
// the upstream request and its timers, and the upstream response reaching the filter.

// routerHeaders is the router receiving the (processed) request headers: pick the route
// (again, if the route cache was cleared, §3.5) and start the upstream request.
func (f *filter) routerHeaders(h *headerMap, eos bool) {
	if f.routerDone {
		return
	}
	route, ok := f.route, f.routeOK
	path, _ := h.get(":path")
	if f.routeCleared {
		route, ok = f.e.cfg.matchRoute(path)
	}
	if !ok {
		f.sendLocalReply(http.StatusNotFound, "", nil, "route_not_found")
		return
	}
	f.upRoute = route
	ctx, cancel := context.WithCancel(f.ctx)
	f.upCancel = cancel

	var body io.ReadCloser = http.NoBody
	length := int64(0)
	if !eos {
		length = -1
		if v, ok := h.get("content-length"); ok {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil {
				length = n
			}
		}
		// Go's client reads ContentLength 0 with a body as "unknown"; a declared empty body
		// is sent without one.
		if length != 0 {
			f.upPipe = newBodyPipe()
			body = f.upPipe
		}
		f.upLeft = length
	}
	method, _ := h.get(":method")
	req, err := http.NewRequestWithContext(ctx, method, f.e.upstreamOf(route.Cluster)+route.rewrite(path), body)
	if err != nil {
		f.sendLocalReply(http.StatusServiceUnavailable, "invalid upstream request", nil, "harness_invalid_upstream_request")
		return
	}
	req.ContentLength = length
	req.Header = h.httpHeader()
	req.Host, _ = h.get(":authority")
	if route.HostRewrite != "" {
		req.Host = route.HostRewrite
	}
	if route.Timeout > 0 {
		req.Header.Set("x-envoy-expected-rq-timeout-ms", strconv.FormatInt(route.Timeout.Milliseconds(), 10))
	}
	f.rec.UpstreamRequests++
	f.upStart = time.Now()
	ch := make(chan upResult)
	f.upRespCh = ch
	client := f.e.httpClient
	f.wg.Go(func() {
		resp, err := client.Do(req)
		select {
		case ch <- upResult{resp: resp, err: err}:
		case <-ctx.Done():
			if resp != nil {
				resp.Body.Close()
			}
		}
	})
	if eos {
		f.startRouteTimer()
	}
}

func (f *filter) routerData(data []byte, eos bool) {
	if f.routerDone {
		return
	}
	if f.upPipe != nil {
		// The upstream reads what content-length says; Envoy's HTTP/1 codec writes the rest
		// too, onto the connection (verified against Envoy 1.40), which the harness drops.
		f.upPipe.write(limitTo(data, &f.upLeft))
		if eos {
			f.upPipe.finish()
		}
	}
	if eos {
		f.startRouteTimer()
	}
}

// startRouteTimer starts the route timeout, which counts from the end of the request (§7.12)
// and runs until the upstream response ends (see upstreamComplete). It is not started once
// the upstream response ended.
func (f *filter) startRouteTimer() {
	if f.upRoute.Timeout <= 0 || f.routeTimer != nil || f.upComplete {
		return
	}
	f.routeTimer = time.NewTimer(f.upRoute.Timeout)
	f.routeTimerC = f.routeTimer.C
}

// upstreamComplete is the router's onUpstreamComplete: the upstream response ended (headers
// with end of stream, or the last body chunk), which disarms the route timeout before the
// filters see that end. So the timeout covers a slow upstream body, while the response headers
// are held by ext_proc or after they reached the client, but not what ext_proc does with a
// complete response (a BUFFERED response_body call of any length).
func (f *filter) upstreamComplete() {
	f.upComplete = true
	f.stopRouteTimer()
}

func (f *filter) stopRouteTimer() {
	if f.routeTimer != nil {
		f.routeTimer.Stop()
	}
	f.routeTimerC = nil
}

// resetIdleTimer is ActiveStream::resetIdleTimer: the codec delivering request headers or
// data, and FilterManager's decode and encode stages (the router's upstream response, a
// filter continuing or injecting), restart stream_idle_timeout. ext_proc messages do not.
func (f *filter) resetIdleTimer() {
	if f.idleTimer != nil {
		f.idleTimer.Reset(f.e.cfg.StreamIdleTimeout)
		f.idleTimerC = f.idleTimer.C
	}
}

// onIdleTimeout is ActiveStream::onIdleTimeout (Envoy 1.40): a local reply, 504 once the
// whole request has arrived and 408 before (Utility::maybeRequestTimeoutCode), through the
// filter chain if the response has not started, straight to the client if it is held, a
// reset if the client has headers. The reply's headers entering the filter chain restart the
// timer, so if ext_proc then holds them (the server is slow), the timer fires again one
// timeout later and that reply goes straight to the client (verified against Envoy 1.40).
func (f *filter) onIdleTimeout() {
	code := http.StatusRequestTimeout
	if f.downEnded {
		code = http.StatusGatewayTimeout
	}
	f.sendLocalReply(code, "stream timeout", nil, "stream_idle_timeout")
}

// abortUpstream resets the upstream request; its late events are dropped.
func (f *filter) abortUpstream() {
	f.upAborted = true
	f.stopRouteTimer()
	if f.upPipe != nil {
		f.upPipe.closeWithError(errUpstreamAborted)
	}
	if f.upCancel != nil {
		f.upCancel()
	}
}

// onUpstreamResponse is the upstream's response headers reaching the filter (encodeHeaders),
// with the router's x-envoy-upstream-service-time (§0). The route timeout keeps running until
// the response ends.
func (f *filter) onUpstreamResponse(res upResult) {
	f.upRespCh = nil
	if f.upAborted {
		if res.resp != nil {
			res.resp.Body.Close()
		}
		return
	}
	if res.err != nil {
		// Envoy 1.40's words for a refused connection.
		f.sendLocalReply(http.StatusServiceUnavailable,
			"upstream connect error or disconnect/reset before headers. reset reason: remote connection failure",
			nil, "upstream_reset_before_response_started{remote_connection_failure}")
		return
	}
	f.resetIdleTimer()
	resp := res.resp
	h := newHeaderMap([]header{{":status", strconv.Itoa(resp.StatusCode)}}, resp.Header)
	h.add("x-envoy-upstream-service-time", strconv.FormatInt(time.Since(f.upStart).Milliseconds(), 10))
	eos := resp.ContentLength == 0 || f.r.Method == http.MethodHead ||
		resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusNotModified
	if eos {
		resp.Body.Close()
		f.upstreamComplete()
	} else {
		ch := make(chan bodyEvent)
		f.upDataCh = ch
		ctx := f.ctx
		f.wg.Go(func() {
			defer resp.Body.Close()
			readBody(ctx, resp.Body, ch)
		})
	}
	f.encodeHeaders(h, eos)
}

func (f *filter) onUpstreamData(ev bodyEvent) {
	if ev.eos || ev.err != nil {
		f.upDataCh = nil
	}
	if f.upAborted {
		return
	}
	if ev.err != nil {
		// The upstream reset after its headers: Envoy resets the downstream stream.
		f.reset = true
		return
	}
	f.resetIdleTimer()
	if ev.eos && len(ev.data) > 0 {
		// Envoy's HTTP/1 codec hands the filters the body as it reads it, then the end of
		// the message as an empty chunk of its own (ClientConnectionImpl::
		// onMessageCompleteBase), which STREAMED sends as a body message of its own
		// (verified against Envoy 1.40).
		f.upstreamChunk(ev.data, false)
		if f.reset || f.clientDone || f.upAborted {
			return
		}
		ev.data = nil
	}
	if ev.eos {
		f.upstreamComplete()
	}
	f.upstreamChunk(ev.data, ev.eos)
}

// upstreamChunk is the router passing a chunk of the upstream response to the filter.
func (f *filter) upstreamChunk(data []byte, eos bool) {
	d := f.enc
	st, out := f.onData(d, data, eos)
	f.afterData(d, out, eos, st)
}
