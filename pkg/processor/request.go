package processor

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/codeinterp/codeinterp/pkg/schema"
)

// This file answers the request body of a filter whose configured request body mode is
// FULL_DUPLEX_STREAMED (see stream.go, "The configured processing mode"): a served request's
// headers answer is held until its body is whole, so that the answer can carry what the body
// decides (the headers to remove, the new content-length when Envoy keeps it), and an error
// still goes out before anything reached the upstream.

// heldRequest is a served request whose headers answer waits for its body.
type heldRequest struct {
	// reserved are the headers the answer removes.
	reserved []string
	body     collector
}

// collector keeps the chunks of a body Envoy sends as it arrives, up to limit bytes; beyond it
// it keeps nothing and reports the body too large.
type collector struct {
	limit    int64
	body     []byte
	tooLarge bool
}

// add keeps a chunk.
func (c *collector) add(raw []byte) {
	switch {
	case c.tooLarge:
	case int64(len(c.body)+len(raw)) > c.limit:
		c.tooLarge, c.body = true, nil
	default:
		c.body = append(c.body, raw...)
	}
}

// take returns what was kept, and whether the body was too large; the collector keeps nothing
// after.
func (c *collector) take() ([]byte, bool) {
	body, tooLarge := c.body, c.tooLarge
	c.body = nil
	return body, tooLarge
}

// echo answers the body chunks of a FULL_DUPLEX_STREAMED direction that the server leaves as
// they are: each goes back unchanged, with Envoy's end of stream. Once the direction has ended,
// a chunk Envoy sends again (Envoy may send the last chunk of a direction twice) is not
// answered.
type echo struct {
	ended bool
}

// answer answers the chunk b of the direction (the request's when request).
func (e *echo) answer(st *streamState, request bool, b *extprocv3.HttpBody) error {
	if e.ended {
		return nil
	}
	e.ended = b.GetEndOfStream()
	return st.sendBody(request, b.GetBody(), b.GetEndOfStream())
}

// requestChunk answers a request body chunk of a FULL_DUPLEX_STREAMED request: a held served
// request collects it (within max_request_bytes, as a BUFFERED body would be bounded by the
// gRPC receive limit) until its end; any other is echoed.
func (st *streamState) requestChunk(b *extprocv3.HttpBody) error {
	if st.request == nil {
		return st.requestEcho.answer(st, true, b)
	}
	st.request.body.add(b.GetBody())
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
	held := st.request
	st.request = nil
	raw, tooLarge := held.body.take()
	if tooLarge {
		st.requestEcho.ended = true
		return st.send(st.errorAnswer(&schema.RequestError{
			Status:  http.StatusRequestEntityTooLarge,
			Message: fmt.Sprintf("The request body is larger than the %d bytes codeinterp accepts.", st.srv.maxRequestBody),
			Code:    "request_too_large",
		}, "codeinterp_request_too_large"))
	}
	rw := st.readRequest(raw)
	if rw.refuse != nil {
		st.requestEcho.ended = true
		return st.send(rw.refuse)
	}
	hm := &extprocv3.HeaderMutation{RemoveHeaders: append(slices.Clone(held.reserved), rw.remove...)}
	body := raw
	if rw.body != nil {
		// content-length is set to the new body's length: Envoy skips it unless
		// allow_content_length_header keeps the header, and then it is right.
		body = rw.body
		hm.SetHeaders = []*corev3.HeaderValueOption{setHeader("content-length", strconv.Itoa(len(body)))}
	}
	headers := &extprocv3.CommonResponse{}
	if len(hm.SetHeaders) > 0 || len(hm.RemoveHeaders) > 0 {
		headers.HeaderMutation = hm
	}
	if err := st.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{
		RequestHeaders: &extprocv3.HeadersResponse{Response: headers}}}); err != nil {
		return err
	}
	st.requestEcho.ended = end
	return st.sendBody(true, body, end)
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
