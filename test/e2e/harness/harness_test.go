package harness

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// --- Scripted fake ext_proc server ---------------------------------------------------------

// script plays the server's side of one stream. It runs on the gRPC handler goroutine, so it
// reports failures with assert (never require); its return value ends the stream (nil = OK).
type script func(s *procStream) error

// fakeProc is an ext_proc gRPC server whose answers a test scripts, one script call per stream.
type fakeProc struct {
	extprocsvc.UnimplementedExternalProcessorServer
	t      testing.TB
	addr   string
	script script

	mu      sync.Mutex
	streams []*procStream
	// running counts the scripts in progress; idle is signalled when it drops to 0.
	running int
	idle    *sync.Cond
}

// procStream is one stream as the fake server sees it.
type procStream struct {
	t   testing.TB
	srv extprocsvc.ExternalProcessor_ProcessServer
	// md is the stream's initial metadata (with :authority).
	md metadata.MD
	// end is what Recv returned when the stream ended (io.EOF after Envoy's half-close).
	end error

	// mu guards got.
	mu sync.Mutex
	// got renders every message received, in order ([renderRequest]).
	got []string
}

func newFakeProc(t testing.TB, sc script) *fakeProc {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err, "listen for the fake ext_proc server")
	p := &fakeProc{t: t, addr: lis.Addr().String(), script: sc}
	p.idle = sync.NewCond(&p.mu)
	srv := grpc.NewServer()
	extprocsvc.RegisterExternalProcessorServer(srv, p)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(lis)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
	return p
}

func (p *fakeProc) Process(srv extprocsvc.ExternalProcessor_ProcessServer) error {
	md, _ := metadata.FromIncomingContext(srv.Context())
	p.mu.Lock()
	s := &procStream{t: p.t, srv: srv, md: md}
	sc := p.script
	p.streams = append(p.streams, s)
	p.running++
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.running--
		if p.idle != nil { // nil in a fakeProc made without newFakeProc
			p.idle.Broadcast()
		}
		p.mu.Unlock()
	}()
	return sc(s)
}

// reset makes the fake serve the next streams with sc, reporting to t, and forgets the
// streams so far. The caller must have waited for them (waitIdle).
func (p *fakeProc) reset(t testing.TB, sc script) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.t, p.script, p.streams = t, sc, nil
}

// waitIdle waits until no script runs, at most d; it reports whether none does.
func (p *fakeProc) waitIdle(d time.Duration) bool {
	timer := time.AfterFunc(d, func() {
		p.mu.Lock()
		p.idle.Broadcast()
		p.mu.Unlock()
	})
	defer timer.Stop()
	deadline := time.Now().Add(d)
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.running > 0 && time.Now().Before(deadline) {
		p.idle.Wait()
	}
	return p.running == 0
}

// received returns, per stream in the order they opened, the messages the fake received.
func (p *fakeProc) received() [][]string {
	p.mu.Lock()
	streams := append([]*procStream(nil), p.streams...)
	p.mu.Unlock()
	out := make([][]string, 0, len(streams))
	for _, s := range streams {
		s.mu.Lock()
		out = append(out, append([]string{}, s.got...))
		s.mu.Unlock()
	}
	return out
}

func (p *fakeProc) streamCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.streams)
}

// recv returns the next message, or nil when the stream ended (s.end then says how).
func (s *procStream) recv() *extprocsvc.ProcessingRequest {
	req, err := s.srv.Recv()
	if err != nil {
		s.end = err
		return nil
	}
	s.mu.Lock()
	s.got = append(s.got, renderRequest(req))
	s.mu.Unlock()
	return req
}

// note adds an observation of the script's to what the stream received, for the twin tests
// to compare.
func (s *procStream) note(text string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, text)
}

// renderRequest is a message as the twin tests compare it: its kind, then for request
// headers ":method :path", for response headers ":status", and " cl=N" when they carry a
// content-length; for bodies the body quoted; last " eos" when end_of_stream is set.
func renderRequest(req *extprocsvc.ProcessingRequest) string {
	out := requestKind(req)
	var eos bool
	switch r := req.GetRequest().(type) {
	case *extprocsvc.ProcessingRequest_RequestHeaders:
		m, _ := headerValue(r.RequestHeaders.GetHeaders(), ":method")
		p, _ := headerValue(r.RequestHeaders.GetHeaders(), ":path")
		out += " " + m + " " + p + contentLength(r.RequestHeaders.GetHeaders())
		eos = r.RequestHeaders.GetEndOfStream()
	case *extprocsvc.ProcessingRequest_ResponseHeaders:
		st, _ := headerValue(r.ResponseHeaders.GetHeaders(), ":status")
		out += " " + st + contentLength(r.ResponseHeaders.GetHeaders())
		eos = r.ResponseHeaders.GetEndOfStream()
	case *extprocsvc.ProcessingRequest_RequestBody:
		out += " " + strconv.Quote(string(r.RequestBody.GetBody()))
		eos = r.RequestBody.GetEndOfStream()
	case *extprocsvc.ProcessingRequest_ResponseBody:
		out += " " + strconv.Quote(string(r.ResponseBody.GetBody()))
		eos = r.ResponseBody.GetEndOfStream()
	}
	if eos {
		out += " eos"
	}
	return out
}

// expect receives the next message and checks its kind ("request_headers", ...).
func (s *procStream) expect(kind string) *extprocsvc.ProcessingRequest {
	req := s.recv()
	if !assert.NotNil(s.t, req, "fake ext_proc: want %s, stream ended: %v", kind, s.end) {
		return nil
	}
	assert.Equal(s.t, kind, requestKind(req), "fake ext_proc: message kind")
	return req
}

// send sends resp; failing because Envoy already reset the stream is not an error.
func (s *procStream) send(resp *extprocsvc.ProcessingResponse) {
	err := s.srv.Send(resp)
	// The peer's end of the stream may reach Send before the stream's context reports it.
	if err == nil || s.srv.Context().Err() != nil || errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled {
		return
	}
	assert.NoError(s.t, err, "fake ext_proc: send %s", responseKind(resp))
}

// drain reads until the stream ends and returns what ended it.
func (s *procStream) drain() error {
	for s.recv() != nil {
	}
	return s.end
}

// wait blocks until ch is closed or the stream is cancelled; it reports whether ch closed.
func (s *procStream) wait(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	case <-s.srv.Context().Done():
		return false
	}
}

// passThrough answers every message with an empty CONTINUE until the stream ends.
func passThrough(s *procStream) error {
	for {
		req := s.recv()
		if req == nil {
			return nil
		}
		s.send(cont(req))
	}
}

func contentLength(hm *corev3.HeaderMap) string {
	if v, ok := headerValue(hm, "content-length"); ok {
		return " cl=" + v
	}
	return ""
}

// --- Response builders -----------------------------------------------------------------

// cont is the empty CONTINUE answer to req.
func cont(req *extprocsvc.ProcessingRequest) *extprocsvc.ProcessingResponse {
	return answer(req, &extprocsvc.CommonResponse{})
}

// answer is the response of req's kind carrying common.
func answer(req *extprocsvc.ProcessingRequest, common *extprocsvc.CommonResponse) *extprocsvc.ProcessingResponse {
	switch req.GetRequest().(type) {
	case *extprocsvc.ProcessingRequest_RequestHeaders:
		return reqHeaders(common)
	case *extprocsvc.ProcessingRequest_ResponseHeaders:
		return respHeaders(common)
	case *extprocsvc.ProcessingRequest_RequestBody:
		return reqBody(common)
	case *extprocsvc.ProcessingRequest_ResponseBody:
		return respBody(common)
	}
	return &extprocsvc.ProcessingResponse{}
}

func reqHeaders(c *extprocsvc.CommonResponse) *extprocsvc.ProcessingResponse {
	return &extprocsvc.ProcessingResponse{Response: &extprocsvc.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocsvc.HeadersResponse{Response: c}}}
}

func respHeaders(c *extprocsvc.CommonResponse) *extprocsvc.ProcessingResponse {
	return &extprocsvc.ProcessingResponse{Response: &extprocsvc.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocsvc.HeadersResponse{Response: c}}}
}

func reqBody(c *extprocsvc.CommonResponse) *extprocsvc.ProcessingResponse {
	return &extprocsvc.ProcessingResponse{Response: &extprocsvc.ProcessingResponse_RequestBody{RequestBody: &extprocsvc.BodyResponse{Response: c}}}
}

func respBody(c *extprocsvc.CommonResponse) *extprocsvc.ProcessingResponse {
	return &extprocsvc.ProcessingResponse{Response: &extprocsvc.ProcessingResponse_ResponseBody{ResponseBody: &extprocsvc.BodyResponse{Response: c}}}
}

func immediate(ir *extprocsvc.ImmediateResponse) *extprocsvc.ProcessingResponse {
	return &extprocsvc.ProcessingResponse{Response: &extprocsvc.ProcessingResponse_ImmediateResponse{ImmediateResponse: ir}}
}

// setRaw sets a header with raw_value, the way servers must (§3.1).
func setRaw(key, value string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: key, RawValue: []byte(value)}}
}

func appendRaw(key, value string) *corev3.HeaderValueOption {
	o := setRaw(key, value)
	o.Append = wrapperspb.Bool(true)
	return o
}

func setHeaders(opts ...*corev3.HeaderValueOption) *extprocsvc.HeaderMutation {
	return &extprocsvc.HeaderMutation{SetHeaders: opts}
}

func bodyMut(b string) *extprocsvc.BodyMutation {
	return &extprocsvc.BodyMutation{Mutation: &extprocsvc.BodyMutation_Body{Body: []byte(b)}}
}

// headerValue returns the raw value of key in a message's header map.
func headerValue(hm *corev3.HeaderMap, key string) (string, bool) {
	for _, h := range hm.GetHeaders() {
		if h.GetKey() == key {
			return string(h.GetRawValue()), true
		}
	}
	return "", false
}

// --- Recording upstream ----------------------------------------------------------------

// upstreamRequest is what the upstream received.
type upstreamRequest struct {
	Method, Path string
	Header       http.Header
	Body         string
	ContentLen   int64
	Chunked      bool
}

// fakeUpstream records requests and answers with handler (default: 200 "upstream body").
type fakeUpstream struct {
	srv *httptest.Server

	mu      sync.Mutex
	reqs    []upstreamRequest
	handler http.HandlerFunc
}

// reset makes the upstream answer with handler (nil: the default) and forgets the requests.
func (u *fakeUpstream) reset(handler http.HandlerFunc) {
	if handler == nil {
		handler = defaultUpstream
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	u.reqs, u.handler = nil, handler
}

func defaultUpstream(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain")
	_, _ = io.WriteString(w, "upstream body")
}

func newUpstream(t testing.TB, handler http.HandlerFunc) *fakeUpstream {
	t.Helper()
	u := &fakeUpstream{}
	u.reset(handler)
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		u.reqs = append(u.reqs, upstreamRequest{
			Method: r.Method, Path: r.RequestURI, Header: r.Header.Clone(), Body: string(body),
			ContentLen: r.ContentLength, Chunked: len(r.TransferEncoding) > 0,
		})
		handler := u.handler
		u.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body))
		handler(w, r)
	}))
	t.Cleanup(u.srv.Close)
	return u
}

func (u *fakeUpstream) requests() []upstreamRequest {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]upstreamRequest(nil), u.reqs...)
}

// --- Client helpers --------------------------------------------------------------------

// result is what the client got.
type result struct {
	status int
	header http.Header
	body   string
	// err is set when the exchange failed (e.g. the harness reset the stream).
	err error
}

func do(t *testing.T, e *Envoy, method, path, body string, hdr ...string) result {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, e.URL()+path, rd)
	require.NoError(t, err, "build %s %s", method, path)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	return send(e, req)
}

func send(e *Envoy, req *http.Request) result {
	resp, err := e.Client().Do(req)
	if err != nil {
		return result{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return result{status: resp.StatusCode, header: resp.Header, body: string(b), err: err}
}

// start starts a harness in front of proc and up with the shipped config and o's knobs.
func start(t testing.TB, proc *fakeProc, up *fakeUpstream, o Options) *Envoy {
	t.Helper()
	o.ExtProcAddr = proc.addr
	o.Upstream = up.srv.URL
	return Start(t, o)
}

func onlyRecord(t *testing.T, e *Envoy) Record {
	t.Helper()
	recs := e.Records()
	require.Len(t, recs, 1, "records")
	return recs[0]
}

func ptr[T any](v T) *T { return &v }

var errScript = errors.New("script failed")

func boolValue(v bool) *wrapperspb.BoolValue { return wrapperspb.Bool(v) }

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}
