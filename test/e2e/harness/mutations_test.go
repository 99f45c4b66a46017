package harness

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	mutationrulesv3 "github.com/envoyproxy/go-control-plane/envoy/config/common/mutation_rules/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// scripted answers each message kind with the given CommonResponse (CONTINUE when absent),
// and each header response with the given status.
func scripted(commons map[string]*extprocsvc.CommonResponse) script {
	return func(s *procStream) error {
		for {
			req := s.recv()
			if req == nil {
				return nil
			}
			c := commons[requestKind(req)]
			if c == nil {
				c = &extprocsvc.CommonResponse{}
			}
			s.send(answer(req, c))
		}
	}
}

// TestHeaderMutations: §3.1/§3.2 — raw_value only, append semantics, the protected headers,
// invalid names and values, count limits, mutation_rules.
func TestHeaderMutations(t *testing.T) {
	many := &extprocsvc.HeaderMutation{}
	for i := range 101 {
		many.SetHeaders = append(many.SetHeaders, setRaw(fmt.Sprintf("x-n%d", i), "v"))
	}
	tests := []struct {
		name       string
		giveOn     string
		giveMut    *extprocsvc.HeaderMutation
		giveRules  *mutationrulesv3.HeaderMutationRules
		wantStatus int
		// wantDetails is the local reply's details ("" = none).
		wantDetails string
		// wantUpstream are headers the upstream must see (nil value: absent).
		wantUpstream map[string][]string
		wantPath     string
		wantMethod   string
		wantClient   map[string][]string
		// wantRejected is rejected_header_mutations: ignored and refused mutations both count.
		wantRejected int
	}{
		{
			name:         "raw_value sets the header",
			giveOn:       "request_headers",
			giveMut:      setHeaders(setRaw("x-a", "1")),
			wantStatus:   http.StatusOK,
			wantUpstream: map[string][]string{"X-A": {"1"}},
		},
		{
			name:         "value only gives an empty header value",
			giveOn:       "request_headers",
			giveMut:      setHeaders(&corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: "x-a", Value: "1"}}),
			wantStatus:   http.StatusOK,
			wantUpstream: map[string][]string{"X-A": {""}},
		},
		{
			// Envoy 1.40 (twin test): no error, raw_value is used.
			name:         "value and raw_value both set: raw_value wins",
			giveOn:       "request_headers",
			giveMut:      setHeaders(&corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: "x-a", Value: "1", RawValue: []byte("2")}}),
			wantStatus:   http.StatusOK,
			wantUpstream: map[string][]string{"X-A": {"2"}},
		},
		{
			name:         "append adds a value",
			giveOn:       "request_headers",
			giveMut:      setHeaders(appendRaw("x-client", "2")),
			wantStatus:   http.StatusOK,
			wantUpstream: map[string][]string{"X-Client": {"1", "2"}},
		},
		{
			name:         "append defaults to false: replace",
			giveOn:       "request_headers",
			giveMut:      setHeaders(setRaw("x-client", "2")),
			wantStatus:   http.StatusOK,
			wantUpstream: map[string][]string{"X-Client": {"2"}},
		},
		{
			name:         "append_action is ignored",
			giveOn:       "request_headers",
			giveMut:      setHeaders(&corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: "x-client", RawValue: []byte("2")}, AppendAction: corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD}),
			wantStatus:   http.StatusOK,
			wantUpstream: map[string][]string{"X-Client": {"2"}},
		},
		{
			name:         "remove",
			giveOn:       "request_headers",
			giveMut:      &extprocsvc.HeaderMutation{RemoveHeaders: []string{"x-client"}},
			wantStatus:   http.StatusOK,
			wantUpstream: map[string][]string{"X-Client": nil},
		},
		{
			name:         "removing :path and host is ignored",
			giveOn:       "request_headers",
			giveMut:      &extprocsvc.HeaderMutation{RemoveHeaders: []string{":path", "host"}},
			wantStatus:   http.StatusOK,
			wantPath:     "/v1/responses",
			wantRejected: 2,
		},
		{
			name:         "routing headers and x-envoy-* are not mutable by default",
			giveOn:       "request_headers",
			giveMut:      setHeaders(setRaw(":authority", "evil"), setRaw("host", "evil"), setRaw(":method", "PUT"), setRaw(":scheme", "https"), setRaw("x-envoy-foo", "1")),
			wantStatus:   http.StatusOK,
			wantMethod:   http.MethodPost,
			wantUpstream: map[string][]string{"X-Envoy-Foo": nil},
			wantRejected: 5,
		},
		{
			name:       ":path is mutable",
			giveOn:     "request_headers",
			giveMut:    setHeaders(setRaw(":path", "/v1/other")),
			wantStatus: http.StatusOK,
			wantPath:   "/v1/other",
		},
		{
			name:       ":status is mutable on responses",
			giveOn:     "response_headers",
			giveMut:    setHeaders(setRaw(":status", "201"), setRaw("x-r", "1")),
			wantStatus: http.StatusCreated,
			wantClient: map[string][]string{"X-R": {"1"}},
		},
		{
			name:         ":status below 200 is ignored",
			giveOn:       "response_headers",
			giveMut:      setHeaders(setRaw(":status", "101")),
			wantStatus:   http.StatusOK,
			wantRejected: 1,
		},
		{
			name:         "invalid header name",
			giveOn:       "request_headers",
			giveMut:      setHeaders(setRaw("bad name", "1")),
			wantStatus:   http.StatusInternalServerError,
			wantDetails:  "Invalid_character_in_set_headers_mutation.",
			wantRejected: 1,
		},
		{
			name:         "invalid header value",
			giveOn:       "response_headers",
			giveMut:      setHeaders(setRaw("x-a", "1\r\nx-b: 2")),
			wantStatus:   http.StatusInternalServerError,
			wantDetails:  "Invalid_character_in_set_headers_mutation.",
			wantRejected: 1,
		},
		{
			name:         "invalid name to remove",
			giveOn:       "request_headers",
			giveMut:      &extprocsvc.HeaderMutation{RemoveHeaders: []string{"bad name"}},
			wantStatus:   http.StatusInternalServerError,
			wantDetails:  "Invalid_character_in_remove_headers_mutation.",
			wantRejected: 1,
		},
		{
			name:         "more set_headers than max_headers_count",
			giveOn:       "request_headers",
			giveMut:      many,
			wantStatus:   http.StatusInternalServerError,
			wantDetails:  "Header_mutation_remove_header_count_0_or_set_header_count_101_exceed_the_HCM_header_countlimit_100",
			wantRejected: 1,
		},
		{
			name:         "disallow_is_error turns an ignored mutation into an error",
			giveOn:       "request_headers",
			giveMut:      setHeaders(setRaw("host", "evil")),
			giveRules:    &mutationrulesv3.HeaderMutationRules{DisallowIsError: wrapperspb.Bool(true)},
			wantStatus:   http.StatusInternalServerError,
			wantDetails:  "Invalid_attempt_to_modify_host",
			wantRejected: 1,
		},
		{
			name:         "allow_all_routing lets :method change",
			giveOn:       "request_headers",
			giveMut:      setHeaders(setRaw(":method", "PUT")),
			giveRules:    &mutationrulesv3.HeaderMutationRules{AllowAllRouting: wrapperspb.Bool(true)},
			wantStatus:   http.StatusOK,
			wantMethod:   http.MethodPut,
			wantRejected: 0,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			proc := newFakeProc(t, scripted(map[string]*extprocsvc.CommonResponse{tt.giveOn: {HeaderMutation: tt.giveMut}}))
			up := newUpstream(t, nil)
			o := Options{}
			if tt.giveRules != nil {
				o.Config = ShippedConfig(t)
				o.Config.Filter.MutationRules = tt.giveRules
			}
			e := start(t, proc, up, o)
			res := do(t, e, http.MethodPost, "/v1/responses", `{}`, "X-Client", "1")
			require.NoError(t, res.err, "POST with %s", tt.name)
			assert.Equal(t, tt.wantStatus, res.status, "status with %s", tt.name)
			rec := onlyRecord(t, e)
			assert.Equal(t, tt.wantDetails, rec.Details(), "details with %s", tt.name)
			assert.Equal(t, tt.wantRejected, rec.Stats.RejectedHeaderMutations, "rejected mutations with %s", tt.name)
			if tt.wantDetails != "" {
				assert.Empty(t, res.body, "error replies have an empty body, with %s", tt.name)
				assert.Empty(t, res.header.Get("Content-Type"), "error replies have no content-type, with %s", tt.name)
				return
			}
			ups := up.requests()
			require.Len(t, ups, 1, "upstream requests with %s", tt.name)
			for k, v := range tt.wantUpstream {
				assert.Equal(t, v, ups[0].Header[k], "upstream header %s with %s", k, tt.name)
			}
			if tt.wantPath != "" {
				assert.Equal(t, tt.wantPath, ups[0].Path, "upstream path with %s", tt.name)
			}
			if tt.wantMethod != "" {
				assert.Equal(t, tt.wantMethod, ups[0].Method, "upstream method with %s", tt.name)
			}
			for k, v := range tt.wantClient {
				assert.Equal(t, v, res.header[k], "client header %s with %s", k, tt.name)
			}
		})
	}
}

// TestContentLength: §3.4 — in BUFFERED+SEND content-length is kept and checked against a
// mutated body, on the request and on the response; the server fixes it with set_headers (in
// the same or the headers response) or by removing it.
func TestContentLength(t *testing.T) {
	mismatch := "mismatch_between_content_length_and_the_length_of_the_mutated_body"
	tests := []struct {
		name        string
		giveChunked bool
		give        map[string]*extprocsvc.CommonResponse
		wantStatus  int
		wantDetails string
		// wantUpstreamBody / wantUpstreamCL describe the upstream request ("" = not sent).
		wantUpstreamBody string
		wantUpstreamCL   int64
		wantClientBody   string
		wantClientCL     string
	}{
		{
			name:        "request body mutated without fixing content-length",
			give:        map[string]*extprocsvc.CommonResponse{"request_body": {BodyMutation: bodyMut("longer body")}},
			wantStatus:  http.StatusInternalServerError,
			wantDetails: mismatch,
		},
		{
			name:        "request body cleared without fixing content-length",
			give:        map[string]*extprocsvc.CommonResponse{"request_body": {BodyMutation: &extprocsvc.BodyMutation{Mutation: &extprocsvc.BodyMutation_ClearBody{ClearBody: true}}}},
			wantStatus:  http.StatusInternalServerError,
			wantDetails: mismatch,
		},
		{
			name: "content-length set in the same body response",
			give: map[string]*extprocsvc.CommonResponse{"request_body": {
				BodyMutation: bodyMut("longer body"), HeaderMutation: setHeaders(setRaw("content-length", "11")),
			}},
			wantStatus: http.StatusOK, wantUpstreamBody: "longer body", wantUpstreamCL: 11,
			wantClientBody: "upstream body", wantClientCL: "13",
		},
		{
			name: "content-length set in the headers response",
			give: map[string]*extprocsvc.CommonResponse{
				"request_headers": {HeaderMutation: setHeaders(setRaw("content-length", "11"))},
				"request_body":    {BodyMutation: bodyMut("longer body")},
			},
			wantStatus: http.StatusOK, wantUpstreamBody: "longer body", wantUpstreamCL: 11,
			wantClientBody: "upstream body", wantClientCL: "13",
		},
		{
			name: "content-length removed",
			give: map[string]*extprocsvc.CommonResponse{"request_body": {
				BodyMutation: bodyMut("longer body"), HeaderMutation: &extprocsvc.HeaderMutation{RemoveHeaders: []string{"content-length"}},
			}},
			wantStatus: http.StatusOK, wantUpstreamBody: "longer body", wantUpstreamCL: -1,
			wantClientBody: "upstream body", wantClientCL: "13",
		},
		{
			name:        "chunked request: nothing to check",
			giveChunked: true,
			give:        map[string]*extprocsvc.CommonResponse{"request_body": {BodyMutation: bodyMut("longer body")}},
			wantStatus:  http.StatusOK, wantUpstreamBody: "longer body", wantUpstreamCL: -1,
			wantClientBody: "upstream body", wantClientCL: "13",
		},
		{
			name:             "response body mutated without fixing content-length",
			give:             map[string]*extprocsvc.CommonResponse{"response_body": {BodyMutation: bodyMut("x")}},
			wantStatus:       http.StatusInternalServerError,
			wantDetails:      mismatch,
			wantUpstreamBody: "{}", wantUpstreamCL: 2,
		},
		{
			name: "response content-length fixed",
			give: map[string]*extprocsvc.CommonResponse{"response_body": {
				BodyMutation: bodyMut("x"), HeaderMutation: setHeaders(setRaw("content-length", "1")),
			}},
			wantStatus: http.StatusOK, wantUpstreamBody: "{}", wantUpstreamCL: 2,
			wantClientBody: "x", wantClientCL: "1",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			proc := newFakeProc(t, scripted(tt.give))
			up := newUpstream(t, nil)
			e := start(t, proc, up, Options{})
			req, err := http.NewRequest(http.MethodPost, e.URL()+"/v1/responses", strings.NewReader("{}"))
			require.NoError(t, err, "build request")
			if tt.giveChunked {
				req.Body = io.NopCloser(strings.NewReader("{}"))
				req.ContentLength = -1
			}
			res := send(e, req)
			require.NoError(t, res.err, "POST with %s", tt.name)
			assert.Equal(t, tt.wantStatus, res.status, "status with %s", tt.name)
			assert.Equal(t, tt.wantDetails, onlyRecord(t, e).Details(), "details with %s", tt.name)
			ups := up.requests()
			if tt.wantUpstreamBody == "" {
				assert.Empty(t, ups, "upstream requests with %s", tt.name)
				return
			}
			require.Len(t, ups, 1, "upstream requests with %s", tt.name)
			assert.Equal(t, tt.wantUpstreamBody, ups[0].Body, "upstream body with %s", tt.name)
			assert.Equal(t, tt.wantUpstreamCL, ups[0].ContentLen, "upstream content-length with %s", tt.name)
			if tt.wantDetails == "" {
				assert.Equal(t, tt.wantClientBody, res.body, "client body with %s", tt.name)
				assert.Equal(t, tt.wantClientCL, res.header.Get("Content-Length"), "client content-length with %s", tt.name)
			}
		})
	}
}

// TestContentLengthRemovedInStreamed: §3.4 — STREAMED removes content-length in both
// directions and skips a content-length in set_headers.
func TestContentLengthRemovedInStreamed(t *testing.T) {
	proc := newFakeProc(t, scripted(map[string]*extprocsvc.CommonResponse{
		"response_headers": {HeaderMutation: setHeaders(setRaw("content-length", "13"))},
	}))
	up := newUpstream(t, nil)
	e := start(t, proc, up, Options{ProcessingMode: mode(extprocv3.ProcessingMode_STREAMED, extprocv3.ProcessingMode_STREAMED)})
	res := do(t, e, http.MethodPost, "/v1/responses", `{}`)
	require.NoError(t, res.err, "POST")
	assert.Equal(t, "upstream body", res.body, "client body")
	assert.Empty(t, res.header.Get("Content-Length"), "client content-length removed")
	ups := up.requests()
	require.Len(t, ups, 1, "upstream requests")
	assert.Equal(t, int64(-1), ups[0].ContentLen, "upstream content-length removed")
	rec := onlyRecord(t, e)
	rh := rec.Sent()
	for _, m := range rh {
		if h := m.GetResponseHeaders(); h != nil {
			cl, _ := headerValue(h.GetHeaders(), "content-length")
			assert.Equal(t, "13", cl, "the server still sees the upstream content-length")
		}
	}
}

// TestContinueAndReplace: §4.2 — CONTINUE_AND_REPLACE on a headers response replaces the body
// (even of a GET), may set :method, removes content-length, and ends body processing in that
// direction; without a body mutation the original body passes through unprocessed.
func TestContinueAndReplace(t *testing.T) {
	tests := []struct {
		name       string
		giveMethod string
		giveBody   string
		giveCommon *extprocsvc.CommonResponse
		wantMethod string
		wantBody   string
		wantCL     int64
	}{
		{
			name: "GET becomes a POST with a body", giveMethod: http.MethodGet,
			giveCommon: &extprocsvc.CommonResponse{
				Status:         extprocsvc.CommonResponse_CONTINUE_AND_REPLACE,
				HeaderMutation: setHeaders(setRaw(":method", "POST"), setRaw("content-length", "8")),
				BodyMutation:   bodyMut("new body"),
			},
			wantMethod: http.MethodPost, wantBody: "new body", wantCL: -1,
		},
		{
			name: "a POST body is replaced and not sent to the server", giveMethod: http.MethodPost, giveBody: "original",
			giveCommon: &extprocsvc.CommonResponse{Status: extprocsvc.CommonResponse_CONTINUE_AND_REPLACE, BodyMutation: bodyMut("replaced body")},
			wantMethod: http.MethodPost, wantBody: "replaced body", wantCL: -1,
		},
		{
			name: "without a body mutation the body passes unprocessed", giveMethod: http.MethodPost, giveBody: "original",
			giveCommon: &extprocsvc.CommonResponse{Status: extprocsvc.CommonResponse_CONTINUE_AND_REPLACE},
			wantMethod: http.MethodPost, wantBody: "original", wantCL: 8,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			proc := newFakeProc(t, scripted(map[string]*extprocsvc.CommonResponse{"request_headers": tt.giveCommon}))
			up := newUpstream(t, nil)
			e := start(t, proc, up, Options{})
			res := do(t, e, tt.giveMethod, "/v1/responses", tt.giveBody)
			require.NoError(t, res.err, "%s", tt.name)
			assert.Equal(t, http.StatusOK, res.status, "status with %s", tt.name)
			ups := up.requests()
			require.Len(t, ups, 1, "upstream requests with %s", tt.name)
			assert.Equal(t, tt.wantMethod, ups[0].Method, "upstream method with %s", tt.name)
			assert.Equal(t, tt.wantBody, ups[0].Body, "upstream body with %s", tt.name)
			assert.Equal(t, tt.wantCL, ups[0].ContentLen, "upstream content-length with %s", tt.name)
			assert.Equal(t, []string{
				"-> request_headers", "<- request_headers",
				"-> response_headers", "<- response_headers", "-> response_body", "<- response_body",
			}, onlyRecord(t, e).Exchange(), "no request_body message with %s", tt.name)
		})
	}
}
