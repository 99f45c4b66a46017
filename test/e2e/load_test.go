package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3/responses"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	configv1 "github.com/codeinterp/codeinterp/api/codeinterp/config/v1"
	"github.com/codeinterp/codeinterp/test/e2e/fakemodel"
)

// loadConversations is how many conversations TestLoad runs at once through each front;
// CODEINTERP_LOAD_CONVERSATIONS overrides it (the run used 200).
const loadConversations = 100

// TestLoad runs many conversations at once through each front, each with its own API key (so
// its own sandbox identity), each asking for two rounds of numpy code before the model's
// answer, and asserts that every one of them gets its complete answer: no 5xx, no lost
// round. The fake model answers statelessly from what each request carries.
func TestLoad(t *testing.T) {
	n := loadCount(t, loadConversations)
	env := NewEnv(t, EnvOptions{Configure: func(c *configv1.Config) { loadLimits(c, n) }})
	env.Model.Handle("/v1/responses", loadModel)
	env.Fronts(t, func(t *testing.T, s *Stack) {
		res := runLoad(s, n, func(i int) string { return fmt.Sprintf("sk-load-%d", i) })
		assert.Empty(t, res.errs, "every one of %d concurrent conversations succeeds", n)
	})
}

// loadCount is how many conversations a load runs at once: CODEINTERP_LOAD_CONVERSATIONS, or
// def.
func loadCount(t testing.TB, def int) int {
	t.Helper()
	v := os.Getenv("CODEINTERP_LOAD_CONVERSATIONS")
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	require.NoError(t, err, "CODEINTERP_LOAD_CONVERSATIONS=%q", v)
	require.Positive(t, n, "CODEINTERP_LOAD_CONVERSATIONS=%q", v)
	return n
}

// loadLimits sets the container caps a load of n conversations at once needs: every
// conversation's container live together, twice over (the per-identity cap is at most the
// total one).
func loadLimits(c *configv1.Config, n int) {
	c.Sandbox.MaxContainers = uint32(2 * n)
	c.Sandbox.MaxContainersPerIdentity = uint32(min(16, 2*n))
}

// loadResult is what one load of concurrent conversations gave.
type loadResult struct {
	wall time.Duration   // from the first request sent to the last answer
	lat  []time.Duration // each conversation's latency, from the load's start
	errs []string        // the failed conversations' errors, in no order
}

// runLoad runs conversations 0..n-1 at once through s, conversation i with the API key key(i),
// and returns when all of them have ended.
func runLoad(s *Stack, n int, key func(i int) string) loadResult {
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		res = loadResult{lat: make([]time.Duration, n)}
	)
	start := time.Now()
	for i := range n {
		wg.Go(func() {
			err := loadConversation(s, key(i), i)
			res.lat[i] = time.Since(start)
			if err != nil {
				mu.Lock()
				res.errs = append(res.errs, err.Error())
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	res.wall = time.Since(start)
	return res
}

// loadConversation runs conversation i with apiKey: one request whose loop runs two numpy
// rounds.
func loadConversation(s *Stack, apiKey string, i int) error {
	c := s.Client(apiKey)
	p := ask(fmt.Sprintf("conversation %d: sum with numpy twice", i))
	resp, err := c.Responses.New(context.Background(), p)
	if err != nil {
		return fmt.Errorf("conversation %d: %w", i, err)
	}
	var calls []responses.ResponseOutputItemUnion
	for _, it := range resp.Output {
		if it.Type == "code_interpreter_call" {
			calls = append(calls, it)
		}
	}
	if len(calls) != 2 {
		return fmt.Errorf("conversation %d: %d code_interpreter_call items, want 2: %s", i, len(calls), resp.RawJSON())
	}
	want := []string{strconv.Itoa(i * 3), strconv.Itoa(i*3 + 1)}
	for k, call := range calls {
		if len(call.Outputs) == 0 || call.Outputs[0].Logs != want[k]+"\n" {
			return fmt.Errorf("conversation %d: round %d (status %s, answer status %s) printed %+v, want %q", i, k+1, call.Status, resp.Status, call.Outputs, want[k])
		}
	}
	if got := resp.OutputText(); got != "done "+want[1] {
		return fmt.Errorf("conversation %d: answer %q, want %q", i, got, "done "+want[1])
	}
	return nil
}

// loadModel answers a load conversation's request from what it carries: a request without
// function_call_output asks for the first numpy round, one with one output for the second, and
// one with two outputs gets the final message quoting the last output.
func loadModel(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var conv int
	in := gjson.GetBytes(body, "input")
	if _, err := fmt.Sscanf(firstUserText(in), "conversation %d:", &conv); err != nil {
		http.Error(w, "load model: no conversation number in "+string(body), http.StatusBadRequest)
		return
	}
	outs := gjson.GetBytes(body, `input.#(type=="function_call_output")#.output`).Array()
	var answer map[string]any
	switch len(outs) {
	case 0:
		answer = fakemodel.Responses(testModel, usage(10, 5), runCode(fmt.Sprintf("call_%d_a", conv),
			fmt.Sprintf("import numpy as np\nprint(int(np.arange(%d).size * 0 + %d))", conv+1, conv*3)))
	case 1:
		answer = fakemodel.Responses(testModel, usage(20, 5), runCode(fmt.Sprintf("call_%d_b", conv),
			fmt.Sprintf("import numpy as np\nprint(int(np.int64(%d)))", conv*3+1)))
	default:
		answer = fakemodel.Responses(testModel, usage(30, 5), fakemodel.Message("done "+strings.TrimSuffix(outs[len(outs)-1].String(), "\n")))
	}
	b, err := json.Marshal(answer)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

// firstUserText returns the Responses input's text: the string input, or the first user
// message's string content.
func firstUserText(in gjson.Result) string {
	if in.Type == gjson.String {
		return in.String()
	}
	return in.Get(`#(role=="user").content`).String()
}
