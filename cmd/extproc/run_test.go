package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/codeinterp/codeinterp/test/e2e/harness"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// freeAddr returns a loopback address nobody listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

func TestRunServesAndStops(t *testing.T) {
	cfgPath := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(cfgPath, []byte("log_level: debug\nlisten: 127.0.0.1:1\nsandbox:\n  warm_pool_size: 0\n"), 0o600))
	grpcAddr, adminAddr, apiAddr := freeAddr(t), freeAddr(t), freeAddr(t)
	// The model API the Containers API checks keys against: it knows sk-test only.
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/models" || r.Header.Get("Authorization") != "Bearer sk-test" {
			http.Error(w, `{"error":{"message":"no","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`, http.StatusUnauthorized)
			return
		}
		_, _ = io.WriteString(w, `{"object":"list","data":[]}`)
	}))
	defer upstream.Close()
	ctx, cancel := context.WithCancel(context.Background())
	var logs harness.SyncBuffer
	done := make(chan error, 1)
	go func() {
		// --listen overrides the file's listen.
		done <- run(ctx, []string{"--config", cfgPath, "--listen", grpcAddr, "--admin-listen", adminAddr, "--api-listen", apiAddr,
			"--upstream", upstream.URL, "--log-level", "info"}, &logs)
	}()

	require.Eventually(t, func() bool {
		resp, err := http.Get("http://" + adminAddr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 20*time.Second, 50*time.Millisecond, "readyz turns 200; logs:\n%s", &logs)

	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	hc, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
	require.NoError(t, err, "gRPC health on the --listen address")
	assert.Equal(t, healthpb.HealthCheckResponse_SERVING, hc.GetStatus())
	require.NoError(t, conn.Close())

	resp, err := http.Get("http://" + adminAddr + "/metrics")
	require.NoError(t, err)
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, name := range []string{"codeinterp_streams_total", "codeinterp_loop_code_run_seconds", "codeinterp_sandbox_"} {
		assert.True(t, strings.Contains(string(metrics), name), "/metrics serves %s", name)
	}

	resp, err = http.Get("http://" + adminAddr + "/debug/pprof/heap")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusNotFound, resp.StatusCode, "no profiles without admin_pprof")

	// The Containers API on --api-listen, in OpenAI's shapes.
	resp, err = http.Get("http://" + apiAddr + "/v1/containers")
	require.NoError(t, err, "GET /v1/containers")
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "no key: %s", body)
	assert.Contains(t, string(body), `"missing_api_key"`, "OpenAI's error shape")
	req, err := http.NewRequest(http.MethodGet, "http://"+apiAddr+"/v1/containers", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer sk-test")
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err, "GET /v1/containers with a key")
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode, "list: %s", body)
	assert.JSONEq(t, `{"object":"list","data":[],"first_id":null,"last_id":null,"has_more":false}`, string(body), "an empty list")
	req.Header.Set("Authorization", "Bearer sk-unknown")
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err, "GET /v1/containers with a key the upstream refuses")
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "a refused key: %s", body)
	assert.Contains(t, string(body), `"invalid_api_key"`, "OpenAI's error shape")
	http.DefaultClient.CloseIdleConnections()

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err, "run returns cleanly on shutdown")
	case <-time.After(30 * time.Second):
		t.Fatal("run did not return after cancel")
	}
	assert.NotContains(t, logs.String(), `"level":"debug"`, "--log-level overrides the file's log_level")
	assert.Contains(t, logs.String(), `"msg":"serving"`)
}

func TestRunRejectsBadConfig(t *testing.T) {
	tests := []struct {
		name string
		file string
		args []string
		want string
	}{
		{"unknown field", "lissen: x\n", nil, "lissen: unknown field"},
		{"bad value", "sandbox:\n  default_memory_limit: 3g\n", nil, "sandbox.default_memory_limit"},
		{"bad flag value", "", []string{"--log-level", "loud"}, "log_level"},
		{"stray argument", "", []string{"serve"}, "unexpected arguments"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "c.yaml")
			require.NoError(t, os.WriteFile(path, []byte(tt.file), 0o600))
			var out harness.SyncBuffer
			err := run(context.Background(), append([]string{"--config", path}, tt.args...), &out)
			require.Error(t, err, "run with %s", tt.name)
			assert.True(t, strings.Contains(err.Error(), tt.want), "run with %s: error %q names %q", tt.name, err, tt.want)
		})
	}
}

func TestRunFailsFastOnBusyPort(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	var out harness.SyncBuffer
	err = run(context.Background(), []string{"--listen", l.Addr().String(), "--admin-listen", freeAddr(t), "--api-listen", freeAddr(t)}, &out)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "listen")

	err = run(context.Background(), []string{"--listen", freeAddr(t), "--admin-listen", freeAddr(t), "--api-listen", l.Addr().String()}, &out)
	require.Error(t, err, "a busy --api-listen")
	assert.Contains(t, err.Error(), "listen api")
}

func TestLoadConfigAPIListen(t *testing.T) {
	var out harness.SyncBuffer
	cfg, err := loadConfig(nil, &out)
	require.NoError(t, err, "defaults")
	assert.Equal(t, "127.0.0.1:8081", cfg.GetApiListen(), "the Containers API by default")
	cfg, err = loadConfig([]string{"--api-listen", ""}, &out)
	require.NoError(t, err, "--api-listen \"\"")
	assert.Empty(t, cfg.GetApiListen(), "--api-listen \"\" serves no Containers API")
	assert.NotNil(t, cfg.ApiListen, "kept as set, not defaulted")
}
