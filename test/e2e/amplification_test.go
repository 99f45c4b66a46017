package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/pkg/loop"
	"github.com/codeinterp/codeinterp/test/e2e/fakemodel"
)

// amplificationCalls is how many code calls the model's one turn makes in
// TestOutputAmplification, each showing a 1 MB image: 80 MB of base64, more than one ext_proc
// message may carry (max_request_bytes, 64 MiB).
const amplificationCalls = 60

// TestOutputAmplification: one model turn of many calls that each display a large image made
// the answer outgrow the gRPC send limit, and Envoy answered a bare 500. Now the calls beyond
// max_calls_per_turn are not run and the images beyond the output budget are left out, each
// with a marker, and the client gets its answer.
func TestOutputAmplification(t *testing.T) {
	env := NewEnv(t, EnvOptions{})
	env.Model.Handle("/v1/responses", amplificationModel)
	env.Fronts(t, func(t *testing.T, s *Stack) {
		c := s.Client("sk-amplify")
		resp, err := c.Responses.New(context.Background(), ask("show me 60 large images"))
		require.NoError(t, err, "the request of %d image calls gets an answer", amplificationCalls)

		var calls, notRun, images int
		var logs strings.Builder
		for _, it := range resp.Output {
			if it.Type != "code_interpreter_call" {
				continue
			}
			calls++
			for _, o := range it.Outputs {
				switch o.Type {
				case "image":
					images++
					assert.Greater(t, len(o.URL), 1<<20, "a shown image is whole")
				case "logs":
					logs.WriteString(o.Logs + "\n")
					if strings.HasPrefix(o.Logs, "[not run: one turn may run at most") {
						notRun++
					}
				}
			}
		}
		assert.Equal(t, amplificationCalls, calls, "every call of the turn is reported")
		assert.Equal(t, amplificationCalls-loop.DefaultMaxCallsPerTurn, notRun, "the calls beyond max_calls_per_turn are not run, and say so")
		assert.Equal(t, 6, images, "the images within the 8 MiB output budget (1.33 MB each as base64)")
		assert.Contains(t, logs.String(), "output limit of this request reached: 1 image not shown to the user", "the client sees the marker")
		assert.Less(t, len(resp.RawJSON()), 10<<20, "the answer is within the output budget and its text")
		assert.Equal(t, "I showed what I could.", resp.OutputText())
	})
}

// amplificationModel asks for amplificationCalls code calls that each show a 1 MB image, and
// answers in text once it has their outputs.
func amplificationModel(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var answer map[string]any
	if outs := gjson.GetBytes(body, `input.#(type=="function_call_output")#`).Array(); len(outs) > 0 {
		answer = fakemodel.Responses(testModel, usage(30, 5), fakemodel.Message("I showed what I could."))
	} else {
		items := make([]fakemodel.Item, amplificationCalls)
		for i := range items {
			code := fmt.Sprintf("class Big:\n    def _repr_png_(self):\n        return b'\\x89PNG' + bytes([%d]) * 1000000\nBig()", i)
			items[i] = runCode(fmt.Sprintf("call_big_%d", i), code)
		}
		answer = fakemodel.Responses(testModel, usage(10, 5), items...)
	}
	b, err := json.Marshal(answer)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}
