package responses

import (
	"errors"
	"fmt"

	"github.com/codeinterp/codeinterp/pkg/schema/internal/jsonscan"
	"github.com/codeinterp/codeinterp/pkg/schema/internal/openai"

	"github.com/tidwall/gjson"
)

// Part shapes of the *.added events, before any text has streamed.
const (
	sseEmptyOutputText = `{"type":"output_text","annotations":[],"logprobs":[],"text":""}`
	sseEmptyRefusal    = `{"type":"refusal","refusal":""}`
	sseEmptySummary    = `{"type":"summary_text","text":""}`
)

// SSE encodes a Responses body built by [Final] as the text/event-stream the native API
// sends when the client asked for stream:true: response.created and response.in_progress (the
// response with status "in_progress", "output": [] and "usage": null); then, for each output
// item in order, response.output_item.added, the item's own events and
// response.output_item.done; and last response.completed with the full response
// (response.incomplete or response.failed when that is the body's status).
//
// Item events: a code_interpreter_call streams its code (code_interpreter_call.in_progress,
// code_interpreter_call_code.delta…, .done, code_interpreter_call.interpreting, .completed); a
// message streams each content part (content_part.added, output_text.delta… and
// output_text.annotation.added… then output_text.done, or refusal.delta… and refusal.done;
// content_part.done); a function_call its arguments and a custom_tool_call its input; a
// reasoning item its summary parts and reasoning text; any other item has added and done only.
//
// Every event is `event: <type>` and one `data: <json>` line numbered by sequence_number from 0;
// there is no [DONE] sentinel. The data lines never contain a raw newline, U+2028 or U+2029,
// and invalid UTF-8 is replaced by U+FFFD. SSE fails when final is not a JSON object.
func SSE(final []byte) ([]byte, error) {
	s, ok := openai.CompactBody(final)
	if !ok {
		return nil, errors.New("encode responses stream: body is not a JSON object")
	}
	// A stream carries each text up to five times (delta, text done, part done, item done, completed).
	w := openai.Writer{Buf: make([]byte, 0, 6*len(s)+4096)}
	sseStart(&w, s)
	i := 0
	gjson.Get(s, "output").ForEach(func(_, item gjson.Result) bool {
		sseItem(&w, i, item)
		i++
		return w.Err == nil
	})
	w.Open(sseTerminal(gjson.Get(s, "status").String()))
	w.Raw("response", s)
	w.Close()
	if w.Err != nil {
		return nil, fmt.Errorf("encode responses stream: %w", w.Err)
	}
	return w.Buf, nil
}

// failedResponse returns resp, compacted, as the response of a response.failed event: status
// "failed", "error": {"code":code,"message":message} and "output": [].
func failedResponse(w *openai.Writer, resp []byte, code, message string) (string, error) {
	s, ok := openai.CompactBody(resp)
	if !ok {
		return "", errors.New("encode failed responses stream: body is not a JSON object")
	}
	errObj := make([]byte, 0, 32+len(code)+len(message))
	errObj = append(errObj, `{"code":`...)
	errObj = jsonscan.AppendString(errObj, code)
	errObj = append(errObj, `,"message":`...)
	errObj = jsonscan.AppendString(errObj, message)
	errObj = append(errObj, '}')
	s = w.Edit(s, "output", "[]", true)
	s = w.Edit(s, "status", `"failed"`, true)
	return w.Edit(s, "error", string(errObj), true), nil
}

// sseError writes a lone stream error: an `error` event
// ({"type":"error","sequence_number":…,"code","message","param":null}; code null when empty).
func sseError(w *openai.Writer, code, message string) {
	w.Open("error")
	if code == "" {
		w.Literal("code", "null")
	} else {
		w.Str("code", code)
	}
	w.Str("message", message)
	w.Literal("param", "null")
	w.Close()
}

// sseStart writes response.created and response.in_progress for the response s: s with status
// "in_progress", no output, null usage and no completion, error or incomplete details yet.
func sseStart(w *openai.Writer, s string) {
	s = w.Edit(s, "output", "[]", true)
	s = w.Edit(s, "status", `"in_progress"`, true)
	s = w.Edit(s, "usage", "null", true)
	for _, k := range []string{"completed_at", "error", "incomplete_details"} {
		s = w.Edit(s, k, "null", false)
	}
	for _, typ := range []string{"response.created", "response.in_progress"} {
		w.Open(typ)
		w.Raw("response", s)
		w.Close()
	}
}

// sseTerminal returns the event that ends a stream of a response with this status.
func sseTerminal(status string) string {
	switch status {
	case "incomplete":
		return "response.incomplete"
	case "failed":
		return "response.failed"
	default:
		return "response.completed"
	}
}

// sseItem writes the events of output item number idx.
func sseItem(w *openai.Writer, idx int, item gjson.Result) {
	id := item.Get("id").String()
	switch item.Get("type").String() {
	case "code_interpreter_call":
		sseCodeCall(w, idx, id, item)
	case "message":
		sseMessage(w, idx, id, item)
	case "function_call":
		sseToolInput(w, idx, id, item, "arguments", "response.function_call_arguments")
	case "custom_tool_call":
		sseToolInput(w, idx, id, item, "input", "response.custom_tool_call_input")
	case "reasoning":
		sseReasoning(w, idx, id, item)
	case "shell_call":
		sseShellCallItem(w, idx, item)
	case "shell_call_output":
		sseShellOutputItem(w, idx, item)
	default:
		sseItemEvent(w, "response.output_item.added", idx, w.Edit(item.Raw, "status", `"in_progress"`, false))
		sseItemEvent(w, "response.output_item.done", idx, item.Raw)
	}
}

// sseItemEvent writes an output_item.added or output_item.done event.
func sseItemEvent(w *openai.Writer, typ string, idx int, item string) {
	w.Open(typ)
	w.Num("output_index", idx)
	w.Raw("item", item)
	w.Close()
}

// sseStringRaw returns v's raw JSON when it is a string, else "" as JSON.
func sseStringRaw(v gjson.Result) string {
	if v.Type == gjson.String {
		return v.Raw
	}
	return `""`
}

func sseCodeCall(w *openai.Writer, idx int, id string, item gjson.Result) {
	// Empty the large fields first, so the later edits copy a small item.
	added := w.Edit(item.Raw, "code", `""`, true)
	if item.Get("outputs").IsArray() {
		added = w.Edit(added, "outputs", "[]", true) // null (include did not ask for them) stays null
	}
	added = w.Edit(added, "status", `"in_progress"`, true)
	code := item.Get("code")
	codeCallStart(w, idx, id, added, code.String(), sseStringRaw(code))
	codeCallEnd(w, idx, id, item.Raw)
}

func sseMessage(w *openai.Writer, idx int, id string, item gjson.Result) {
	added := w.Edit(item.Raw, "content", "[]", true)
	added = w.Edit(added, "status", `"in_progress"`, true)
	sseItemEvent(w, "response.output_item.added", idx, added)

	// head opens an event about content part j of this message.
	head := func(typ string, j int) {
		w.Open(typ)
		w.Str("item_id", id)
		w.Num("output_index", idx)
		w.Num("content_index", j)
	}
	j := 0
	item.Get("content").ForEach(func(_, part gjson.Result) bool {
		switch part.Get("type").String() {
		case "output_text":
			head("response.content_part.added", j)
			w.Literal("part", sseEmptyOutputText)
			w.Close()
			text := part.Get("text")
			for s := text.String(); len(s) > 0; {
				n := openai.Cut(s)
				head("response.output_text.delta", j)
				w.Str("delta", s[:n])
				w.Literal("logprobs", "[]")
				w.Close()
				s = s[n:]
			}
			a := 0
			part.Get("annotations").ForEach(func(_, ann gjson.Result) bool {
				head("response.output_text.annotation.added", j)
				w.Num("annotation_index", a)
				w.Raw("annotation", ann.Raw)
				w.Close()
				a++
				return true
			})
			head("response.output_text.done", j)
			w.Raw("text", sseStringRaw(text))
			if lp := part.Get("logprobs"); lp.IsArray() {
				w.Raw("logprobs", lp.Raw)
			} else {
				w.Literal("logprobs", "[]")
			}
			w.Close()
		case "refusal":
			head("response.content_part.added", j)
			w.Literal("part", sseEmptyRefusal)
			w.Close()
			refusal := part.Get("refusal")
			for s := refusal.String(); len(s) > 0; {
				n := openai.Cut(s)
				head("response.refusal.delta", j)
				w.Str("delta", s[:n])
				w.Close()
				s = s[n:]
			}
			head("response.refusal.done", j)
			w.Raw("refusal", sseStringRaw(refusal))
			w.Close()
		default:
			head("response.content_part.added", j)
			w.Raw("part", part.Raw)
			w.Close()
		}
		head("response.content_part.done", j)
		w.Raw("part", part.Raw)
		w.Close()
		j++
		return true
	})
	sseItemEvent(w, "response.output_item.done", idx, item.Raw)
}

// sseToolInput writes the events of a tool call whose input streams as a string field (a
// function_call's arguments, a custom_tool_call's input): <prefix>.delta… and <prefix>.done.
func sseToolInput(w *openai.Writer, idx int, id string, item gjson.Result, field, prefix string) {
	added := w.Edit(item.Raw, field, `""`, true)
	added = w.Edit(added, "status", `"in_progress"`, false)
	sseItemEvent(w, "response.output_item.added", idx, added)
	input := item.Get(field)
	for s := input.String(); len(s) > 0; {
		n := openai.Cut(s)
		w.Open(prefix + ".delta")
		w.Str("item_id", id)
		w.Num("output_index", idx)
		w.Str("delta", s[:n])
		w.Close()
		s = s[n:]
	}
	w.Open(prefix + ".done")
	w.Str("item_id", id)
	w.Num("output_index", idx)
	w.Raw(field, sseStringRaw(input))
	w.Close()
	sseItemEvent(w, "response.output_item.done", idx, item.Raw)
}

func sseReasoning(w *openai.Writer, idx int, id string, item gjson.Result) {
	added := w.Edit(item.Raw, "summary", "[]", true)
	if item.Get("content").IsArray() {
		added = w.Edit(added, "content", "[]", true)
	}
	added = w.Edit(added, "status", `"in_progress"`, false)
	sseItemEvent(w, "response.output_item.added", idx, added)

	head := func(typ, indexKey string, k int) {
		w.Open(typ)
		w.Str("item_id", id)
		w.Num("output_index", idx)
		w.Num(indexKey, k)
	}
	k := 0
	item.Get("summary").ForEach(func(_, part gjson.Result) bool {
		head("response.reasoning_summary_part.added", "summary_index", k)
		w.Literal("part", sseEmptySummary)
		w.Close()
		text := part.Get("text")
		for s := text.String(); len(s) > 0; {
			n := openai.Cut(s)
			head("response.reasoning_summary_text.delta", "summary_index", k)
			w.Str("delta", s[:n])
			w.Close()
			s = s[n:]
		}
		head("response.reasoning_summary_text.done", "summary_index", k)
		w.Raw("text", sseStringRaw(text))
		w.Close()
		head("response.reasoning_summary_part.done", "summary_index", k)
		w.Raw("part", part.Raw)
		w.Close()
		k++
		return true
	})
	k = 0
	item.Get("content").ForEach(func(_, part gjson.Result) bool {
		if part.Get("type").String() == "reasoning_text" {
			text := part.Get("text")
			for s := text.String(); len(s) > 0; {
				n := openai.Cut(s)
				head("response.reasoning_text.delta", "content_index", k)
				w.Str("delta", s[:n])
				w.Close()
				s = s[n:]
			}
			head("response.reasoning_text.done", "content_index", k)
			w.Raw("text", sseStringRaw(text))
			w.Close()
		}
		k++
		return true
	})
	sseItemEvent(w, "response.output_item.done", idx, item.Raw)
}
