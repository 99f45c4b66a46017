package responses

import (
	"fmt"
	"strconv"

	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/schema/internal/openai"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// markIncomplete marks a final answer as cut short for reason (for example "loop_deadline"):
// status "incomplete" with incomplete_details.reason.
func markIncomplete(body []byte, reason string) ([]byte, error) {
	var err error
	if body, err = sjson.SetBytes(body, "status", "incomplete"); err != nil {
		return nil, fmt.Errorf("mark incomplete: %w", err)
	}
	if body, err = sjson.SetBytes(body, "incomplete_details", map[string]string{"reason": reason}); err != nil {
		return nil, fmt.Errorf("mark incomplete: %w", err)
	}
	return body, nil
}

// shellFinal is what the final answer needs of a request with the hosted shell tool: the
// client's tool, echoed in tools where the shell function was, and the key of the markers of
// its programs' results.
type shellFinal struct {
	tool, key []byte
}

func finalResponses(in schema.FinalInput, views []string, sh *shellFinal) ([]byte, error) {
	last := views[len(views)-1]
	output, changed, err := finalResponsesOutput(in, views, sh)
	if err != nil {
		return nil, err
	}
	var edits []openai.FinalEdit
	if changed || len(views) > 1 {
		edits = append(edits, openai.FinalEdit{Path: "output", Value: output})
	}
	if usage := openai.FinalUsage(views); usage != nil {
		edits = append(edits, openai.FinalEdit{Path: "usage", Value: usage})
	}
	if e, ok := finalResponsesTools(last, in.FunctionName, in.Tool); ok {
		edits = append(edits, e)
	}
	if choice := finalResponsesToolChoice(last, in.ToolChoice); choice != nil {
		edits = append(edits, openai.FinalEdit{Path: "tool_choice", Value: choice})
	}
	body, err := openai.FinalApply(in.Rounds[len(views)-1].Body, last, edits)
	if err != nil || sh == nil {
		return body, err
	}
	// The shell function's tool, in a pass of its own: the code_interpreter tool's edit may
	// have rebuilt the whole tools array.
	if e, ok := finalResponsesTools(openai.View(body), ShellFunctionName, sh.tool); ok {
		return openai.FinalApply(body, openai.View(body), []openai.FinalEdit{e})
	}
	return body, nil
}

// finalResponsesOutput returns the concatenated output array of all rounds and whether it
// differs from the concatenation of the rounds' items (an internal call was replaced or
// removed, a message got citations). The output_text of a message after calls that wrote
// files gets a container_file_citation for each link to, or mention of, one of those files.
func finalResponsesOutput(in schema.FinalInput, views []string, sh *shellFinal) ([]byte, bool, error) {
	size := 2
	for _, v := range views {
		size += len(v)
	}
	out := make([]byte, 0, size)
	out = append(out, '[')
	n := 0
	changed := false
	// The files the calls so far wrote, which the messages after them cite.
	var files writtenFiles
	var w openai.Writer
	for ri, r := range in.Rounds {
		output := gjson.Get(views[ri], "output")
		if output.Exists() && output.Type != gjson.Null && !output.IsArray() {
			return nil, false, fmt.Errorf("build final answer: round %d: output is not an array", ri+1)
		}
		internal := 0 // internal function calls of this round seen so far
		var err error
		output.ForEach(func(_, item gjson.Result) bool {
			shell := sh != nil && finalIsInternalCall(item, ShellFunctionName)
			if !shell && !finalIsInternalCall(item, in.FunctionName) {
				if n > 0 {
					out = append(out, ',')
				}
				raw := item.Raw
				if !files.empty() && item.Get("type").String() == "message" {
					var cited bool
					if raw, cited = annotateMessage(&w, raw, &files); cited {
						changed = true
					}
				}
				out = append(out, raw...)
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
			if shell {
				sc := shellCallOf(item, r.Calls[k], sh.key)
				out = append(sc.appendCall(out, false), ',')
				out = sc.appendOutput(out, false)
				n++
			} else {
				out, err = appendCodeCall(out, r.Calls[k], !in.NullOutputs)
			}
			files.add(&r.Calls[k])
			n++
			return err == nil
		})
		if err == nil {
			err = w.Err
		}
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
func finalResponsesTools(view, name string, tool []byte) (openai.FinalEdit, bool) {
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
		return openai.FinalEdit{}, false
	case len(found) == 1 && tool != nil:
		return openai.FinalEdit{Path: "tools." + strconv.Itoa(found[0]), Value: tool}, true
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
	return openai.FinalEdit{Path: "tools", Value: append(out, ']')}, true
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
