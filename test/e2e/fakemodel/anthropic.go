package fakemodel

// This file builds Anthropic Messages API answers as plain JSON values (https://docs.anthropic.com/en/api/messages,
// decodable by the anthropic-sdk-go SDK). IDs are derived from the content, so the same answer
// always has the same IDs.

// Block is one content block of a Messages API answer; build it with [Text] or [ToolUse].
type Block map[string]any

// Text is a text block.
func Text(text string) Block { return Block{"type": "text", "text": text} }

// ToolUse is a tool_use block calling name with input (a JSON value).
func ToolUse(id, name string, input any) Block {
	return Block{"type": "tool_use", "id": id, "name": name, "input": input}
}

// AnthropicMessage is a Messages API answer (POST /v1/messages) with the blocks; its
// stop_reason is "tool_use" when a block is a tool_use, else "end_turn".
func AnthropicMessage(model string, usage Usage, blocks ...Block) map[string]any {
	content := make([]any, len(blocks))
	stop := "end_turn"
	for i, b := range blocks {
		content[i] = map[string]any(b)
		if b["type"] == "tool_use" {
			stop = "tool_use"
		}
	}
	return map[string]any{
		"id": "msg_" + id(model, blocks), "type": "message", "role": "assistant", "model": model,
		"content": content, "stop_reason": stop, "stop_sequence": nil,
		"usage": map[string]any{"input_tokens": usage.Input, "output_tokens": usage.Output},
	}
}

// AnthropicError is an answer with Anthropic's error shape.
func AnthropicError(status int, typ, message string) Response {
	return Response{Status: status, JSON: map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": message}}}
}
