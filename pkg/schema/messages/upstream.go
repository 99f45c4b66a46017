package messages

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/codeinterp/codeinterp/pkg/schema"
)

// ReadStream implements [schema.StreamReader]: a Messages event stream is read up to its
// message_stop, and the message its events build is the answer.
func (x *exchange) ReadStream() schema.UpstreamStream { return &upstreamStream{x: x} }

var _ schema.StreamReader = (*exchange)(nil)

// upstreamStream reads one Messages event stream from the upstream, event by event, and
// builds the message it streams as the SDKs' accumulators do: message_start's message, each
// content block from its content_block_start with its deltas applied (text, the tool_use
// input's partial JSON, thinking, signature, citations), stop_reason, stop_sequence and usage
// from message_delta. The content_block_* events are passed on as they came; the events sink
// decides which of them the client sees (see events.delta). It is used by one goroutine at a
// time.
type upstreamStream struct {
	// x, when set, keeps an error event the stream ends with, for the client's stream.
	x *exchange
	// msg is message_start's message, "" before it.
	msg    string
	blocks []*upstreamBlock
	// stop and stopSeq are message_delta's stop_reason and stop_sequence (raw JSON), usage the
	// usage counts it gave, each a whole-message total.
	stop, stopSeq string
	usage         map[string]string
	usageKeys     []string
	ended         bool
}

// upstreamBlock is one content block as its events built it.
type upstreamBlock struct {
	start                     string // content_block_start's content_block
	text, thinking, signature strings.Builder
	input                     []byte
	citations                 []string
	stopped                   bool
}

// Event implements [schema.UpstreamStream].
func (u *upstreamStream) Event(_ string, data []byte) (delta, answer []byte, err error) {
	if u.ended {
		return nil, nil, errors.New("read messages stream: an event after message_stop")
	}
	if !gjson.ValidBytes(data) {
		return nil, nil, errors.New("read messages stream: an event is not JSON")
	}
	ev := gjson.ParseBytes(data)
	if !ev.IsObject() {
		return nil, nil, errors.New("read messages stream: an event is not a JSON object")
	}
	typ := ev.Get("type").String()
	if u.msg == "" && typ != "message_start" && typ != "ping" && typ != "error" {
		return nil, nil, fmt.Errorf("read messages stream: %s before message_start", typ)
	}
	switch typ {
	case "message_start":
		m := ev.Get("message")
		if u.msg != "" || !m.IsObject() {
			return nil, nil, errors.New("read messages stream: message_start repeated or without its message")
		}
		u.msg = m.Raw
		return data, nil, nil // the first answer's starts the client's stream
	case "content_block_start":
		b := ev.Get("content_block")
		if ev.Get("index").Int() != int64(len(u.blocks)) || ev.Get("index").Type != gjson.Number || !b.IsObject() {
			return nil, nil, fmt.Errorf("read messages stream: content_block_start at index %s, expected %d", ev.Get("index").Raw, len(u.blocks))
		}
		u.blocks = append(u.blocks, &upstreamBlock{start: b.Raw})
		return data, nil, nil
	case "content_block_delta", "content_block_stop":
		b, err := u.block(ev)
		if err != nil {
			return nil, nil, err
		}
		if typ == "content_block_stop" {
			b.stopped = true
			return data, nil, nil
		}
		d := ev.Get("delta")
		switch d.Get("type").String() {
		case "text_delta":
			b.text.WriteString(d.Get("text").String())
		case "input_json_delta":
			b.input = append(b.input, d.Get("partial_json").String()...)
		case "thinking_delta":
			b.thinking.WriteString(d.Get("thinking").String())
		case "signature_delta":
			b.signature.WriteString(d.Get("signature").String())
		case "citations_delta":
			if c := d.Get("citation"); c.IsObject() {
				b.citations = append(b.citations, c.Raw)
			}
		default:
			return nil, nil, nil // a delta this reader does not know: not the client's either
		}
		return data, nil, nil
	case "message_delta":
		d := ev.Get("delta")
		if s := d.Get("stop_reason"); s.Exists() {
			u.stop = s.Raw
		}
		if s := d.Get("stop_sequence"); s.Exists() {
			u.stopSeq = s.Raw
		}
		ev.Get("usage").ForEach(func(k, v gjson.Result) bool {
			if u.usage == nil {
				u.usage = map[string]string{}
			}
			if _, ok := u.usage[k.String()]; !ok {
				u.usageKeys = append(u.usageKeys, k.String())
			}
			u.usage[k.String()] = v.Raw
			return true
		})
	case "message_stop":
		u.ended = true
		out, err := u.answer()
		if err != nil {
			return nil, nil, err
		}
		return nil, out, nil
	case "error":
		if u.x != nil && ev.Get("error.type").Type == gjson.String && ev.Get("error.message").Type == gjson.String {
			// An error the API reports in the middle of its stream (overloaded_error): the
			// client's stream ends with it as it is (see events).
			u.x.upstreamErr = ErrorBodyOf(ev.Get("error.type").String(), ev.Get("error.message").String())
		}
		return nil, nil, fmt.Errorf("read messages stream: the upstream reported an error (%s)", ev.Get("error.type").String())
	}
	return nil, nil, nil
}

// block is the open block an event's index names.
func (u *upstreamStream) block(ev gjson.Result) (*upstreamBlock, error) {
	i := ev.Get("index")
	if i.Type != gjson.Number || i.Int() < 0 || i.Int() >= int64(len(u.blocks)) || u.blocks[i.Int()].stopped {
		return nil, fmt.Errorf("read messages stream: %s for no open block (index %s)", ev.Get("type").String(), i.Raw)
	}
	return u.blocks[i.Int()], nil
}

// answer is the message the stream built, as the upstream would have answered it as JSON.
func (u *upstreamStream) answer() ([]byte, error) {
	parts := make([]string, len(u.blocks))
	for i, b := range u.blocks {
		raw, err := b.build()
		if err != nil {
			return nil, fmt.Errorf("read messages stream: block %d: %w", i, err)
		}
		parts[i] = raw
	}
	out, err := sjson.SetRaw(u.msg, "content", "["+strings.Join(parts, ",")+"]")
	if err == nil && u.stop != "" {
		out, err = sjson.SetRaw(out, "stop_reason", u.stop)
	}
	if err == nil && u.stopSeq != "" {
		out, err = sjson.SetRaw(out, "stop_sequence", u.stopSeq)
	}
	for _, k := range u.usageKeys {
		if err != nil {
			break
		}
		if !gjson.Get(out, "usage").IsObject() {
			out, err = sjson.SetRaw(out, "usage", "{}")
		}
		if err == nil {
			out, err = sjson.SetRaw(out, "usage."+escapePath(k), u.usage[k])
		}
	}
	if err != nil {
		return nil, fmt.Errorf("read messages stream: build the message: %w", err)
	}
	return []byte(out), nil
}

// build is the block with its deltas applied. A tool input that is not JSON (the model wrote
// a broken one) becomes a string, which ParseTurn refuses as an input.
func (b *upstreamBlock) build() (string, error) {
	out := b.start
	var err error
	set := func(path, raw string) {
		if err == nil {
			out, err = sjson.SetRaw(out, path, raw)
		}
	}
	if b.text.Len() > 0 {
		set("text", quote(gjson.Get(out, "text").String()+b.text.String()))
	}
	if b.thinking.Len() > 0 {
		set("thinking", quote(gjson.Get(out, "thinking").String()+b.thinking.String()))
	}
	if b.signature.Len() > 0 {
		set("signature", quote(b.signature.String()))
	}
	if len(b.input) > 0 {
		if json.Valid(b.input) {
			set("input", string(b.input))
		} else {
			set("input", quote(string(b.input)))
		}
	}
	if len(b.citations) > 0 {
		var all []string
		for _, c := range gjson.Get(out, "citations").Array() {
			all = append(all, c.Raw)
		}
		set("citations", "["+strings.Join(append(all, b.citations...), ",")+"]")
	}
	return out, err
}

// escapePath escapes the characters sjson reads as path syntax in a key.
func escapePath(k string) string {
	r := strings.NewReplacer(`\`, `\\`, ".", `\.`, "*", `\*`, "?", `\?`, "|", `\|`, "#", `\#`, "@", `\@`, ":", `\:`)
	return r.Replace(k)
}
