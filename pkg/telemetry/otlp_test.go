package telemetry

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	collectortracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// received keeps what an OTLP receiver got: the spans and the headers of the exports.
type received struct {
	mu      sync.Mutex
	spans   []*tracepb.Span
	service string
	auth    []string
}

func (r *received) add(req *collectortracepb.ExportTraceServiceRequest, auth string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.auth = append(r.auth, auth)
	for _, rs := range req.GetResourceSpans() {
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				r.service = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			r.spans = append(r.spans, ss.GetSpans()...)
		}
	}
}

// traceService is an OTLP/gRPC trace receiver.
type traceService struct {
	collectortracepb.UnimplementedTraceServiceServer
	r *received
}

func (s traceService) Export(ctx context.Context, req *collectortracepb.ExportTraceServiceRequest) (*collectortracepb.ExportTraceServiceResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	s.r.add(req, first(md.Get("authorization")))
	return &collectortracepb.ExportTraceServiceResponse{}, nil
}

func first(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}

// Start exports spans over real OTLP, gRPC and HTTP, to the configured endpoint with the
// configured headers and service name; Shutdown flushes them.
func TestStartExportsOverOTLP(t *testing.T) {
	tests := []struct {
		name     string
		protocol string
		serve    func(t *testing.T, r *received) string // returns the endpoint URL
	}{
		{"grpc", ProtocolGRPC, func(t *testing.T, r *received) string {
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			srv := grpc.NewServer()
			collectortracepb.RegisterTraceServiceServer(srv, traceService{r: r})
			done := make(chan struct{})
			go func() { defer close(done); _ = srv.Serve(lis) }()
			t.Cleanup(func() { srv.Stop(); <-done })
			return "http://" + lis.Addr().String()
		}},
		{"http", ProtocolHTTP, func(t *testing.T, r *received) string {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
				if req.URL.Path != "/v1/traces" {
					http.NotFound(w, req)
					return
				}
				body, _ := io.ReadAll(req.Body)
				var msg collectortracepb.ExportTraceServiceRequest
				if err := proto.Unmarshal(body, &msg); err != nil {
					http.Error(w, err.Error(), http.StatusBadRequest)
					return
				}
				r.add(&msg, req.Header.Get("Authorization"))
				w.Header().Set("Content-Type", "application/x-protobuf")
				out, _ := proto.Marshal(&collectortracepb.ExportTraceServiceResponse{})
				_, _ = w.Write(out)
			}))
			t.Cleanup(srv.Close)
			return srv.URL
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &received{}
			endpoint := tt.serve(t, r)
			ratio := 1.0
			p, err := Start(context.Background(), Config{Endpoint: endpoint, Protocol: tt.protocol,
				Headers: map[string]string{"authorization": "Bearer collector-key"}, SampleRatio: &ratio, ServiceName: "ci-test"})
			require.NoError(t, err, "Start over %s", tt.protocol)
			ctx, agent := p.GenAI.StartAgent(context.Background(), "chat_completions", []byte(`{"model":"m"}`))
			_, tool := agent.StartTool(ctx, "call_1", "", "print(1)")
			tool.End(Container{ID: "cntr_1"}, "", "1")
			agent.End("done", http.StatusOK, 1, 1)
			require.NoError(t, p.Shutdown(context.Background()), "Shutdown flushes over %s", tt.protocol)

			r.mu.Lock()
			defer r.mu.Unlock()
			names := map[string]bool{}
			for _, s := range r.spans {
				names[s.GetName()] = true
			}
			assert.Equal(t, map[string]bool{"invoke_agent codeinterp": true, "execute_tool code_interpreter": true}, names, "spans received over %s", tt.protocol)
			assert.Equal(t, "ci-test", r.service, "service.name over %s", tt.protocol)
			require.NotEmpty(t, r.auth)
			assert.Equal(t, "Bearer collector-key", r.auth[0], "the configured headers go with the export over %s", tt.protocol)
		})
	}
}

func TestServiceName(t *testing.T) {
	tests := []struct {
		name string
		env  string
		give string
		want string
	}{
		{"default", "", "", "codeinterp"},
		{"OTEL_SERVICE_NAME", "from-env", "", "from-env"},
		{"configured wins", "from-env", "configured", "configured"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("OTEL_SERVICE_NAME", tt.env)
			res, err := newResource(context.Background(), tt.give)
			require.NoError(t, err)
			got, _ := res.Set().Value("service.name")
			assert.Equal(t, tt.want, got.AsString(), "service.name with OTEL_SERVICE_NAME=%q and %q configured", tt.env, tt.give)
		})
	}
}
