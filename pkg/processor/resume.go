package processor

import (
	"bytes"
	"context"
	"net/http"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/codeinterp/codeinterp/pkg/loop"
)

// resume answers a rewritten request that resumes a paused run (schema.Request.Resume, which
// admission let through): nothing goes upstream through Envoy. The loop resumes the run
// before any model call and makes the model calls itself, as it does for a background
// response, and its answer is the request's immediate answer: the JSON answer, or, for a
// client that asked for a stream, the whole event stream once the loop is over (Envoy streams
// no local reply to a request whose body it buffered). Envoy's message timer is extended when
// the loop starts, as for a loop over an upstream answer.
func (st *streamState) resume() *extprocv3.ProcessingResponse {
	req := st.loopRequest(nil)
	var events *bytes.Buffer
	if st.exchange.Request().Stream {
		events = &bytes.Buffer{}
		req.Sink = st.exchange.Events(events)
	}
	deadline := st.route.LoopDeadline
	if !st.streamedRequest() {
		// A FULL_DUPLEX_STREAMED request body has no message timer.
		req.OnLoop = func() {
			if err := st.send(&extprocv3.ProcessingResponse{OverrideMessageTimeout: durationpb.New(deadline)}); err != nil {
				st.logger().Debug("extend the message timeout", zap.Error(err))
			}
		}
	}
	ctx, cancel := context.WithTimeout(st.ctx, deadline-st.route.LoopMargin)
	defer cancel()
	started := st.srv.now()
	res := st.srv.loop.Run(ctx, req)
	st.afterLoop(res, started, 0)
	details := "codeinterp_" + string(res.Stop)
	if events == nil || events.Len() == 0 || res.Stop == loop.StopAnswerTooLarge {
		return immediateWith(res.Status, headerOptions(res.Header), res.Body, details)
	}
	if max := st.route.MaxAnswerBytes; max > 0 && events.Len() > max {
		st.setOutcome(string(loop.StopAnswerTooLarge))
		st.logger().Error("answer too large to send", zap.Int("bytes", events.Len()), zap.Int("limit", max))
		return immediate(http.StatusBadGateway, jsonContentType, st.surface.ErrorBody(loop.AnswerTooLarge(events.Len(), max)), "codeinterp_answer_too_large")
	}
	return immediateWith(http.StatusOK, []*corev3.HeaderValueOption{
		setHeader("content-type", "text/event-stream; charset=utf-8"), setHeader("cache-control", "no-cache"),
	}, events.Bytes(), details)
}
