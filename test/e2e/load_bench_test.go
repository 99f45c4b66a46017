package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"

	configv1 "github.com/codeinterp/codeinterp/api/codeinterp/config/v1"
	"github.com/codeinterp/codeinterp/pkg/sandbox/local"
	"github.com/codeinterp/codeinterp/test/e2e/fakemodel"
	"github.com/codeinterp/codeinterp/test/e2e/harness"
)

// BenchmarkLoad (run by `make bench`): TestLoad's load timed, in each start mode of the local
// backend in the same run (start=fork: containers forked from the template; start=exec: each
// a new bubblewrap and Python importing the libraries itself, the implementation forking
// replaced), through each front (the harness, and a real Envoy: skipped without one unless
// CODEINTERP_REQUIRE_ENVOY=1). The server runs in a process of its own, test/e2e/cmd/stack,
// with TestLoad's container caps (loadLimits) and the start mode, a fresh one per front, its
// follow-up calls through the front to this process's fake model, which answers as TestLoad's
// (loadModel); the stack's own fake model stays idle. The harness runs in this process (the
// stack serves on listeners opened here, -front); the real Envoy is the stack's, a process of
// its own. Each iteration runs loadBenchConversations conversations at once
// (CODEINTERP_LOAD_CONVERSATIONS overrides it; the goal for 200 on 2 cores: no error,
// wall-s ≤ 10, p50-s ≤ 5), each with an API key of its own and two numpy rounds; any failed
// conversation fails the benchmark. Between iterations, outside the timer, every
// conversation's container is deleted through the Containers API and the sandboxes are waited
// for to be gone, so that each iteration starts its containers afresh.
//
// Metrics, medians over the iterations (errors: a count over all of them):
//   - wall-s: from the first request sent to the last answer;
//   - p50-s, p99-s: the conversations' latencies;
//   - errors: the failed conversations;
//   - server-peak-MiB: the peak resident memory of the server's process (the server, and the
//     stack's idle fake model), from its VmHWM reset (/proc/PID/clear_refs) before the
//     iteration, while idle, and its VmRSS sampled every 5 ms. server-idle-MiB is its resident
//     memory before the iteration;
//   - test-process-peak-MiB: the same of this process: the clients, the fake model and, on
//     the harness front, the harness;
//   - sandboxes-peak-MiB: the peak of the summed PSS (/proc/PID/smaps_rollup) of the sandbox
//     processes (those descending from the server's but Envoy: bubblewrap, the containers'
//     inits and interpreters, the fork template), sampled every 500 ms (or ten times a
//     sample's length, if longer) and once more when the last answer is in (the containers
//     outlive their conversations: that sample sees them all).
//     sandboxes-idle-MiB is that sum before the iteration (the template and the warm pool).
func BenchmarkLoad(b *testing.B) {
	n := loadCount(b, loadBenchConversations)
	limits := &configv1.Config{Sandbox: &configv1.Sandbox{}}
	loadLimits(limits, n)
	for _, mode := range []string{local.StartFork, local.StartExec} {
		b.Run("start="+mode, func(b *testing.B) {
			model := fakemodel.New(b)
			model.Handle("/v1/responses", loadModel)
			args := []string{"-start", mode,
				"-max-containers", strconv.FormatUint(uint64(limits.Sandbox.MaxContainers), 10),
				"-max-containers-per-identity", strconv.FormatUint(uint64(limits.Sandbox.MaxContainersPerIdentity), 10)}
			b.Run("harness", func(b *testing.B) {
				// The harness runs here; the server serves on listeners opened here for it,
				// so that the harness knows their addresses before the server starts.
				grpcLis, grpcFile := inheritableListener(b)
				apiLis, apiFile := inheritableListener(b)
				h := harness.Start(b, harness.Options{ExtProcAddr: grpcLis, Upstream: model.URL(),
					Clusters: map[string]string{APICluster: "http://" + apiLis}})
				st := startStackProcess(b, []*os.File{grpcFile, apiFile}, append(args, "-front", h.URL())...)
				benchLoad(b, st.clients(b, h), st.pid, mode, n)
			})
			b.Run("real-envoy", func(b *testing.B) {
				st := startStackProcess(b, nil, append(args, "-upstream", model.URL())...)
				benchLoad(b, st.clients(b, stackFront{url: st.EnvoyURL}), st.pid, mode, n)
			})
		})
	}
}

// inheritableListener opens a loopback TCP listener and returns its address and a copy of its
// descriptor for a child process to inherit; this process's own descriptor is closed.
func inheritableListener(b *testing.B) (string, *os.File) {
	b.Helper()
	l, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		b.Fatalf("listen for the stack: %v", err)
	}
	defer l.Close()
	f, err := l.File()
	if err != nil {
		b.Fatalf("the listener's descriptor: %v", err)
	}
	return l.Addr().String(), f
}

// loadBenchConversations is how many conversations BenchmarkLoad runs at once, the issue's
// figure; CODEINTERP_LOAD_CONVERSATIONS overrides it.
const loadBenchConversations = 200

// benchLoad runs BenchmarkLoad's iterations of n conversations through s, served by the
// process server, whose containers start the mode way.
func benchLoad(b *testing.B, s *Stack, server int, mode string, n int) {
	// Warm the path (connections, the fork template, the warm pool) and check the start mode.
	if err := loadConversation(s, "sk-load-warm", 0); err != nil {
		b.Fatalf("warm-up conversation: %v", err)
	}
	if forked := templateRuns(server); forked != (mode == local.StartFork) {
		b.Fatalf("start=%s: a fork template runs: %v", mode, forked)
	}
	deleteContainers(b, s, []string{"sk-load-warm"})
	idleProcs := settledSandboxes(b, server)

	var (
		walls, p50s, p99s          []float64
		serverPeaks, serverIdles   []float64
		testPeaks                  []float64
		sandboxPeaks, sandboxIdles []float64
		errs                       []string
	)
	iter := 0
	for b.Loop() {
		// The timer runs over the conversations only, not the samplers' start and stop.
		b.StopTimer()
		keys := make([]string, n)
		for i := range keys {
			keys[i] = fmt.Sprintf("sk-load-%d-%d", iter, i)
		}
		iter++
		sandboxIdles = append(sandboxIdles, float64(sandboxesPSS(server))/(1<<20))
		idle := resetPeakRSS(b, server)
		resetPeakRSS(b, os.Getpid())
		m := sampleMemory(server)
		b.StartTimer()
		res := runLoad(s, n, func(i int) string { return keys[i] })
		b.StopTimer()
		peaks := m.stop()
		errs = append(errs, res.errs...)
		p50, p99 := percentiles(res.lat)
		walls = append(walls, res.wall.Seconds())
		p50s = append(p50s, p50.Seconds())
		p99s = append(p99s, p99.Seconds())
		serverPeaks = append(serverPeaks, float64(peaks.server)/(1<<20))
		serverIdles = append(serverIdles, float64(idle)/(1<<20))
		testPeaks = append(testPeaks, float64(peaks.test)/(1<<20))
		sandboxPeaks = append(sandboxPeaks, float64(peaks.sandboxes)/(1<<20))
		deleteContainers(b, s, keys)
		waitSandboxes(b, server, idleProcs)
		b.StartTimer()
	}
	metrics := []struct {
		v    float64
		unit string
	}{
		{medianOf(walls), "wall-s"},
		{medianOf(p50s), "p50-s"},
		{medianOf(p99s), "p99-s"},
		{float64(len(errs)), "errors"},
		{medianOf(serverPeaks), "server-peak-MiB"},
		{medianOf(serverIdles), "server-idle-MiB"},
		{medianOf(testPeaks), "test-process-peak-MiB"},
		{medianOf(sandboxPeaks), "sandboxes-peak-MiB"},
		{medianOf(sandboxIdles), "sandboxes-idle-MiB"},
	}
	var line []string
	for _, m := range metrics {
		b.ReportMetric(m.v, m.unit)
		line = append(line, fmt.Sprintf("%.4g %s", m.v, m.unit))
	}
	if len(errs) > 0 {
		// A failed benchmark prints no metrics: the failure says them.
		b.Fatalf("%d conversations failed over %d iterations of %d (%s); the first: %s", len(errs), iter, n,
			strings.Join(line, ", "), strings.Join(errs[:min(5, len(errs))], "; "))
	}
}

// clients returns a [Stack] whose clients talk to front, which serves st's server (its other
// fields unset: the server is st's); b.Cleanup closes its idle connections.
func (st *stackProcess) clients(b *testing.B, front harness.Front) *Stack {
	transport := &http.Transport{MaxIdleConnsPerHost: 16}
	b.Cleanup(transport.CloseIdleConnections)
	return &Stack{Front: front, transport: transport}
}

// stackFront is the Envoy a [stackProcess] runs, as a [harness.Front].
type stackFront struct{ url string }

// URL is Envoy's listener's base URL.
func (f stackFront) URL() string { return f.url }

// Name is "real-envoy".
func (stackFront) Name() string { return "real-envoy" }

// medianOf returns the median of vs (the upper one of an even count).
func medianOf(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	return s[len(s)/2]
}

// deleteContainers deletes, through the front's Containers API, every container of each API
// key.
func deleteContainers(b *testing.B, s *Stack, keys []string) {
	b.Helper()
	ctx := b.Context()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	sem := make(chan struct{}, 16) // at most 16 keys' calls at once
	for _, key := range keys {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			if err := deleteKeyContainers(ctx, s.Client(key)); err != nil {
				mu.Lock()
				if first == nil {
					first = fmt.Errorf("key %s: %w", key, err)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if first != nil {
		b.Fatalf("delete the load's containers: %v", first)
	}
}

// deleteKeyContainers deletes every container c's key lists.
func deleteKeyContainers(ctx context.Context, c openai.Client) error {
	page, err := c.Containers.List(ctx, openai.ContainerListParams{})
	if err != nil {
		return fmt.Errorf("list containers: %w", err)
	}
	for _, ct := range page.Data {
		if err := c.Containers.Delete(ctx, ct.ID); err != nil {
			return fmt.Errorf("delete container %s: %w", ct.ID, err)
		}
	}
	return nil
}

// sandboxProcs returns the sandbox processes: those descending from the process server but
// Envoy's.
func sandboxProcs(server int) []proc {
	var out []proc
	for _, p := range descendants(server) {
		if p.comm != "envoy" {
			out = append(out, p)
		}
	}
	return out
}

// templateRuns reports whether a fork template (or a container forked from one, which keeps
// its command line) is among the sandbox processes of the process server.
func templateRuns(server int) bool {
	for _, p := range sandboxProcs(server) {
		if strings.Contains(p.cmdline, "<codeinterp-template>") {
			return true
		}
	}
	return false
}

// settledSandboxes waits until the count of the process server's sandbox processes (the
// template, the warm pool) has not changed for a second, and returns it.
func settledSandboxes(b *testing.B, server int) int {
	b.Helper()
	last, since := -1, time.Now()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		n := len(sandboxProcs(server))
		if n != last {
			last, since = n, time.Now()
			continue
		}
		if time.Since(since) >= time.Second {
			return n
		}
	}
	b.Fatalf("the sandbox processes did not settle within a minute (last count %d)", last)
	return 0
}

// waitSandboxes waits until at most idle sandbox processes of the process server are left.
func waitSandboxes(b *testing.B, server, idle int) {
	b.Helper()
	var left []proc
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if left = sandboxProcs(server); len(left) <= idle {
			return
		}
	}
	b.Fatalf("%d sandbox processes left after deleting the load's containers, %d when idle", len(left), idle)
}

// resetPeakRSS resets the peak resident memory (VmHWM) of process pid to its current one and
// returns that.
func resetPeakRSS(b *testing.B, pid int) int64 {
	b.Helper()
	// "5" resets the peak resident set size (proc(5), /proc/pid/clear_refs).
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
		b.Fatalf("reset the VmHWM of process %d: %v", pid, err)
	}
	rss, ok := statusField(fmt.Sprintf("/proc/%d/status", pid), "VmRSS:")
	if !ok {
		b.Fatalf("no VmRSS in /proc/%d/status", pid)
	}
	return rss
}

// memPeaks are the peaks a [memSampler] saw, in bytes.
type memPeaks struct {
	server    int64 // the server process's resident memory
	test      int64 // this process's resident memory
	sandboxes int64 // the server's sandboxes' summed PSS
}

// memSampler samples the resident memory of the server's process and of this one, and the
// server's sandboxes' summed PSS, until stop.
type memSampler struct {
	server int
	done   chan struct{}
	wg     sync.WaitGroup
	peaks  memPeaks // written by the samplers, read after wg.Wait
}

// sampleMemory starts the samplers of the process server; [memSampler.stop] ends them and
// waits for them.
func sampleMemory(server int) *memSampler {
	m := &memSampler{server: server, done: make(chan struct{})}
	serverStatus, testStatus := fmt.Sprintf("/proc/%d/status", server), fmt.Sprintf("/proc/%d/status", os.Getpid())
	m.wg.Go(func() {
		var test int64
		m.peaks.server = sampleMax(m.done, 5*time.Millisecond, func() int64 {
			rss, _ := statusField(testStatus, "VmRSS:")
			test = max(test, rss)
			rss, _ = statusField(serverStatus, "VmRSS:")
			return rss
		})
		m.peaks.test = test
	})
	m.wg.Go(func() {
		m.peaks.sandboxes = sampleMax(m.done, 500*time.Millisecond, func() int64 { return sandboxesPSS(server) })
	})
	return m
}

// stop ends the sampling and returns the peaks: each process's resident memory (the larger of
// the samples and its VmHWM) and the sandboxes' PSS (the larger of the samples and one more).
func (m *memSampler) stop() memPeaks {
	last := sandboxesPSS(m.server)
	close(m.done)
	m.wg.Wait()
	p := m.peaks
	hwm, _ := statusField(fmt.Sprintf("/proc/%d/status", m.server), "VmHWM:")
	p.server = max(p.server, hwm)
	hwm, _ = statusField(fmt.Sprintf("/proc/%d/status", os.Getpid()), "VmHWM:")
	p.test = max(p.test, hwm)
	p.sandboxes = max(p.sandboxes, last)
	return p
}

// sampleMax calls read every interval until done is closed and returns the largest value read.
// A read that takes longer than a tenth of interval spaces the next one by ten times its
// length, so that the sampler takes at most a tenth of a core from what it measures (reading
// the PSS of hundreds of processes walks their page tables).
func sampleMax(done <-chan struct{}, interval time.Duration, read func() int64) int64 {
	var top int64
	for {
		t0 := time.Now()
		top = max(top, read())
		t := time.NewTimer(max(interval, 10*time.Since(t0)))
		select {
		case <-done:
			t.Stop()
			return top
		case <-t.C:
		}
	}
}

// sandboxesPSS is the summed PSS of the process server's sandbox processes, in bytes.
func sandboxesPSS(server int) int64 {
	var sum int64
	for _, p := range sandboxProcs(server) {
		if pss, ok := statusField(fmt.Sprintf("/proc/%d/smaps_rollup", p.pid), "Pss:"); ok {
			sum += pss
		}
	}
	return sum
}
