package schema

import (
	"errors"
	"fmt"
	"strconv"

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
	// CallID is the call_id of the internal function call this item answers. It is not
	// rendered: [Final] uses it to put the item where that call was.
	CallID string
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
	return c.appendJSON(make([]byte, 0, 128+len(c.Code)))
}

func (c CodeCall) appendJSON(dst []byte) ([]byte, error) {
	dst = append(dst, `{"id":`...)
	dst = finalAppendString(dst, c.ID)
	dst = append(dst, `,"type":"code_interpreter_call","status":`...)
	dst = finalAppendString(dst, c.Status)
	dst = append(dst, `,"code":`...)
	dst = finalAppendString(dst, c.Code)
	dst = append(dst, `,"container_id":`...)
	dst = finalAppendString(dst, c.ContainerID)
	dst = append(dst, `,"outputs":[`...)
	for i, o := range c.Outputs {
		if i > 0 {
			dst = append(dst, ',')
		}
		switch o.Type {
		case CodeOutputLogs:
			dst = append(dst, `{"type":"logs","logs":`...)
			dst = finalAppendString(dst, o.Logs)
		case CodeOutputImage:
			dst = append(dst, `{"type":"image","url":`...)
			dst = finalAppendString(dst, o.URL)
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
	// Calls are the calls run from this round's internal function calls, matched to them by
	// CallID.
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
	// ToolChoice is the client's original tool_choice when the request's was rewritten, echoed
	// in "tool_choice" (Responses). Nil keeps the upstream's.
	ToolChoice []byte
}

// Final builds the body the client receives from all the loop's rounds: exactly what the native
// API would have returned.
//
// Responses: the last round's body, byte for byte except where it must change. Its "output" is
// the concatenation, round by round, of each round's output items, where every function_call
// item of the internal function is replaced in place by the [CodeCall] whose CallID matches its
// call_id, or removed when there is none (the loop stopped before running it). The client's own
// function calls, messages and reasoning items stay where they were. "usage" is the sum of all
// rounds' usage (every numeric leaf at the same path). In "tools" the internal function tool is
// replaced by in.Tool; "tool_choice" is set to in.ToolChoice when that is non-nil, and otherwise
// a choice naming the internal function is turned back into the code_interpreter one.
//
// Chat: the last round's body with "usage" summed over all rounds. Tool calls of the internal
// function left in a message are removed; when none remain, "tool_calls" is dropped and a
// finish_reason of "tool_calls" becomes "stop". Chat has no slot for code_interpreter_call
// items, so none are added.
//
// Final fails when a body is not a JSON object or a CodeCall matches no internal call of its
// round. It does not modify in.
func Final(in FinalInput) ([]byte, error) {
	if len(in.Rounds) == 0 {
		return nil, errors.New("build final answer: no rounds")
	}
	if in.FunctionName == "" {
		return nil, errors.New("build final answer: empty function name")
	}
	for i, r := range in.Rounds {
		if !gjson.ValidBytes(r.Body) || !gjson.ParseBytes(r.Body).IsObject() {
			return nil, fmt.Errorf("build final answer: round %d: body is not a JSON object", i+1)
		}
	}
	switch in.Surface {
	case Responses:
		return finalResponses(in)
	case Chat:
		return finalChat(in)
	default:
		return nil, fmt.Errorf("build final answer: unsupported surface %v", in.Surface)
	}
}

func finalResponses(in FinalInput) ([]byte, error) {
	last := len(in.Rounds) - 1
	body := in.Rounds[last].Body

	output, changed, err := finalResponsesOutput(in)
	if err != nil {
		return nil, err
	}
	if changed || len(in.Rounds) > 1 {
		if body, err = sjson.SetRawBytes(body, "output", output); err != nil {
			return nil, fmt.Errorf("build final answer: set output: %w", err)
		}
	}
	if body, err = finalSetUsage(body, in.Rounds); err != nil {
		return nil, err
	}
	if body, err = finalResponsesTools(body, in.FunctionName, in.Tool); err != nil {
		return nil, err
	}
	if body, err = finalResponsesToolChoice(body, in.FunctionName, in.ToolChoice); err != nil {
		return nil, err
	}
	return body, nil
}

// finalResponsesOutput returns the concatenated output array of all rounds and whether it
// differs from the concatenation of the rounds' items (an internal call was replaced or
// removed).
func finalResponsesOutput(in FinalInput) ([]byte, bool, error) {
	size := 2
	for _, r := range in.Rounds {
		size += len(r.Body)
	}
	out := make([]byte, 0, size)
	out = append(out, '[')
	n := 0
	changed := false
	for ri, r := range in.Rounds {
		output := gjson.GetBytes(r.Body, "output")
		if output.Exists() && output.Type != gjson.Null && !output.IsArray() {
			return nil, false, fmt.Errorf("build final answer: round %d: output is not an array", ri+1)
		}
		used := make([]bool, len(r.Calls))
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
			ci := finalFindCall(r.Calls, item.Get("call_id").String())
			if ci < 0 {
				return true // never run: the client must not see the internal call
			}
			used[ci] = true
			if n > 0 {
				out = append(out, ',')
			}
			out, err = r.Calls[ci].appendJSON(out)
			n++
			return err == nil
		})
		if err != nil {
			return nil, false, fmt.Errorf("build final answer: round %d: %w", ri+1, err)
		}
		for ci, ok := range used {
			if !ok {
				return nil, false, fmt.Errorf("build final answer: round %d: call %q matches no internal function call", ri+1, r.Calls[ci].CallID)
			}
		}
	}
	return append(out, ']'), changed, nil
}

// finalIsInternalCall reports whether item is a Responses function_call of the internal function.
func finalIsInternalCall(item gjson.Result, name string) bool {
	return item.Get("type").String() == "function_call" && item.Get("name").String() == name
}

func finalFindCall(calls []CodeCall, callID string) int {
	for i := range calls {
		if calls[i].CallID == callID {
			return i
		}
	}
	return -1
}

// finalResponsesTools replaces the first function tool named name by tool and removes any other
// (or all of them when tool is nil).
func finalResponsesTools(body []byte, name string, tool []byte) ([]byte, error) {
	var found []int
	gjson.GetBytes(body, "tools").ForEach(func(k, t gjson.Result) bool {
		if t.Get("type").String() == "function" && t.Get("name").String() == name {
			found = append(found, int(k.Int()))
		}
		return true
	})
	if len(found) == 0 {
		return body, nil
	}
	var err error
	for i := len(found) - 1; i >= 0; i-- {
		path := "tools." + strconv.Itoa(found[i])
		if i == 0 && tool != nil {
			body, err = sjson.SetRawBytes(body, path, tool)
		} else {
			body, err = sjson.DeleteBytes(body, path)
		}
		if err != nil {
			return nil, fmt.Errorf("build final answer: restore tools: %w", err)
		}
	}
	return body, nil
}

// finalHostedChoice is the tool_choice that names the hosted code_interpreter tool.
const finalHostedChoice = `{"type":"code_interpreter"}`

// finalResponsesToolChoice sets tool_choice to the client's original, or, when there is none,
// turns a choice that names the internal function back into the hosted tool's.
func finalResponsesToolChoice(body []byte, name string, choice []byte) ([]byte, error) {
	var err error
	if choice != nil {
		if body, err = sjson.SetRawBytes(body, "tool_choice", choice); err != nil {
			return nil, fmt.Errorf("build final answer: restore tool_choice: %w", err)
		}
		return body, nil
	}
	tc := gjson.GetBytes(body, "tool_choice")
	if tc.Get("type").String() == "function" && tc.Get("name").String() == name {
		if body, err = sjson.SetRawBytes(body, "tool_choice", []byte(finalHostedChoice)); err != nil {
			return nil, fmt.Errorf("build final answer: restore tool_choice: %w", err)
		}
		return body, nil
	}
	var named []int
	tc.Get("tools").ForEach(func(k, t gjson.Result) bool {
		if t.Get("type").String() == "function" && t.Get("name").String() == name {
			named = append(named, int(k.Int()))
		}
		return true
	})
	for i := len(named) - 1; i >= 0; i-- {
		path := "tool_choice.tools." + strconv.Itoa(named[i])
		if i == 0 {
			body, err = sjson.SetRawBytes(body, path, []byte(finalHostedChoice))
		} else {
			body, err = sjson.DeleteBytes(body, path)
		}
		if err != nil {
			return nil, fmt.Errorf("build final answer: restore tool_choice: %w", err)
		}
	}
	return body, nil
}

func finalChat(in FinalInput) ([]byte, error) {
	body := in.Rounds[len(in.Rounds)-1].Body
	type fix struct {
		choice  int
		removed bool   // whether tool calls of the internal function were removed
		keep    []byte // the remaining tool_calls array, nil when none remain
		legacy  bool   // whether a legacy function_call of the internal function is dropped
		stop    bool   // whether finish_reason becomes "stop"
	}
	var fixes []fix
	gjson.GetBytes(body, "choices").ForEach(func(k, choice gjson.Result) bool {
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
	var err error
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
	return finalSetUsage(body, in.Rounds)
}
