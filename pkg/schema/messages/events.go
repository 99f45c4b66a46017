package messages

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/pkg/schema"
)

// events writes the Messages event stream as the loop's events happen: message_start and ping
// with the first upstream answer; each round's content blocks in order, text and the client's
// tool_use blocks as the model wrote them (delta by delta when the round's answer streamed),
// each call of a code tool as a server_tool_use block whose input streams when the call starts
// and its result block, whole in its content_block_start, when the call ends; message_delta
// (stop_reason, container, usage summed over the rounds) and message_stop with the final
// answer, or an error event. The blocks and their order are those of the final answer, so the
// SDKs' accumulators rebuild the plain answer from the stream. Both name the message after the
// first upstream answer (see exchange.Final). It is used by one goroutine at a time.
type events struct {
	x *exchange
	w io.Writer
	// buf holds the events of one step until they are written to w, through ew.
	buf bytes.Buffer
	ew  eventWriter
	// started reports that message_start was written; ended that the stream's last event
	// (message_stop, error) was.
	started, ended bool
	// resumeStart is, in the stream of a request resuming a paused cell, the resumed round's
	// answer whose message_start waits for the cell's outcome (see answer); pausedAgain reports
	// that the cell paused again: the whole answer then goes in one message_start, as natively.
	resumeStart *gjson.Result
	pausedAgain bool
	// heldResult is the resumed cell's result block when it ended: natively it opens the
	// answer of the model's next round, after that round's message_start (see startResumed).
	heldResult string
	// idx is the client's index of the next content block.
	idx int
	// blocks are the current round's content blocks not written yet, calls its calls of the
	// code tools not started yet, in order; call is the call that is running.
	blocks []gjson.Result
	calls  []Call
	call   Call
	// live is what was relayed of the round whose upstream answer streams, nil when none.
	live *liveRound
}

// liveRound is what the sink relayed of a round as its upstream answer streamed: the round's
// first content blocks, up to the first call of a code tool (which becomes a server_tool_use
// once the loop runs it).
type liveRound struct {
	round int
	// base is the client's index of the round's first block.
	base int
	// open holds, for each block relayed, whether it is still open (its stop not relayed).
	open []bool
	// blocked reports that a block was not relayed: it and every later one are written from
	// the round's answer.
	blocked bool
}

// Ended reports whether the stream's last event (the answer's message_stop, or an error) was
// written.
func (e *events) Ended() bool { return e.ended }

// answer reads a round's or the final answer: it ends the blocks still open, and opens the
// stream with message_start if nothing was written yet.
func (e *events) answer(body []byte) (gjson.Result, error) {
	e.rest()
	msg := gjson.ParseBytes(body)
	if !msg.IsObject() {
		return msg, errors.New("encode messages stream: the answer is not a JSON object")
	}
	if !e.started && e.x.req.Resume != nil && e.resumeStart == nil {
		// A resumed cell's round: natively, a cell that pauses again is answered by one
		// message_start holding the whole message, one that ends by the model's answer,
		// which starts as usual. Which one is known when the cell's call is done.
		e.resumeStart = &msg
		return msg, nil
	}
	if err := e.startResumed(msg); err != nil {
		return msg, err
	}
	return msg, nil
}

// startResumed writes message_start of msg, unless the stream has started, then the resumed
// cell's result held for it.
func (e *events) startResumed(msg gjson.Result) error {
	if e.started {
		return nil
	}
	if err := e.start(msg); err != nil {
		return err
	}
	if r := e.heldResult; r != "" {
		e.heldResult = ""
		e.block(gjson.Parse(r))
	}
	return nil
}

// start writes message_start of msg, unless the stream has started.
func (e *events) start(msg gjson.Result) error {
	if e.started {
		return nil
	}
	if err := writeStart(&e.ew, msg); err != nil {
		return err
	}
	e.started = true
	return nil
}

// Event implements [schema.Sink].
func (e *events) Event(ev schema.Event) error {
	e.ew.w = &e.buf
	switch ev.Kind {
	case schema.EventDelta:
		if err := e.delta(ev); err != nil {
			return err
		}
	case schema.EventRound:
		msg, err := e.answer(ev.Body)
		if err != nil {
			return err
		}
		t, err := ParseTurn(ev.Body, e.x.rq)
		if err != nil {
			return fmt.Errorf("encode messages stream: %w", err)
		}
		e.blocks, e.calls = msg.Get("content").Array(), t.Calls
		if err := e.endLive(ev.Round); err != nil {
			return err
		}
		e.untilCall()
	case schema.EventCallStarted:
		if len(e.blocks) == 0 || !e.isCode(e.blocks[0]) || len(e.calls) == 0 {
			return errors.New("encode messages stream: a code call started that the answer does not hold")
		}
		b := e.blocks[0]
		e.blocks, e.call, e.calls = e.blocks[1:], e.calls[0], e.calls[1:]
		if ev.Round == 0 && e.x.req.Resume != nil {
			// A resumed cell (schema.Resume.Turn): its server_tool_use is in an earlier answer.
			break
		}
		e.block(gjson.Parse(serverToolUse(b, e.call.Kind)))
	case schema.EventCallDone:
		if ev.Call == nil {
			return errors.New("encode messages stream: a code call ended without its result")
		}
		if tc := ev.Call.ToolCalls; len(tc) > 0 && e.resumeStart != nil && !e.started {
			// The resumed cell paused again: the final answer holds these blocks, and goes
			// whole in message_start (EventDone).
			e.pausedAgain = true
			break
		}
		if e.resumeStart != nil && !e.started {
			// The resumed cell ended: its result opens the model's next answer.
			e.heldResult = result(e.call, *ev.Call, e.x.key).Block(ServerToolUseID(e.call.ID))
			break
		}
		if tc := ev.Call.ToolCalls; len(tc) > 0 {
			// Paused on the client's tools: their tool_use blocks instead of a result.
			for _, b := range e.x.rq.codeToolUses(ServerToolUseID(e.call.ID), tc) {
				e.block(gjson.Parse(b))
			}
		} else {
			r := result(e.call, *ev.Call, e.x.key)
			e.block(gjson.Parse(r.Block(ServerToolUseID(e.call.ID))))
		}
		e.untilCall()
	case schema.EventDone:
		if e.pausedAgain {
			// Natively a paused cell's answer that needed no inference: no content block
			// events, no message_delta.
			msg := gjson.ParseBytes(ev.Body)
			if !msg.IsObject() {
				return errors.New("encode messages stream: the answer is not a JSON object")
			}
			e.ew.event("message_start", `{"type":"message_start","message":`+msg.Raw+`}`)
			e.ew.event("message_stop", `{"type":"message_stop"}`)
			e.started, e.ended = true, true
			break
		}
		msg, err := e.answer(ev.Body)
		if err != nil {
			return err
		}
		if err := e.startResumed(msg); err != nil {
			return err
		}
		writeEnd(&e.ew, msg)
		e.ended = true
	case schema.EventFailed:
		if !e.started {
			return nil // nothing was streamed yet: the client gets the JSON error
		}
		status := ev.Status
		if status == 0 {
			status = http.StatusInternalServerError
		}
		msg := gjson.GetBytes(ev.Body, "error.message").String()
		if msg == "" {
			msg = "codeinterp could not complete the request."
		}
		body := ErrorBody(status, msg)
		if e.x.upstreamErr != nil {
			// The loop failed because the upstream's stream reported an error: the client's
			// stream reports that one, as the native stream would have.
			body = e.x.upstreamErr
		}
		e.ew.event("error", string(body))
		e.ended = true
	}
	return e.flush()
}

// isCode reports whether the content block b is a call of one of the code tools.
func (e *events) isCode(b gjson.Result) bool {
	return b.Get("type").String() == "tool_use" && e.x.rq.Names.kindOf(b.Get("name").String(), e.x.rq.Version) != 0
}

// block writes the content block b at the next index (a client's tool_use block with its
// caller, see Request.clientBlock).
func (e *events) block(b gjson.Result) {
	if c := e.x.rq.clientBlock(b); c != b.Raw {
		b = gjson.Parse(c)
	}
	writeBlock(&e.ew, e.idx, b)
	e.idx++
}

// untilCall writes the current round's blocks up to its next call of a code tool.
func (e *events) untilCall() {
	for len(e.blocks) > 0 && !e.isCode(e.blocks[0]) {
		e.block(e.blocks[0])
		e.blocks = e.blocks[1:]
	}
}

// rest writes the current round's remaining blocks; calls of the code tools that never ran
// (the model was told to answer in text, or the loop ended) are left out, as the final answer
// leaves them out.
func (e *events) rest() {
	for _, b := range e.blocks {
		if !e.isCode(b) {
			e.block(b)
		}
	}
	e.blocks, e.calls = nil, nil
}

// delta relays an event of a round's streaming upstream answer (see upstreamStream): the
// content blocks of the round up to its first call of a code tool, with the client's indexes.
// The rest of the round waits for its answer (EventRound). A streamed first answer's
// message_start starts the client's stream; nothing is relayed before it.
func (e *events) delta(ev schema.Event) error {
	if !e.started {
		// A streamed first answer starts the client's stream with its message_start.
		// So does, after a resumed cell, the model's first answer.
		if data := gjson.ParseBytes(ev.Body); (ev.Round == 0 || e.resumeStart != nil) && data.Get("type").String() == "message_start" {
			if err := e.startResumed(data.Get("message")); err != nil {
				return err
			}
		}
		return nil
	}
	if e.live == nil || e.live.round != ev.Round {
		e.rest()
		e.live = &liveRound{round: ev.Round, base: e.idx}
	}
	l := e.live
	if l.blocked {
		return nil
	}
	data := gjson.ParseBytes(ev.Body)
	if !data.IsObject() {
		return errors.New("relay messages stream: an upstream event is not a JSON object")
	}
	typ, u := data.Get("type").String(), int(data.Get("index").Int())
	switch {
	case typ == "content_block_start" && u == len(l.open):
		if e.isCode(data.Get("content_block")) {
			l.blocked = true
			return nil
		}
		l.open = append(l.open, true)
		e.idx++
	case typ == "content_block_start":
		l.blocked = true // out of order: the round's answer tells
		return nil
	case u < 0 || u >= len(l.open) || !l.open[u]:
		return nil
	case typ == "content_block_stop":
		l.open[u] = false
	case typ != "content_block_delta":
		return nil
	}
	// The event as the native stream has it, at the client's index.
	out := `{"type":"` + typ + `","index":` + itoa(l.base+u)
	switch typ {
	case "content_block_start":
		out += `,"content_block":` + e.x.rq.clientBlock(data.Get("content_block"))
	case "content_block_delta":
		out += `,"delta":` + rawOr(data.Get("delta"), "{}")
	}
	e.ew.event(typ, out+"}")
	return nil
}

// endLive takes out of the round's blocks those relayed while its answer streamed, when round
// streamed, and ends any of them whose stop the stream did not carry.
func (e *events) endLive(round int) error {
	l := e.live
	if l == nil || l.round != round {
		return nil
	}
	e.live = nil
	if len(l.open) > len(e.blocks) {
		return errors.New("relay messages stream: the answer has fewer blocks than its stream")
	}
	for i, open := range l.open {
		if open {
			e.ew.event("content_block_stop", `{"type":"content_block_stop","index":`+itoa(l.base+i)+`}`)
		}
	}
	e.blocks = e.blocks[len(l.open):]
	return nil
}

// flush writes the events made so far.
func (e *events) flush() error {
	if e.ew.err != nil {
		return fmt.Errorf("encode messages stream: %w", e.ew.err)
	}
	if e.buf.Len() == 0 {
		return nil
	}
	_, err := e.w.Write(e.buf.Bytes())
	e.buf.Reset()
	return err
}

// serverToolUse is the server_tool_use block the client sees for the model's tool_use block b
// of a code tool of kind k.
func serverToolUse(b gjson.Result, k Kind) string {
	input := b.Get("input").Raw
	if input == "" {
		input = "{}"
	}
	return `{"type":"server_tool_use","id":` + quote(ServerToolUseID(b.Get("id").String())) + `,"name":"` + k.nativeName() +
		`","input":` + input + `,"caller":{"type":"direct"}}`
}
