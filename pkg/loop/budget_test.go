package loop

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/pkg/sandbox"
)

// respCalls is a Responses answer of one turn that calls the code function n times (call ids
// call_<id>_<i>).
func respCalls(id string, n int) string {
	items := make([]string, n)
	for i := range items {
		args, _ := json.Marshal(map[string]string{"code": fmt.Sprintf("show(%q, %d)", id, i)})
		items[i] = fmt.Sprintf(`{"type":"function_call","id":"fc_%s_%d","call_id":"call_%s_%d","name":"code_interpreter","arguments":%q,"status":"completed"}`, id, i, id, i, args)
	}
	return fmt.Sprintf(`{"id":"resp_%s","object":"response","created_at":1,"status":"completed","model":"m","output":[%s],"tools":[{"type":"function","name":"code_interpreter","parameters":{}}],"usage":{"input_tokens":10,"output_tokens":5,"total_tokens":15}}`,
		id, strings.Join(items, ","))
}

// bigImages makes every run show n images of size bytes each and print a line.
func bigImages(n, size int) func(code string) (sandbox.Result, error) {
	return func(code string) (sandbox.Result, error) {
		imgs := make([]sandbox.Image, n)
		for i := range imgs {
			imgs[i] = sandbox.Image{PNG: make([]byte, size)}
		}
		return sandbox.Result{Stdout: code + "\n", Images: imgs}, nil
	}
}

// One model turn of many calls that each display large images: without a request-wide bound
// every image was base64-appended and the answer outgrew what the server can send. The calls
// beyond max_calls_per_turn are not run, the images beyond the output budget are left out, and
// both say so to the client and the model.
func TestOutputBudget(t *testing.T) {
	f := newFixture(t, scripted{status: 200, body: respText("2", "Here are the charts.")})
	f.provider.run = bigImages(2, 512<<10) // 1 MiB of images per run
	req := f.request(t, respSurface, responsesClient, respCalls("1", 40))
	req.MaxOutputBytes = 4 << 20
	req.MaxCallsPerTurn = 10
	req.MaxImages = 6
	res := f.engine.Run(context.Background(), req)
	require.Equal(t, http.StatusOK, res.Status, "body: %.500s", res.Body)
	assert.Equal(t, 10, res.Calls, "only max_calls_per_turn of the turn's 40 calls run")
	assert.Less(t, len(res.Body), 4<<20+256<<10, "the answer stays within the output budget (4 MiB) plus its text")

	images := gjson.GetBytes(res.Body, `output.#(type=="code_interpreter_call")#.outputs.#(type=="image")#.url`)
	n := 0
	for _, call := range images.Array() {
		n += len(call.Array())
	}
	assert.Equal(t, 5, n, "images within the 4 MiB budget (each ~683 KiB as base64), below max_images 6")
	assert.Contains(t, string(res.Body), "output limit of this request reached: 2 images not shown to the user", "the client sees the marker")
	assert.Contains(t, string(res.Body), fmt.Sprintf(TextCallLimit, 10), "the calls not run say why")

	sent := f.model.sent()
	require.Len(t, sent, 1, "one follow-up")
	outs := gjson.GetBytes(sent[0], `input.#(type=="function_call_output")#.output`).Array()
	require.Len(t, outs, 40, "every call is answered in the follow-up")
	assert.Contains(t, outs[3].String(), "not shown to the user", "the model is told the images were left out")
	assert.Equal(t, fmt.Sprintf(TextCallLimit, 10), outs[39].String(), "the model is told why call 40 did not run")
}

// An answer larger than the server can send Envoy is never sent: the client gets a 502 in
// OpenAI's error shape instead (Envoy answered a bare 500 before), also when it asked for a
// stream.
func TestAnswerTooLargeIs502(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			f := newFixture(t, scripted{status: 200, body: respText("2", "Here are the charts.")})
			f.provider.run = bigImages(1, 256<<10)
			client := responsesClient
			if stream {
				client = strings.Replace(client, `{"model"`, `{"stream":true,"model"`, 1)
			}
			req := f.request(t, respSurface, client, respCalls("1", 8))
			req.MaxAnswerBytes = 1 << 20 // the images alone are ~2.7 MiB as base64
			res := f.engine.Run(context.Background(), req)
			assert.Equal(t, http.StatusBadGateway, res.Status, "stream=%v: status", stream)
			assert.Equal(t, StopAnswerTooLarge, res.Stop, "stream=%v: stop", stream)
			assert.Equal(t, "application/json", res.Header.Get("Content-Type"), "stream=%v: a JSON error", stream)
			assert.Equal(t, "answer_too_large", gjson.GetBytes(res.Body, "error.code").String(), "stream=%v: error shape %s", stream, res.Body)
			assert.Less(t, len(res.Body), 1024, "stream=%v: the error is small", stream)
		})
	}
}

// Runs that time out count against the output budget too: what they printed is cut once the
// budget is spent (it was appended whole, call after call).
func TestTimedOutRunsCountAgainstTheBudget(t *testing.T) {
	f := newFixture(t, scripted{status: 200, body: respText("2", "They all timed out.")})
	f.provider.run = func(code string) (sandbox.Result, error) {
		return sandbox.Result{Stdout: strings.Repeat("x", 15<<10)}, sandbox.ErrTimeout
	}
	req := f.request(t, respSurface, responsesClient, respCalls("1", 16))
	req.MaxOutputBytes = 64 << 10
	res := f.engine.Run(context.Background(), req)
	require.Equal(t, http.StatusOK, res.Status, "body: %.500s", res.Body)
	logs := gjson.GetBytes(res.Body, `output.#(type=="code_interpreter_call")#.outputs.#(type=="logs")#.logs`)
	total := 0
	for _, call := range logs.Array() {
		for _, l := range call.Array() {
			total += len(l.String())
		}
	}
	assert.Less(t, total, 64<<10+16*256, "the logs of 16 timed-out runs stay within the 64 KiB budget (plus markers)")
	assert.Contains(t, string(res.Body), "output limit of this request reached", "the client sees the marker")
}
