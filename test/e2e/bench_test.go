package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	configv1 "github.com/codeinterp/codeinterp/api/codeinterp/config/v1"
	"github.com/codeinterp/codeinterp/internal/app"
	"github.com/codeinterp/codeinterp/pkg/config"
	"github.com/codeinterp/codeinterp/pkg/loop"
	"github.com/codeinterp/codeinterp/pkg/sandbox"
	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/schema/responses"
	"github.com/codeinterp/codeinterp/test/e2e/fakemodel"
)

// The performance figures of issues 2 and 4 (run by `make bench`):
//
//   - BenchmarkPassThrough: the ext_proc exchange of one pass-through request (10 KB body,
//     no code_interpreter: request_headers, request_body, response_headers) against the real
//     processor over a real gRPC connection on loopback, driven by a minimal client playing
//     Envoy; BenchmarkPassThroughBaseline is the same exchange against a do-nothing server.
//   - BenchmarkLoopRound: one loop round on a 100 KB conversation, excluding model and code
//     time (an instant sandbox, a model answering from memory), with its p50/p99;
//     BenchmarkLoopRoundParts breaks it down.

// --- Pass-through --------------------------------------------------------------------------

// passThroughBody is a 10 KB Responses request without code_interpreter.
func passThroughBody(size int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"model":"gpt-e2e","tools":[{"type":"function","name":"lookup","parameters":{"type":"object"}}],"input":[`)
	for i := 0; b.Len() < size-200; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"role":"user","content":"message %d: %s"}`, i, strings.Repeat("lorem ipsum ", 8))
	}
	b.WriteString(`],"temperature":0.2}`)
	return b.Bytes()
}

func header(k, v string) *corev3.HeaderValue { return &corev3.HeaderValue{Key: k, RawValue: []byte(v)} }

// passThroughMessages are the three messages Envoy sends for a pass-through request.
func passThroughMessages(body []byte) []*extprocv3.ProcessingRequest {
	return []*extprocv3.ProcessingRequest{
		{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
			Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
				header(":authority", "llm.example"), header(":path", "/v1/responses"), header(":method", "POST"),
				header(":scheme", "http"), header("content-type", "application/json"),
				header("content-length", strconv.Itoa(len(body))), header("authorization", "Bearer sk-bench"),
				header("user-agent", "OpenAI/Go 3.98.0"), header("x-request-id", "3c0e1f4a-bench"),
			}},
		}}},
		{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: body, EndOfStream: true}}},
		{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
			Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
				header(":status", "200"), header("content-type", "application/json"), header("content-length", "2048"),
			}},
		}}},
	}
}

// envoyClient plays Envoy's side of the ext_proc stream for the benchmarks.
type envoyClient struct {
	conn   *grpc.ClientConn
	client extprocv3.ExternalProcessorClient
}

func dialEnvoy(b *testing.B, addr string) *envoyClient {
	b.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(math.MaxInt32), grpc.MaxCallSendMsgSize(math.MaxInt32)))
	if err != nil {
		b.Fatalf("dial %s: %v", addr, err)
	}
	b.Cleanup(func() { _ = conn.Close() })
	return &envoyClient{conn: conn, client: extprocv3.NewExternalProcessorClient(conn)}
}

// exchange runs one request's stream: each message and its answer in turn, then the half-close
// Envoy sends when the request is done, and the server's end of the stream.
func (c *envoyClient) exchange(ctx context.Context, msgs []*extprocv3.ProcessingRequest) ([]*extprocv3.ProcessingResponse, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.client.Process(ctx)
	if err != nil {
		return nil, fmt.Errorf("open stream: %w", err)
	}
	out := make([]*extprocv3.ProcessingResponse, 0, len(msgs))
	for _, m := range msgs {
		if err := stream.Send(m); err != nil {
			return nil, fmt.Errorf("send: %w", err)
		}
		resp, err := stream.Recv()
		if err != nil {
			return nil, fmt.Errorf("receive: %w", err)
		}
		out = append(out, resp)
	}
	if err := stream.CloseSend(); err != nil {
		return nil, fmt.Errorf("close send: %w", err)
	}
	if _, err := stream.Recv(); err != io.EOF {
		return nil, fmt.Errorf("end of stream: want EOF, got %v", err)
	}
	return out, nil
}

// benchProcessor serves the real processor (as cmd/extproc wires it) on loopback; its loop and
// sandbox are never reached by a pass-through request, so an instant sandbox backs them.
func benchProcessor(b *testing.B) string {
	b.Helper()
	lis, err := newLoopback()
	if err != nil {
		b.Fatalf("listen: %v", err)
	}
	b.Cleanup(func() { _ = lis.l.Close() })
	cfg := &configv1.Config{Sandbox: &configv1.Sandbox{WarmPoolSize: proto.Uint32(0)}}
	config.ApplyDefaults(cfg)
	if err := config.Validate(cfg); err != nil {
		b.Fatalf("config: %v", err)
	}
	svc, err := app.New(app.Options{Config: cfg, Provider: instantProvider{}})
	if err != nil {
		b.Fatalf("new service: %v", err)
	}
	served := make(chan error, 1)
	go func() { served <- svc.Serve(lis.view()) }()
	b.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), stopGrace)
		defer cancel()
		if err := svc.Shutdown(stopCtx); err != nil {
			b.Errorf("stop server: %v", err)
		}
		if err := <-served; err != nil {
			b.Errorf("serve: %v", err)
		}
	})
	return lis.l.Addr().String()
}

// nopServer is a do-nothing ext_proc server: every message is answered CONTINUE, unchanged.
type nopServer struct {
	extprocv3.UnimplementedExternalProcessorServer
}

func (nopServer) Process(stream extprocv3.ExternalProcessor_ProcessServer) error {
	for {
		req, err := stream.Recv()
		if err != nil {
			return nil
		}
		resp := &extprocv3.ProcessingResponse{}
		switch req.Request.(type) {
		case *extprocv3.ProcessingRequest_RequestHeaders:
			resp.Response = &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{}}
		case *extprocv3.ProcessingRequest_RequestBody:
			resp.Response = &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{}}
		case *extprocv3.ProcessingRequest_ResponseHeaders:
			resp.Response = &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{}}
		case *extprocv3.ProcessingRequest_ResponseBody:
			resp.Response = &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{}}
		}
		if err := stream.Send(resp); err != nil {
			return nil
		}
	}
}

func benchNopServer(b *testing.B) string {
	b.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatalf("listen: %v", err)
	}
	gs := grpc.NewServer()
	extprocv3.RegisterExternalProcessorServer(gs, nopServer{})
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = gs.Serve(lis)
	}()
	b.Cleanup(func() {
		gs.Stop()
		<-served
	})
	return lis.Addr().String()
}

// BenchmarkPassThrough measures the real processor's whole exchange for one pass-through
// request with a 10 KB body. Compare with BenchmarkPassThroughBaseline.
func BenchmarkPassThrough(b *testing.B) {
	c := dialEnvoy(b, benchProcessor(b))
	msgs := passThroughMessages(passThroughBody(10 << 10))
	resps, err := c.exchange(b.Context(), msgs)
	if err != nil {
		b.Fatalf("exchange: %v", err)
	}
	// The answers a pass-through needs: headers and body continue unchanged, and the response
	// body is turned off at the response headers.
	if resps[1].GetRequestBody() == nil || resps[1].GetRequestBody().GetResponse().GetBodyMutation() != nil {
		b.Fatalf("request_body answer: want CONTINUE without a mutation, got %v", resps[1])
	}
	if resps[2].GetResponseHeaders() == nil || resps[2].GetModeOverride().GetResponseBodyMode() != filterv3.ProcessingMode_NONE {
		b.Fatalf("response_headers answer: want a mode_override with response_body_mode NONE, got %v", resps[2])
	}
	runExchanges(b, c, msgs)
}

// BenchmarkPassThroughBaseline is BenchmarkPassThrough against a server that answers CONTINUE
// to everything and does nothing else.
func BenchmarkPassThroughBaseline(b *testing.B) {
	c := dialEnvoy(b, benchNopServer(b))
	runExchanges(b, c, passThroughMessages(passThroughBody(10<<10)))
}

func runExchanges(b *testing.B, c *envoyClient, msgs []*extprocv3.ProcessingRequest) {
	b.Helper()
	b.SetBytes(int64(len(msgs[1].GetRequestBody().GetBody())))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.exchange(b.Context(), msgs); err != nil {
			b.Fatalf("exchange: %v", err)
		}
	}
}

// --- Loop round ----------------------------------------------------------------------------

// instantProvider is a sandbox backend whose containers start and run instantly.
type instantProvider struct{}

func (instantProvider) Create(context.Context, sandbox.Spec) (sandbox.Container, error) {
	return instantContainer{}, nil
}

type instantContainer struct{}

func (instantContainer) Run(context.Context, string) (sandbox.Result, error) {
	return sandbox.Result{Stdout: "42\n"}, nil
}

func (instantContainer) Delete(context.Context) error { return nil }

// memoryModel answers every follow-up call from memory, after reading the request body.
type memoryModel struct {
	status int
	body   []byte
}

func (m memoryModel) Do(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			return nil, err
		}
		_ = r.Body.Close()
	}
	return &http.Response{
		StatusCode: m.status,
		Header:     http.Header{"Content-Type": {"application/json"}},
		Body:       io.NopCloser(bytes.NewReader(m.body)),
		Request:    r,
	}, nil
}

// conversation is a Responses request of about size bytes: a conversation of user and
// assistant messages, a client function tool and the code_interpreter tool.
func conversation(size int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"model":"gpt-e2e","store":false,"tools":[{"type":"function","name":"lookup","parameters":{"type":"object"}},` +
		`{"type":"code_interpreter","container":{"type":"auto"}}],"input":[`)
	for i := 0; b.Len() < size-200; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		role := []string{"user", "assistant"}[i%2]
		fmt.Fprintf(&b, `{"role":%q,"content":"turn %d: %s"}`, role, i, strings.Repeat("the quick brown fox \u00e9 ", 50))
	}
	b.WriteString(`],"temperature":0.2,"metadata":{"trace":"bench"}}`)
	return b.Bytes()
}

func mustJSON(b *testing.B, v any) []byte {
	b.Helper()
	out, err := json.Marshal(v)
	if err != nil {
		b.Fatalf("marshal: %v", err)
	}
	return out
}

// roundFixture is one loop round's inputs: a 100 KB conversation rewritten as the processor
// does, the model's first answer (one call of the function) and its answer to the follow-up.
type roundFixture struct {
	body    []byte // the client's request
	rewrite schema.Request
	first   []byte
	final   []byte
}

// exchange returns a new exchange of the fixture's request: an exchange is one request's.
func (fx roundFixture) exchange(b *testing.B) schema.Exchange {
	x, err := responses.Surface{}.NewExchange(fx.body, schema.Options{})
	if err != nil {
		b.Fatalf("rewrite the conversation: %v", err)
	}
	return x
}

func newRoundFixture(b *testing.B, stream bool) roundFixture {
	b.Helper()
	body := conversation(100 << 10)
	if stream {
		body = bytes.Replace(body, []byte(`"temperature":0.2`), []byte(`"temperature":0.2,"stream":true`), 1)
	}
	rw, err := responses.RewriteRequest(body, schema.Options{})
	if err != nil || !rw.Found {
		b.Fatalf("rewrite the conversation: found %v, %v", rw.Found, err)
	}
	return roundFixture{
		body:    body,
		rewrite: rw,
		first:   mustJSON(b, fakemodel.Responses(testModel, usage(25000, 20), runCode("call_1", "print(40 + 2)"))),
		final:   mustJSON(b, fakemodel.Responses(testModel, usage(25010, 12), fakemodel.Message("40 + 2 = 42"))),
	}
}

// BenchmarkLoopRound measures loop.Engine.Run for one round on a 100 KB conversation, with a
// sandbox whose runs return instantly and a model that answers instantly from memory: the
// loop's own overhead per round (parse the turn, acquire and run, build the follow-up, send it
// and read the answer, assemble the final answer; and encode it as SSE for "stream"). It
// reports the median and 99th percentile of the rounds as p50-ns and p99-ns.
func BenchmarkLoopRound(b *testing.B) {
	for _, stream := range []bool{false, true} {
		name := "responses"
		if stream {
			name = "responses-stream"
		}
		b.Run(name, func(b *testing.B) {
			fx := newRoundFixture(b, stream)
			mgr := sandbox.NewManager(instantProvider{}, sandbox.ManagerConfig{}, zap.NewNop())
			b.Cleanup(func() { _ = mgr.Close(context.Background()) })
			engine := loop.New(mgr, loop.Config{Client: memoryModel{status: http.StatusOK, body: fx.final}})
			b.Cleanup(engine.Close)
			request := func() loop.Request {
				x := fx.exchange(b)
				r := loop.Request{
					Exchange: x,
					URL:      "http://model.invalid/v1/responses",
					Header:   http.Header{"Authorization": {"Bearer sk-bench"}, "X-Codeinterp-Followup": {"v1.signed"}},
					First:    fx.first,
					Sandbox:  sandbox.AcquireRequest{Identity: "bench"},
				}
				if stream {
					r.Sink = x.Events(io.Discard)
				}
				return r
			}
			res := engine.Run(b.Context(), request())
			if res.Status != http.StatusOK || res.Rounds != 1 || res.Stop != loop.StopDone {
				b.Fatalf("one round: status %d, rounds %d, stop %s: %.300s", res.Status, res.Rounds, res.Stop, res.Body)
			}
			b.SetBytes(int64(len(fx.rewrite.Body)))
			b.ReportAllocs()
			var took []time.Duration
			// An exchange is one request's: each Run gets a new one. The requests' rewrites are the
			// request phase's, not the loop's: they are made in batches with the timer stopped,
			// and their garbage collected before the batch runs.
			var batch []loop.Request
			for b.Loop() {
				if len(batch) == 0 {
					b.StopTimer()
					for range 128 {
						batch = append(batch, request())
					}
					runtime.GC()
					b.StartTimer()
				}
				req := batch[len(batch)-1]
				batch = batch[:len(batch)-1]
				start := time.Now()
				engine.Run(b.Context(), req)
				took = append(took, time.Since(start))
			}
			reportPercentiles(b, took)
		})
	}
}

// reportPercentiles reports the median and 99th percentile of the op durations.
func reportPercentiles(b *testing.B, took []time.Duration) {
	if len(took) == 0 {
		return
	}
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(took[len(took)*99/100].Nanoseconds()), "p99-ns")
}

// BenchmarkLoopRoundParts breaks BenchmarkLoopRound down into the steps of a round.
func BenchmarkLoopRoundParts(b *testing.B) {
	fx := newRoundFixture(b, false)
	outputs := []schema.CallOutput{{CallID: "call_1", Output: "42\n"}}
	followUp, err := responses.FollowUp(fx.rewrite.Body, fx.first, outputs, schema.FollowUpOptions{})
	if err != nil {
		b.Fatalf("follow-up: %v", err)
	}
	rounds := []schema.Round{
		{Body: fx.first, Calls: []schema.CodeCall{{ID: "ci_1", Status: "completed", Code: "print(40 + 2)",
			ContainerID: "cntr_1", Outputs: []schema.CodeOutput{{Type: schema.CodeOutputLogs, Logs: "42\n"}}}}},
		{Body: fx.final},
	}
	in := schema.FinalInput{Rounds: rounds, FunctionName: schema.DefaultFunctionName, Tool: fx.rewrite.Tool}
	final, err := responses.Final(in)
	if err != nil {
		b.Fatalf("final: %v", err)
	}

	b.Run("parse-turns", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := responses.ParseTurn(fx.first, schema.DefaultFunctionName); err != nil {
				b.Fatal(err)
			}
			if _, err := responses.ParseTurn(fx.final, schema.DefaultFunctionName); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("sandbox-acquire-run-release", func(b *testing.B) {
		mgr := sandbox.NewManager(instantProvider{}, sandbox.ManagerConfig{}, zap.NewNop())
		b.Cleanup(func() { _ = mgr.Close(context.Background()) })
		b.ReportAllocs()
		for b.Loop() {
			lease, err := mgr.Acquire(b.Context(), sandbox.AcquireRequest{Identity: "bench"})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := lease.Run(b.Context(), "print(40 + 2)", 0); err != nil {
				b.Fatal(err)
			}
			lease.Release()
		}
	})
	b.Run("follow-up-build", func(b *testing.B) {
		b.SetBytes(int64(len(fx.rewrite.Body)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := responses.FollowUp(fx.rewrite.Body, fx.first, outputs, schema.FollowUpOptions{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("follow-up-post", func(b *testing.B) {
		model := memoryModel{status: http.StatusOK, body: fx.final}
		b.SetBytes(int64(len(followUp)))
		b.ReportAllocs()
		for b.Loop() {
			req, err := http.NewRequestWithContext(b.Context(), http.MethodPost, "http://model.invalid/v1/responses", bytes.NewReader(followUp))
			if err != nil {
				b.Fatal(err)
			}
			resp, err := model.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := io.ReadAll(resp.Body); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("final", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := responses.Final(in); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("final-sse", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := responses.SSE(final); err != nil {
				b.Fatal(err)
			}
		}
	})
}
