package responses

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/codeinterp/codeinterp/pkg/schema/internal/openai"
	"github.com/codeinterp/codeinterp/pkg/schema/internal/schematest"
	"github.com/openai/openai-go/v3/responses"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
)

// sseReplay is a client's view of a Responses stream: the output items rebuilt from the
// added/delta events, the items of the output_item.done events, and the terminal response.
type sseReplay struct {
	Types      []string
	Started    []string // raw responses of response.created and response.in_progress
	Rebuilt    []map[string]any
	Done       []map[string]any
	Terminal   string // raw response of the last event
	TerminalAs string // its event type
	// Deltas concatenates every delta per "<output_index>/<event type>/<content or summary index>".
	Deltas map[string]string
}

// sseReplayResponses replays a Responses stream as a client would, checking each event against
// the state built so far.
func sseReplayResponses(t testing.TB, events []responses.ResponseStreamEventUnion) sseReplay {
	t.Helper()
	r := sseReplay{Deltas: map[string]string{}}
	str := func(v any) string {
		s, _ := v.(string)
		return s
	}
	list := func(m map[string]any, k string) []any {
		l, _ := m[k].([]any)
		return l
	}
	for k, ev := range events {
		raw := ev.RawJSON()
		r.Types = append(r.Types, ev.Type)
		require.Equal(t, int64(k), ev.SequenceNumber, "sequence_number of event %d (%s)", k, ev.Type)
		require.NotNil(t, ev.AsAny(), "event type %q unknown to the SDK", ev.Type)
		oi := int(ev.OutputIndex)
		var item map[string]any
		if strings.HasPrefix(ev.Type, "response.") && gjson.Get(raw, "output_index").Exists() {
			if ev.Type == "response.output_item.added" {
				require.Equal(t, len(r.Rebuilt), oi, "output_index of %s", raw)
				r.Rebuilt = append(r.Rebuilt, schematest.SSEMap(t, gjson.Get(raw, "item").Raw))
				r.Done = append(r.Done, nil)
			}
			require.Less(t, oi, len(r.Rebuilt), "event %d refers to an item not added: %.300s", k, raw)
			item = r.Rebuilt[oi]
			if id := gjson.Get(raw, "item_id"); id.Exists() {
				require.Equal(t, str(item["id"]), id.String(), "item_id of %.300s", raw)
			}
		}
		key := strconv.Itoa(oi) + "/" + ev.Type + "/" + strconv.Itoa(int(ev.ContentIndex+ev.SummaryIndex))
		if strings.HasSuffix(ev.Type, ".delta") {
			r.Deltas[key] += ev.Delta
		}
		switch ev.Type {
		case "response.created", "response.in_progress":
			require.Equal(t, len(r.Started), k, "%s must open the stream", ev.Type)
			r.Started = append(r.Started, gjson.Get(raw, "response").Raw)
		case "response.completed", "response.incomplete", "response.failed":
			require.Equal(t, len(events)-1, k, "%s must end the stream", ev.Type)
			r.Terminal, r.TerminalAs = gjson.Get(raw, "response").Raw, ev.Type
		case "response.output_item.added":
		case "response.code_interpreter_call.in_progress", "response.code_interpreter_call.interpreting",
			"response.code_interpreter_call.completed":
		case "response.code_interpreter_call_code.delta":
			item["code"] = str(item["code"]) + ev.Delta
		case "response.code_interpreter_call_code.done":
			assert.Equal(t, str(item["code"]), ev.Code, "code.done of item %d", oi)
		case "response.function_call_arguments.delta":
			item["arguments"] = str(item["arguments"]) + ev.Delta
		case "response.function_call_arguments.done":
			assert.Equal(t, str(item["arguments"]), ev.Arguments, "arguments.done of item %d", oi)
		case "response.custom_tool_call_input.delta":
			item["input"] = str(item["input"]) + ev.Delta
		case "response.custom_tool_call_input.done":
			assert.Equal(t, str(item["input"]), ev.Input, "input.done of item %d", oi)
		case "response.content_part.added":
			require.Len(t, list(item, "content"), int(ev.ContentIndex), "content_index of %.300s", raw)
			item["content"] = append(list(item, "content"), schematest.SSEMap(t, gjson.Get(raw, "part").Raw))
		case "response.output_text.delta", "response.refusal.delta":
			field := strings.TrimSuffix(strings.TrimPrefix(ev.Type, "response.output_"), ".delta")
			field = strings.TrimPrefix(field, "response.")
			part := list(item, "content")[ev.ContentIndex].(map[string]any)
			part[field] = str(part[field]) + ev.Delta
		case "response.output_text.annotation.added":
			part := list(item, "content")[ev.ContentIndex].(map[string]any)
			require.Len(t, list(part, "annotations"), int(ev.AnnotationIndex), "annotation_index of %.300s", raw)
			part["annotations"] = append(list(part, "annotations"), schematest.SSEMap(t, gjson.Get(raw, "annotation").Raw))
		case "response.output_text.done":
			part := list(item, "content")[ev.ContentIndex].(map[string]any)
			assert.Equal(t, str(part["text"]), ev.Text, "output_text.done of item %d part %d", oi, ev.ContentIndex)
			var lp []any
			require.NoError(t, json.Unmarshal([]byte(gjson.Get(raw, "logprobs").Raw), &lp), "logprobs of %.300s", raw)
			part["logprobs"] = lp
		case "response.refusal.done":
			part := list(item, "content")[ev.ContentIndex].(map[string]any)
			assert.Equal(t, str(part["refusal"]), ev.Refusal, "refusal.done of item %d part %d", oi, ev.ContentIndex)
		case "response.content_part.done":
			part := list(item, "content")[ev.ContentIndex]
			assert.Equal(t, schematest.SSEMap(t, gjson.Get(raw, "part").Raw), part, "content_part.done of item %d part %d", oi, ev.ContentIndex)
		case "response.reasoning_summary_part.added":
			require.Len(t, list(item, "summary"), int(ev.SummaryIndex), "summary_index of %.300s", raw)
			item["summary"] = append(list(item, "summary"), schematest.SSEMap(t, gjson.Get(raw, "part").Raw))
		case "response.reasoning_summary_text.delta":
			part := list(item, "summary")[ev.SummaryIndex].(map[string]any)
			part["text"] = str(part["text"]) + ev.Delta
		case "response.reasoning_summary_text.done":
			part := list(item, "summary")[ev.SummaryIndex].(map[string]any)
			assert.Equal(t, str(part["text"]), ev.Text, "summary text.done of item %d", oi)
		case "response.reasoning_summary_part.done":
			assert.Equal(t, schematest.SSEMap(t, gjson.Get(raw, "part").Raw), list(item, "summary")[ev.SummaryIndex], "summary part.done of item %d", oi)
		case "response.reasoning_text.delta", "response.reasoning_text.done":
			content := list(item, "content")
			if int(ev.ContentIndex) == len(content) {
				content = append(content, map[string]any{"type": "reasoning_text", "text": ""})
				item["content"] = content
			}
			part := content[ev.ContentIndex].(map[string]any)
			if ev.Type == "response.reasoning_text.delta" {
				part["text"] = str(part["text"]) + ev.Delta
			} else {
				assert.Equal(t, str(part["text"]), ev.Text, "reasoning_text.done of item %d", oi)
			}
		case "response.output_item.done":
			done := schematest.SSEMap(t, gjson.Get(raw, "item").Raw)
			// What no event streams: the final status, and a code call's outputs.
			if s, ok := done["status"]; ok {
				item["status"] = s
			}
			if item["type"] == "code_interpreter_call" {
				item["outputs"] = done["outputs"]
			}
			r.Done[oi] = done
		default:
			assert.Failf(t, "unexpected event", "event %d: %s", k, raw)
		}
	}
	return r
}

// sseOutputItems decodes the output items of a Responses body.
func sseOutputItems(t testing.TB, body []byte) []map[string]any {
	t.Helper()
	var r struct {
		Output []map[string]any `json:"output"`
	}
	require.NoError(t, json.Unmarshal(body, &r), "decode output of %.300s", body)
	return r.Output
}

// sseResponsesBodies are the Responses bodies streamed by the reconstruction tests.
func sseResponsesBodies(t *testing.T) map[string][]byte {
	t.Helper()
	bodies := map[string][]byte{}
	for _, name := range []string{"ci_then_message", "kitchen_sink"} {
		b, err := os.ReadFile(filepath.Join("testdata", "sse", name+".json"))
		require.NoError(t, err, "read %s", name)
		bodies["sse/"+name] = b
	}
	dirs, err := os.ReadDir(filepath.Join("testdata", "final"))
	require.NoError(t, err, "list testdata/final")
	for _, d := range dirs {
		if !strings.HasPrefix(d.Name(), "responses_") {
			continue
		}
		b, err := os.ReadFile(filepath.Join("testdata", "final", d.Name(), "want.json"))
		require.NoError(t, err, "read %s", d.Name())
		bodies["final/"+d.Name()] = b
	}
	bodies["inline/invalid utf8 and separators"] = []byte(`{"id":"resp_x","status":"completed","output":[` +
		`{"id":"ci_x","type":"code_interpreter_call","status":"completed","code":"` + "a\xffb\\u2028c\u2029" + `","container_id":"c","outputs":[]},` +
		`{"id":"msg_x","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","annotations":[],"logprobs":[],"text":"` +
		"x\xe2\x82y" + `"}]}],"usage":{"input_tokens":1,"output_tokens":1,"total_tokens":2}}`)
	bodies["inline/no output"] = []byte(`{"id":"resp_y","status":"completed","output":[],"usage":null}`)
	return bodies
}

func TestResponsesSSEReconstructs(t *testing.T) {
	for name, final := range sseResponsesBodies(t) {
		t.Run(name, func(t *testing.T) {
			stream, err := SSE(final)
			require.NoError(t, err, "SSE(%s)", name)
			frames := schematest.SSEFrames(t, stream, true)
			for i, f := range frames {
				require.True(t, json.Valid([]byte(f.Data)), "data of event %d of %s is not JSON: %.300s", i, name, f.Data)
				assert.Equal(t, f.Name, gjson.Get(f.Data, "type").String(), "event line vs type of event %d of %s", i, name)
			}

			events := schematest.SSESDKEvents[responses.ResponseStreamEventUnion](t, stream)
			require.Len(t, events, len(frames), "SDK events of %s", name)
			r := sseReplayResponses(t, events)

			want := sseOutputItems(t, final)
			if len(want) == 0 {
				want = nil
			}
			assert.Equal(t, want, r.Rebuilt, "items rebuilt from the events of %s", name)
			assert.Equal(t, want, r.Done, "items of output_item.done of %s", name)
			assert.JSONEq(t, string(final), r.Terminal, "terminal response of %s", name)
			wantTerminal := map[string]string{"completed": "response.completed", "incomplete": "response.incomplete"}[gjson.GetBytes(final, "status").String()]
			assert.Equal(t, wantTerminal, r.TerminalAs, "terminal event of %s", name)

			require.Len(t, r.Started, 2, "created and in_progress of %s", name)
			for i, started := range r.Started {
				got := schematest.SSEMap(t, started)
				wantStart := schematest.SSEMap(t, string(final))
				wantStart["status"], wantStart["output"], wantStart["usage"] = "in_progress", []any{}, nil
				for _, k := range []string{"completed_at", "error", "incomplete_details"} {
					if _, ok := wantStart[k]; ok {
						wantStart[k] = nil
					}
				}
				assert.Equal(t, wantStart, got, "response of start event %d of %s", i, name)
			}

			var typed responses.Response
			require.NoError(t, json.Unmarshal([]byte(r.Terminal), &typed), "SDK parse of terminal response of %s", name)
			assert.Equal(t, gjson.GetBytes(final, "id").String(), typed.ID, "terminal response id of %s", name)
			assert.Len(t, typed.Output, len(want), "terminal response output of %s", name)
		})
	}
}

func TestResponsesSSEEventOrderGolden(t *testing.T) {
	final, err := os.ReadFile(filepath.Join("testdata", "sse", "ci_then_message.json"))
	require.NoError(t, err, "read ci_then_message.json")
	stream, err := SSE(final)
	require.NoError(t, err, "SSE(ci_then_message)")
	finalGolden(t, filepath.Join("testdata", "sse", "ci_then_message.sse"), stream)

	var order strings.Builder
	for _, f := range schematest.SSEFrames(t, stream, true) {
		order.WriteString(f.Name)
		for _, k := range []string{"output_index", "content_index", "annotation_index"} {
			if v := gjson.Get(f.Data, k); v.Exists() {
				order.WriteString(" " + k + "=" + v.Raw)
			}
		}
		order.WriteString("\n")
	}
	finalGolden(t, filepath.Join("testdata", "sse", "ci_then_message.order.golden"), []byte(order.String()))

	// The golden must show the native order: the call's events, then the message's.
	types := schematest.SSESDKEvents[responses.ResponseStreamEventUnion](t, stream)
	var compact []string
	for _, ev := range types {
		if n := len(compact); n > 0 && compact[n-1] == ev.Type {
			continue // collapse runs of deltas
		}
		compact = append(compact, ev.Type)
	}
	assert.Equal(t, []string{
		"response.created",
		"response.in_progress",
		"response.output_item.added",
		"response.code_interpreter_call.in_progress",
		"response.code_interpreter_call_code.delta",
		"response.code_interpreter_call_code.done",
		"response.code_interpreter_call.interpreting",
		"response.code_interpreter_call.completed",
		"response.output_item.done",
		"response.output_item.added",
		"response.content_part.added",
		"response.output_text.delta",
		"response.output_text.annotation.added",
		"response.output_text.done",
		"response.content_part.done",
		"response.output_item.done",
		"response.completed",
	}, compact, "event order of ci_then_message")
}

func TestResponsesSSEAddedItems(t *testing.T) {
	final, err := os.ReadFile(filepath.Join("testdata", "sse", "ci_then_message.json"))
	require.NoError(t, err, "read ci_then_message.json")
	stream, err := SSE(final)
	require.NoError(t, err, "SSE(ci_then_message)")
	var added []string
	var deltas int
	for _, f := range schematest.SSEFrames(t, stream, true) {
		switch f.Name {
		case "response.output_item.added":
			added = append(added, gjson.Get(f.Data, "item").Raw)
		case "response.code_interpreter_call_code.delta":
			deltas++
		}
	}
	assert.Equal(t, []string{
		`{"id":"ci_68c2e6f7","type":"code_interpreter_call","status":"in_progress","code":"","container_id":"cntr_68c2e6f3","outputs":[]}`,
		`{"id":"msg_68c2e705","type":"message","status":"in_progress","content":[],"role":"assistant"}`,
	}, added, "output_item.added items of ci_then_message")
	assert.Greater(t, deltas, 1, "the code of ci_then_message must stream in several deltas")
}

func TestResponsesFailedSSE(t *testing.T) {
	final, err := os.ReadFile(filepath.Join("testdata", "final", "responses_two_rounds", "want.json"))
	require.NoError(t, err, "read responses_two_rounds")
	stream, err := failedSSE(final, "server_error", "The sandbox is unavailable.\nTry again.")
	require.NoError(t, err, "ResponsesFailedSSE")
	frames := schematest.SSEFrames(t, stream, true)
	var names []string
	for _, f := range frames {
		names = append(names, f.Name)
	}
	assert.Equal(t, []string{"response.created", "response.in_progress", "response.failed"}, names, "events of a failed stream")

	events := schematest.SSESDKEvents[responses.ResponseStreamEventUnion](t, stream)
	require.Len(t, events, 3, "SDK events of a failed stream")
	failed := events[2].AsResponseFailed()
	assert.Equal(t, int64(2), failed.SequenceNumber, "sequence_number of response.failed")
	assert.Equal(t, responses.ResponseStatusFailed, failed.Response.Status, "status of response.failed")
	assert.Equal(t, "server_error", string(failed.Response.Error.Code), "error code of response.failed")
	assert.Equal(t, "The sandbox is unavailable.\nTry again.", failed.Response.Error.Message, "error message of response.failed")
	assert.Empty(t, failed.Response.Output, "output of response.failed")
	assert.Equal(t, "resp_r2", failed.Response.ID, "id of response.failed")
	assert.Equal(t, int64(470), failed.Response.Usage.TotalTokens, "usage of response.failed")
	assert.Equal(t, responses.ResponseStatusInProgress, events[0].AsResponseCreated().Response.Status, "status of response.created")
	assert.False(t, events[0].AsResponseCreated().Response.Error.JSON.Code.Valid(), "response.created must carry no error")

	_, err = failedSSE([]byte(`nope`), "c", "m")
	assert.Error(t, err, "ResponsesFailedSSE of invalid JSON")
}

func TestResponsesSSEErrors(t *testing.T) {
	tests := []struct {
		name string
		give string
	}{
		{name: "invalid JSON", give: `{"output":[`},
		{name: "array", give: `[]`},
		{name: "empty", give: ``},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := SSE([]byte(tt.give))
			assert.ErrorContains(t, err, "encode responses stream", "SSE(%q)", tt.give)
		})
	}
}

func TestErrorSSE(t *testing.T) {
	t.Run("responses", func(t *testing.T) {
		stream := errorSSE("sandbox_unavailable", "no sandbox \u2028 now")
		frames := schematest.SSEFrames(t, stream, true)
		require.Len(t, frames, 1, "events of errorSSE")
		assert.Equal(t, "error", frames[0].Name, "event name of errorSSE")
		events := schematest.SSESDKEvents[responses.ResponseStreamEventUnion](t, stream)
		require.Len(t, events, 1, "SDK events of errorSSE")
		e := events[0].AsError()
		assert.Equal(t, "sandbox_unavailable", e.Code, "code of errorSSE")
		assert.Equal(t, "no sandbox \u2028 now", e.Message, "message of errorSSE")
		assert.Equal(t, int64(0), e.SequenceNumber, "sequence_number of errorSSE")
		assert.Equal(t, "null", gjson.Get(frames[0].Data, "param").Raw, "param of errorSSE")
		assert.Equal(t, "null", gjson.Get(schematest.SSEFrames(t, errorSSE("", "m"), true)[0].Data, "code").Raw,
			"empty code of errorSSE")
	})
}

// failedSSE encodes a failed Responses stream with the pieces the event stream writes a failure
// with (sseStart, failedResponse): response.created and response.in_progress, then
// response.failed carrying resp with status "failed", "error": {"code":code,"message":message}
// and "output": []. Everything else (id, model, tools, usage…)
// is resp's, so resp should be a body built by [Final], whose tools echo the client's. It fails
// when resp is not a JSON object.
func failedSSE(resp []byte, code, message string) ([]byte, error) {
	w := openai.Writer{Buf: make([]byte, 0, 3*len(resp)+1024)}
	s, err := failedResponse(&w, resp, code, message)
	if err != nil {
		return nil, err
	}
	sseStart(&w, s)
	w.Open("response.failed")
	w.Raw("response", s)
	w.Close()
	if w.Err != nil {
		return nil, fmt.Errorf("encode failed responses stream: %w", w.Err)
	}
	return w.Buf, nil
}

// errorSSE encodes a lone stream error, as the event stream writes it (sseError).
func errorSSE(code, message string) []byte {
	var w openai.Writer
	sseError(&w, code, message)
	return w.Buf
}
