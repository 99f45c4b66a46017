package telemetry

import (
	"encoding/json"

	"github.com/tidwall/gjson"
)

// The GenAI conventions' message shapes (gen-ai-input-messages.json,
// gen-ai-output-messages.json, gen-ai-system-instructions.json of semconv v1.41.0), recorded
// on the chat spans as JSON strings when message capture is on. Only what the conventions
// name is read of a request or an answer: roles, texts, tool calls and their results; never
// its tools, headers, metadata or network policies (where credentials live).

// message is one message of gen_ai.input.messages or gen_ai.output.messages.
type message struct {
	Role         string `json:"role"`
	Parts        []part `json:"parts"`
	FinishReason string `json:"finish_reason,omitempty"`
}

// part is one part of a message: a text, a tool call or a tool call's response.
type part struct {
	Type      string          `json:"type"`
	Content   string          `json:"content,omitempty"`
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
	Result    string          `json:"result,omitempty"`
}

// Part types.
const (
	partText     = "text"
	partToolCall = "tool_call"
	partToolResp = "tool_call_response"
)

// inputMessages reads a request body of surface: its separate system instructions
// (Responses' instructions, Messages' system) and its messages, in order.
func inputMessages(surface string, body []byte) (system []part, msgs []message) {
	r := gjson.ParseBytes(body)
	switch surface {
	case "responses":
		system = textParts(r.Get("instructions"))
		in := r.Get("input")
		if in.Type == gjson.String {
			return system, []message{{Role: "user", Parts: []part{{Type: partText, Content: in.String()}}}}
		}
		for _, it := range in.Array() {
			msgs = appendItem(msgs, it)
		}
	case "messages":
		system = textParts(r.Get("system"))
		for _, m := range r.Get("messages").Array() {
			msgs = append(msgs, message{Role: m.Get("role").String(), Parts: blockParts(m.Get("content"))})
		}
	default: // chat_completions
		for _, m := range r.Get("messages").Array() {
			msgs = append(msgs, chatMessage(m))
		}
	}
	return system, withParts(msgs)
}

// withParts returns msgs with an empty parts list where a message has none: the schema's
// parts is an array, never null.
func withParts(msgs []message) []message {
	for i := range msgs {
		if msgs[i].Parts == nil {
			msgs[i].Parts = []part{}
		}
	}
	return msgs
}

// outputMessages reads an answer of any of the three surfaces: one message per choice.
func outputMessages(body []byte) []message {
	r := gjson.ParseBytes(body)
	switch {
	case r.Get("choices").IsArray(): // Chat Completions
		var msgs []message
		for _, c := range r.Get("choices").Array() {
			m := chatMessage(c.Get("message"))
			m.FinishReason = c.Get("finish_reason").String()
			msgs = append(msgs, m)
		}
		return withParts(msgs)
	case r.Get("stop_reason").Exists(): // Messages
		return withParts([]message{{Role: "assistant", Parts: blockParts(r.Get("content")), FinishReason: r.Get("stop_reason").String()}})
	case r.Get("output").IsArray(): // Responses: its items make one answer
		var parts []part
		for _, m := range appendItems(nil, r.Get("output")) {
			parts = append(parts, m.Parts...)
		}
		return withParts([]message{{Role: "assistant", Parts: parts, FinishReason: r.Get("status").String()}})
	}
	return nil
}

func appendItems(msgs []message, items gjson.Result) []message {
	for _, it := range items.Array() {
		msgs = appendItem(msgs, it)
	}
	return msgs
}

// appendItem appends a Responses input or output item.
func appendItem(msgs []message, it gjson.Result) []message {
	switch it.Get("type").String() {
	case "", "message":
		return append(msgs, message{Role: it.Get("role").String(), Parts: textParts(it.Get("content"))})
	case "function_call", "custom_tool_call":
		return append(msgs, message{Role: "assistant", Parts: []part{{Type: partToolCall, ID: it.Get("call_id").String(),
			Name: it.Get("name").String(), Arguments: jsonValue(it.Get("arguments"))}}})
	case "function_call_output", "custom_tool_call_output":
		return append(msgs, message{Role: "tool", Parts: []part{{Type: partToolResp, ID: it.Get("call_id").String(), Result: it.Get("output").String()}}})
	case "code_interpreter_call":
		args, _ := json.Marshal(map[string]string{"code": it.Get("code").String()})
		return append(msgs, message{Role: "assistant", Parts: []part{{Type: partToolCall, ID: it.Get("id").String(),
			Name: "code_interpreter", Arguments: args}}})
	case "shell_call":
		return append(msgs, message{Role: "assistant", Parts: []part{{Type: partToolCall, ID: it.Get("call_id").String(),
			Name: "shell", Arguments: jsonValue(it.Get("action"))}}})
	case "shell_call_output":
		return append(msgs, message{Role: "tool", Parts: []part{{Type: partToolResp, ID: it.Get("call_id").String(), Result: it.Get("output").Raw}}})
	}
	return msgs // reasoning, images, files: not messages the conventions name
}

// chatMessage reads a Chat Completions message.
func chatMessage(m gjson.Result) message {
	role := m.Get("role").String()
	if role == "tool" {
		return message{Role: role, Parts: []part{{Type: partToolResp, ID: m.Get("tool_call_id").String(), Result: textOf(m.Get("content"))}}}
	}
	msg := message{Role: role, Parts: textParts(m.Get("content"))}
	for _, tc := range m.Get("tool_calls").Array() {
		msg.Parts = append(msg.Parts, part{Type: partToolCall, ID: tc.Get("id").String(), Name: tc.Get("function.name").String(),
			Arguments: jsonValue(tc.Get("function.arguments"))})
	}
	return msg
}

// blockParts reads Messages content: a string or blocks.
func blockParts(content gjson.Result) []part {
	if content.Type == gjson.String {
		return []part{{Type: partText, Content: content.String()}}
	}
	var parts []part
	for _, b := range content.Array() {
		switch t := b.Get("type").String(); t {
		case "text":
			parts = append(parts, part{Type: partText, Content: b.Get("text").String()})
		case "tool_use", "server_tool_use":
			parts = append(parts, part{Type: partToolCall, ID: b.Get("id").String(), Name: b.Get("name").String(), Arguments: jsonValue(b.Get("input"))})
		case "tool_result":
			parts = append(parts, part{Type: partToolResp, ID: b.Get("tool_use_id").String(), Result: textOf(b.Get("content"))})
		default:
			if b.Get("tool_use_id").Exists() { // code_execution_tool_result and its kin
				parts = append(parts, part{Type: partToolResp, ID: b.Get("tool_use_id").String(), Result: b.Get("content").Raw})
			}
		}
	}
	return parts
}

// textParts reads content that is a string or an array of typed text parts (input_text,
// output_text, text); other parts are left out.
func textParts(content gjson.Result) []part {
	if !content.Exists() {
		return nil
	}
	if content.Type == gjson.String {
		return []part{{Type: partText, Content: content.String()}}
	}
	var parts []part
	for _, p := range content.Array() {
		switch p.Get("type").String() {
		case "text", "input_text", "output_text":
			parts = append(parts, part{Type: partText, Content: p.Get("text").String()})
		}
	}
	return parts
}

// textOf is content's text: the string, or its text parts joined.
func textOf(content gjson.Result) string {
	if content.Type == gjson.String {
		return content.String()
	}
	s := ""
	for _, p := range textParts(content) {
		s += p.Content
	}
	return s
}

// jsonValue returns v as JSON: a string holding JSON (a function call's arguments) as that
// JSON, else v itself; nil when v is absent.
func jsonValue(v gjson.Result) json.RawMessage {
	switch {
	case !v.Exists():
		return nil
	case v.Type == gjson.String && gjson.Valid(v.String()):
		return json.RawMessage(v.String())
	}
	return json.RawMessage(v.Raw)
}

// encodeBounded encodes v (messages or parts) as JSON of at most max bytes when it can:
// whole items are dropped from the front first (the latest ones matter most to a round),
// then the texts of the one left are cut, shorter and shorter. It returns "" when nothing
// is left to record.
func encodeBounded[T any](items []T, max int, cut func(T, int) T) string {
	for len(items) > 1 {
		b, _ := json.Marshal(items)
		if len(b) <= max {
			return string(b)
		}
		items = items[1:]
	}
	if len(items) == 0 {
		return ""
	}
	for budget := max; budget > 0; budget /= 2 {
		b, _ := json.Marshal([]T{cut(items[0], budget)})
		if len(b) <= max {
			return string(b)
		}
	}
	return ""
}

// cutMessage returns m with every text, argument and result cut to at most budget bytes
// (arguments that do not fit become a JSON string of their cut text).
func cutMessage(m message, budget int) message {
	parts := make([]part, len(m.Parts))
	for i, p := range m.Parts {
		parts[i] = cutPart(p, budget)
	}
	m.Parts = parts
	return m
}

func cutPart(p part, budget int) part {
	p.Content = cutString(p.Content, budget)
	p.Result = cutString(p.Result, budget)
	if len(p.Arguments) > budget {
		s, _ := json.Marshal(cutString(string(p.Arguments), budget))
		p.Arguments = s
	}
	return p
}
