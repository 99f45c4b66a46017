package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// The client side of the scenarios: one request sent with the openai-go client, streaming or
// not, and everything the client received checked and parsed into the SDK's types.

// variant says how a scenario's client asks: stream:true through the SDK's streaming API, or
// not.
type variant struct {
	stream bool
}

func (v variant) String() string {
	if v.stream {
		return "stream"
	}
	return "plain"
}

// variants are the two ways every loop scenario is run.
var variants = []variant{{stream: false}, {stream: true}}

// wire records the raw HTTP answer a client request got: its headers and the number of body
// bytes the client read.
type wire struct {
	mu   sync.Mutex
	resp *http.Response
	read atomic.Int64
}

// capture captures the answer of the request it is passed to.
func (w *wire) capture() option.RequestOption {
	return option.WithMiddleware(func(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
		resp, err := next(req)
		if resp != nil {
			w.mu.Lock()
			w.resp = resp
			w.mu.Unlock()
			resp.Body = &countingBody{ReadCloser: resp.Body, n: &w.read}
		}
		return resp, err
	})
}

func (w *wire) response() *http.Response {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.resp
}

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

// checkStreamHeaders checks what issue 5 asks of a replayed event stream's headers:
// text/event-stream, no-cache, and a content-length that is absent or exactly the bytes sent.
func checkStreamHeaders(t *testing.T, w *wire, what string) {
	t.Helper()
	resp := w.response()
	require.NotNil(t, resp, "%s: no HTTP answer captured", what)
	assert.Equal(t, http.StatusOK, resp.StatusCode, "%s: status", what)
	assert.True(t, strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream"),
		"%s: content-type %q", what, resp.Header.Get("Content-Type"))
	assert.Equal(t, "no-cache", resp.Header.Get("Cache-Control"), "%s: cache-control", what)
	if resp.ContentLength >= 0 {
		assert.Equal(t, resp.ContentLength, w.read.Load(), "%s: content-length vs the bytes of the stream", what)
	}
}

// responsesCall sends a Responses request, streaming when v says so, and returns the final
// response: the answer itself, or the response of the stream's response.completed event after
// checking the whole event stream against it. A non-nil error is what the SDK returned
// (an *openai.Error for an HTTP error).
func responsesCall(t *testing.T, v variant, client openai.Client, params responses.ResponseNewParams, opts ...option.RequestOption) (responses.Response, error) {
	t.Helper()
	ctx := t.Context()
	if !v.stream {
		resp, err := client.Responses.New(ctx, params, opts...)
		if err != nil {
			return responses.Response{}, err
		}
		return *resp, nil
	}
	var w wire
	stream := client.Responses.NewStreaming(ctx, params, append(opts, w.capture())...)
	defer stream.Close()
	var events []responses.ResponseStreamEventUnion
	for stream.Next() {
		events = append(events, stream.Current())
	}
	if err := stream.Err(); err != nil {
		return responses.Response{}, err
	}
	checkStreamHeaders(t, &w, "Responses stream")
	if n := len(events); n > 0 && events[n-1].Type == "response.failed" {
		// The native way to report a failure in the middle of an answer: the items streamed
		// before it stay, the failed response has none.
		types := eventTypes(events)
		require.GreaterOrEqual(t, n, 3, "Responses stream: a failed answer's events %v", types)
		require.Equal(t, []string{"response.created", "response.in_progress"}, types[:2], "Responses stream: a failed answer's first events")
		return responses.Response{}, &failedStream{Response: events[n-1].AsResponseFailed().Response}
	}
	return checkResponsesEvents(t, events), nil
}

// failedStream is a Responses stream that ended with response.failed.
type failedStream struct{ Response responses.Response }

func (f *failedStream) Error() string { return "response.failed: " + f.Response.Error.Message }

// checkResponsesEvents checks a Responses event stream as issue 5 describes it (sequence
// numbers from 0; created, in_progress first; response.completed last; for each output item
// its added/done events, and for code_interpreter_call items and messages the native event
// order, with deltas that add up to the item's code or text) and returns the completed
// response.
func checkResponsesEvents(t *testing.T, events []responses.ResponseStreamEventUnion) responses.Response {
	t.Helper()
	require.GreaterOrEqual(t, len(events), 3, "Responses stream: events %v", eventTypes(events))
	for i, ev := range events {
		assert.Equal(t, int64(i), ev.SequenceNumber, "Responses stream: sequence_number of event %d (%s)", i, ev.Type)
	}
	assert.Equal(t, "response.created", events[0].Type, "Responses stream: first event")
	assert.Equal(t, "response.in_progress", events[1].Type, "Responses stream: second event")
	last := events[len(events)-1]
	require.Equal(t, "response.completed", last.Type, "Responses stream: last event (events %v)", eventTypes(events))
	final := last.AsResponseCompleted().Response
	for _, ev := range events[:2] {
		assert.Equal(t, responses.ResponseStatusInProgress, ev.Response.Status, "Responses stream: status in %s", ev.Type)
		assert.Empty(t, ev.Response.Output, "Responses stream: output in %s", ev.Type)
		// They are sent with the first upstream turn; the final answer carries the last
		// turn's id, the one a previous_response_id must name.
		assert.NotEmpty(t, ev.Response.ID, "Responses stream: response id in %s", ev.Type)
		assert.Equal(t, final.Model, ev.Response.Model, "Responses stream: model in %s", ev.Type)
	}

	// Per output index: the event types in order (runs of deltas collapsed) and the deltas.
	perItem := map[int64][]string{}
	deltas := map[int64]string{}
	done := map[int64]string{}
	added := map[int64]responses.ResponseOutputItemUnion{}
	annotations := map[int64][]string{} // the annotation.added events' annotations, per item
	for _, ev := range events[2 : len(events)-1] {
		i := ev.OutputIndex
		types := perItem[i]
		if len(types) == 0 || types[len(types)-1] != ev.Type || !strings.HasSuffix(ev.Type, ".delta") {
			perItem[i] = append(types, ev.Type)
		}
		switch ev.Type {
		case "response.output_item.added":
			added[i] = ev.Item
		case "response.output_item.done":
			done[i] = ev.Item.RawJSON()
		case "response.code_interpreter_call_code.delta", "response.output_text.delta":
			deltas[i] += ev.Delta
		case "response.code_interpreter_call_code.done":
			assert.Equal(t, final.Output[i].Code, ev.Code, "Responses stream: code of code_interpreter_call_code.done %d", i)
		case "response.output_text.done":
			assert.Equal(t, deltas[i], ev.Text, "Responses stream: text of output_text.done %d", i)
		case "response.output_text.annotation.added":
			assert.Equal(t, int64(len(annotations[i])), ev.AnnotationIndex, "Responses stream: annotation_index of an annotation of item %d", i)
			annotations[i] = append(annotations[i], ev.Annotation.RawJSON())
		}
	}
	require.Len(t, perItem, len(final.Output), "Responses stream: items with events vs response.completed output")
	for i, item := range final.Output {
		idx := int64(i)
		require.Contains(t, done, idx, "Responses stream: output_item.done of item %d", i)
		assert.JSONEq(t, item.RawJSON(), done[idx], "Responses stream: output_item.done of item %d vs response.completed", i)
		assert.Equal(t, item.ID, added[idx].ID, "Responses stream: id in output_item.added of item %d", i)
		switch item.Type {
		case "code_interpreter_call":
			want := []string{"response.output_item.added", "response.code_interpreter_call.in_progress"}
			if item.Code != "" {
				want = append(want, "response.code_interpreter_call_code.delta")
			}
			want = append(want, "response.code_interpreter_call_code.done",
				"response.code_interpreter_call.interpreting", "response.code_interpreter_call.completed",
				"response.output_item.done")
			assert.Equal(t, want, perItem[idx], "Responses stream: events of code_interpreter_call %d", i)
			assert.Equal(t, "in_progress", string(added[idx].Status), "Responses stream: status in output_item.added of item %d", i)
			assert.Equal(t, item.Code, deltas[idx], "Responses stream: code deltas of item %d", i)
		case "message":
			// Annotations stream among the deltas, each once its text has arrived, and all before
			// the text is done.
			var types []string
			anns, lastAnn, textDone := 0, -1, -1
			for k, typ := range perItem[idx] {
				switch typ {
				case "response.output_text.annotation.added":
					anns, lastAnn = anns+1, k
					continue
				case "response.output_text.done":
					textDone = k
				}
				if len(types) == 0 || types[len(types)-1] != typ || !strings.HasSuffix(typ, ".delta") {
					types = append(types, typ)
				}
			}
			assert.Equal(t, []string{
				"response.output_item.added", "response.content_part.added",
				"response.output_text.delta", "response.output_text.done", "response.content_part.done",
				"response.output_item.done",
			}, types, "Responses stream: events of message %d", i)
			assert.Equal(t, len(item.Content[0].Annotations), anns, "Responses stream: annotation.added events of message %d", i)
			assert.Less(t, lastAnn, textDone, "Responses stream: the annotations of message %d come before its text is done", i)
			assert.JSONEq(t, annotationsOf(item), "["+strings.Join(annotations[idx], ",")+"]", "Responses stream: the annotation.added events of message %d rebuild its annotations", i)
			assert.Equal(t, outputText(item), deltas[idx], "Responses stream: text deltas of message %d", i)
		default:
			types := perItem[idx]
			assert.Equal(t, "response.output_item.added", types[0], "Responses stream: first event of %s item %d", item.Type, i)
			assert.Equal(t, "response.output_item.done", types[len(types)-1], "Responses stream: last event of %s item %d", item.Type, i)
		}
	}
	return final
}

func eventTypes(events []responses.ResponseStreamEventUnion) []string {
	out := make([]string, len(events))
	for i, ev := range events {
		out[i] = ev.Type
	}
	return out
}

// annotationsOf is the JSON of a message item's first content part's annotations.
func annotationsOf(item responses.ResponseOutputItemUnion) string {
	if a := gjson.Get(item.RawJSON(), "content.0.annotations"); a.IsArray() {
		return a.Raw
	}
	return "[]"
}

// outputText is the text of a message item's output_text parts.
func outputText(item responses.ResponseOutputItemUnion) string {
	var b strings.Builder
	for _, c := range item.Content {
		b.WriteString(c.Text)
	}
	return b.String()
}

// chatCall sends a Chat Completions request, streaming when v says so (accumulating the
// chunks with openai.ChatCompletionAccumulator), and returns the completion.
func chatCall(t *testing.T, v variant, client openai.Client, params openai.ChatCompletionNewParams, opts ...option.RequestOption) (openai.ChatCompletion, error) {
	t.Helper()
	ctx := t.Context()
	if !v.stream {
		resp, err := client.Chat.Completions.New(ctx, params, opts...)
		if err != nil {
			return openai.ChatCompletion{}, err
		}
		return *resp, nil
	}
	var w wire
	stream := client.Chat.Completions.NewStreaming(ctx, params, append(opts, w.capture())...)
	defer stream.Close()
	var acc openai.ChatCompletionAccumulator
	var chunks []openai.ChatCompletionChunk
	for stream.Next() {
		chunk := stream.Current()
		chunks = append(chunks, chunk)
		require.True(t, acc.AddChunk(chunk), "Chat stream: accumulate chunk %d", len(chunks))
	}
	if err := stream.Err(); err != nil {
		return openai.ChatCompletion{}, err
	}
	checkStreamHeaders(t, &w, "Chat stream")
	require.NotEmpty(t, chunks, "Chat stream: chunks")
	for i, c := range chunks {
		assert.Equal(t, "chat.completion.chunk", string(c.Object), "Chat stream: object of chunk %d", i)
		assert.Equal(t, chunks[0].ID, c.ID, "Chat stream: id of chunk %d", i)
	}
	if params.StreamOptions.IncludeUsage.Value {
		lastChunk := chunks[len(chunks)-1]
		assert.Empty(t, lastChunk.Choices, "Chat stream: the usage chunk has no choices")
		assert.Positive(t, lastChunk.Usage.TotalTokens, "Chat stream: usage in the last chunk")
	}
	return acc.ChatCompletion, nil
}

// apiError returns err as the SDK's API error, failing the test when it is not one.
func apiError(t *testing.T, err error, what string) *openai.Error {
	t.Helper()
	var apiErr *openai.Error
	require.True(t, errors.As(err, &apiErr), "%s: want an *openai.Error, got %T: %v", what, err, err)
	return apiErr
}

// errorView is what a client sees of an API error, for comparing two runs.
func errorView(e *openai.Error) string {
	return fmt.Sprintf("%d %s", e.StatusCode, e.RawJSON())
}

// ids matches the ids that legitimately differ between two runs of one scenario: the
// code_interpreter_call item ids and the container ids the server mints.
var ids = regexp.MustCompile(`\b(ci|cntr)_[0-9a-f]{16,}\b`)

// normalized returns raw JSON with every minted id replaced by its kind and its rank of first
// appearance (ci_1, cntr_1, ...), so that two runs of a scenario compare equal exactly when
// they have the same shape, the same ids in the same places, and the same everything else.
func normalized(raw string) string {
	// A plain answer is named after the last upstream turn, a stream after the first (its
	// response.created goes out before the last turn exists); both are right.
	if gjson.Get(raw, "object").String() == "response" {
		raw, _ = sjson.Delete(raw, "id")
	}
	for i := range int(gjson.Get(raw, "#").Int()) {
		if gjson.Get(raw, fmt.Sprintf("%d.object", i)).String() == "response" {
			raw, _ = sjson.Delete(raw, fmt.Sprintf("%d.id", i))
		}
	}
	seen := map[string]string{}
	counts := map[string]int{}
	return ids.ReplaceAllStringFunc(raw, func(id string) string {
		if r, ok := seen[id]; ok {
			return r
		}
		kind, _, _ := strings.Cut(id, "_")
		counts[kind]++
		r := fmt.Sprintf("%s_%d", kind, counts[kind])
		seen[id] = r
		return r
	})
}

// chatView is what a client can know of a chat completion, whether it parsed one JSON answer
// or accumulated a stream: the fields the accumulator fills.
type chatView struct {
	ID, Model, Object, SystemFingerprint string
	Created                              int64
	Choices                              []chatChoiceView
	Usage                                [5]int64
}

type chatChoiceView struct {
	Index                            int64
	FinishReason, Role               string
	Content, Refusal                 string
	ToolCalls                        [][4]string
	ContentLogprobs, RefusalLogprobs int
}

func viewChat(c openai.ChatCompletion) string {
	v := chatView{
		ID: c.ID, Model: c.Model, Object: string(c.Object), SystemFingerprint: c.SystemFingerprint, Created: c.Created,
		Usage: [5]int64{
			c.Usage.PromptTokens, c.Usage.CompletionTokens, c.Usage.TotalTokens,
			c.Usage.PromptTokensDetails.CachedTokens, c.Usage.CompletionTokensDetails.ReasoningTokens,
		},
	}
	for _, ch := range c.Choices {
		cv := chatChoiceView{
			Index: ch.Index, FinishReason: ch.FinishReason, Role: string(ch.Message.Role),
			Content: ch.Message.Content, Refusal: ch.Message.Refusal,
			ContentLogprobs: len(ch.Logprobs.Content), RefusalLogprobs: len(ch.Logprobs.Refusal),
		}
		for _, tc := range ch.Message.ToolCalls {
			cv.ToolCalls = append(cv.ToolCalls, [4]string{tc.ID, tc.Type, tc.Function.Name, tc.Function.Arguments})
		}
		v.Choices = append(v.Choices, cv)
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return "marshal chat view: " + err.Error()
	}
	return string(b)
}
