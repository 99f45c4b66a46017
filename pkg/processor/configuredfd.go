package processor

import (
	"fmt"
	"net/http"
	"slices"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"go.uber.org/zap"

	"github.com/codeinterp/codeinterp/pkg/schema"
)

// This file answers the streams of a filter whose configured processing mode has a body mode
// FULL_DUPLEX_STREAMED (envoy-full-duplex.md §1 "design A"; or a route's ExtProcPerRoute).
// Envoy then ignores every mode_override (§5), so the server cannot switch modes and answers
// each message in the shape the configured mode wants: in a FULL_DUPLEX_STREAMED direction
// every body answer is a streamed_response (any other is spurious, a 500, §3), no message
// timer runs (§2), and Envoy removes content-length (§4). The body chunks of such a direction
// reach the server even while its headers answer is pending (§2), so the server may hold that
// answer until the body is whole, and then still change the headers.

// configuredFullDuplex records the stream's configured modes from Envoy's first message
// (protocol_config gives the modes in force for the stream): which body directions are
// FULL_DUPLEX_STREAMED, and so that mode_override is ignored. It logs and counts the case once
// per stream.
func (st *streamState) configuredFullDuplex(pc *extprocv3.ProtocolConfiguration) {
	st.fdRequest = pc.GetRequestBodyMode() == filterv3.ProcessingMode_FULL_DUPLEX_STREAMED
	st.fdResponse = pc.GetResponseBodyMode() == filterv3.ProcessingMode_FULL_DUPLEX_STREAMED
	var which string
	switch {
	case st.fdRequest && st.fdResponse:
		which = "both"
	case st.fdRequest:
		which = "request"
	case st.fdResponse:
		which = "response"
	default:
		return
	}
	st.noOverride = true
	st.srv.metrics.configuredFullDuplex(which)
	st.logger().Debug("configured processing mode has FULL_DUPLEX_STREAMED bodies; mode_override is ignored",
		zap.String("full_duplex", which))
}

// answerReadable reports whether the loop can read a rewritten request's answer: always when
// the server can choose the response body mode with mode_override; where Envoy ignores it,
// only when the configured mode sends the answer whole (BUFFERED) or all of it in chunks
// (FULL_DUPLEX_STREAMED).
func (st *streamState) answerReadable() bool {
	if !st.noOverride {
		return true
	}
	switch st.protocol.GetResponseBodyMode() {
	case filterv3.ProcessingMode_BUFFERED, filterv3.ProcessingMode_FULL_DUPLEX_STREAMED:
		return true
	}
	return false
}

// reply sends a headers answer: without its mode_override when Envoy ignores it on this
// stream (the configured mode stays, and the server answers in its shape); nothing when resp is
// nil (the answer is held).
func (st *streamState) reply(resp *extprocv3.ProcessingResponse) error {
	if resp == nil {
		return nil
	}
	if st.noOverride && resp.GetModeOverride() != nil {
		// The shared answers are never modified: a copy without the override.
		resp = &extprocv3.ProcessingResponse{Response: resp.Response, DynamicMetadata: resp.DynamicMetadata}
	}
	return st.send(resp)
}

// streamedBody is a body answer of a FULL_DUPLEX_STREAMED direction (the request's when
// request) that injects body.
func streamedBody(request bool, body []byte, end bool) *extprocv3.ProcessingResponse {
	if !request {
		return streamedChunk(body, end)
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{
		RequestBody: &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{
			BodyMutation: &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_StreamedResponse{
				StreamedResponse: &extprocv3.StreamedBodyResponse{Body: body, EndOfStream: end}},
			}},
		}}}
}

// sendBody sends body as streamed_response chunks of at most maxChunk bytes; with end, the
// last one ends the direction (an empty body is then one empty chunk).
func (st *streamState) sendBody(request bool, body []byte, end bool) error {
	for n := 0; n < len(body) || (end && n == 0); {
		e := min(n+maxChunk, len(body))
		if err := st.send(streamedBody(request, body[n:e], end && e == len(body))); err != nil {
			return err
		}
		if e == len(body) {
			break
		}
		n = e
	}
	return nil
}

// echoBody answers a body chunk of a FULL_DUPLEX_STREAMED direction that the server leaves as it
// is: it goes back unchanged, with Envoy's end of stream. Once the direction has ended, a
// chunk Envoy sends again (envoy-full-duplex.md §10) is not answered.
func (st *streamState) echoBody(request bool, b *extprocv3.HttpBody) error {
	done := &st.respEchoed
	if request {
		done = &st.reqEchoed
	}
	if *done {
		return nil
	}
	*done = b.GetEndOfStream()
	return st.sendBody(request, b.GetBody(), b.GetEndOfStream())
}

// holdRequest reports whether a served request's headers answer waits for its body: in a
// FULL_DUPLEX_STREAMED request the body comes while the answer is pending, so the answer can
// carry what the body decides (the headers to remove, the new content-length when Envoy keeps
// it), and an error still goes out before anything reached the upstream.
func (st *streamState) holdRequest(reserved []string) bool {
	if !st.fdRequest {
		return false
	}
	st.reqHeld, st.reqReserved = true, reserved
	return true
}

// requestChunk answers a request body chunk of a FULL_DUPLEX_STREAMED request: a held served
// request collects it (within max_request_bytes, as a BUFFERED body would be bounded by the
// gRPC receive limit) until its end; any other is echoed.
func (st *streamState) requestChunk(b *extprocv3.HttpBody) error {
	if !st.reqHeld {
		return st.echoBody(true, b)
	}
	switch raw := b.GetBody(); {
	case st.reqTooLarge:
	case int64(len(st.reqBody)+len(raw)) > st.srv.maxRequestBody:
		st.reqTooLarge, st.reqBody = true, nil
	default:
		st.reqBody = append(st.reqBody, raw...)
	}
	if !b.GetEndOfStream() {
		return nil
	}
	return st.requestEnd(true)
}

// requestEnd answers the end of a held served request's body (with end, its last chunk;
// without, its trailers, whose answer follows): the body is rewritten as a BUFFERED one would
// be, then the headers answer goes with the header changes that answer would carry, and the body
// as streamed_response chunks. A client error is an immediate answer: nothing has reached the
// upstream yet.
func (st *streamState) requestEnd(end bool) error {
	st.reqHeld = false
	raw, tooLarge := st.reqBody, st.reqTooLarge
	st.reqBody = nil
	var resp *extprocv3.ProcessingResponse
	if tooLarge {
		resp = st.clientError(&schema.RequestError{
			Status:  http.StatusRequestEntityTooLarge,
			Message: fmt.Sprintf("The request body is larger than the %d bytes codeinterp accepts.", st.srv.maxRequestBody),
			Code:    "request_too_large",
		}, "codeinterp_request_too_large", nil)
	} else {
		resp = st.requestBody(&extprocv3.HttpBody{Body: raw, EndOfStream: true})
	}
	if resp.GetImmediateResponse() != nil {
		st.reqEchoed = true
		return st.send(resp)
	}
	common := resp.GetRequestBody().GetResponse()
	hm := &extprocv3.HeaderMutation{RemoveHeaders: slices.Clone(st.reqReserved)}
	if m := common.GetHeaderMutation(); m != nil {
		// content-length is set to the new body's length: Envoy skips it unless
		// allow_content_length_header keeps the header (§4), and then it is right.
		hm.SetHeaders = m.GetSetHeaders()
		hm.RemoveHeaders = append(hm.RemoveHeaders, m.GetRemoveHeaders()...)
	}
	headers := &extprocv3.CommonResponse{}
	if len(hm.SetHeaders) > 0 || len(hm.RemoveHeaders) > 0 {
		headers.HeaderMutation = hm
	}
	if err := st.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{
		RequestHeaders: &extprocv3.HeadersResponse{Response: headers}}}); err != nil {
		return err
	}
	body := raw
	if b := common.GetBodyMutation().GetBody(); b != nil {
		body = b
	}
	st.reqEchoed = end
	return st.sendBody(true, body, end)
}

// collectAnswer answers the end of a rewritten request's upstream answer that the server
// collected from a FULL_DUPLEX_STREAMED response whose headers answer it held (with end, the
// body's last chunk; without, its trailers, whose answer follows): the loop runs as over a
// BUFFERED answer, then the headers answer carries the answer's headers and the body goes as
// streamed_response chunks; an error, or an answer that is not 200, is an immediate answer,
// with its status (the client has nothing yet).
func (st *streamState) collectAnswer(end bool) error {
	body, resp := st.takeCollected()
	if resp != nil {
		return st.send(resp)
	}
	// No message timer runs for a FULL_DUPLEX_STREAMED direction: nothing to extend.
	resp, err := st.runBuffered(body, false)
	if err != nil {
		return err
	}
	if resp.GetImmediateResponse() != nil {
		return st.send(resp)
	}
	common := resp.GetResponseBody().GetResponse()
	if err := st.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{
		ResponseHeaders: &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{HeaderMutation: common.GetHeaderMutation()}}}}); err != nil {
		return err
	}
	return st.sendBody(false, common.GetBodyMutation().GetBody(), end)
}
