package responses

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/schema/internal/jsonscan"
	"github.com/codeinterp/codeinterp/pkg/schema/internal/openai"
)

// events writes a Responses event stream as the loop's events happen: response.created and
// response.in_progress with the first upstream answer; each round's output items in order,
// every call of the internal function as a code_interpreter_call whose code streams before the
// run (…code.delta, …code.done, …interpreting) and that completes when the run ends; and
// response.completed (incomplete, failed) with the final answer. The items and their order are
// those of the final answer, so a client that accumulates the stream gets the same response as
// the plain answer. Both name the response after the first upstream turn (see exchange.Final).
type events struct {
	x *exchange
	w io.Writer
	// ow holds the events of one step until they are written to w.
	ow      openai.Writer
	started bool
	// idx is the output index of the next item; items are the current round's output items
	// not written yet.
	idx   int
	items []gjson.Result
	// callIdx is the output index of the code call that is running.
	callIdx int
	// ended reports that the stream's last event (completed, failed) was written.
	ended bool
	// live is what was relayed of the round whose upstream answer streams, nil when none.
	live *liveRound
	// files are the files the calls so far wrote: the messages after them cite them.
	files writtenFiles
	// early reports whether citations may stream before the text is done (see earlyCites);
	// earlyKnown whether it was computed.
	early, earlyKnown bool
}

// earlyCites reports whether a citation may stream as soon as its link has arrived: unless the
// request has a tool whose results the model's messages cite themselves (web search, file
// search), whose annotation.added events the upstream sends after the text; ours, numbered
// after theirs, wait for them then.
func (e *events) earlyCites() bool {
	if !e.earlyKnown {
		e.earlyKnown, e.early = true, true
		gjson.GetBytes(e.x.Request().Body, "tools").ForEach(func(_, t gjson.Result) bool {
			typ := t.Get("type").String()
			if strings.HasPrefix(typ, "web_search") || typ == "file_search" {
				e.early = false
			}
			return e.early
		})
	}
	return e.early
}

// liveRound is what the sink relayed of a round as its upstream answer streamed: the round's
// first items, up to the first one that is not relayed live (a call of the internal function,
// which becomes a code_interpreter_call once the round's answer is complete).
type liveRound struct {
	round int
	// base is the client's output index of the round's first item.
	base int
	// done holds, for each item relayed, whether its output_item.done was.
	done []bool
	// blocked reports that an item was not relayed: it and every later one are written when
	// the round's answer arrives.
	blocked bool
	// upstreamAnns counts the annotation.added events the upstream sent for each content
	// part, by output and content index: the citations added after them number on.
	upstreamAnns map[[2]int]int
	// parts are the output_text parts relayed so far, by output and content index, while
	// files can be cited.
	parts map[[2]int]*livePart
}

// Ended reports whether the stream's last event was written.
func (e *events) Ended() bool { return e.ended }

// Event implements [schema.Sink].
func (e *events) Event(ev schema.Event) error {
	switch ev.Kind {
	case schema.EventDelta:
		if err := e.delta(ev); err != nil {
			return err
		}
	case schema.EventRound:
		e.rest()
		if !e.started {
			e.start(ev.Body)
		}
		e.items = e.items[:0]
		gjson.GetBytes(ev.Body, "output").ForEach(func(_, item gjson.Result) bool {
			e.items = append(e.items, item)
			return true
		})
		if err := e.endLive(ev.Round); err != nil {
			return err
		}
		e.untilCall()
	case schema.EventCallStarted:
		if len(e.items) == 0 || !finalIsInternalCall(e.items[0], e.x.FunctionName()) {
			return errors.New("encode responses stream: a code call started that the answer does not hold")
		}
		e.items = e.items[1:]
		e.callIdx = e.idx
		e.idx++
		c := ev.Call
		include := e.x.Request().IncludeOutputs
		added, _ := schema.CodeCall{ID: c.ID, Status: "in_progress", ContainerID: c.ContainerID}.AppendItem(nil, include) // no outputs: cannot fail
		codeCallStart(&e.ow, e.callIdx, c.ID, string(added), c.Code, string(jsonscan.AppendString(nil, c.Code)))
	case schema.EventCallDone:
		done, err := ev.Call.AppendItem(nil, e.x.Request().IncludeOutputs)
		if err != nil {
			return fmt.Errorf("encode responses stream: %w", err)
		}
		e.files.add(ev.Call)
		codeCallEnd(&e.ow, e.callIdx, ev.Call.ID, string(done))
		e.untilCall()
	case schema.EventDone:
		e.rest()
		s, ok := openai.CompactBody(ev.Body)
		if !ok {
			return errors.New("encode responses stream: the answer is not a JSON object")
		}
		e.ow.Open(sseTerminal(gjson.Get(s, "status").String()))
		e.ow.Raw("response", s)
		e.ow.Close()
		e.ended = true
	case schema.EventFailed:
		code, message := openai.ErrorFields(ev.Body)
		e.ended = true
		switch {
		case ev.Partial == nil && !e.started:
			e.ended = false
			return nil // nothing was streamed yet: the client gets the JSON error
		case ev.Partial == nil:
			// No answer to show as failed: the stream's own error event.
			e.ow.Open("error")
			e.ow.Str("code", code)
			e.ow.Str("message", message)
			e.ow.Literal("param", "null")
			e.ow.Close()
			return e.flush()
		case !e.started:
			e.start(ev.Partial)
		}
		failed, err := failedResponse(&e.ow, ev.Partial, code, message)
		if err != nil {
			return err
		}
		e.ow.Open("response.failed")
		e.ow.Raw("response", failed)
		e.ow.Close()
	}
	return e.flush()
}

// delta relays an event of a round's streaming upstream answer: the events of the round's
// items up to the first call of the internal function, with the client's output index and
// sequence numbers (the upstream's restart every round). The rest of the round waits for its
// answer (EventRound). Nothing is relayed before the stream started (the first answer).
func (e *events) delta(ev schema.Event) error {
	if !e.started {
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
	s, ok := openai.CompactBody(ev.Body)
	if !ok {
		return errors.New("relay responses stream: an upstream event is not a JSON object")
	}
	data := gjson.Parse(s)
	typ, u := data.Get("type").String(), int(data.Get("output_index").Int())
	switch {
	case typ == "response.output_item.added" && u == len(l.done):
		if finalIsInternalCall(data.Get("item"), e.x.FunctionName()) {
			l.blocked = true
			return nil
		}
		l.done = append(l.done, false)
		e.idx++
	case typ == "response.output_item.added":
		l.blocked = true // out of order: the round's answer tells
		return nil
	case u < 0 || u >= len(l.done):
		return nil
	case typ == "response.output_item.done":
		l.done[u] = true
	}
	var replace, with string // a field of the event that carries the citations
	if !e.files.empty() {
		replace, with = e.liveCitations(l, typ, u, data)
	}
	e.ow.Open(typ)
	data.ForEach(func(k, v gjson.Result) bool {
		switch key := k.String(); key {
		case "type", "sequence_number":
		case "output_index":
			e.ow.Num("output_index", l.base+u)
		case replace:
			e.ow.Raw(key, with)
		default:
			e.ow.Raw(key, v.Raw)
		}
		return true
	})
	e.ow.Close()
	if typ == "response.output_text.delta" && l.parts != nil && e.earlyCites() {
		part := [2]int{u, int(data.Get("content_index").Int())}
		if p := l.parts[part]; p != nil {
			e.citeLive(l, part, data.Get("item_id").Raw, p.text.String(), false)
		}
	}
	return nil
}

// liveCitations adds the citations of a message's text relayed live, for the upstream event
// data of type typ about the round's item u: it keeps the text of each delta, after which
// the citations it completed are streamed (see citeLive), and before output_text.done the
// rest; and it returns the field of a content_part.done
// (part) or output_item.done (item) to replace, and its value with the citations, or "".
func (e *events) liveCitations(l *liveRound, typ string, u int, data gjson.Result) (field, value string) {
	part := [2]int{u, int(data.Get("content_index").Int())}
	switch typ {
	case "response.output_text.annotation.added":
		if l.upstreamAnns == nil {
			l.upstreamAnns = make(map[[2]int]int)
		}
		l.upstreamAnns[part]++
	case "response.output_text.delta":
		// The delta is written first (see delta), then the citations it completed.
		if l.parts == nil {
			l.parts = make(map[[2]int]*livePart)
		}
		p := l.parts[part]
		if p == nil {
			p = &livePart{}
			l.parts[part] = p
		}
		p.text.WriteString(data.Get("delta").String())
	case "response.output_text.done":
		// Every citation not streamed yet goes before the text is done.
		e.citeLive(l, part, data.Get("item_id").Raw, data.Get("text").String(), true)
	case "response.content_part.done":
		p := data.Get("part")
		if p.Get("type").String() == "output_text" {
			if anns, ok := annotatedList(p, &e.files); ok {
				return "part", e.ow.Edit(p.Raw, "annotations", anns, true)
			}
		}
	case "response.output_item.done":
		if item := data.Get("item"); item.Get("type").String() == "message" {
			if raw, ok := annotateMessage(&e.ow, item.Raw, &e.files); ok {
				return "item", raw
			}
		}
	}
	return "", ""
}

// citeLive writes an annotation.added for each citation of the part's text that is settled
// (see citation.settled; all of them when done) and not streamed yet, in the order of the
// text, stopping at the first that is not: the annotations stream in the order the answer
// lists them.
func (e *events) citeLive(l *liveRound, part [2]int, itemID, text string, done bool) {
	p := l.parts[part]
	if p == nil {
		p = &livePart{}
	}
	first := p.cited
	for i, c := range p.take(&e.files, text, done) {
		e.ow.Open("response.output_text.annotation.added")
		e.ow.Raw("item_id", itemID)
		e.ow.Num("output_index", l.base+part[0])
		e.ow.Num("content_index", part[1])
		e.ow.Num("annotation_index", l.upstreamAnns[part]+first+i)
		e.ow.Raw("annotation", string(c.appendJSON(nil)))
		e.ow.Close()
	}
}

// cited returns item with the citations of the files written so far, when it is a message.
func (e *events) cited(item gjson.Result) gjson.Result {
	if e.files.empty() || item.Get("type").String() != "message" {
		return item
	}
	if raw, ok := annotateMessage(&e.ow, item.Raw, &e.files); ok {
		return gjson.Parse(raw)
	}
	return item
}

// endLive takes out of the round's items those relayed while its answer streamed, when round
// streamed, and ends any of them whose done the stream did not carry.
func (e *events) endLive(round int) error {
	l := e.live
	if l == nil || l.round != round {
		return nil
	}
	e.live = nil
	if len(l.done) > len(e.items) {
		return errors.New("relay responses stream: the answer has fewer items than its stream")
	}
	for i, done := range l.done {
		if !done {
			sseItemEvent(&e.ow, "response.output_item.done", l.base+i, e.cited(e.items[i]).Raw)
		}
	}
	e.items = e.items[len(l.done):]
	return nil
}

// start writes response.created and response.in_progress for the request's answer as the first
// upstream answer makes it (the client's tools, and so on).
func (e *events) start(first []byte) {
	e.started = true
	body, err := e.x.Final([]schema.Round{{Body: first}}, "")
	if err != nil {
		body = first
	}
	s, ok := openai.CompactBody(body)
	if !ok {
		s = "{}"
	}
	sseStart(&e.ow, s)
}

// untilCall writes the current round's items up to its next call of the internal function.
func (e *events) untilCall() {
	name := e.x.FunctionName()
	for len(e.items) > 0 && !finalIsInternalCall(e.items[0], name) {
		sseItem(&e.ow, e.idx, e.cited(e.items[0]))
		e.idx++
		e.items = e.items[1:]
	}
}

// rest writes the current round's remaining items; calls of the internal function that never
// ran (the model was told to answer in text, or the loop ended) are left out, as the final
// answer leaves them out.
func (e *events) rest() {
	name := e.x.FunctionName()
	for _, item := range e.items {
		if !finalIsInternalCall(item, name) {
			sseItem(&e.ow, e.idx, e.cited(item))
			e.idx++
		}
	}
	e.items = e.items[:0]
}

// flush writes the events made so far.
func (e *events) flush() error {
	if e.ow.Err != nil {
		return fmt.Errorf("encode responses stream: %w", e.ow.Err)
	}
	if len(e.ow.Buf) == 0 {
		return nil
	}
	_, err := e.w.Write(e.ow.Buf)
	e.ow.Buf = e.ow.Buf[:0]
	return err
}

// codeCallStart writes the events of a code_interpreter_call up to its run: the item added
// (in progress, no code or outputs yet: added), in_progress, its code (codeRaw is it as JSON),
// and interpreting.
func codeCallStart(w *openai.Writer, idx int, id, added, code, codeRaw string) {
	sseItemEvent(w, "response.output_item.added", idx, added)
	codeCallProgress(w, idx, id, "response.code_interpreter_call.in_progress")
	for s := code; len(s) > 0; {
		n := openai.Cut(s)
		w.Open("response.code_interpreter_call_code.delta")
		w.Num("output_index", idx)
		w.Str("item_id", id)
		w.Str("delta", s[:n])
		w.Close()
		s = s[n:]
	}
	w.Open("response.code_interpreter_call_code.done")
	w.Num("output_index", idx)
	w.Str("item_id", id)
	w.Raw("code", codeRaw)
	w.Close()
	codeCallProgress(w, idx, id, "response.code_interpreter_call.interpreting")
}

// codeCallEnd writes the events of a code_interpreter_call whose run ended: completed and the
// item done (done, with its outputs).
func codeCallEnd(w *openai.Writer, idx int, id, done string) {
	codeCallProgress(w, idx, id, "response.code_interpreter_call.completed")
	sseItemEvent(w, "response.output_item.done", idx, done)
}

func codeCallProgress(w *openai.Writer, idx int, id, typ string) {
	w.Open(typ)
	w.Num("output_index", idx)
	w.Str("item_id", id)
	w.Close()
}
