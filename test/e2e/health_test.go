package e2e

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"google.golang.org/protobuf/proto"

	configv1 "github.com/codeinterp/codeinterp/api/codeinterp/config/v1"
	"github.com/codeinterp/codeinterp/internal/app"
	"github.com/codeinterp/codeinterp/pkg/config"
	"github.com/codeinterp/codeinterp/test/e2e/fakemodel"
	"github.com/codeinterp/codeinterp/test/e2e/harness"
)

// healthBound bounds how long Envoy's health checks (envoy/envoy.yaml: every 2s, two failures
// eject, one success restores) take to see a replica change; only a broken configuration
// makes them take that long.
const healthBound = 30 * time.Second

// TestHealthCheckedReplicas runs two codeinterp replicas (one followup secret) behind the
// real Envoy with envoy/envoy.yaml's ext_proc cluster. A replica that starts draining reports
// NOT_SERVING; Envoy's gRPC health checks mark it unhealthy and send every new request to the
// other one, while the draining replica's open loop still finishes (its held follow-up call
// included), after which it stops gracefully.
func TestHealthCheckedReplicas(t *testing.T) {
	harness.RequireEnvoy(t)
	m := newModel(t, fakemodel.New(t))
	secret := []byte("e2e-shared-followup-secret-0123456789")
	lisA, lisB := listenLoopback(t), listenLoopback(t)
	envoy := harness.StartReal(t, harness.Options{
		ExtProcAddr:     lisA.Addr().String(),
		ExtProcReplicas: []string{lisB.Addr().String()},
		Upstream:        m.URL(),
	})
	a := serveReplica(t, lisA, envoy.URL(), secret)
	// B listens but serves nothing yet: its health checks time out.
	waitHealth(t, envoy.Admin(), map[string]bool{lisA.Addr().String(): true, lisB.Addr().String(): false}, "A up, B not yet")

	client := frontClient(t, envoy, "sk-replicas")
	arrived, release := make(chan struct{}), make(chan struct{})
	releaseHeld := sync.OnceFunc(func() { close(release) })
	m.script(responsesPath,
		responsesReply(usage(1, 1), runCode("call_held", "print(6 * 7)")),
		heldUntil(arrived, release, responsesReply(usage(1, 1), fakemodel.Message("It is 42."))))
	ctx, cancel := context.WithTimeout(t.Context(), 2*healthBound+clientBound)
	defer cancel()
	resp := make(chan *responsesResult, 1)
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		r, err := client.Responses.New(ctx, ask("compute, slowly"))
		resp <- &responsesResult{r, err}
	})
	defer releaseHeld() // on failure: let the held call go before waiting for the request
	select {
	case <-arrived:
	case r := <-resp:
		require.Fail(t, "the request ended before its follow-up call", "error: %v", r.err)
	case <-time.After(clientBound):
		require.Fail(t, "the loop's follow-up call never came")
	}

	b := serveReplica(t, lisB, envoy.URL(), secret)
	upAt := time.Now()
	waitHealth(t, envoy.Admin(), map[string]bool{lisA.Addr().String(): true, lisB.Addr().String(): true}, "both up")
	t.Logf("Envoy saw B healthy %v after it started serving", time.Since(upAt).Round(time.Millisecond))

	// A drains: NOT_SERVING at once, its open loop held at the model.
	var drained error
	var drainWG sync.WaitGroup
	drainCtx, cancelDrain := context.WithTimeout(context.Background(), 2*healthBound+clientBound)
	defer cancelDrain()
	drainAt := time.Now()
	drainWG.Go(func() { drained = a.svc.Shutdown(drainCtx) })
	defer drainWG.Wait()
	defer releaseHeld() // on failure: A's drain waits for the held call
	waitHealth(t, envoy.Admin(), map[string]bool{lisA.Addr().String(): false, lisB.Addr().String(): true}, "A draining")
	t.Logf("Envoy saw the draining A unhealthy %v after its Shutdown began", time.Since(drainAt).Round(time.Millisecond))

	// Every new request now goes to B. Envoy 1.40 flags the host /failed_active_hc in its admin
	// view at the first failed check, but its load balancer keeps sending to it until
	// unhealthy_threshold checks have failed (a few seconds): a batch must land on B whole
	// within healthBound.
	const n = 4
	deadline := time.Now().Add(healthBound)
	for batch := 0; ; batch++ {
		streamsA, streamsB := a.streams(t), b.streams(t)
		for i := range n {
			m.script(chatPath, chatReply(usage(1, 1), "Answered."))
			chat, err := client.Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{
				Model:    testModel,
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("who answers? " + strconv.Itoa(i))},
			})
			require.NoError(t, err, "batch %d request %d while A drains", batch, i)
			require.Len(t, chat.Choices, 1, "batch %d request %d while A drains: choices", batch, i)
			assert.Equal(t, "Answered.", chat.Choices[0].Message.Content, "batch %d request %d while A drains", batch, i)
		}
		// A stream is counted when it ends, which may come just after the client has its answer.
		for a.streams(t)+b.streams(t) < streamsA+streamsB+n {
			require.True(t, time.Now().Before(deadline), "batch %d: every stream of the batch ends", batch)
			time.Sleep(10 * time.Millisecond)
		}
		if a.streams(t) == streamsA {
			assert.Equal(t, streamsB+n, b.streams(t), "batch %d: every request's stream went to B", batch)
			t.Logf("batch %d of %d requests all went to B, %v after A's Shutdown began", batch, n, time.Since(drainAt).Round(time.Millisecond))
			break
		}
		require.True(t, time.Now().Before(deadline), "a batch of %d new requests goes wholly to B, not to the draining A (last batch: A got %v)",
			n, a.streams(t)-streamsA)
	}

	// A's open loop finishes, and then A stops.
	releaseHeld()
	var r *responsesResult
	select {
	case r = <-resp:
	case <-time.After(clientBound):
		require.Fail(t, "the draining replica's open request never ended")
	}
	require.NoError(t, r.err, "the open request on the draining replica")
	assert.Equal(t, "42\n", logsOf(codeCall(t, *r.resp, 0)), "the open request's code ran")
	assert.Equal(t, "It is 42.", r.resp.OutputText(), "the open request's answer")
	drainWG.Wait()
	assert.NoError(t, drained, "A stopped gracefully once its loop was done")
	assert.Zero(t, m.pending(), "every scripted answer was used")
}

// responsesResult is a Responses call's outcome.
type responsesResult struct {
	resp *responses.Response
	err  error
}

// heldUntil is a reply that signals arrived, then waits until release is closed (or the
// request is cancelled, or holdGuard passes) before answering with next.
func heldUntil(arrived chan<- struct{}, release <-chan struct{}, next reply) reply {
	return func(r *http.Request, body []byte) (int, any) {
		close(arrived)
		t := time.NewTimer(holdGuard)
		defer t.Stop()
		select {
		case <-release:
		case <-r.Context().Done():
		case <-t.C:
		}
		return next(r, body)
	}
}

// replica is one in-process codeinterp Service behind the real Envoy.
type replica struct {
	svc *app.App
}

// streams counts the ext_proc streams the replica has finished.
func (r *replica) streams(t *testing.T) float64 {
	t.Helper()
	return gathered(t, r.svc.Collectors(), "codeinterp_streams_total", "", "")
}

// listenLoopback listens on a free loopback port; t.Cleanup closes it.
func listenLoopback(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err, "listen on loopback")
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// serveReplica serves a Service as cmd/extproc wires it (no warm pool) on lis, with upstream
// as the loop's follow-up upstream and secret as the followup secret. t.Cleanup shuts it down
// (a no-op if the test already did) and waits for Serve.
func serveReplica(t *testing.T, lis net.Listener, upstream string, secret []byte) *replica {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Sandbox = &configv1.Sandbox{WarmPoolSize: proto.Uint32(0)}
	cfg.Listen = lis.Addr().String()
	cfg.Upstream = upstream
	config.ApplyDefaults(cfg)
	require.NoError(t, config.Validate(cfg), "replica %s: configuration", cfg.Listen)
	svc, err := app.New(app.Options{
		Config: cfg, Secret: secret, Log: zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)),
	})
	require.NoError(t, err, "replica %s: new service", cfg.Listen)
	served := make(chan error, 1)
	go func() { served <- svc.Serve(lis) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), stopGrace)
		defer cancel()
		assert.NoError(t, svc.Shutdown(ctx), "replica %s: shutdown", cfg.Listen)
		assert.NoError(t, <-served, "replica %s: serve", cfg.Listen)
	})
	return &replica{svc: svc}
}

// waitHealth waits until Envoy's admin /clusters reports each ext_proc host as want says
// (true: healthy).
func waitHealth(t *testing.T, admin string, want map[string]bool, what string) {
	t.Helper()
	var got map[string]bool
	assert.Eventually(t, func() bool {
		got = extProcHealth(t, admin)
		for addr, healthy := range want {
			if h, ok := got[addr]; !ok || h != healthy {
				return false
			}
		}
		return true
	}, healthBound, 50*time.Millisecond, "%s: Envoy's view of the ext_proc hosts", what)
	if t.Failed() {
		require.Equal(t, want, got, "%s: ext_proc host health (true: healthy)", what)
	}
}

// extProcHealth reads the ext_proc cluster's hosts from Envoy's admin /clusters: address →
// healthy (no failed active health check).
func extProcHealth(t *testing.T, admin string) map[string]bool {
	t.Helper()
	transport := &http.Transport{}
	defer transport.CloseIdleConnections()
	resp, err := (&http.Client{Transport: transport, Timeout: 5 * time.Second}).Get(admin + "/clusters?format=json")
	require.NoError(t, err, "admin /clusters")
	defer resp.Body.Close()
	var out struct {
		ClusterStatuses []struct {
			Name         string `json:"name"`
			HostStatuses []struct {
				Address struct {
					SocketAddress struct {
						Address   string `json:"address"`
						PortValue int    `json:"port_value"`
					} `json:"socket_address"`
				} `json:"address"`
				HealthStatus struct {
					FailedActiveHealthCheck bool   `json:"failed_active_health_check"`
					EdsHealthStatus         string `json:"eds_health_status"`
				} `json:"health_status"`
			} `json:"host_statuses"`
		} `json:"cluster_statuses"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out), "decode admin /clusters")
	got := map[string]bool{}
	for _, c := range out.ClusterStatuses {
		if c.Name != extProcClusterName {
			continue
		}
		for _, h := range c.HostStatuses {
			sa := h.Address.SocketAddress
			got[net.JoinHostPort(sa.Address, strconv.Itoa(sa.PortValue))] = !h.HealthStatus.FailedActiveHealthCheck
		}
	}
	return got
}

// extProcClusterName is envoy/envoy.yaml's ext_proc cluster.
const extProcClusterName = "codeinterp_ext_proc"
