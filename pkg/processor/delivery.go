package processor

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/codeinterp/codeinterp/pkg/loop"
)

// delivery sends a stream's response to Envoy in one way, chosen once at the response headers
// (see streamState.responseHeaders): passed through, buffered for the loop, collected from a
// configured FULL_DUPLEX_STREAMED body for the loop, or switched to FULL_DUPLEX_STREAMED and
// streamed while the loop runs (switchedLive, switchedCollected in switched.go). A delivery is
// used by the stream's goroutine only.
type delivery interface {
	// body answers one response_body message (b, of msg).
	body(st *streamState, msg *extprocv3.ProcessingRequest, b *extprocv3.HttpBody) error
	// trailers answers the end of the body by its trailers (msg) before the trailers answer
	// goes, and reports whether nothing may follow (the stream's last answer was sent).
	trailers(st *streamState, msg *extprocv3.ProcessingRequest) (done bool, err error)
	// close ends what the delivery runs when the stream ends before its answer did.
	close()
}

// upstreamAnswer is what the response headers told of a rewritten request's 200 answer.
type upstreamAnswer struct {
	// encoding is the answer's content-encoding.
	encoding string
	// eventStream reports that the upstream answered with an event stream (the client's
	// stream:true was kept): the loop reads its first answer as one.
	eventStream bool
}

// answer is the loop's answer to send, neutral of how it is sent: an HTTP status, the headers
// to set, and the body.
type answer struct {
	status int
	header http.Header
	body   []byte
	stop   loop.StopReason
}

// passThroughDelivery passes the response on: in a configured FULL_DUPLEX_STREAMED response
// each chunk is echoed in that mode's shape; in any other, a body Envoy sends anyway is
// continued.
type passThroughDelivery struct {
	streamed bool
	echo     echo
}

// passThrough returns the pass-through delivery of the stream's configured mode.
func (st *streamState) passThrough() delivery {
	if st.streamedResponse() {
		return &passThroughDelivery{streamed: true}
	}
	return passOn
}

// passOn is the pass-through delivery of a body that is not FULL_DUPLEX_STREAMED: it keeps
// no state, so every stream shares it.
var passOn delivery = &passThroughDelivery{}

func (d *passThroughDelivery) body(st *streamState, _ *extprocv3.ProcessingRequest, b *extprocv3.HttpBody) error {
	if d.streamed {
		return d.echo.answer(st, false, b)
	}
	return st.send(continueResponseBody)
}

func (d *passThroughDelivery) trailers(*streamState, *extprocv3.ProcessingRequest) (bool, error) {
	return false, nil
}

func (d *passThroughDelivery) close() {}

// spent is the delivery of a stream whose answer has been sent (after a panic): what Envoy
// still sends of the body is not answered.
type spent struct{}

func (spent) body(*streamState, *extprocv3.ProcessingRequest, *extprocv3.HttpBody) error { return nil }
func (spent) trailers(*streamState, *extprocv3.ProcessingRequest) (bool, error)          { return false, nil }
func (spent) close()                                                                     {}

// bufferedDelivery runs the loop over a rewritten request's answer that Envoy sends whole (BUFFERED),
// and replaces it with the loop's answer: a body mutation, or an immediate answer when it is
// not a 200. Envoy's message timer runs for the answer, and is extended when the loop starts.
type bufferedDelivery struct {
	a upstreamAnswer
}

func (d *bufferedDelivery) body(st *streamState, _ *extprocv3.ProcessingRequest, b *extprocv3.HttpBody) error {
	body, resp := st.decodeAnswer(d.a, b.GetBody(), false)
	if resp != nil {
		return st.send(resp)
	}
	ans, err := st.runWhole(d.a, body, true)
	if err != nil {
		return err
	}
	if ans.status != http.StatusOK {
		return st.send(ans.immediate())
	}
	return st.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{
		ResponseBody: &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{
			HeaderMutation: ans.headerMutation(),
			BodyMutation:   &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: ans.body}},
		}},
	}})
}

func (d *bufferedDelivery) trailers(*streamState, *extprocv3.ProcessingRequest) (bool, error) {
	return false, nil
}

func (d *bufferedDelivery) close() {}

// configuredCollected runs the loop over a rewritten request's answer that the server collects
// from a configured FULL_DUPLEX_STREAMED response while its headers answer is held, for a loop
// that needs it whole (the client did not ask for a stream, or it is replayed): the loop runs as
// over a BUFFERED answer, then the headers answer carries the answer's headers and the body goes
// as streamed_response chunks; an error, or an answer that is not 200, is an immediate answer,
// with its status (the client has nothing yet). No message timer runs for a
// FULL_DUPLEX_STREAMED direction: nothing to extend.
type configuredCollected struct {
	collecting
}

func (d *configuredCollected) body(st *streamState, _ *extprocv3.ProcessingRequest, b *extprocv3.HttpBody) error {
	return d.collectBody(st, b, d.answer)
}

func (d *configuredCollected) trailers(st *streamState, _ *extprocv3.ProcessingRequest) (bool, error) {
	return false, d.collectTrailers(st, d.answer)
}

func (d *configuredCollected) close() {}

// answer answers the collected answer, body (with end, at its last chunk; without, at its
// trailers, whose answer follows).
func (d *configuredCollected) answer(st *streamState, body []byte, end bool) error {
	ans, err := st.runWhole(d.a, body, false)
	if err != nil {
		return err
	}
	if ans.status != http.StatusOK {
		return st.send(ans.immediate())
	}
	if err := st.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{
		ResponseHeaders: &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{HeaderMutation: ans.headerMutation()}}}}); err != nil {
		return err
	}
	return st.sendBody(false, ans.body, end)
}

// collecting is what configuredCollected and switchedCollected share: they collect the
// answer's chunks, then decode the whole answer and answer it at its end (its last chunk or its
// trailers).
type collecting struct {
	a         upstreamAnswer
	collected collector
	// done reports that the answer was answered: Envoy may send the last chunk again, and
	// nothing after it is answered.
	done bool
}

// collectBody adds b's chunk, and at the end of the body answers the collected answer (see
// collectEnd).
func (c *collecting) collectBody(st *streamState, b *extprocv3.HttpBody, answer func(st *streamState, body []byte, end bool) error) error {
	if c.done {
		return nil
	}
	c.collected.add(b.GetBody())
	if !b.GetEndOfStream() {
		return nil
	}
	return c.collectEnd(st, true, answer)
}

// collectTrailers answers the collected answer at its trailers (see collectEnd), unless it was
// answered.
func (c *collecting) collectTrailers(st *streamState, answer func(st *streamState, body []byte, end bool) error) error {
	if c.done {
		return nil
	}
	return c.collectEnd(st, false, answer)
}

// collectEnd answers the end of the collected answer (with end, its last chunk; without, its
// trailers): an answer that does not decode gets the immediate answer decodeAnswer made, any
// other goes to answer decoded.
func (c *collecting) collectEnd(st *streamState, end bool, answer func(st *streamState, body []byte, end bool) error) error {
	c.done = true
	raw, tooLarge := c.collected.take()
	body, resp := st.decodeAnswer(c.a, raw, tooLarge)
	if resp != nil {
		return st.send(resp)
	}
	return answer(st, body, end)
}

// immediate is the answer as an immediate response.
func (a answer) immediate() *extprocv3.ProcessingResponse {
	return immediateWith(a.status, headerOptions(a.header), a.body, "codeinterp_"+string(a.stop))
}

// headerMutation sets the answer's headers and its content-length, and removes the upstream's
// content-encoding (the answer is not encoded).
func (a answer) headerMutation() *extprocv3.HeaderMutation {
	set := append(headerOptions(a.header), setHeader("content-length", strconv.Itoa(len(a.body))))
	return &extprocv3.HeaderMutation{SetHeaders: set, RemoveHeaders: []string{"content-encoding"}}
}

// runWhole runs the loop over a rewritten request's whole upstream answer, body, and returns
// the answer that replaces it. A client that asked for a stream gets the loop's events,
// replayed once it is over, unless nothing was written (its JSON error is then the answer) or
// the answer was too large to build (every client gets that JSON error: its stream would be
// larger still). With timed, Envoy's message timer runs for the response direction and is
// extended when the loop starts.
func (st *streamState) runWhole(a upstreamAnswer, body []byte, timed bool) (answer, error) {
	var sendErr error
	req := st.loopRequest(body)
	if a.eventStream {
		req.First, req.FirstStream = nil, bytes.NewReader(body)
	}
	var events *bytes.Buffer
	if st.exchange.Request().Stream {
		events = &bytes.Buffer{}
		req.Sink = st.exchange.Events(events)
	}
	deadline := st.route.LoopDeadline
	if timed {
		req.OnLoop = func() {
			// Envoy's message timer covers the whole loop unless it is extended once per
			// message, up to max_message_timeout.
			sendErr = st.send(&extprocv3.ProcessingResponse{OverrideMessageTimeout: durationpb.New(deadline)})
		}
	}
	ctx, cancel := context.WithTimeout(st.ctx, deadline-st.route.LoopMargin)
	defer cancel()
	started := st.srv.now()
	res := st.srv.loop.Run(ctx, req)
	if sendErr != nil {
		return answer{}, fmt.Errorf("send override_message_timeout: %w", sendErr)
	}
	st.afterLoop(res, started, 0)
	ans := answer{status: res.Status, header: res.Header, body: res.Body, stop: res.Stop}
	if events == nil || events.Len() == 0 || res.Stop == loop.StopAnswerTooLarge {
		return ans, nil
	}
	if max := st.route.MaxAnswerBytes; events.Len() > max {
		// The loop keeps its JSON answer within the bound, but not the events it was shown
		// in: a body beyond it would fail the gRPC send, and Envoy would answer a bare 500.
		st.setOutcome(string(loop.StopAnswerTooLarge))
		st.logger().Error("answer too large to send", zap.Int("bytes", events.Len()), zap.Int("limit", max))
		return answer{status: http.StatusBadGateway, header: http.Header{"Content-Type": {jsonContentType}}, stop: loop.StopAnswerTooLarge,
			body: st.surface.ErrorBody(loop.AnswerTooLarge(events.Len(), max))}, nil
	}
	return answer{status: http.StatusOK, header: http.Header{"Content-Type": {"text/event-stream; charset=utf-8"}, "Cache-Control": {"no-cache"}}, body: events.Bytes(), stop: res.Stop}, nil
}

// afterLoop records a loop's end and tells admission of the answer.
func (st *streamState) afterLoop(res loop.Response, started time.Time, streamed int) {
	st.setOutcome(string(res.Stop))
	st.srv.metrics.observeLoop(st.surface, res, st.srv.now().Sub(started))
	st.logger().Debug("loop finished", zap.String("stop", string(res.Stop)), zap.Int("rounds", res.Rounds),
		zap.Int("calls", res.Calls), zap.Int("status", res.Status), zap.Int("streamed_bytes", streamed))
	st.admitted.Answered(res)
}

// loopRequest builds the loop's request from the stream's route and what admission decided.
func (st *streamState) loopRequest(first []byte) loop.Request {
	r := st.route
	header := st.headers.forward(st.srv.signer.identities.CredentialHeaders(), r.ForwardHeaders)
	header.Set(followUpHeader, st.srv.signer.signFollowUp(pathOnly(st.path), st.admitted.Identity(), st.srv.now().Add(r.LoopDeadline+time.Minute)))
	req := loop.Request{
		URL:         strings.TrimSuffix(r.Upstream, "/") + st.path,
		Header:      header,
		First:       first,
		MaxRounds:   r.MaxRounds,
		RunTimeout:  r.RunTimeout,
		OutputLimit: r.OutputLimit,

		MaxResponseBytes: r.MaxResponseBytes,
		MaxOutputBytes:   r.MaxOutputBytes,
		MaxImages:        r.MaxImages,
		MaxCallsPerTurn:  r.MaxCallsPerTurn,
		MaxAnswerBytes:   r.MaxAnswerBytes,

		Surface:   st.surface.Name(),
		FirstSent: st.sentAt,
	}
	st.admitted.Apply(&req)
	return req
}
