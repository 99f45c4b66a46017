package chat

import (
	"fmt"
	"strconv"

	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/schema/internal/openai"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

func finalChat(in schema.FinalInput, views []string) ([]byte, error) {
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
	var edits []openai.FinalEdit
	if usage := openai.FinalUsage(views); usage != nil {
		edits = append(edits, openai.FinalEdit{Path: "usage", Value: usage})
	}
	body, err := openai.FinalApply(in.Rounds[len(views)-1].Body, last, edits)
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

// markIncomplete marks a final answer as cut short: finish_reason "length" on every choice
// that has none of its own beyond "tool_calls" or "stop".
func markIncomplete(body []byte) ([]byte, error) {
	var err error
	n := int(gjson.GetBytes(body, "choices.#").Int())
	for i := 0; i < n; i++ {
		path := fmt.Sprintf("choices.%d.finish_reason", i)
		if fr := gjson.GetBytes(body, path).String(); fr == "" || fr == "tool_calls" || fr == "stop" {
			if body, err = sjson.SetBytes(body, path, "length"); err != nil {
				return nil, fmt.Errorf("mark incomplete: %w", err)
			}
		}
	}
	return body, nil
}
