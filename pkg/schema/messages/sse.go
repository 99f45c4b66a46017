package messages

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// writeSSE writes a final answer (a Messages API message) to w as the native event stream:
// message_start (the message without content, stop_reason null), ping, each content block as
// content_block_start / content_block_delta / content_block_stop — text as a text_delta, a
// tool_use or server_tool_use input as an input_json_delta, a result block whole in its
// content_block_start — then message_delta (stop_reason, stop_sequence, container, usage) and
// message_stop. The SDKs' message accumulators rebuild the message from it. The progressive
// stream of a loop (see events) writes the same events as they happen.
func writeSSE(w io.Writer, final []byte) error {
	msg := gjson.ParseBytes(final)
	if !gjson.ValidBytes(final) || !msg.IsObject() {
		return errors.New("sse: the answer is not a JSON object")
	}
	ew := &eventWriter{w: w}
	if err := writeStart(ew, msg); err != nil {
		return err
	}
	for i, b := range msg.Get("content").Array() {
		writeBlock(ew, i, b)
	}
	writeEnd(ew, msg)
	return ew.err
}

// writeStart writes message_start, for the message msg begins, and ping.
func writeStart(ew *eventWriter, msg gjson.Result) error {
	start, err := sjson.SetRaw(msg.Raw, "content", "[]")
	if err == nil {
		start, err = sjson.SetRaw(start, "stop_reason", "null")
	}
	if err == nil {
		start, err = sjson.SetRaw(start, "stop_sequence", "null")
	}
	if err == nil {
		start, err = sjson.Delete(start, "container")
	}
	if err == nil && msg.Get("usage").IsObject() {
		// The start carries the input side; the output tokens come with message_delta, and
		// the server tools' requests too (the reference's recorded streams).
		start, err = sjson.Set(start, "usage.output_tokens", 0)
		if err == nil {
			start, err = sjson.Delete(start, "usage.server_tool_use")
		}
	}
	if err != nil {
		return fmt.Errorf("sse: message_start: %w", err)
	}
	ew.event("message_start", `{"type":"message_start","message":`+start+`}`)
	ew.event("ping", `{"type":"ping"}`)
	return nil
}

// writeBlock writes the content block b at index idx: its start, its deltas, its stop.
func writeBlock(ew *eventWriter, idx int, b gjson.Result) {
	i := itoa(idx)
	switch b.Get("type").String() {
	case "text":
		head, _ := sjson.Set(b.Raw, "text", "")
		head, _ = sjson.Delete(head, "citations")
		ew.event("content_block_start", `{"type":"content_block_start","index":`+i+`,"content_block":`+head+`}`)
		if t := b.Get("text").String(); t != "" {
			ew.event("content_block_delta", `{"type":"content_block_delta","index":`+i+`,"delta":{"type":"text_delta","text":`+quote(t)+`}}`)
		}
		for _, c := range b.Get("citations").Array() {
			ew.event("content_block_delta", `{"type":"content_block_delta","index":`+i+`,"delta":{"type":"citations_delta","citation":`+c.Raw+`}}`)
		}
	case "thinking":
		head := `{"type":"thinking","thinking":"","signature":""}`
		ew.event("content_block_start", `{"type":"content_block_start","index":`+i+`,"content_block":`+head+`}`)
		if t := b.Get("thinking").String(); t != "" {
			ew.event("content_block_delta", `{"type":"content_block_delta","index":`+i+`,"delta":{"type":"thinking_delta","thinking":`+quote(t)+`}}`)
		}
		if s := b.Get("signature").String(); s != "" {
			ew.event("content_block_delta", `{"type":"content_block_delta","index":`+i+`,"delta":{"type":"signature_delta","signature":`+quote(s)+`}}`)
		}
	case "tool_use", "server_tool_use":
		if c := b.Get("caller.type"); c.Exists() && c.String() != "direct" {
			// A call made from code arrives whole in its start, as natively: no input deltas.
			ew.event("content_block_start", `{"type":"content_block_start","index":`+i+`,"content_block":`+b.Raw+`}`)
			break
		}
		head, _ := sjson.SetRaw(b.Raw, "input", "{}")
		ew.event("content_block_start", `{"type":"content_block_start","index":`+i+`,"content_block":`+head+`}`)
		if in := b.Get("input"); in.Exists() && in.Raw != "{}" {
			ew.event("content_block_delta", `{"type":"content_block_delta","index":`+i+`,"delta":{"type":"input_json_delta","partial_json":`+quote(in.Raw)+`}}`)
		}
	default:
		// Result blocks (and any other block) arrive whole in their start event.
		ew.event("content_block_start", `{"type":"content_block_start","index":`+i+`,"content_block":`+b.Raw+`}`)
	}
	ew.event("content_block_stop", `{"type":"content_block_stop","index":`+i+`}`)
}

// writeEnd writes message_delta (stop_reason, stop_sequence, container and usage of the final
// answer msg) and message_stop.
func writeEnd(ew *eventWriter, msg gjson.Result) {
	delta := `{"stop_reason":` + rawOr(msg.Get("stop_reason"), "null") + `,"stop_sequence":` + rawOr(msg.Get("stop_sequence"), "null")
	if c := msg.Get("container"); c.Exists() {
		delta += `,"container":` + c.Raw
	}
	ew.event("message_delta", `{"type":"message_delta","delta":`+delta+`},"usage":`+deltaUsage(msg.Get("usage"))+`}`)
	ew.event("message_stop", `{"type":"message_stop"}`)
}

// deltaUsage is the usage of a message_delta for an answer's usage u: its counts, without
// what only the message's usage holds natively (cache_creation, service_tier: the recorded
// streams' message_delta has neither).
func deltaUsage(u gjson.Result) string {
	if !u.IsObject() {
		return "{}"
	}
	out := u.Raw
	for _, k := range []string{"cache_creation", "service_tier"} {
		if u.Get(k).Exists() {
			if d, err := sjson.Delete(out, k); err == nil {
				out = d
			}
		}
	}
	return out
}

func rawOr(r gjson.Result, def string) string {
	if !r.Exists() {
		return def
	}
	return r.Raw
}

// eventWriter writes SSE events to w, keeping the first error.
type eventWriter struct {
	w   io.Writer
	err error
}

func (e *eventWriter) event(name, data string) {
	if e.err != nil {
		return
	}
	if strings.ContainsAny(data, "\r\n") {
		// Raw blocks keep the upstream's whitespace; an event's data must be one line.
		var b bytes.Buffer
		if err := json.Compact(&b, []byte(data)); err != nil {
			e.err = fmt.Errorf("sse: %s: %w", name, err)
			return
		}
		data = b.String()
	}
	_, e.err = io.WriteString(e.w, "event: "+name+"\ndata: "+data+"\n\n")
}
