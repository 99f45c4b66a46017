package loop

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// amplificationChildEnv makes TestOutputAmplificationMemory do its measured run itself: the
// parent runs it in a child process of its own, so that the child's peak RSS (VmHWM) is the
// request's and no other test's.
const amplificationChildEnv = "CODEINTERP_AMPLIFICATION_CHILD"

// TestOutputAmplificationMemory measures the server's memory for the worst single request the
// default bounds allow: stream:true, 8 rounds, every model turn calling the code function 100
// times, every run showing 1 MiB of images (the sandbox's per-run output cap). The peak RSS
// growth (VmHWM) must stay under 256 MiB; it prints the figures.
func TestOutputAmplificationMemory(t *testing.T) {
	if os.Getenv(amplificationChildEnv) == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestOutputAmplificationMemory$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), amplificationChildEnv+"=1")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "child run: %s", out)
		var growth, heapAlloc, answer int64 = -1, -1, -1
		sc := bufio.NewScanner(strings.NewReader(string(out)))
		for sc.Scan() {
			if _, err := fmt.Sscanf(strings.TrimSpace(sc.Text()), "amplification: vmhwm_growth=%d total_alloc=%d answer=%d", &growth, &heapAlloc, &answer); err == nil {
				break
			}
		}
		require.GreaterOrEqual(t, growth, int64(0), "the child reports its figures: %s", out)
		t.Logf("worst single request with the default bounds: peak RSS growth %d MiB, %d MiB allocated in all, answer %d KiB",
			growth>>20, heapAlloc>>20, answer>>10)
		bound := int64(256 << 20)
		if raceEnabled {
			// The race detector's shadow memory roughly doubles what the process holds
			// (168–227 MiB measured under -race for 80–104 MiB without).
			bound *= 2
		}
		assert.Less(t, growth, bound, "peak RSS growth of one request with the default bounds")
		return
	}

	const rounds = 8
	answers := make([]scripted, 0, rounds)
	for i := 2; i <= rounds; i++ {
		answers = append(answers, scripted{status: 200, body: respCalls(strconv.Itoa(i), 100)})
	}
	answers = append(answers, scripted{status: 200, body: respText("end", "Here are the charts.")})
	f := newFixture(t, answers...)
	f.provider.run = bigImages(4, 256<<10)
	req := f.request(t, respSurface, strings.Replace(responsesClient, `{"model"`, `{"stream":true,"model"`, 1), respCalls("1", 100))
	req.MaxRounds = rounds
	req.MaxAnswerBytes = 64<<20 - 64<<10 // the default max_request_bytes less the message overhead

	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	base := vmHWM(t)
	res := f.engine.Run(context.Background(), req)
	peak := vmHWM(t)
	runtime.ReadMemStats(&after)
	require.Equal(t, http.StatusOK, res.Status, "body: %.300s", res.Body)
	assert.Equal(t, rounds*DefaultMaxCallsPerTurn, res.Calls, "max_calls_per_turn of each turn's calls ran")
	// The event stream carries each item twice (output_item.done, response.completed).
	assert.Less(t, len(res.Body), 2*DefaultMaxOutputBytes+2<<20, "the answer stays within twice the output budget and its text")
	fmt.Printf("amplification: vmhwm_growth=%d total_alloc=%d answer=%d\n", peak-base, after.TotalAlloc-before.TotalAlloc, len(res.Body))
}

// vmHWM returns the process's peak resident set size, from /proc/self/status.
func vmHWM(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	require.NoError(t, err, "read /proc/self/status")
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			require.NoError(t, err, "parse %q", line)
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc/self/status")
	return 0
}
