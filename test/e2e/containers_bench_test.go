package e2e

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/codeinterp/codeinterp/test/e2e/harness"
)

// BenchmarkContainersTransfer (run by `make bench`): a 200 MB file uploaded
// (client.Containers.Files.New, multipart) and downloaded (client.Containers.Files.Content.Get)
// with openai-go through a real Envoy 1.40 (envoy/envoy.yaml's /v1/containers route, no
// ext_proc, no buffering) into and out of a container of the local bubblewrap backend.
// MB/s is the throughput; peak-rss-growth-MiB is how much the server's resident memory grew
// at its peak during the transfers over its idle level: the server runs in a process of its own
// (test/e2e/cmd/stack: the codeinterp server and the idle fake model; Envoy and the sandboxes
// are processes of their own), its VmHWM reset (/proc/PID/clear_refs) once idle and read after
// the transfers. The goal is under 32 MiB whatever the file's size. The client's own memory
// (openai-go builds a multipart body in memory) is in this process, not in the figure.
func BenchmarkContainersTransfer(b *testing.B) {
	st := startStackProcess(b, nil)
	client := openai.NewClient(option.WithBaseURL(st.EnvoyURL+"/v1/"), option.WithAPIKey("sk-bench"),
		option.WithMaxRetries(0), option.WithHTTPClient(&http.Client{Transport: &http.Transport{}}))
	ctx := b.Context()
	made, err := client.Containers.New(ctx, openai.ContainerNewParams{Name: "bench"})
	if err != nil {
		b.Fatalf("create a container: %v", err)
	}
	// Warm the path (the container starts on its first file) before the idle level is read.
	if _, err := client.Containers.Files.New(ctx, made.ID, openai.ContainerFileNewParams{File: openai.File(strings.NewReader("warm"), "warm.txt", "text/plain")}); err != nil {
		b.Fatalf("upload a small file: %v", err)
	}
	data := make([]byte, transferBytes)
	fill(data)
	want := sha256.Sum256(data)

	upload := func(b *testing.B) string {
		f, err := client.Containers.Files.New(ctx, made.ID, openai.ContainerFileNewParams{File: openai.File(bytes.NewReader(data), "big.bin", "application/octet-stream")})
		if err != nil {
			b.Fatalf("upload %d bytes: %v", len(data), err)
		}
		if f.Bytes != int64(len(data)) {
			b.Fatalf("uploaded %d bytes, the file has %d", len(data), f.Bytes)
		}
		return f.ID
	}

	b.Run("upload", func(b *testing.B) {
		b.SetBytes(transferBytes)
		idle := st.resetPeak(b)
		stop := st.sample(b)
		for b.Loop() {
			id := upload(b)
			b.StopTimer()
			if err := client.Containers.Files.Delete(ctx, made.ID, id); err != nil {
				b.Fatalf("delete the upload: %v", err)
			}
			b.StartTimer()
		}
		b.ReportMetric(float64(max(st.peak(b), stop())-idle)/(1<<20), "peak-rss-growth-MiB")
		b.ReportMetric(float64(idle)/(1<<20), "idle-rss-MiB")
	})
	b.Run("download", func(b *testing.B) {
		id := upload(b)
		b.SetBytes(transferBytes)
		idle := st.resetPeak(b)
		stop := st.sample(b)
		for b.Loop() {
			resp, err := client.Containers.Files.Content.Get(ctx, made.ID, id)
			if err != nil {
				b.Fatalf("download: %v", err)
			}
			h := sha256.New()
			n, err := io.Copy(h, resp.Body)
			resp.Body.Close()
			if err != nil || n != transferBytes || !bytes.Equal(h.Sum(nil), want[:]) {
				b.Fatalf("download: %d bytes (err %v), want the %d uploaded byte for byte", n, err, transferBytes)
			}
		}
		b.ReportMetric(float64(max(st.peak(b), stop())-idle)/(1<<20), "peak-rss-growth-MiB")
		b.ReportMetric(float64(idle)/(1<<20), "idle-rss-MiB")
	})
}

// transferBytes is the size of the benchmark's file: 200 MB.
const transferBytes = 200_000_000

// fill fills p with pseudo-random bytes (incompressible, as a real file's would be).
func fill(p []byte) {
	r := rand.NewChaCha8([32]byte{1})
	_, _ = r.Read(p)
}

// stackProcess is test/e2e/cmd/stack running as a process of its own.
type stackProcess struct {
	EnvoyURL string `json:"envoy_url"`
	pid      int
}

// startStackProcess builds and starts test/e2e/cmd/stack with args, the files inherited as
// descriptors 3 onwards (closed here once it started); b.Cleanup stops it (its stdin closed)
// and waits for it.
func startStackProcess(b *testing.B, files []*os.File, args ...string) *stackProcess {
	b.Helper()
	harness.RequireEnvoy(b)
	root, err := moduleRoot()
	if err != nil {
		b.Fatalf("module root: %v", err)
	}
	bin := filepath.Join(b.TempDir(), "stack")
	build := exec.Command("go", "build", "-o", bin, "./test/e2e/cmd/stack")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("build the stack: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, args...)
	cmd.ExtraFiles = files
	cmd.Dir = root
	var logs harness.SyncBuffer
	cmd.Stderr = &logs
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatalf("stack stdin: %v", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatalf("stack stdout: %v", err)
	}
	err = cmd.Start()
	for _, f := range files {
		_ = f.Close()
	}
	if err != nil {
		b.Fatalf("start the stack: %v", err)
	}
	out := bufio.NewReader(stdout)
	line, readErr := out.ReadBytes('\n')
	waited := make(chan error, 1)
	go func() {
		_, _ = io.Copy(io.Discard, out)
		waited <- cmd.Wait()
	}()
	b.Cleanup(func() {
		_ = stdin.Close()
		select {
		case err := <-waited:
			if err != nil {
				b.Errorf("the stack stopped with %v:\n%s", err, logs.String())
			}
		case <-time.After(time.Minute):
			_ = cmd.Process.Kill()
			<-waited
			b.Errorf("the stack did not stop within a minute:\n%s", logs.String())
		}
	})
	if readErr != nil {
		b.Fatalf("the stack's ready line: %v\n%s", readErr, logs.String())
	}
	st := &stackProcess{pid: cmd.Process.Pid}
	if err := json.Unmarshal(line, st); err != nil {
		b.Fatalf("decode the ready line %q: %v", line, err)
	}
	return st
}

// resetPeak waits for the server to settle, resets its peak RSS (VmHWM) to its current RSS and
// returns that, the idle level.
func (st *stackProcess) resetPeak(b *testing.B) int64 {
	b.Helper()
	time.Sleep(500 * time.Millisecond)
	// "5" resets the peak resident set size (proc(5), /proc/pid/clear_refs).
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", st.pid), []byte("5"), 0); err != nil {
		b.Fatalf("reset the server's VmHWM: %v", err)
	}
	return st.status(b, "VmRSS:")
}

// sample reads the server's RSS every 2ms until the function it returns is called, which
// returns the largest seen: the kernel's VmHWM may miss a peak that memory returned to the
// system (madvise) shrank before any event updated it.
func (st *stackProcess) sample(b *testing.B) func() int64 {
	b.Helper()
	path := fmt.Sprintf("/proc/%d/status", st.pid)
	done := make(chan struct{})
	maxRSS := make(chan int64, 1)
	go func() {
		var top int64
		t := time.NewTicker(2 * time.Millisecond)
		defer t.Stop()
		for {
			if rss, ok := statusField(path, "VmRSS:"); ok {
				top = max(top, rss)
			}
			select {
			case <-done:
				maxRSS <- top
				return
			case <-t.C:
			}
		}
	}()
	return func() int64 {
		close(done)
		return <-maxRSS
	}
}

// peak returns the server's peak RSS since the last resetPeak.
func (st *stackProcess) peak(b *testing.B) int64 { return st.status(b, "VmHWM:") }

// status returns a "NNN kB" field of /proc/PID/status, in bytes.
func (st *stackProcess) status(b *testing.B, field string) int64 {
	b.Helper()
	v, ok := statusField(fmt.Sprintf("/proc/%d/status", st.pid), field)
	if !ok {
		b.Fatalf("no %s in /proc/%d/status", field, st.pid)
	}
	return v
}

// statusField reads a "NNN kB" field of a /proc status file, in bytes.
func statusField(path, field string) (int64, bool) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	for line := range strings.SplitSeq(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, field); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10, err == nil
		}
	}
	return 0, false
}

// moduleRoot is the directory of go.mod above the working directory.
func moduleRoot() (string, error) {
	path, err := harness.ShippedConfigPath() // <root>/envoy/envoy.yaml
	if err != nil {
		return "", err
	}
	return filepath.Dir(filepath.Dir(path)), nil
}
