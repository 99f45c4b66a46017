package processor

import (
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"

	// This file holds the answers the server sends Envoy: processing-mode overrides, header and
	// body mutations (content-length kept equal to the body), and immediate responses.

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
)

// servedMode is the processing mode a served request needs, whatever mode its route has (a
// route's ExtProcPerRoute may set another): the whole request body, the response headers, and
// the whole response body, so that the body can be rewritten and the loop reads the complete
// answer. It is sent as the mode_override of the request_headers answer of a served path (a
// request body mode may still change there) and of the response_headers answer of a rewritten
// request (a mode_override is honoured on headers answers only). Envoy merges a mode_override into the filter's configured mode:
// omitted body modes would be NONE, DEFAULT header and trailer modes keep the configured ones.
// This one merges to the shipped envoy.yaml mode, so that mode is the one to list if the filter
// sets allowed_override_modes. The request body mode no longer matters on response headers.
var servedMode = &filterv3.ProcessingMode{
	RequestBodyMode:    filterv3.ProcessingMode_BUFFERED,
	ResponseHeaderMode: filterv3.ProcessingMode_SEND,
	ResponseBodyMode:   filterv3.ProcessingMode_BUFFERED,
}

// Answers that carry nothing of a stream's own are made once and shared: the server never
// modifies a message it has sent.
var (
	// continueServed answers a served path's request headers.
	continueServed = &extprocv3.ProcessingResponse{
		Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{
			Response: &extprocv3.CommonResponse{},
		}},
		ModeOverride: servedMode,
	}
	continueBody = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{
		RequestBody: &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{}},
	}}
	passThroughPlain = passThroughWith(nil)
	// skipResponseBody answers response headers so that Envoy does not send the response body:
	// only the response body mode matters this late, and omitted body modes mean NONE.
	skipResponseBody = &extprocv3.ProcessingResponse{
		Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{
			Response: &extprocv3.CommonResponse{},
		}},
		ModeOverride: &filterv3.ProcessingMode{ResponseBodyMode: filterv3.ProcessingMode_NONE},
	}
	// bufferResponseBody answers a rewritten request's 200 response headers: the loop needs the
	// whole answer in one response_body message.
	bufferResponseBody = &extprocv3.ProcessingResponse{
		Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{
			Response: &extprocv3.CommonResponse{},
		}},
		ModeOverride: servedMode,
	}
	// switchToFullDuplex answers a streaming request's 200 response headers so that the answer
	// is streamed while the loop runs (see docs/architecture.md, "Envoy's modes"): the client gets an
	// event stream, the content-length and content-encoding of the upstream's JSON answer go
	// (Envoy decided on content-length under the old mode), and the response body switches
	// to FULL_DUPLEX_STREAMED, trailers SEND as that mode wants. Envoy then sends the upstream
	// body as it arrives and takes the server's chunks at the server's pace.
	switchToFullDuplex = &extprocv3.ProcessingResponse{
		Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{
			Response: &extprocv3.CommonResponse{HeaderMutation: &extprocv3.HeaderMutation{
				SetHeaders: []*corev3.HeaderValueOption{
					setHeader("content-type", "text/event-stream; charset=utf-8"),
					setHeader("cache-control", "no-cache"),
				},
				RemoveHeaders: []string{"content-length", "content-encoding"},
			}},
		}},
		// Merged into the shipped filter mode this is that mode with the response body
		// FULL_DUPLEX_STREAMED and its trailers SEND: the mode to list if the filter sets
		// allowed_override_modes (Envoy ignores an override not listed, and then sends the body
		// BUFFERED; the server cannot tell, so such a route's profile says stream_mode replay).
		ModeOverride: &filterv3.ProcessingMode{
			RequestBodyMode:     filterv3.ProcessingMode_BUFFERED,
			ResponseHeaderMode:  filterv3.ProcessingMode_SEND,
			ResponseBodyMode:    filterv3.ProcessingMode_FULL_DUPLEX_STREAMED,
			ResponseTrailerMode: filterv3.ProcessingMode_SEND,
		},
	}
	continueResponseBody = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{
		ResponseBody: &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{}},
	}}
)

// passThrough answers request headers so that Envoy sends no bodies and skips the response phase,
// removing the reserved headers named. An omitted body mode in mode_override means NONE
// (see docs/architecture.md, "Envoy's modes").
func passThrough(remove []string) *extprocv3.ProcessingResponse {
	if len(remove) == 0 {
		return passThroughPlain
	}
	return passThroughWith(remove)
}

func passThroughWith(remove []string) *extprocv3.ProcessingResponse {
	common := &extprocv3.CommonResponse{}
	if len(remove) > 0 {
		common.HeaderMutation = &extprocv3.HeaderMutation{RemoveHeaders: remove}
	}
	return &extprocv3.ProcessingResponse{
		Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{Response: common}},
		ModeOverride: &filterv3.ProcessingMode{
			RequestBodyMode:    filterv3.ProcessingMode_NONE,
			ResponseHeaderMode: filterv3.ProcessingMode_SKIP,
			ResponseBodyMode:   filterv3.ProcessingMode_NONE,
		},
	}
}

// continueRequestBody answers a request body, replacing it when body is non-nil (and then setting
// content-length: Envoy keeps and checks it in BUFFERED mode, and a body of another length is a 500).
func continueRequestBody(body []byte, remove []string) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{
		RequestBody: &extprocv3.BodyResponse{Response: bodyMutation(body, nil, remove)},
	}}
}

const jsonContentType = "application/json"

// immediate answers the client directly (an ImmediateResponse): Envoy sends the reply with a
// content-length of len(body), and drops the upstream's answer if there was one.
func immediate(code int, contentType string, body []byte, details string) *extprocv3.ProcessingResponse {
	var set []*corev3.HeaderValueOption
	if contentType != "" {
		set = []*corev3.HeaderValueOption{setHeader("content-type", contentType)}
	}
	return immediateWith(code, set, body, details)
}

// immediateWith is immediate with the headers set given.
func immediateWith(code int, set []*corev3.HeaderValueOption, body []byte, details string) *extprocv3.ProcessingResponse {
	var headers *extprocv3.HeaderMutation
	if len(set) > 0 {
		headers = &extprocv3.HeaderMutation{SetHeaders: set}
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{
		ImmediateResponse: &extprocv3.ImmediateResponse{
			Status:  &typev3.HttpStatus{Code: typev3.StatusCode(code)},
			Headers: headers,
			Body:    body,
			Details: details,
		},
	}}
}

// headerOptions returns the header mutations that set every header of h (its first value), in
// a fixed order.
func headerOptions(h http.Header) []*corev3.HeaderValueOption {
	keys := slices.Sorted(maps.Keys(h))
	set := make([]*corev3.HeaderValueOption, 0, len(keys))
	for _, k := range keys {
		if v := h[k]; len(v) > 0 {
			set = append(set, setHeader(strings.ToLower(k), v[0]))
		}
	}
	return set
}

// bodyMutation replaces the body (when body is non-nil) and keeps content-length equal to its
// length, with extra headers set and removed.
func bodyMutation(body []byte, set []*corev3.HeaderValueOption, remove []string) *extprocv3.CommonResponse {
	resp := &extprocv3.CommonResponse{}
	if body != nil {
		resp.BodyMutation = &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: body}}
		set = append(set, setHeader("content-length", strconv.Itoa(len(body))))
	}
	if len(set) > 0 || len(remove) > 0 {
		resp.HeaderMutation = &extprocv3.HeaderMutation{SetHeaders: set, RemoveHeaders: remove}
	}
	return resp
}

// setHeader replaces a header's value. Envoy reads raw_value only.
func setHeader(key, value string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: key, RawValue: []byte(value)}}
}
