package fakemodel

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
)

// This file builds OpenAI answers as plain JSON values (the shapes of OpenAI's API reference,
// https://platform.openai.com/docs/api-reference/responses and
// https://platform.openai.com/docs/api-reference/chat, decodable by the openai-go SDK). IDs
// are derived from the content, so the same answer always has the same IDs.

// createdAt is the fixed timestamp of every answer.
const createdAt = 1700000000

// Usage is a token count.
type Usage struct {
	Input, Output int
}

// Item is one output item of a Responses API answer; build it with [FunctionCall] or
// [Message].
type Item map[string]any

// FunctionCall is a function_call output item.
func FunctionCall(name, callID, arguments string) Item {
	return Item{
		"type": "function_call", "id": "fc_" + callID, "call_id": callID,
		"name": name, "arguments": arguments, "status": "completed",
	}
}

// Message is an assistant message output item with one output_text part.
func Message(text string) Item {
	return Item{
		"type": "message", "id": "msg_" + id(text), "status": "completed", "role": "assistant",
		"content": []any{outputText(text)},
	}
}

func outputText(text string) map[string]any {
	return map[string]any{"type": "output_text", "text": text, "annotations": []any{}, "logprobs": []any{}}
}

// Responses is a completed Responses API answer (POST /v1/responses) with the given output
// items.
func Responses(model string, usage Usage, items ...Item) map[string]any {
	r := responseObject(model, "completed", items)
	r["usage"] = map[string]any{
		"input_tokens": usage.Input, "input_tokens_details": map[string]any{"cached_tokens": 0},
		"output_tokens": usage.Output, "output_tokens_details": map[string]any{"reasoning_tokens": 0},
		"total_tokens": usage.Input + usage.Output,
	}
	return r
}

func responseObject(model, status string, items []Item) map[string]any {
	output := make([]any, len(items))
	for i, it := range items {
		output[i] = map[string]any(it)
	}
	return map[string]any{
		"id": "resp_" + id(model, items), "object": "response", "created_at": createdAt,
		"status": status, "model": model, "output": output,
		"error": nil, "incomplete_details": nil, "instructions": nil, "metadata": map[string]any{},
		"parallel_tool_calls": true, "temperature": 1, "top_p": 1, "tool_choice": "auto", "tools": []any{},
		"text": map[string]any{"format": map[string]any{"type": "text"}}, "usage": nil,
	}
}

// ResponsesStream is the same answer as [Responses] as a stream of Responses API events
// (response.created ... response.completed), in the order a live stream has them.
func ResponsesStream(model string, usage Usage, items ...Item) []Event {
	var evs []Event
	seq := 0
	add := func(typ string, fields map[string]any) {
		fields["type"] = typ
		fields["sequence_number"] = seq
		seq++
		evs = append(evs, Event{Name: typ, Data: mustJSON(fields)})
	}
	add("response.created", map[string]any{"response": responseObject(model, "in_progress", nil)})
	add("response.in_progress", map[string]any{"response": responseObject(model, "in_progress", nil)})
	for i, it := range items {
		itemID := it["id"]
		switch it["type"] {
		case "function_call":
			added := clone(it)
			added["status"], added["arguments"] = "in_progress", ""
			add("response.output_item.added", map[string]any{"output_index": i, "item": added})
			add("response.function_call_arguments.delta", map[string]any{"output_index": i, "item_id": itemID, "delta": it["arguments"]})
			add("response.function_call_arguments.done", map[string]any{"output_index": i, "item_id": itemID, "arguments": it["arguments"], "name": it["name"]})
		case "message":
			text := messageText(it)
			added := clone(it)
			added["status"], added["content"] = "in_progress", []any{}
			add("response.output_item.added", map[string]any{"output_index": i, "item": added})
			part := map[string]any{"item_id": itemID, "output_index": i, "content_index": 0}
			add("response.content_part.added", with(part, "part", outputText("")))
			add("response.output_text.delta", with(with(part, "delta", text), "logprobs", []any{}))
			add("response.output_text.done", with(with(part, "text", text), "logprobs", []any{}))
			add("response.content_part.done", with(part, "part", outputText(text)))
		}
		add("response.output_item.done", map[string]any{"output_index": i, "item": map[string]any(it)})
	}
	add("response.completed", map[string]any{"response": Responses(model, usage, items...)})
	return evs
}

// ToolCall is a Chat Completions tool call.
type ToolCall struct {
	ID, Name, Arguments string
}

// Chat is a Chat Completions answer (POST /v1/chat/completions): the assistant says text
// (none if empty) and makes the tool calls; finish_reason is "tool_calls" when there are
// calls, else "stop".
func Chat(model string, usage Usage, text string, calls ...ToolCall) map[string]any {
	msg := map[string]any{"role": "assistant", "content": nil, "refusal": nil}
	if text != "" {
		msg["content"] = text
	}
	finish := "stop"
	if len(calls) > 0 {
		tcs := make([]any, len(calls))
		for i, c := range calls {
			tcs[i] = map[string]any{"id": c.ID, "type": "function", "function": map[string]any{"name": c.Name, "arguments": c.Arguments}}
		}
		msg["tool_calls"] = tcs
		finish = "tool_calls"
	}
	return map[string]any{
		"id": "chatcmpl-" + id(model, text, calls), "object": "chat.completion", "created": createdAt, "model": model,
		"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish, "logprobs": nil}},
		"usage":   chatUsage(usage),
	}
}

func chatUsage(u Usage) map[string]any {
	return map[string]any{
		"prompt_tokens": u.Input, "completion_tokens": u.Output, "total_tokens": u.Input + u.Output,
		"prompt_tokens_details":     map[string]any{"cached_tokens": 0},
		"completion_tokens_details": map[string]any{"reasoning_tokens": 0},
	}
}

// ChatStream is the same answer as [Chat] as chat.completion.chunk events: a role chunk, the
// text, each tool call (id, type and name first with empty arguments, then the arguments),
// the finish chunk, a usage chunk with no choices (as stream_options.include_usage gives),
// and [DONE].
func ChatStream(model string, usage Usage, text string, calls ...ToolCall) []Event {
	chatID := "chatcmpl-" + id(model, text, calls)
	chunk := func(choices []any, u any) Event {
		return Event{Data: mustJSON(map[string]any{
			"id": chatID, "object": "chat.completion.chunk", "created": createdAt, "model": model,
			"choices": choices, "usage": u,
		})}
	}
	delta := func(d map[string]any, finish any) []any {
		return []any{map[string]any{"index": 0, "delta": d, "finish_reason": finish, "logprobs": nil}}
	}
	evs := []Event{chunk(delta(map[string]any{"role": "assistant", "content": ""}, nil), nil)}
	if text != "" {
		evs = append(evs, chunk(delta(map[string]any{"content": text}, nil), nil))
	}
	for i, c := range calls {
		evs = append(evs,
			chunk(delta(map[string]any{"tool_calls": []any{map[string]any{
				"index": i, "id": c.ID, "type": "function", "function": map[string]any{"name": c.Name, "arguments": ""},
			}}}, nil), nil),
			chunk(delta(map[string]any{"tool_calls": []any{map[string]any{
				"index": i, "function": map[string]any{"arguments": c.Arguments},
			}}}, nil), nil))
	}
	finish := "stop"
	if len(calls) > 0 {
		finish = "tool_calls"
	}
	evs = append(evs,
		chunk(delta(map[string]any{}, finish), nil),
		chunk([]any{}, chatUsage(usage)),
		Event{Data: "[DONE]"})
	return evs
}

// id is a short stable hash of v's JSON.
func id(v ...any) string {
	h := fnv.New64a()
	_, _ = h.Write([]byte(mustJSON(v)))
	return fmt.Sprintf("%016x", h.Sum64())
}

// mustJSON marshals values built in this file from maps, slices, strings and numbers, which
// cannot fail.
func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf(`{"fakemodel_error":%q}`, err.Error())
	}
	return string(b)
}

// messageText is the text of a [Message] item ("" for anything else).
func messageText(it Item) string {
	parts, _ := it["content"].([]any)
	if len(parts) == 0 {
		return ""
	}
	part, _ := parts[0].(map[string]any)
	text, _ := part["text"].(string)
	return text
}

func clone(it Item) map[string]any {
	out := make(map[string]any, len(it))
	for k, v := range it {
		out[k] = v
	}
	return out
}

func with(m map[string]any, k string, v any) map[string]any {
	out := make(map[string]any, len(m)+1)
	for key, val := range m {
		out[key] = val
	}
	out[k] = v
	return out
}
