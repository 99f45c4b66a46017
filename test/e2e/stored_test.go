package e2e

import (
	"net/http"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/test/e2e/fakemodel"
)

// Issue 24, item 2: responses.retrieve(id) of an answer codeinterp looped showed the upstream's
// raw last round (no code_interpreter_call, the internal function in tools; for a streamed
// answer, named after its first round, the bare function call). The server keeps the assembled
// answer per caller and answers GET, DELETE and input_items for it; every other id goes to the
// model as before.
func TestStoredResponses(t *testing.T) {
	env := NewEnv(t, EnvOptions{})
	env.Fronts(t, func(t *testing.T, s *Stack) {
		m := newModel(t, s.Model)
		for _, v := range variants {
			t.Run(v.String(), func(t *testing.T) {
				m.clear()
				x := &scene{s: s, m: m, v: v, mark: len(m.Requests())}
				testStoredResponse(t, x)
				assert.Zero(t, m.pending(), "%s: every scripted answer was used", v)
			})
		}
	})
}

// TestStoredResponsesFleet is TestStoredResponses through 3 replicas sharing one Redis, each
// request on the next replica: an answer kept by one is served by the others.
func TestStoredResponsesFleet(t *testing.T) {
	f := NewFleet(t, FleetOptions{Replicas: true})
	s := f.Stack()
	m := newModel(t, s.Model)
	for _, v := range variants {
		t.Run(v.String(), func(t *testing.T) {
			m.clear()
			x := &scene{s: s, m: m, v: v, mark: len(m.Requests())}
			testStoredResponse(t, x)
			assert.Zero(t, m.pending(), "%s: every scripted answer was used", v)
		})
	}
	// Background responses share the stored answers' store: the same fleet serves them.
	t.Run("background", func(t *testing.T) { testBackgroundFleet(t, f, s, m) })
}

func testStoredResponse(t *testing.T, x *scene) {
	ctx := t.Context()
	x.m.script(responsesPath,
		responsesReply(usage(10, 5), runCode("call_1", "print(6 * 7)")),
		responsesReply(usage(20, 7), fakemodel.Message("stored "+x.v.String())))
	key := "sk-stored-" + x.v.String()
	p := ask("compute " + x.v.String())
	got := x.responses(t, key, p)
	require.NotEmpty(t, got.ID, "the looped answer has an id")
	mark := len(x.m.Requests())

	client := x.s.Client(key)
	stored, err := client.Responses.Get(ctx, got.ID, responses.ResponseGetParams{})
	require.NoError(t, err, "retrieve %s", got.ID)
	assert.Equal(t, got.ID, stored.ID, "retrieve: the id")
	require.Len(t, stored.Output, 2, "retrieve: the whole answer: %s", stored.RawJSON())
	assert.Equal(t, "code_interpreter_call", stored.Output[0].Type, "retrieve: the code call is there: %s", stored.RawJSON())
	assert.Equal(t, "42\n", stored.Output[0].AsCodeInterpreterCall().Outputs[0].Logs, "retrieve: its output")
	assert.Equal(t, "stored "+x.v.String(), outputText(stored.Output[1]), "retrieve: the model's message")
	require.Len(t, stored.Tools, 1, "retrieve: the tools: %s", stored.RawJSON())
	assert.Equal(t, "code_interpreter", stored.Tools[0].Type, "retrieve: the hosted tool, not the internal function")
	assert.Equal(t, normalized(got.RawJSON()), normalized(stored.RawJSON()), "retrieve: the answer the client got")

	stream := client.Responses.GetStreaming(ctx, got.ID, responses.ResponseGetParams{})
	var events []responses.ResponseStreamEventUnion
	for stream.Next() {
		events = append(events, stream.Current())
	}
	require.NoError(t, stream.Err(), "retrieve %s as a stream", got.ID)
	require.NoError(t, stream.Close())
	replayed := checkResponsesEvents(t, events)
	assert.Equal(t, normalized(got.RawJSON()), normalized(replayed.RawJSON()), "retrieve stream=true: the events rebuild the answer")
	stream = client.Responses.GetStreaming(ctx, got.ID, responses.ResponseGetParams{StartingAfter: openai.Int(int64(len(events) - 2))})
	var tail []responses.ResponseStreamEventUnion
	for stream.Next() {
		tail = append(tail, stream.Current())
	}
	require.NoError(t, stream.Err(), "resume %s after an event", got.ID)
	require.NoError(t, stream.Close())
	require.Len(t, tail, 1, "starting_after: the events after it")
	assert.Equal(t, "response.completed", tail[0].Type, "starting_after: the last event")

	items, err := client.Responses.InputItems.List(ctx, got.ID, responses.InputItemListParams{})
	require.NoError(t, err, "input items of %s", got.ID)
	require.Len(t, items.Data, 1, "input items: the request's input: %s", items.RawJSON())
	assert.Equal(t, "message", items.Data[0].Type, "input items: %s", items.RawJSON())
	assert.Equal(t, "compute "+x.v.String(), gjson.Get(items.RawJSON(), "data.0.content.0.text").String(), "input items: the text")
	assert.Equal(t, items.Data[0].ID, gjson.Get(items.RawJSON(), "first_id").String(), "input items: first_id")
	assert.False(t, items.HasMore, "input items: has_more")

	other := x.s.Client("sk-stored-other-" + x.v.String())
	_, err = other.Responses.Get(ctx, got.ID, responses.ResponseGetParams{})
	require.Error(t, err, "another key's retrieve")
	reqs := x.m.since(mark)
	require.Len(t, reqs, 1, "another key's retrieve goes to the model")
	assert.Equal(t, http.MethodGet, reqs[0].Method, "another key's retrieve: method")
	assert.Equal(t, responsesPath+"/"+got.ID, reqs[0].Path, "another key's retrieve: path")

	x.s.Model.Enqueue(responsesPath+"/resp_never_looped", fakemodel.JSON(fakemodel.Responses(testModel, usage(1, 1), fakemodel.Message("upstream's"))))
	never, err := client.Responses.Get(ctx, "resp_never_looped", responses.ResponseGetParams{})
	require.NoError(t, err, "retrieve of an id never looped")
	assert.Equal(t, "upstream's", outputText(never.Output[0]), "an id never looped: the model's answer")
	assert.Len(t, x.m.since(mark), 2, "an id never looped goes to the model")

	require.NoError(t, client.Responses.Delete(ctx, got.ID), "delete %s", got.ID)
	_, err = client.Responses.Get(ctx, got.ID, responses.ResponseGetParams{})
	e := apiError(t, err, "retrieve after delete")
	assert.Equal(t, http.StatusNotFound, e.StatusCode, "retrieve after delete: %s", errorView(e))
	assert.Len(t, x.m.since(mark), 2, "a deleted id does not reach the model")
}
