package harness

import (
	"fmt"
	"time"

	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// Record is what the harness observed of one HTTP request: the ext_proc exchange in order,
// the local reply Envoy generated (if any) and what reached the upstream and the client.
type Record struct {
	// Method and Path are the client's request line.
	Method, Path string
	// RequestID is the x-request-id the request carried (generated when the client sent none).
	RequestID string
	// Route is the matched route's prefix (or path); empty when no route matched.
	Route string
	// StreamOpened reports whether an ext_proc stream was opened for the request.
	StreamOpened bool
	// InitialMetadata is the gRPC initial metadata the stream was opened with.
	InitialMetadata metadata.MD
	// Messages is the exchange on the stream, in the order Envoy sent and handled them.
	Messages []Message
	// StreamEnd says how the stream ended: "" (never opened), "envoy" (Envoy half-closed and
	// cancelled it, §0), "server-ok" (the server closed it with OK) or "server-error".
	StreamEnd string
	// LocalReply is the (last) local reply Envoy generated for the request, or nil.
	LocalReply *LocalReply
	// UpstreamRequests counts the requests sent to the upstream (0 or 1).
	UpstreamRequests int
	// Downstream are the writes to the client, in order: the response headers, then body
	// chunks as they went out (a STREAMED or FULL_DUPLEX_STREAMED response is written chunk by
	// chunk, each flushed).
	Downstream []Delivery
	// Status is the status the client received; 0 when the downstream stream was reset.
	Status int
	// Reset reports whether the downstream stream was reset (the client saw the connection
	// close instead of a complete response).
	Reset bool
	// Stats are the counters this request moved.
	Stats Stats
}

// Delivery is one write to the client, flushed at once. Together with Messages it shows
// whether a response reached the client progressively: a chunk whose AfterMessages is n was
// written once the first n messages had been sent or handled, so before the server's next
// answer arrived.
type Delivery struct {
	// At is when the write happened, counted from the request's arrival at the front.
	At time.Duration
	// AfterMessages is len(Record.Messages) at the time of the write.
	AfterMessages int
	// Headers reports whether this write is the response headers; else it is body bytes.
	Headers bool
	// Body is the body bytes written (none for the headers).
	Body []byte
	// End reports whether the write ended the response.
	End bool
}

// LocalReply is a response Envoy generated itself (ImmediateResponse, errors, 413, 404, ...).
type LocalReply struct {
	Status int
	// Details are the response code details, e.g. "ext_proc_error_per-message_timeout_exceeded".
	Details string
	Body    string
}

// Message is one ext_proc message: exactly one of Sent and Received is set.
type Message struct {
	Sent     *extprocsvc.ProcessingRequest
	Received *extprocsvc.ProcessingResponse
}

// String is "-> request_headers" for a sent message and "<- request_body" for a received one.
func (m Message) String() string {
	if m.Sent != nil {
		return "-> " + requestKind(m.Sent)
	}
	return "<- " + responseKind(m.Received)
}

// Exchange renders the messages with [Message.String], for compact assertions.
func (r Record) Exchange() []string {
	out := make([]string, 0, len(r.Messages))
	for _, m := range r.Messages {
		out = append(out, m.String())
	}
	return out
}

// Sent returns the messages Envoy sent, in order.
func (r Record) Sent() []*extprocsvc.ProcessingRequest {
	var out []*extprocsvc.ProcessingRequest
	for _, m := range r.Messages {
		if m.Sent != nil {
			out = append(out, m.Sent)
		}
	}
	return out
}

// Details returns the local reply's details, or "".
func (r Record) Details() string {
	if r.LocalReply == nil {
		return ""
	}
	return r.LocalReply.Details
}

func (r Record) clone() Record {
	c := r
	c.InitialMetadata = r.InitialMetadata.Copy()
	c.Downstream = make([]Delivery, len(r.Downstream))
	for i, d := range r.Downstream {
		c.Downstream[i] = d
		c.Downstream[i].Body = append([]byte(nil), d.Body...)
	}
	c.Messages = make([]Message, len(r.Messages))
	for i, m := range r.Messages {
		if m.Sent != nil {
			c.Messages[i].Sent = proto.Clone(m.Sent).(*extprocsvc.ProcessingRequest)
		}
		if m.Received != nil {
			c.Messages[i].Received = proto.Clone(m.Received).(*extprocsvc.ProcessingResponse)
		}
	}
	if r.LocalReply != nil {
		lr := *r.LocalReply
		c.LocalReply = &lr
	}
	return c
}

func requestKind(r *extprocsvc.ProcessingRequest) string {
	switch r.GetRequest().(type) {
	case *extprocsvc.ProcessingRequest_RequestHeaders:
		return "request_headers"
	case *extprocsvc.ProcessingRequest_RequestBody:
		return "request_body"
	case *extprocsvc.ProcessingRequest_RequestTrailers:
		return "request_trailers"
	case *extprocsvc.ProcessingRequest_ResponseHeaders:
		return "response_headers"
	case *extprocsvc.ProcessingRequest_ResponseBody:
		return "response_body"
	case *extprocsvc.ProcessingRequest_ResponseTrailers:
		return "response_trailers"
	}
	return "unknown"
}

func responseKind(r *extprocsvc.ProcessingResponse) string {
	if r.GetOverrideMessageTimeout() != nil {
		return "override_message_timeout"
	}
	switch r.GetResponse().(type) {
	case *extprocsvc.ProcessingResponse_RequestHeaders:
		return "request_headers"
	case *extprocsvc.ProcessingResponse_RequestBody:
		return "request_body"
	case *extprocsvc.ProcessingResponse_RequestTrailers:
		return "request_trailers"
	case *extprocsvc.ProcessingResponse_ResponseHeaders:
		return "response_headers"
	case *extprocsvc.ProcessingResponse_ResponseBody:
		return "response_body"
	case *extprocsvc.ProcessingResponse_ResponseTrailers:
		return "response_trailers"
	case *extprocsvc.ProcessingResponse_ImmediateResponse:
		return "immediate_response"
	case nil:
		return "empty"
	}
	return fmt.Sprintf("%T", r.GetResponse())
}

// Stats are the harness's counters, named after Envoy's ext_proc filter statistics
// (http.<stat_prefix>.ext_proc.*), summed over every request.
type Stats struct {
	StreamsStarted                 int
	StreamMsgsSent                 int
	StreamMsgsReceived             int
	SpuriousMsgsReceived           int
	StreamsClosed                  int
	StreamsFailed                  int
	FailureModeAllowed             int
	MessageTimeouts                int
	RejectedHeaderMutations        int
	OverrideMessageTimeoutReceived int
	OverrideMessageTimeoutIgnored  int
	ClearRouteCacheIgnored         int
	ClearRouteCacheDisabled        int
}

func (s *Stats) add(o Stats) {
	s.StreamsStarted += o.StreamsStarted
	s.StreamMsgsSent += o.StreamMsgsSent
	s.StreamMsgsReceived += o.StreamMsgsReceived
	s.SpuriousMsgsReceived += o.SpuriousMsgsReceived
	s.StreamsClosed += o.StreamsClosed
	s.StreamsFailed += o.StreamsFailed
	s.FailureModeAllowed += o.FailureModeAllowed
	s.MessageTimeouts += o.MessageTimeouts
	s.RejectedHeaderMutations += o.RejectedHeaderMutations
	s.OverrideMessageTimeoutReceived += o.OverrideMessageTimeoutReceived
	s.OverrideMessageTimeoutIgnored += o.OverrideMessageTimeoutIgnored
	s.ClearRouteCacheIgnored += o.ClearRouteCacheIgnored
	s.ClearRouteCacheDisabled += o.ClearRouteCacheDisabled
}
