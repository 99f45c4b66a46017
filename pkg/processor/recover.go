package processor

import (
	"fmt"
	"net/http"
	"runtime"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/codeinterp/codeinterp/pkg/schema"
)

// handleSafely is handle that survives a panic: a bug met by one request must not end the
// server and every other stream with it. The panic is logged with its stack (its value only
// when it is a runtime error: another value may hold a request's content), counted, and the
// stream is answered as a server error: a 500 in the surface's shape when the client's
// response has not started, else the stream's failure event and its end. Everything the
// panicking code deferred has run by then (the loop releases its sandbox lease so, and the
// emitter's goroutine is stopped).
func (st *streamState) handleSafely(req *extprocv3.ProcessingRequest) (err error) {
	defer func() {
		if v := recover(); v != nil {
			st.srv.reportPanic(st.logger(), v)
			if st.delivery != nil {
				st.delivery.close() // a loop of the stream's own stops first
			}
			err = st.answerPanic(req)
		}
	}()
	return st.handle(req)
}

// reportPanic logs to log and counts v, the value of a panic a stream's code recovered from,
// with the stack of the panic (it is called by the deferred function that recovered).
func (s *Server) reportPanic(log *zap.Logger, v any) {
	what := fmt.Sprintf("%T", v)
	if re, ok := v.(runtime.Error); ok {
		what = re.Error()
	}
	s.metrics.panics.Inc()
	log.Error("panic serving stream", zap.String("panic", what), zap.Stack("stack"))
}

// answerPanic answers the stream whose handling of req panicked (see handleSafely).
func (st *streamState) answerPanic(req *extprocv3.ProcessingRequest) (err error) {
	st.setOutcome("panic")
	defer func() {
		// The surface's encoder may be what failed: the stream then just fails.
		if recover() != nil {
			err = status.Error(codes.Internal, "codeinterp failed to process the request")
		}
	}()
	live := st.live
	st.live = nil
	if live != nil && live.em.bytesSent() > 0 {
		// The client's stream has started: it learns it failed, then it ends.
		st.delivery = spent{}
		errBody := st.surface.ErrorBody(&schema.RequestError{Status: http.StatusInternalServerError,
			Message: "codeinterp failed to process the request.", Code: "server_error"})
		if err := live.sink.Event(schema.Event{Kind: schema.EventFailed, Status: http.StatusInternalServerError, Body: errBody}); err != nil {
			return err
		}
		if _, trailers := req.Request.(*extprocv3.ProcessingRequest_ResponseTrailers); trailers {
			return st.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseTrailers{
				ResponseTrailers: &extprocv3.TrailersResponse{}}})
		}
		return st.send(streamedChunk(nil, true))
	}
	if st.surface == nil {
		// Not a served request's body yet: Envoy fails the request (failure_mode_allow false).
		return status.Error(codes.Internal, "codeinterp failed to process the request")
	}
	if st.delivery != nil {
		st.delivery = spent{}
	}
	resp := st.serverError("server_error", "codeinterp failed to process the request.")
	st.setOutcome("panic")
	return st.send(resp)
}
