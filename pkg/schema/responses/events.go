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
// response.in_progress with the first upstream answer (its response.created, when it
// streams); each round's output items in order, as they stream when the round's answer
// streams, every call of the internal function as a code_interpreter_call whose code streams
// as the model writes it (…code.delta, …code.done), that is interpreting when its run starts
// and completes when the run ends; and response.completed (incomplete, failed) with the final
// answer. The items, their ids and their order are those of the final answer, so a client that
// accumulates the stream gets the same response as the plain answer. Both name the response
// after the first upstream turn (see exchange.Final).
type events struct {
	x *exchange
	w io.Writer
	// ow holds the events of one step until they are written to w.
	ow      openai.Writer
	started bool
	// idx is the output index of the next item; items are the current round's output items
	// not handled yet.
	idx   int
	items []pendingItem
	// callIdx is the output index of the code call that is running, running the call when it
	// streamed live (nil otherwise).
	callIdx int
	running *liveItem
	// ended reports that the stream's last event (completed, failed) was written.
	ended bool
	// live is what was relayed of the last round whose upstream answer streamed, nil when none.
	live *liveRound
	// files are the files the calls so far wrote: the messages after them cite them.
	files writtenFiles
	// early reports whether citations may stream before the text is done (see earlyCites);
	// earlyKnown whether it was computed.
	early, earlyKnown bool
	// container is the container the last call ran in: a call streamed before it runs names
	// it.
	container string
	// shellRun is the model's call of the shell function that is running, when one is.
	shellRun gjson.Result
}

// pendingItem is an output item of the current round's answer not handled yet, with what
// was relayed of it while the answer streamed (nil: nothing).
type pendingItem struct {
	item gjson.Result
	live *liveItem
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
// items up to the first one that arrived out of order (it and every later one are written
// when the round's answer arrives).
type liveRound struct {
	round int
	// items are the round's items relayed, by upstream output index.
	items []*liveItem
	// calls counts the calls of the internal function seen, shown those streamed, ran those
	// of them whose run ended.
	calls, shown, ran int
	// blocked reports that an item was not relayed: it and every later one are written when
	// the round's answer arrives.
	blocked bool
	// textOnly reports that the round's answer was asked for in text: its internal calls
	// never run, and neither the stream nor the answer shows them.
	textOnly bool
	// answered reports that the round's answer arrived.
	answered bool
	// upstreamAnns counts the annotation.added events the upstream sent for each content
	// part, by output and content index: the citations added after them number on.
	upstreamAnns map[[2]int]int
	// parts are the output_text parts relayed so far, by output and content index, while
	// files can be cited.
	parts map[[2]int]*livePart
}

// liveItem is one item of a round relayed as its answer streamed.
type liveItem struct {
	// idx is the item's client output index; -1 for a call the answer leaves out.
	idx  int
	done bool
	// message reports that the item is a message; after counts the round's calls streamed
	// before it, whose runs the message's citations wait for: its events from its text's
	// end on are held until they ran.
	message bool
	after   int
	held    []string
	// answer is the item in the round's answer, once that arrived.
	answer gjson.Result
	// call is the code call a call of the internal function streams as.
	call *liveCall
}

// liveCall is a call of the internal function streamed as a code_interpreter_call while the
// model writes it.
type liveCall struct {
	id string
	// args are the arguments so far, code their code decoded, sent the code streamed.
	args     strings.Builder
	code     codeStream
	sent     strings.Builder
	codeDone bool
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
		if e.live != nil && e.live.round != ev.Round {
			e.live = nil
		}
		if !e.started {
			e.start(ev.Body)
		}
		e.items = e.items[:0]
		gjson.GetBytes(ev.Body, "output").ForEach(func(_, item gjson.Result) bool {
			e.items = append(e.items, pendingItem{item: item})
			return true
		})
		if err := e.endLive(ev.Round); err != nil {
			return err
		}
		e.untilCall()
	case schema.EventCallStarted:
		if len(e.items) == 0 || !e.x.internalCall(e.items[0].item) {
			return errors.New("encode responses stream: a code call started that the answer does not hold")
		}
		p := e.items[0]
		e.items = e.items[1:]
		c := ev.Call
		if c.ContainerID != "" {
			e.container = c.ContainerID
		}
		if e.x.shellItem(p.item) {
			// A shell call: its shell_call item is done before it runs; its output follows.
			sc := shellCallOf(p.item, *c, e.x.shell.key)
			e.callIdx, e.running, e.shellRun = e.idx, nil, p.item
			e.idx += 2
			sseShellCall(&e.ow, e.callIdx, string(sc.appendCall(nil, true)), string(sc.appendCall(nil, false)), sc.action.Commands)
			break
		}
		if p.live != nil && p.live.call != nil {
			// Streamed while the model wrote it: its code is done, and it runs now.
			e.callIdx, e.running = p.live.idx, p.live
			e.finishCode(p.live, c.Code)
			codeCallProgress(&e.ow, e.callIdx, p.live.call.id, "response.code_interpreter_call.interpreting")
			break
		}
		e.callIdx, e.running = e.idx, nil
		e.idx++
		include := e.x.Request().IncludeOutputs
		added, _ := appendCodeCall(nil, schema.CodeCall{ID: c.ID, Status: schema.CodeCallInProgress, ContainerID: c.ContainerID}, include) // no outputs: cannot fail
		codeCallStart(&e.ow, e.callIdx, c.ID, string(added), c.Code, string(jsonscan.AppendString(nil, c.Code)))
	case schema.EventCallDone:
		if e.shellRun.Exists() {
			sc := shellCallOf(e.shellRun, *ev.Call, e.x.shell.key)
			e.shellRun = gjson.Result{}
			e.files.add(ev.Call)
			if ev.Call.ContainerID != "" {
				e.container = ev.Call.ContainerID
			}
			sseShellOutput(&e.ow, e.callIdx+1, shellOutputID(sc.id), string(sc.appendOutput(nil, true)), string(sc.appendOutput(nil, false)), sc.outputs)
			e.untilCall()
			break
		}
		done, err := appendCodeCall(nil, *ev.Call, e.x.Request().IncludeOutputs)
		if err != nil {
			return fmt.Errorf("encode responses stream: %w", err)
		}
		e.files.add(ev.Call)
		if ev.Call.ContainerID != "" {
			e.container = ev.Call.ContainerID
		}
		codeCallEnd(&e.ow, e.callIdx, ev.Call.ID, string(done))
		if li := e.running; li != nil {
			li.done, e.running = true, nil
			if l := e.live; l != nil && l.answered {
				l.ran++
				e.release(l, false)
			}
		}
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
			sseError(&e.ow, code, message)
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

// delta relays an event of a round's streaming upstream answer, with the client's output
// index and sequence numbers (the upstream's restart every round): the upstream's
// response.created starts the stream when nothing did yet (the first answer streams); the
// events of the round's items stream as they arrive, a call of the internal function as a
// code_interpreter_call whose code streams as the arguments do (see liveCall), up to the
// first item that arrives out of order: that item and every later one wait for the round's
// answer (EventRound).
func (e *events) delta(ev schema.Event) error {
	s, ok := openai.CompactBody(ev.Body)
	if !ok {
		return errors.New("relay responses stream: an upstream event is not a JSON object")
	}
	data := gjson.Parse(s)
	typ := data.Get("type").String()
	if typ == "response.created" {
		if r := data.Get("response"); !e.started && r.IsObject() {
			e.start([]byte(r.Raw))
			e.x.live.named = r.Get("id").String()
		}
		return nil
	}
	if !e.started {
		return nil
	}
	if e.live == nil || e.live.round != ev.Round {
		e.rest()
		e.live = &liveRound{round: ev.Round, textOnly: e.x.textOnlyRound(ev.Round)}
	}
	l := e.live
	if l.blocked {
		return nil
	}
	u := int(data.Get("output_index").Int())
	switch {
	case typ == "response.output_item.added" && u == len(l.items):
		item := data.Get("item")
		if e.x.shellItem(item) {
			// A shell call streams as its items once it runs: it and every later item wait
			// for the round's answer.
			l.blocked = true
			return nil
		}
		li := &liveItem{idx: e.idx, after: l.shown, message: item.Get("type").String() == "message"}
		l.items = append(l.items, li)
		if finalIsInternalCall(item, e.x.FunctionName()) {
			k := l.calls
			l.calls++
			if l.textOnly {
				li.idx = -1 // never runs: the answer leaves it out
				return nil
			}
			l.shown++
			e.idx++
			li.call = &liveCall{id: e.x.streamCallID(l.round, k, item.Get("call_id").String())}
			e.callAdded(li)
			if args := item.Get("arguments"); args.Type == gjson.String && args.Str != "" {
				e.callArguments(li, args.Str)
			}
			return nil
		}
		e.idx++
	case typ == "response.output_item.added":
		l.blocked = true // out of order: the round's answer tells
		return nil
	case u < 0 || u >= len(l.items):
		return nil
	}
	li := l.items[u]
	switch {
	case li.idx < 0:
		return nil
	case li.call != nil:
		e.callEvent(li, typ, data)
		return nil
	case len(li.held) > 0 || (li.message && li.after > l.ran && heldUntilRuns(typ)):
		li.held = append(li.held, s)
		return nil
	}
	e.relay(l, u, typ, data)
	return nil
}

// heldUntilRuns reports whether an event of type typ of a message that follows calls of its
// round waits for their runs: the events that carry, or come after, its citations.
func heldUntilRuns(typ string) bool {
	switch typ {
	case "response.output_text.done", "response.content_part.done", "response.output_item.done":
		return true
	}
	return false
}

// relay writes the upstream event data, of type typ, about the round's item u, with the
// item's client output index and the citations of the files written so far.
func (e *events) relay(l *liveRound, u int, typ string, data gjson.Result) {
	li := l.items[u]
	if typ == "response.output_item.done" {
		li.done = true
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
			e.ow.Num("output_index", li.idx)
		case replace:
			e.ow.Raw(key, with)
		default:
			e.ow.Raw(key, v.Raw)
		}
		return true
	})
	e.ow.Close()
	// A message after calls of its round that did not run yet cites only once they ran: the
	// files they write may be named before those of earlier rounds.
	if typ == "response.output_text.delta" && l.parts != nil && e.earlyCites() && li.after <= l.ran {
		part := [2]int{u, int(data.Get("content_index").Int())}
		if p := l.parts[part]; p != nil {
			e.citeLive(l, part, data.Get("item_id").Raw, p.text.String(), false)
		}
	}
}

// release writes the held events of the round's messages whose calls before them ran (all:
// every one), and ends those of them whose done the stream did not carry once the round's
// answer arrived.
func (e *events) release(l *liveRound, all bool) {
	for u, li := range l.items {
		if li.idx < 0 || li.call != nil {
			continue
		}
		if !all && li.after > l.ran {
			break
		}
		held := li.held
		li.held = nil
		for _, s := range held {
			data := gjson.Parse(s)
			e.relay(l, u, data.Get("type").String(), data)
		}
		if l.answered && !li.done {
			li.done = true
			sseItemEvent(&e.ow, "response.output_item.done", li.idx, e.cited(li.answer).Raw)
		}
	}
}

// callAdded writes the events that open a call streamed while the model writes it: the
// code_interpreter_call added (in progress, no code yet) and in_progress.
func (e *events) callAdded(li *liveItem) {
	c := li.call
	container := e.container
	if container == "" {
		container = e.x.Request().ContainerID
	}
	added, _ := appendCodeCall(nil, schema.CodeCall{ID: c.id, Status: schema.CodeCallInProgress, ContainerID: container}, e.x.Request().IncludeOutputs) // no outputs: cannot fail
	sseItemEvent(&e.ow, "response.output_item.added", li.idx, string(added))
	codeCallProgress(&e.ow, li.idx, c.id, "response.code_interpreter_call.in_progress")
}

// callEvent relays an upstream event of type typ about a call streamed live: its arguments
// stream as its code; when they are done, so is the code.
func (e *events) callEvent(li *liveItem, typ string, data gjson.Result) {
	c := li.call
	switch typ {
	case "response.function_call_arguments.delta":
		e.callArguments(li, data.Get("delta").String())
	case "response.function_call_arguments.done":
		e.callArgumentsDone(li, data.Get("arguments").String())
	case "response.output_item.done":
		if args := data.Get("item.arguments"); args.Type == gjson.String && !c.codeDone {
			e.callArgumentsDone(li, args.Str)
		}
	}
}

// callArguments takes the next piece of a live call's arguments and streams the code it
// completes.
func (e *events) callArguments(li *liveItem, piece string) {
	c := li.call
	c.args.WriteString(piece)
	e.codeDelta(li, c.code.write(piece))
}

// callArgumentsDone takes a live call's whole arguments: the rest of its code streams, and
// its code is done when the arguments are {"code": "…"}; otherwise the code is done when the
// call starts (see finishCode).
func (e *events) callArgumentsDone(li *liveItem, args string) {
	c := li.call
	if rest, ok := strings.CutPrefix(args, c.args.String()); ok {
		e.callArguments(li, rest)
	} else {
		c.code.failed = true
	}
	if code, err := openai.ParseArguments(args); err == nil {
		e.finishCode(li, code)
	}
}

// codeDelta streams code, the next piece of a live call's code.
func (e *events) codeDelta(li *liveItem, code string) {
	c := li.call
	c.sent.WriteString(code)
	for s := code; len(s) > 0; {
		n := openai.Cut(s)
		e.ow.Open("response.code_interpreter_call_code.delta")
		e.ow.Num("output_index", li.idx)
		e.ow.Str("item_id", c.id)
		e.ow.Str("delta", s[:n])
		e.ow.Close()
		s = s[n:]
	}
}

// finishCode ends the code of a live call whose code is code, unless it ended: the part of it
// not streamed yet streams, then code.done.
func (e *events) finishCode(li *liveItem, code string) {
	c := li.call
	if c.codeDone {
		return
	}
	c.codeDone = true
	if rest, ok := strings.CutPrefix(code, c.sent.String()); ok {
		e.codeDelta(li, rest)
	}
	e.ow.Open("response.code_interpreter_call_code.done")
	e.ow.Num("output_index", li.idx)
	e.ow.Str("item_id", c.id)
	e.ow.Raw("code", string(jsonscan.AppendString(nil, code)))
	e.ow.Close()
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
		e.ow.Num("output_index", l.items[part[0]].idx)
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

// endLive marks the items relayed while round's answer streamed, when round streamed, in the
// round's items, and ends those of them whose done the stream did not carry and that wait for
// no run.
func (e *events) endLive(round int) error {
	l := e.live
	if l == nil || l.round != round {
		return nil
	}
	if len(l.items) > len(e.items) {
		return errors.New("relay responses stream: the answer has fewer items than its stream")
	}
	l.answered = true
	name := e.x.FunctionName()
	for i, li := range l.items {
		if (li.call != nil || li.idx < 0) != finalIsInternalCall(e.items[i].item, name) {
			return errors.New("relay responses stream: the answer's items are not those of its stream")
		}
		li.answer = e.items[i].item
		e.items[i].live = li
		if li.call == nil && li.idx >= 0 && !li.done && len(li.held) == 0 && li.after == 0 {
			li.done = true
			sseItemEvent(&e.ow, "response.output_item.done", li.idx, e.cited(li.answer).Raw)
		}
	}
	return nil
}

// start writes response.created and response.in_progress for the request's answer as the first
// upstream answer makes it (the client's tools, and so on): its whole body, or the response
// of its stream's response.created.
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

// untilCall writes the current round's items up to its next call of the internal function;
// those relayed while the answer streamed were written then.
func (e *events) untilCall() {
	for len(e.items) > 0 && !e.x.internalCall(e.items[0].item) {
		if e.items[0].live == nil {
			sseItem(&e.ow, e.idx, e.cited(e.items[0].item))
			e.idx++
		}
		e.items = e.items[1:]
	}
}

// rest writes the current round's remaining items; calls of the internal function that never
// ran (the model was told to answer in text, or the loop ended) are left out, as the final
// answer leaves them out. The held events of the last streamed round whose answer arrived are
// written first.
func (e *events) rest() {
	if l := e.live; l != nil && l.answered {
		e.release(l, true)
	}
	for _, p := range e.items {
		switch {
		case p.live != nil && p.live.call != nil && !p.live.done:
			// Streamed, but it never ran: it ends incomplete.
			c := p.live.call
			item, _ := appendCodeCall(nil, schema.CodeCall{ID: c.id, Status: schema.CodeCallIncomplete, Code: c.sent.String(), ContainerID: e.container}, e.x.Request().IncludeOutputs)
			p.live.done = true
			sseItemEvent(&e.ow, "response.output_item.done", p.live.idx, string(item))
		case p.live != nil, e.x.internalCall(p.item):
		default:
			sseItem(&e.ow, e.idx, e.cited(p.item))
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
