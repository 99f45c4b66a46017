package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	configv1 "github.com/codeinterp/codeinterp/api/codeinterp/config/v1"
	"github.com/codeinterp/codeinterp/internal/demo"
	"github.com/codeinterp/codeinterp/pkg/sandbox"
	"github.com/codeinterp/codeinterp/test/e2e/harness"
)

// TenantLoadDurationEnv names the environment variable that sets how long TestTenantIsolation
// runs (a Go duration); `make soak` sets it. Default tenantLoadDuration.
const TenantLoadDurationEnv = "CODEINTERP_TENANT_LOAD_DURATION"

// tenantLoadDuration is TestTenantIsolation's traffic time in `make test`.
const tenantLoadDuration = 4 * time.Second

// The bounds TestTenantIsolation asserts on the test process, which holds the server (and the
// model, the clients and the test's own buffers; Envoy and the sandboxes are processes of their
// own). The heap is the live heap after a collection, at the end, with every one of the
// attacker's containers still alive: what the server keeps. An identity's files tables may hold
// sandbox.DefaultMaxFileTableBytesPerIdentity (16 MiB), which A's forged lists fill; 32 MiB
// more covers B's containers, the stores and the pools (measured: +21 MiB in all, see
// docs/development.md). RSS is the peak sampled during the run, which also holds what requests
// carry for a moment (8 MiB forged paths, 1 MiB names, the stream buffers; measured +80 MiB).
const (
	tenantHeapGrowthBound = sandbox.DefaultMaxFileTableBytesPerIdentity + 32<<20
	tenantRSSGrowthBound  = 256 << 20
)

// forgedListCode replaces the driver's file scanner (the code runs in the driver's process, as
// pkg/sandbox/local's report_attack_test.go does it) and reports, at the end of the run, one
// 8 MiB path that is no path and 2,000 plausible 4 KB paths (8 MB) that are not there.
const forgedListCode = `import sys
G = sys._getframe(1).f_globals
big = [['/mnt/data/%d' + 'a' * (8 << 20), 1]]
long = '/mnt/data/' + ('d' * 250 + '/') * 15 + 'f' * 200
G['_scan_files'] = lambda: big + [[long + '%d-' + str(j), 1] for j in range(2000)]
print('forged')`

// TestTenantIsolation (issue 23, "Done when"): through the real Envoy, tenant A uses every
// trick at once — code that forges the run's file list, requests with many credential
// headers, uploads that stall, over-long conversation, previous_response_id, session and
// metadata values — while tenant B's conversations (Responses and Messages, plain and
// streamed, each running code) must all succeed, and the server's memory stays within a stated
// bound. The server runs in the test process (the harness's stack): its live heap after a
// collection is what it keeps, to the byte, and the run fits `make test`'s budget (building and
// starting bin/extproc would not); `make soak` runs the same against bin/extproc as a process.
func TestTenantIsolation(t *testing.T) {
	harness.RequireEnvoy(t)
	dur := tenantLoadDuration
	if v := os.Getenv(TenantLoadDurationEnv); v != "" {
		d, err := time.ParseDuration(v)
		require.NoError(t, err, "%s=%q", TenantLoadDurationEnv, v)
		dur = d
	}
	model := &demo.Model{}
	up := httptest.NewServer(model)
	t.Cleanup(up.Close)
	env := NewEnv(t, EnvOptions{Configure: func(c *configv1.Config) {
		c.Sandbox.WarmPoolSize = proto.Uint32(2)
		c.ApiUploadIdle = durationpb.New(3 * time.Second)
	}})
	o := env.HarnessOptions()
	o.Upstream = up.URL
	s := env.Serve(t, harness.StartReal(t, o))

	b := &tenantB{s: s, key: "sk-tenant-b"}
	// One conversation of B before the baseline: the template, the pools and the lazily built
	// tables exist from here on.
	require.NoError(t, b.responses(t.Context(), false), "B's first conversation")
	base := liveMemory()
	t.Logf("baseline: heap %.1f MiB, RSS %.1f MiB", mib(base.heap), mib(base.rss))

	ctx, cancel := context.WithTimeout(t.Context(), dur)
	defer cancel()
	a := &tenantA{s: s, key: "sk-tenant-a"}
	var wg sync.WaitGroup
	var peakRSS, peakHeap atomic.Int64
	wg.Go(func() {
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				m := memoryNow()
				raise(&peakRSS, m.rss)
				raise(&peakHeap, m.heap)
			}
		}
	})
	wg.Go(func() { a.forge(ctx) })
	wg.Go(func() { a.credentials(ctx) })
	wg.Go(func() { a.stall(ctx) })
	wg.Go(func() { a.longNames(ctx) })
	var bErrs []string
	var bMu sync.Mutex
	var bDone atomic.Int32
	for _, conv := range []func(context.Context, bool) error{b.responses, b.messages} {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				err := conv(ctx, i%2 == 1)
				switch {
				case err != nil && ctx.Err() == nil:
					bMu.Lock()
					bErrs = append(bErrs, err.Error())
					bMu.Unlock()
				case err == nil:
					bDone.Add(1)
				}
			}
		})
	}
	wg.Wait()
	// One round of long names whatever the traffic's length (each takes a while on a loaded
	// machine), before the memory is measured.
	a.longNamesOnce(t.Context())

	t.Logf("A: %d forged runs, %d requests with many credentials, %d stalled uploads ended, %d long names; B: %d conversations",
		a.forged.Load(), a.creds.Load(), a.stalled.Load(), a.long.Load(), bDone.Load())
	assert.Empty(t, bErrs, "every conversation of B succeeds while A attacks")
	assert.GreaterOrEqual(t, bDone.Load(), int32(4), "B had conversations")
	assert.Positive(t, a.forged.Load(), "A's forged file lists ran")
	assert.Positive(t, a.creds.Load(), "A's many-credential requests were refused")
	assert.GreaterOrEqual(t, a.long.Load(), int32(3), "A's long names were sent")
	assert.Empty(t, a.errors(), "A's attacks got the answers they should")

	end := liveMemory()
	raise(&peakRSS, end.rss)
	t.Logf("end (A's containers alive): heap %.1f MiB (%+.1f), peak heap %.1f MiB; RSS %.1f MiB, peak %.1f MiB (%+.1f)",
		mib(end.heap), mib(end.heap)-mib(base.heap), mib(peakHeap.Load()), mib(end.rss), mib(peakRSS.Load()), mib(peakRSS.Load())-mib(base.rss))
	assert.Less(t, end.heap-base.heap, int64(tenantHeapGrowthBound), "the server keeps at most %d MiB more after A's attacks", int64(tenantHeapGrowthBound)>>20)
	assert.Less(t, peakRSS.Load()-base.rss, int64(tenantRSSGrowthBound), "the process's RSS grows at most %d MiB during them", tenantRSSGrowthBound>>20)
	require.NoError(t, b.responses(t.Context(), true), "B's conversation after the attacks")
}

// tenantMem is the test process's memory, in bytes.
type tenantMem struct{ heap, rss int64 }

// liveMemory returns the live heap after a collection and the RSS.
func liveMemory() tenantMem {
	runtime.GC()
	return memoryNow()
}

// memoryNow returns the heap in use and the RSS, without a collection.
func memoryNow() tenantMem {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	rss, _ := statusField("/proc/self/status", "VmRSS:")
	return tenantMem{heap: int64(ms.HeapAlloc), rss: rss}
}

// raise sets peak to v if v is larger.
func raise(peak *atomic.Int64, v int64) {
	for {
		old := peak.Load()
		if v <= old || peak.CompareAndSwap(old, v) {
			return
		}
	}
}

// tenantB is the tenant whose conversations must succeed.
type tenantB struct {
	s   *Stack
	key string
}

// postAs sends body to path as key through the front and returns the status and body.
func postAs(ctx context.Context, s *Stack, path, body string, kv ...string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.Front.URL()+path, strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i < len(kv); i += 2 {
		req.Header.Add(kv[i], kv[i+1])
	}
	resp, err := s.transport.RoundTrip(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	var sb strings.Builder
	_, err = bufio.NewReader(resp.Body).WriteTo(&sb)
	return resp.StatusCode, sb.String(), err
}

// codeInput is a user message the demo model answers by running code.
func codeInput(code string) string { return "```python\n" + code + "\n```" }

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// responses runs one Responses conversation of B: code, then its output in the answer.
func (b *tenantB) responses(ctx context.Context, stream bool) error {
	body := fmt.Sprintf(`{"model":"gpt-e2e","stream":%t,"tools":[{"type":"code_interpreter","container":{"type":"auto"}}],"input":%s}`,
		stream, jsonString(codeInput("print(6*7)")))
	status, ans, err := postAs(ctx, b.s, responsesPath, body, "Authorization", "Bearer "+b.key)
	switch {
	case err != nil:
		return fmt.Errorf("responses (stream %t): %w", stream, err)
	case status != http.StatusOK || !strings.Contains(ans, "42"):
		return fmt.Errorf("responses (stream %t): %d %.300s", stream, status, ans)
	case stream && !strings.Contains(ans, "response.completed"):
		return fmt.Errorf("responses stream incomplete: %.300s", ans)
	}
	return nil
}

// messages runs one Messages conversation of B.
func (b *tenantB) messages(ctx context.Context, stream bool) error {
	body := fmt.Sprintf(`{"model":"claude-e2e","max_tokens":1000,"stream":%t,"tools":[{"type":"code_execution_20250522","name":"code_execution"}],"messages":[{"role":"user","content":%s}]}`,
		stream, jsonString(codeInput("print(6*7)")))
	status, ans, err := postAs(ctx, b.s, messagesPath, body, "X-Api-Key", b.key, "Anthropic-Version", "2023-06-01")
	switch {
	case err != nil:
		return fmt.Errorf("messages (stream %t): %w", stream, err)
	case status != http.StatusOK || !strings.Contains(ans, "42"):
		return fmt.Errorf("messages (stream %t): %d %.300s", stream, status, ans)
	case stream && !strings.Contains(ans, "message_stop"):
		return fmt.Errorf("messages stream incomplete: %.300s", ans)
	}
	return nil
}

// tenantA is the tenant that uses every trick at once. Its methods run until ctx ends; each
// counts what it did and notes an answer that is not the one it should get.
type tenantA struct {
	s   *Stack
	key string

	forged, creds, stalled, long atomic.Int32

	mu   sync.Mutex
	errs []string
}

func (a *tenantA) fail(format string, args ...any) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.errs) < 20 {
		a.errs = append(a.errs, fmt.Sprintf(format, args...))
	}
}

func (a *tenantA) errors() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.errs
}

// forge runs code that forges its run's file list: the answer comes (the model is told the
// list was refused or cut), the server keeps nothing of it beyond a files table's bound.
func (a *tenantA) forge(ctx context.Context) {
	for i := 0; ctx.Err() == nil; i++ {
		body := fmt.Sprintf(`{"model":"gpt-e2e","tools":[{"type":"code_interpreter","container":{"type":"auto"}}],"input":%s}`,
			jsonString(codeInput(fmt.Sprintf(forgedListCode, i, i))))
		status, ans, err := postAs(ctx, a.s, responsesPath, body, "Authorization", "Bearer "+a.key)
		if ctx.Err() != nil {
			return
		}
		if err != nil || status != http.StatusOK || !strings.Contains(ans, "forged") {
			a.fail("forged run %d: %d %v %.300s", i, status, err, ans)
			continue
		}
		a.forged.Add(1)
	}
}

// credentials sends requests with A's key and a new made-up key in other credential headers:
// each is refused with a 400 before it reaches the model.
func (a *tenantA) credentials(ctx context.Context) {
	for i := 0; ctx.Err() == nil; i++ {
		status, ans, err := postAs(ctx, a.s, responsesPath, codeRequest, "Api-Key", a.key,
			"X-Api-Key", fmt.Sprintf("made-up-%d", i), "X-Litellm-Api-Key", fmt.Sprintf("other-%d", i))
		if ctx.Err() != nil {
			return
		}
		if err != nil || status != http.StatusBadRequest {
			a.fail("many credentials %d: %d %v %.300s", i, status, err, ans)
		}
		a.creds.Add(1)
		// A few a second: the point is that each is refused, not to load the cores.
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// stall opens uploads into a container of A's that send a part of their body and stop: the
// identity's bound (4) of them at once, and one more each time; the API's idle deadline ends
// each with a 408 and they are opened again.
func (a *tenantA) stall(ctx context.Context) {
	status, ans, err := postAs(ctx, a.s, "/v1/containers", `{"name":"stalled"}`, "Authorization", "Bearer "+a.key)
	if err != nil || status != http.StatusOK {
		a.fail("create A's container: %d %v %.300s", status, err, ans)
		return
	}
	id := gjson.Get(ans, "id").String()
	u, err := url.Parse(a.s.Front.URL())
	if err != nil {
		a.fail("front URL: %v", err)
		return
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	for range 5 {
		wg.Go(func() {
			for ctx.Err() == nil {
				conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", u.Host)
				if err != nil {
					return
				}
				head := "--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"stall.bin\"\r\n\r\nsome bytes"
				_, _ = fmt.Fprintf(conn, "POST /v1/containers/%s/files HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n"+
					"Content-Type: multipart/form-data; boundary=B\r\nContent-Length: 1000000\r\n\r\n%s", id, u.Host, a.key, head)
				stop := context.AfterFunc(ctx, func() { conn.Close() })
				line, _ := bufio.NewReader(conn).ReadString('\n')
				stop()
				conn.Close()
				switch {
				case ctx.Err() != nil:
				case strings.Contains(line, " 408 "):
					a.stalled.Add(1)
				case strings.Contains(line, " 429 "):
					// The identity's uploads in progress are at their bound.
					time.Sleep(200 * time.Millisecond)
				default:
					a.fail("stalled upload: %q", line)
				}
			}
		})
	}
}

// longNames sends requests whose conversation, previous_response_id and metadata values are 1
// MiB each, in turn, until ctx ends: a store keeps a long id as a fixed-size hash; the request
// is answered (by the model or with a 4xx), never with a 5xx.
func (a *tenantA) longNames(ctx context.Context) {
	for ctx.Err() == nil {
		a.longNamesOnce(ctx)
	}
}

// longNamesOnce sends each of longNames' requests once (fewer when ctx ends).
func (a *tenantA) longNamesOnce(ctx context.Context) {
	long := strings.Repeat("n", 1<<20)
	bodies := []string{
		fmt.Sprintf(`{"model":"gpt-e2e","tools":[{"type":"code_interpreter","container":{"type":"auto"}}],"conversation":%q,"input":"hi"}`, "conv_"+long),
		fmt.Sprintf(`{"model":"gpt-e2e","tools":[{"type":"code_interpreter","container":{"type":"auto"}}],"previous_response_id":%q,"input":"hi"}`, "resp_"+long),
		fmt.Sprintf(`{"model":"gpt-e2e","tools":[{"type":"code_interpreter","container":{"type":"auto"}}],"metadata":{"session_id":%q,"k":%q},"input":%s}`, long, long, jsonString(codeInput("print(1)"))),
	}
	for i, body := range bodies {
		status, ans, err := postAs(ctx, a.s, responsesPath, body, "Authorization", "Bearer "+a.key)
		if ctx.Err() != nil {
			return
		}
		if err != nil || status >= 500 {
			a.fail("long names %d: %d %v %.300s", i, status, err, ans)
		}
		a.long.Add(1)
	}
}
