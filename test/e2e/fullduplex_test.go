package e2e

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	"github.com/codeinterp/codeinterp/test/e2e/harness"
)

// TestEnvoyFullDuplexFacts pins what progressive streaming relies on, against the real Envoy 1.40
// with the shipped filter config (BUFFERED modes, allow_mode_override): an ext_proc server that
// answers response_headers with a mode_override to FULL_DUPLEX_STREAMED (trailers SEND), a
// content-type of its own and content-length removed, receives the whole upstream body, and
// then emits body chunks at its own pace; the client gets the headers with the first chunk and
// each chunk while the server still holds the next; and when the client goes away mid-stream,
// the server's stream ends (its context is cancelled), so a loop can stop. Envoy's own
// tests do not cover the response-path switch (docs/envoy-rules.md FD §5, FD §13).
func TestEnvoyFullDuplexFacts(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"upstream":"answer"}`)
	}))
	t.Cleanup(upstream.Close)

	t.Run("chunks reach the client as they are sent", func(t *testing.T) {
		fd := newFDServer(t, 3)
		front := harness.StartReal(t, harness.Options{ExtProcAddr: fd.addr, Upstream: upstream.URL})
		resp, err := http.Post(front.URL()+"/v1/responses", "application/json", strings.NewReader(`{"model":"m"}`))
		require.NoError(t, err, "POST through the real Envoy")
		defer resp.Body.Close()
		assert.Equal(t, http.StatusOK, resp.StatusCode, "status")
		assert.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"), "content-type set by the headers answer")
		assert.Empty(t, resp.Header.Get("Content-Length"), "content-length removed")
		assert.Equal(t, int64(-1), resp.ContentLength, "the body is chunked")

		lines := bufio.NewReader(resp.Body)
		for i := range 3 {
			line, err := lines.ReadString('\n')
			require.NoError(t, err, "read chunk %d", i)
			assert.Equal(t, "data: chunk "+string(rune('0'+i))+"\n", line, "chunk %d", i)
			_, err = lines.ReadString('\n') // the event's blank line
			require.NoError(t, err, "read chunk %d's end", i)
			// The server sends chunk i+1 only once the client has chunk i.
			fd.release()
		}
		rest, err := io.ReadAll(lines)
		assert.NoError(t, err, "read to the end")
		assert.Empty(t, rest, "nothing after the last chunk")
		assert.Equal(t, `{"upstream":"answer"}`, fd.upstreamBody(), "the server got the whole upstream body before emitting")
		assert.Equal(t, []string{"request_headers", "request_body", "response_headers", "response_body"}, fd.messages(), "messages")
	})

	t.Run("a client that goes away ends the server's stream", func(t *testing.T) {
		fd := newFDServer(t, 3)
		front := harness.StartReal(t, harness.Options{ExtProcAddr: fd.addr, Upstream: upstream.URL})
		ctx, cancel := context.WithCancel(t.Context())
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, front.URL()+"/v1/responses", strings.NewReader(`{"model":"m"}`))
		require.NoError(t, err, "request")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err, "POST through the real Envoy")
		line, err := bufio.NewReader(resp.Body).ReadString('\n')
		require.NoError(t, err, "read the first chunk")
		assert.Equal(t, "data: chunk 0\n", line, "first chunk")
		cancel()
		resp.Body.Close()
		select {
		case <-fd.ended:
		case <-time.After(30 * time.Second):
			t.Fatal("the ext_proc stream did not end after the client went away")
		}
		fd.release() // let the held sender go
	})
}

// fdServer is an ext_proc server that switches the response to FULL_DUPLEX_STREAMED and, once
// it has the whole upstream body, emits chunks "data: chunk N\n\n", each after the test
// released the one before.
type fdServer struct {
	extprocv3.UnimplementedExternalProcessorServer
	addr   string
	chunks int
	// next is buffered to the chunk count, so a test never blocks releasing one.
	next  chan struct{}
	ended chan struct{}

	mu   sync.Mutex
	seen []string
	body []byte
}

func newFDServer(t *testing.T, chunks int) *fdServer {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err, "listen")
	s := &fdServer{addr: lis.Addr().String(), chunks: chunks, next: make(chan struct{}, chunks), ended: make(chan struct{})}
	gs := grpc.NewServer()
	extprocv3.RegisterExternalProcessorServer(gs, s)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = gs.Serve(lis)
	}()
	t.Cleanup(func() {
		gs.Stop()
		<-done
	})
	return s
}

func (s *fdServer) release() { s.next <- struct{}{} }

func (s *fdServer) messages() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.seen...)
}

func (s *fdServer) upstreamBody() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return string(s.body)
}

func (s *fdServer) note(kind string, body []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := len(s.seen); n == 0 || s.seen[n-1] != kind {
		s.seen = append(s.seen, kind)
	}
	s.body = append(s.body, body...)
}

func (s *fdServer) Process(stream extprocv3.ExternalProcessor_ProcessServer) error {
	defer close(s.ended)
	for {
		req, err := stream.Recv()
		if err != nil {
			return nil
		}
		var resp *extprocv3.ProcessingResponse
		switch r := req.Request.(type) {
		case *extprocv3.ProcessingRequest_RequestHeaders:
			s.note("request_headers", nil)
			resp = &extprocv3.ProcessingResponse{
				Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{}},
				ModeOverride: &filterv3.ProcessingMode{RequestBodyMode: filterv3.ProcessingMode_BUFFERED,
					ResponseHeaderMode: filterv3.ProcessingMode_SEND, ResponseBodyMode: filterv3.ProcessingMode_BUFFERED},
			}
		case *extprocv3.ProcessingRequest_RequestBody:
			s.note("request_body", nil)
			resp = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{}}}
		case *extprocv3.ProcessingRequest_ResponseHeaders:
			s.note("response_headers", nil)
			resp = &extprocv3.ProcessingResponse{
				Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{
					Response: &extprocv3.CommonResponse{HeaderMutation: &extprocv3.HeaderMutation{
						SetHeaders: []*corev3.HeaderValueOption{{Header: &corev3.HeaderValue{
							Key: "content-type", RawValue: []byte("text/event-stream")}}},
						RemoveHeaders: []string{"content-length"},
					}},
				}},
				ModeOverride: &filterv3.ProcessingMode{ResponseHeaderMode: filterv3.ProcessingMode_SEND,
					ResponseBodyMode: filterv3.ProcessingMode_FULL_DUPLEX_STREAMED, ResponseTrailerMode: filterv3.ProcessingMode_SEND},
			}
		case *extprocv3.ProcessingRequest_ResponseBody:
			s.note("response_body", r.ResponseBody.GetBody())
			if !r.ResponseBody.GetEndOfStream() {
				continue
			}
			for i := range s.chunks {
				if i > 0 {
					select {
					case <-s.next:
					case <-stream.Context().Done():
						return nil
					}
				}
				body := []byte("data: chunk " + string(rune('0'+i)) + "\n\n")
				if err := stream.Send(streamedChunk(body, i == s.chunks-1)); err != nil {
					return nil
				}
			}
			continue
		case *extprocv3.ProcessingRequest_ResponseTrailers:
			s.note("response_trailers", nil)
			resp = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseTrailers{ResponseTrailers: &extprocv3.TrailersResponse{}}}
		default:
			continue
		}
		if err := stream.Send(resp); err != nil {
			return nil
		}
	}
}

func streamedChunk(body []byte, eos bool) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{
		Response: &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_StreamedResponse{
			StreamedResponse: &extprocv3.StreamedBodyResponse{Body: body, EndOfStream: eos}}}},
	}}}
}
