package harness

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLocalReplyAfterResponseHeadersIsReset: §4.3/§5.1 — once the client has the response
// headers (STREAMED response), an ImmediateResponse can only reset the stream.
func TestLocalReplyAfterResponseHeadersIsReset(t *testing.T) {
	proc := newFakeProc(t, answerUntil("response_body", func(s *procStream, _ *extprocsvc.ProcessingRequest) error {
		s.send(immediate(&extprocsvc.ImmediateResponse{Status: httpStatus(403), Body: []byte("late")}))
		s.drain()
		return nil
	}))
	// The upstream body must come after the response_headers answer, or the whole body is
	// handled as one buffered message with the headers still held (§1.2).
	headersHandled := make(chan struct{})
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		select {
		case <-headersHandled:
		case <-r.Context().Done():
			return
		}
		_, _ = io.WriteString(w, "streamed body")
	})
	var once sync.Once
	e := start(t, proc, up, Options{
		ProcessingMode: mode(extprocv3.ProcessingMode_BUFFERED, extprocv3.ProcessingMode_STREAMED),
		hooks: &testHooks{serverMessage: func(kind string) {
			if kind == "response_headers" {
				once.Do(func() { close(headersHandled) })
			}
		}},
	})
	req, err := http.NewRequest(http.MethodPost, e.URL()+"/v1/responses", nil)
	require.NoError(t, err, "build request")
	resp, err := e.Client().Do(req)
	require.NoError(t, err, "the response headers arrive")
	assert.Equal(t, http.StatusOK, resp.StatusCode, "status sent before the immediate response")
	_, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Error(t, err, "the body ends with a reset, not a clean end")
	rec := onlyRecord(t, e)
	assert.True(t, rec.Reset, "recorded reset")
	assert.Equal(t, 0, rec.Status, "no complete response")
	require.NotNil(t, rec.LocalReply, "local reply attempted")
	assert.Equal(t, 403, rec.LocalReply.Status, "local reply status")
}

// TestClearRouteCache: §3.5 — with a header mutation and clear_route_cache the route is chosen
// again from the mutated headers; without a header mutation the flag is ignored.
func TestClearRouteCache(t *testing.T) {
	tests := []struct {
		name        string
		giveCommon  *extprocsvc.CommonResponse
		wantPath    string
		wantIgnored int
	}{
		{
			name:       "path changed without clearing: same route",
			giveCommon: &extprocsvc.CommonResponse{HeaderMutation: setHeaders(setRaw(":path", "/analyst/v1/x"))},
			wantPath:   "/analyst/v1/x",
		},
		{
			name:       "path changed and route cache cleared: the analyst route rewrites",
			giveCommon: &extprocsvc.CommonResponse{HeaderMutation: setHeaders(setRaw(":path", "/analyst/v1/x")), ClearRouteCache: true},
			wantPath:   "/v1/x",
		},
		{
			name:        "clear_route_cache without a header mutation is ignored",
			giveCommon:  &extprocsvc.CommonResponse{ClearRouteCache: true},
			wantPath:    "/v1/responses",
			wantIgnored: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			proc := newFakeProc(t, scripted(map[string]*extprocsvc.CommonResponse{"request_body": tt.giveCommon}))
			up := newUpstream(t, nil)
			e := start(t, proc, up, Options{})
			res := do(t, e, http.MethodPost, "/v1/responses", `{}`)
			require.NoError(t, res.err, "POST with %s", tt.name)
			ups := up.requests()
			require.Len(t, ups, 1, "upstream requests with %s", tt.name)
			assert.Equal(t, tt.wantPath, ups[0].Path, "upstream path with %s", tt.name)
			assert.Equal(t, tt.wantIgnored, onlyRecord(t, e).Stats.ClearRouteCacheIgnored, "clear_route_cache_ignored with %s", tt.name)
		})
	}
}

// TestRouteTimeoutSpansUpstreamResponse: §7.12 — the route timeout runs from the end of the
// request until the upstream response ends (the router disarms it at the upstream's end of
// stream, router.cc onUpstreamComplete), not until the response headers. An upstream that
// stalls after its headers gets the router's 504 straight to the client while ext_proc still
// holds the headers (BUFFERED), and a reset once the client has them (body NONE after a
// mode_override). What ext_proc does with a complete response is not timed by the route.
func TestRouteTimeoutSpansUpstreamResponse(t *testing.T) {
	const late = 600 * time.Millisecond
	// stallAfterHeaders sends the response headers at once and its body late, unless the
	// request is reset first.
	stallAfterHeaders := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		select {
		case <-time.After(late):
			_, _ = io.WriteString(w, "late body")
		case <-r.Context().Done():
		}
	}
	tests := []struct {
		name         string
		giveTimeout  time.Duration
		giveUpstream http.HandlerFunc
		giveScript   script
		wantStatus   int
		wantBody     string
		wantReset    bool
		wantDetails  string
		wantExchange []string
	}{
		{
			name:         "headers held by ext_proc: direct 504",
			giveTimeout:  50 * time.Millisecond,
			giveUpstream: stallAfterHeaders,
			giveScript:   passThrough,
			wantStatus:   http.StatusGatewayTimeout,
			wantBody:     "upstream request timeout",
			wantDetails:  "upstream_response_timeout",
			wantExchange: []string{
				"-> request_headers", "<- request_headers", "-> request_body", "<- request_body",
				"-> response_headers", "<- response_headers",
			},
		},
		{
			name:         "headers already sent to the client: reset",
			giveTimeout:  50 * time.Millisecond,
			giveUpstream: stallAfterHeaders,
			giveScript: func(s *procStream) error {
				for {
					req := s.recv()
					if req == nil {
						return nil
					}
					resp := cont(req)
					if requestKind(req) == "response_headers" {
						resp.ModeOverride = &extprocv3.ProcessingMode{ResponseBodyMode: extprocv3.ProcessingMode_NONE}
					}
					s.send(resp)
				}
			},
			wantStatus:  http.StatusOK,
			wantReset:   true,
			wantDetails: "upstream_response_timeout",
			wantExchange: []string{
				"-> request_headers", "<- request_headers", "-> request_body", "<- request_body",
				"-> response_headers", "<- response_headers",
			},
		},
		{
			name:         "complete upstream response: a slow response_body answer is not timed out",
			giveTimeout:  late / 2,
			giveUpstream: nil,
			giveScript: answerUntil("response_body", func(s *procStream, req *extprocsvc.ProcessingRequest) error {
				time.Sleep(late)
				s.send(cont(req))
				return s.drain()
			}),
			wantStatus: http.StatusOK,
			wantBody:   "upstream body",
			wantExchange: []string{
				"-> request_headers", "<- request_headers", "-> request_body", "<- request_body",
				"-> response_headers", "<- response_headers", "-> response_body", "<- response_body",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			proc := newFakeProc(t, tt.giveScript)
			up := newUpstream(t, tt.giveUpstream)
			cfg := ShippedConfig(t)
			for i := range cfg.Routes {
				cfg.Routes[i].Timeout = tt.giveTimeout
			}
			e := start(t, proc, up, Options{Config: cfg})
			req, err := http.NewRequest(http.MethodPost, e.URL()+"/v1/responses", strings.NewReader(`{}`))
			require.NoError(t, err, "build request with %s", tt.name)
			resp, err := e.Client().Do(req)
			require.NoError(t, err, "response headers with %s", tt.name)
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			assert.Equal(t, tt.wantStatus, resp.StatusCode, "status with %s", tt.name)
			rec := onlyRecord(t, e)
			if tt.wantReset {
				assert.Error(t, err, "the body ends with a reset with %s", tt.name)
				assert.True(t, rec.Reset, "recorded reset with %s", tt.name)
			} else {
				assert.NoError(t, err, "read the body with %s", tt.name)
				assert.Equal(t, tt.wantBody, string(body), "body with %s", tt.name)
				assert.False(t, rec.Reset, "no reset with %s", tt.name)
			}
			assert.Equal(t, tt.wantDetails, rec.Details(), "details with %s", tt.name)
			assert.Equal(t, tt.wantExchange, rec.Exchange(), "exchange with %s", tt.name)
		})
	}
}
