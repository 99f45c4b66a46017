package schema

import (
	"bytes"
	"fmt"
	"github.com/codeinterp/codeinterp/pkg/schema/internal/jsonscan"
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

func (o Options) Name() string {
	if o.FunctionName == "" {
		return DefaultFunctionName
	}
	return o.FunctionName
}

func (o Options) Description() string {
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
	spec := &requestSpec
	if s == Responses {
		spec = &requestItemsSpec
	}
	var membersBuf [16]jsonscan.Member // the top-level members of most requests, without an allocation
	sc, err := jsonscan.Scan(body, spec, membersBuf[:0])
	if err != nil {
		return Request{}, &RequestError{
			Message: "We could not parse the JSON body of your request: " + err.Error(),
			Code:    "invalid_json",
		}
	}
	r := Request{Body: body}
	if !sc.IsObject {
		return r, nil
	}
	members := sc.Members
	t := topKeys.Index(body, members)
	name := o.Name()

	tools, err := reqFindTools(s, body, members, name)
	if err != nil {
		return Request{}, err
	}
	if s == Responses {
		r.PreviousResponseID, _ = jsonscan.Str(body, t.Span("previous_response_id"))
		if sp := t.Span("conversation"); sp.OK() && body[sp.Start] == '{' {
			r.ConversationID, _ = jsonscan.Str(body, jsonscan.Field(body, sp.Start, "id"))
		} else if sp.OK() {
			r.ConversationID, _ = jsonscan.Str(body, sp)
		}
	}
	if !tools.found {
		return r, nil
	}
	// A body that gives a member we read or edit twice is refused: we could not tell which one the
	// upstream would honour.
	for _, k := range [...]string{"tools", "tool_choice", "stream", "stream_options", "metadata", "input", "messages"} {
		if t.Count(k) > 1 {
			return Request{}, &RequestError{
				Message: fmt.Sprintf("The request gives %q more than once.", k),
				Param:   k,
			}
		}
	}

	r.Found = true
	r.Tool = bytes.Clone(body[tools.ci.Start:tools.ci.End])
	edits := make([]jsonscan.Edit, 1, 8) // the tool, the choice, stream, stream_options, a few replays
	edits[0] = jsonscan.Edit{Start: tools.ci.Start, End: tools.ci.End, Repl: reqFunctionTool(s, name, o.Description())}
	if c := jsonscan.Field(body, tools.ci.Start, "container"); c.OK() {
		if id, ok := jsonscan.Str(body, c); ok {
			r.ContainerID = id
		} else {
			r.MemoryLimit, _ = jsonscan.Str(body, jsonscan.Field(body, c.Start, "memory_limit"))
		}
	}

	if sp := t.Span("tool_choice"); sp.OK() {
		e, forced, later := reqRewriteToolChoice(s, body, sp, name)
		edits = append(edits, e...)
		r.ForcedChoice, r.LaterChoice = forced, later
		r.ToolChoice = bytes.Clone(body[sp.Start:sp.End])
	}

	if sp := t.Span("stream"); sp.OK() && string(body[sp.Start:sp.End]) == "true" {
		r.Stream = true
		edits = append(edits, jsonscan.Edit{Start: sp.Start, End: sp.End, Repl: []byte("false")})
	}
	if k := t.Find("stream_options"); k >= 0 {
		m := members[k]
		if v := body[m.ValStart:m.ValEnd]; string(v) != "null" {
			r.StreamOptions = bytes.Clone(v)
		}
		edits = append(edits, jsonscan.RemoveMember(members, k))
	}

	if sp := t.Span("metadata"); sp.OK() {
		r.SessionID, _ = jsonscan.Str(body, jsonscan.Field(body, sp.Start, "session_id"))
	}

	if sp := t.Span("input"); s == Responses && sp.OK() && body[sp.Start] == '[' {
		e, ids := reqReplayInput(body, sp, sc.Items, name)
		edits = append(edits, e...)
		r.ReplayedContainerIDs = ids
	}

	if r.Body, err = jsonscan.Apply(body, edits); err != nil {
		return Request{}, fmt.Errorf("rewrite request: %w", err)
	}
	return r, nil
}

// reqTools is what the tools arrays of a body hold.
type reqTools struct {
	found bool
	ci    jsonscan.Span // the code_interpreter tool
}

// reqFindTools finds the code_interpreter tool in every "tools" array among members, the
// top-level members of b, and checks that it is the only one and that no client tool already
// uses the function's name.
func reqFindTools(s Surface, b []byte, members []jsonscan.Member, name string) (reqTools, error) {
	// b and members come apart so that the top-level members, which the caller may hold on its
	// stack, do not escape with b into the walks below.
	var (
		res        reqTools
		second     = -1 // index of a second code_interpreter tool
		clashParam string
	)
	for _, m := range members {
		if !m.Is(b, "tools") || b[m.ValStart] != '[' {
			continue
		}
		// Each tool's members are read in one walk, which also finds where the tool ends.
		var tool jsonscan.Object
		i := jsonscan.SkipWS(b, m.ValStart+1)
		for idx := 0; i < len(b) && b[i] != ']'; idx++ {
			st := i
			if b[st] != '{' {
				i = jsonscan.ValueEnd(b, st)
			} else {
				i = tool.Read(b, st)
				typ := tool.Field("type")
				switch ci := typ.OK() && jsonscan.StringIs(b[typ.Start:typ.End], "code_interpreter"); {
				case ci && !res.found:
					res.found, res.ci = true, jsonscan.Span{Start: st, End: i}
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
			if i = jsonscan.SkipWS(b, i); i >= len(b) || b[i] != ',' {
				break
			}
			i = jsonscan.SkipWS(b, i+1)
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
func reqToolNameClash(s Surface, tool *jsonscan.Object, typ jsonscan.Span, name string) string {
	b := tool.B
	if s == Chat {
		// Chat tools nest their name under their type: {"type":"function","function":{"name":…}}.
		if !typ.OK() || b[typ.Start] != '"' || typ.End-typ.Start == 2 {
			return ""
		}
		if holder := tool.FieldRaw(b[typ.Start:typ.End]); holder.OK() && jsonscan.FieldIs(b, holder.Start, "name", name) {
			t, _ := jsonscan.Str(b, typ)
			return t + ".name"
		}
		return ""
	}
	if sp := tool.Field("name"); sp.OK() && jsonscan.StringIs(b[sp.Start:sp.End], name) {
		return "name"
	}
	return ""
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
	out = jsonscan.AppendString(out, name)
	out = append(out, `,"description":`...)
	out = jsonscan.AppendString(out, description)
	out = append(out, `,"parameters":{"type":"object","properties":{"code":{"type":"string","description":`...)
	out = jsonscan.AppendString(out, reqCodeDescription)
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
		out = jsonscan.AppendString(out, name)
		return append(out, `}}`...)
	}
	out = append(out, `"name":`...)
	out = jsonscan.AppendString(out, name)
	return append(out, '}')
}

// reqNamesHostedTool reports whether the object starting at b[st] is a tool_choice (or an
// allowed_tools entry) naming the hosted code_interpreter tool.
func reqNamesHostedTool(b []byte, st int) bool {
	switch typ, _ := jsonscan.Str(b, jsonscan.Field(b, st, "type")); typ {
	case "code_interpreter":
		return true
	case "hosted_tool":
		n, _ := jsonscan.Str(b, jsonscan.Field(b, st, "name"))
		return n == "code_interpreter"
	}
	return false
}

// reqRewriteToolChoice returns the edits that make the tool_choice at sp name the function
// instead of the hosted tool, whether the resulting choice forces a tool call, and, when it does,
// the choice for later rounds (see [Request.LaterChoice]).
func reqRewriteToolChoice(s Surface, b []byte, sp jsonscan.Span, name string) (edits []jsonscan.Edit, forced bool, later []byte) {
	switch b[sp.Start] {
	case '"':
		mode, _ := jsonscan.Str(b, sp)
		return nil, mode == "required", nil
	case '{':
	default:
		return nil, false, nil
	}
	if reqNamesHostedTool(b, sp.Start) {
		return []jsonscan.Edit{{Start: sp.Start, End: sp.End, Repl: reqFunctionChoice(s, name)}}, true, nil
	}
	switch typ, _ := jsonscan.Str(b, jsonscan.Field(b, sp.Start, "type")); typ {
	case "function":
		path := []string{"name"}
		if s == Chat {
			path = []string{"function", "name"}
		}
		fn, _ := jsonscan.Str(b, jsonscan.Path(b, sp.Start, path...))
		return nil, fn == name, nil
	case "allowed_tools":
		// Responses: {"type":"allowed_tools","mode":…,"tools":[…]};
		// Chat: {"type":"allowed_tools","allowed_tools":{"mode":…,"tools":[…]}}.
		holder := sp.Start
		if s == Chat {
			inner := jsonscan.Field(b, sp.Start, "allowed_tools")
			if !inner.OK() || b[inner.Start] != '{' {
				return nil, false, nil
			}
			holder = inner.Start
		}
		modeAt := jsonscan.Field(b, holder, "mode")
		mode, _ := jsonscan.Str(b, modeAt)
		if list := jsonscan.Field(b, holder, "tools"); list.OK() && b[list.Start] == '[' {
			fn := reqFunctionChoice(s, name)
			jsonscan.EachElem(b, list.Start, func(_, st, en int) bool {
				if b[st] == '{' && reqNamesHostedTool(b, st) {
					edits = append(edits, jsonscan.Edit{Start: st, End: en, Repl: fn})
				}
				return true
			})
		}
		if mode != "required" {
			return edits, false, nil
		}
		// Later rounds keep the client's list of allowed tools but no longer force a call.
		relax := make([]jsonscan.Edit, 0, len(edits)+1)
		relax = append(relax, jsonscan.Edit{Start: modeAt.Start - sp.Start, End: modeAt.End - sp.Start, Repl: []byte(`"auto"`)})
		for _, e := range edits {
			relax = append(relax, jsonscan.Edit{Start: e.Start - sp.Start, End: e.End - sp.Start, Repl: e.Repl})
		}
		// The edits are disjoint spans inside the choice, so applying them cannot fail; if it
		// did, later rounds would send no tool_choice, which also ends the forcing.
		later, _ = jsonscan.Apply(b[sp.Start:sp.End], relax)
		return edits, true, later
	}
	return nil, false, nil
}

// reqReplayInput returns the edits that turn each code_interpreter_call item of the Responses
// input array at sp into a function_call item and a function_call_output item, and the
// container ids of those items. items are the elements of the array that may be such items, as
// Scan reported them (checked byte by byte); every other element is left as it is.
func reqReplayInput(b []byte, sp jsonscan.Span, items []jsonscan.Item, name string) (edits []jsonscan.Edit, containerIDs []string) {
	for _, it := range items {
		st, en := it.Start, it.End
		if st < sp.Start || en > sp.End || b[st] != '{' || !jsonscan.FieldIs(b, st, "type", "code_interpreter_call") {
			continue
		}
		var id, code, containerID string
		var outputs []byte
		jsonscan.EachMember(b, st, func(rawKey []byte, vs, ve int) bool {
			switch k, _ := jsonscan.DecodeString(rawKey); k {
			case "id":
				id, _ = jsonscan.Str(b, jsonscan.Span{Start: vs, End: ve})
			case "code":
				code, _ = jsonscan.Str(b, jsonscan.Span{Start: vs, End: ve})
			case "container_id":
				containerID, _ = jsonscan.Str(b, jsonscan.Span{Start: vs, End: ve})
			case "outputs":
				outputs = b[vs:ve]
			}
			return true
		})
		if id == "" {
			id = fmt.Sprintf("ci_replay_%d", it.Index)
		}
		if containerID != "" {
			containerIDs = append(containerIDs, containerID)
		}
		edits = append(edits, jsonscan.Edit{Start: st, End: en, Repl: reqCallPair(id, name, code, RenderOutputs(outputs))})
	}
	return edits, containerIDs
}

// reqCallPair returns a function_call item calling the function with code and its
// function_call_output item, separated by a comma.
func reqCallPair(callID, name, code, output string) []byte {
	out := []byte(`{"type":"function_call","call_id":`)
	out = jsonscan.AppendString(out, callID)
	out = append(out, `,"name":`...)
	out = jsonscan.AppendString(out, name)
	out = append(out, `,"arguments":`...)
	out = jsonscan.AppendString(out, string(jsonscan.AppendString([]byte(`{"code":`), code))+"}")
	out = append(out, `},{"type":"function_call_output","call_id":`...)
	out = jsonscan.AppendString(out, callID)
	out = append(out, `,"output":`...)
	out = jsonscan.AppendString(out, output)
	return append(out, '}')
}

// RenderOutputs returns the text fed back to the model for the outputs of a code_interpreter_call
// item, given as the raw JSON of its "outputs" value: an array of {"type":"logs","logs":…} and
// {"type":"image","url":…} entries. It renders them as [RenderCodeOutputs] does; null, an empty
// array or anything that is not a JSON array gives "".
func RenderOutputs(outputs []byte) string {
	if _, _, err := jsonscan.ScanTop(outputs); err != nil {
		return ""
	}
	st := jsonscan.SkipWS(outputs, 0)
	if outputs[st] != '[' {
		return ""
	}
	var outs []CodeOutput
	jsonscan.EachElem(outputs, st, func(_, es, _ int) bool {
		if outputs[es] != '{' {
			return true
		}
		var o CodeOutput
		o.Type, _ = jsonscan.Str(outputs, jsonscan.Field(outputs, es, "type"))
		o.Logs, _ = jsonscan.Str(outputs, jsonscan.Field(outputs, es, "logs"))
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
