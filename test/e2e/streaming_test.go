package e2e

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
	"google.golang.org/protobuf/types/known/durationpb"

	configv1 "github.com/codeinterp/codeinterp/api/codeinterp/config/v1"
	"github.com/codeinterp/codeinterp/test/e2e/fakemodel"
)

// arrival is one line of an event stream and when the client read it.
type arrival struct {
	line string
	at   time.Duration
}

// readStream posts body to path (with apiKey, unless empty; chunked: the answer must have no
// content-length) and returns every non-empty line of the event stream with its
// arrival time, measured from the request. stop, if set, ends the reading (and the request)
// once it returns true for a line.
func readStream(t *testing.T, s *Stack, ctx context.Context, apiKey, path, body string, chunked bool, stop func(string) bool) []arrival {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.Front.URL()+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	if apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+apiKey)
	}
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err, "POST %s", path)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "status")
	assert.Equal(t, "text/event-stream; charset=utf-8", resp.Header.Get("Content-Type"), "content-type")
	if chunked {
		assert.Equal(t, int64(-1), resp.ContentLength, "a progressive stream has no content-length")
	}
	var out []arrival
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		if line := sc.Text(); line != "" {
			out = append(out, arrival{line: line, at: time.Since(start)})
			if stop != nil && stop(line) {
				return out
			}
		}
	}
	return out
}

// liveRelease is a point where the fake model holds its stream until the client has read an
// event: closed by the client's reader when it reads the line, or by a timer (a stream that was
// not live is released only by it, and the test fails on byClient).
type liveRelease struct {
	ch       chan struct{}
	once     sync.Once
	byClient atomic.Bool
}

func newLiveRelease(t *testing.T) *liveRelease {
	r := &liveRelease{ch: make(chan struct{})}
	timer := time.AfterFunc(15*time.Second, func() { r.once.Do(func() { close(r.ch) }) })
	t.Cleanup(func() { timer.Stop() })
	return r
}

// read is called by the client's reader once it read the line the stream waits for.
func (r *liveRelease) read() { r.once.Do(func() { r.byClient.Store(true); close(r.ch) }) }

// first returns the first arrival whose line has prefix, or fails.
func first(t *testing.T, got []arrival, prefix string) arrival {
	t.Helper()
	for _, a := range got {
		if strings.HasPrefix(a.line, prefix) {
			return a
		}
	}
	t.Fatalf("no line %q in the stream: %v", prefix, got)
	return arrival{}
}

// TestProgressiveStreaming: a streaming answer that needs the loop reaches the client as it
// happens, through both fronts: the response's first events before the code has run, the code
// call's interpreting before the run ends and its completed after it, keep-alive comments
// while the run is silent; and a client that goes away mid-run stops the loop, which never
// calls the model again, and its container is deleted.
func TestProgressiveStreaming(t *testing.T) {
	const run = 2500 * time.Millisecond
	env := NewEnv(t, EnvOptions{Configure: func(c *configv1.Config) {
		if c.DefaultProfile == nil {
			c.DefaultProfile = &configv1.Profile{}
		}
		c.DefaultProfile.KeepAliveInterval = durationpb.New(time.Second)
	}})
	code := `{"code":"import time\ntime.sleep(2.5)\nprint(42)"}`
	env.Fronts(t, func(t *testing.T, s *Stack) {
		t.Run("events as they happen", func(t *testing.T) {
			s.Model.Enqueue("/v1/responses",
				fakemodel.JSON(fakemodel.Responses(testModel, fakemodel.Usage{}, fakemodel.FunctionCall("code_interpreter", "call_1", code))),
				fakemodel.JSON(fakemodel.Responses(testModel, fakemodel.Usage{}, fakemodel.Message("It printed 42."))))
			got := readStream(t, s, t.Context(), "sk-stream", "/v1/responses",
				`{"model":"m","stream":true,"input":"wait, then print 42","tools":[{"type":"code_interpreter","container":{"type":"auto"}}]}`, true, nil)
			created := first(t, got, "event: response.created")
			interpreting := first(t, got, "event: response.code_interpreter_call.interpreting")
			completed := first(t, got, "event: response.code_interpreter_call.completed")
			done := first(t, got, "event: response.completed")
			// Order and "before the run ended", not absolute times: the run takes 2.5 s.
			assert.Less(t, created.at, completed.at-run/2, "response.created arrives long before the run ends")
			assert.Less(t, interpreting.at, completed.at-run/2, "interpreting arrives before the run ends")
			assert.LessOrEqual(t, completed.at, done.at, "completed comes before the answer")
			keepAlives := 0
			for _, a := range got {
				if a.line == ": keep-alive" && a.at > interpreting.at && a.at < completed.at {
					keepAlives++
				}
			}
			assert.GreaterOrEqual(t, keepAlives, 1, "keep-alive comments while the run is silent: %v", got)
			assert.Contains(t, first(t, got, "data: {\"type\":\"response.completed\"").line, "It printed 42.", "the final answer")
		})

		t.Run("client gone mid-run", func(t *testing.T) {
			before, base := len(s.Model.RequestsTo("/v1/responses")), liveContainers(t, s)
			s.Model.Enqueue("/v1/responses",
				fakemodel.JSON(fakemodel.Responses(testModel, fakemodel.Usage{}, fakemodel.FunctionCall("code_interpreter", "call_1", code))))
			ctx, cancel := context.WithCancel(t.Context())
			readStream(t, s, ctx, "", "/v1/responses",
				`{"model":"m","stream":true,"input":"wait","tools":[{"type":"code_interpreter","container":{"type":"auto"}}]}`, true,
				func(line string) bool {
					return strings.HasPrefix(line, "event: response.code_interpreter_call.interpreting")
				})
			cancel()
			// The loop stops, the anonymous caller's container is deleted, and no follow-up
			// reaches the model.
			assert.Eventually(t, func() bool { return liveContainers(t, s) == base }, 10*time.Second, 50*time.Millisecond,
				"the cancelled request's container is deleted")
			time.Sleep(run) // past the run's end: a loop still going would call the model now
			assert.Len(t, s.Model.RequestsTo("/v1/responses"), before+1, "no follow-up after the client went away")
		})
	})
}

// liveContainers is the server's count of containers that are not in the warm pool.
func liveContainers(t *testing.T, s *Stack) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	for _, c := range s.Manager.Collectors() {
		require.NoError(t, reg.Register(c))
	}
	mfs, err := reg.Gather()
	require.NoError(t, err)
	n := 0.0
	for _, mf := range mfs {
		if mf.GetName() != "codeinterp_sandbox_containers" {
			continue
		}
		for _, m := range mf.GetMetric() {
			n += m.GetGauge().GetValue()
		}
	}
	return n
}

// TestReplayedStreaming: a profile whose Envoy does not allow the switch to
// FULL_DUPLEX_STREAMED (stream_mode "replay") still streams, as a replay once the loop is over:
// the first event comes after the run.
func TestReplayedStreaming(t *testing.T) {
	const run = 1500 * time.Millisecond
	env := NewEnv(t, EnvOptions{Configure: func(c *configv1.Config) {
		if c.DefaultProfile == nil {
			c.DefaultProfile = &configv1.Profile{}
		}
		c.DefaultProfile.StreamMode = "replay"
	}})
	env.Fronts(t, func(t *testing.T, s *Stack) {
		mark := len(s.Model.RequestsTo("/v1/responses"))
		s.Model.Enqueue("/v1/responses",
			fakemodel.JSON(fakemodel.Responses(testModel, fakemodel.Usage{}, fakemodel.FunctionCall("code_interpreter", "call_1", `{"code":"import time\ntime.sleep(1.5)\nprint(42)"}`))),
			fakemodel.JSON(fakemodel.Responses(testModel, fakemodel.Usage{}, fakemodel.Message("It printed 42."))))
		got := readStream(t, s, t.Context(), "sk-replay", "/v1/responses",
			`{"model":"m","stream":true,"input":"wait, then print 42","tools":[{"type":"code_interpreter","container":{"type":"auto"}}]}`, false, nil)
		created := first(t, got, "event: response.created")
		assert.GreaterOrEqual(t, created.at, run, "a replayed stream starts once the run is over")
		sent := s.Model.RequestsTo("/v1/responses")[mark:]
		require.NotEmpty(t, sent)
		assert.False(t, gjson.GetBytes(sent[0].Body, "stream").Bool(), "a replayed stream's first call asks for a whole answer")
		assert.Contains(t, first(t, got, "data: {\"type\":\"response.completed\"").line, "It printed 42.", "the final answer")
		for _, a := range got {
			assert.NotEqual(t, ": keep-alive", a.line, "a replay has nothing to keep alive")
		}
	})
}
