package chat

import (
	"errors"
	"net/http"
	"slices"
	"strconv"

	"github.com/codeinterp/codeinterp/pkg/schema/internal/jsonscan"
	"github.com/codeinterp/codeinterp/pkg/schema/internal/openai"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// SSE encodes a Chat Completions body built by [Final] as the text/event-stream of
// chat.completion.chunk objects the native API sends when the client asked for stream:true.
// streamOptions is the client's original "stream_options" object (nil when it sent none).
//
// Every chunk carries the body's id, created, model, system_fingerprint and service_tier. For
// each choice in turn: a role chunk (delta {"role":"assistant","content":""}), the content in
// deltas, the refusal in deltas, each tool call (a first fragment with index, id, type,
// function.name and empty arguments, then argument fragments), and a chunk with delta {} and
// the finish_reason (and the choice's logprobs, when it has any). When
// streamOptions.include_usage is true every chunk has "usage": null and a last chunk has
// "choices": [] and the body's usage; otherwise chunks have no usage. The stream ends with
// `data: [DONE]`. Data lines never contain a raw newline, U+2028 or U+2029. SSE fails when
// final is not a JSON object.
func SSE(final []byte, streamOptions []byte) ([]byte, error) {
	return appendSSE(nil, final, streamOptions, nil)
}

// relayed is what a client's chunk stream already carries of an answer, written while its
// round streamed: the stream's chunk envelope and, of the choice with index 0, the role chunk,
// the first bytes of its content and refusal and the first fragments of its first tool calls.
type relayed struct {
	// head is the envelope of the stream's chunks (see chunkHead), nil before the first.
	head []byte
	// role reports that choice 0's role chunk was written.
	role bool
	// content and refusal are the bytes of choice 0's content and refusal written.
	content, refusal int
	// calls holds, for each of choice 0's first tool calls whose first fragment was written,
	// the bytes of its arguments written.
	calls []int
}

// chunkHead returns the envelope of a chunk of the answer or chunk root (compact): its id,
// object, created, model, system_fingerprint and service_tier, up to "choices", without the
// closing brace.
func chunkHead(root gjson.Result) []byte {
	head := make([]byte, 0, 256)
	head = append(head, `{"id":`...)
	head = append(head, openai.RawOr(root.Get("id"), `""`)...)
	head = append(head, `,"object":"chat.completion.chunk","created":`...)
	head = append(head, openai.RawOr(root.Get("created"), "0")...)
	head = append(head, `,"model":`...)
	head = append(head, openai.RawOr(root.Get("model"), `""`)...)
	for _, k := range []string{"system_fingerprint", "service_tier"} {
		if v := root.Get(k); v.Exists() {
			head = append(head, ',', '"')
			head = append(head, k...)
			head = append(head, '"', ':')
			head = append(head, v.Raw...)
		}
	}
	return head
}

// chunkTail is what closes a chunk after "choices": usage null in every chunk when the client
// asked for a usage chunk.
func chunkTail(streamOptions []byte) string {
	if gjson.GetBytes(streamOptions, "include_usage").Bool() {
		return `,"usage":null}`
	}
	return "}"
}

// appendSSE appends to dst the chunk stream of final as SSE writes it, less what r says the
// client's stream already carries (nil: nothing), in r's envelope when it has one.
func appendSSE(dst, final []byte, streamOptions []byte, r *relayed) ([]byte, error) {
	s, ok := openai.CompactBody(final)
	if !ok {
		return nil, errors.New("encode chat stream: body is not a JSON object")
	}
	root := gjson.Parse(s)
	head := chunkHead(root)
	if r != nil && r.head != nil {
		head = r.head
	}
	tail := chunkTail(streamOptions)
	// Each delta of at most DeltaMax bytes costs about 200 bytes of chunk envelope.
	c := sseChat{buf: slices.Grow(dst, 3*len(s)+4*len(head)+1024), head: head, tail: tail}

	pos := 0
	root.Get("choices").ForEach(func(_, choice gjson.Result) bool {
		var skip *relayed
		if r != nil && choice.Get("index").Raw == "0" {
			skip = r
		}
		c.choice(choice, pos, skip)
		pos++
		return true
	})
	if tail != "}" {
		c.buf = append(c.buf, "data: "...)
		c.buf = append(c.buf, c.head...)
		c.buf = append(c.buf, `,"choices":[],"usage":`...)
		c.buf = append(c.buf, openai.RawOr(root.Get("usage"), "null")...)
		c.buf = append(c.buf, "}\n\n"...)
	}
	c.buf = append(c.buf, "data: [DONE]\n\n"...)
	return c.buf, nil
}

// sseChat builds a Chat Completions chunk stream.
type sseChat struct {
	buf   []byte
	head  []byte // the chunk envelope up to "choices", without the closing brace
	tail  string // what closes a chunk after "choices"
	index string // the current choice's index, as JSON
}

// begin opens a chunk with one choice (the current one) and opens its delta object.
func (c *sseChat) begin() {
	c.buf = append(c.buf, "data: "...)
	c.buf = append(c.buf, c.head...)
	c.buf = append(c.buf, `,"choices":[{"index":`...)
	c.buf = append(c.buf, c.index...)
	c.buf = append(c.buf, `,"delta":{`...)
}

// end closes the delta and the chunk.
func (c *sseChat) end(logprobs, finishReason string) {
	c.buf = append(c.buf, `},"logprobs":`...)
	c.buf = append(c.buf, logprobs...)
	c.buf = append(c.buf, `,"finish_reason":`...)
	c.buf = append(c.buf, finishReason...)
	c.buf = append(c.buf, '}', ']')
	c.buf = append(c.buf, c.tail...)
	c.buf = append(c.buf, "\n\n"...)
}

// text writes s as deltas of the string field key.
func (c *sseChat) text(key, s string) {
	for len(s) > 0 {
		n := openai.Cut(s)
		c.begin()
		c.buf = append(c.buf, '"')
		c.buf = append(c.buf, key...)
		c.buf = append(c.buf, '"', ':')
		c.buf = jsonscan.AppendString(c.buf, s[:n])
		c.end("null", "null")
		s = s[n:]
	}
}

// choice writes all chunks of one choice, less what skip says the stream already carries
// (nil: nothing); pos is its position, used when it has no index.
func (c *sseChat) choice(choice gjson.Result, pos int, skip *relayed) {
	if skip == nil {
		skip = &relayed{}
	}
	c.index = strconv.Itoa(pos)
	if i := choice.Get("index"); i.Type == gjson.Number {
		c.index = i.Raw
	}
	msg := choice.Get("message")

	if !skip.role {
		c.begin()
		c.buf = append(c.buf, `"role":`...)
		c.buf = append(c.buf, openai.RawOr(msg.Get("role"), `"assistant"`)...)
		c.buf = append(c.buf, `,"content":""`...)
		c.end("null", "null")
	}

	c.text("content", rest(msg.Get("content").String(), skip.content))
	c.text("refusal", rest(msg.Get("refusal").String(), skip.refusal))

	k := 0
	msg.Get("tool_calls").ForEach(func(_, tc gjson.Result) bool {
		if k < len(skip.calls) {
			c.arguments(strconv.Itoa(k), rest(tc.Get("function.arguments").String(), skip.calls[k]))
		} else {
			c.toolCall(k, tc)
		}
		k++
		return true
	})

	c.begin()
	logprobs := choice.Get("logprobs")
	c.end(openai.RawOr(logprobs, "null"), openai.RawOr(choice.Get("finish_reason"), "null"))
}

// toolCall writes the fragments of tool call number k.
func (c *sseChat) toolCall(k int, tc gjson.Result) {
	ks := strconv.Itoa(k)
	if t := tc.Get("type"); t.Exists() && t.String() != "function" {
		// Not a function call: one fragment with the whole call.
		raw, err := sjson.SetRaw(tc.Raw, "index", ks)
		if err != nil {
			raw = tc.Raw
		}
		c.begin()
		c.buf = append(c.buf, `"tool_calls":[`...)
		c.buf = append(c.buf, raw...)
		c.buf = append(c.buf, ']')
		c.end("null", "null")
		return
	}
	c.begin()
	c.buf = append(c.buf, `"tool_calls":[{"index":`...)
	c.buf = append(c.buf, ks...)
	c.buf = append(c.buf, `,"id":`...)
	c.buf = append(c.buf, openai.RawOr(tc.Get("id"), `""`)...)
	c.buf = append(c.buf, `,"type":"function","function":{"name":`...)
	c.buf = append(c.buf, openai.RawOr(tc.Get("function.name"), `""`)...)
	c.buf = append(c.buf, `,"arguments":""}}]`...)
	c.end("null", "null")

	c.arguments(ks, tc.Get("function.arguments").String())
}

// arguments writes s as argument fragments of tool call number ks.
func (c *sseChat) arguments(ks, s string) {
	for len(s) > 0 {
		n := openai.Cut(s)
		c.begin()
		c.buf = append(c.buf, `"tool_calls":[{"index":`...)
		c.buf = append(c.buf, ks...)
		c.buf = append(c.buf, `,"function":{"arguments":`...)
		c.buf = jsonscan.AppendString(c.buf, s[:n])
		c.buf = append(c.buf, `}}]`...)
		c.end("null", "null")
		s = s[n:]
	}
}

// rest is s without its first n bytes, which the stream already carries.
func rest(s string, n int) string {
	if n >= len(s) {
		return ""
	}
	return s[max(n, 0):]
}

// errorSSE encodes a lone stream error: a data line with the API's error body
// ({"error":{"message","type":"server_error","param":null,"code"}}), which SDKs raise as an
// error.
func errorSSE(code, message string) []byte {
	body := openai.ServerErrorBody(http.StatusInternalServerError, message, code)
	out := make([]byte, 0, len(body)+8)
	out = append(out, "data: "...)
	out = append(out, body...)
	return append(out, "\n\n"...)
}
