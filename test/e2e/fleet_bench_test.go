package e2e

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	configv1 "github.com/codeinterp/codeinterp/api/codeinterp/config/v1"
	"github.com/codeinterp/codeinterp/pkg/config"
	"github.com/codeinterp/codeinterp/pkg/store/redis/redistest"
	"github.com/codeinterp/codeinterp/test/e2e/fakemodel"
	"github.com/codeinterp/codeinterp/test/e2e/harness"
)

// fleetBenchConversations is how many conversations BenchmarkFleetLoad runs at once
// (CODEINTERP_LOAD_CONVERSATIONS overrides it); the goal for 1,000 on this machine: no
// error, wall ≤ 20 s.
const fleetBenchConversations = 1000

// BenchmarkFleetLoad (`make fleet-bench` alone; `make bench` runs it too): the
// fleet of issue 25 as processes of their own — 3 gateways (bin/extproc, role gateway), each
// behind its own real Envoy, 2 sandbox nodes (role sandbox), one redis-server — and this
// process's fake model (loadModel) and clients, which send each conversation (TestLoad's: one
// request whose loop runs two numpy rounds, an API key of its own) to the next Envoy in turn.
// Each iteration runs the conversations at once; between iterations (outside the timer) every
// container is deleted through the Containers API.
//
// Metrics, medians over the iterations (errors: a count over all): wall-s, p50-s, p99-s,
// errors as BenchmarkLoad's; gateway-peak-MiB (the largest of the 3 gateways' peak resident
// memory, VmHWM reset before the iteration), node-peak-MiB (the same of the 2 sandbox nodes'
// own processes), sandboxes-peak-MiB (the sandbox processes of both nodes, summed PSS, sampled),
// redis-peak-MiB, test-process-peak-MiB (the clients, the fake model and the round robin), and
// redis-cmds/conversation: the commands Redis processed during the load (INFO stats; the nodes'
// heartbeats included) per conversation.
func BenchmarkFleetLoad(b *testing.B) {
	n := loadCount(b, fleetBenchConversations)
	harness.RequireEnvoy(b)
	root, err := moduleRoot()
	if err != nil {
		b.Fatalf("module root: %v", err)
	}
	dir := b.TempDir()
	bin := filepath.Join(dir, "extproc")
	build := exec.Command("go", "build", "-o", bin, "./cmd/extproc")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("build extproc: %v\n%s", err, out)
	}
	model := fakemodel.New(b)
	model.Handle("/v1/responses", loadModel)
	rds := redistest.Start(b)
	secret := filepath.Join(dir, "fleet-secret")
	if err := os.WriteFile(secret, []byte(strings.Repeat("fleet-bench-", 4)), 0o600); err != nil {
		b.Fatal(err)
	}
	base := func(role, id string) *configv1.Config {
		c := DefaultConfig()
		c.Store, c.Role, c.NodeId, c.FleetSecretFile = config.StoreRedis, role, id, secret
		c.Redis = &configv1.Redis{Addresses: []string{rds.Addr()}}
		c.LogLevel = "warn"
		c.Sandbox.WarmPoolSize = proto.Uint32(2)
		// Every conversation's container may land on one node.
		loadLimits(c, n)
		return c
	}
	var nodes, gateways []*fleetProc
	for i := range 2 {
		c := base(config.RoleSandbox, fmt.Sprintf("node-%d", i))
		c.Listen, c.AdminListen, c.SandboxListen = freeAddr(b), freeAddr(b), freeAddr(b)
		c.ApiListen = proto.String("")
		nodes = append(nodes, startFleetProc(b, bin, dir, c))
	}
	var urls []string
	for i := range 3 {
		c := base(config.RoleGateway, fmt.Sprintf("gateway-%d", i))
		c.Listen, c.AdminListen, c.ApiListen = freeAddr(b), freeAddr(b), proto.String(freeAddr(b))
		envoy := harness.StartReal(b, harness.Options{
			ExtProcAddr: c.Listen,
			Upstream:    model.URL(),
			Clusters:    map[string]string{APICluster: "http://" + c.GetApiListen()},
		})
		c.Upstream = envoy.URL()
		gateways = append(gateways, startFleetProc(b, bin, dir, c))
		urls = append(urls, envoy.URL())
	}
	rr := newRoundRobin(b, urls)
	s := &Stack{Front: rr, Model: model, transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	key := func(i int) string { return fmt.Sprintf("sk-fleet-load-%d", i) }
	keys := make([]string, n)
	for i := range keys {
		keys[i] = key(i)
	}
	redisPID := redisProcessID(b, rds)

	var walls, p50s, p99s, gw, nd, sbx, rd, test, perConv []float64
	errs := 0
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		for _, p := range slices.Concat(gateways, nodes) {
			resetPeakRSS(b, p.pid)
		}
		resetPeakRSS(b, redisPID)
		resetPeakRSS(b, os.Getpid())
		samplers := make([]*memSampler, len(nodes))
		for i, p := range nodes {
			samplers[i] = sampleMemory(p.pid)
		}
		cmds := redisCommands(b, rds)
		b.StartTimer()
		res := runLoad(s, n, key)
		b.StopTimer()
		perConv = append(perConv, float64(redisCommands(b, rds)-cmds)/float64(n))
		var sandboxes int64
		for _, m := range samplers {
			sandboxes += m.stop().sandboxes
		}
		errs += len(res.errs)
		for _, e := range res.errs[:min(3, len(res.errs))] {
			b.Logf("failed: %s", e)
		}
		walls = append(walls, res.wall.Seconds())
		slices.Sort(res.lat)
		p50s = append(p50s, res.lat[len(res.lat)/2].Seconds())
		p99s = append(p99s, res.lat[len(res.lat)*99/100].Seconds())
		gw = append(gw, mib(maxPeak(b, gateways)))
		nd = append(nd, mib(maxPeak(b, nodes)))
		sbx = append(sbx, mib(sandboxes))
		rdPeak, _ := statusField(fmt.Sprintf("/proc/%d/status", redisPID), "VmHWM:")
		rd = append(rd, mib(rdPeak))
		testPeak, _ := statusField(fmt.Sprintf("/proc/%d/status", os.Getpid()), "VmHWM:")
		test = append(test, mib(testPeak))
		deleteContainers(b, s, keys)
		b.StartTimer()
	}
	b.StopTimer()
	for _, m := range []struct {
		name string
		v    []float64
	}{
		{"wall-s", walls}, {"p50-s", p50s}, {"p99-s", p99s}, {"gateway-peak-MiB", gw}, {"node-peak-MiB", nd},
		{"sandboxes-peak-MiB", sbx}, {"redis-peak-MiB", rd}, {"test-process-peak-MiB", test},
		{"redis-cmds/conversation", perConv},
	} {
		b.ReportMetric(medianOf(m.v), m.name)
	}
	b.ReportMetric(float64(errs), "errors")
	if errs > 0 {
		b.Errorf("%d conversations failed", errs)
	}
}

// fleetProc is bin/extproc running as one process of a benchmark's fleet.
type fleetProc struct {
	pid int
}

// startFleetProc runs bin with c (defaults applied, validated, written as JSON, which the
// YAML loader reads) until the benchmark ends, and waits until its /readyz answers.
func startFleetProc(b *testing.B, bin, dir string, c *configv1.Config) *fleetProc {
	b.Helper()
	full := proto.Clone(c).(*configv1.Config)
	config.ApplyDefaults(full)
	if err := config.Validate(full); err != nil {
		b.Fatalf("fleet process %s: %v", c.GetNodeId(), err)
	}
	// The process applies the defaults itself (the JSON mapping writes 64-bit numbers as
	// strings, which the YAML loader does not take).
	js, err := protojson.Marshal(c)
	if err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(dir, c.GetNodeId()+".yaml")
	if err := os.WriteFile(path, js, 0o600); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(bin, "--config", path)
	var logs harness.SyncBuffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		b.Fatalf("start %s: %v", c.GetNodeId(), err)
	}
	// exited is closed once the process has been waited for, with its outcome in waitErr:
	// both the readiness loop and the cleanup read it (a value sent on a channel once could
	// be taken by the first, leaving the cleanup waiting for ever after an early exit).
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	b.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
			if waitErr != nil && !b.Failed() {
				b.Errorf("%s stopped with %v:\n%s", c.GetNodeId(), waitErr, logs.String())
			}
		case <-time.After(time.Minute):
			_ = cmd.Process.Kill()
			<-exited
			b.Errorf("%s did not stop within a minute:\n%s", c.GetNodeId(), logs.String())
		}
	})
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := http.Get("http://" + full.GetAdminListen() + "/readyz")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		select {
		case <-exited:
			b.Fatalf("%s exited: %v\n%s", c.GetNodeId(), waitErr, logs.String())
		default:
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s not ready within a minute:\n%s", c.GetNodeId(), logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return &fleetProc{pid: cmd.Process.Pid}
}

func maxPeak(b *testing.B, ps []*fleetProc) int64 {
	var top int64
	for _, p := range ps {
		v, _ := statusField(fmt.Sprintf("/proc/%d/status", p.pid), "VmHWM:")
		top = max(top, v)
	}
	return top
}

func mib(v int64) float64 { return float64(v) / (1 << 20) }

// redisCommands is how many commands the redis-server has processed (INFO stats).
func redisCommands(b *testing.B, rds *redistest.Server) int64 {
	b.Helper()
	return redisInfo(b, rds, "stats", "total_commands_processed:")
}

// redisProcessID is the redis-server's process id, as it reports it (INFO server).
func redisProcessID(b *testing.B, rds *redistest.Server) int {
	b.Helper()
	return int(redisInfo(b, rds, "server", "process_id:"))
}

// redisInfo is the whole number field of the redis-server's INFO section.
func redisInfo(b *testing.B, rds *redistest.Server, section, field string) int64 {
	b.Helper()
	info, err := rds.Client().Info(b.Context(), section).Result()
	if err != nil {
		b.Fatalf("redis INFO %s: %v", section, err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				b.Fatalf("redis %s %q: %v", field, v, err)
			}
			return n
		}
	}
	b.Fatalf("redis INFO %s has no %s", section, field)
	return 0
}
