package loop

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"

	"github.com/codeinterp/codeinterp/pkg/sandbox"
	"github.com/codeinterp/codeinterp/pkg/sandbox/sandboxtest"
	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/schema/chat"
	schemaresponses "github.com/codeinterp/codeinterp/pkg/schema/responses"
	"github.com/codeinterp/codeinterp/pkg/store"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fakeProvider is the tests' sandbox backend: in-memory containers whose runs print "42\n",
// or answer as run says when it is set (before the runs).
type fakeProvider struct {
	*sandboxtest.Provider
	run func(code string) (sandbox.Result, error)
}

func newFakeProvider() *fakeProvider {
	p := &fakeProvider{Provider: &sandboxtest.Provider{}}
	p.Provider.Run = func(_ context.Context, _ *sandboxtest.Container, code string) (sandbox.Result, error) {
		if p.run == nil {
			return sandbox.Result{Stdout: "42\n"}, nil
		}
		return p.run(code)
	}
	return p
}

func (p *fakeProvider) counts() (created, deleted int, codes []string) {
	return p.Created(), p.Deleted(), p.Codes()
}

// fakeModel answers follow-up calls from a script and records their bodies.
type fakeModel struct {
	mu      sync.Mutex
	answers []scripted
	bodies  [][]byte
	headers []http.Header
}

type scripted struct {
	status int
	body   string
	delay  time.Duration
	header http.Header // extra response headers
}

func (m *fakeModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	m.mu.Lock()
	m.bodies = append(m.bodies, body)
	m.headers = append(m.headers, r.Header.Clone())
	var a scripted
	if len(m.answers) > 0 {
		a, m.answers = m.answers[0], m.answers[1:]
	} else {
		a = scripted{status: 500, body: `{"error":{"message":"script exhausted"}}`}
	}
	m.mu.Unlock()
	if a.delay > 0 {
		select {
		case <-time.After(a.delay):
		case <-r.Context().Done():
			return
		}
	}
	for k, v := range a.header {
		w.Header()[k] = v
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(a.status)
	_, _ = io.WriteString(w, a.body)
}

func (m *fakeModel) sent() [][]byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([][]byte(nil), m.bodies...)
}

// fixture is an engine wired to a fake sandbox and a fake model.
type fixture struct {
	engine   *Engine
	provider *fakeProvider
	manager  *sandbox.Manager
	model    *fakeModel
	url      string
	// stream receives the event stream of the last request made whose client asked for one.
	stream *bytes.Buffer
}

// The surfaces the tests run requests on.
var (
	respSurface schema.Surface = schemaresponses.Surface{}
	chatSurface schema.Surface = chat.Surface{}
)

// streamed returns what a client that asked for a stream gets for res: the event stream the
// request's Sink received, or res's JSON when it received none.
func (f *fixture) streamed(res Response) (status int, contentType string, body []byte) {
	if f.stream != nil && f.stream.Len() > 0 {
		return http.StatusOK, "text/event-stream", f.stream.Bytes()
	}
	return res.Status, res.Header.Get("Content-Type"), res.Body
}

func newFixture(t *testing.T, answers ...scripted) *fixture {
	t.Helper()
	p := newFakeProvider()
	mgr := sandbox.NewManager(p, sandbox.ManagerConfig{}, zaptest.NewLogger(t))
	model := &fakeModel{answers: answers}
	srv := httptest.NewServer(model)
	n := 0
	var idMu sync.Mutex
	e := New(mgr, Config{Log: zaptest.NewLogger(t), NewID: func(prefix string) string {
		idMu.Lock()
		defer idMu.Unlock()
		n++
		return fmt.Sprintf("%s%d", prefix, n)
	}})
	t.Cleanup(func() {
		e.Close()
		srv.Close()
		require.NoError(t, mgr.Close(context.Background()))
	})
	return &fixture{engine: e, provider: p, manager: mgr, model: model, url: srv.URL + "/v1/responses"}
}

// request rewrites a client body and returns the loop request for a first answer.
func (f *fixture) request(t *testing.T, s schema.Surface, client string, first string) Request {
	t.Helper()
	x, err := s.NewExchange([]byte(client), schema.Options{})
	require.NoError(t, err, "rewrite %s", client)
	require.True(t, x.Request().Found)
	r := Request{
		Exchange: x,
		URL:      f.url,
		Header:   http.Header{"Authorization": {"Bearer sk-test"}, "X-Codeinterp-Followup": {"v1.1.sig"}},
		First:    []byte(first),
		Sandbox:  sandbox.AcquireRequest{Identity: "id-1"},
	}
	f.stream = nil
	if x.Request().Stream {
		f.stream = &bytes.Buffer{}
		r.Sink = x.Events(f.stream)
	}
	return r
}

const responsesClient = `{"model":"m","include":["code_interpreter_call.outputs"],"input":"compute 40+2","tools":[{"type":"code_interpreter","container":{"type":"auto"}}]}`

func respCall(id, code string, inTok int) string {
	args, _ := json.Marshal(map[string]string{"code": code})
	return fmt.Sprintf(`{"id":"resp_%s","object":"response","created_at":1,"status":"completed","model":"m","output":[{"type":"function_call","id":"fc_%s","call_id":"call_%s","name":"code_interpreter","arguments":%q,"status":"completed"}],"tools":[{"type":"function","name":"code_interpreter","parameters":{}}],"usage":{"input_tokens":%d,"output_tokens":5,"total_tokens":%d}}`,
		id, id, id, string(args), inTok, inTok+5)
}

func respText(id, text string) string {
	return fmt.Sprintf(`{"id":"resp_%s","object":"response","created_at":1,"status":"completed","model":"m","output":[{"type":"message","id":"msg_%s","status":"completed","role":"assistant","content":[{"type":"output_text","text":%q,"annotations":[]}]}],"tools":[{"type":"function","name":"code_interpreter","parameters":{}}],"usage":{"input_tokens":20,"output_tokens":3,"total_tokens":23}}`,
		id, id, text)
}

func parseResponse(t *testing.T, body []byte) responses.Response {
	t.Helper()
	var r responses.Response
	require.NoError(t, json.Unmarshal(body, &r), "parse %s", body)
	return r
}

func TestOneRoundResponses(t *testing.T) {
	f := newFixture(t, scripted{status: 200, body: respText("2", "The answer is 42.")})
	loops := 0
	req := f.request(t, respSurface, responsesClient, respCall("1", "print(40+2)", 10))
	req.Sandbox.Identity = "" // an anonymous caller's container is ephemeral
	req.OnLoop = func() { loops++ }
	res := f.engine.Run(context.Background(), req)

	require.Equal(t, http.StatusOK, res.Status, "body: %s", res.Body)
	assert.Equal(t, StopDone, res.Stop)
	assert.Equal(t, 1, loops, "OnLoop is called once")
	assert.Equal(t, 1, res.Rounds)
	r := parseResponse(t, res.Body)
	require.Len(t, r.Output, 2, "body: %s", res.Body)
	ci := r.Output[0].AsCodeInterpreterCall()
	assert.Equal(t, "code_interpreter_call", r.Output[0].Type)
	assert.Equal(t, "print(40+2)", ci.Code)
	assert.Equal(t, "completed", string(ci.Status))
	assert.True(t, strings.HasPrefix(ci.ContainerID, "cntr_"), "container id %q", ci.ContainerID)
	require.Len(t, ci.Outputs, 1)
	assert.Equal(t, "42\n", ci.Outputs[0].Logs)
	assert.Equal(t, "The answer is 42.", r.OutputText())
	assert.Equal(t, int64(30), r.Usage.InputTokens, "usage is summed over rounds")
	assert.Equal(t, int64(38), r.Usage.TotalTokens)
	assert.NotContains(t, string(res.Body), `"function_call"`, "the internal call never reaches the client")

	sent := f.model.sent()
	require.Len(t, sent, 1)
	input := gjson.GetBytes(sent[0], "input")
	require.True(t, input.IsArray(), "a string input becomes a list: %s", sent[0])
	items := input.Array()
	require.Len(t, items, 3)
	assert.Equal(t, "function_call", items[1].Get("type").String())
	assert.Equal(t, "function_call_output", items[2].Get("type").String())
	assert.Equal(t, "call_1", items[2].Get("call_id").String())
	assert.Equal(t, "42\n", items[2].Get("output").String())
	h := f.model.headers[0]
	assert.Equal(t, "Bearer sk-test", h.Get("Authorization"))
	assert.Equal(t, "v1.1.sig", h.Get("X-Codeinterp-Followup"))
	assert.Equal(t, "application/json", h.Get("Content-Type"))

	assert.Eventually(t, func() bool { _, d, _ := f.provider.counts(); return d == 1 }, 5*time.Second, 10*time.Millisecond,
		"the ephemeral sandbox is deleted after the reply")
}

func TestNoCallIsFinalAtOnce(t *testing.T) {
	f := newFixture(t)
	req := f.request(t, respSurface, responsesClient, respText("1", "hello"))
	req.OnLoop = func() { t.Error("OnLoop must not be called without a call") }
	res := f.engine.Run(context.Background(), req)
	require.Equal(t, http.StatusOK, res.Status)
	assert.Equal(t, StopDone, res.Stop)
	assert.Equal(t, 0, res.Rounds)
	assert.Empty(t, f.model.sent(), "no follow-up")
	created, _, _ := f.provider.counts()
	assert.Zero(t, created, "no sandbox is created when no code runs")
	assert.Equal(t, "code_interpreter", gjson.GetBytes(res.Body, "tools.0.type").String(), "the hosted tool is echoed: %s", res.Body)
}

func TestTwoRoundsAndErrorsFedBack(t *testing.T) {
	f := newFixture(t,
		scripted{status: 200, body: respCall("2", "print(1/1)", 30)},
		scripted{status: 200, body: respText("3", "done")})
	f.provider.run = func(code string) (sandbox.Result, error) {
		if code == "print(1/0)" {
			return sandbox.Result{Error: &sandbox.Error{Name: "ZeroDivisionError", Value: "division by zero",
				Traceback: "Traceback (most recent call last):\n  Cell In[1], line 1\nZeroDivisionError: division by zero"}}, nil
		}
		return sandbox.Result{Stdout: "1.0\n"}, nil
	}
	res := f.engine.Run(context.Background(), f.request(t, respSurface, responsesClient, respCall("1", "print(1/0)", 10)))
	require.Equal(t, http.StatusOK, res.Status, "body: %s", res.Body)
	assert.Equal(t, 2, res.Rounds)
	r := parseResponse(t, res.Body)
	require.Len(t, r.Output, 3, "two ci items and the message, in order: %s", res.Body)
	assert.Equal(t, "print(1/0)", r.Output[0].AsCodeInterpreterCall().Code)
	assert.Contains(t, r.Output[0].AsCodeInterpreterCall().Outputs[0].Logs, "ZeroDivisionError")
	assert.Equal(t, "print(1/1)", r.Output[1].AsCodeInterpreterCall().Code)
	assert.Equal(t, r.Output[0].AsCodeInterpreterCall().ContainerID, r.Output[1].AsCodeInterpreterCall().ContainerID, "one sandbox per request")
	sent := f.model.sent()
	require.Len(t, sent, 2)
	assert.Contains(t, gjson.GetBytes(sent[0], "input.2.output").String(), "ZeroDivisionError: division by zero", "the error is fed back")
	created, _, _ := f.provider.counts()
	assert.Equal(t, 1, created)
}

func TestFailuresBecomeFixedTexts(t *testing.T) {
	tests := []struct {
		name     string
		run      func(string) (sandbox.Result, error)
		failNew  error
		args     string
		wantText string
	}{
		{name: "unavailable", failNew: errors.New("no bwrap"), wantText: TextSandboxUnavailable},
		{name: "lost", run: func(string) (sandbox.Result, error) { return sandbox.Result{}, sandbox.ErrLost }, wantText: TextSandboxLost},
		{name: "timeout", run: func(string) (sandbox.Result, error) {
			return sandbox.Result{Stdout: "partial\n"}, sandbox.ErrTimeout
		}, wantText: "[execution timed out after"},
		{name: "invalid arguments", args: `"print(1)"`, wantText: TextInvalidArguments},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, scripted{status: 200, body: respText("2", "sorry")})
			f.provider.run = tt.run
			f.provider.FailCreate(tt.failNew)
			first := respCall("1", "print(1)", 10)
			if tt.args != "" {
				first = strings.Replace(first, `"{\"code\":\"print(1)\"}"`, fmt.Sprintf("%q", tt.args), 1)
			}
			res := f.engine.Run(context.Background(), f.request(t, respSurface, responsesClient, first))
			require.Equal(t, http.StatusOK, res.Status, "body: %s", res.Body)
			r := parseResponse(t, res.Body)
			require.Len(t, r.Output, 2, "body: %s", res.Body)
			ci := r.Output[0].AsCodeInterpreterCall()
			assert.Equal(t, "failed", string(ci.Status), "status of a %s call", tt.name)
			require.NotEmpty(t, ci.Outputs)
			assert.Contains(t, ci.Outputs[0].Logs, tt.wantText)
			sent := f.model.sent()
			require.Len(t, sent, 1)
			assert.Contains(t, gjson.GetBytes(sent[0], "input.2.output").String(), tt.wantText, "the model is told")
		})
	}
}

func TestMaxRoundsEndsWithText(t *testing.T) {
	answers := []scripted{}
	for i := 2; i <= 3; i++ {
		answers = append(answers, scripted{status: 200, body: respCall(fmt.Sprint(i), fmt.Sprintf("print(%d)", i), 10)})
	}
	answers = append(answers, scripted{status: 200, body: respText("4", "final")})
	f := newFixture(t, answers...)
	req := f.request(t, respSurface, responsesClient, respCall("1", "print(1)", 10))
	req.MaxRounds = 3
	res := f.engine.Run(context.Background(), req)
	require.Equal(t, http.StatusOK, res.Status, "body: %s", res.Body)
	assert.Equal(t, StopMaxRounds, res.Stop)
	assert.Equal(t, 3, res.Rounds)
	sent := f.model.sent()
	require.Len(t, sent, 3)
	assert.False(t, gjson.GetBytes(sent[1], "tool_choice").Exists(), "earlier rounds keep the client's (absent) tool_choice")
	assert.Equal(t, "none", gjson.GetBytes(sent[2], "tool_choice").String(), "the last follow-up makes the model answer in text")
	assert.Contains(t, gjson.GetBytes(sent[2], "input.#(type==\"function_call_output\")#.output|@reverse|0").String(), TextRoundLimit)
	r := parseResponse(t, res.Body)
	assert.Equal(t, "final", r.OutputText())
}

func TestMaxRoundsDropsALateCall(t *testing.T) {
	f := newFixture(t, scripted{status: 200, body: respCall("2", "print(2)", 10)})
	req := f.request(t, respSurface, responsesClient, respCall("1", "print(1)", 10))
	req.MaxRounds = 1
	res := f.engine.Run(context.Background(), req)
	require.Equal(t, http.StatusOK, res.Status, "body: %s", res.Body)
	assert.Equal(t, StopMaxRounds, res.Stop)
	assert.NotContains(t, string(res.Body), "function_call", "a call the model makes after the limit is dropped")
	_, _, codes := f.provider.counts()
	assert.Equal(t, []string{"print(1)"}, codes)
}

func TestRepeatedCallIsNotRun(t *testing.T) {
	f := newFixture(t,
		scripted{status: 200, body: respCall("2", "print(40+2)", 10)},
		scripted{status: 200, body: respText("3", "42")})
	res := f.engine.Run(context.Background(), f.request(t, respSurface, responsesClient, respCall("1", "print(40+2)", 10)))
	require.Equal(t, http.StatusOK, res.Status, "body: %s", res.Body)
	assert.Equal(t, StopRepeat, res.Stop)
	_, _, codes := f.provider.counts()
	assert.Equal(t, []string{"print(40+2)"}, codes, "the repeat is not run (call ids differ, the code does not)")
	sent := f.model.sent()
	require.Len(t, sent, 2)
	assert.Contains(t, gjson.GetBytes(sent[1], "input.4.output").String(), TextRepeated)
	assert.Equal(t, "none", gjson.GetBytes(sent[1], "tool_choice").String())
}

func TestUpstreamErrorInRoundTwo(t *testing.T) {
	f := newFixture(t, scripted{status: 500, body: `{"error":{"message":"overloaded","type":"server_error"}}`})
	req := f.request(t, respSurface, responsesClient, respCall("1", "print(1)", 10))
	req.Sandbox.Identity = "" // an anonymous caller's container is ephemeral
	res := f.engine.Run(context.Background(), req)
	assert.Equal(t, 500, res.Status)
	assert.Equal(t, StopUpstreamError, res.Stop)
	assert.Equal(t, "overloaded", gjson.GetBytes(res.Body, "error.message").String())
	assert.Eventually(t, func() bool { _, d, _ := f.provider.counts(); return d == 1 }, 5*time.Second, 10*time.Millisecond,
		"the ephemeral sandbox is deleted on the failure path too")
}

func TestUpstreamErrorKeepsRetryHeaders(t *testing.T) {
	f := newFixture(t, scripted{status: 429, body: `{"error":{"message":"slow down","type":"rate_limit_error"}}`, header: http.Header{
		"Retry-After": {"7"}, "Retry-After-Ms": {"6500"}, "X-Request-Id": {"req_9"},
		"X-Ratelimit-Remaining-Tokens": {"0"}, "Set-Cookie": {"s=1"}, "Openai-Organization": {"org-1"},
	}})
	res := f.engine.Run(context.Background(), f.request(t, respSurface, responsesClient, respCall("1", "print(1)", 10)))
	require.Equal(t, 429, res.Status, "body: %s", res.Body)
	for k, want := range map[string]string{"Retry-After": "7", "Retry-After-Ms": "6500", "X-Request-Id": "req_9", "X-Ratelimit-Remaining-Tokens": "0", "Content-Type": "application/json"} {
		assert.Equal(t, want, res.Header.Get(k), "header %s of the error answer", k)
	}
	assert.Empty(t, res.Header.Get("Set-Cookie"), "other upstream headers are not copied")
	assert.Empty(t, res.Header.Get("Openai-Organization"), "other upstream headers are not copied")
}

func TestUpstreamNonJSONErrorIsWrapped(t *testing.T) {
	f := newFixture(t, scripted{status: 503, body: `upstream connect error`})
	res := f.engine.Run(context.Background(), f.request(t, respSurface, responsesClient, respCall("1", "print(1)", 10)))
	assert.Equal(t, 503, res.Status)
	assert.Contains(t, gjson.GetBytes(res.Body, "error.message").String(), "upstream connect error")
}

func TestMixedTurnReturnsClientCall(t *testing.T) {
	f := newFixture(t)
	client := `{"model":"m","input":"x","tools":[{"type":"code_interpreter","container":{"type":"auto"}},{"type":"function","name":"get_weather","parameters":{}}]}`
	first := `{"id":"resp_1","object":"response","created_at":1,"status":"completed","model":"m","output":[` +
		`{"type":"function_call","id":"fc_1","call_id":"call_1","name":"code_interpreter","arguments":"{\"code\":\"print(1)\"}","status":"completed"},` +
		`{"type":"function_call","id":"fc_2","call_id":"call_2","name":"get_weather","arguments":"{}","status":"completed"}],"tools":[],"usage":{"input_tokens":1,"output_tokens":1,"total_tokens":2}}`
	res := f.engine.Run(context.Background(), f.request(t, respSurface, client, first))
	require.Equal(t, http.StatusOK, res.Status, "body: %s", res.Body)
	assert.Equal(t, StopClientCall, res.Stop)
	assert.Empty(t, f.model.sent(), "the client's call is pending: no follow-up")
	r := parseResponse(t, res.Body)
	require.Len(t, r.Output, 2)
	assert.Equal(t, "code_interpreter_call", r.Output[0].Type)
	assert.Equal(t, "get_weather", r.Output[1].AsFunctionCall().Name)
	assert.Equal(t, "resp_1", gjson.GetBytes(res.Body, "id").String(), "the answer a continuation names")
	require.Len(t, res.Pending, 1, "the internal call's output is left for the continuation")
	assert.Equal(t, "call_1", res.Pending[0].CallID, "pending output's call id")
	assert.Equal(t, "42\n", res.Pending[0].Output, "pending output's text (the fake sandbox prints 42)")
}

func TestForcedToolChoiceAppliesToRoundOneOnly(t *testing.T) {
	f := newFixture(t, scripted{status: 200, body: respText("2", "ok")})
	client := `{"model":"m","input":"x","tool_choice":{"type":"code_interpreter"},"tools":[{"type":"code_interpreter","container":{"type":"auto"}}]}`
	res := f.engine.Run(context.Background(), f.request(t, respSurface, client, respCall("1", "print(1)", 10)))
	require.Equal(t, http.StatusOK, res.Status, "body: %s", res.Body)
	sent := f.model.sent()
	require.Len(t, sent, 1)
	assert.False(t, gjson.GetBytes(sent[0], "tool_choice").Exists(), "a forced choice is dropped after round 1: %s", sent[0])
	assert.Equal(t, "code_interpreter", gjson.GetBytes(res.Body, "tool_choice.type").String(), "the client's tool_choice is echoed")
}

func TestDeadlineReturnsIncomplete(t *testing.T) {
	f := newFixture(t, scripted{status: 200, body: respText("2", "late"), delay: 10 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	res := f.engine.Run(ctx, f.request(t, respSurface, responsesClient, respCall("1", "print(1)", 10)))
	require.Equal(t, http.StatusOK, res.Status, "body: %s", res.Body)
	assert.Equal(t, StopDeadline, res.Stop)
	r := parseResponse(t, res.Body)
	assert.Equal(t, "incomplete", string(r.Status))
	require.Len(t, r.Output, 1, "the code that ran is shown: %s", res.Body)
	assert.Equal(t, "code_interpreter_call", r.Output[0].Type)
}

func TestCanceledStopsAtOnce(t *testing.T) {
	f := newFixture(t, scripted{status: 200, body: respText("2", "late"), delay: 10 * time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	req := f.request(t, respSurface, responsesClient, respCall("1", "print(1)", 10))
	req.Sandbox.Identity = "" // an anonymous caller's container is ephemeral
	res := f.engine.Run(ctx, req)
	assert.Equal(t, StopCanceled, res.Stop)
	assert.Eventually(t, func() bool { _, d, _ := f.provider.counts(); return d == 1 }, 5*time.Second, 10*time.Millisecond,
		"the ephemeral sandbox is deleted when the client goes away")
}

const chatClient = `{"model":"m","messages":[{"role":"user","content":"compute 40+2"}],"tools":[{"type":"code_interpreter"}]}`

func chatCall(id, code string) string {
	args, _ := json.Marshal(map[string]string{"code": code})
	return fmt.Sprintf(`{"id":"chatcmpl-%s","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_%s","type":"function","function":{"name":"code_interpreter","arguments":%q}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}}`,
		id, id, string(args))
}

func chatText(id, text string) string {
	return fmt.Sprintf(`{"id":"chatcmpl-%s","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":%q},"finish_reason":"stop"}],"usage":{"prompt_tokens":20,"completion_tokens":3,"total_tokens":23}}`, id, text)
}

func TestOneRoundChat(t *testing.T) {
	f := newFixture(t, scripted{status: 200, body: chatText("2", "42")})
	res := f.engine.Run(context.Background(), f.request(t, chatSurface, chatClient, chatCall("1", "print(40+2)")))
	require.Equal(t, http.StatusOK, res.Status, "body: %s", res.Body)
	var c openai.ChatCompletion
	require.NoError(t, json.Unmarshal(res.Body, &c))
	assert.Equal(t, "42", c.Choices[0].Message.Content)
	assert.Equal(t, int64(38), c.Usage.TotalTokens, "usage is summed")
	sent := f.model.sent()
	require.Len(t, sent, 1)
	msgs := gjson.GetBytes(sent[0], "messages").Array()
	require.Len(t, msgs, 3, "user, assistant with tool_calls, tool: %s", sent[0])
	assert.Equal(t, "call_1", msgs[1].Get("tool_calls.0.id").String())
	assert.Equal(t, "tool", msgs[2].Get("role").String())
	assert.Equal(t, "42\n", msgs[2].Get("content").String())
}

func TestStreamingAnswerIsSSE(t *testing.T) {
	f := newFixture(t, scripted{status: 200, body: chatText("2", "42")})
	client := `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"x"}],"tools":[{"type":"code_interpreter"}]}`
	res := f.engine.Run(context.Background(), f.request(t, chatSurface, client, chatCall("1", "print(40+2)")))
	require.Equal(t, http.StatusOK, res.Status, "body: %s", res.Body)
	status, contentType, body := f.streamed(res)
	assert.Equal(t, http.StatusOK, status)
	assert.Equal(t, "text/event-stream", contentType)
	assert.True(t, strings.HasSuffix(string(body), "data: [DONE]\n\n"), "chat streams end with [DONE]: %s", body)
	assert.Equal(t, "application/json", res.Header.Get("Content-Type"), "the loop's own answer is the JSON one")
	assert.JSONEq(t, `{"include_usage":true}`, gjson.GetBytes(f.model.sent()[0], "stream_options").Raw, "a streamed follow-up asks for usage, whatever the client asked")
}

func TestRenderAndCap(t *testing.T) {
	tests := []struct {
		name     string
		give     sandbox.Result
		wantText string
		wantLogs string
	}{
		{"nothing", sandbox.Result{}, TextNoOutput, ""},
		{"stdout and value", sandbox.Result{Stdout: "a\n", Value: "42"}, "a\n42", "a\n42"},
		{"stderr", sandbox.Result{Stderr: "warn\n"}, "[stderr]\nwarn\n", "[stderr]\nwarn\n"},
		{"image only", sandbox.Result{Images: []sandbox.Image{{PNG: []byte{1}}}}, "[1 image was shown to the user]", ""},
		{"files", sandbox.Result{Files: []sandbox.File{{Path: "/mnt/data/a.csv", Size: 3}}}, "[files written: /mnt/data/a.csv (3 bytes)]", "[files written: /mnt/data/a.csv (3 bytes)]"},
		{"files left out", sandbox.Result{Files: []sandbox.File{{Path: "/mnt/data/a.csv", Size: 3}}, FilesNote: "[2 more files written are not listed]"},
			"[files written: /mnt/data/a.csv (3 bytes)]\n[2 more files written are not listed]", "[files written: /mnt/data/a.csv (3 bytes)]\n[2 more files written are not listed]"},
		{"error without traceback", sandbox.Result{Error: &sandbox.Error{Name: "E", Value: "v"}}, "E: v", "E: v"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			text, logs := render(tt.give, 1000)
			assert.Equal(t, tt.wantText, text, "text of %+v", tt.give)
			assert.Equal(t, tt.wantLogs, logs, "logs of %+v", tt.give)
		})
	}
	long := strings.Repeat("é", 1000)
	got := capText(long, 200)
	assert.LessOrEqual(t, len(got), 200)
	assert.Contains(t, got, "bytes cut")
	assert.True(t, strings.HasPrefix(got, "é") && strings.HasSuffix(got, "é"), "cut at rune boundaries: %q", got)
	assert.Equal(t, "short", capText("short", 200))
}

func TestCodeRun(t *testing.T) {
	tests := []struct {
		name     string
		give     sandbox.Result
		timedOut bool
		want     schema.CodeRun
	}{
		{"nothing", sandbox.Result{}, false, schema.CodeRun{}},
		{"streams apart", sandbox.Result{Stdout: "a", Stderr: "warn\n"}, false, schema.CodeRun{Stdout: "a", Stderr: "warn\n"}},
		{"value after stdout", sandbox.Result{Stdout: "a", Value: "42"}, false, schema.CodeRun{Stdout: "a\n42"}},
		{"exception", sandbox.Result{Stderr: "w", Error: &sandbox.Error{Name: "E", Value: "v", Traceback: "Traceback: E: v"}}, false,
			schema.CodeRun{Stderr: "w\nTraceback: E: v", ReturnCode: 1}},
		{"timed out", sandbox.Result{Stdout: "partial"}, true, schema.CodeRun{Stdout: "partial", TimedOut: true}},
		{"capped", sandbox.Result{Stdout: strings.Repeat("x", 2000)}, false, schema.CodeRun{Stdout: capText(strings.Repeat("x", 2000), 1000)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, *codeRun(tt.give, 1000, tt.timedOut), "run of %+v", tt.give)
		})
	}
}

func TestCallsThatDidNotRunNameTheirContainer(t *testing.T) {
	f := newFixture(t, scripted{status: 200, body: respText("2", "ok")})
	first := strings.Replace(respCall("1", "print(1)", 10), `"{\"code\":\"print(1)\"}"`, `"not json"`, 1)
	res := f.engine.Run(context.Background(), f.request(t, respSurface, responsesClient, first))
	require.Equal(t, http.StatusOK, res.Status, "body: %s", res.Body)
	ci := parseResponse(t, res.Body).Output[0].AsCodeInterpreterCall()
	assert.Equal(t, "failed", string(ci.Status))
	assert.True(t, strings.HasPrefix(ci.ContainerID, "cntr_"), "a call with bad arguments still names the request's container, got %q", ci.ContainerID)
	created, _, _ := f.provider.counts()
	assert.Zero(t, created, "naming the container does not start it")
}

func TestStreamingFailureIsFailureEvents(t *testing.T) {
	tests := []struct {
		name    string
		surface schema.Surface
		client  string
		first   string
		want    []string
	}{
		{
			name:    "responses",
			surface: respSurface,
			client:  strings.Replace(responsesClient, `{"model"`, `{"stream":true,"model"`, 1),
			first:   respCall("1", "print(1)", 10),
			want:    []string{"event: response.created", "event: response.in_progress", "event: response.failed", `"message":"overloaded"`},
		},
		{
			name:    "chat",
			surface: chatSurface,
			client:  strings.Replace(chatClient, `{"model"`, `{"stream":true,"model"`, 1),
			first:   chatCall("1", "print(1)"),
			want:    []string{`data: {"error":`, `"message":"overloaded"`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, scripted{status: 500, body: `{"error":{"message":"overloaded","type":"server_error","code":"overloaded"}}`})
			res := f.engine.Run(context.Background(), f.request(t, tt.surface, tt.client, tt.first))
			status, contentType, body := f.streamed(res)
			assert.Equal(t, http.StatusOK, status, "a stream reports the failure in the stream")
			assert.Equal(t, StopUpstreamError, res.Stop)
			assert.Equal(t, "text/event-stream", contentType)
			for _, w := range tt.want {
				assert.Contains(t, string(body), w, "%s stream: %s", tt.name, body)
			}
		})
	}
}

// Two internal calls in one turn that share a call_id: the loop runs one and refuses the other,
// and the client still gets the answer with an item for each.
func TestRunDuplicateCallIDsStillAnswer(t *testing.T) {
	f := newFixture(t, scripted{status: 200, body: respText("2", "ok")})
	first := `{"id":"resp_1","object":"response","created_at":1,"status":"completed","model":"m","output":[` +
		`{"type":"function_call","id":"fc_1","call_id":"call_x","name":"code_interpreter","arguments":"{\"code\":\"print(1)\"}","status":"completed"},` +
		`{"type":"function_call","id":"fc_2","call_id":"call_x","name":"code_interpreter","arguments":"{\"code\":\"print(2)\"}","status":"completed"}],` +
		`"tools":[],"usage":{"input_tokens":1,"output_tokens":1,"total_tokens":2}}`
	res := f.engine.Run(context.Background(), f.request(t, respSurface, responsesClient, first))
	require.Equal(t, http.StatusOK, res.Status, "body: %s", res.Body)
	var statuses []string
	for _, it := range gjson.GetBytes(res.Body, "output").Array() {
		if it.Get("type").String() == "code_interpreter_call" {
			statuses = append(statuses, it.Get("status").String())
		}
	}
	assert.Equal(t, []string{"completed", "failed"}, statuses, "one item per call, the duplicate refused: %s", res.Body)
}

// A sandbox lost mid-run tells the model "the next call starts in a fresh sandbox"; the model's
// retry of the same code is not a repeat: it runs.
func TestRunRetryAfterLostSandboxRuns(t *testing.T) {
	f := newFixture(t,
		scripted{status: 200, body: respCall("2", "print(1)", 10)},
		scripted{status: 200, body: respText("3", "ok")})
	n := 0
	f.provider.run = func(string) (sandbox.Result, error) {
		n++
		if n == 1 {
			return sandbox.Result{}, sandbox.ErrLost
		}
		return sandbox.Result{Stdout: "1\n"}, nil
	}
	res := f.engine.Run(context.Background(), f.request(t, respSurface, responsesClient, respCall("1", "print(1)", 10)))
	require.Equal(t, http.StatusOK, res.Status, "body: %s", res.Body)
	_, _, codes := f.provider.counts()
	assert.Equal(t, []string{"print(1)", "print(1)"}, codes, "the retry in the fresh sandbox should run")
	assert.NotEqual(t, StopRepeat, res.Stop)
}

// allowed_tools with mode "required": after round 1 the forcing is dropped but the client's
// restriction to its allowed tools stays.
func TestRunAllowedToolsRestrictionKept(t *testing.T) {
	f := newFixture(t, scripted{status: 200, body: respText("2", "ok")})
	client := `{"model":"m","input":"x","tool_choice":{"type":"allowed_tools","mode":"required","tools":[{"type":"code_interpreter"}]},` +
		`"tools":[{"type":"code_interpreter","container":{"type":"auto"}},{"type":"function","name":"delete_everything","parameters":{}}]}`
	res := f.engine.Run(context.Background(), f.request(t, respSurface, client, respCall("1", "print(1)", 10)))
	require.Equal(t, http.StatusOK, res.Status, "body: %s", res.Body)
	sent := f.model.sent()
	require.Len(t, sent, 1)
	tc := gjson.GetBytes(sent[0], "tool_choice")
	assert.Equal(t, "allowed_tools", tc.Get("type").String(), "round 2 must still restrict tools: %s", sent[0])
	assert.Equal(t, "auto", tc.Get("mode").String(), "round 2 must not force a call: %s", sent[0])
}

// The finishing follow-up sets tool_choice "none"; the upstream echoes it, but the client sees
// the choice it sent.
func TestRunEchoesClientToolChoice(t *testing.T) {
	last := strings.Replace(respText("2", "final"), `"tools":`, `"tool_choice":"none","tools":`, 1)
	f := newFixture(t, scripted{status: 200, body: last})
	first := strings.Replace(respCall("1", "print(1)", 10), `"tools":`, `"tool_choice":"auto","tools":`, 1)
	req := f.request(t, respSurface, responsesClient, first)
	req.MaxRounds = 1
	res := f.engine.Run(context.Background(), req)
	require.Equal(t, http.StatusOK, res.Status, "body: %s", res.Body)
	assert.Equal(t, "auto", gjson.GetBytes(res.Body, "tool_choice").String(), "echo of the client's choice: %s", res.Body)
}

func TestMixedTurnChatReportsPendingCalls(t *testing.T) {
	f := newFixture(t)
	first := strings.Replace(chatCall("1", "print(1)"), `}}]},`, `}},{"id":"call_w","type":"function","function":{"name":"get_weather","arguments":"{}"}}]},`, 1)
	res := f.engine.Run(context.Background(), f.request(t, chatSurface, chatClient, first))
	require.Equal(t, http.StatusOK, res.Status, "body: %s", res.Body)
	assert.Equal(t, StopClientCall, res.Stop, "body: %s", res.Body)
	assert.Empty(t, f.model.sent(), "the client's call is pending: no follow-up")
	assert.Equal(t, []store.PendingCall{{CallID: "call_1", Arguments: `{"code":"print(1)"}`, Output: "42\n"}}, res.Pending, "the internal call left out of the answer")
	assert.Equal(t, `["call_w"]`, gjson.GetBytes(res.Body, "choices.0.message.tool_calls.#.id").Raw, "the answer shows the client's call only: %s", res.Body)
}

// A mixed turn whose internal calls share a call_id leaves one pending output for that id, as a
// follow-up would: the continuation must not answer one call twice.
func TestMixedTurnPendingOncePerCallID(t *testing.T) {
	f := newFixture(t)
	first := `{"id":"resp_1","object":"response","created_at":1,"status":"completed","model":"m","output":[` +
		`{"type":"function_call","id":"fc_1","call_id":"call_x","name":"code_interpreter","arguments":"{\"code\":\"print(1)\"}","status":"completed"},` +
		`{"type":"function_call","id":"fc_2","call_id":"call_x","name":"code_interpreter","arguments":"{\"code\":\"print(2)\"}","status":"completed"},` +
		`{"type":"function_call","id":"fc_3","call_id":"call_w","name":"get_weather","arguments":"{}","status":"completed"}],` +
		`"tools":[],"usage":{"input_tokens":1,"output_tokens":1,"total_tokens":2}}`
	res := f.engine.Run(context.Background(), f.request(t, respSurface, responsesClient, first))
	require.Equal(t, http.StatusOK, res.Status, "body: %s", res.Body)
	require.Equal(t, StopClientCall, res.Stop)
	ids := map[string]int{}
	for _, p := range res.Pending {
		ids[p.CallID]++
	}
	assert.Equal(t, map[string]int{"call_x": 1}, ids, "one pending output per call id: %+v", res.Pending)
}

// Without include the client's items show "outputs": null, and the model still reads the
// output; the files a run wrote are listed to the model and cited in the message after it.
func TestOutputsNullAndFilesCited(t *testing.T) {
	f := newFixture(t, scripted{status: 200, body: respText("2", "Über: [the CSV](sandbox:/mnt/data/out.csv)")})
	f.provider.run = func(string) (sandbox.Result, error) {
		return sandbox.Result{Stdout: "saved\n", Files: []sandbox.File{{ID: "cfile_1", Path: "/mnt/data/out.csv", Size: 5}}}, nil
	}
	client := strings.Replace(responsesClient, `"include":["code_interpreter_call.outputs"],`, "", 1)
	res := f.engine.Run(context.Background(), f.request(t, respSurface, client, respCall("1", "df.to_csv('/mnt/data/out.csv')", 10)))
	require.Equal(t, http.StatusOK, res.Status, "body: %s", res.Body)
	assert.Equal(t, "null", gjson.GetBytes(res.Body, "output.0.outputs").Raw, "outputs without include: %s", res.Body)

	sent := f.model.sent()
	require.Len(t, sent, 1)
	assert.Equal(t, "saved\n[files written: /mnt/data/out.csv (5 bytes)]", gjson.GetBytes(sent[0], "input.2.output").String(), "the model reads the output and the files")

	ann := gjson.GetBytes(res.Body, "output.1.content.0.annotations.0")
	require.True(t, ann.Exists(), "a citation: %s", res.Body)
	assert.Equal(t, "container_file_citation", ann.Get("type").String())
	assert.Equal(t, gjson.GetBytes(res.Body, "output.0.container_id").String(), ann.Get("container_id").String(), "the container the call ran in")
	assert.True(t, strings.HasPrefix(ann.Get("file_id").String(), "cfile_"), "file id %s", ann.Get("file_id"))
	assert.Equal(t, "out.csv", ann.Get("filename").String())
	assert.Equal(t, int64(6), ann.Get("start_index").Int(), "start counts code points")
	assert.Equal(t, int64(6+len("[the CSV](sandbox:/mnt/data/out.csv)")), ann.Get("end_index").Int())
}

// panicSink is a Sink that panics once the request's sandbox exists: a bug met mid-loop.
type panicSink struct {
	schema.Sink
	p *fakeProvider
}

func (s panicSink) Event(ev schema.Event) error {
	if s.p.Created() > 0 {
		panic("sink bug")
	}
	return s.Sink.Event(ev)
}

// A panic in the loop still releases the request's sandbox lease: an ephemeral sandbox is
// deleted as after any answer (the processor recovers the panic and answers the stream).
func TestPanicReleasesTheLease(t *testing.T) {
	f := newFixture(t, scripted{status: 200, body: respText("2", "The answer is 42.")})
	req := f.request(t, respSurface, strings.Replace(responsesClient, `{"model"`, `{"stream":true,"model"`, 1), respCall("1", "print(40+2)", 10))
	req.Sandbox.Identity = ""
	req.Sink = panicSink{Sink: req.Sink, p: f.provider}
	require.PanicsWithValue(t, "sink bug", func() { f.engine.Run(context.Background(), req) })
	assert.Eventually(t, func() bool { _, d, _ := f.provider.counts(); return d == 1 }, 5*time.Second, 10*time.Millisecond,
		"the ephemeral sandbox is deleted: its lease was released")
}
