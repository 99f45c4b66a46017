package harness

import (
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// answerUntil answers CONTINUE until a message of kind arrives, which it hands to then.
func answerUntil(kind string, then func(s *procStream, req *extprocsvc.ProcessingRequest) error) script {
	return func(s *procStream) error {
		for {
			req := s.recv()
			if req == nil {
				return nil
			}
			if requestKind(req) == kind {
				return then(s, req)
			}
			s.send(cont(req))
		}
	}
}

// stall never answers: it waits for Envoy to end the stream.
func stall(s *procStream, _ *extprocsvc.ProcessingRequest) error {
	s.drain()
	return nil
}

func httpStatus(code int) *typev3.HttpStatus {
	return &typev3.HttpStatus{Code: typev3.StatusCode(code)}
}

// TestImmediateResponse: §4.3 — accepted in every phase; status unset or < 200 is 200;
// headers come from the mutation; content-type text/plain only if none was set;
// content-length is the body's; in response phases the upstream response is discarded; the
// stream is closed.
func TestImmediateResponse(t *testing.T) {
	denied := &extprocsvc.ImmediateResponse{
		Status: httpStatus(401), Headers: setHeaders(setRaw("x-a", "1")), Body: []byte("denied"), Details: "no entry",
	}
	tests := []struct {
		name         string
		givePhase    string
		giveIR       *extprocsvc.ImmediateResponse
		wantStatus   int
		wantBody     string
		wantCT       string
		wantCL       string
		wantXA       string
		wantDetails  string
		wantUpstream int
	}{
		{name: "request_headers", givePhase: "request_headers", giveIR: denied, wantStatus: 401, wantBody: "denied", wantCT: "text/plain", wantCL: "6", wantXA: "1", wantDetails: "no_entry"},
		{name: "request_body", givePhase: "request_body", giveIR: denied, wantStatus: 401, wantBody: "denied", wantCT: "text/plain", wantCL: "6", wantXA: "1", wantDetails: "no_entry"},
		{name: "response_headers", givePhase: "response_headers", giveIR: denied, wantStatus: 401, wantBody: "denied", wantCT: "text/plain", wantCL: "6", wantXA: "1", wantDetails: "no_entry", wantUpstream: 1},
		{name: "response_body", givePhase: "response_body", giveIR: denied, wantStatus: 401, wantBody: "denied", wantCT: "text/plain", wantCL: "6", wantXA: "1", wantDetails: "no_entry", wantUpstream: 1},
		{name: "status unset is 200", givePhase: "request_headers", giveIR: &extprocsvc.ImmediateResponse{Body: []byte("hi")}, wantStatus: 200, wantBody: "hi", wantCT: "text/plain", wantCL: "2"},
		{name: "status below 200 is 200", givePhase: "request_headers", giveIR: &extprocsvc.ImmediateResponse{Status: httpStatus(100), Body: []byte("hi")}, wantStatus: 200, wantBody: "hi", wantCT: "text/plain", wantCL: "2"},
		{
			name: "content-type from the headers is kept", givePhase: "request_body",
			giveIR:     &extprocsvc.ImmediateResponse{Status: httpStatus(400), Headers: setHeaders(setRaw("content-type", "application/json")), Body: []byte(`{"error":{}}`)},
			wantStatus: 400, wantBody: `{"error":{}}`, wantCT: "application/json", wantCL: "12",
		},
		{
			name: "empty body has no content-type", givePhase: "request_headers",
			giveIR:     &extprocsvc.ImmediateResponse{Status: httpStatus(429), Headers: setHeaders(setRaw("content-type", "application/json"))},
			wantStatus: 429, wantBody: "", wantCT: "", wantCL: "0",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var end error
			scriptDone := make(chan struct{})
			proc := newFakeProc(t, answerUntil(tt.givePhase, func(s *procStream, _ *extprocsvc.ProcessingRequest) error {
				defer close(scriptDone)
				s.send(immediate(tt.giveIR))
				end = s.drain()
				return nil
			}))
			up := newUpstream(t, nil)
			e := start(t, proc, up, Options{})
			res := do(t, e, http.MethodPost, "/v1/responses", `{}`)
			require.NoError(t, res.err, "POST with an immediate response on %s", tt.name)
			assert.Equal(t, tt.wantStatus, res.status, "status with %s", tt.name)
			assert.Equal(t, tt.wantBody, res.body, "body with %s", tt.name)
			assert.Equal(t, tt.wantCT, res.header.Get("Content-Type"), "content-type with %s", tt.name)
			assert.Equal(t, tt.wantCL, res.header.Get("Content-Length"), "content-length with %s", tt.name)
			assert.Equal(t, tt.wantXA, res.header.Get("X-A"), "header from the mutation with %s", tt.name)
			assert.Len(t, up.requests(), tt.wantUpstream, "upstream requests with %s", tt.name)
			rec := onlyRecord(t, e)
			assert.Equal(t, tt.wantDetails, rec.Details(), "details with %s", tt.name)
			ex := rec.Exchange()
			assert.Equal(t, "<- immediate_response", ex[len(ex)-1], "nothing follows the immediate response with %s", tt.name)
			<-scriptDone
			assert.True(t, envoyClosed(end), "stream closed after the immediate response with %s, got %v", tt.name, end)
		})
	}
}

// TestBufferLimit: §1.6 — a BUFFERED request over the buffer limit is a 413 and never reaches
// the upstream; a BUFFERED response over it is a 500; STREAMED is not limited. The limit
// (32 bytes) holds Envoy's own reply bodies, which the filter buffers as responses too.
func TestBufferLimit(t *testing.T) {
	tests := []struct {
		name         string
		giveReq      string
		giveResp     string
		giveMode     *extprocv3.ProcessingMode
		wantStatus   int
		wantBody     string
		wantDetails  string
		wantUpstream int
	}{
		{name: "request at the limit", giveReq: strings.Repeat("q", 32), giveResp: "ok", wantStatus: 200, wantBody: "ok", wantUpstream: 1},
		{name: "request over the limit", giveReq: strings.Repeat("q", 33), giveResp: "ok", wantStatus: 413, wantBody: "Payload Too Large", wantDetails: "request_payload_too_large"},
		{name: "response over the limit", giveReq: "{}", giveResp: strings.Repeat("r", 33), wantStatus: 500, wantBody: "Internal Server Error", wantDetails: "response_payload_too_large", wantUpstream: 1},
		{
			name: "STREAMED has no limit", giveReq: strings.Repeat("q", 80), giveResp: strings.Repeat("r", 80),
			giveMode: mode(extprocv3.ProcessingMode_STREAMED, extprocv3.ProcessingMode_STREAMED), wantStatus: 200, wantBody: strings.Repeat("r", 80), wantUpstream: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			proc := newFakeProc(t, passThrough)
			up := newUpstream(t, func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, tt.giveResp) })
			e := start(t, proc, up, Options{BufferLimit: 32, ProcessingMode: tt.giveMode})
			res := do(t, e, http.MethodPost, "/v1/responses", tt.giveReq)
			require.NoError(t, res.err, "POST with %s", tt.name)
			assert.Equal(t, tt.wantStatus, res.status, "status with %s", tt.name)
			assert.Equal(t, tt.wantBody, res.body, "body with %s", tt.name)
			assert.Len(t, up.requests(), tt.wantUpstream, "upstream requests with %s", tt.name)
			assert.Equal(t, tt.wantDetails, onlyRecord(t, e).Details(), "details with %s", tt.name)
		})
	}
}

// TestRequestOverLimitGoesThroughResponsePath: §1.6 — the 413 is a local reply while ext_proc
// is active, so the server sees it as response headers.
func TestRequestOverLimitGoesThroughResponsePath(t *testing.T) {
	proc := newFakeProc(t, passThrough)
	up := newUpstream(t, nil)
	e := start(t, proc, up, Options{BufferLimit: 20})
	res := do(t, e, http.MethodPost, "/v1/responses", strings.Repeat("x", 21))
	require.NoError(t, res.err, "POST")
	assert.Equal(t, http.StatusRequestEntityTooLarge, res.status, "status")
	assert.Equal(t, "text/plain", res.header.Get("Content-Type"), "content-type")
	var statuses []string
	for _, m := range onlyRecord(t, e).Sent() {
		if h := m.GetResponseHeaders(); h != nil {
			st, _ := headerValue(h.GetHeaders(), ":status")
			statuses = append(statuses, st)
		}
	}
	assert.Equal(t, []string{"413"}, statuses, "response_headers the server saw")
}

// TestMessageTimeout: §5.1/§5.2 — an unanswered message is a 504 with an empty body, or,
// with failure_mode_allow, the request continues unmodified. Only the timer firing is
// relied on (never that it has not fired yet): the first case uses a 100ms message_timeout;
// the response-phase cases keep the shipped 30s and shorten the outstanding call's timer with
// override_message_timeout, so earlier phases cannot time out on a loaded machine.
func TestMessageTimeout(t *testing.T) {
	shorten := func(s *procStream, _ *extprocsvc.ProcessingRequest) error {
		s.send(override(50 * time.Millisecond))
		s.drain()
		return nil
	}
	tests := []struct {
		name         string
		giveScript   script
		giveTimeout  time.Duration
		giveFMA      bool
		wantStatus   int
		wantBody     string
		wantDetails  string
		wantUpstream int
	}{
		{name: "request phase", giveScript: answerUntil("request_headers", stall), giveTimeout: 100 * time.Millisecond, wantStatus: 504, wantDetails: "ext_proc_error_per-message_timeout_exceeded"},
		{name: "response phase", giveScript: answerUntil("response_body", shorten), wantStatus: 504, wantDetails: "ext_proc_error_per-message_timeout_exceeded", wantUpstream: 1},
		{name: "request phase, failure_mode_allow", giveScript: answerUntil("request_headers", stall), giveTimeout: 100 * time.Millisecond, giveFMA: true, wantStatus: 200, wantBody: "upstream body", wantUpstream: 1},
		{name: "response phase, failure_mode_allow", giveScript: answerUntil("response_body", shorten), giveFMA: true, wantStatus: 200, wantBody: "upstream body", wantUpstream: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			proc := newFakeProc(t, tt.giveScript)
			up := newUpstream(t, nil)
			e := start(t, proc, up, Options{MessageTimeout: tt.giveTimeout, FailureModeAllow: ptr(tt.giveFMA)})
			res := do(t, e, http.MethodPost, "/v1/responses", `{"a":1}`)
			require.NoError(t, res.err, "POST with %s", tt.name)
			assert.Equal(t, tt.wantStatus, res.status, "status with %s", tt.name)
			assert.Equal(t, tt.wantBody, res.body, "body with %s", tt.name)
			rec := onlyRecord(t, e)
			assert.Equal(t, tt.wantDetails, rec.Details(), "details with %s", tt.name)
			assert.Equal(t, 1, rec.Stats.MessageTimeouts, "message timeouts with %s", tt.name)
			ups := up.requests()
			require.Len(t, ups, tt.wantUpstream, "upstream requests with %s", tt.name)
			if tt.wantUpstream > 0 {
				assert.Equal(t, `{"a":1}`, ups[0].Body, "upstream body with %s", tt.name)
			}
		})
	}
}

func override(d time.Duration) *extprocsvc.ProcessingResponse {
	return &extprocsvc.ProcessingResponse{OverrideMessageTimeout: durationpb.New(d)}
}

// TestOverrideMessageTimeout: §5.2 — accepted once per outstanding call when 1ms <= value <=
// max_message_timeout and a timer runs; it restarts the timer with the new value. The
// message_timeout stays the shipped 30s: an accepted 50ms override must fire; otherwise the
// server answers once the harness has handled its overrides, and Envoy's counters tell
// which were accepted.
func TestOverrideMessageTimeout(t *testing.T) {
	tests := []struct {
		name         string
		giveOverride []time.Duration
		giveNoMax    bool
		wantStatus   int
		wantReceived int
		wantIgnored  int
	}{
		{name: "accepted: the timer restarts with the new value", giveOverride: []time.Duration{50 * time.Millisecond}, wantStatus: 504, wantReceived: 1},
		{name: "above max_message_timeout: ignored", giveOverride: []time.Duration{301 * time.Second}, wantStatus: 200, wantIgnored: 1},
		{name: "below 1ms: ignored", giveOverride: []time.Duration{500 * time.Microsecond}, wantStatus: 200, wantIgnored: 1},
		{name: "no max_message_timeout: ignored", giveOverride: []time.Duration{50 * time.Millisecond}, giveNoMax: true, wantStatus: 200, wantIgnored: 1},
		{name: "only one per outstanding call", giveOverride: []time.Duration{10 * time.Second, 50 * time.Millisecond}, wantStatus: 200, wantReceived: 1, wantIgnored: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			handled := make(chan struct{}, len(tt.giveOverride))
			proc := newFakeProc(t, answerUntil("request_headers", func(s *procStream, req *extprocsvc.ProcessingRequest) error {
				for _, d := range tt.giveOverride {
					s.send(override(d))
				}
				for range tt.giveOverride {
					select {
					case <-handled:
					case <-s.srv.Context().Done():
						// The timer fired: Envoy closed the stream.
						return nil
					}
				}
				if tt.wantReceived == 1 && tt.wantIgnored == 0 {
					// The accepted 50ms timer must fire; never answer.
					s.drain()
					return nil
				}
				s.send(cont(req))
				return passThrough(s)
			}))
			up := newUpstream(t, nil)
			o := Options{hooks: &testHooks{serverMessage: func(kind string) {
				if kind == "override_message_timeout" {
					handled <- struct{}{}
				}
			}}}
			if tt.giveNoMax {
				o.Config = ShippedConfig(t)
				o.Config.Filter.MaxMessageTimeout = nil
			}
			e := start(t, proc, up, o)
			res := do(t, e, http.MethodPost, "/v1/responses", `{}`)
			require.NoError(t, res.err, "POST with %s", tt.name)
			assert.Equal(t, tt.wantStatus, res.status, "status with %s", tt.name)
			st := onlyRecord(t, e).Stats
			assert.Equal(t, tt.wantReceived, st.OverrideMessageTimeoutReceived, "overrides received with %s", tt.name)
			assert.Equal(t, tt.wantIgnored, st.OverrideMessageTimeoutIgnored, "overrides ignored with %s", tt.name)
		})
	}
}

// TestOverrideMessageTimeoutConsumesMessage: a response carrying override_message_timeout is
// used for that alone; its other fields are ignored and the real answer must follow (§5.2).
func TestOverrideMessageTimeoutConsumesMessage(t *testing.T) {
	proc := newFakeProc(t, answerUntil("request_headers", func(s *procStream, req *extprocsvc.ProcessingRequest) error {
		both := reqHeaders(&extprocsvc.CommonResponse{HeaderMutation: setHeaders(setRaw("x-lost", "1"))})
		both.OverrideMessageTimeout = durationpb.New(10 * time.Second)
		s.send(both)
		s.send(reqHeaders(&extprocsvc.CommonResponse{HeaderMutation: setHeaders(setRaw("x-kept", "1"))}))
		return passThrough(s)
	}))
	up := newUpstream(t, nil)
	e := start(t, proc, up, Options{})
	res := do(t, e, http.MethodPost, "/v1/responses", `{}`)
	require.NoError(t, res.err, "POST")
	assert.Equal(t, http.StatusOK, res.status, "status")
	ups := up.requests()
	require.Len(t, ups, 1, "upstream requests")
	assert.Empty(t, ups[0].Header.Get("X-Lost"), "mutation in the override message ignored")
	assert.Equal(t, "1", ups[0].Header.Get("X-Kept"), "mutation in the real answer applied")
	rec := onlyRecord(t, e)
	assert.Equal(t, []string{"-> request_headers", "<- override_message_timeout", "<- request_headers"}, rec.Exchange()[:3], "exchange")
	assert.Equal(t, 1, rec.Stats.OverrideMessageTimeoutReceived, "override received")
}

// TestOverrideMessageTimeoutWithoutTimer: an override while no call is outstanding is ignored.
func TestOverrideMessageTimeoutWithoutTimer(t *testing.T) {
	overrideHandled := make(chan struct{})
	proc := newFakeProc(t, answerUntil("request_headers", func(s *procStream, req *extprocsvc.ProcessingRequest) error {
		s.send(cont(req))
		s.send(override(10 * time.Second))
		return passThrough(s)
	}))
	up := newUpstream(t, nil)
	var once sync.Once
	e := start(t, proc, up, Options{hooks: &testHooks{serverMessage: func(kind string) {
		if kind == "override_message_timeout" {
			once.Do(func() { close(overrideHandled) })
		}
	}}})
	// The body is held back until the override was handled, so no call is outstanding then.
	req, pw := pipeRequest(t, e, "/v1/responses", 2)
	writeErr := make(chan error, 1)
	go func() {
		<-overrideHandled
		_, err := io.WriteString(pw, "{}")
		writeErr <- errors.Join(err, pw.Close())
	}()
	res := send(e, req)
	require.NoError(t, res.err, "POST")
	require.NoError(t, <-writeErr, "write the body")
	assert.Equal(t, http.StatusOK, res.status, "status")
	st := onlyRecord(t, e).Stats
	assert.Equal(t, 0, st.OverrideMessageTimeoutReceived, "overrides received")
	assert.Equal(t, 1, st.OverrideMessageTimeoutIgnored, "overrides ignored")
}

// closedAddr is an address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err, "listen")
	addr := lis.Addr().String()
	require.NoError(t, lis.Close(), "close listener")
	return addr
}

// TestGrpcErrors: §5.1 — a non-OK end of the stream, or a server that cannot be reached, is
// status_on_error (500 by default) with an empty body; with failure_mode_allow the request
// continues unmodified.
func TestGrpcErrors(t *testing.T) {
	failOn := func(kind string) script {
		return answerUntil(kind, func(*procStream, *extprocsvc.ProcessingRequest) error {
			return status.Error(codes.Internal, "boom")
		})
	}
	tests := []struct {
		name         string
		giveScript   script
		giveDown     bool
		giveOptions  Options
		wantStatus   int
		wantBody     string
		wantDetails  string
		wantUpstream int
	}{
		{name: "error on request headers", giveScript: failOn("request_headers"), wantStatus: 500, wantDetails: "ext_proc_error_gRPC_error_13{boom}"},
		{name: "error on response body", giveScript: failOn("response_body"), wantStatus: 500, wantDetails: "ext_proc_error_gRPC_error_13{boom}", wantUpstream: 1},
		{name: "status_on_error", giveScript: failOn("request_body"), giveOptions: Options{StatusOnError: 503}, wantStatus: 503, wantDetails: "ext_proc_error_gRPC_error_13{boom}"},
		{name: "failure_mode_allow", giveScript: failOn("request_body"), giveOptions: Options{FailureModeAllow: ptr(true)}, wantStatus: 200, wantBody: "upstream body", wantUpstream: 1},
		{name: "per-route failure_mode_allow", giveScript: failOn("request_body"), giveOptions: Options{Config: routeFMA(t)}, wantStatus: 200, wantBody: "upstream body", wantUpstream: 1},
		{name: "server unreachable", giveDown: true, wantStatus: 500, wantDetails: "ext_proc_error_gRPC_error_14{"},
		{name: "server unreachable, failure_mode_allow", giveDown: true, giveOptions: Options{FailureModeAllow: ptr(true)}, wantStatus: 200, wantBody: "upstream body", wantUpstream: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			proc := newFakeProc(t, tt.giveScript)
			up := newUpstream(t, nil)
			o := tt.giveOptions
			o.ExtProcAddr = proc.addr
			if tt.giveDown {
				o.ExtProcAddr = closedAddr(t)
			}
			o.Upstream = up.srv.URL
			e := Start(t, o)
			res := do(t, e, http.MethodPost, "/v1/responses", `{"a":1}`)
			require.NoError(t, res.err, "POST with %s", tt.name)
			assert.Equal(t, tt.wantStatus, res.status, "status with %s", tt.name)
			assert.Equal(t, tt.wantBody, res.body, "body with %s", tt.name)
			rec := onlyRecord(t, e)
			assert.True(t, strings.HasPrefix(rec.Details(), tt.wantDetails), "details with %s: got %q, want prefix %q", tt.name, rec.Details(), tt.wantDetails)
			ups := up.requests()
			require.Len(t, ups, tt.wantUpstream, "upstream requests with %s", tt.name)
			if tt.wantUpstream > 0 {
				assert.Equal(t, `{"a":1}`, ups[0].Body, "upstream body unmodified with %s", tt.name)
			}
		})
	}
}

// routeFMA is the shipped config with failure_mode_allow turned on for /v1/ only.
func routeFMA(t *testing.T) FilterConfig {
	cfg := ShippedConfig(t)
	for i, r := range cfg.Routes {
		if r.Prefix == "/v1/" {
			cfg.Routes[i].PerRoute = &extprocv3.ExtProcPerRoute{Override: &extprocv3.ExtProcPerRoute_Overrides{
				Overrides: &extprocv3.ExtProcOverrides{FailureModeAllow: boolValue(true)},
			}}
		}
	}
	return cfg
}

// TestSpuriousResponses: §0/§5.1 (1.35+) — a response of the wrong kind, an unsolicited one
// or an empty one is status_on_error, or ignored (continue unmodified) with
// failure_mode_allow.
func TestSpuriousResponses(t *testing.T) {
	replyWith := func(resp *extprocsvc.ProcessingResponse) script {
		return answerUntil("request_headers", func(s *procStream, _ *extprocsvc.ProcessingRequest) error {
			s.send(resp)
			return passThrough(s)
		})
	}
	unsolicited := answerUntil("request_headers", func(s *procStream, req *extprocsvc.ProcessingRequest) error {
		s.send(cont(req))
		s.send(cont(req))
		return passThrough(s)
	})
	tests := []struct {
		name        string
		giveScript  script
		giveFMA     bool
		giveConfig  func(*FilterConfig)
		wantStatus  int
		wantBody    string
		wantDetails string
	}{
		{name: "wrong kind", giveScript: replyWith(reqBody(&extprocsvc.CommonResponse{})), wantStatus: 500, wantDetails: "spurious_message"},
		{name: "response kind for the request", giveScript: replyWith(respHeaders(&extprocsvc.CommonResponse{})), wantStatus: 500, wantDetails: "spurious_message"},
		{name: "empty response", giveScript: replyWith(&extprocsvc.ProcessingResponse{}), wantStatus: 500, wantDetails: "unhandled_message"},
		{
			name:        "trailers response",
			giveScript:  replyWith(&extprocsvc.ProcessingResponse{Response: &extprocsvc.ProcessingResponse_RequestTrailers{RequestTrailers: &extprocsvc.TrailersResponse{}}}),
			wantStatus:  500,
			wantDetails: "spurious_message",
		},
		{
			name:        "streamed_immediate_response is not known to the modelled Envoy",
			giveScript:  replyWith(&extprocsvc.ProcessingResponse{Response: &extprocsvc.ProcessingResponse_StreamedImmediateResponse{StreamedImmediateResponse: &extprocsvc.StreamedImmediateResponse{}}}),
			wantStatus:  500,
			wantDetails: "unhandled_message",
		},
		{name: "unsolicited second answer", giveScript: unsolicited, wantStatus: 500, wantDetails: "spurious_message"},
		{
			name:        "immediate response with disable_immediate_response",
			giveScript:  replyWith(immediate(&extprocsvc.ImmediateResponse{Status: httpStatus(403)})),
			giveConfig:  func(c *FilterConfig) { c.Filter.DisableImmediateResponse = true },
			wantStatus:  500,
			wantDetails: "unhandled_immediate_response_due_to_config_disabled_it",
		},
		{name: "failure_mode_allow ignores it", giveScript: replyWith(reqBody(&extprocsvc.CommonResponse{})), giveFMA: true, wantStatus: 200, wantBody: "upstream body"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			proc := newFakeProc(t, tt.giveScript)
			up := newUpstream(t, nil)
			o := Options{FailureModeAllow: ptr(tt.giveFMA)}
			if tt.giveConfig != nil {
				o.Config = ShippedConfig(t)
				tt.giveConfig(&o.Config)
			}
			e := start(t, proc, up, o)
			res := do(t, e, http.MethodPost, "/v1/responses", `{"a":1}`)
			require.NoError(t, res.err, "POST with %s", tt.name)
			assert.Equal(t, tt.wantStatus, res.status, "status with %s", tt.name)
			assert.Equal(t, tt.wantBody, res.body, "body with %s", tt.name)
			rec := onlyRecord(t, e)
			assert.Equal(t, tt.wantDetails, rec.Details(), "details with %s", tt.name)
			assert.Equal(t, 1, rec.Stats.SpuriousMsgsReceived, "spurious messages with %s", tt.name)
			if tt.giveFMA {
				ups := up.requests()
				require.Len(t, ups, 1, "upstream requests with %s", tt.name)
				assert.Equal(t, `{"a":1}`, ups[0].Body, "upstream body unmodified with %s", tt.name)
			}
		})
	}
}

// TestServerClosesWithOK: §0 — the server ending the stream with OK releases whatever is held
// and the request continues unmodified, even with failure_mode_allow false.
func TestServerClosesWithOK(t *testing.T) {
	tests := []struct {
		name      string
		givePhase string
		wantSent  []string
	}{
		{name: "on request headers", givePhase: "request_headers", wantSent: []string{"-> request_headers"}},
		{name: "with the body held", givePhase: "request_body", wantSent: []string{"-> request_headers", "<- request_headers", "-> request_body"}},
		{name: "with the response held", givePhase: "response_body", wantSent: []string{
			"-> request_headers", "<- request_headers", "-> request_body", "<- request_body",
			"-> response_headers", "<- response_headers", "-> response_body",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			proc := newFakeProc(t, answerUntil(tt.givePhase, func(*procStream, *extprocsvc.ProcessingRequest) error { return nil }))
			up := newUpstream(t, nil)
			e := start(t, proc, up, Options{})
			res := do(t, e, http.MethodPost, "/v1/responses", `{"a":1}`, "X-Client", "1")
			require.NoError(t, res.err, "POST with %s", tt.name)
			assert.Equal(t, http.StatusOK, res.status, "status with %s", tt.name)
			assert.Equal(t, "upstream body", res.body, "client body with %s", tt.name)
			assert.Equal(t, "13", res.header.Get("Content-Length"), "client content-length with %s", tt.name)
			ups := up.requests()
			require.Len(t, ups, 1, "upstream requests with %s", tt.name)
			assert.Equal(t, `{"a":1}`, ups[0].Body, "upstream body with %s", tt.name)
			assert.Equal(t, "1", ups[0].Header.Get("X-Client"), "upstream headers with %s", tt.name)
			rec := onlyRecord(t, e)
			assert.Equal(t, tt.wantSent, rec.Exchange(), "exchange with %s", tt.name)
			assert.Equal(t, "server-ok", rec.StreamEnd, "stream end with %s", tt.name)
			assert.Nil(t, rec.LocalReply, "no local reply with %s", tt.name)
		})
	}
}

// TestLocalRepliesGoThroughResponsePath: §1.6 — local replies Envoy generates while ext_proc
// is active (no route, upstream unreachable, route timeout) reach the server as responses.
func TestLocalRepliesGoThroughResponsePath(t *testing.T) {
	hang := make(chan struct{})
	t.Cleanup(func() { close(hang) })
	tests := []struct {
		name        string
		givePath    string
		giveUpDown  bool
		giveTimeout time.Duration
		wantStatus  int
		wantDetails string
	}{
		{name: "no route", givePath: "/other", wantStatus: 404, wantDetails: "route_not_found"},
		{name: "upstream unreachable", givePath: "/v1/responses", giveUpDown: true, wantStatus: 503, wantDetails: "upstream_reset_before_response_started{remote_connection_failure}"},
		{name: "route timeout", givePath: "/v1/responses", giveTimeout: 20 * time.Millisecond, wantStatus: 504, wantDetails: "upstream_response_timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			proc := newFakeProc(t, passThrough)
			up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
				select {
				case <-hang:
				case <-r.Context().Done():
				}
			})
			o := Options{ExtProcAddr: proc.addr, Upstream: up.srv.URL}
			if tt.giveUpDown {
				o.Upstream = "http://" + closedAddr(t)
			}
			if tt.giveTimeout > 0 {
				o.Config = ShippedConfig(t)
				for i := range o.Config.Routes {
					o.Config.Routes[i].Timeout = tt.giveTimeout
				}
			}
			e := Start(t, o)
			res := do(t, e, http.MethodPost, tt.givePath, `{}`)
			require.NoError(t, res.err, "POST with %s", tt.name)
			assert.Equal(t, tt.wantStatus, res.status, "status with %s", tt.name)
			rec := onlyRecord(t, e)
			assert.Equal(t, tt.wantDetails, rec.Details(), "details with %s", tt.name)
			var seen string
			for _, m := range rec.Sent() {
				if h := m.GetResponseHeaders(); h != nil {
					seen, _ = headerValue(h.GetHeaders(), ":status")
				}
			}
			assert.Equal(t, http.StatusText(tt.wantStatus), http.StatusText(atoi(seen)), "response_headers :status the server saw with %s", tt.name)
		})
	}
}

// TestSecondLocalReplyGoesDirect: a local reply that the ext_proc filter is processing as a
// response (here a 413, §1.6) can be overtaken by another local reply, which goes straight
// to the client (here a message timeout on the 413's response_headers).
func TestSecondLocalReplyGoesDirect(t *testing.T) {
	proc := newFakeProc(t, func(s *procStream) error {
		for {
			req := s.recv()
			if req == nil {
				return nil
			}
			if requestKind(req) == "response_headers" {
				s.send(override(50 * time.Millisecond))
				s.drain()
				return nil
			}
			s.send(cont(req))
		}
	})
	up := newUpstream(t, nil)
	// The limit must hold the 413's own body ("Payload Too Large"), which the filter buffers
	// as a response.
	e := start(t, proc, up, Options{BufferLimit: 20})
	res := do(t, e, http.MethodPost, "/v1/responses", strings.Repeat("x", 21))
	require.NoError(t, res.err, "POST")
	assert.Equal(t, http.StatusGatewayTimeout, res.status, "status")
	assert.Empty(t, res.body, "body")
	rec := onlyRecord(t, e)
	assert.Equal(t, "ext_proc_error_per-message_timeout_exceeded", rec.Details(), "details")
	assert.Empty(t, up.requests(), "upstream never contacted")
}

// TestLocalReplyBodyOverLimit: Envoy's own reply body is buffered by the filter like any
// response body, so with a limit smaller than "Payload Too Large" the 413 itself overflows
// and a direct 500 follows.
func TestLocalReplyBodyOverLimit(t *testing.T) {
	proc := newFakeProc(t, passThrough)
	up := newUpstream(t, nil)
	e := start(t, proc, up, Options{BufferLimit: 4})
	res := do(t, e, http.MethodPost, "/v1/responses", "too long")
	require.NoError(t, res.err, "POST")
	assert.Equal(t, http.StatusInternalServerError, res.status, "status")
	assert.Equal(t, "response_payload_too_large", onlyRecord(t, e).Details(), "details")
	assert.Empty(t, up.requests(), "upstream never contacted")
}
