package demo

import (
	"encoding/json"
	"errors"
	"fmt"
)

// responsesSurface is OpenAI's Responses API.
type responsesSurface struct{}

// item is an input item of a Responses request, or a message of a Chat request.
type item struct {
	Type    string          `json:"type"`
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
	Output  json.RawMessage `json:"output"`
}

func (responsesSurface) read(req request) (turn, error) {
	var t turn
	t.python, t.bash = codeTools(req.Tools)
	var s string
	if json.Unmarshal(req.Input, &s) == nil {
		t.userText = s
		return t, nil
	}
	var items []item
	if err := json.Unmarshal(req.Input, &items); err != nil || len(items) == 0 {
		return t, errors.New("input must be a string or a non-empty array of items")
	}
	if last := items[len(items)-1]; last.Type == "function_call_output" {
		t.afterTool, t.toolOutput = true, text(last.Output)
		return t, nil
	}
	for i := len(items) - 1; i >= 0; i-- {
		if it := items[i]; it.Role == "user" && (it.Type == "" || it.Type == "message") {
			t.userText = text(it.Content)
			break
		}
	}
	return t, nil
}

func (responsesSurface) errorBody(message string) any { return openAIError(message) }

// output is the answer's one output item, as it is when complete.
func (responsesSurface) output(a answer) map[string]any {
	if a.tool != "" {
		return map[string]any{"id": fmt.Sprintf("fc_demo%d", a.id), "type": "function_call", "status": "completed",
			"call_id": fmt.Sprintf("call_demo%d", a.id), "name": a.tool, "arguments": string(a.arguments())}
	}
	return map[string]any{"id": fmt.Sprintf("msg_demo%d", a.id), "type": "message", "status": "completed", "role": "assistant",
		"content": []any{outputText(a.text)}}
}

func outputText(s string) map[string]any {
	return map[string]any{"type": "output_text", "text": s, "annotations": []any{}, "logprobs": []any{}}
}

// response is the Response object with status and output.
func (responsesSurface) response(a answer, req request, status string, output []any) map[string]any {
	r := map[string]any{
		"id": fmt.Sprintf("resp_demo%d", a.id), "object": "response", "created_at": a.now, "status": status,
		"model": a.model, "output": output, "tools": req.Tools, "tool_choice": "auto", "parallel_tool_calls": true,
		"error": nil, "incomplete_details": nil, "instructions": nil, "metadata": map[string]any{},
		"temperature": 1.0, "top_p": 1.0, "text": map[string]any{"format": map[string]any{"type": "text"}}, "usage": nil,
	}
	if req.Tools == nil {
		r["tools"] = []any{}
	}
	if status == "completed" {
		r["usage"] = map[string]any{"input_tokens": a.in, "input_tokens_details": map[string]any{"cached_tokens": 0},
			"output_tokens": a.out(), "output_tokens_details": map[string]any{"reasoning_tokens": 0}, "total_tokens": a.in + a.out()}
	}
	return r
}

func (s responsesSurface) answer(a answer, req request) any {
	return s.response(a, req, "completed", []any{s.output(a)})
}

func (s responsesSurface) stream(ew *eventWriter, a answer, req request) {
	send := func(typ string, fields map[string]any) {
		fields["type"] = typ
		fields["sequence_number"] = ew.seq
		ew.seq++
		ew.event(typ, fields)
	}
	send("response.created", map[string]any{"response": s.response(a, req, "in_progress", []any{})})
	send("response.in_progress", map[string]any{"response": s.response(a, req, "in_progress", []any{})})
	done := s.output(a)
	id := done["id"]
	added := map[string]any{}
	for k, v := range done {
		added[k] = v
	}
	added["status"] = "in_progress"
	if a.tool != "" {
		added["arguments"] = ""
		send("response.output_item.added", map[string]any{"output_index": 0, "item": added})
		args := string(a.arguments())
		for _, c := range chunks(args) {
			send("response.function_call_arguments.delta", map[string]any{"item_id": id, "output_index": 0, "delta": c})
		}
		send("response.function_call_arguments.done", map[string]any{"item_id": id, "output_index": 0, "arguments": args})
	} else {
		added["content"] = []any{}
		send("response.output_item.added", map[string]any{"output_index": 0, "item": added})
		part := map[string]any{"item_id": id, "output_index": 0, "content_index": 0}
		send("response.content_part.added", with(part, "part", outputText("")))
		for _, c := range chunks(a.text) {
			send("response.output_text.delta", with(with(part, "delta", c), "logprobs", []any{}))
		}
		send("response.output_text.done", with(with(part, "text", a.text), "logprobs", []any{}))
		send("response.content_part.done", with(part, "part", outputText(a.text)))
	}
	send("response.output_item.done", map[string]any{"output_index": 0, "item": done})
	send("response.completed", map[string]any{"response": s.answer(a, req)})
}

// with returns a copy of m with k set to v.
func with(m map[string]any, k string, v any) map[string]any {
	c := make(map[string]any, len(m)+1)
	for key, val := range m {
		c[key] = val
	}
	c[k] = v
	return c
}

// chatSurface is OpenAI's Chat Completions API.
type chatSurface struct{}

func (chatSurface) read(req request) (turn, error) {
	var t turn
	t.python, t.bash = codeTools(req.Tools)
	var msgs []item
	if err := json.Unmarshal(req.Messages, &msgs); err != nil || len(msgs) == 0 {
		return t, errors.New("messages must be a non-empty array")
	}
	if last := msgs[len(msgs)-1]; last.Role == "tool" {
		t.afterTool, t.toolOutput = true, text(last.Content)
		return t, nil
	}
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == "user" {
			t.userText = text(msgs[i].Content)
			break
		}
	}
	return t, nil
}

func (chatSurface) errorBody(message string) any { return openAIError(message) }

func (chatSurface) usage(a answer) map[string]any {
	return map[string]any{"prompt_tokens": a.in, "completion_tokens": a.out(), "total_tokens": a.in + a.out()}
}

func (chatSurface) toolCall(a answer) map[string]any {
	return map[string]any{"id": fmt.Sprintf("call_demo%d", a.id), "type": "function",
		"function": map[string]any{"name": a.tool, "arguments": string(a.arguments())}}
}

func (s chatSurface) answer(a answer, req request) any {
	msg := map[string]any{"role": "assistant", "content": a.text, "refusal": nil}
	finish := "stop"
	if a.tool != "" {
		msg["content"] = nil
		msg["tool_calls"] = []any{s.toolCall(a)}
		finish = "tool_calls"
	}
	return map[string]any{"id": fmt.Sprintf("chatcmpl-demo%d", a.id), "object": "chat.completion", "created": a.now,
		"model": a.model, "choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish, "logprobs": nil}},
		"usage": s.usage(a)}
}

func (s chatSurface) stream(ew *eventWriter, a answer, req request) {
	chunk := func(delta map[string]any, finish any) {
		c := map[string]any{"id": fmt.Sprintf("chatcmpl-demo%d", a.id), "object": "chat.completion.chunk", "created": a.now,
			"model": a.model, "choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": nil}}}
		if req.StreamOptions.IncludeUsage {
			c["usage"] = nil
		}
		ew.event("", c)
	}
	chunk(map[string]any{"role": "assistant", "content": ""}, nil)
	finish := "stop"
	if a.tool != "" {
		finish = "tool_calls"
		call := s.toolCall(a)
		call["index"] = 0
		args := string(a.arguments())
		call["function"] = map[string]any{"name": a.tool, "arguments": ""}
		chunk(map[string]any{"tool_calls": []any{call}}, nil)
		for _, c := range chunks(args) {
			chunk(map[string]any{"tool_calls": []any{map[string]any{"index": 0, "function": map[string]any{"arguments": c}}}}, nil)
		}
	} else {
		for _, c := range chunks(a.text) {
			chunk(map[string]any{"content": c}, nil)
		}
	}
	chunk(map[string]any{}, finish)
	if req.StreamOptions.IncludeUsage {
		ew.event("", map[string]any{"id": fmt.Sprintf("chatcmpl-demo%d", a.id), "object": "chat.completion.chunk", "created": a.now,
			"model": a.model, "choices": []any{}, "usage": s.usage(a)})
	}
	ew.raw("[DONE]")
}
