package e2e

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/codeinterp/codeinterp/test/e2e/fakemodel"
)

// Issue 24, its last items: the stream of a running background response is live. GET
// /v1/responses/{id}?stream=true (with starting_after) and the create with stream: true get
// each event as the run records it, and end with the terminal event; a client that leaves the
// create's stream leaves the run going. The model's second round is held until the client has
// read the code call's events: a stream answered only once the run is over would never get
// them, and the round would be answered by the guard's expiry instead.
func TestBackgroundLiveStreams(t *testing.T) {
	env := NewEnv(t, EnvOptions{})
	env.Fronts(t, func(t *testing.T, s *Stack) {
		m := newModel(t, s.Model)
		t.Run("get", func(t *testing.T) { testBackgroundLiveGet(t, s, m) })
		t.Run("create", func(t *testing.T) { testBackgroundLiveCreate(t, s, m) })
		assert.Zero(t, m.pending(), "every scripted answer was used")
	})
}

// heldRound is a scripted model round answered only once release is called (or, so that a
// broken server fails the test rather than hanging it, after a long guard).
type heldRound struct {
	release  chan struct{}
	released atomic.Bool // the test released it, before the guard expired
}

func newHeldRound() *heldRound { return &heldRound{release: make(chan struct{})} }

func (h *heldRound) reply(r reply) reply {
	return func(req *http.Request, body []byte) (int, any) {
		select {
		case <-h.release:
			h.released.Store(true)
		case <-time.After(30 * time.Second):
		}
		return r(req, body)
	}
}

// scriptHeld scripts a code round, then a final round held by the returned heldRound.
func scriptHeld(m *model, text string) *heldRound {
	h := newHeldRound()
	m.clear()
	m.script(responsesPath,
		responsesReply(usage(10, 5), runCode("call_1", "print(6 * 7)")),
		h.reply(responsesReply(usage(20, 7), fakemodel.Message(text))))
	return h
}

// readUntilCodeDone reads st until the code call's output item is done, and returns the
// events read.
func readUntilCodeDone(t *testing.T, st interface {
	Next() bool
	Current() responses.ResponseStreamEventUnion
	Err() error
}) []responses.ResponseStreamEventUnion {
	t.Helper()
	var evs []responses.ResponseStreamEventUnion
	for st.Next() {
		ev := st.Current()
		evs = append(evs, ev)
		if ev.Type == "response.output_item.done" && ev.Item.Type == "code_interpreter_call" {
			return evs
		}
	}
	require.NoError(t, st.Err(), "the stream")
	require.Fail(t, "the stream ended before the code call was done", "%v", eventTypes(evs))
	return nil
}

func testBackgroundLiveGet(t *testing.T, s *Stack, m *model) {
	held := scriptHeld(m, "live in the background")
	client := s.Client("sk-bg-live-get")
	ctx := t.Context()
	created, err := client.Responses.New(ctx, askBackground("compute"))
	require.NoError(t, err, "create")

	st := client.Responses.GetStreaming(ctx, created.ID, responses.ResponseGetParams{StartingAfter: openai.Int(1)})
	evs := readUntilCodeDone(t, st)
	assert.True(t, strings.HasPrefix(eventTypes(evs)[0], "response.in_progress"), "starting_after 1 goes on after response.queued: %v", eventTypes(evs))
	var sawCode bool
	for _, ev := range evs {
		sawCode = sawCode || strings.HasPrefix(ev.Type, "response.code_interpreter_call.")
	}
	assert.True(t, sawCode, "the code call's events came while the run waits for the model: %v", eventTypes(evs))
	close(held.release)
	for st.Next() {
		evs = append(evs, st.Current())
	}
	require.NoError(t, st.Err(), "the live stream")
	require.NoError(t, st.Close())
	assert.True(t, held.released.Load(), "the model's last round waited for the client to read the code call")
	for i, ev := range evs {
		assert.Equal(t, int64(i+2), ev.SequenceNumber, "sequence_number of event %d (%s)", i, ev.Type)
	}
	last := evs[len(evs)-1]
	require.Equal(t, "response.completed", last.Type, "the live stream ends with the answer: %v", eventTypes(evs))
	assert.Equal(t, created.ID, last.Response.ID)
	require.Len(t, last.Response.Output, 2, "%s", last.Response.RawJSON())
	assert.Equal(t, "live in the background", outputText(last.Response.Output[1]))
}

func testBackgroundLiveCreate(t *testing.T, s *Stack, m *model) {
	held := scriptHeld(m, "created live")
	client := s.Client("sk-bg-live-create")
	ctx := t.Context()
	stream := client.Responses.NewStreaming(ctx, askBackground("compute"))
	evs := readUntilCodeDone(t, stream)
	types := eventTypes(evs)
	require.GreaterOrEqual(t, len(types), 3, "%v", types)
	assert.Equal(t, []string{"response.created", "response.queued", "response.in_progress"}, types[:3], "the create's stream follows the run")
	assert.Equal(t, responses.ResponseStatusQueued, evs[0].Response.Status, "response.created")
	id := evs[0].Response.ID
	for i, ev := range evs {
		assert.Equal(t, int64(i), ev.SequenceNumber, "sequence_number of event %d (%s)", i, ev.Type)
	}
	// The client leaves while the model is held: the run is not cancelled.
	require.NoError(t, stream.Close())
	close(held.release)
	got := pollUntil(t, client, id)
	assert.Equal(t, responses.ResponseStatusCompleted, got.Status, "the run went on after the client left: %s", got.RawJSON())
	assert.True(t, held.released.Load(), "the model's last round waited for the client to read the code call")

	// Resumed after the last event the client read: the rest, to the end.
	after := evs[len(evs)-1].SequenceNumber
	st := client.Responses.GetStreaming(ctx, id, responses.ResponseGetParams{StartingAfter: openai.Int(after)})
	var rest []responses.ResponseStreamEventUnion
	for st.Next() {
		rest = append(rest, st.Current())
	}
	require.NoError(t, st.Err(), "resume %s", id)
	require.NoError(t, st.Close())
	require.NotEmpty(t, rest, "the resumed stream")
	assert.Equal(t, after+1, rest[0].SequenceNumber, "the resumed stream goes on after %d", after)
	assert.Equal(t, "response.completed", rest[len(rest)-1].Type, "%v", eventTypes(rest))
	assert.Equal(t, "created live", outputText(rest[len(rest)-1].Response.Output[1]))
}
