package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/schema/internal/jsonscan"
)

// MaxFileIDs bounds the container.file_ids of a code_interpreter tool, as natively.
const MaxFileIDs = 50

// IncludeCodeOutputs is the include value that asks for the outputs of code_interpreter_call
// items.
const IncludeCodeOutputs = "code_interpreter_call.outputs"

// CodeDescription describes the function's only parameter.
const CodeDescription = "The Python 3 code to run."

// RewriteRequest rewrites a client request body of surface s for the upstream model: the
// code_interpreter tool becomes a function tool in the same position, a tool_choice naming it
// names the function, stream:true stays (KeepStream, with the dialect's StreamOptions) or becomes
// stream:false without stream_options, and (Responses)
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
func (d *Dialect) RewriteRequest(body []byte, o schema.Options) (schema.Request, error) {
	r, _, err := d.rewrite(body, o)
	return r, err
}

// rewrite is RewriteRequest that also returns, when the request has the hosted tool, the
// top-level members of the rewritten body.
func (d *Dialect) rewrite(body []byte, o schema.Options) (schema.Request, []jsonscan.Member, error) {
	var membersBuf [16]jsonscan.Member // the top-level members of most requests, without an allocation
	sc, err := jsonscan.Scan(body, d.Spec, membersBuf[:0])
	if err != nil {
		return schema.Request{}, nil, &schema.RequestError{
			Message: "We could not parse the JSON body of your request: " + err.Error(),
			Code:    "invalid_json",
		}
	}
	r := schema.Request{Body: body}
	if !sc.IsObject {
		return r, nil, nil
	}
	members := sc.Members
	t := TopKeys.Index(body, members)
	name := o.Name()

	tools, err := reqFindTools(d, body, members, name)
	if err != nil {
		return schema.Request{}, nil, err
	}
	if d.Previous != "" {
		r.PreviousResponseID, _ = jsonscan.Str(body, t.Span(d.Previous))
	}
	if d.Conversation != "" {
		if sp := t.Span(d.Conversation); sp.OK() && body[sp.Start] == '{' {
			r.ConversationID, _ = jsonscan.Str(body, jsonscan.Field(body, sp.Start, "id"))
		} else if sp.OK() {
			r.ConversationID, _ = jsonscan.Str(body, sp)
		}
	}
	if !tools.found && !d.OwnHosted {
		return r, nil, nil
	}
	if err := checkRepeats(t); err != nil {
		return schema.Request{}, nil, err
	}
	if sp := t.Span("background"); sp.OK() && string(body[sp.Start:sp.End]) == "true" {
		// The loop runs while the client's request is open; a background response would need it
		// to run detached, which is not served yet: refusing beats answering with the model's
		// raw call of the internal function.
		return schema.Request{}, nil, &schema.RequestError{
			Message: "background: true is not supported together with the code_interpreter tool by this gateway; send the request without background.",
			Param:   "background",
			Code:    "unsupported_parameter",
		}
	}

	r.Found = true
	edits := make([]jsonscan.Edit, 0, 8) // the tool, the choice, stream, stream_options, a few replays
	description := o.Description()
	if tools.found {
		r.Tool = bytes.Clone(body[tools.ci.Start:tools.ci.End])
	}
	if tools.found {
		if c := jsonscan.Field(body, tools.ci.Start, "container"); c.OK() {
			if id, ok := jsonscan.Str(body, c); ok {
				r.ContainerID = id
			} else if body[c.Start] == '{' {
				r.MemoryLimit, _ = jsonscan.Str(body, jsonscan.Field(body, c.Start, "memory_limit"))
				if np := jsonscan.Field(body, c.Start, "network_policy"); np.OK() {
					r.NetworkPolicy = bytes.Clone(body[np.Start:np.End])
					r.NetworkPolicyParam = fmt.Sprintf("tools[%d].container.network_policy", tools.index)
					r.Tool = WithoutSecrets(r.Tool, "container")
					description = NetworkDescription(description, body, np)
				}
				if r.FileIDs, err = ReqFileIDs(body, c, fmt.Sprintf("tools[%d].container.file_ids", tools.index)); err != nil {
					return schema.Request{}, nil, err
				}
			}
		}
	}
	if tools.found {
		edits = append(edits, jsonscan.Edit{Start: tools.ci.Start, End: tools.ci.End, Repl: d.FunctionTool(name, description)})
	}
	r.IncludeOutputs = reqIncludes(body, t.Span("include"), IncludeCodeOutputs)

	if sp := t.Span("tool_choice"); sp.OK() {
		e, forced, later := reqRewriteToolChoice(d, body, sp, name)
		edits = append(edits, e...)
		r.ForcedChoice, r.LaterChoice = forced, later
		r.ToolChoice = bytes.Clone(body[sp.Start:sp.End])
	}

	if sp := t.Span("stream"); sp.OK() && string(body[sp.Start:sp.End]) == "true" {
		r.Stream = true
		if !d.KeepStream || o.WholeFirst {
			edits = append(edits, jsonscan.Edit{Start: sp.Start, End: sp.End, Repl: []byte("false")})
		}
	}
	// A call that streams carries the dialect's stream_options, or else the client's (as
	// Responses' include_obfuscation); one that does not, none (the API refuses them then).
	streams := r.Stream && d.KeepStream && !o.WholeFirst
	keepOptions := streams && d.StreamOptions != nil
	if k := t.Find("stream_options"); k >= 0 {
		m := members[k]
		if v := body[m.ValStart:m.ValEnd]; string(v) != "null" {
			r.StreamOptions = bytes.Clone(v)
		}
		switch {
		case keepOptions:
			edits = append(edits, jsonscan.Edit{Start: m.ValStart, End: m.ValEnd, Repl: d.StreamOptions})
			keepOptions = false
		case !streams:
			edits = append(edits, jsonscan.RemoveMember(members, k))
		}
	}
	if keepOptions {
		// The client sent none: they follow its stream member.
		sp := t.Span("stream")
		edits = append(edits, jsonscan.Edit{Start: sp.End, End: sp.End, Repl: append([]byte(`,"stream_options":`), d.StreamOptions...)})
	}

	if sp := t.Span("metadata"); sp.OK() {
		r.SessionID, _ = jsonscan.Str(body, jsonscan.Field(body, sp.Start, "session_id"))
	}

	if d.Rewrite != nil {
		// The hook gets its own copy of the members: lent to a function value they would
		// escape, and every request, also one without the tool, would pay for it.
		e, replayed := d.Rewrite(TopKeys.Index(body, slices.Clone(members)), slices.Clone(sc.Items), name)
		edits = append(edits, e...)
		r.ReplayedContainerIDs = replayed
	}

	if r.Body, err = jsonscan.Apply(body, edits); err != nil {
		return schema.Request{}, nil, fmt.Errorf("rewrite request: %w", err)
	}
	return r, jsonscan.Track(members, edits), nil
}

// reqTools is what the tools arrays of a body hold.
type reqTools struct {
	found bool
	ci    jsonscan.Span // the code_interpreter tool
	index int           // its index in its tools array
}

// ReqFileIDs returns the file_ids of the container object at c (a code_interpreter tool's
// container, a shell tool's environment), whose file_ids member is named param in errors:
// strings, at most MaxFileIDs of them, as natively.
func ReqFileIDs(b []byte, c jsonscan.Span, param string) ([]string, error) {
	sp := jsonscan.Field(b, c.Start, "file_ids")
	if !sp.OK() || string(b[sp.Start:sp.End]) == "null" {
		return nil, nil
	}
	if b[sp.Start] != '[' {
		return nil, &schema.RequestError{
			Message: fmt.Sprintf("Invalid type for '%s': expected an array of strings.", param),
			Param:   param,
			Code:    "invalid_type",
		}
	}
	var (
		ids []string
		bad = -1
		n   int
	)
	jsonscan.EachElem(b, sp.Start, func(i, st, en int) bool {
		n++
		id, ok := jsonscan.Str(b, jsonscan.Span{Start: st, End: en})
		if !ok || id == "" {
			bad = i
			return false
		}
		if len(ids) < MaxFileIDs && !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
		return true
	})
	switch {
	case bad >= 0:
		p := fmt.Sprintf("%s[%d]", param, bad)
		return nil, &schema.RequestError{
			Message: fmt.Sprintf("Invalid '%s': expected a file id string.", p),
			Param:   p,
			Code:    "invalid_type",
		}
	case n > MaxFileIDs:
		return nil, &schema.RequestError{
			Message: fmt.Sprintf("Invalid '%s': array too long. Expected an array with maximum length %d, but got an array with length %d instead.", param, MaxFileIDs, n),
			Param:   param,
			Code:    "array_above_max_length",
		}
	}
	return ids, nil
}

// reqIncludes reports whether the include array at sp holds the string want.
func reqIncludes(b []byte, sp jsonscan.Span, want string) bool {
	if !sp.OK() || b[sp.Start] != '[' {
		return false
	}
	found := false
	jsonscan.EachElem(b, sp.Start, func(_, st, en int) bool {
		if v, ok := jsonscan.Str(b, jsonscan.Span{Start: st, End: en}); ok && v == want {
			found = true
		}
		return !found
	})
	return found
}

// reqFindTools finds the code_interpreter tool in every "tools" array among members, the
// top-level members of b, and checks that it is the only one and that no client tool already
// uses the function's name.
func reqFindTools(d *Dialect, b []byte, members []jsonscan.Member, name string) (reqTools, error) {
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
					res.found, res.ci, res.index = true, jsonscan.Span{Start: st, End: i}, idx
				case ci:
					if second < 0 {
						second = idx
					}
				case clashParam == "":
					if p := reqToolNameClash(d, &tool, typ, name); p != "" {
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
		return reqTools{}, &schema.RequestError{
			Message: "Only one code_interpreter tool is supported per request.",
			Param:   fmt.Sprintf("tools[%d]", second),
		}
	case clashParam != "":
		return reqTools{}, &schema.RequestError{
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
func reqToolNameClash(d *Dialect, tool *jsonscan.Object, typ jsonscan.Span, name string) string {
	b := tool.B
	if d.FieldsUnderType {
		// The name is nested under the type: {"type":"function","function":{"name":…}}.
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

// FunctionTool returns the function tool that stands in for the code_interpreter tool.
func (d *Dialect) FunctionTool(name, description string) []byte {
	// One allocation: the fixed text takes under 192 bytes, and the strings need more than their
	// length only when they hold characters to escape.
	out := make([]byte, 0, 192+len(name)+len(description)+len(CodeDescription))
	out = append(out, `{"type":"function",`...)
	if d.FieldsUnderType {
		out = append(out, `"function":{`...)
	}
	out = append(out, `"name":`...)
	out = jsonscan.AppendString(out, name)
	out = append(out, `,"description":`...)
	out = jsonscan.AppendString(out, description)
	out = append(out, `,"parameters":{"type":"object","properties":{"code":{"type":"string","description":`...)
	out = jsonscan.AppendString(out, CodeDescription)
	out = append(out, `}},"required":["code"]}`...)
	if d.FieldsUnderType {
		out = append(out, '}')
	}
	return append(out, '}')
}

// FunctionChoice returns the tool_choice (or allowed_tools entry) that names the function.
func (d *Dialect) FunctionChoice(name string) []byte {
	out := make([]byte, 0, 48+len(name))
	out = append(out, `{"type":"function",`...)
	if d.FieldsUnderType {
		out = append(out, `"function":{"name":`...)
		out = jsonscan.AppendString(out, name)
		return append(out, `}}`...)
	}
	out = append(out, `"name":`...)
	out = jsonscan.AppendString(out, name)
	return append(out, '}')
}

// NamesHostedTool reports whether the object starting at b[st] is a tool_choice (or an
// allowed_tools entry) naming the hosted code_interpreter tool.
func NamesHostedTool(b []byte, st int) bool {
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
func reqRewriteToolChoice(d *Dialect, b []byte, sp jsonscan.Span, name string) (edits []jsonscan.Edit, forced bool, later []byte) {
	switch b[sp.Start] {
	case '"':
		mode, _ := jsonscan.Str(b, sp)
		return nil, mode == "required", nil
	case '{':
	default:
		return nil, false, nil
	}
	if NamesHostedTool(b, sp.Start) {
		return []jsonscan.Edit{{Start: sp.Start, End: sp.End, Repl: d.FunctionChoice(name)}}, true, nil
	}
	switch typ, _ := jsonscan.Str(b, jsonscan.Field(b, sp.Start, "type")); typ {
	case "function":
		path := []string{"name"}
		if d.FieldsUnderType {
			path = []string{"function", "name"}
		}
		fn, _ := jsonscan.Str(b, jsonscan.Path(b, sp.Start, path...))
		return nil, fn == name, nil
	case "allowed_tools":
		// Responses: {"type":"allowed_tools","mode":…,"tools":[…]};
		// Chat: {"type":"allowed_tools","allowed_tools":{"mode":…,"tools":[…]}}.
		holder := sp.Start
		if d.FieldsUnderType {
			inner := jsonscan.Field(b, sp.Start, "allowed_tools")
			if !inner.OK() || b[inner.Start] != '{' {
				return nil, false, nil
			}
			holder = inner.Start
		}
		modeAt := jsonscan.Field(b, holder, "mode")
		mode, _ := jsonscan.Str(b, modeAt)
		if list := jsonscan.Field(b, holder, "tools"); list.OK() && b[list.Start] == '[' {
			fn := d.FunctionChoice(name)
			jsonscan.EachElem(b, list.Start, func(_, st, en int) bool {
				if b[st] == '{' && NamesHostedTool(b, st) {
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

// checkRepeats refuses a body that gives a member the rewrite reads or edits twice: we could
// not tell which one the upstream would honour.
func checkRepeats(t jsonscan.TopLevel) error {
	for _, k := range [...]string{"tools", "tool_choice", "stream", "stream_options", "metadata", "input", "messages"} {
		if t.Count(k) > 1 {
			return &schema.RequestError{
				Message: fmt.Sprintf("The request gives %q more than once.", k),
				Param:   k,
			}
		}
	}
	return nil
}

// WithoutSecrets returns tool, a hosted tool object echoed in answers, without the domain
// secrets of the network_policy of its member container (a code_interpreter tool's
// "container", a shell tool's "environment"): the echo keeps the policy's type and allowlist,
// as the native container object does, and never a secret's value. A tool with a policy is
// decoded and encoded again (members in key order), so that a repeated member (the last
// counts, as for jsonscan.Field) cannot carry secrets past it; one that cannot be is
// echoed as the type alone.
func WithoutSecrets(tool []byte, container string) []byte {
	var t map[string]any
	dec := json.NewDecoder(bytes.NewReader(tool))
	dec.UseNumber()
	if dec.Decode(&t) != nil {
		return wholeToolType(tool)
	}
	if c, ok := t[container].(map[string]any); ok {
		if np, ok := c["network_policy"].(map[string]any); ok {
			delete(np, "domain_secrets")
		}
	}
	out, err := json.Marshal(t)
	if err != nil {
		return wholeToolType(tool)
	}
	return out
}

// wholeToolType is the echo of a tool WithoutSecrets could not read: its type alone.
func wholeToolType(tool []byte) []byte {
	b, _ := json.Marshal(map[string]any{"type": gjson.GetBytes(tool, "type").String()})
	return b
}

// noInternet is the sentence of the default descriptions that a container with an allowlist
// makes untrue.
const noInternet = "There is no internet access."

// maxDescribedDomains bounds the domains a description names.
const maxDescribedDomains = 16

// NetworkDescription returns description telling the model which domains the container may
// reach when np (a network_policy of body) is an allowlist: the default's "There is no internet
// access." becomes the list (a custom description gets it appended). A policy that is not an
// allowlist, or not well formed (admission refuses it), leaves description as it is.
func NetworkDescription(description string, body []byte, np jsonscan.Span) string {
	if body[np.Start] != '{' || !jsonscan.FieldIs(body, np.Start, "type", "allowlist") {
		return description
	}
	list := jsonscan.Field(body, np.Start, "allowed_domains")
	if !list.OK() || body[list.Start] != '[' {
		return description
	}
	var domains []string
	n := 0
	jsonscan.EachElem(body, list.Start, func(_, start, end int) bool {
		if d, ok := jsonscan.Str(body, jsonscan.Span{Start: start, End: end}); ok && d != "" {
			n++
			if len(domains) < maxDescribedDomains {
				domains = append(domains, d)
			}
		}
		return true
	})
	if n == 0 {
		return description
	}
	sentence := "Internet access: only to " + strings.Join(domains, ", ")
	if n > len(domains) {
		sentence += fmt.Sprintf(" and %d more domains", n-len(domains))
	}
	sentence += ", through the HTTP(S) proxy the environment sets (HTTP_PROXY, HTTPS_PROXY); nothing else is reachable."
	if strings.Contains(description, noInternet) {
		return strings.Replace(description, noInternet, sentence, 1)
	}
	return description + " " + sentence
}
