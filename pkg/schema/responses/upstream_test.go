package responses_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/schema/responses"
)

// streamAnswer feeds the event stream an upstream sends for answer to a new UpstreamStream of
// x, each event's delta to sink as the given round's EventDelta, and returns the answer the
// stream ended with (streamRound, uncut).
func streamAnswer(t *testing.T, x schema.Exchange, sink schema.Sink, round int, answer []byte) []byte {
	t.Helper()
	return streamRound(t, x, sink, round, answer, nil, "", func(string) {})
}

// clientItems is what a client that accumulates a Responses stream gets: the items of the
// output_item.done events by output_index, the text of the output_text deltas per item, and
// the final response.
func clientItems(t *testing.T, stream []byte) (items map[int]string, texts map[string]string, final string) {
	t.Helper()
	items, texts = map[int]string{}, map[string]string{}
	added := map[int]bool{}
	for i, ev := range parseSSE(t, stream) {
		var d struct {
			Seq      int             `json:"sequence_number"`
			Index    *int            `json:"output_index"`
			ItemID   string          `json:"item_id"`
			Delta    string          `json:"delta"`
			Item     json.RawMessage `json:"item"`
			Response json.RawMessage `json:"response"`
		}
		require.NoError(t, json.Unmarshal([]byte(ev.data), &d), "event %d", i)
		assert.Equal(t, i, d.Seq, "event %d's sequence_number", i)
		switch ev.typ {
		case "response.output_item.added":
			assert.False(t, added[*d.Index], "item %d added twice", *d.Index)
			assert.Equal(t, len(added), *d.Index, "item added in order")
			added[*d.Index] = true
		case "response.output_item.done":
			assert.True(t, added[*d.Index], "item %d done before added", *d.Index)
			items[*d.Index] = string(d.Item)
		case "response.output_text.delta":
			texts[d.ItemID] += d.Delta
		case "response.completed":
			final = string(d.Response)
		}
	}
	return items, texts, final
}

func compact(t *testing.T, s string) string {
	t.Helper()
	var b bytes.Buffer
	require.NoError(t, json.Compact(&b, []byte(s)), "compact %s", s)
	return b.String()
}

// A round whose upstream answer streams relays its items as they arrive (the internal call as
// a code_interpreter_call, never as itself): a client that accumulates the stream gets exactly
// the items of the plain answer, in order.
func TestEventsRelayStreamedRounds(t *testing.T) {
	x, err := responses.Surface{}.NewExchange([]byte(eventsClient), schema.Options{})
	require.NoError(t, err)
	msg := func(id, text string) string {
		return `{"type":"message","id":"` + id + `","role":"assistant","status":"completed","content":[{"type":"output_text","text":"` + text + `","annotations":[],"logprobs":[]}]}`
	}
	reasoning := `{"type":"reasoning","id":"rs_2","summary":[{"type":"summary_text","text":"think"}]}`
	r1 := answer("1", call("a", "print(1)"))
	r2 := answer("2", reasoning, msg("msg_2", "Now the next step."), call("c", "x = 3"), msg("msg_2b", "after the call"))
	r3 := answer("3", msg("msg_3", "The answer is 3."))
	done := func(id, code, out string) schema.CodeCall {
		return schema.CodeCall{ID: id, Status: "completed", Code: code, ContainerID: "cntr_1", Outputs: []schema.CodeOutput{{Type: "logs", Logs: out}}}
	}
	a, c := done("ci_a", "print(1)", "1\n"), done("ci_c", "x = 3", "")
	rounds := []schema.Round{{Body: r1, Calls: []schema.CodeCall{a}}, {Body: r2, Calls: []schema.CodeCall{c}}, {Body: r3}}
	final, err := x.Final(rounds, "")
	require.NoError(t, err)

	var buf bytes.Buffer
	sink := x.Events(&buf)
	emit := func(ev schema.Event) { require.NoError(t, sink.Event(ev), "event %v", ev.Kind) }
	for i, r := range rounds {
		body := r.Body
		if i > 0 {
			before := buf.Len()
			body = streamAnswer(t, x, sink, i, r.Body)
			assert.JSONEq(t, string(r.Body), string(body), "round %d: the stream's answer", i)
			relayed := buf.String()[before:]
			first := firstText(t, r.Body, i)
			assert.Contains(t, relayed, `"delta":"`+first+`"`, "round %d: the text streamed before its answer", i)
			assert.NotContains(t, relayed, `"name":"code_interpreter"`, "round %d: the internal call is not relayed", i)
		}
		emit(schema.Event{Kind: schema.EventRound, Round: i, Body: body})
		for _, cc := range r.Calls {
			started := cc
			started.Status, started.Outputs = "in_progress", []schema.CodeOutput{}
			emit(schema.Event{Kind: schema.EventCallStarted, Round: i, Call: &started})
			emit(schema.Event{Kind: schema.EventCallDone, Round: i, Call: &cc})
		}
	}
	emit(schema.Event{Kind: schema.EventDone, Body: final})

	replay, err := responses.SSE(final)
	require.NoError(t, err)
	gotItems, gotTexts, gotFinal := clientItems(t, buf.Bytes())
	wantItems, wantTexts, wantFinal := clientItems(t, replay)
	require.Len(t, gotItems, len(wantItems), "items\n got: %s\nwant: %s", buf.Bytes(), replay)
	for i := range wantItems {
		assert.Equal(t, compact(t, wantItems[i]), compact(t, gotItems[i]), "item %d", i)
	}
	assert.Equal(t, wantTexts, gotTexts, "the texts the deltas make")
	assert.Equal(t, wantFinal, gotFinal, "the completed response")
}

// firstText returns the text of the first message of answer, which the test streams.
func firstText(t *testing.T, answer []byte, round int) string {
	t.Helper()
	var a struct {
		Output []struct {
			Type    string `json:"type"`
			Content []struct {
				Text string `json:"text"`
			} `json:"content"`
		} `json:"output"`
	}
	require.NoError(t, json.Unmarshal(answer, &a), "round %d", round)
	for _, it := range a.Output {
		if it.Type == "message" {
			return it.Content[0].Text
		}
	}
	t.Fatalf("round %d has no message", round)
	return ""
}

// The upstream stream's answer is the response of its terminal event; the item events before
// it are passed on.
func TestUpstreamStreamAnswer(t *testing.T) {
	tests := []struct {
		name      string
		give      []string
		wantDelta int
		wantBody  string
	}{
		{
			name:      "completed",
			give:      []string{`{"type":"response.created","response":{}}`, `{"type":"response.output_text.delta","output_index":0,"delta":"a"}`, `{"type":"response.completed","response":{"id":"r","output":[]}}`},
			wantDelta: 2, wantBody: `{"id":"r","output":[]}`,
		},
		{
			name:      "failed",
			give:      []string{`{"type":"response.failed","response":{"id":"r","status":"failed"}}`},
			wantDelta: 0, wantBody: `{"id":"r","status":"failed"}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x, err := responses.Surface{}.NewExchange([]byte(eventsClient), schema.Options{})
			require.NoError(t, err)
			us := x.(schema.StreamReader).ReadStream()
			deltas, body := 0, ""
			for _, data := range tt.give {
				d, b, err := us.Event("", []byte(data))
				require.NoError(t, err, "event %s", data)
				deltas += min(len(d), 1)
				body += string(b)
			}
			assert.Equal(t, tt.wantDelta, deltas, "deltas of %q", tt.give)
			assert.Equal(t, tt.wantBody, body, "answer of %q", tt.give)
		})
	}
}

// A malformed upstream stream, or one that reports an error, is an error.
func TestUpstreamStreamMalformed(t *testing.T) {
	tests := []struct {
		name string
		give []string
	}{
		{name: "not json", give: []string{`{"type":`}},
		{name: "error event", give: []string{`{"type":"error","code":"server_error","message":"boom"}`}},
		{name: "completed without response", give: []string{`{"type":"response.completed"}`}},
		{name: "event after the end", give: []string{`{"type":"response.completed","response":{}}`, `{"type":"response.completed","response":{}}`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x, err := responses.Surface{}.NewExchange([]byte(eventsClient), schema.Options{})
			require.NoError(t, err)
			us := x.(schema.StreamReader).ReadStream()
			var gotErr error
			for _, data := range tt.give {
				if _, _, gotErr = us.Event("", []byte(data)); gotErr != nil {
					break
				}
			}
			assert.Error(t, gotErr, "events %q", tt.give)
		})
	}
}
