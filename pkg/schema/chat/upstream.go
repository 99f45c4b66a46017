package chat

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/schema/internal/jsonscan"
	"github.com/codeinterp/codeinterp/pkg/schema/internal/openai"
)

// ReadStream implements [schema.StreamReader]: a chunk stream is read up to its data: [DONE],
// or up to the usage chunk that follows the last choice's finish_reason when the upstream
// ends without [DONE].
func (x *exchange) ReadStream() schema.UpstreamStream {
	return &upstreamStream{x: x, name: x.FunctionName()}
}

var _ schema.StreamReader = (*exchange)(nil)

// maxChoices bounds the choices one stream may build (the API allows n up to 128).
const maxChoices = 128

// upstreamStream reads one Chat Completions chunk stream from the upstream, chunk by chunk,
// and builds the chat.completion it streams as the SDKs' accumulators do: the first
// id, created, model, service_tier and system_fingerprint; per choice (by index) the role,
// the content, refusal and reasoning_content deltas joined, the tool calls assembled by index
// (the id and type they give, the name and arguments joined), a legacy
// function_call, the finish_reason and the logprobs joined; the usage of the usage chunk.
//
// What the client's stream may show of choice 0 is passed on as it arrives, as a delta object
// (see relayDelta): its content and refusal deltas, and the fragments of the tool calls of
// client functions; a call of the internal function is never shown, nor the content that
// follows it in the round. It is used by one goroutine at a time.
type upstreamStream struct {
	// x, when set, keeps an error the stream reports, for the client's stream.
	x *exchange
	// name is the internal function's name.
	name string
	// id, created, model, tier and fingerprint are the first the chunks give, raw and compact
	// ("" before).
	id, created, model, tier, fingerprint string
	seen, ended                           bool
	choices                               []*upstreamChoice
	// usage is the usage chunk's usage object, compact; "" before it.
	usage string
}

// upstreamChoice is one choice as its deltas built it.
type upstreamChoice struct {
	role                              string // raw
	content, refusal, reasoning       strings.Builder
	hasContent, hasRefusal, hasReason bool
	calls                             []*upstreamCall
	fnName, fnArgs                    strings.Builder // a legacy function_call
	hasFn                             bool
	finish                            string // raw, "" before the finish_reason
	// logContent and logRefusal are the logprobs entries, compact; hasLogprobs reports that a
	// chunk had a logprobs object.
	logContent, logRefusal []string
	hasLogprobs            bool
	// internal reports that the round called the internal function: nothing more of its
	// content is shown. blocked reports that a tool call was not shown: no later one is, so
	// the client's indexes have no gap. clients is the number of calls of client tools so far.
	internal, blocked bool
	clients           int
}

// upstreamCall is one tool call as its fragments built it.
type upstreamCall struct {
	id, typ    string // raw, compact
	name, args strings.Builder
	// shown is the client's index of the call when its fragments are passed on, else -1.
	shown int
	// decided reports that its name was read: whether it is the internal function's is known.
	decided bool
}

// Event implements [schema.UpstreamStream].
func (u *upstreamStream) Event(_ string, data []byte) (delta, answer []byte, err error) {
	done := string(bytes.TrimSpace(data)) == "[DONE]"
	switch {
	case u.ended && done:
		return nil, nil, nil // the [DONE] after a usage chunk that ended the answer
	case u.ended:
		return nil, nil, errors.New("read chat stream: a chunk after the answer's end")
	case done && !u.seen:
		return nil, nil, errors.New("read chat stream: [DONE] before any chunk")
	case done:
		u.ended = true
		return nil, u.answer(), nil
	}
	if !gjson.ValidBytes(data) {
		return nil, nil, errors.New("read chat stream: a chunk is not JSON")
	}
	ev := gjson.ParseBytes(data)
	if !ev.IsObject() {
		return nil, nil, errors.New("read chat stream: a chunk is not a JSON object")
	}
	if e := ev.Get("error"); e.Exists() {
		if u.x != nil && e.IsObject() && e.Get("message").Type == gjson.String {
			// An error the API reports inside its stream: the client's stream ends with it as
			// it is (see events).
			u.x.upstreamErr = openai.AppendCompact(nil, ev.Raw)
		}
		return nil, nil, fmt.Errorf("read chat stream: the upstream reported an error (%s)", e.Get("code").String())
	}
	u.seen = true
	for _, f := range [...]struct {
		v   *string
		key string
	}{{&u.id, "id"}, {&u.created, "created"}, {&u.model, "model"}, {&u.tier, "service_tier"}, {&u.fingerprint, "system_fingerprint"}} {
		if *f.v == "" {
			*f.v = compact(ev.Get(f.key))
		}
	}
	choices := ev.Get("choices")
	if choices.Exists() && !choices.IsArray() && choices.Type != gjson.Null {
		return nil, nil, errors.New("read chat stream: choices is not a list")
	}
	var relay []byte
	n := 0
	for _, c := range choices.Array() {
		n++
		out, err := u.choice(c)
		if err != nil {
			return nil, nil, err
		}
		if out != nil {
			relay = out
		}
	}
	if us := ev.Get("usage"); us.IsObject() {
		u.usage = compact(us)
		if n == 0 && u.finished() {
			// The usage chunk comes last: an upstream that sends no [DONE] ends here.
			u.ended = true
			return nil, u.answer(), nil
		}
	}
	return relay, nil, nil
}

// finished reports whether every choice read has its finish_reason.
func (u *upstreamStream) finished() bool {
	some := false
	for _, c := range u.choices {
		if c == nil {
			continue
		}
		if c.finish == "" {
			return false
		}
		some = true
	}
	return some
}

// choice applies one chunk choice, and returns what the client may see of it (nil: nothing).
func (u *upstreamStream) choice(c gjson.Result) ([]byte, error) {
	idx := c.Get("index")
	if idx.Type != gjson.Number || idx.Int() < 0 || idx.Int() >= maxChoices || idx.Raw != strconv.FormatInt(idx.Int(), 10) {
		return nil, fmt.Errorf("read chat stream: a choice with index %s", idx.Raw)
	}
	i := int(idx.Int())
	for len(u.choices) <= i {
		u.choices = append(u.choices, nil)
	}
	ch := u.choices[i]
	if ch == nil {
		ch = &upstreamChoice{}
		u.choices[i] = ch
	}
	var show relayDelta
	d := c.Get("delta")
	if r := d.Get("role"); r.Type == gjson.String {
		ch.role = compact(r)
	}
	if s := d.Get("content"); s.Type == gjson.String {
		ch.content.WriteString(s.Str)
		ch.hasContent = true
		if !ch.internal {
			show.content = s.Str
		}
	}
	if s := d.Get("refusal"); s.Type == gjson.String {
		ch.refusal.WriteString(s.Str)
		ch.hasRefusal = true
		if !ch.internal {
			show.refusal = s.Str
		}
	}
	if s := d.Get("reasoning_content"); s.Type == gjson.String {
		ch.reasoning.WriteString(s.Str)
		ch.hasReason = true
	}
	if fc := d.Get("function_call"); fc.IsObject() {
		ch.hasFn = true
		ch.fnName.WriteString(fc.Get("name").String())
		ch.fnArgs.WriteString(fc.Get("arguments").String())
	}
	if tcs := d.Get("tool_calls"); tcs.IsArray() {
		for _, tc := range tcs.Array() {
			if err := u.toolCall(ch, tc, &show); err != nil {
				return nil, err
			}
		}
	}
	if f := c.Get("finish_reason"); f.Type == gjson.String {
		ch.finish = compact(f)
	}
	if lp := c.Get("logprobs"); lp.IsObject() {
		ch.hasLogprobs = true
		for _, e := range lp.Get("content").Array() {
			ch.logContent = append(ch.logContent, compact(e))
		}
		for _, e := range lp.Get("refusal").Array() {
			ch.logRefusal = append(ch.logRefusal, compact(e))
		}
	}
	if i != 0 {
		return nil, nil // the client's stream shows the other choices from the answer
	}
	return show.encode(u), nil
}

// toolCall applies one tool call fragment to ch, and adds to show what the client may see.
func (u *upstreamStream) toolCall(ch *upstreamChoice, tc gjson.Result, show *relayDelta) error {
	if !tc.IsObject() {
		return errors.New("read chat stream: a tool call fragment is not an object")
	}
	var call *upstreamCall
	switch k := tc.Get("index"); {
	case k.Type == gjson.Number && k.Int() >= 0 && k.Int() < int64(len(ch.calls)) && k.Raw == strconv.FormatInt(k.Int(), 10):
		call = ch.calls[k.Int()]
	case k.Type == gjson.Number && k.Int() == int64(len(ch.calls)):
	case k.Exists():
		return fmt.Errorf("read chat stream: a tool call fragment at index %s, expected at most %d", k.Raw, len(ch.calls))
	case len(ch.calls) > 0 && !tc.Get("id").Exists():
		// No index (some backends): a fragment without an id continues the last call.
		call = ch.calls[len(ch.calls)-1]
	}
	if call == nil {
		call = &upstreamCall{shown: -1}
		ch.calls = append(ch.calls, call)
	}
	if id := tc.Get("id"); id.Type == gjson.String && id.Str != "" {
		call.id = compact(id)
	}
	if t := tc.Get("type"); t.Type == gjson.String && t.Str != "" {
		call.typ = compact(t)
	}
	typ := gjson.Parse(call.typ).String()
	var name, args string
	if typ == "custom" {
		name, args = tc.Get("custom.name").String(), tc.Get("custom.input").String()
	} else {
		name, args = tc.Get("function.name").String(), tc.Get("function.arguments").String()
	}
	call.name.WriteString(name)
	call.args.WriteString(args)
	if !call.decided && call.name.Len() > 0 {
		call.decided = true
		switch {
		case (typ == "" || typ == "function") && call.name.String() == u.name:
			ch.internal = true
		case (typ == "" || typ == "function") && !ch.blocked:
			call.shown = ch.clients
			ch.clients++
			show.calls = append(show.calls, shownFragment{index: call.shown, first: true, call: call, args: call.args.String()})
			return nil
		default:
			ch.clients++
			ch.blocked = true
		}
	}
	switch {
	case !call.decided:
		ch.blocked = true // the call's kind is not known yet: later calls wait for the answer
	case call.shown >= 0 && args != "":
		show.calls = append(show.calls, shownFragment{index: call.shown, call: call, args: args})
	}
	return nil
}

// relayDelta is what the client's stream may show of one chunk's choice 0.
type relayDelta struct {
	content, refusal string
	calls            []shownFragment
}

// shownFragment is a fragment of a client tool call the client's stream shows: its first
// (index, id, type, name and the arguments so far) or a later one (index and arguments).
type shownFragment struct {
	index int
	first bool
	call  *upstreamCall
	args  string
}

// encode returns the delta the Sink gets: {"id","created","model"[,"system_fingerprint"]
// [,"service_tier"],"delta":{…}} with the stream's head and the parts shown, in the shape of a
// chunk's delta; nil when nothing is shown.
func (r relayDelta) encode(u *upstreamStream) []byte {
	if r.content == "" && r.refusal == "" && len(r.calls) == 0 {
		return nil
	}
	out := make([]byte, 0, 128+len(r.content)+len(r.refusal))
	out = append(out, `{"id":`...)
	out = append(out, or(u.id, `""`)...)
	out = append(out, `,"created":`...)
	out = append(out, or(u.created, "0")...)
	out = append(out, `,"model":`...)
	out = append(out, or(u.model, `""`)...)
	if u.fingerprint != "" {
		out = append(out, `,"system_fingerprint":`...)
		out = append(out, u.fingerprint...)
	}
	if u.tier != "" {
		out = append(out, `,"service_tier":`...)
		out = append(out, u.tier...)
	}
	out = append(out, `,"delta":{`...)
	sep := func() {
		if out[len(out)-1] != '{' {
			out = append(out, ',')
		}
	}
	if r.content != "" {
		out = append(out, `"content":`...)
		out = jsonscan.AppendString(out, r.content)
	}
	if r.refusal != "" {
		sep()
		out = append(out, `"refusal":`...)
		out = jsonscan.AppendString(out, r.refusal)
	}
	if len(r.calls) > 0 {
		sep()
		out = append(out, `"tool_calls":[`...)
		for i, f := range r.calls {
			if i > 0 {
				out = append(out, ',')
			}
			out = append(out, `{"index":`...)
			out = strconv.AppendInt(out, int64(f.index), 10)
			if f.first {
				out = append(out, `,"id":`...)
				out = append(out, or(f.call.id, `""`)...)
				out = append(out, `,"type":"function","function":{"name":`...)
				out = jsonscan.AppendString(out, f.call.name.String())
				out = append(out, `,"arguments":`...)
			} else {
				out = append(out, `,"function":{"arguments":`...)
			}
			out = jsonscan.AppendString(out, f.args)
			out = append(out, "}}"...)
		}
		out = append(out, ']')
	}
	return append(out, "}}"...)
}

// answer is the chat.completion the stream built, as the upstream would have answered it as
// JSON.
func (u *upstreamStream) answer() []byte {
	size := 256 + len(u.usage)
	for _, c := range u.choices {
		if c != nil {
			size += 256 + c.content.Len() + c.refusal.Len() + c.reasoning.Len() + c.fnArgs.Len()
			for _, tc := range c.calls {
				size += 96 + tc.name.Len() + tc.args.Len() + len(tc.id)
			}
		}
	}
	out := make([]byte, 0, size)
	out = append(out, `{"id":`...)
	out = append(out, or(u.id, `""`)...)
	out = append(out, `,"object":"chat.completion","created":`...)
	out = append(out, or(u.created, "0")...)
	out = append(out, `,"model":`...)
	out = append(out, or(u.model, `""`)...)
	if u.tier != "" {
		out = append(out, `,"service_tier":`...)
		out = append(out, u.tier...)
	}
	if u.fingerprint != "" {
		out = append(out, `,"system_fingerprint":`...)
		out = append(out, u.fingerprint...)
	}
	out = append(out, `,"choices":[`...)
	first := true
	for i, c := range u.choices {
		if c == nil {
			continue
		}
		if !first {
			out = append(out, ',')
		}
		first = false
		out = c.append(out, i)
	}
	out = append(out, ']')
	if u.usage != "" {
		out = append(out, `,"usage":`...)
		out = append(out, u.usage...)
	}
	return append(out, '}')
}

// append appends the choice, at index i, as a chat.completion's choice.
func (c *upstreamChoice) append(out []byte, i int) []byte {
	out = append(out, `{"index":`...)
	out = strconv.AppendInt(out, int64(i), 10)
	out = append(out, `,"message":{"role":`...)
	out = append(out, or(c.role, `"assistant"`)...)
	str := func(key string, has bool, b *strings.Builder) {
		out = append(out, ',', '"')
		out = append(out, key...)
		out = append(out, '"', ':')
		if has && b.Len() > 0 {
			out = jsonscan.AppendString(out, b.String())
		} else {
			out = append(out, "null"...)
		}
	}
	str("content", c.hasContent, &c.content)
	str("refusal", c.hasRefusal, &c.refusal)
	if c.hasReason {
		str("reasoning_content", true, &c.reasoning)
	}
	if len(c.calls) > 0 {
		out = append(out, `,"tool_calls":[`...)
		for k, tc := range c.calls {
			if k > 0 {
				out = append(out, ',')
			}
			typ := or(tc.typ, `"function"`)
			field, argsKey := "function", "arguments"
			if typ == `"custom"` {
				field, argsKey = "custom", "input"
			}
			out = append(out, `{"id":`...)
			out = append(out, or(tc.id, `""`)...)
			out = append(out, `,"type":`...)
			out = append(out, typ...)
			out = append(out, ',', '"')
			out = append(out, field...)
			out = append(out, `":{"name":`...)
			out = jsonscan.AppendString(out, tc.name.String())
			out = append(out, ',', '"')
			out = append(out, argsKey...)
			out = append(out, '"', ':')
			out = jsonscan.AppendString(out, tc.args.String())
			out = append(out, "}}"...)
		}
		out = append(out, ']')
	}
	if c.hasFn {
		out = append(out, `,"function_call":{"name":`...)
		out = jsonscan.AppendString(out, c.fnName.String())
		out = append(out, `,"arguments":`...)
		out = jsonscan.AppendString(out, c.fnArgs.String())
		out = append(out, '}')
	}
	out = append(out, `},"logprobs":`...)
	if c.hasLogprobs {
		out = append(out, `{"content":`...)
		out = appendList(out, c.logContent)
		out = append(out, `,"refusal":`...)
		out = appendList(out, c.logRefusal)
		out = append(out, '}')
	} else {
		out = append(out, "null"...)
	}
	out = append(out, `,"finish_reason":`...)
	out = append(out, or(c.finish, "null")...)
	return append(out, '}')
}

// appendList appends the JSON values as a list, or null when there are none.
func appendList(out []byte, vals []string) []byte {
	if len(vals) == 0 {
		return append(out, "null"...)
	}
	out = append(out, '[')
	for i, v := range vals {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, v...)
	}
	return append(out, ']')
}

// compact is v's raw JSON as one compact, sanitized line, "" when v is absent or null.
func compact(v gjson.Result) string {
	if !v.Exists() || v.Type == gjson.Null {
		return ""
	}
	return string(openai.AppendCompact(nil, v.Raw))
}

// or returns s, or def when s is empty.
func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
