package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/codeinterp/codeinterp/internal/demo"
	"github.com/codeinterp/codeinterp/test/e2e/harness"
)

// The soak's knobs (`make soak` sets them; TestSoak is skipped without SoakDurationEnv).
const (
	// SoakDurationEnv is the traffic time, a Go duration ("30m", "2m").
	SoakDurationEnv = "CODEINTERP_SOAK_DURATION"
	// SoakTenantsEnv is how many tenants send at once; default 4.
	SoakTenantsEnv = "CODEINTERP_SOAK_TENANTS"
	// SoakOutEnv is the CSV of the samples; the summary goes beside it (".txt"). Default a
	// file in the test's temporary directory.
	SoakOutEnv = "CODEINTERP_SOAK_OUT"
	// SoakBinEnv is the server binary (bin/extproc); default one built from cmd/extproc.
	SoakBinEnv = "CODEINTERP_EXTPROC_BIN"
)

// soakIdle is the idle expiry of the soak's containers: short, so that after the traffic every
// container of a conversation expires and the server must come back to its idle level.
const soakIdle = 15 * time.Second

// soakSample is one sample of the server process.
type soakSample struct {
	at         time.Duration // since the traffic started (negative: the baseline)
	phase      string        // "idle", "traffic" or "after"
	rss        int64         // VmRSS
	heap       int64         // go_memstats_heap_inuse_bytes
	goroutines int64         // go_goroutines
	fds        int64         // entries of /proc/PID/fd
	containers int64         // codeinterp_sandbox_containers, all kinds
	procs      int64         // sandbox processes (the server's descendants but Envoy)
	tmpfs      int64         // bytes used on the containers' /mnt/data tmpfs, summed
}

var soakColumns = []string{"seconds", "phase", "rss_bytes", "heap_inuse_bytes", "goroutines", "fds", "containers", "sandbox_procs", "tmpfs_bytes"}

func (s soakSample) values() []int64 {
	return []int64{s.rss, s.heap, s.goroutines, s.fds, s.containers, s.procs, s.tmpfs}
}

// TestSoak (issue 23, "Done when"): SoakDurationEnv of mixed traffic from several tenants
// through the real Envoy against bin/extproc run as a process — Responses, Chat Completions and
// Messages, plain and streamed, each running code; the Containers API (create, upload,
// download, delete); clients that go away mid-stream. Every few seconds it samples the
// server's RSS, heap, goroutines, descriptors, containers, sandbox processes and tmpfs use into
// a CSV; at the end it asserts every figure returns to its idle level (containers expire after
// soakIdle) and reports each figure's least-squares slope during the traffic. Not in `make
// test`: `make soak`.
func TestSoak(t *testing.T) {
	durText := os.Getenv(SoakDurationEnv)
	if durText == "" {
		t.Skipf("the soak runs with $%s set (make soak)", SoakDurationEnv)
	}
	dur, err := time.ParseDuration(durText)
	require.NoError(t, err, "%s=%q", SoakDurationEnv, durText)
	tenants := 4
	if v := os.Getenv(SoakTenantsEnv); v != "" {
		tenants, err = strconv.Atoi(v)
		require.NoError(t, err, "%s=%q", SoakTenantsEnv, v)
	}
	out := os.Getenv(SoakOutEnv)
	if out == "" {
		out = filepath.Join(t.TempDir(), "soak.csv")
	}
	interval := max(2*time.Second, min(10*time.Second, dur/60))

	bin := os.Getenv(SoakBinEnv)
	if bin == "" {
		bin = buildServer(t)
	}
	up := httptest.NewServer(&demo.Model{})
	t.Cleanup(up.Close)
	listen, api, admin := freeAddr(t), freeAddr(t), freeAddr(t)
	front := harness.StartReal(t, harness.Options{ExtProcAddr: listen, Upstream: up.URL,
		Clusters: map[string]string{APICluster: "http://" + api}})
	srv := startSoakServer(t, bin, fmt.Sprintf(`listen: %s
admin_listen: %s
api_listen: %s
upstream: %s
log_level: warn
admin_pprof: true
sandbox:
  warm_pool_size: 2
  session_idle_ttl: %s
`, listen, admin, api, front.URL(), soakIdle))
	pid := srv.cmd.Process.Pid
	sampler := &soakSampler{pid: pid, metrics: "http://" + admin + "/metrics"}

	// The idle level: after one conversation (the template and the pool exist), once its
	// container expired.
	d := &soakDriver{front: front.URL(), client: &http.Client{Timeout: 2 * time.Minute}}
	require.NoError(t, d.responses(t.Context(), "sk-soak-warmup", false), "a first conversation")
	idle := sampler.waitIdle(t, soakIdle+time.Minute, nil)
	t.Logf("idle: %s", idle.describe())

	f, err := os.Create(out)
	require.NoError(t, err, "create %s", out)
	defer f.Close()
	csv := bufio.NewWriter(f)
	defer csv.Flush()
	fmt.Fprintln(csv, strings.Join(soakColumns, ","))
	record := func(s soakSample) {
		fmt.Fprintf(csv, "%.1f,%s", s.at.Seconds(), s.phase)
		for _, v := range s.values() {
			fmt.Fprintf(csv, ",%d", v)
		}
		fmt.Fprintln(csv)
	}
	idle.phase = "idle"
	record(idle)
	base := strings.TrimSuffix(out, filepath.Ext(out))
	idleHeap := base + "-heap-idle.pb.gz"
	sampler.heapProfile(t, idleHeap)

	ctx, cancel := context.WithTimeout(t.Context(), dur)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	var samples []soakSample
	wg.Go(func() {
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				s := sampler.sample()
				s.at, s.phase = time.Since(start), "traffic"
				samples = append(samples, s)
				record(s)
			}
		}
	})
	for i := range tenants {
		wg.Go(func() { d.tenant(ctx, fmt.Sprintf("sk-soak-%d", i), uint64(i)) })
	}
	wg.Wait()
	traffic := time.Since(start)

	// After the traffic: every container of the API was deleted by its tenant; those of the
	// conversations expire within soakIdle.
	end := sampler.waitIdle(t, soakIdle+2*time.Minute, &idle)
	end.at, end.phase = time.Since(start), "after"
	record(end)
	endHeap := base + "-heap-after.pb.gz"
	sampler.heapProfile(t, endHeap)

	var sum strings.Builder
	fmt.Fprintf(&sum, "soak: %v of traffic from %d tenants through the real Envoy against %s (pid %d), sampled every %v\n", traffic.Round(time.Second), tenants, bin, pid, interval)
	fmt.Fprintf(&sum, "operations: %s\n", d.describe())
	fmt.Fprintf(&sum, "idle:  %s\n", idle.describe())
	fmt.Fprintf(&sum, "after: %s\n", end.describe())
	peaks := make([]int64, len(soakColumns)-2)
	for _, s := range samples {
		for i, v := range s.values() {
			peaks[i] = max(peaks[i], v)
		}
	}
	fmt.Fprintf(&sum, "peaks: %s\n", soakSample{rss: peaks[0], heap: peaks[1], goroutines: peaks[2], fds: peaks[3], containers: peaks[4], procs: peaks[5], tmpfs: peaks[6]}.describe())
	// The slopes leave out the first tenth of the traffic: the ramp from idle to the load.
	steady := slices.DeleteFunc(slices.Clone(samples), func(s soakSample) bool { return s.at < traffic/10 })
	fmt.Fprintf(&sum, "slopes during the traffic after its first tenth (least squares, per hour), over %d samples:\n", len(steady))
	for i, name := range soakColumns[2:] {
		var xs, ys []float64
		for _, s := range steady {
			xs = append(xs, s.at.Hours())
			ys = append(ys, float64(s.values()[i]))
		}
		slope, mean := leastSquares(xs, ys)
		unit, scale := "", 1.0
		if strings.HasSuffix(name, "_bytes") {
			unit, scale = " MiB", 1<<20
		}
		fmt.Fprintf(&sum, "  %-17s %+12.2f%s/h (mean %.1f%s)\n", name, slope/scale, unit, mean/scale, unit)
	}
	// What the heap holds after the traffic that it did not hold idle, by allocation site.
	if top, err := exec.Command("go", "tool", "pprof", "-top", "-nodecount=25", "-sample_index=inuse_space",
		"-diff_base", idleHeap, endHeap).CombinedOutput(); err == nil {
		fmt.Fprintf(&sum, "heap in use after the traffic less idle (go tool pprof -top -diff_base %s %s):\n%s", idleHeap, endHeap, top)
	} else {
		fmt.Fprintf(&sum, "heap profiles: %s, %s (go tool pprof failed: %v)\n", idleHeap, endHeap, err)
	}
	t.Log("\n" + sum.String())
	require.NoError(t, os.WriteFile(base+".txt", []byte(sum.String()), 0o644), "write the summary")
	t.Logf("samples: %s", out)

	assert.Empty(t, d.failures(), "every operation but the disconnects succeeds")
	assert.Positive(t, len(samples), "samples were taken")
}

// heapProfile writes the server's heap profile (after a GC) to path.
func (s *soakSampler) heapProfile(t *testing.T, path string) {
	t.Helper()
	url := strings.TrimSuffix(s.metrics, "/metrics") + "/debug/pprof/heap?gc=1"
	resp, err := http.Get(url)
	require.NoError(t, err, "GET the heap profile")
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "the heap profile (admin_pprof)")
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err, "read the heap profile")
	require.NoError(t, os.WriteFile(path, b, 0o644), "write %s", path)
}

// startSoakServer runs bin with the configuration and waits until it serves; t.Cleanup stops it
// (SIGTERM, then SIGKILL).
func startSoakServer(t *testing.T, bin, config string) *serverProc {
	t.Helper()
	path := filepath.Join(t.TempDir(), "codeinterp.yaml")
	require.NoError(t, os.WriteFile(path, []byte(config), 0o600), "write the server config")
	var addr string
	for line := range strings.SplitSeq(config, "\n") {
		if rest, ok := strings.CutPrefix(line, "listen: "); ok {
			addr = rest
		}
	}
	p := &serverProc{bin: bin, config: path, addr: addr}
	t.Cleanup(func() {
		if p.cmd == nil {
			return
		}
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(30 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
		if t.Failed() {
			t.Logf("server output:\n%s", p.logs.String())
		}
	})
	p.start(t)
	require.Equal(t, healthpb.HealthCheckResponse_SERVING, healthStatus(t, healthClient(t, addr)), "serving")
	return p
}

// soakSampler samples the server process pid.
type soakSampler struct {
	pid     int
	metrics string
}

func (s *soakSampler) sample() soakSample {
	var out soakSample
	out.rss, _ = statusField(fmt.Sprintf("/proc/%d/status", s.pid), "VmRSS:")
	if fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", s.pid)); err == nil {
		out.fds = int64(len(fds))
	}
	m := scrape(s.metrics)
	out.heap, out.goroutines, out.containers = int64(m["go_memstats_heap_inuse_bytes"]), int64(m["go_goroutines"]), int64(m["codeinterp_sandbox_containers"])
	seen := map[uint64]bool{}
	for _, p := range sandboxProcs(s.pid) {
		out.procs++
		dir := fmt.Sprintf("/proc/%d/root/mnt/data", p.pid)
		var st syscall.Stat_t
		var fs syscall.Statfs_t
		if syscall.Stat(dir, &st) != nil || seen[st.Dev] || syscall.Statfs(dir, &fs) != nil {
			continue
		}
		seen[st.Dev] = true
		out.tmpfs += int64(fs.Blocks-fs.Bfree) * fs.Bsize
	}
	return out
}

// waitIdle waits up to bound for the server to be idle — no container in use and, when want
// is set, every figure back to want's level (within the slack of soakSlack) — and returns the
// last sample; it fails the test, naming the figures, if bound passes first.
func (s *soakSampler) waitIdle(t *testing.T, bound time.Duration, want *soakSample) soakSample {
	t.Helper()
	deadline := time.Now().Add(bound)
	var last soakSample
	var off []string
	for {
		last = s.sample()
		off = off[:0]
		if last.containers != 0 {
			off = append(off, fmt.Sprintf("%d containers in use", last.containers))
		}
		if want != nil {
			off = append(off, soakSlack(*want, last)...)
		}
		if len(off) == 0 {
			if want == nil {
				// Let the pool and the template settle before taking the idle level.
				time.Sleep(3 * time.Second)
				return s.sample()
			}
			return last
		}
		if time.Now().After(deadline) {
			assert.Fail(t, "the server did not come back to its idle level", "within %v: %s (idle %s, now %s)", bound, strings.Join(off, "; "), want.describe(), last.describe())
			return last
		}
		time.Sleep(2 * time.Second)
	}
}

// soakSlack returns the figures of now that are not back to idle's level: the same containers,
// sandbox processes and tmpfs use (within 1 MiB), goroutines and descriptors within 10 of it,
// the heap in use within 32 MiB and the RSS within 128 MiB (the Go runtime gives memory back to
// the system only gradually; the heap is what the server still holds).
func soakSlack(idle, now soakSample) []string {
	var off []string
	check := func(name string, got, want, slack int64) {
		if got > want+slack {
			off = append(off, fmt.Sprintf("%s %d > %d+%d", name, got, want, slack))
		}
	}
	check("sandbox processes", now.procs, idle.procs, 0)
	check("tmpfs bytes", now.tmpfs, idle.tmpfs, 1<<20)
	check("goroutines", now.goroutines, idle.goroutines, 10)
	check("descriptors", now.fds, idle.fds, 10)
	check("heap in use", now.heap, idle.heap, 32<<20)
	check("RSS", now.rss, idle.rss, 128<<20)
	return off
}

func (s soakSample) describe() string {
	return fmt.Sprintf("RSS %.1f MiB, heap in use %.1f MiB, %d goroutines, %d descriptors, %d containers, %d sandbox processes, tmpfs %.1f MiB",
		mib(s.rss), mib(s.heap), s.goroutines, s.fds, s.containers, s.procs, mib(s.tmpfs))
}

// scrape reads the Prometheus text at url and returns each metric's value, summed over its
// labels; nil when it cannot be read.
func scrape(url string) map[string]float64 {
	resp, err := http.Get(url)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name, rest, ok := strings.Cut(line, " ")
		if i := strings.IndexByte(name, '{'); i >= 0 {
			name = name[:i]
			_, rest, ok = strings.Cut(line, "} ")
		}
		if !ok {
			continue
		}
		if v, err := strconv.ParseFloat(strings.Fields(rest)[0], 64); err == nil {
			out[name] += v
		}
	}
	return out
}

// leastSquares returns the slope of the least-squares line through (xs, ys), and ys's mean.
func leastSquares(xs, ys []float64) (slope, mean float64) {
	n := float64(len(xs))
	if n < 2 {
		return 0, 0
	}
	var sx, sy, sxx, sxy float64
	for i := range xs {
		sx, sy, sxx, sxy = sx+xs[i], sy+ys[i], sxx+xs[i]*xs[i], sxy+xs[i]*ys[i]
	}
	den := n*sxx - sx*sx
	if den == 0 {
		return 0, sy / n
	}
	return (n*sxy - sx*sy) / den, sy / n
}

// soakDriver sends the soak's traffic and counts it by operation.
type soakDriver struct {
	front  string
	client *http.Client

	mu     sync.Mutex
	counts map[string]int
	fails  []string
	failed int
}

func (d *soakDriver) done(op string, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.counts == nil {
		d.counts = map[string]int{}
	}
	if err != nil {
		d.failed++
		if len(d.fails) < 20 {
			d.fails = append(d.fails, op+": "+err.Error())
		}
		return
	}
	d.counts[op]++
}

func (d *soakDriver) failures() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.fails)
}

func (d *soakDriver) describe() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var parts []string
	total := 0
	for _, op := range slices.Sorted(func(yield func(string) bool) {
		for k := range d.counts {
			if !yield(k) {
				return
			}
		}
	}) {
		parts = append(parts, fmt.Sprintf("%s %d", op, d.counts[op]))
		total += d.counts[op]
	}
	return fmt.Sprintf("%d succeeded (%s), %d failed", total, strings.Join(parts, ", "), d.failed)
}

// tenant runs one tenant's mix until ctx ends: each step one operation, chosen at random.
func (d *soakDriver) tenant(ctx context.Context, key string, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 23))
	for ctx.Err() == nil {
		var op string
		var err error
		switch rng.IntN(8) {
		case 0, 1:
			stream := rng.IntN(2) == 1
			op, err = fmt.Sprintf("responses(stream=%t)", stream), d.responses(ctx, key, stream)
		case 2:
			stream := rng.IntN(2) == 1
			op, err = fmt.Sprintf("chat(stream=%t)", stream), d.chat(ctx, key, stream)
		case 3, 4:
			stream := rng.IntN(2) == 1
			op, err = fmt.Sprintf("messages(stream=%t)", stream), d.messages(ctx, key, stream)
		case 5, 6:
			op, err = "containers(create,upload,download,delete)", d.containers(ctx, key, rng.Uint64())
		case 7:
			op, err = "disconnect mid-stream", d.disconnect(ctx, key)
		}
		if ctx.Err() != nil {
			return // an operation the end of the traffic cut is not counted
		}
		d.done(op, err)
	}
}

// call sends method path with body as key and returns the status and body.
func (d *soakDriver) call(ctx context.Context, method, path, contentType string, body io.Reader, key string, extra ...string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, d.front+path, body)
	if err != nil {
		return 0, nil, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	for i := 0; i+1 < len(extra); i += 2 {
		req.Header.Set(extra[i], extra[i+1])
	}
	resp, err := d.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// conversation posts body to path and checks the answer carries want (and, streamed, end).
func (d *soakDriver) conversation(ctx context.Context, key, path, body, end string, extra ...string) error {
	status, b, err := d.call(ctx, http.MethodPost, path, "application/json", strings.NewReader(body), key, extra...)
	switch {
	case err != nil:
		return err
	case status != http.StatusOK || !strings.Contains(string(b), "1764"):
		return fmt.Errorf("%d %.300s", status, b)
	case end != "" && !strings.Contains(string(b), end):
		return fmt.Errorf("stream incomplete: %.300s", b)
	}
	return nil
}

// soakCode is the code every conversation runs: numpy, a file, a print.
const soakCode = "import numpy as np\nopen('/mnt/data/out.txt', 'w').write('x' * 4096)\nprint(int(np.int64(42) ** 2))"

func (d *soakDriver) responses(ctx context.Context, key string, stream bool) error {
	end := ""
	if stream {
		end = "response.completed"
	}
	return d.conversation(ctx, key, responsesPath, fmt.Sprintf(`{"model":"gpt-soak","stream":%t,"tools":[{"type":"code_interpreter","container":{"type":"auto"}}],"input":%s}`,
		stream, jsonString(codeInput(soakCode))), end)
}

func (d *soakDriver) chat(ctx context.Context, key string, stream bool) error {
	end := ""
	if stream {
		end = "[DONE]"
	}
	return d.conversation(ctx, key, chatPath, fmt.Sprintf(`{"model":"gpt-soak","stream":%t,"tools":[{"type":"code_interpreter"}],"messages":[{"role":"user","content":%s}]}`,
		stream, jsonString(codeInput(soakCode))), end)
}

func (d *soakDriver) messages(ctx context.Context, key string, stream bool) error {
	end := ""
	if stream {
		end = "message_stop"
	}
	return d.conversation(ctx, key, messagesPath, fmt.Sprintf(`{"model":"claude-soak","max_tokens":1000,"stream":%t,"tools":[{"type":"code_execution_20250522","name":"code_execution"}],"messages":[{"role":"user","content":%s}]}`,
		stream, jsonString(codeInput(soakCode))), end, "Anthropic-Version", "2023-06-01")
}

// containers creates a container, uploads a file of up to 1 MiB, downloads it and checks its
// bytes, and deletes the container.
func (d *soakDriver) containers(ctx context.Context, key string, n uint64) error {
	status, b, err := d.call(ctx, http.MethodPost, "/v1/containers", "application/json", strings.NewReader(`{"name":"soak"}`), key)
	if err != nil || status != http.StatusOK {
		return fmt.Errorf("create: %d %v %.300s", status, err, b)
	}
	id := gjson.GetBytes(b, "id").String()
	content := bytes.Repeat([]byte(strconv.FormatUint(n%10, 10)), 1+int(n%(1<<20)))
	var form bytes.Buffer
	mw := multipart.NewWriter(&form)
	part, _ := mw.CreateFormFile("file", "soak.bin")
	_, _ = part.Write(content)
	_ = mw.Close()
	status, b, err = d.call(ctx, http.MethodPost, "/v1/containers/"+id+"/files", mw.FormDataContentType(), &form, key)
	if err != nil || status != http.StatusOK {
		return fmt.Errorf("upload: %d %v %.300s", status, err, b)
	}
	fileID := gjson.GetBytes(b, "id").String()
	status, b, err = d.call(ctx, http.MethodGet, "/v1/containers/"+id+"/files/"+fileID+"/content", "", nil, key)
	if err != nil || status != http.StatusOK || !bytes.Equal(b, content) {
		return fmt.Errorf("download: %d %v (%d bytes, want %d)", status, err, len(b), len(content))
	}
	status, b, err = d.call(ctx, http.MethodDelete, "/v1/containers/"+id, "", nil, key)
	if err != nil || status != http.StatusOK {
		return fmt.Errorf("delete: %d %v %.300s", status, err, b)
	}
	return nil
}

// disconnect starts a streamed Responses conversation whose code runs for two seconds and goes
// away after its first bytes.
func (d *soakDriver) disconnect(ctx context.Context, key string) error {
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	body := fmt.Sprintf(`{"model":"gpt-soak","stream":true,"tools":[{"type":"code_interpreter","container":{"type":"auto"}}],"input":%s}`,
		jsonString(codeInput("import time\ntime.sleep(2)\nprint('late')")))
	req, err := http.NewRequestWithContext(cctx, http.MethodPost, d.front+responsesPath, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := d.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	if _, err := resp.Body.Read(make([]byte, 256)); err != nil {
		return fmt.Errorf("first bytes: %w", err)
	}
	cancel() // the client goes away while the code runs
	return nil
}
