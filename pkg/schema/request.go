package schema

import (
	"bytes"
	"fmt"
	"strings"
)

// DefaultFunctionName is the name of the function tool the code_interpreter tool becomes when
// [Options.FunctionName] is empty.
const DefaultFunctionName = "code_interpreter"

// DefaultFunctionDescription describes the function tool to the model when
// [Options.FunctionDescription] is empty.
const DefaultFunctionDescription = "Run Python 3 code in a stateful sandbox, like a Jupyter notebook: " +
	"variables, imports and definitions persist between calls. numpy, pandas and matplotlib are installed. " +
	"Files in /mnt/data persist between calls; save files you create there. There is no internet access. " +
	"Print what you want to see: the output shows what the code printed and the value of the last " +
	"expression, and matplotlib figures are captured and shown as images."

// reqCodeDescription describes the function's only parameter.
const reqCodeDescription = "The Python 3 code to run."

// OutputImageNote stands for one image output in the text fed back to the model.
const OutputImageNote = "[image]"

// Options tunes the function tool the code_interpreter tool becomes. The zero value uses the
// defaults.
type Options struct {
	// FunctionName is the function's name; empty means DefaultFunctionName.
	FunctionName string
	// FunctionDescription is the function's description; empty means DefaultFunctionDescription.
	FunctionDescription string
}

func (o Options) name() string {
	if o.FunctionName == "" {
		return DefaultFunctionName
	}
	return o.FunctionName
}

func (o Options) description() string {
	if o.FunctionDescription == "" {
		return DefaultFunctionDescription
	}
	return o.FunctionDescription
}

// Request is what RewriteRequest learned and produced. When Found is false only Body is set.
type Request struct {
	// Body is the body to send upstream; it is the input itself when Found is false.
	Body []byte
	// Found reports whether a code_interpreter tool was present and rewritten.
	Found bool
	// Tool is the client's code_interpreter tool object, raw.
	Tool []byte
	// ContainerID is the tool's container when it is a string id (for example "cntr_…").
	ContainerID string
	// MemoryLimit is the tool's container.memory_limit when set.
	MemoryLimit string
	// ToolChoice is the client's tool_choice, raw, as sent (Body may have it rewritten); nil when
	// the request has none.
	ToolChoice []byte
	// ForcedChoice reports whether the upstream tool_choice forces a tool call ("required", our
	// function by name, or allowed_tools with mode "required"); it applies to the first round
	// only, and later rounds send LaterChoice instead.
	ForcedChoice bool
	// LaterChoice is, when ForcedChoice is set, the upstream tool_choice for the rounds after the
	// first: allowed_tools with mode "auto" (the client's restriction kept, the forcing dropped),
	// or nil to remove tool_choice (the API's default, "auto").
	LaterChoice []byte
	// Stream reports whether the client asked for stream:true (Body has stream:false).
	Stream bool
	// StreamOptions is the client's stream_options, raw, which Body no longer has; nil when absent
	// or null.
	StreamOptions []byte
	// SessionID is metadata.session_id when it is a string; Body keeps it.
	SessionID string
	// ReplayedContainerIDs holds the container_id of each replayed code_interpreter_call input
	// item that has one, in input order.
	ReplayedContainerIDs []string
	// PreviousResponseID is the Responses request's previous_response_id, and ConversationID its
	// conversation's id (the string, or the object's "id"): the earlier answer the request
	// continues from. They are read also when Found is false.
	PreviousResponseID, ConversationID string
}

// RewriteRequest rewrites a client request body of surface s for the upstream model: the
// code_interpreter tool becomes a function tool in the same position, a tool_choice naming it
// names the function, stream:true becomes stream:false without stream_options, and (Responses)
// replayed code_interpreter_call input items become function_call and function_call_output pairs.
// Every other byte stays as the client sent it. A body without a code_interpreter tool comes back
// unchanged with Found false.
//
// Client mistakes (malformed JSON, two code_interpreter tools, a client tool already using the
// function's name, a rewritten member given twice) are returned as *RequestError. RewriteRequest
// does not keep or modify body. When Found is false Request.Body is body itself; otherwise it is
// new memory of exactly its length that nothing else refers to.
//
// Malformed JSON is refused where RewriteRequest reads or edits: the top-level keys, the values
// of "tools", "tool_choice", "stream", "stream_options" and "metadata", and (Responses) the
// code_interpreter_call items of "input"; and everywhere the structure is checked (brackets and
// braces balanced and matched, commas and colons in place, keys are strings, numbers and
// literals well formed, strings terminated, nesting at most 10000 deep, nothing after the
// value). Inside the other strings (the conversation's text, "instructions", "model", …) only
// the closing quote is looked for, so that megabytes of conversation cost one quick pass: raw
// control characters and malformed escapes there are not refused. Such a body goes upstream
// with those bytes as they were, where the model's API refuses it with its own 400; everything
// RewriteRequest edits is well formed, and on well-formed JSON it sees exactly what a JSON
// parser sees.
func RewriteRequest(s Surface, body []byte, o Options) (Request, error) {
	if s != Responses && s != Chat {
		return Request{}, fmt.Errorf("rewrite request: unknown surface %v", s)
	}
	mode := reqScanRequest
	if s == Responses {
		mode = reqScanRequestItems
	}
	var membersBuf [16]reqMember // the top-level members of most requests, without an allocation
	sc, err := reqScan(body, mode, membersBuf[:0])
	if err != nil {
		return Request{}, &RequestError{
			Message: "We could not parse the JSON body of your request: " + err.Error(),
			Code:    "invalid_json",
		}
	}
	r := Request{Body: body}
	if !sc.isObject {
		return r, nil
	}
	members := sc.members
	t := reqNewTopLevel(body, members)
	name := o.name()

	tools, err := reqFindTools(s, body, members, name)
	if err != nil {
		return Request{}, err
	}
	if s == Responses {
		r.PreviousResponseID, _ = reqStr(body, t.span("previous_response_id"))
		if sp := t.span("conversation"); sp.ok() && body[sp.start] == '{' {
			r.ConversationID, _ = reqStr(body, reqField(body, sp.start, "id"))
		} else if sp.ok() {
			r.ConversationID, _ = reqStr(body, sp)
		}
	}
	if !tools.found {
		return r, nil
	}
	// A body that gives a member we read or edit twice is refused: we could not tell which one the
	// upstream would honour.
	for _, k := range [...]string{"tools", "tool_choice", "stream", "stream_options", "metadata", "input", "messages"} {
		if t.count(k) > 1 {
			return Request{}, &RequestError{
				Message: fmt.Sprintf("The request gives %q more than once.", k),
				Param:   k,
			}
		}
	}

	r.Found = true
	r.Tool = bytes.Clone(body[tools.ci.start:tools.ci.end])
	edits := make([]reqEdit, 1, 8) // the tool, the choice, stream, stream_options, a few replays
	edits[0] = reqEdit{start: tools.ci.start, end: tools.ci.end, repl: reqFunctionTool(s, name, o.description())}
	if c := reqField(body, tools.ci.start, "container"); c.ok() {
		if id, ok := reqStr(body, c); ok {
			r.ContainerID = id
		} else {
			r.MemoryLimit, _ = reqStr(body, reqField(body, c.start, "memory_limit"))
		}
	}

	if sp := t.span("tool_choice"); sp.ok() {
		e, forced, later := reqRewriteToolChoice(s, body, sp, name)
		edits = append(edits, e...)
		r.ForcedChoice, r.LaterChoice = forced, later
		r.ToolChoice = bytes.Clone(body[sp.start:sp.end])
	}

	if sp := t.span("stream"); sp.ok() && string(body[sp.start:sp.end]) == "true" {
		r.Stream = true
		edits = append(edits, reqEdit{start: sp.start, end: sp.end, repl: []byte("false")})
	}
	if k := t.find("stream_options"); k >= 0 {
		m := members[k]
		if v := body[m.valStart:m.valEnd]; string(v) != "null" {
			r.StreamOptions = bytes.Clone(v)
		}
		edits = append(edits, reqRemoveMember(members, k))
	}

	if sp := t.span("metadata"); sp.ok() {
		r.SessionID, _ = reqStr(body, reqField(body, sp.start, "session_id"))
	}

	if sp := t.span("input"); s == Responses && sp.ok() && body[sp.start] == '[' {
		e, ids := reqReplayInput(body, sp, sc.items, name)
		edits = append(edits, e...)
		r.ReplayedContainerIDs = ids
	}

	if r.Body, err = reqApply(body, edits); err != nil {
		return Request{}, fmt.Errorf("rewrite request: %w", err)
	}
	return r, nil
}

// reqTools is what the tools arrays of a body hold.
type reqTools struct {
	found bool
	ci    reqSpan // the code_interpreter tool
}

// reqFindTools finds the code_interpreter tool in every "tools" array among members, the
// top-level members of b, and checks that it is the only one and that no client tool already
// uses the function's name.
func reqFindTools(s Surface, b []byte, members []reqMember, name string) (reqTools, error) {
	// b and members come apart so that the top-level members, which the caller may hold on its
	// stack, do not escape with b into the walks below.
	var (
		res        reqTools
		second     = -1 // index of a second code_interpreter tool
		clashParam string
	)
	for _, m := range members {
		if !m.is(b, "tools") || b[m.valStart] != '[' {
			continue
		}
		// Each tool's members are read in one walk, which also finds where the tool ends.
		var tool reqObject
		i := reqSkipWS(b, m.valStart+1)
		for idx := 0; i < len(b) && b[i] != ']'; idx++ {
			st := i
			if b[st] != '{' {
				i = reqValueEnd(b, st)
			} else {
				i = tool.read(b, st)
				typ := tool.field("type")
				switch ci := typ.ok() && reqStringIs(b[typ.start:typ.end], "code_interpreter"); {
				case ci && !res.found:
					res.found, res.ci = true, reqSpan{st, i}
				case ci:
					if second < 0 {
						second = idx
					}
				case clashParam == "":
					if p := reqToolNameClash(s, &tool, typ, name); p != "" {
						clashParam = fmt.Sprintf("tools[%d].%s", idx, p)
					}
				}
			}
			if i = reqSkipWS(b, i); i >= len(b) || b[i] != ',' {
				break
			}
			i = reqSkipWS(b, i+1)
		}
	}
	switch {
	case !res.found:
		return reqTools{}, nil
	case second >= 0:
		return reqTools{}, &RequestError{
			Message: "Only one code_interpreter tool is supported per request.",
			Param:   fmt.Sprintf("tools[%d]", second),
		}
	case clashParam != "":
		return reqTools{}, &RequestError{
			Message: fmt.Sprintf("The tool name %q is reserved for the code_interpreter tool, which is "+
				"provided to the model as a function of that name; rename your tool.", name),
			Param: clashParam,
		}
	}
	return res, nil
}

// reqToolNameClash returns the path (relative to the tool) of the name of the client tool whose
// members are tool and whose "type" member's value spans typ, when that name is the function's
// name, or "".
func reqToolNameClash(s Surface, tool *reqObject, typ reqSpan, name string) string {
	b := tool.b
	if s == Chat {
		// Chat tools nest their name under their type: {"type":"function","function":{"name":…}}.
		if !typ.ok() || b[typ.start] != '"' || typ.end-typ.start == 2 {
			return ""
		}
		if holder := tool.fieldRaw(b[typ.start:typ.end]); holder.ok() && reqFieldIs(b, holder.start, "name", name) {
			t, _ := reqStr(b, typ)
			return t + ".name"
		}
		return ""
	}
	if sp := tool.field("name"); sp.ok() && reqStringIs(b[sp.start:sp.end], name) {
		return "name"
	}
	return ""
}

// reqObjectKept is how many members a reqObject keeps; tools have two to five.
const reqObjectKept = 8

// reqObject holds the members of one object of a checked body, read in a single walk. Its zero
// value is ready for read.
type reqObject struct {
	b    []byte
	st   int
	n    int // members read; only the first reqObjectKept are kept
	keys [reqObjectKept]reqSpan
	vals [reqObjectKept]reqSpan
}

// read reads the members of the object starting at b[st] and returns the offset just past it.
func (o *reqObject) read(b []byte, st int) int {
	o.b, o.st, o.n = b, st, 0
	i := reqSkipWS(b, st+1)
	for i < len(b) && b[i] == '"' {
		ke := reqStringEnd(b, i)
		vs := reqSkipWS(b, reqSkipWS(b, ke)+1)
		ve := reqValueEnd(b, vs)
		if o.n < reqObjectKept {
			o.keys[o.n], o.vals[o.n] = reqSpan{i, ke}, reqSpan{vs, ve}
		}
		o.n++
		if i = reqSkipWS(b, ve); i >= len(b) || b[i] != ',' {
			break
		}
		i = reqSkipWS(b, i+1)
	}
	return min(i+1, len(b)) // past the closing brace
}

// field returns the span of the value of the member named key (the last one when the key
// repeats, as reqField), or a zero span.
func (o *reqObject) field(key string) reqSpan {
	if o.n > reqObjectKept {
		return reqField(o.b, o.st, key)
	}
	for k := o.n - 1; k >= 0; k-- {
		if reqStringIs(o.b[o.keys[k].start:o.keys[k].end], key) {
			return o.vals[k]
		}
	}
	return reqSpan{}
}

// fieldRaw is field for a key given as a JSON string with its quotes.
func (o *reqObject) fieldRaw(rawKey []byte) reqSpan {
	if o.n > reqObjectKept {
		var sp reqSpan
		reqEachMember(o.b, o.st, func(k []byte, vs, ve int) bool {
			if reqRawEqual(k, rawKey) {
				sp = reqSpan{vs, ve}
			}
			return true
		})
		return sp
	}
	for k := o.n - 1; k >= 0; k-- {
		if reqRawEqual(o.b[o.keys[k].start:o.keys[k].end], rawKey) {
			return o.vals[k]
		}
	}
	return reqSpan{}
}

// reqFunctionTool returns the function tool that stands in for the code_interpreter tool.
func reqFunctionTool(s Surface, name, description string) []byte {
	// One allocation: the fixed text takes under 192 bytes, and the strings need more than their
	// length only when they hold characters to escape.
	out := make([]byte, 0, 192+len(name)+len(description)+len(reqCodeDescription))
	out = append(out, `{"type":"function",`...)
	if s == Chat {
		out = append(out, `"function":{`...)
	}
	out = append(out, `"name":`...)
	out = appendJSONString(out, name)
	out = append(out, `,"description":`...)
	out = appendJSONString(out, description)
	out = append(out, `,"parameters":{"type":"object","properties":{"code":{"type":"string","description":`...)
	out = appendJSONString(out, reqCodeDescription)
	out = append(out, `}},"required":["code"]}`...)
	if s == Chat {
		out = append(out, '}')
	}
	return append(out, '}')
}

// reqFunctionChoice returns the tool_choice (or allowed_tools entry) that names the function.
func reqFunctionChoice(s Surface, name string) []byte {
	out := make([]byte, 0, 48+len(name))
	out = append(out, `{"type":"function",`...)
	if s == Chat {
		out = append(out, `"function":{"name":`...)
		out = appendJSONString(out, name)
		return append(out, `}}`...)
	}
	out = append(out, `"name":`...)
	out = appendJSONString(out, name)
	return append(out, '}')
}

// reqNamesHostedTool reports whether the object starting at b[st] is a tool_choice (or an
// allowed_tools entry) naming the hosted code_interpreter tool.
func reqNamesHostedTool(b []byte, st int) bool {
	switch typ, _ := reqStr(b, reqField(b, st, "type")); typ {
	case "code_interpreter":
		return true
	case "hosted_tool":
		n, _ := reqStr(b, reqField(b, st, "name"))
		return n == "code_interpreter"
	}
	return false
}

// reqRewriteToolChoice returns the edits that make the tool_choice at sp name the function
// instead of the hosted tool, whether the resulting choice forces a tool call, and, when it does,
// the choice for later rounds (see [Request.LaterChoice]).
func reqRewriteToolChoice(s Surface, b []byte, sp reqSpan, name string) (edits []reqEdit, forced bool, later []byte) {
	switch b[sp.start] {
	case '"':
		mode, _ := reqStr(b, sp)
		return nil, mode == "required", nil
	case '{':
	default:
		return nil, false, nil
	}
	if reqNamesHostedTool(b, sp.start) {
		return []reqEdit{{start: sp.start, end: sp.end, repl: reqFunctionChoice(s, name)}}, true, nil
	}
	switch typ, _ := reqStr(b, reqField(b, sp.start, "type")); typ {
	case "function":
		path := []string{"name"}
		if s == Chat {
			path = []string{"function", "name"}
		}
		fn, _ := reqStr(b, reqPath(b, sp.start, path...))
		return nil, fn == name, nil
	case "allowed_tools":
		// Responses: {"type":"allowed_tools","mode":…,"tools":[…]};
		// Chat: {"type":"allowed_tools","allowed_tools":{"mode":…,"tools":[…]}}.
		holder := sp.start
		if s == Chat {
			inner := reqField(b, sp.start, "allowed_tools")
			if !inner.ok() || b[inner.start] != '{' {
				return nil, false, nil
			}
			holder = inner.start
		}
		modeAt := reqField(b, holder, "mode")
		mode, _ := reqStr(b, modeAt)
		if list := reqField(b, holder, "tools"); list.ok() && b[list.start] == '[' {
			fn := reqFunctionChoice(s, name)
			reqEachElem(b, list.start, func(_, st, en int) bool {
				if b[st] == '{' && reqNamesHostedTool(b, st) {
					edits = append(edits, reqEdit{start: st, end: en, repl: fn})
				}
				return true
			})
		}
		if mode != "required" {
			return edits, false, nil
		}
		// Later rounds keep the client's list of allowed tools but no longer force a call.
		relax := make([]reqEdit, 0, len(edits)+1)
		relax = append(relax, reqEdit{start: modeAt.start - sp.start, end: modeAt.end - sp.start, repl: []byte(`"auto"`)})
		for _, e := range edits {
			relax = append(relax, reqEdit{start: e.start - sp.start, end: e.end - sp.start, repl: e.repl})
		}
		// The edits are disjoint spans inside the choice, so applying them cannot fail; if it
		// did, later rounds would send no tool_choice, which also ends the forcing.
		later, _ = reqApply(b[sp.start:sp.end], relax)
		return edits, true, later
	}
	return nil, false, nil
}

// reqReplayInput returns the edits that turn each code_interpreter_call item of the Responses
// input array at sp into a function_call item and a function_call_output item, and the
// container ids of those items. items are the elements of the array that may be such items, as
// reqScan reported them (checked byte by byte); every other element is left as it is.
func reqReplayInput(b []byte, sp reqSpan, items []reqItem, name string) (edits []reqEdit, containerIDs []string) {
	for _, it := range items {
		st, en := it.start, it.end
		if st < sp.start || en > sp.end || b[st] != '{' || !reqFieldIs(b, st, "type", "code_interpreter_call") {
			continue
		}
		var id, code, containerID string
		var outputs []byte
		reqEachMember(b, st, func(rawKey []byte, vs, ve int) bool {
			switch k, _ := reqDecodeString(rawKey); k {
			case "id":
				id, _ = reqStr(b, reqSpan{vs, ve})
			case "code":
				code, _ = reqStr(b, reqSpan{vs, ve})
			case "container_id":
				containerID, _ = reqStr(b, reqSpan{vs, ve})
			case "outputs":
				outputs = b[vs:ve]
			}
			return true
		})
		if id == "" {
			id = fmt.Sprintf("ci_replay_%d", it.idx)
		}
		if containerID != "" {
			containerIDs = append(containerIDs, containerID)
		}
		edits = append(edits, reqEdit{start: st, end: en, repl: reqCallPair(id, name, code, RenderOutputs(outputs))})
	}
	return edits, containerIDs
}

// reqCallPair returns a function_call item calling the function with code and its
// function_call_output item, separated by a comma.
func reqCallPair(callID, name, code, output string) []byte {
	out := []byte(`{"type":"function_call","call_id":`)
	out = appendJSONString(out, callID)
	out = append(out, `,"name":`...)
	out = appendJSONString(out, name)
	out = append(out, `,"arguments":`...)
	out = appendJSONString(out, string(appendJSONString([]byte(`{"code":`), code))+"}")
	out = append(out, `},{"type":"function_call_output","call_id":`...)
	out = appendJSONString(out, callID)
	out = append(out, `,"output":`...)
	out = appendJSONString(out, output)
	return append(out, '}')
}

// RenderOutputs returns the text fed back to the model for the outputs of a code_interpreter_call
// item, given as the raw JSON of its "outputs" value: an array of {"type":"logs","logs":…} and
// {"type":"image","url":…} entries. It renders them as [RenderCodeOutputs] does; null, an empty
// array or anything that is not a JSON array gives "".
func RenderOutputs(outputs []byte) string {
	if _, _, err := reqScanTop(outputs); err != nil {
		return ""
	}
	st := reqSkipWS(outputs, 0)
	if outputs[st] != '[' {
		return ""
	}
	var outs []CodeOutput
	reqEachElem(outputs, st, func(_, es, _ int) bool {
		if outputs[es] != '{' {
			return true
		}
		var o CodeOutput
		o.Type, _ = reqStr(outputs, reqField(outputs, es, "type"))
		o.Logs, _ = reqStr(outputs, reqField(outputs, es, "logs"))
		outs = append(outs, o)
		return true
	})
	return RenderCodeOutputs(outs)
}

// RenderCodeOutputs returns the text fed back to the model for a run's outputs: the logs as they
// are and each image as [OutputImageNote], in order, one per line. Outputs of other types and
// empty logs are skipped; no outputs give "". The loop and the replay of code_interpreter_call
// input items both use it, so the model reads the same text for the same run.
func RenderCodeOutputs(outs []CodeOutput) string {
	var sb strings.Builder
	add := func(s string) {
		if sb.Len() > 0 && !strings.HasSuffix(sb.String(), "\n") {
			sb.WriteByte('\n')
		}
		sb.WriteString(s)
	}
	for _, o := range outs {
		switch o.Type {
		case CodeOutputLogs:
			if o.Logs != "" {
				add(o.Logs)
			}
		case CodeOutputImage:
			add(OutputImageNote)
		}
	}
	return sb.String()
}
