package processor

import (
	"bytes"
	"compress/gzip"
	"context"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"

	configv1 "github.com/codeinterp/codeinterp/api/codeinterp/config/v1"
	"github.com/codeinterp/codeinterp/pkg/admission"
	"github.com/codeinterp/codeinterp/pkg/config"
	"github.com/codeinterp/codeinterp/pkg/loop"
	"github.com/codeinterp/codeinterp/pkg/sandbox"
	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/schema/chat"
	"github.com/codeinterp/codeinterp/pkg/schema/responses"
	"github.com/codeinterp/codeinterp/pkg/store"
	"github.com/codeinterp/codeinterp/pkg/store/memory"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fakeLoop records the loop requests it gets and answers with a scripted response.
type fakeLoop struct {
	mu   sync.Mutex
	reqs []loop.Request
	resp loop.Response
	// calls makes Run behave as if the answer needed the loop (it calls OnLoop).
	calls bool
	// panics, if set, is the value Run panics with, after a stream got its first round.
	panics any
}

func (f *fakeLoop) Run(_ context.Context, r loop.Request) loop.Response {
	f.mu.Lock()
	f.reqs = append(f.reqs, r)
	f.mu.Unlock()
	if f.calls && r.OnLoop != nil {
		r.OnLoop()
	}
	// As the real loop does: the exchange reads the answer, and a stream gets the answer's events.
	if r.Exchange != nil {
		_, _ = r.Exchange.ParseTurn(r.First)
	}
	if f.panics != nil {
		if r.Sink != nil {
			_ = r.Sink.Event(schema.Event{Kind: schema.EventRound, Body: r.First})
		}
		panic(f.panics)
	}
	if max := r.MaxAnswerBytes; max > 0 && len(f.resp.Body) > max {
		// As the real loop does: an answer beyond what may be sent is a 502 to every client.
		return loop.Response{Status: http.StatusBadGateway, Header: http.Header{"Content-Type": {"application/json"}},
			Body: r.Exchange.ErrorBody(loop.AnswerTooLarge(len(f.resp.Body), max)), Stop: loop.StopAnswerTooLarge}
	}
	if r.Sink != nil && f.resp.Status == http.StatusOK {
		_ = r.Sink.Event(schema.Event{Kind: schema.EventDone, Body: f.resp.Body})
	}
	return f.resp
}

func (f *fakeLoop) requests() []loop.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]loop.Request(nil), f.reqs...)
}

// fakeContainers knows the container ids in known, per identity.
type fakeContainers map[string]string

func (f fakeContainers) Known(identity, id string) bool { return f[id] == identity && identity != "" }

// Container knows the ids in f, per identity; an id whose owner is given as "expired:"+identity
// is that identity's expired container.
func (f fakeContainers) Container(_ context.Context, identity, id string) (sandbox.ContainerInfo, error) {
	switch owner := f[id]; {
	case identity == "":
	case owner == identity:
		return sandbox.ContainerInfo{ID: id, Status: sandbox.StatusRunning}, nil
	case owner == "expired:"+identity:
		return sandbox.ContainerInfo{ID: id, Status: sandbox.StatusExpired}, nil
	}
	return sandbox.ContainerInfo{}, sandbox.ErrUnknownContainer
}

// CheckSpec refuses memory limits above 16g, as a host with that much memory would.
func (f fakeContainers) CheckSpec(spec sandbox.Spec) error {
	if spec.MemoryLimit == "64g" {
		return &sandbox.SpecError{Field: "memory_limit", Value: spec.MemoryLimit, Reason: "above the largest this server allows, 16g"}
	}
	return nil
}

// testServer serves a Server over bufconn and returns a connected client.
type testServer struct {
	srv    *Server
	client extprocv3.ExternalProcessorClient
	loop   *fakeLoop
}

func newTestServer(t *testing.T, mutate func(*configv1.Config), fl *fakeLoop, containers fakeContainers) *testServer {
	t.Helper()
	return newTestServerWith(t, nil, mutate, fl, containers)
}

// testOptions are a test server's Options and the dependencies of its Admission.
type testOptions struct {
	Options
	// NewFiles and Continuations are the Admission's Files API and continuations store.
	NewFiles      func(base string) admission.Files
	Continuations store.Continuations
	// Stored keeps the looped answers (admission.Config.Stored); nil keeps none.
	Stored store.Pending
}

// newTestServerWith is newTestServer with the options changed by opts (when set).
func newTestServerWith(t *testing.T, opts func(*testOptions), mutate func(*configv1.Config), fl *fakeLoop, containers fakeContainers) *testServer {
	t.Helper()
	cfg := &configv1.Config{PathPrefixes: []string{"/openai"}}
	config.ApplyDefaults(cfg)
	if mutate != nil {
		mutate(cfg)
	}
	require.NoError(t, config.Validate(cfg))
	if fl == nil {
		fl = &fakeLoop{}
	}
	if containers == nil {
		containers = fakeContainers{}
	}
	o := testOptions{
		Options: Options{
			Routes: routesOf(cfg), ProfileKey: cfg.GetProfileMetadataKey(), PathPrefixes: cfg.GetPathPrefixes(),
			MaxRequestBytes: int64(cfg.GetMaxRequestBytes()),
			Loop:            fl, Secret: []byte("test secret"), Log: zaptest.NewLogger(t),
			Surfaces: []schema.Surface{responses.Surface{}, chat.Surface{}},
		},
		Continuations: memory.NewPending(nil),
	}
	if opts != nil {
		opts(&o)
	}
	o.Admission = admission.New(containers, o.Continuations, admission.Config{NewFiles: o.NewFiles, MaxInputFileBytes: int64(cfg.GetMaxUploadBytes()), Stored: o.Stored})
	srv, err := New(o.Options)
	require.NoError(t, err)

	lis := bufconn.Listen(1 << 20)
	gs := grpc.NewServer()
	extprocv3.RegisterExternalProcessorServer(gs, srv)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = gs.Serve(lis)
	}()
	conn, err := grpc.NewClient("passthrough:///bufconn",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() {
		conn.Close()
		gs.Stop()
		<-done
	})
	return &testServer{srv: srv, client: extprocv3.NewExternalProcessorClient(conn), loop: fl}
}

// routesOf maps cfg's profiles onto routes, as internal/app does.
func routesOf(cfg *configv1.Config) map[string]*Route {
	out := map[string]*Route{}
	for name, p := range config.Profiles(cfg) {
		out[name] = &Route{
			Name: p.Name, Disabled: p.Disabled, FunctionName: p.FunctionName, FunctionDescription: p.FunctionDescription,
			IdentityHeader: p.IdentityHeader, SessionHeader: p.SessionHeader, AllowAnonymousSessions: p.AllowAnonymousSessions,
			ForwardHeaders: p.ForwardHeaders, Upstream: p.Upstream,
			LoopDeadline: p.LoopDeadline, LoopMargin: config.LoopDeadlineMargin,
			MaxRounds: p.MaxRounds, RunTimeout: p.RunTimeout, OutputLimit: p.OutputLimit,
			MaxOutputBytes: p.MaxOutputBytes, MaxImages: p.MaxImages, MaxCallsPerTurn: p.MaxCallsPerTurn,
			Progressive: p.Progressive, KeepAlive: p.KeepAlive,
			MaxResponseBytes: p.MaxResponseBytes, MaxAnswerBytes: p.MaxAnswerBytes,
		}
	}
	return out
}

// exchange is one ext_proc stream driven message by message, as Envoy would.
type exchange struct {
	t      *testing.T
	stream extprocv3.ExternalProcessor_ProcessClient
	cancel context.CancelFunc
}

func (ts *testServer) open(t *testing.T, md ...string) *exchange {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	if len(md) > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, md...)
	}
	stream, err := ts.client.Process(ctx)
	require.NoError(t, err)
	ex := &exchange{t: t, stream: stream, cancel: cancel}
	t.Cleanup(ex.close)
	return ex
}

func (ex *exchange) close() {
	_ = ex.stream.CloseSend()
	ex.cancel()
}

func (ex *exchange) send(req *extprocv3.ProcessingRequest) *extprocv3.ProcessingResponse {
	ex.t.Helper()
	require.NoError(ex.t, ex.stream.Send(req))
	resp, err := ex.stream.Recv()
	require.NoError(ex.t, err)
	return resp
}

func headerMapOf(kv ...string) *corev3.HeaderMap {
	hm := &corev3.HeaderMap{}
	for i := 0; i+1 < len(kv); i += 2 {
		hm.Headers = append(hm.Headers, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
	}
	return hm
}

func reqHeaders(eos bool, kv ...string) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: &extprocv3.HttpHeaders{Headers: headerMapOf(kv...), EndOfStream: eos}}}
}

func reqBody(b string) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
		RequestBody: &extprocv3.HttpBody{Body: []byte(b), EndOfStream: true}}}
}

func respHeaders(kv ...string) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
		ResponseHeaders: &extprocv3.HttpHeaders{Headers: headerMapOf(kv...)}}}
}

func respBody(b []byte) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
		ResponseBody: &extprocv3.HttpBody{Body: b, EndOfStream: true}}}
}

func postHeaders(path string, extra ...string) *extprocv3.ProcessingRequest {
	kv := append([]string{":authority", "llm.local", ":path", path, ":method", "POST", ":scheme", "http",
		"content-type", "application/json", "authorization", "Bearer sk-one", "x-request-id", "req-1"}, extra...)
	return reqHeaders(false, kv...)
}

// passThroughMode is the mode_override of a stream the server does not process further.
var passThroughMode = &filterv3.ProcessingMode{
	RequestBodyMode:    filterv3.ProcessingMode_NONE,
	ResponseHeaderMode: filterv3.ProcessingMode_SKIP,
	ResponseBodyMode:   filterv3.ProcessingMode_NONE,
}

// wantServedMode is the mode_override that asks for both bodies BUFFERED and the response headers,
// whatever the route's processing mode.
var wantServedMode = &filterv3.ProcessingMode{
	RequestBodyMode:    filterv3.ProcessingMode_BUFFERED,
	ResponseHeaderMode: filterv3.ProcessingMode_SEND,
	ResponseBodyMode:   filterv3.ProcessingMode_BUFFERED,
}

const (
	toolBody  = `{"model":"m","input":"compute 40+2","tools":[{"type":"code_interpreter","container":{"type":"auto"}}]}`
	plainBody = `{"model":"m","input":"hi","tools":[{"type":"function","name":"f","parameters":{}}]}`
)

func TestRequestHeadersPassThrough(t *testing.T) {
	tests := []struct {
		name string
		give *extprocv3.ProcessingRequest
	}{
		{"other path", postHeaders("/v1/embeddings")},
		{"GET on a served path", reqHeaders(true, ":path", "/v1/responses", ":method", "GET")},
		{"prefix not configured", postHeaders("/azure/v1/responses")},
		{"served path without body", reqHeaders(true, ":path", "/v1/responses", ":method", "POST")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := newTestServer(t, nil, nil, nil)
			resp := ts.open(t).send(tt.give)
			require.NotNil(t, resp.GetRequestHeaders(), "a request_headers answer for %s", tt.name)
			assert.True(t, protoEqual(passThroughMode, resp.GetModeOverride()), "mode_override for %s: %v", tt.name, resp.GetModeOverride())
		})
	}
}

func TestReservedHeadersAreRemoved(t *testing.T) {
	ts := newTestServer(t, nil, nil, nil)
	for _, path := range []string{"/v1/responses", "/v1/models"} {
		resp := ts.open(t).send(postHeaders(path, "x-codeinterp-followup", "v1.99999999999.00", "x-codeinterp-anything", "1"))
		assert.ElementsMatch(t, []string{"x-codeinterp-followup", "x-codeinterp-anything"},
			resp.GetRequestHeaders().GetResponse().GetHeaderMutation().GetRemoveHeaders(), "removed headers on %s", path)
	}
}

func TestForgedFollowUpIsProcessed(t *testing.T) {
	ts := newTestServer(t, nil, nil, nil)
	ex := ts.open(t)
	resp := ex.send(postHeaders("/v1/responses", "x-codeinterp-followup", "v1.99999999999.deadbeef"))
	assert.True(t, protoEqual(wantServedMode, resp.GetModeOverride()), "a forged follow-up header must not skip processing: %v", resp.GetModeOverride())
	resp = ex.send(reqBody(toolBody))
	assert.NotNil(t, resp.GetRequestBody().GetResponse().GetBodyMutation(), "the body is still rewritten")
}

func TestSignedFollowUpPassesThrough(t *testing.T) {
	ts := newTestServer(t, nil, nil, nil)
	identity, _ := ts.srv.signer.identity(newHeaderMap(headerMapOf("authorization", "Bearer sk-one")), "")
	sig := ts.srv.signer.signFollowUp("/v1/responses", identity, time.Now().Add(time.Minute))
	resp := ts.open(t).send(postHeaders("/v1/responses?x=1", "x-codeinterp-followup", sig))
	assert.True(t, protoEqual(passThroughMode, resp.GetModeOverride()), "a signed follow-up passes through")
	assert.Contains(t, resp.GetRequestHeaders().GetResponse().GetHeaderMutation().GetRemoveHeaders(), "x-codeinterp-followup",
		"the follow-up header never reaches the upstream")

	tests := []struct {
		name  string
		path  string
		extra []string
	}{
		{"another credential", "/v1/responses", []string{"authorization", "Bearer sk-two"}},
		{"another path", "/v1/chat/completions", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hdrs := postHeaders(tt.path, append([]string{"x-codeinterp-followup", sig}, tt.extra...)...)
			if tt.extra != nil {
				// Replace the default credential.
				hs := hdrs.GetRequestHeaders().GetHeaders().GetHeaders()
				for _, h := range hs {
					if h.Key == "authorization" {
						h.RawValue = []byte("Bearer sk-two")
					}
				}
			}
			resp := ts.open(t).send(hdrs)
			assert.True(t, protoEqual(wantServedMode, resp.GetModeOverride()), "a signature for another request must not pass (%s): %v", tt.name, resp.GetModeOverride())
		})
	}

	expired := ts.srv.signer.signFollowUp("/v1/responses", identity, time.Now().Add(-time.Second))
	resp = ts.open(t).send(postHeaders("/v1/responses", "x-codeinterp-followup", expired))
	assert.True(t, protoEqual(wantServedMode, resp.GetModeOverride()), "an expired signature must not pass: %v", resp.GetModeOverride())
}

func TestPlainRequestPassesThrough(t *testing.T) {
	ts := newTestServer(t, nil, nil, nil)
	ex := ts.open(t)
	resp := ex.send(postHeaders("/v1/responses"))
	assert.True(t, protoEqual(wantServedMode, resp.GetModeOverride()), "a served path asks for its body: %v", resp.GetModeOverride())
	resp = ex.send(reqBody(plainBody))
	assert.Nil(t, resp.GetRequestBody().GetResponse().GetBodyMutation(), "a body without code_interpreter is not touched")
	assert.Nil(t, resp.GetRequestBody().GetResponse().GetHeaderMutation(), "no header changes either")
	resp = ex.send(respHeaders(":status", "200", "content-type", "text/event-stream"))
	require.NotNil(t, resp.GetResponseHeaders())
	assert.Equal(t, filterv3.ProcessingMode_NONE, resp.GetModeOverride().GetResponseBodyMode(), "the answer is not sent to the server")
	assert.Empty(t, ts.loop.requests(), "no loop for a plain request")
}

// TestServedPathAsksForBufferedBodies: the server relies on whole bodies, so it does not count
// on the route's processing mode (a route's ExtProcPerRoute may set another): a served path's
// request_headers answer asks for a BUFFERED request body and response headers, and a rewritten
// request's response_headers answer for a BUFFERED response body, so that the loop gets the
// whole answer. Each mode_override merges to the shipped filter mode (docs/architecture.md, "Envoy's modes"), and
// rides on an answer the server sends anyway.
func TestServedPathAsksForBufferedBodies(t *testing.T) {
	ts := newTestServer(t, nil, nil, nil)
	for _, path := range []string{"/v1/responses", "/v1/chat/completions", "/openai/v1/responses"} {
		ex := ts.open(t)
		resp := ex.send(postHeaders(path))
		require.NotNil(t, resp.GetRequestHeaders(), "a request_headers answer on %s", path)
		assert.True(t, protoEqual(wantServedMode, resp.GetModeOverride()), "request_headers mode_override on %s: %v", path, resp.GetModeOverride())

		body := toolBody
		if path == "/v1/chat/completions" {
			body = `{"model":"m","messages":[],"tools":[{"type":"code_interpreter"}]}`
		}
		resp = ex.send(reqBody(body))
		require.NotNil(t, resp.GetRequestBody().GetResponse().GetBodyMutation(), "the body on %s is rewritten", path)
		resp = ex.send(respHeaders(":status", "200", "content-type", "application/json"))
		require.NotNil(t, resp.GetResponseHeaders(), "a response_headers answer on %s", path)
		assert.True(t, protoEqual(wantServedMode, resp.GetModeOverride()), "response_headers mode_override on %s: %v", path, resp.GetModeOverride())
	}
}

func TestMalformedJSONIs400(t *testing.T) {
	ts := newTestServer(t, nil, nil, nil)
	for _, path := range []string{"/v1/responses", "/v1/chat/completions", "/openai/v1/responses"} {
		ex := ts.open(t)
		ex.send(postHeaders(path))
		resp := ex.send(reqBody(`{"model":"m","tools":[{"type":"code_interpreter"}`))
		ir := resp.GetImmediateResponse()
		require.NotNil(t, ir, "an immediate response on %s", path)
		assert.Equal(t, 400, int(ir.GetStatus().GetCode()), "status on %s", path)
		assert.Equal(t, "invalid_request_error", gjson.GetBytes(ir.GetBody(), "error.type").String(), "error body on %s: %s", path, ir.GetBody())
		assert.Equal(t, "application/json", string(ir.GetHeaders().GetSetHeaders()[0].GetHeader().GetRawValue()))
	}
}

func TestRewriteSetsContentLength(t *testing.T) {
	ts := newTestServer(t, nil, nil, nil)
	ex := ts.open(t)
	ex.send(postHeaders("/v1/responses", "accept-encoding", "gzip", "content-length", strconv.Itoa(len(toolBody))))
	resp := ex.send(reqBody(toolBody))
	common := resp.GetRequestBody().GetResponse()
	body := common.GetBodyMutation().GetBody()
	require.NotEmpty(t, body, "the body is rewritten")
	assert.Equal(t, "function", gjson.GetBytes(body, "tools.0.type").String(), "the tool became a function: %s", body)
	var cl string
	for _, h := range common.GetHeaderMutation().GetSetHeaders() {
		if h.GetHeader().GetKey() == "content-length" {
			cl = string(h.GetHeader().GetRawValue())
			assert.Empty(t, h.GetHeader().GetValue(), "only raw_value is set")
		}
	}
	assert.Equal(t, strconv.Itoa(len(body)), cl, "content-length equals the new body's length")
	assert.Contains(t, common.GetHeaderMutation().GetRemoveHeaders(), "accept-encoding")
}

func TestUnknownContainerIs404(t *testing.T) {
	containers := fakeContainers{"cntr_mine": "someone-else"}
	ts := newTestServer(t, nil, nil, containers)
	ex := ts.open(t)
	ex.send(postHeaders("/v1/responses"))
	resp := ex.send(reqBody(`{"model":"m","input":"x","tools":[{"type":"code_interpreter","container":"cntr_mine"}]}`))
	ir := resp.GetImmediateResponse()
	require.NotNil(t, ir, "a container of another identity is unknown")
	assert.Equal(t, 404, int(ir.GetStatus().GetCode()))
	assert.Contains(t, gjson.GetBytes(ir.GetBody(), "error.message").String(), "cntr_mine")
}

// An expired container of the caller's is a 400 container_expired, another identity's expired
// one is unknown (404), as an id never issued is.
func TestExpiredContainerIs400(t *testing.T) {
	containers := fakeContainers{}
	ts := newTestServer(t, nil, nil, containers)
	identity, _ := ts.srv.signer.identity(newHeaderMap(headerMapOf("authorization", "Bearer sk-one")), "")
	containers["cntr_gone"] = "expired:" + identity
	containers["cntr_theirs"] = "expired:someone-else"
	tests := []struct {
		id         string
		wantStatus int
		wantCode   string
		wantType   string
	}{
		{"cntr_gone", 400, "container_expired", "invalid_request_error"},
		{"cntr_theirs", 404, "container_not_found", "not_found_error"},
		{"cntr_never", 404, "container_not_found", "not_found_error"},
	}
	for _, tt := range tests {
		ex := ts.open(t)
		ex.send(postHeaders("/v1/responses"))
		ir := ex.send(reqBody(`{"model":"m","input":"x","tools":[{"type":"code_interpreter","container":"` + tt.id + `"}]}`)).GetImmediateResponse()
		require.NotNil(t, ir, "%s is refused", tt.id)
		assert.Equal(t, tt.wantStatus, int(ir.GetStatus().GetCode()), "status for %s", tt.id)
		assert.Equal(t, tt.wantCode, gjson.GetBytes(ir.GetBody(), "error.code").String(), "code for %s: %s", tt.id, ir.GetBody())
		assert.Equal(t, "tools", gjson.GetBytes(ir.GetBody(), "error.param").String(), "param for %s", tt.id)
		assert.Equal(t, tt.wantType, gjson.GetBytes(ir.GetBody(), "error.type").String(), "type for %s", tt.id)
		assert.Contains(t, gjson.GetBytes(ir.GetBody(), "error.message").String(), tt.id, "message for %s", tt.id)
	}
}

// TestMemoryLimitAboveTheCapIs400: a memory_limit the sandbox refuses (above the operator's
// cap) is the client's mistake, answered as an invalid one is.
func TestMemoryLimitAboveTheCapIs400(t *testing.T) {
	ts := newTestServer(t, nil, nil, fakeContainers{})
	ex := ts.open(t)
	ex.send(postHeaders("/v1/responses"))
	resp := ex.send(reqBody(`{"model":"m","input":"x","tools":[{"type":"code_interpreter","container":{"type":"auto","memory_limit":"64g"}}]}`))
	ir := resp.GetImmediateResponse()
	require.NotNil(t, ir, "a memory limit above the cap is refused")
	assert.Equal(t, 400, int(ir.GetStatus().GetCode()), "status")
	assert.Equal(t, "invalid_value", gjson.GetBytes(ir.GetBody(), "error.code").String(), "code: %s", ir.GetBody())
	assert.Contains(t, gjson.GetBytes(ir.GetBody(), "error.message").String(), "16g", "message: %s", ir.GetBody())
}

func TestNon200AnswerPassesThrough(t *testing.T) {
	ts := newTestServer(t, nil, nil, nil)
	ex := ts.open(t)
	ex.send(postHeaders("/v1/responses"))
	ex.send(reqBody(toolBody))
	resp := ex.send(respHeaders(":status", "429", "content-type", "application/json"))
	assert.Equal(t, filterv3.ProcessingMode_NONE, resp.GetModeOverride().GetResponseBodyMode(), "an upstream error is not buffered")
}

func TestLoopAnswer(t *testing.T) {
	final := []byte(`{"id":"resp_1","output":[]}`)
	fl := &fakeLoop{calls: true, resp: loop.Response{Status: 200, Header: http.Header{"Content-Type": {"text/event-stream"}, "Cache-Control": {"no-cache"}}, Body: final, Stop: loop.StopDone}}
	ts := newTestServer(t, func(c *configv1.Config) {
		c.Profiles = map[string]*configv1.Profile{"fast": {MaxRounds: 3, FunctionName: "python"}}
	}, fl, nil)
	ex := ts.open(t, "x-codeinterp-profile", "fast")
	ex.send(postHeaders("/openai/v1/responses?api-version=1", "openai-organization", "org-1", "x-codeinterp-evil", "1", "cookie", "c=1"))
	ex.send(reqBody(toolBody))
	ex.send(respHeaders(":status", "200", "content-type", "application/json"))

	require.NoError(t, ex.stream.Send(respBody([]byte(`{"id":"resp_0","output":[]}`))))
	first, err := ex.stream.Recv()
	require.NoError(t, err)
	require.NotNil(t, first.GetOverrideMessageTimeout(), "the loop extends Envoy's message timeout first")
	assert.Equal(t, config.DefaultLoopDeadline, first.GetOverrideMessageTimeout().AsDuration())
	assert.Nil(t, first.GetResponse(), "the override message carries nothing else")
	second, err := ex.stream.Recv()
	require.NoError(t, err)
	common := second.GetResponseBody().GetResponse()
	assert.Equal(t, final, common.GetBodyMutation().GetBody())
	set := map[string]string{}
	for _, h := range common.GetHeaderMutation().GetSetHeaders() {
		set[h.GetHeader().GetKey()] = string(h.GetHeader().GetRawValue())
	}
	assert.Equal(t, map[string]string{"content-type": "text/event-stream", "cache-control": "no-cache", "content-length": strconv.Itoa(len(final))}, set)

	reqs := fl.requests()
	require.Len(t, reqs, 1)
	r := reqs[0]
	assert.Equal(t, "http://127.0.0.1:10000/openai/v1/responses?api-version=1", r.URL, "follow-ups go to the upstream with the original path")
	assert.Equal(t, 3, r.MaxRounds, "the route's profile applies")
	assert.Contains(t, string(r.Exchange.Request().Body), `"name":"python"`, "the route's profile names the function")
	assert.Equal(t, "Bearer sk-one", r.Header.Get("authorization"))
	assert.Equal(t, "org-1", r.Header.Get("openai-organization"))
	assert.Empty(t, r.Header.Get("cookie"), "headers off the allowlist are not forwarded")
	assert.Empty(t, r.Header.Get("x-codeinterp-evil"), "client-sent reserved headers are not forwarded")
	assert.NotEmpty(t, r.Header.Get(followUpHeader), "follow-ups are signed")
	assert.NotEmpty(t, r.Sandbox.Identity, "the identity scopes the sandbox")
	assert.NotContains(t, r.Sandbox.Identity, "sk-one", "the identity is a keyed hash, not the credential")
}

func TestLoopErrorIsImmediateResponse(t *testing.T) {
	fl := &fakeLoop{resp: loop.Response{Status: 500, Header: http.Header{"Content-Type": {"application/json"}, "Retry-After": {"3"}}, Body: []byte(`{"error":{"message":"boom"}}`), Stop: loop.StopUpstreamError}}
	ts := newTestServer(t, nil, fl, nil)
	ex := ts.open(t)
	ex.send(postHeaders("/v1/chat/completions"))
	ex.send(reqBody(`{"model":"m","messages":[],"tools":[{"type":"code_interpreter"}]}`))
	ex.send(respHeaders(":status", "200"))
	resp := ex.send(respBody([]byte(`{"choices":[]}`)))
	ir := resp.GetImmediateResponse()
	require.NotNil(t, ir)
	assert.Equal(t, 500, int(ir.GetStatus().GetCode()))
	assert.Equal(t, `{"error":{"message":"boom"}}`, string(ir.GetBody()))
	got := map[string]string{}
	for _, h := range ir.GetHeaders().GetSetHeaders() {
		got[h.GetHeader().GetKey()] = string(h.GetHeader().GetRawValue())
	}
	assert.Equal(t, map[string]string{"content-type": "application/json", "retry-after": "3"}, got, "the loop's headers, lower-case, as raw values")
}

func TestGzipAnswerIsDecoded(t *testing.T) {
	fl := &fakeLoop{resp: loop.Response{Status: 200, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{}`)}}
	ts := newTestServer(t, nil, fl, nil)
	ex := ts.open(t)
	ex.send(postHeaders("/v1/responses"))
	ex.send(reqBody(toolBody))
	ex.send(respHeaders(":status", "200", "content-encoding", "gzip"))
	var zb bytes.Buffer
	zw := gzip.NewWriter(&zb)
	_, _ = zw.Write([]byte(`{"id":"resp_0"}`))
	require.NoError(t, zw.Close())
	resp := ex.send(respBody(zb.Bytes()))
	assert.Contains(t, resp.GetResponseBody().GetResponse().GetHeaderMutation().GetRemoveHeaders(), "content-encoding")
	require.Len(t, fl.requests(), 1)
	assert.Equal(t, `{"id":"resp_0"}`, string(fl.requests()[0].First))
}

func TestDisabledProfilePassesThrough(t *testing.T) {
	ts := newTestServer(t, func(c *configv1.Config) {
		c.Profiles = map[string]*configv1.Profile{"none": {Disabled: true}}
	}, nil, nil)
	resp := ts.open(t, "x-codeinterp-profile", "none").send(postHeaders("/v1/responses"))
	assert.True(t, protoEqual(passThroughMode, resp.GetModeOverride()), "a disabled route passes through")
}

func TestIdentity(t *testing.T) {
	s := newSigner([]byte("k"), nil)
	tests := []struct {
		name           string
		a, b           []string
		identityHeader string
		same           bool
	}{
		{"same bearer", []string{"authorization", "Bearer a"}, []string{"authorization", "Bearer a"}, "", true},
		{"other bearer", []string{"authorization", "Bearer a"}, []string{"authorization", "Bearer b"}, "", false},
		{"one key in x-api-key or authorization is one identity (issue 23)", []string{"x-api-key", "a"}, []string{"authorization", "Bearer a"}, "", true},
		{"identity header wins over credential", []string{"x-tenant", "t1", "authorization", "Bearer a"}, []string{"x-tenant", "t1", "authorization", "Bearer b"}, "x-tenant", true},
		{"identity header differs", []string{"x-tenant", "t1"}, []string{"x-tenant", "t2"}, "x-tenant", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, _ := s.identity(newHeaderMap(headerMapOf(tt.a...)), tt.identityHeader)
			b, _ := s.identity(newHeaderMap(headerMapOf(tt.b...)), tt.identityHeader)
			require.NotEmpty(t, a)
			assert.Equal(t, tt.same, a == b, "identities of %v and %v", tt.a, tt.b)
		})
	}
	none, err := s.identity(newHeaderMap(headerMapOf("content-type", "x")), "")
	assert.NoError(t, err, "no credential")
	assert.Empty(t, none, "no credential, no identity")
}

func protoEqual(a, b proto.Message) bool { return proto.Equal(a, b) }

// mixedTurn returns a server that has answered one request of path with body, whose upstream
// answered answer, by a loop that stopped for a client call with pending calls.
func mixedTurn(t *testing.T, path, body, answer string, pending []store.PendingCall) *testServer {
	t.Helper()
	res := loop.Response{Status: 200, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(answer), Stop: loop.StopClientCall, Pending: pending}
	ts := newTestServer(t, nil, &fakeLoop{resp: res}, nil)
	ex := ts.open(t)
	ex.send(postHeaders(path))
	ex.send(reqBody(body))
	ex.send(respHeaders(":status", "200"))
	ex.send(respBody([]byte(answer)))
	return ts
}

// Answers of a mixed turn: the code function and the client's function w called together.
const (
	mixedResponses = `{"id":"resp_mixed","object":"response","status":"completed","output":[]}`
	mixedChat      = `{"id":"c1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","tool_calls":[` +
		`{"id":"call_ci","type":"function","function":{"name":"code_interpreter","arguments":"{}"}},` +
		`{"id":"call_w","type":"function","function":{"name":"w","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}`
)

// A turn that called the code function and a client function leaves the code's output pending
// upstream; the request that continues from that answer by previous_response_id gets it
// prepended, also when it no longer has the code_interpreter tool, and only for the same caller.
func TestContinuationCarriesPendingOutputs(t *testing.T) {
	ts := mixedTurn(t, "/v1/responses", toolBody, mixedResponses, []store.PendingCall{{CallID: "call_ci", Output: "42\n"}})
	var ex *exchange

	next := `{"model":"m","previous_response_id":"resp_mixed","input":[{"type":"function_call_output","call_id":"call_w","output":"sunny"}]}`
	ex = ts.open(t)
	ex.send(postHeaders("/v1/responses"))
	resp := ex.send(reqBody(next))
	want := `{"model":"m","previous_response_id":"resp_mixed","input":[{"type":"function_call_output","call_id":"call_ci","output":"42\n"},{"type":"function_call_output","call_id":"call_w","output":"sunny"}]}`
	assert.Equal(t, want, string(resp.GetRequestBody().GetResponse().GetBodyMutation().GetBody()), "the continuation carries the pending output")

	ex = ts.open(t)
	ex.send(reqHeaders(false, ":authority", "llm.local", ":path", "/v1/responses", ":method", "POST", ":scheme", "http",
		"content-type", "application/json", "authorization", "Bearer sk-two"))
	resp = ex.send(reqBody(next))
	assert.Nil(t, resp.GetRequestBody().GetResponse().GetBodyMutation(), "another caller's continuation is left as it is")
}

// A Chat answer that left out the code call next to the client's gets it back in every later
// request that replays the message, from the same caller only.
func TestChatReplayGetsPendingCallsBack(t *testing.T) {
	ts := mixedTurn(t, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"q"}],"tools":[{"type":"code_interpreter"}]}`,
		mixedChat, []store.PendingCall{{CallID: "call_ci", Arguments: `{"code":"print(42)"}`, Output: "42\n"}})
	var ex *exchange

	next := `{"model":"m","messages":[{"role":"user","content":"q"},{"role":"assistant","tool_calls":[{"id":"call_w","type":"function","function":{"name":"w","arguments":"{}"}}]},{"role":"tool","tool_call_id":"call_w","content":"sunny"}]}`
	want := `{"model":"m","messages":[{"role":"user","content":"q"},{"role":"assistant","tool_calls":[{"id":"call_w","type":"function","function":{"name":"w","arguments":"{}"}},` +
		`{"id":"call_ci","type":"function","function":{"name":"code_interpreter","arguments":"{\"code\":\"print(42)\"}"}}]},` +
		`{"role":"tool","tool_call_id":"call_ci","content":"42\n"},{"role":"tool","tool_call_id":"call_w","content":"sunny"}]}`
	for i := range 2 {
		ex = ts.open(t)
		ex.send(postHeaders("/v1/chat/completions"))
		resp := ex.send(reqBody(next))
		assert.Equal(t, want, string(resp.GetRequestBody().GetResponse().GetBodyMutation().GetBody()), "replay %d gets the code call back", i+1)
	}

	ex = ts.open(t)
	ex.send(reqHeaders(false, ":authority", "llm.local", ":path", "/v1/chat/completions", ":method", "POST", ":scheme", "http",
		"content-type", "application/json", "authorization", "Bearer sk-two"))
	resp := ex.send(reqBody(next))
	assert.Nil(t, resp.GetRequestBody().GetResponse().GetBodyMutation(), "another caller's request is left as it is")
}

// The code outputs a conversation's continuation carries are kept until the upstream takes a
// request that carried them: a retry after an upstream error carries them again.
func TestConversationPendingOutputsKeptUntilTaken(t *testing.T) {
	ts := mixedTurn(t, "/v1/responses", `{"model":"m","conversation":"conv_1","input":"q","tools":[{"type":"code_interpreter"}]}`,
		mixedResponses, []store.PendingCall{{CallID: "call_ci", Output: "42\n"}})
	var ex *exchange

	next := `{"model":"m","conversation":"conv_1","input":[{"type":"function_call_output","call_id":"call_w","output":"sunny"}]}`
	for i, status := range []string{"429", "200"} {
		ex = ts.open(t)
		ex.send(postHeaders("/v1/responses"))
		resp := ex.send(reqBody(next))
		assert.Contains(t, string(resp.GetRequestBody().GetResponse().GetBodyMutation().GetBody()), `"call_id":"call_ci"`, "request %d carries the pending output", i+1)
		ex.send(respHeaders(":status", status))
	}
	ex = ts.open(t)
	ex.send(postHeaders("/v1/responses"))
	resp := ex.send(reqBody(next))
	assert.Nil(t, resp.GetRequestBody().GetResponse().GetBodyMutation(), "once the upstream took it, the conversation holds the output")
}
