package harness

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// envoyClosed reports whether err is how a server sees Envoy's close: half-close (io.EOF),
// then reset (Canceled), §0.
func envoyClosed(err error) bool {
	return errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled
}

// TestBufferedExchange follows §1.1 message by message, checking what §0 says every message
// carries, and that BUFFERED holds the headers in both directions until the body response,
// whether the body arrives before or after the request_headers response.
func TestBufferedExchange(t *testing.T) {
	tests := []struct {
		name         string
		giveBodyLate bool
	}{
		{name: "body before the headers response"},
		{name: "body after the headers response", giveBodyLate: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			testBufferedExchange(t, tt.giveBodyLate)
		})
	}
}

func testBufferedExchange(t *testing.T, bodyLate bool) {
	var requestBodyAnswered, responseBodyAnswered atomic.Bool
	var streamEnd error
	var up *fakeUpstream
	done := make(chan struct{})
	bodyIn := make(chan struct{})      // the harness has handled the whole client body
	headersDone := make(chan struct{}) // the script answered request_headers
	proc := newFakeProc(t, func(s *procStream) error {
		defer close(done)
		req := s.expect("request_headers")
		if req == nil {
			return errScript
		}
		pc := req.GetProtocolConfig()
		if assert.NotNil(t, pc, "protocol_config on the first message") {
			assert.Equal(t, extprocv3.ProcessingMode_BUFFERED, pc.GetRequestBodyMode(), "protocol_config.request_body_mode")
			assert.Equal(t, extprocv3.ProcessingMode_BUFFERED, pc.GetResponseBodyMode(), "protocol_config.response_body_mode")
		}
		assert.NotNil(t, req.GetMetadataContext(), "metadata_context on request_headers")
		hs := req.GetRequestHeaders()
		assert.False(t, hs.GetEndOfStream(), "request_headers.end_of_stream with a body")
		var keys []string
		for _, h := range hs.GetHeaders().GetHeaders() {
			keys = append(keys, h.GetKey())
			assert.Empty(t, h.GetValue(), "header %s: value must be empty, raw_value only", h.GetKey())
			assert.Equal(t, strings.ToLower(h.GetKey()), h.GetKey(), "header keys are lower-case")
		}
		require.GreaterOrEqual(t, len(keys), 4, "request headers")
		assert.Equal(t, []string{":authority", ":path", ":method", ":scheme"}, keys[:4], "pseudo-headers first")
		for name, want := range map[string]string{
			":path": "/v1/responses?x=1", ":method": "POST", ":scheme": "http",
			"content-type": "application/json", "content-length": "11", "x-forwarded-proto": "http",
		} {
			got, ok := headerValue(hs.GetHeaders(), name)
			assert.True(t, ok, "request header %s present", name)
			assert.Equal(t, want, got, "request header %s", name)
		}
		id, ok := headerValue(hs.GetHeaders(), "x-request-id")
		assert.True(t, ok && len(id) == 36, "x-request-id generated, got %q", id)
		if !bodyLate && !s.wait(bodyIn) {
			return errScript
		}
		s.send(cont(req))
		close(headersDone)

		req = s.expect("request_body")
		if req == nil {
			return errScript
		}
		assert.Nil(t, req.GetProtocolConfig(), "protocol_config only on the first message")
		assert.NotNil(t, req.GetMetadataContext(), "metadata_context on request_body")
		assert.Equal(t, `{"a":"b12"}`, string(req.GetRequestBody().GetBody()), "request_body.body")
		assert.True(t, req.GetRequestBody().GetEndOfStream(), "request_body.end_of_stream")
		// A body response may still set request headers: they are held until now.
		requestBodyAnswered.Store(true)
		s.send(reqBody(&extprocsvc.CommonResponse{HeaderMutation: setHeaders(setRaw("x-added", "by-body-response"))}))

		req = s.expect("response_headers")
		if req == nil {
			return errScript
		}
		assert.Nil(t, req.GetProtocolConfig(), "protocol_config only on the first message")
		rh := req.GetResponseHeaders()
		assert.Equal(t, ":status", rh.GetHeaders().GetHeaders()[0].GetKey(), "response :status first")
		st, _ := headerValue(rh.GetHeaders(), ":status")
		assert.Equal(t, "200", st, "response :status")
		_, ok = headerValue(rh.GetHeaders(), "x-envoy-upstream-service-time")
		assert.True(t, ok, "x-envoy-upstream-service-time added by the router")
		assert.False(t, rh.GetEndOfStream(), "response_headers.end_of_stream with a body")
		s.send(cont(req))

		req = s.expect("response_body")
		if req == nil {
			return errScript
		}
		assert.Equal(t, "upstream body", string(req.GetResponseBody().GetBody()), "response_body.body")
		assert.True(t, req.GetResponseBody().GetEndOfStream(), "response_body.end_of_stream")
		responseBodyAnswered.Store(true)
		s.send(respBody(&extprocsvc.CommonResponse{HeaderMutation: setHeaders(setRaw("x-resp", "by-body-response"))}))
		streamEnd = s.drain()
		return nil
	})
	up = newUpstream(t, func(w http.ResponseWriter, _ *http.Request) {
		assert.True(t, requestBodyAnswered.Load(), "upstream contacted before the request_body response")
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, "upstream body")
	})
	var once sync.Once
	e := start(t, proc, up, Options{hooks: &testHooks{downstreamData: func(eos bool) {
		if eos {
			once.Do(func() { close(bodyIn) })
		}
	}}})

	pr, pw := io.Pipe()
	req, err := http.NewRequest(http.MethodPost, e.URL()+"/v1/responses?x=1", pr)
	require.NoError(t, err, "build request")
	req.ContentLength = 11
	req.Header.Set("Content-Type", "application/json")
	writeErr := make(chan error, 1)
	go func() {
		if bodyLate {
			<-headersDone
		}
		_, err := io.WriteString(pw, `{"a":"b12"}`)
		writeErr <- errors.Join(err, pw.Close())
	}()
	resp, err := e.Client().Do(req)
	require.NoError(t, err, "POST /v1/responses")
	require.NoError(t, <-writeErr, "write the request body")
	assert.True(t, responseBodyAnswered.Load(), "client got headers before the response_body response")
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode, "status")
	assert.Equal(t, "upstream body", string(body), "body")
	assert.Equal(t, "by-body-response", resp.Header.Get("X-Resp"), "response header set by the response_body response")
	assert.Equal(t, "13", resp.Header.Get("Content-Length"), "content-length kept (BUFFERED)")

	ups := up.requests()
	require.Len(t, ups, 1, "upstream requests")
	assert.Equal(t, "by-body-response", ups[0].Header.Get("X-Added"), "request header set by the request_body response")
	assert.Equal(t, `{"a":"b12"}`, ups[0].Body, "upstream body")
	assert.Equal(t, int64(11), ups[0].ContentLen, "upstream content-length kept")
	assert.Equal(t, "/v1/responses?x=1", ups[0].Path, "upstream path")
	assert.Equal(t, "600000", ups[0].Header.Get("X-Envoy-Expected-Rq-Timeout-Ms"), "route timeout header")

	<-done
	assert.True(t, envoyClosed(streamEnd), "stream closed by Envoy at the end, got %v", streamEnd)
	rec := onlyRecord(t, e)
	assert.Equal(t, []string{
		"-> request_headers", "<- request_headers", "-> request_body", "<- request_body",
		"-> response_headers", "<- response_headers", "-> response_body", "<- response_body",
	}, rec.Exchange(), "exchange")
	assert.Equal(t, "envoy", rec.StreamEnd, "stream end")
	assert.Equal(t, http.StatusOK, rec.Status, "recorded status")
	assert.Nil(t, rec.LocalReply, "no local reply")
	// BUFFERED: the headers and the whole body go out once the response_body answer is in.
	if assert.Len(t, rec.Downstream, 2, "writes to the client") {
		assert.Equal(t, Delivery{At: rec.Downstream[0].At, AfterMessages: 8, Headers: true}, rec.Downstream[0], "headers")
		assert.Equal(t, Delivery{At: rec.Downstream[1].At, AfterMessages: 8, Body: []byte("upstream body"), End: true}, rec.Downstream[1], "body")
	}
	for i, m := range rec.Sent() {
		assert.NotNil(t, m.GetMetadataContext(), "metadata_context on sent message %d", i)
		assert.Equal(t, i == 0, m.GetProtocolConfig() != nil, "protocol_config only on message 0, message %d", i)
	}
}

// TestRequestWithoutBody: no request_body message for a request without a body, whatever the
// body mode (§1.1); the same for a response without a body.
func TestRequestWithoutBody(t *testing.T) {
	tests := []struct {
		name       string
		giveMethod string
		giveBody   string
		giveStatus int
		want       []string
	}{
		{
			name: "GET", giveMethod: http.MethodGet, giveStatus: http.StatusOK,
			want: []string{"-> request_headers", "<- request_headers", "-> response_headers", "<- response_headers", "-> response_body", "<- response_body"},
		},
		{
			name: "POST with an empty body", giveMethod: http.MethodPost, giveStatus: http.StatusOK,
			want: []string{"-> request_headers", "<- request_headers", "-> response_headers", "<- response_headers", "-> response_body", "<- response_body"},
		},
		{
			name: "response 204", giveMethod: http.MethodPost, giveBody: "x", giveStatus: http.StatusNoContent,
			want: []string{"-> request_headers", "<- request_headers", "-> request_body", "<- request_body", "-> response_headers", "<- response_headers"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			proc := newFakeProc(t, passThrough)
			up := newUpstream(t, func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(tt.giveStatus)
				if tt.giveStatus != http.StatusNoContent {
					_, _ = io.WriteString(w, "ok")
				}
			})
			e := start(t, proc, up, Options{})
			res := do(t, e, tt.giveMethod, "/v1/models", tt.giveBody)
			require.NoError(t, res.err, "%s", tt.name)
			assert.Equal(t, tt.giveStatus, res.status, "status of %s", tt.name)
			rec := onlyRecord(t, e)
			assert.Equal(t, tt.want, rec.Exchange(), "exchange of %s", tt.name)
			sent := rec.Sent()
			if tt.giveBody == "" {
				assert.True(t, sent[0].GetRequestHeaders().GetEndOfStream(), "request_headers.end_of_stream for %s", tt.name)
			}
			if tt.giveStatus == http.StatusNoContent {
				assert.True(t, sent[len(sent)-1].GetResponseHeaders().GetEndOfStream(), "response_headers.end_of_stream for %s", tt.name)
			}
		})
	}
}

// TestClientRequestIDKept: the connection manager only generates x-request-id when absent.
func TestClientRequestIDKept(t *testing.T) {
	proc := newFakeProc(t, passThrough)
	up := newUpstream(t, nil)
	e := start(t, proc, up, Options{})
	res := do(t, e, http.MethodGet, "/v1/models", "", "X-Request-Id", "client-id-1", "X-Forwarded-Proto", "https")
	require.NoError(t, res.err, "GET")
	rec := onlyRecord(t, e)
	hm := rec.Sent()[0].GetRequestHeaders().GetHeaders()
	id, _ := headerValue(hm, "x-request-id")
	assert.Equal(t, "client-id-1", id, "x-request-id")
	xfp, _ := headerValue(hm, "x-forwarded-proto")
	assert.Equal(t, "https", xfp, "x-forwarded-proto kept")
	assert.Equal(t, "client-id-1", up.requests()[0].Header.Get("X-Request-Id"), "upstream x-request-id")
}

// TestPerRouteConfig: the shipped routes (§5.3): /v1/embeddings disables the filter,
// /analyst/v1/ sends the profile as gRPC initial metadata and rewrites the path.
func TestPerRouteConfig(t *testing.T) {
	proc := newFakeProc(t, passThrough)
	up := newUpstream(t, nil)
	e := start(t, proc, up, Options{})

	res := do(t, e, http.MethodPost, "/v1/embeddings", `{"input":"x"}`)
	require.NoError(t, res.err, "POST /v1/embeddings")
	assert.Equal(t, http.StatusOK, res.status, "status of /v1/embeddings")
	assert.Equal(t, 0, proc.streamCount(), "no ext_proc stream on a disabled route")

	res = do(t, e, http.MethodPost, "/analyst/v1/responses", `{}`)
	require.NoError(t, res.err, "POST /analyst/v1/responses")
	res = do(t, e, http.MethodPost, "/v1/responses", `{}`)
	require.NoError(t, res.err, "POST /v1/responses")

	recs := e.Records()
	require.Len(t, recs, 3, "records")
	assert.False(t, recs[0].StreamOpened, "stream opened on /v1/embeddings")
	assert.Empty(t, recs[0].Messages, "messages on /v1/embeddings")
	assert.Equal(t, "/v1/embeddings", recs[0].Route, "route of /v1/embeddings")

	require.Equal(t, 2, proc.streamCount(), "streams")
	proc.mu.Lock()
	analyst, plain := proc.streams[0], proc.streams[1]
	proc.mu.Unlock()
	assert.Equal(t, []string{"analyst"}, analyst.md.Get("x-codeinterp-profile"), "profile metadata on /analyst/v1/")
	assert.Empty(t, plain.md.Get("x-codeinterp-profile"), "no profile metadata on /v1/")
	assert.Equal(t, []string{"codeinterp_ext_proc"}, plain.md.Get(":authority"), "side stream :authority is the cluster name")

	ups := up.requests()
	require.Len(t, ups, 3, "upstream requests")
	assert.Equal(t, "/v1/embeddings", ups[0].Path, "embeddings path")
	assert.Equal(t, "/v1/responses", ups[1].Path, "prefix_rewrite of /analyst/v1/responses")
	// The server sees the path before the rewrite.
	p, _ := headerValue(recs[1].Sent()[0].GetRequestHeaders().GetHeaders(), ":path")
	assert.Equal(t, "/analyst/v1/responses", p, ":path sent to the server")
}
