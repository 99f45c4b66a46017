package harness

import (
	"bufio"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func mode(reqBody, respBody extprocv3.ProcessingMode_BodySendMode) *extprocv3.ProcessingMode {
	return &extprocv3.ProcessingMode{
		RequestHeaderMode: extprocv3.ProcessingMode_SEND, RequestBodyMode: reqBody,
		ResponseHeaderMode: extprocv3.ProcessingMode_SEND, ResponseBodyMode: respBody,
	}
}

// pipeRequest posts a body the test writes itself; ContentLength is set when n >= 0.
func pipeRequest(t *testing.T, e *Envoy, path string, n int64) (*http.Request, *io.PipeWriter) {
	t.Helper()
	pr, pw := io.Pipe()
	req, err := http.NewRequest(http.MethodPost, e.URL()+path, pr)
	require.NoError(t, err, "build request for %s", path)
	if n >= 0 {
		req.ContentLength = n
	}
	return req, pw
}

// TestStreamedRequest: §1.2 — chunks arriving before the headers response are held and sent
// as one chunk; later chunks are pipelined (Envoy does not wait for answers); answers are
// applied in order, one per chunk; header mutations in body responses are ignored;
// content-length is removed (§3.4) and a content-length in set_headers is skipped.
func TestStreamedRequest(t *testing.T) {
	firstChunkIn := make(chan struct{})
	headersDone := make(chan struct{})
	done := make(chan struct{})
	proc := newFakeProc(t, func(s *procStream) error {
		defer close(done)
		req := s.expect("request_headers")
		if req == nil || !s.wait(firstChunkIn) {
			return errScript
		}
		cl, _ := headerValue(req.GetRequestHeaders().GetHeaders(), "content-length")
		assert.Equal(t, "6", cl, "the server still sees the original content-length")
		s.send(reqHeaders(&extprocsvc.CommonResponse{HeaderMutation: setHeaders(setRaw("content-length", "999"), setRaw("x-h", "1"))}))

		req = s.expect("request_body")
		if req == nil {
			return errScript
		}
		assert.Equal(t, "aaa", string(req.GetRequestBody().GetBody()), "held chunk")
		assert.False(t, req.GetRequestBody().GetEndOfStream(), "held chunk end_of_stream")
		close(headersDone)

		// Pipelining: the rest arrives while the first chunk is unanswered.
		var rest []*extprocsvc.ProcessingRequest
		var restBody string
		for {
			r := s.expect("request_body")
			if r == nil {
				return errScript
			}
			rest = append(rest, r)
			restBody += string(r.GetRequestBody().GetBody())
			if r.GetRequestBody().GetEndOfStream() {
				break
			}
		}
		assert.Equal(t, "bbb", restBody, "pipelined chunks")

		s.send(reqBody(&extprocsvc.CommonResponse{BodyMutation: bodyMut("AAA"), HeaderMutation: setHeaders(setRaw("x-ignored", "1"))}))
		for _, r := range rest {
			s.send(reqBody(&extprocsvc.CommonResponse{BodyMutation: bodyMut(strings.ToUpper(string(r.GetRequestBody().GetBody())))}))
		}
		return passThrough(s)
	})
	up := newUpstream(t, nil)
	var once sync.Once
	e := start(t, proc, up, Options{
		ProcessingMode: mode(extprocv3.ProcessingMode_STREAMED, extprocv3.ProcessingMode_NONE),
		hooks:          &testHooks{downstreamData: func(bool) { once.Do(func() { close(firstChunkIn) }) }},
	})

	req, pw := pipeRequest(t, e, "/v1/responses", 6)
	writeErr := make(chan error, 1)
	go func() {
		_, err := io.WriteString(pw, "aaa")
		if err == nil {
			<-headersDone
			_, err = io.WriteString(pw, "bbb")
		}
		writeErr <- errors.Join(err, pw.Close())
	}()
	res := send(e, req)
	require.NoError(t, res.err, "POST with a streamed body")
	require.NoError(t, <-writeErr, "write the request body")
	assert.Equal(t, http.StatusOK, res.status, "status")
	<-done

	ups := up.requests()
	require.Len(t, ups, 1, "upstream requests")
	assert.Equal(t, "AAABBB", ups[0].Body, "chunks mutated in order")
	assert.True(t, ups[0].Chunked, "content-length removed: chunked upstream request")
	assert.Equal(t, int64(-1), ups[0].ContentLen, "no content-length upstream")
	assert.Equal(t, "1", ups[0].Header.Get("X-H"), "headers response mutation applied")
	assert.Empty(t, ups[0].Header.Get("X-Ignored"), "header mutation in a STREAMED body response is ignored")

	rec := onlyRecord(t, e)
	pc := rec.Sent()[0].GetProtocolConfig()
	assert.Equal(t, extprocv3.ProcessingMode_STREAMED, pc.GetRequestBodyMode(), "protocol_config.request_body_mode")
	assert.Equal(t, extprocv3.ProcessingMode_NONE, pc.GetResponseBodyMode(), "protocol_config.response_body_mode")
}

// TestStreamedWholeBodyBeforeHeadersResponse: §1.2 — if the whole body is in when the headers
// response arrives, it is sent as one message and handled like a buffered body: the headers
// are still held, so the body response's header mutation applies.
func TestStreamedWholeBodyBeforeHeadersResponse(t *testing.T) {
	bodyIn := make(chan struct{})
	proc := newFakeProc(t, func(s *procStream) error {
		req := s.expect("request_headers")
		if req == nil || !s.wait(bodyIn) {
			return errScript
		}
		s.send(cont(req))
		req = s.expect("request_body")
		if req == nil {
			return errScript
		}
		assert.Equal(t, "whole", string(req.GetRequestBody().GetBody()), "one body message")
		assert.True(t, req.GetRequestBody().GetEndOfStream(), "end_of_stream")
		s.send(reqBody(&extprocsvc.CommonResponse{HeaderMutation: setHeaders(setRaw("x-from-body", "yes")), BodyMutation: bodyMut("WHOLE!")}))
		return passThrough(s)
	})
	up := newUpstream(t, nil)
	var once sync.Once
	e := start(t, proc, up, Options{
		ProcessingMode: mode(extprocv3.ProcessingMode_STREAMED, extprocv3.ProcessingMode_NONE),
		hooks: &testHooks{downstreamData: func(eos bool) {
			if eos {
				once.Do(func() { close(bodyIn) })
			}
		}},
	})
	res := do(t, e, http.MethodPost, "/v1/responses", "whole")
	require.NoError(t, res.err, "POST")
	ups := up.requests()
	require.Len(t, ups, 1, "upstream requests")
	assert.Equal(t, "WHOLE!", ups[0].Body, "mutated body")
	assert.Equal(t, "yes", ups[0].Header.Get("X-From-Body"), "header mutation of the body response applies")
}

// sseUpstream writes one event, waits for release, then writes another: a client can only see
// the first event before release if the harness streams it.
func sseUpstream(t *testing.T, release <-chan struct{}) *fakeUpstream {
	return newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: 1\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		_, _ = io.WriteString(w, "data: 2\n\n")
	})
}

// readFirstEvent reads the first SSE event of a streamed response, then releases the
// upstream and returns the first event and the rest.
func readFirstEvent(t *testing.T, e *Envoy, req *http.Request, release chan struct{}) (first, rest string) {
	t.Helper()
	resp, err := e.Client().Do(req)
	require.NoError(t, err, "request")
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n')
	require.NoError(t, err, "read the first event before the upstream finished")
	close(release)
	b, err := io.ReadAll(br)
	require.NoError(t, err, "read the rest")
	return line, string(b)
}

// TestNoneStreamsUnbuffered: §1.4 — with body mode NONE only header messages are sent and
// the body passes untouched and unbuffered: an SSE event reaches the client while the
// upstream is still producing. content-length is kept.
func TestNoneStreamsUnbuffered(t *testing.T) {
	proc := newFakeProc(t, passThrough)
	release := make(chan struct{})
	up := sseUpstream(t, release)
	e := start(t, proc, up, Options{ProcessingMode: mode(extprocv3.ProcessingMode_NONE, extprocv3.ProcessingMode_NONE)})

	req, err := http.NewRequest(http.MethodPost, e.URL()+"/v1/responses", strings.NewReader(`{"stream":true}`))
	require.NoError(t, err, "build request")
	first, rest := readFirstEvent(t, e, req, release)
	assert.Equal(t, "data: 1\n", first, "first event")
	assert.Equal(t, "\ndata: 2\n\n", rest, "rest of the stream")

	rec := onlyRecord(t, e)
	assert.Equal(t, []string{"-> request_headers", "<- request_headers", "-> response_headers", "<- response_headers"}, rec.Exchange(), "only header messages")
	// The client got the headers, then each event as the upstream wrote it.
	if assert.GreaterOrEqual(t, len(rec.Downstream), 3, "writes to the client") {
		assert.True(t, rec.Downstream[0].Headers, "headers first")
		assert.Equal(t, "data: 1\n\n", string(rec.Downstream[1].Body), "the first event on its own")
		var rest []byte
		for _, d := range rec.Downstream[2:] {
			rest = append(rest, d.Body...)
		}
		assert.Equal(t, "data: 2\n\n", string(rest), "then the second")
		assert.True(t, rec.Downstream[len(rec.Downstream)-1].End, "the last write ends the response")
		assert.Less(t, rec.Downstream[1].At, rec.Downstream[2].At, "the first event went out before the second")
	}
	ups := up.requests()
	require.Len(t, ups, 1, "upstream requests")
	assert.Equal(t, `{"stream":true}`, ups[0].Body, "request body untouched")
	assert.Equal(t, int64(15), ups[0].ContentLen, "content-length kept")
}

// TestModeOverride: §2 — honoured only on header responses with allow_mode_override; merged
// into the filter config's mode; DEFAULT header modes keep it; omitted body modes are NONE.
func TestModeOverride(t *testing.T) {
	full := []string{
		"-> request_headers", "<- request_headers", "-> request_body", "<- request_body",
		"-> response_headers", "<- response_headers", "-> response_body", "<- response_body",
	}
	headersOnly := []string{"-> request_headers", "<- request_headers", "-> response_headers", "<- response_headers"}
	tests := []struct {
		name        string
		giveOn      string // the response kind that carries the override
		giveMode    *extprocv3.ProcessingMode
		giveOptions Options
		giveAllowed []*extprocv3.ProcessingMode
		// giveRouteMode is every route's ExtProcPerRoute processing_mode.
		giveRouteMode *extprocv3.ProcessingMode
		want          []string
	}{
		{
			name:     "bodies off on request_headers",
			giveOn:   "request_headers",
			giveMode: &extprocv3.ProcessingMode{RequestBodyMode: extprocv3.ProcessingMode_NONE, ResponseBodyMode: extprocv3.ProcessingMode_NONE},
			want:     headersOnly,
		},
		{
			name:     "omitted body modes are NONE",
			giveOn:   "request_headers",
			giveMode: &extprocv3.ProcessingMode{ResponseHeaderMode: extprocv3.ProcessingMode_SEND},
			want:     headersOnly,
		},
		{
			name:     "DEFAULT header modes keep the filter's",
			giveOn:   "request_headers",
			giveMode: &extprocv3.ProcessingMode{ResponseBodyMode: extprocv3.ProcessingMode_BUFFERED},
			want: []string{
				"-> request_headers", "<- request_headers",
				"-> response_headers", "<- response_headers", "-> response_body", "<- response_body",
			},
		},
		{
			name:     "response_header_mode SKIP with bodies NONE ends the stream after the request",
			giveOn:   "request_headers",
			giveMode: &extprocv3.ProcessingMode{ResponseHeaderMode: extprocv3.ProcessingMode_SKIP},
			want:     []string{"-> request_headers", "<- request_headers"},
		},
		{
			name:     "response body NONE on response_headers",
			giveOn:   "response_headers",
			giveMode: &extprocv3.ProcessingMode{ResponseBodyMode: extprocv3.ProcessingMode_NONE},
			want:     full[:6],
		},
		{
			name:          "a route's mode applies without an override",
			giveRouteMode: mode(extprocv3.ProcessingMode_NONE, extprocv3.ProcessingMode_NONE),
			want:          headersOnly,
		},
		{
			// The base is the filter's mode, so an override can undo a route's mode: the request
			// body, NONE on the route, is sent whole (held, if it came before the answer).
			name:   "merged into the filter's mode, not the route's",
			giveOn: "request_headers",
			giveMode: &extprocv3.ProcessingMode{
				RequestBodyMode: extprocv3.ProcessingMode_BUFFERED, ResponseHeaderMode: extprocv3.ProcessingMode_SEND,
				ResponseBodyMode: extprocv3.ProcessingMode_BUFFERED,
			},
			giveRouteMode: mode(extprocv3.ProcessingMode_NONE, extprocv3.ProcessingMode_NONE),
			want:          full,
		},
		{
			name:        "ignored without allow_mode_override",
			giveOn:      "request_headers",
			giveMode:    &extprocv3.ProcessingMode{ResponseHeaderMode: extprocv3.ProcessingMode_SKIP},
			giveOptions: Options{AllowModeOverride: ptr(false)},
			want:        full,
		},
		{
			name:     "ignored on a body response",
			giveOn:   "request_body",
			giveMode: &extprocv3.ProcessingMode{ResponseHeaderMode: extprocv3.ProcessingMode_SKIP},
			want:     full,
		},
		{
			name:     "ignored when not in allowed_override_modes",
			giveOn:   "request_headers",
			giveMode: &extprocv3.ProcessingMode{ResponseHeaderMode: extprocv3.ProcessingMode_SKIP},
			giveAllowed: []*extprocv3.ProcessingMode{{
				RequestBodyMode: extprocv3.ProcessingMode_BUFFERED, ResponseHeaderMode: extprocv3.ProcessingMode_SEND,
				ResponseBodyMode: extprocv3.ProcessingMode_NONE,
			}},
			want: full,
		},
		{
			name:     "accepted when in allowed_override_modes",
			giveOn:   "request_headers",
			giveMode: &extprocv3.ProcessingMode{ResponseHeaderMode: extprocv3.ProcessingMode_SKIP},
			// The merged mode is compared field by field: the trailer modes come from the
			// filter's config (SKIP), not DEFAULT.
			giveAllowed: []*extprocv3.ProcessingMode{{
				ResponseHeaderMode:  extprocv3.ProcessingMode_SKIP,
				RequestTrailerMode:  extprocv3.ProcessingMode_SKIP,
				ResponseTrailerMode: extprocv3.ProcessingMode_SKIP,
			}},
			want: []string{"-> request_headers", "<- request_headers"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			proc := newFakeProc(t, func(s *procStream) error {
				for {
					req := s.recv()
					if req == nil {
						return nil
					}
					resp := cont(req)
					if requestKind(req) == tt.giveOn {
						resp.ModeOverride = tt.giveMode
					}
					s.send(resp)
				}
			})
			up := newUpstream(t, nil)
			o := tt.giveOptions
			if tt.giveAllowed != nil || tt.giveRouteMode != nil {
				o.Config = ShippedConfig(t)
				o.Config.Filter.AllowedOverrideModes = tt.giveAllowed
			}
			if tt.giveRouteMode != nil {
				for i, r := range o.Config.Routes {
					if r.PerRoute.GetDisabled() {
						continue
					}
					o.Config.Routes[i].PerRoute = &extprocv3.ExtProcPerRoute{Override: &extprocv3.ExtProcPerRoute_Overrides{
						Overrides: &extprocv3.ExtProcOverrides{ProcessingMode: tt.giveRouteMode},
					}}
				}
			}
			e := start(t, proc, up, o)
			res := do(t, e, http.MethodPost, "/v1/responses", `{"a":1}`)
			require.NoError(t, res.err, "POST with %s", tt.name)
			assert.Equal(t, http.StatusOK, res.status, "status with %s", tt.name)
			assert.Equal(t, "upstream body", res.body, "client body with %s", tt.name)
			rec := onlyRecord(t, e)
			assert.Equal(t, tt.want, rec.Exchange(), "exchange with %s", tt.name)
			assert.Equal(t, "envoy", rec.StreamEnd, "stream end with %s", tt.name)
			ups := up.requests()
			require.Len(t, ups, 1, "upstream requests with %s", tt.name)
			assert.Equal(t, `{"a":1}`, ups[0].Body, "upstream body with %s", tt.name)
		})
	}
}

// TestModeOverrideStreamsSSE: a server that sees text/event-stream on response_headers
// switches the response body to NONE, and the stream reaches the client as produced (§7.6).
func TestModeOverrideStreamsSSE(t *testing.T) {
	proc := newFakeProc(t, func(s *procStream) error {
		for {
			req := s.recv()
			if req == nil {
				return nil
			}
			resp := cont(req)
			if ct, _ := headerValue(req.GetResponseHeaders().GetHeaders(), "content-type"); ct == "text/event-stream" {
				resp.ModeOverride = &extprocv3.ProcessingMode{ResponseBodyMode: extprocv3.ProcessingMode_NONE}
			}
			s.send(resp)
		}
	})
	release := make(chan struct{})
	up := sseUpstream(t, release)
	e := start(t, proc, up, Options{})
	req, err := http.NewRequest(http.MethodPost, e.URL()+"/v1/responses", strings.NewReader(`{}`))
	require.NoError(t, err, "build request")
	first, _ := readFirstEvent(t, e, req, release)
	assert.Equal(t, "data: 1\n", first, "first event")
	assert.Equal(t, []string{
		"-> request_headers", "<- request_headers", "-> request_body", "<- request_body",
		"-> response_headers", "<- response_headers",
	}, onlyRecord(t, e).Exchange(), "exchange")
}

// TestFullDuplexBodies: with body mode NONE the request and response bodies flow
// independently, as through Envoy: the client reads the start of the response while it is
// still sending the request body.
func TestFullDuplexBodies(t *testing.T) {
	proc := newFakeProc(t, passThrough)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = http.NewResponseController(w).EnableFullDuplex()
		_, _ = io.WriteString(w, "ready\n")
		w.(http.Flusher).Flush()
		b, _ := io.ReadAll(r.Body)
		_, _ = io.WriteString(w, "got:"+string(b))
	}))
	t.Cleanup(srv.Close)
	e := Start(t, Options{
		ExtProcAddr: proc.addr, Upstream: srv.URL,
		ProcessingMode: mode(extprocv3.ProcessingMode_NONE, extprocv3.ProcessingMode_NONE),
	})
	req, pw := pipeRequest(t, e, "/v1/responses", -1)
	readStart := make(chan struct{})
	writeErr := make(chan error, 1)
	go func() {
		_, err := io.WriteString(pw, "A")
		if err == nil {
			<-readStart
			_, err = io.WriteString(pw, "B")
		}
		writeErr <- errors.Join(err, pw.Close())
	}()
	resp, err := e.Client().Do(req)
	require.NoError(t, err, "response headers before the request body ended")
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n')
	close(readStart)
	require.NoError(t, err, "read the start of the response")
	assert.Equal(t, "ready\n", line, "start of the response")
	require.NoError(t, <-writeErr, "write the request body")
	rest, err := io.ReadAll(br)
	require.NoError(t, err, "read the rest")
	assert.Equal(t, "got:AB", string(rest), "the upstream got the whole request body")
}

// TestFullDuplexDeliveries: after a switch to FULL_DUPLEX_STREAMED the record shows the
// response reaching the client progressively: the headers go out with the first chunk, when
// the server's first streamed_response is handled (the server switched once the whole body
// was in, so not with the headers answer), and each chunk as its answer is handled, before
// the next arrives.
func TestFullDuplexDeliveries(t *testing.T) {
	ev := newFDEvents()
	proc := newFakeProc(t, afterBody(300*time.Millisecond, sseHeaders(), paced(ev, 3)))
	up := newUpstream(t, nil)
	e := start(t, proc, up, Options{})
	got := fdClient(ev, 0)(t, e)
	require.NoError(t, got.err, "read the stream")
	assert.Equal(t, event(0)+event(1)+event(2), got.body, "client body")

	rec := onlyRecord(t, e)
	ex := rec.Exchange()
	var answers []int // indexes of the streamed answers in Messages
	for i, m := range rec.Messages {
		if m.Received.GetResponseBody().GetResponse().GetBodyMutation().GetStreamedResponse() != nil {
			answers = append(answers, i)
		}
	}
	require.Len(t, answers, 3, "streamed answers in %v", ex)
	want := []Delivery{
		{AfterMessages: answers[0] + 1, Headers: true},
		{AfterMessages: answers[0] + 1, Body: []byte(event(0))},
		{AfterMessages: answers[1] + 1, Body: []byte(event(1))},
		{AfterMessages: answers[2] + 1, Body: []byte(event(2)), End: true},
	}
	require.Len(t, rec.Downstream, len(want), "writes to the client")
	for i, d := range rec.Downstream {
		want[i].At = d.At
		assert.Equal(t, want[i], d, "write %d", i)
	}
	assert.Equal(t, 0, rec.Stats.MessageTimeouts, "no message timeout")
}

// TestFullDuplexTimer: message_timeout is not armed for any message of a
// FULL_DUPLEX_STREAMED direction, so override_message_timeout has nothing to extend and is
// ignored; the headers message sent before the switch is timed.
func TestFullDuplexTimer(t *testing.T) {
	emit := func(s *procStream) error {
		s.send(override(time.Second))
		if !s.pause(400 * time.Millisecond) {
			return nil
		}
		s.send(streamed(event(0), true))
		return untilEnd(s)
	}
	proc := newFakeProc(t, afterBody(0, sseHeaders(), emit))
	up := newUpstream(t, nil)
	e := start(t, proc, up, Options{MessageTimeout: 100 * time.Millisecond, MaxMessageTimeout: 2 * time.Second})
	got := do(t, e, http.MethodPost, "/v1/responses", `{"a":1}`)
	require.NoError(t, got.err, "request")
	assert.Equal(t, http.StatusOK, got.status, "status")
	assert.Equal(t, event(0), got.body, "body")
	st := e.Stats()
	assert.Equal(t, 0, st.MessageTimeouts, "message timeouts")
	assert.Equal(t, 1, st.OverrideMessageTimeoutIgnored, "override_message_timeout ignored")
}
