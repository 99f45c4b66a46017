package e2e

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/codeinterp/codeinterp/test/e2e/fakemodel"
	"github.com/codeinterp/codeinterp/test/e2e/harness"
)

// Failures a real deployment meets, through the harness and the real Envoy 1.40: the server
// killed in the middle of a loop, the server draining on SIGTERM while Envoy keeps sending,
// and the client going away while its code runs. The first two run cmd/extproc as a process of
// its own, built by the test, as production runs it. (Health-checked replicas: health_test.go.)

// clientBound bounds a client's request in these scenarios: well under the code's own sleep,
// so a hung request fails the test instead of ending when the code does.
const clientBound = 45 * time.Second

// serverStartBound bounds a server process's start until its gRPC health says SERVING.
const serverStartBound = 30 * time.Second

// sleepyCode marks the interpreter (see markCode) and sleeps for seconds, then prints "slept".
func sleepyCode(marker string, seconds int) string {
	return markCode(marker) + "\nimport time\ntime.sleep(" + strconv.Itoa(seconds) + ")\nprint('slept')"
}

// TestServerKilledMidLoop: codeinterp dies (SIGKILL) while a request's code runs. The client
// gets a 5xx from the front at once (failure_mode_allow is false: never a hang, never the
// model's raw answer), the sandbox dies with the server, and a server restarted on the same
// address serves the next request.
func TestServerKilledMidLoop(t *testing.T) {
	bin := buildServer(t)
	m := newModel(t, fakemodel.New(t))
	harness.EachFront(t, func(t *testing.T, start func(harness.Options) harness.Front) {
		m.clear()
		addr := freeAddr(t)
		front := start(harness.Options{ExtProcAddr: addr, Upstream: m.URL()})
		srv := newServerProc(t, bin, serverSettings{addr: addr, upstream: front.URL(), grace: 10 * time.Second})
		srv.start(t)
		client := frontClient(t, front, "sk-killed")

		marker := "e2e-kill-" + front.Name()[:1]
		m.script(responsesPath, responsesReply(usage(1, 1), runCode("call_kill", sleepyCode(marker, 120))))
		mark := len(m.Requests())
		done := request(t, t.Context(), client, ask("sleep for two minutes"))
		waitMarked(t, marker, done, "killed")

		killed := time.Now()
		srv.kill(t)
		var err error
		select {
		case err = <-done:
		case <-time.After(clientBound):
			require.Fail(t, "killed: the client still waits after the server died")
		}
		e := apiError(t, err, "killed")
		assert.GreaterOrEqual(t, e.StatusCode, 500, "killed: the front answers with a 5xx (%s)", errorView(e))
		t.Logf("%s: server SIGKILLed mid-run: after %v:\n%s", front.Name(), time.Since(killed).Round(time.Millisecond), e.DumpResponse(true))
		assert.Len(t, m.since(mark), 1, "killed: no follow-up model call after the kill")
		assert.Eventually(t, func() bool { return len(processesNamed(marker)) == 0 }, 30*time.Second, 20*time.Millisecond,
			"killed: the sandbox's processes die with the server")

		srv.start(t)
		m.script(responsesPath,
			responsesReply(usage(1, 1), runCode("call_after", "print(6 * 7)")),
			responsesReply(usage(1, 1), fakemodel.Message("It is 42.")))
		ctx, cancel := context.WithTimeout(t.Context(), clientBound)
		defer cancel()
		resp, err := client.Responses.New(ctx, ask("compute after the restart"))
		require.NoError(t, err, "restarted: request")
		assert.Equal(t, "42\n", logsOf(codeCall(t, *resp, 0)), "restarted: the code ran")
		assert.Equal(t, "It is 42.", resp.OutputText(), "restarted: the model's answer")
		assert.Zero(t, m.pending(), "restarted: every scripted answer was used")
	})
}

// TestServerDrainsOnSIGTERM: on SIGTERM the server reports NOT_SERVING at once, lets the open
// requests finish (their loops' follow-up calls come back through the front as new streams,
// which a draining server still serves) and exits when they are done; when they outlast
// shutdown_grace, it ends them (the client gets a 5xx, the sandbox is deleted) and exits.
func TestServerDrainsOnSIGTERM(t *testing.T) {
	bin := buildServer(t)
	m := newModel(t, fakemodel.New(t))
	harness.EachFront(t, func(t *testing.T, start func(harness.Options) harness.Front) {
		t.Run("open requests finish", func(t *testing.T) {
			m.clear()
			const grace = 30 * time.Second
			addr := freeAddr(t)
			front := start(harness.Options{ExtProcAddr: addr, Upstream: m.URL()})
			srv := newServerProc(t, bin, serverSettings{addr: addr, upstream: front.URL(), grace: grace})
			srv.start(t)
			client := frontClient(t, front, "sk-drain")
			health := healthClient(t, addr)

			marker := "e2e-drain-" + front.Name()[:1]
			m.script(responsesPath,
				responsesReply(usage(1, 1), runCode("call_drain", sleepyCode(marker, 8))),
				responsesReply(usage(1, 1), fakemodel.Message("Done after the drain.")))
			done := request(t, t.Context(), client, ask("sleep, then answer"))
			waitMarked(t, marker, done, "drain")

			srv.signal(t, syscall.SIGTERM)
			termed := time.Now()
			assert.Eventually(t, func() bool { return healthStatus(t, health) == healthpb.HealthCheckResponse_NOT_SERVING },
				10*time.Second, 5*time.Millisecond, "drain: gRPC health reports NOT_SERVING after SIGTERM")
			select {
			case err := <-done:
				require.Fail(t, "drain: the open request ended before the check", "error: %v", err)
			default:
			}

			// The front keeps sending: a request that arrives during the drain is served.
			m.script(chatPath, chatReply(usage(1, 1), "Still here."))
			ctx, cancel := context.WithTimeout(t.Context(), clientBound)
			defer cancel()
			chat, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
				Model:    testModel,
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("are you there?")},
			})
			require.NoError(t, err, "drain: a request arriving during the drain")
			require.Len(t, chat.Choices, 1, "drain: choices of the request arriving during the drain")
			assert.Equal(t, "Still here.", chat.Choices[0].Message.Content, "drain: the answer to the request arriving during the drain")
			if real, ok := front.(*harness.RealEnvoy); ok {
				// Envoy's health checks flag the lone replica unhealthy; with no healthy host
				// left, its load balancer (panic mode, the default healthy_panic_threshold)
				// still sends to it, and the draining server still serves.
				waitHealth(t, real.Admin(), map[string]bool{addr: false}, "drain")
				panics := envoyStat(t, real.Admin(), "cluster.codeinterp_ext_proc.lb_healthy_panic")
				m.script(chatPath, chatReply(usage(1, 1), "Still here, unhealthy."))
				chat, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
					Model:    testModel,
					Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("and now?")},
				})
				require.NoError(t, err, "drain: a request to the lone replica flagged unhealthy")
				require.Len(t, chat.Choices, 1, "drain: choices of the request to the replica flagged unhealthy")
				assert.Equal(t, "Still here, unhealthy.", chat.Choices[0].Message.Content, "drain: the lone replica flagged unhealthy still serves")
				assert.Greater(t, envoyStat(t, real.Admin(), "cluster.codeinterp_ext_proc.lb_healthy_panic"), panics,
					"drain: Envoy chose the replica in panic mode")
			}

			select {
			case err = <-done:
			case <-time.After(clientBound):
				require.Fail(t, "drain: the open request never ended")
			}
			require.NoError(t, err, "drain: the open request finishes")
			exit := srv.wait(t, grace+30*time.Second)
			t.Logf("%s: SIGTERM during a run: the open request finished, the server exited %v after SIGTERM", front.Name(), time.Since(termed).Round(time.Millisecond))
			assert.Equal(t, 0, exit, "drain: exit status")
			assert.NotContains(t, srv.output(), "grace period over", "drain: the server stopped gracefully, within shutdown_grace")
		})

		t.Run("the grace runs out", func(t *testing.T) {
			m.clear()
			const grace = 2 * time.Second
			addr := freeAddr(t)
			front := start(harness.Options{ExtProcAddr: addr, Upstream: m.URL()})
			srv := newServerProc(t, bin, serverSettings{addr: addr, upstream: front.URL(), grace: grace})
			srv.start(t)
			client := frontClient(t, front, "sk-grace")

			marker := "e2e-grace-" + front.Name()[:1]
			m.script(responsesPath, responsesReply(usage(1, 1), runCode("call_grace", sleepyCode(marker, 120))))
			mark := len(m.Requests())
			done := request(t, t.Context(), client, ask("sleep for two minutes"))
			waitMarked(t, marker, done, "grace")

			srv.signal(t, syscall.SIGTERM)
			termed := time.Now()
			var err error
			select {
			case err = <-done:
			case <-time.After(clientBound):
				require.Fail(t, "grace: the client still waits after the grace ran out")
			}
			answered := time.Since(termed)
			e := apiError(t, err, "grace")
			assert.GreaterOrEqual(t, e.StatusCode, 500, "grace: the front answers with a 5xx (%s)", errorView(e))
			exit := srv.wait(t, clientBound)
			t.Logf("%s: SIGTERM, grace %v over: answered %v after SIGTERM, server exited after %v:\n%s", front.Name(), grace,
				answered.Round(time.Millisecond), time.Since(termed).Round(time.Millisecond), e.DumpResponse(true))
			assert.Equal(t, 0, exit, "grace: exit status")
			assert.Contains(t, srv.output(), "grace period over", "grace: the server says it ended open streams")
			assert.Len(t, m.since(mark), 1, "grace: no follow-up model call after the loop was ended")
			assert.Empty(t, processesNamed(marker), "grace: the sandbox is deleted before the server exits")
		})
	})
}

// TestClientGoneMidRun: the client disconnects while its code runs. The loop and the run are
// cancelled (the code's side effect after the disconnect never happens, and no follow-up model
// call is made), and an ephemeral sandbox is deleted.
func TestClientGoneMidRun(t *testing.T) {
	env := NewEnv(t, EnvOptions{})
	env.Fronts(t, func(t *testing.T, s *Stack) {
		m := newModel(t, s.Model)
		client := s.Client("sk-gone")

		t.Run("a session's run is interrupted", func(t *testing.T) {
			m.clear()
			marker := "e2e-gone-s-" + s.Front.Name()[:1]
			session := "gone-" + s.Front.Name()
			code := markCode(marker) + "\nx = 'before'\nimport time\ntime.sleep(3)\n" +
				"open('/mnt/data/late.txt', 'w').write('late')\nx = 'after'"
			m.script(responsesPath, responsesReply(usage(1, 1), runCode("call_late", code)))
			mark := len(m.Requests())
			p := ask("sleep, then write a file")
			withSession(&p, session)
			ctx, cancel := context.WithCancel(t.Context())
			done := request(t, ctx, client, p)
			waitMarked(t, marker, done, "session")
			cancel()
			assert.ErrorIs(t, <-done, context.Canceled, "session: the client's request was cancelled")

			// Runs in one container are serial: this one starts after the first has ended, so it
			// sees whatever the first did, had it not been interrupted.
			m.script(responsesPath,
				responsesReply(usage(1, 1), runCode("call_check", "import os\nprint(x, os.path.exists('/mnt/data/late.txt'))")),
				responsesReply(usage(1, 1), fakemodel.Message("Checked.")))
			p = ask("what did the last run do?")
			withSession(&p, session)
			resp, err := client.Responses.New(t.Context(), p)
			require.NoError(t, err, "session: the next request")
			assert.Equal(t, "before False\n", logsOf(codeCall(t, *resp, 0)),
				"session: same interpreter (x set before the sleep), and the write after the disconnect never happened")
			for i, r := range m.since(mark) {
				assert.NotContains(t, string(r.Body), "call_late", "session: model request %d carries no output of the cancelled run", i)
			}
		})

		t.Run("an ephemeral run is interrupted and its sandbox deleted", func(t *testing.T) {
			m.clear()
			marker := "e2e-gone-e-" + s.Front.Name()[:1]
			m.script(responsesPath, responsesReply(usage(1, 1), runCode("call_eph", sleepyCode(marker, 3))))
			mark := len(m.Requests())
			ctx, cancel := context.WithCancel(t.Context())
			// An anonymous caller's container is ephemeral (one with a key outlives the request).
			done := request(t, ctx, anonymous(s), ask("sleep"))
			waitMarked(t, marker, done, "ephemeral")
			assert.Equal(t, 1.0, ephemeralContainers(t, s), "ephemeral: the manager holds the run's container")
			cancel()
			assert.ErrorIs(t, <-done, context.Canceled, "ephemeral: the client's request was cancelled")
			gone(t, marker, "ephemeral after the client went away mid-run")
			assert.Eventually(t, func() bool { return ephemeralContainers(t, s) == 0 }, 30*time.Second, 20*time.Millisecond,
				"ephemeral: the manager reports no live container")
			assert.Len(t, m.since(mark), 1, "ephemeral: no follow-up model call")
		})
	})
}

// ephemeralContainers reads the manager's gauge of ephemeral containers in use.
func ephemeralContainers(t *testing.T, s *Stack) float64 {
	t.Helper()
	return gathered(t, s.Manager.Collectors(), "codeinterp_sandbox_containers", "kind", "ephemeral")
}

// gathered sums the values of the metric name (gauge or counter) among cs whose label is
// value (every series when label is "").
func gathered(t *testing.T, cs []prometheus.Collector, name, label, value string) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(multiCollector(cs)), "register collectors for %s", name)
	mfs, err := reg.Gather()
	require.NoError(t, err, "gather %s", name)
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, mt := range mf.GetMetric() {
			match := label == ""
			for _, lp := range mt.GetLabel() {
				if lp.GetName() == label && lp.GetValue() == value {
					match = true
				}
			}
			if match {
				sum += mt.GetGauge().GetValue() + mt.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// multiCollector registers several collectors as one.
type multiCollector []prometheus.Collector

func (mc multiCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range mc {
		c.Describe(ch)
	}
}

func (mc multiCollector) Collect(ch chan<- prometheus.Metric) {
	for _, c := range mc {
		c.Collect(ch)
	}
}

// request starts a Responses request on its own goroutine, bounded by ctx and clientBound,
// and returns where its error arrives; t.Cleanup waits for it.
func request(t *testing.T, ctx context.Context, client openai.Client, p responses.ResponseNewParams) <-chan error {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, clientBound)
	done := make(chan error, 1)
	var wg sync.WaitGroup
	wg.Go(func() {
		defer cancel()
		_, err := client.Responses.New(ctx, p)
		done <- err
	})
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	return done
}

// waitMarked waits until marker's process runs (the code started), failing if the request
// ends first.
func waitMarked(t *testing.T, marker string, done <-chan error, what string) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	guard := time.NewTimer(clientBound)
	defer guard.Stop()
	for !marked(marker) {
		select {
		case err := <-done:
			require.Fail(t, what+": the request ended before its code ran", "error: %v", err)
		case <-guard.C:
			require.Fail(t, what+": the code never started")
		case <-tick.C:
		}
	}
}

// processesNamed returns every process on the host whose name is comm (not only this test's
// descendants: a killed server's sandbox would be re-parented away from it).
func processesNamed(comm string) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return []int{-1}
	}
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if p, ok := readProc(pid); ok && p.comm == comm {
			out = append(out, pid)
		}
	}
	return out
}

// frontClient is an openai-go client of front's /v1/ API with no retries; its connections
// are closed by t.Cleanup.
func frontClient(t *testing.T, front harness.Front, apiKey string) openai.Client {
	t.Helper()
	transport := &http.Transport{}
	t.Cleanup(transport.CloseIdleConnections)
	return openai.NewClient(
		option.WithBaseURL(front.URL()+"/v1/"),
		option.WithAPIKey(apiKey),
		option.WithMaxRetries(0),
		option.WithHTTPClient(&http.Client{Transport: transport}),
	)
}

// healthClient is a gRPC health client of addr; t.Cleanup closes its connection.
func healthClient(t *testing.T, addr string) healthpb.HealthClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err, "health client of %s", addr)
	t.Cleanup(func() { _ = conn.Close() })
	return healthpb.NewHealthClient(conn)
}

// healthStatus asks the server's gRPC health for the server-wide status.
func healthStatus(t *testing.T, c healthpb.HealthClient) healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	resp, err := c.Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return healthpb.HealthCheckResponse_UNKNOWN
	}
	return resp.GetStatus()
}

// freeAddr returns a loopback address no one listens on, for a server process started on it
// later. The port is below the kernel's ephemeral range: a port from that range (what port 0
// gives) may be taken meanwhile as the source port of an outgoing connection — Envoy's health
// checks of the very address, which then connect to themselves — and the server could not bind.
func freeAddr(t testing.TB) string {
	t.Helper()
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil && n > 2048 {
				low = n
			}
		}
	}
	for range 100 {
		port := 1024 + rand.IntN(low-1024)
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue // taken
		}
		addr := l.Addr().String()
		require.NoError(t, l.Close(), "free port %s", addr)
		return addr
	}
	t.Fatalf("no free port below %d", low)
	return ""
}

// buildServer builds cmd/extproc, once per test binary, into a temporary directory and returns
// the binary.
func buildServer(t *testing.T) string {
	t.Helper()
	serverBuild.once.Do(func() {
		dir, err := os.MkdirTemp("", "codeinterp-e2e-extproc-")
		if err != nil {
			serverBuild.err = err
			return
		}
		serverBuild.dir = dir
		serverBuild.bin = filepath.Join(dir, "extproc")
		serverBuild.out, serverBuild.err = exec.Command("go", "build", "-o", serverBuild.bin, "github.com/codeinterp/codeinterp/cmd/extproc").CombinedOutput()
	})
	require.NoError(t, serverBuild.err, "build cmd/extproc: %s", serverBuild.out)
	return serverBuild.bin
}

// serverBuild is the package's one build of cmd/extproc (buildServer), in a directory TestMain
// removes.
var serverBuild struct {
	once     sync.Once
	dir, bin string
	out      []byte
	err      error
}

// serverSettings are what a server process is configured with.
type serverSettings struct {
	addr     string        // gRPC listen address
	upstream string        // the front, for the loop's follow-up calls
	grace    time.Duration // shutdown_grace
}

// serverProc is cmd/extproc run as a process, started and stopped by the test; it may be
// started again after it ended. Only the test goroutine uses it.
type serverProc struct {
	bin, config, addr string

	cmd    *exec.Cmd
	exited chan int // the exit status (-1 for a signal), once
	logs   *harness.SyncBuffer
}

// newServerProc writes the configuration: default profile with a two-minute run timeout, no
// warm pool, the given grace. t.Cleanup kills a server still running.
func newServerProc(t *testing.T, bin string, s serverSettings) *serverProc {
	t.Helper()
	dir := t.TempDir()
	cfg := fmt.Sprintf(`listen: %s
admin_listen: %s
api_listen: %s
upstream: %s
shutdown_grace: %s
log_level: info
default_profile:
  run_timeout: 150s
sandbox:
  warm_pool_size: 0
`, s.addr, freeAddr(t), freeAddr(t), s.upstream, s.grace)
	path := filepath.Join(dir, "codeinterp.yaml")
	require.NoError(t, os.WriteFile(path, []byte(cfg), 0o600), "write the server config")
	p := &serverProc{bin: bin, config: path, addr: s.addr}
	t.Cleanup(func() {
		if p.cmd != nil {
			_ = p.cmd.Process.Kill()
			<-p.exited
			p.cmd = nil
		}
		if t.Failed() && p.logs != nil {
			t.Logf("server output:\n%s", p.logs.String())
		}
	})
	return p
}

// start runs the server and waits until its gRPC health says SERVING.
func (p *serverProc) start(t *testing.T) {
	t.Helper()
	require.Nil(t, p.cmd, "start: the server is not running")
	p.logs = &harness.SyncBuffer{}
	cmd := exec.Command(p.bin, "--config", p.config)
	cmd.Stdout, cmd.Stderr = p.logs, p.logs
	require.NoError(t, cmd.Start(), "start %s", p.bin)
	p.cmd, p.exited = cmd, make(chan int, 1)
	go func() {
		err := cmd.Wait()
		code := cmd.ProcessState.ExitCode()
		if err != nil && code == 0 {
			code = -1
		}
		p.exited <- code
	}()
	health := healthClient(t, p.addr)
	deadline := time.Now().Add(serverStartBound)
	for healthStatus(t, health) != healthpb.HealthCheckResponse_SERVING {
		select {
		case code := <-p.exited:
			p.exited <- code
			require.Fail(t, "start: the server exited", "status %d:\n%s", code, p.logs.String())
		case <-time.After(20 * time.Millisecond):
		}
		require.True(t, time.Now().Before(deadline), "start: the server is SERVING within %v", serverStartBound)
	}
}

// signal sends sig to the server.
func (p *serverProc) signal(t *testing.T, sig os.Signal) {
	t.Helper()
	require.NotNil(t, p.cmd, "signal: the server runs")
	require.NoError(t, p.cmd.Process.Signal(sig), "signal the server")
}

// kill ends the server with SIGKILL and waits for it.
func (p *serverProc) kill(t *testing.T) {
	t.Helper()
	p.signal(t, syscall.SIGKILL)
	p.wait(t, serverStartBound)
}

// wait waits up to bound for the server to exit and returns its exit status.
func (p *serverProc) wait(t *testing.T, bound time.Duration) int {
	t.Helper()
	require.NotNil(t, p.cmd, "wait: the server runs")
	select {
	case code := <-p.exited:
		p.cmd = nil
		return code
	case <-time.After(bound):
		require.Fail(t, "the server did not exit", "within %v", bound)
		return 0
	}
}

// output is what the server has written so far.
func (p *serverProc) output() string { return p.logs.String() }

// envoyStat reads one counter or gauge from Envoy's admin /stats.
func envoyStat(t *testing.T, admin, name string) int {
	t.Helper()
	transport := &http.Transport{}
	defer transport.CloseIdleConnections()
	resp, err := (&http.Client{Transport: transport, Timeout: 5 * time.Second}).Get(admin + "/stats?filter=^" + name + "$")
	require.NoError(t, err, "admin /stats %s", name)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err, "read admin /stats %s", name)
	v, ok := strings.CutPrefix(strings.TrimSpace(string(body)), name+": ")
	require.True(t, ok, "admin /stats has %s: %q", name, body)
	n, err := strconv.Atoi(v)
	require.NoError(t, err, "admin /stats %s value %q", name, v)
	return n
}
