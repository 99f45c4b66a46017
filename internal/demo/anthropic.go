package demo

import (
	"encoding/json"
	"errors"
	"fmt"
)

// messagesSurface is Anthropic's Messages API.
type messagesSurface struct{}

// block is a content block of a Messages request.
type block struct {
	Type    string          `json:"type"`
	Text    string          `json:"text"`
	Content json.RawMessage `json:"content"`
}

func (messagesSurface) read(req request) (turn, error) {
	var t turn
	t.python, t.bash = codeTools(req.Tools)
	var msgs []item
	if err := json.Unmarshal(req.Messages, &msgs); err != nil || len(msgs) == 0 {
		return t, errors.New("messages: must be a non-empty array")
	}
	last := msgs[len(msgs)-1]
	var blocks []block
	if last.Role == "user" && json.Unmarshal(last.Content, &blocks) == nil {
		for _, b := range blocks {
			if b.Type == "tool_result" {
				t.afterTool = true
				t.toolOutput += text(b.Content)
			}
		}
		if t.afterTool {
			return t, nil
		}
	}
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == "user" {
			t.userText = text(msgs[i].Content)
			break
		}
	}
	return t, nil
}

func (messagesSurface) errorBody(message string) any {
	return map[string]any{"type": "error", "error": map[string]any{"type": "invalid_request_error", "message": message}}
}

// content is the answer's one content block, complete.
func (messagesSurface) content(a answer) map[string]any {
	if a.tool != "" {
		return map[string]any{"type": "tool_use", "id": fmt.Sprintf("toolu_demo%d", a.id), "name": a.tool,
			"input": json.RawMessage(a.arguments())}
	}
	return map[string]any{"type": "text", "text": a.text}
}

func stopReason(a answer) string {
	if a.tool != "" {
		return "tool_use"
	}
	return "end_turn"
}

func (s messagesSurface) message(a answer, content []any, stop any, out int) map[string]any {
	return map[string]any{"id": fmt.Sprintf("msg_demo%d", a.id), "type": "message", "role": "assistant", "model": a.model,
		"content": content, "stop_reason": stop, "stop_sequence": nil,
		"usage": map[string]any{"input_tokens": a.in, "output_tokens": out}}
}

func (s messagesSurface) answer(a answer, _ request) any {
	return s.message(a, []any{s.content(a)}, stopReason(a), a.out())
}

func (s messagesSurface) stream(ew *eventWriter, a answer, _ request) {
	send := func(typ string, fields map[string]any) {
		fields["type"] = typ
		ew.event(typ, fields)
	}
	send("message_start", map[string]any{"message": s.message(a, []any{}, nil, 1)})
	if a.tool != "" {
		start := s.content(a)
		start["input"] = map[string]any{}
		send("content_block_start", map[string]any{"index": 0, "content_block": start})
		for _, c := range chunks(string(a.arguments())) {
			send("content_block_delta", map[string]any{"index": 0, "delta": map[string]any{"type": "input_json_delta", "partial_json": c}})
		}
	} else {
		send("content_block_start", map[string]any{"index": 0, "content_block": map[string]any{"type": "text", "text": ""}})
		for _, c := range chunks(a.text) {
			send("content_block_delta", map[string]any{"index": 0, "delta": map[string]any{"type": "text_delta", "text": c}})
		}
	}
	send("content_block_stop", map[string]any{"index": 0})
	send("message_delta", map[string]any{"delta": map[string]any{"stop_reason": stopReason(a), "stop_sequence": nil},
		"usage": map[string]any{"output_tokens": a.out()}})
	send("message_stop", map[string]any{})
}
