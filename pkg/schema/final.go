package schema

import (
	"errors"
	"fmt"
	"github.com/codeinterp/codeinterp/pkg/schema/internal/jsonscan"
	"slices"
	"strconv"
	"unsafe"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// Output types of a [CodeOutput].
const (
	// CodeOutputLogs is the type of a text output: {"type":"logs","logs":…}.
	CodeOutputLogs = "logs"
	// CodeOutputImage is the type of an image output: {"type":"image","url":…}.
	CodeOutputImage = "image"
)

// CodeCall is one code_interpreter_call output item: one run of the model's code in the
// sandbox, in the shape the native tool returns it. Its zero value renders as an item with
// empty strings and "outputs": [].
type CodeCall struct {
	// ID is the item's id ("ci_…").
	ID string
	// Status is "completed", "failed" or "incomplete"; it is rendered as given.
	Status string
	// Code is the Python source that was run.
	Code string
	// ContainerID is the id of the container the code ran in ("cntr_…").
	ContainerID string
	// Outputs are the run's logs and images. They are rendered as an array, [] when empty,
	// never null.
	Outputs []CodeOutput
}

// CodeOutput is one output of a [CodeCall]: {"type":"logs","logs":…} or
// {"type":"image","url":"data:image/png;base64,…"}.
type CodeOutput struct {
	// Type is [CodeOutputLogs] or [CodeOutputImage].
	Type string
	// Logs is the text of a logs output.
	Logs string
	// URL is the image of an image output, usually a data: URL.
	URL string
}

// MarshalJSON renders exactly the native keys in the native order:
// {"id","type":"code_interpreter_call","status","code","container_id","outputs"}, each output
// with only its own keys ({"type","logs"} or {"type","url"}). It fails on an output of another
// type.
func (c CodeCall) MarshalJSON() ([]byte, error) {
	return c.AppendJSON(make([]byte, 0, 128+len(c.Code)))
}

func (c CodeCall) AppendJSON(dst []byte) ([]byte, error) {
	dst = append(dst, `{"id":`...)
	dst = jsonscan.AppendString(dst, c.ID)
	dst = append(dst, `,"type":"code_interpreter_call","status":`...)
	dst = jsonscan.AppendString(dst, c.Status)
	dst = append(dst, `,"code":`...)
	dst = jsonscan.AppendString(dst, c.Code)
	dst = append(dst, `,"container_id":`...)
	dst = jsonscan.AppendString(dst, c.ContainerID)
	dst = append(dst, `,"outputs":[`...)
	for i, o := range c.Outputs {
		if i > 0 {
			dst = append(dst, ',')
		}
		switch o.Type {
		case CodeOutputLogs:
			dst = append(dst, `{"type":"logs","logs":`...)
			dst = jsonscan.AppendString(dst, o.Logs)
		case CodeOutputImage:
			dst = append(dst, `{"type":"image","url":`...)
			dst = jsonscan.AppendString(dst, o.URL)
		default:
			return nil, fmt.Errorf("marshal code_interpreter_call %q: output %d has unknown type %q", c.ID, i, o.Type)
		}
		dst = append(dst, '}')
	}
	return append(dst, "]}"...), nil
}

// Round is one upstream round of the loop.
type Round struct {
	// Body is the upstream answer of this round: a complete, non-streaming JSON body.
	Body []byte
	// Calls are the calls run from this round's internal function calls, one for each, in the
	// order of those calls; none when the loop did not run them.
	Calls []CodeCall
}

// FinalInput is everything [Final] needs to build the answer the client receives.
type FinalInput struct {
	// Surface is the API surface of the bodies.
	Surface Surface
	// Rounds are the loop's upstream rounds in chronological order; the last is the model's
	// final answer.
	Rounds []Round
	// FunctionName is the name of the internal function the code_interpreter tool was
	// rewritten into.
	FunctionName string
	// Tool is the client's original code_interpreter tool object, echoed in "tools" where the
	// internal function tool was (Responses). Nil removes the function tool instead.
	Tool []byte
	// ToolChoice is the client's original tool_choice, echoed in "tool_choice" (Responses): the
	// upstream saw a rewritten one, and later rounds may have relaxed it or set "none". Nil means
	// the client sent none, and the API's default "auto" is echoed.
	ToolChoice []byte
}

// Final builds the body the client receives from all the loop's rounds: exactly what the native
// API would have returned.
//
// Responses: the last round's body, byte for byte except where it must change. Its "output" is
// the concatenation, round by round, of each round's output items, where every function_call
// item of the internal function is replaced in place by the round's [CodeCall] at the same
// position among those calls, or removed when the round has none (the loop did not run them). The client's own
// function calls, messages and reasoning items stay where they were. "usage" is the sum of all
// rounds' usage (every numeric leaf at the same path). In "tools" the internal function tool is
// replaced by in.Tool; "tool_choice" is set to in.ToolChoice (the client's), or to the API's
// default "auto" when the client sent none.
//
// Chat: the last round's body with "usage" summed over all rounds. Tool calls of the internal
// function left in a message are removed; when none remain, "tool_calls" is dropped and a
// finish_reason of "tool_calls" becomes "stop". Chat has no slot for code_interpreter_call
// items, so none are added.
//
// Final fails when there are no rounds or no function name, when a body is not a JSON object or
// its output not an array, when a round has calls but not one for each of its internal function
// calls, and when a CodeCall has an output of unknown type. It does not modify in, and the body it returns shares no memory with it.
func Final(in FinalInput) ([]byte, error) {
	if len(in.Rounds) == 0 {
		return nil, errors.New("build final answer: no rounds")
	}
	if in.FunctionName == "" {
		return nil, errors.New("build final answer: empty function name")
	}
	views := make([]string, len(in.Rounds))
	for i, r := range in.Rounds {
		views[i] = finalView(r.Body)
		if !gjson.Valid(views[i]) || !jsonscan.IsObjectText(views[i]) {
			return nil, fmt.Errorf("build final answer: round %d: body is not a JSON object", i+1)
		}
	}
	switch in.Surface {
	case Responses:
		return finalResponses(in, views)
	case Chat:
		return finalChat(in, views)
	default:
		return nil, fmt.Errorf("build final answer: unsupported surface %v", in.Surface)
	}
}

// finalView returns b as a string without copying it. Final reads the bodies through these
// views only while it runs, never modifies them, and copies every byte it returns.
func finalView(b []byte) string {
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// finalEdit replaces the value at path (a top-level member, or an element of one) of the last
// body.
type finalEdit struct {
	path  string
	value []byte
}

// finalApply returns a new copy of body (whose view is view) with the value at each edit's path
// replaced, spliced in one pass; the edited values must not nest. A path the body lacks is added
// with sjson.
func finalApply(body []byte, view string, edits []finalEdit) ([]byte, error) {
	type span struct {
		start, end int
		value      []byte
	}
	var spans []span
	var missing []finalEdit
	size := len(body)
	for _, e := range edits {
		r := gjson.Get(view, e.path)
		if !r.Exists() || r.Index <= 0 {
			missing = append(missing, e)
			continue
		}
		spans = append(spans, span{r.Index, r.Index + len(r.Raw), e.value})
		size += len(e.value) - len(r.Raw)
	}
	slices.SortFunc(spans, func(a, b span) int { return a.start - b.start })
	out := make([]byte, 0, size)
	at := 0
	for _, sp := range spans {
		out = append(out, body[at:sp.start]...)
		out = append(out, sp.value...)
		at = sp.end
	}
	out = append(out, body[at:]...)
	var err error
	for _, e := range missing {
		if out, err = sjson.SetRawBytes(out, e.path, e.value); err != nil {
			return nil, fmt.Errorf("build final answer: set %s: %w", e.path, err)
		}
	}
	return out, nil
}

func finalResponses(in FinalInput, views []string) ([]byte, error) {
	last := views[len(views)-1]
	output, changed, err := finalResponsesOutput(in, views)
	if err != nil {
		return nil, err
	}
	var edits []finalEdit
	if changed || len(views) > 1 {
		edits = append(edits, finalEdit{"output", output})
	}
	if usage := finalUsage(views); usage != nil {
		edits = append(edits, finalEdit{"usage", usage})
	}
	if e, ok := finalResponsesTools(last, in.FunctionName, in.Tool); ok {
		edits = append(edits, e)
	}
	if choice := finalResponsesToolChoice(last, in.ToolChoice); choice != nil {
		edits = append(edits, finalEdit{"tool_choice", choice})
	}
	return finalApply(in.Rounds[len(views)-1].Body, last, edits)
}

// finalResponsesOutput returns the concatenated output array of all rounds and whether it
// differs from the concatenation of the rounds' items (an internal call was replaced or
// removed).
func finalResponsesOutput(in FinalInput, views []string) ([]byte, bool, error) {
	size := 2
	for _, v := range views {
		size += len(v)
	}
	out := make([]byte, 0, size)
	out = append(out, '[')
	n := 0
	changed := false
	for ri, r := range in.Rounds {
		output := gjson.Get(views[ri], "output")
		if output.Exists() && output.Type != gjson.Null && !output.IsArray() {
			return nil, false, fmt.Errorf("build final answer: round %d: output is not an array", ri+1)
		}
		internal := 0 // internal function calls of this round seen so far
		var err error
		output.ForEach(func(_, item gjson.Result) bool {
			if !finalIsInternalCall(item, in.FunctionName) {
				if n > 0 {
					out = append(out, ',')
				}
				out = append(out, item.Raw...)
				n++
				return true
			}
			changed = true
			k := internal
			internal++
			if k >= len(r.Calls) {
				return true // never run: the client must not see the internal call
			}
			if n > 0 {
				out = append(out, ',')
			}
			out, err = r.Calls[k].AppendJSON(out)
			n++
			return err == nil
		})
		if err != nil {
			return nil, false, fmt.Errorf("build final answer: round %d: %w", ri+1, err)
		}
		if len(r.Calls) > 0 && len(r.Calls) != internal {
			return nil, false, fmt.Errorf("build final answer: round %d: %d calls for %d internal function calls", ri+1, len(r.Calls), internal)
		}
	}
	return append(out, ']'), changed, nil
}

// finalIsInternalCall reports whether item is a Responses function_call of the internal function.
func finalIsInternalCall(item gjson.Result, name string) bool {
	return item.Get("type").String() == "function_call" && item.Get("name").String() == name
}

// finalIsInternalTool reports whether t is the Responses function tool (or function choice)
// naming the internal function.
func finalIsInternalTool(t gjson.Result, name string) bool {
	return t.Get("type").String() == "function" && t.Get("name").String() == name
}

// finalResponsesTools returns the edit of the body view's tools: the function tool named name
// replaced by tool in place (only that element's bytes change), or, when there are several of
// them or tool is nil, the array rebuilt with the first replaced and the others removed. It
// returns false when there is no such tool.
func finalResponsesTools(view, name string, tool []byte) (finalEdit, bool) {
	tools := gjson.Get(view, "tools")
	var found []int
	tools.ForEach(func(k, t gjson.Result) bool {
		if finalIsInternalTool(t, name) {
			found = append(found, int(k.Int()))
		}
		return true
	})
	switch {
	case len(found) == 0:
		return finalEdit{}, false
	case len(found) == 1 && tool != nil:
		return finalEdit{"tools." + strconv.Itoa(found[0]), tool}, true
	}
	out := make([]byte, 0, len(tools.Raw)+len(tool))
	out = append(out, '[')
	n := 0
	replaced := false
	tools.ForEach(func(_, t gjson.Result) bool {
		raw := []byte(t.Raw)
		if finalIsInternalTool(t, name) {
			if replaced || tool == nil {
				return true
			}
			raw, replaced = tool, true
		}
		if n > 0 {
			out = append(out, ',')
		}
		out = append(out, raw...)
		n++
		return true
	})
	return finalEdit{"tools", append(out, ']')}, true
}

// finalHostedChoice is the tool_choice that names the hosted code_interpreter tool.
const finalHostedChoice = `{"type":"code_interpreter"}`

// finalResponsesToolChoice returns the tool_choice to echo, the client's original or "auto" when
// it sent none, or nil when the body's already is that.
func finalResponsesToolChoice(view string, choice []byte) []byte {
	if choice == nil {
		choice = []byte(`"auto"`)
	}
	if tc := gjson.Get(view, "tool_choice"); tc.Exists() && tc.Raw == string(choice) {
		return nil
	}
	return choice
}

func finalChat(in FinalInput, views []string) ([]byte, error) {
	last := views[len(views)-1]
	type fix struct {
		choice  int
		removed bool   // whether tool calls of the internal function were removed
		keep    []byte // the remaining tool_calls array, nil when none remain
		legacy  bool   // whether a legacy function_call of the internal function is dropped
		stop    bool   // whether finish_reason becomes "stop"
	}
	var fixes []fix
	gjson.Get(last, "choices").ForEach(func(k, choice gjson.Result) bool {
		msg := choice.Get("message")
		f := fix{choice: int(k.Int())}
		n := 0
		msg.Get("tool_calls").ForEach(func(_, tc gjson.Result) bool {
			if tc.Get("function.name").String() == in.FunctionName {
				f.removed = true
				return true
			}
			if n == 0 {
				f.keep = append(f.keep, '[')
			} else {
				f.keep = append(f.keep, ',')
			}
			f.keep = append(f.keep, tc.Raw...)
			n++
			return true
		})
		if n > 0 {
			f.keep = append(f.keep, ']')
		}
		f.legacy = msg.Get("function_call.name").String() == in.FunctionName
		finish := choice.Get("finish_reason").String()
		f.stop = (f.removed && n == 0 && finish == "tool_calls") || (f.legacy && finish == "function_call")
		if f.removed || f.legacy {
			fixes = append(fixes, f)
		}
		return true
	})
	var edits []finalEdit
	if usage := finalUsage(views); usage != nil {
		edits = append(edits, finalEdit{"usage", usage})
	}
	body, err := finalApply(in.Rounds[len(views)-1].Body, last, edits)
	if err != nil {
		return nil, err
	}
	// Internal calls left in a Chat answer are rare (a mixed turn, or the loop stopped): edit
	// them with sjson on the copy.
	for _, f := range fixes {
		prefix := "choices." + strconv.Itoa(f.choice)
		switch {
		case f.removed && f.keep == nil:
			body, err = sjson.DeleteBytes(body, prefix+".message.tool_calls")
		case f.removed:
			body, err = sjson.SetRawBytes(body, prefix+".message.tool_calls", f.keep)
		}
		if err == nil && f.legacy {
			body, err = sjson.DeleteBytes(body, prefix+".message.function_call")
		}
		if err == nil && f.stop {
			body, err = sjson.SetBytes(body, prefix+".finish_reason", "stop")
		}
		if err != nil {
			return nil, fmt.Errorf("build final answer: remove internal tool calls: %w", err)
		}
	}
	return body, nil
}
