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
	n := loadConversations
	if v := os.Getenv("CODEINTERP_LOAD_CONVERSATIONS"); v != "" {
		var err error
		n, err = strconv.Atoi(v)
		require.NoError(t, err, "CODEINTERP_LOAD_CONVERSATIONS=%q", v)
	}
	env := NewEnv(t, EnvOptions{Configure: func(c *configv1.Config) {
		c.Sandbox.MaxContainers = uint32(2 * n)
		c.Sandbox.MaxContainersPerIdentity = 16
	}})
	env.Model.Handle("/v1/responses", loadModel)
	env.Fronts(t, func(t *testing.T, s *Stack) {
		var (
			wg   sync.WaitGroup
			mu   sync.Mutex
			errs []string
		)
		for i := range n {
			wg.Go(func() {
				if err := loadConversation(s, i); err != nil {
					mu.Lock()
					errs = append(errs, err.Error())
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		assert.Empty(t, errs, "every one of %d concurrent conversations succeeds", n)
	})
}

// loadConversation runs conversation i: one request whose loop runs two numpy rounds.
func loadConversation(s *Stack, i int) error {
	c := s.Client(fmt.Sprintf("sk-load-%d", i))
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
