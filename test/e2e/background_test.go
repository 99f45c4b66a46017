package e2e

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	configv1 "github.com/codeinterp/codeinterp/api/codeinterp/config/v1"
	"github.com/codeinterp/codeinterp/test/e2e/fakemodel"
)

// Issue 24, item 3: background: true with the hosted tool returned the raw function_call of
// the internal function when polled; the code never ran. The server now answers queued at
// once and runs the loop detached: polling shows the whole answer, a background stream is
// resumed by sequence number, cancel stops the run, and the runs are bounded per caller.
func TestBackgroundResponses(t *testing.T) {
	env := NewEnv(t, EnvOptions{Configure: func(c *configv1.Config) {
		c.Responses = &configv1.Responses{MaxBackgroundPerIdentity: 1}
	}})
	env.Fronts(t, func(t *testing.T, s *Stack) {
		m := newModel(t, s.Model)
		t.Run("poll", func(t *testing.T) { testBackgroundPoll(t, s, m) })
		t.Run("stream resumed", func(t *testing.T) { testBackgroundStream(t, s, m) })
		t.Run("cancel and bound", func(t *testing.T) {
			testBackgroundCancel(t, s, m, cancelHooks{beforeCancel: func(t *testing.T, client openai.Client) {
				_, err := client.Responses.New(t.Context(), askBackground("one more"))
				e := apiError(t, err, "a second background response of the caller")
				assert.Equal(t, http.StatusTooManyRequests, e.StatusCode, "over max_background_per_identity: %s", errorView(e))
				assert.Equal(t, "rate_limit_exceeded", e.Code, "%s", errorView(e))
			}})
		})
		assert.Zero(t, m.pending(), "every scripted answer was used")
	})
}

// askBackground is ask with background: true.
func askBackground(input string) responses.ResponseNewParams {
	p := ask(input)
	p.Background = openai.Bool(true)
	return p
}

// pollUntil polls GET until the response leaves queued and in_progress, and returns it.
func pollUntil(t *testing.T, client openai.Client, id string) *responses.Response {
	t.Helper()
	var got *responses.Response
	require.Eventually(t, func() bool {
		r, err := client.Responses.Get(t.Context(), id, responses.ResponseGetParams{})
		require.NoError(t, err, "poll %s", id)
		got = r
		return r.Status != responses.ResponseStatusQueued && r.Status != responses.ResponseStatusInProgress
	}, 20*time.Second, 50*time.Millisecond, "response %s ends", id)
	return got
}

func testBackgroundPoll(t *testing.T, s *Stack, m *model) {
	m.clear()
	mark := len(m.Requests())
	m.script(responsesPath,
		responsesReply(usage(10, 5), runCode("call_1", "print(6 * 7)")),
		responsesReply(usage(20, 7), fakemodel.Message("in the background")))
	client := s.Client("sk-bg-poll")
	created, err := client.Responses.New(t.Context(), askBackground("compute"))
	require.NoError(t, err, "create")
	assert.Equal(t, responses.ResponseStatusQueued, created.Status, "the create answers queued at once: %s", created.RawJSON())
	assert.True(t, created.Background, "background")
	require.NotEmpty(t, created.ID)

	got := pollUntil(t, client, created.ID)
	assert.Equal(t, responses.ResponseStatusCompleted, got.Status, "%s", got.RawJSON())
	assert.Equal(t, created.ID, got.ID, "the answer keeps its id")
	require.Len(t, got.Output, 2, "the whole answer: %s", got.RawJSON())
	assert.Equal(t, "code_interpreter_call", got.Output[0].Type, "the code ran: %s", got.RawJSON())
	assert.Equal(t, "42\n", got.Output[0].AsCodeInterpreterCall().Outputs[0].Logs, "its output")
	assert.Equal(t, "in the background", outputText(got.Output[1]))
	require.Len(t, got.Tools, 1)
	assert.Equal(t, "code_interpreter", got.Tools[0].Type, "the hosted tool, not the internal function")

	reqs := m.since(mark)
	require.Len(t, reqs, 2, "the server sent the first round and the follow-up")
	assert.False(t, gjson.GetBytes(reqs[0].Body, "background").Exists(), "the model gets no background: %s", reqs[0].Body)
	assert.Equal(t, "function", gjson.GetBytes(reqs[0].Body, "tools.0.type").String(), "the model gets the internal function")
	assert.Equal(t, "Bearer sk-bg-poll", reqs[0].Header.Get("Authorization"), "with the caller's credential")

	// A continuation from the response reaches the upstream as one from its last round.
	m.script(responsesPath, responsesReply(usage(30, 3), fakemodel.Message("continued")))
	next := ask("and then?")
	next.PreviousResponseID = openai.String(created.ID)
	cont, err := client.Responses.New(t.Context(), next)
	require.NoError(t, err, "continue from the background response")
	assert.Equal(t, "continued", outputText(cont.Output[0]))
	reqs = m.since(mark)
	require.Len(t, reqs, 3)
	last := fakemodel.Responses(testModel, usage(20, 7), fakemodel.Message("in the background"))["id"]
	assert.Equal(t, last, gjson.GetBytes(reqs[2].Body, "previous_response_id").String(),
		"the continuation names the upstream's last round, not the background response's id")
}

func testBackgroundStream(t *testing.T, s *Stack, m *model) {
	m.clear()
	m.script(responsesPath,
		responsesReply(usage(10, 5), runCode("call_1", "import time\ntime.sleep(1)\nprint(6 * 7)")),
		responsesReply(usage(20, 7), fakemodel.Message("streamed in the background")))
	client := s.Client("sk-bg-stream")
	ctx := t.Context()
	stream := client.Responses.NewStreaming(ctx, askBackground("compute"))
	var first []responses.ResponseStreamEventUnion
	for len(first) < 2 && stream.Next() {
		first = append(first, stream.Current())
	}
	require.NoError(t, stream.Err(), "the create's stream")
	// The client drops the stream after response.queued; the run goes on.
	require.NoError(t, stream.Close())
	require.Len(t, first, 2, "the create's stream begins with response.created and response.queued: %v", eventTypes(first))
	assert.Equal(t, "response.created", first[0].Type)
	assert.Equal(t, "response.queued", first[1].Type)
	id := first[0].Response.ID
	require.NotEmpty(t, id)

	collect := func(p responses.ResponseGetParams) []responses.ResponseStreamEventUnion {
		st := client.Responses.GetStreaming(ctx, id, p)
		var evs []responses.ResponseStreamEventUnion
		for st.Next() {
			evs = append(evs, st.Current())
		}
		require.NoError(t, st.Err(), "retrieve %s as a stream", id)
		require.NoError(t, st.Close())
		return evs
	}
	// Resumed while the code runs: the stream follows the run to its end.
	rest := collect(responses.ResponseGetParams{StartingAfter: openai.Int(first[1].SequenceNumber)})
	require.NotEmpty(t, rest, "the resumed stream")
	assert.Equal(t, "response.in_progress", rest[0].Type, "the resumed stream goes on after response.queued")
	assert.Equal(t, "response.completed", rest[len(rest)-1].Type, "the resumed stream ends with the answer")

	all := collect(responses.ResponseGetParams{})
	require.Len(t, all, len(first)+len(rest), "the uninterrupted stream: %v", eventTypes(all))
	for i, ev := range all {
		assert.Equal(t, int64(i), ev.SequenceNumber, "sequence_number of event %d (%s)", i, ev.Type)
	}
	for i, ev := range rest {
		assert.JSONEq(t, all[len(first)+i].RawJSON(), ev.RawJSON(), "resumed event %d is the uninterrupted one", i)
	}
	done := all[len(all)-1].Response
	require.Len(t, done.Output, 2, "the answer in response.completed: %s", done.RawJSON())
	assert.Equal(t, "code_interpreter_call", done.Output[0].Type)
	assert.Equal(t, "streamed in the background", outputText(done.Output[1]))
}

// cancelHooks are what testBackgroundCancel does just before the create and the cancel.
type cancelHooks struct {
	beforeCreate, beforeCancel func(t *testing.T, client openai.Client)
}

func testBackgroundCancel(t *testing.T, s *Stack, m *model, hooks cancelHooks) {
	m.clear()
	markResponses := len(m.RequestsTo(responsesPath))
	ctx := t.Context()
	// The code ticks into a file of its container: once the run is stopped the file stops growing.
	m.script(responsesPath, responsesReply(usage(10, 5), runCode("call_1",
		"import time\nfor i in range(250):\n    open('/mnt/data/ticks', 'a').write('x')\n    time.sleep(0.1)\nprint('not cancelled')")))
	client := s.Client("sk-bg-cancel", option.WithMaxRetries(0))
	made, err := client.Containers.New(ctx, openai.ContainerNewParams{Name: "background"})
	require.NoError(t, err, "create a container")
	// Uploaded first, the file is in the container's table, which a listing looks at live.
	_, err = client.Containers.Files.New(ctx, made.ID, openai.ContainerFileNewParams{File: openai.File(strings.NewReader("x"), "ticks", "text/plain")})
	require.NoError(t, err, "upload the ticks file")
	p := askBackground("tick")
	p.Tools = []responses.ToolUnionParam{containerTool(made.ID)}
	if hooks.beforeCreate != nil {
		hooks.beforeCreate(t, client)
	}
	created, err := client.Responses.New(ctx, p)
	require.NoError(t, err, "create")
	ticks := func() int {
		list, err := client.Containers.Files.List(ctx, made.ID, openai.ContainerFileListParams{})
		require.NoError(t, err, "list the container's files")
		for _, f := range list.Data {
			if f.Path == "/mnt/data/ticks" {
				return int(f.Bytes)
			}
		}
		return 0
	}
	require.Eventually(t, func() bool { return ticks() > 1 }, 10*time.Second, 100*time.Millisecond, "the code runs")

	if hooks.beforeCancel != nil {
		hooks.beforeCancel(t, client)
	}
	cancelled, err := client.Responses.Cancel(ctx, created.ID)
	require.NoError(t, err, "cancel")
	assert.Equal(t, responses.ResponseStatusCancelled, cancelled.Status, "cancel answers the cancelled response")
	got := pollUntil(t, client, created.ID)
	assert.Equal(t, responses.ResponseStatusCancelled, got.Status, "%s", got.RawJSON())
	// The sandbox run is stopped: the file stops growing, long before the code's 25s.
	var last int
	require.Eventually(t, func() bool {
		n := ticks()
		stopped := n == last
		last = n
		return stopped
	}, 10*time.Second, 500*time.Millisecond, "the cancelled run stops ticking")
	assert.Less(t, last, 200, "the run was stopped early")
	assert.Len(t, m.RequestsTo(responsesPath)[markResponses:], 1, "no follow-up after the cancel")

	_, err = client.Responses.Cancel(ctx, created.ID)
	require.NoError(t, err, "cancelling a cancelled response answers it")
	require.NoError(t, client.Containers.Delete(ctx, made.ID), "delete the container")
}

// testBackgroundFleet runs the background scenarios through a fleet whose front sends each
// request to the next replica: the response is polled, its stream resumed and it is
// cancelled on replicas other than the one running it, through the store they share.
func testBackgroundFleet(t *testing.T, f *Fleet, s *Stack, m *model) {
	t.Run("poll", func(t *testing.T) { testBackgroundPoll(t, s, m) })
	t.Run("stream resumed", func(t *testing.T) { testBackgroundStream(t, s, m) })
	var runner int
	t.Run("cancel on another replica", func(t *testing.T) {
		testBackgroundCancel(t, s, m, cancelHooks{
			beforeCreate: func(*testing.T, openai.Client) { runner = f.front.nextTarget() },
			beforeCancel: func(t *testing.T, client openai.Client) {
				for f.front.nextTarget() == runner {
					_, err := client.Models.List(t.Context())
					require.NoError(t, err, "a request to move the front on")
				}
			},
		})
	})
	assert.Zero(t, m.pending(), "every scripted answer was used")
}
