package responses

import (
	"fmt"

	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/schema/internal/jsonscan"
)

// appendCodeCall appends c as a code_interpreter_call item to dst, with exactly the native keys
// in the native order: {"id","type":"code_interpreter_call","status","code","container_id",
// "outputs"}, each output with only its own keys ({"type","logs"} or {"type","url"}). The
// outputs are an array ([] when there are none) when outputs is set, and null otherwise (a
// request whose include does not ask for them). It fails on an output of another type.
func appendCodeCall(dst []byte, c schema.CodeCall, outputs bool) ([]byte, error) {
	dst = append(dst, `{"id":`...)
	dst = jsonscan.AppendString(dst, c.ID)
	dst = append(dst, `,"type":"code_interpreter_call","status":`...)
	dst = jsonscan.AppendString(dst, c.Status)
	dst = append(dst, `,"code":`...)
	dst = jsonscan.AppendString(dst, c.Code)
	dst = append(dst, `,"container_id":`...)
	dst = jsonscan.AppendString(dst, c.ContainerID)
	if !outputs {
		return append(dst, `,"outputs":null}`...), nil
	}
	dst = append(dst, `,"outputs":[`...)
	for i, o := range c.Outputs {
		if i > 0 {
			dst = append(dst, ',')
		}
		switch o.Type {
		case schema.CodeOutputLogs:
			dst = append(dst, `{"type":"logs","logs":`...)
			dst = jsonscan.AppendString(dst, o.Logs)
		case schema.CodeOutputImage:
			dst = append(dst, `{"type":"image","url":`...)
			dst = jsonscan.AppendString(dst, o.URL)
		default:
			return nil, fmt.Errorf("marshal code_interpreter_call %q: output %d has unknown type %q", c.ID, i, o.Type)
		}
		dst = append(dst, '}')
	}
	return append(dst, "]}"...), nil
}

// renderOutputs returns the text fed back to the model for the outputs of a replayed
// code_interpreter_call item, given as the raw JSON of its "outputs" value: an array of
// {"type":"logs","logs":…} and {"type":"image","url":…} entries. It renders them with
// [schema.RenderCodeOutputs], as the loop rendered the run; null, an empty array or anything
// that is not a JSON array gives "".
func renderOutputs(outputs []byte) string {
	if _, _, err := jsonscan.ScanTop(outputs); err != nil {
		return ""
	}
	st := jsonscan.SkipWS(outputs, 0)
	if outputs[st] != '[' {
		return ""
	}
	var outs []schema.CodeOutput
	jsonscan.EachElem(outputs, st, func(_, es, _ int) bool {
		if outputs[es] != '{' {
			return true
		}
		var o schema.CodeOutput
		o.Type, _ = jsonscan.Str(outputs, jsonscan.Field(outputs, es, "type"))
		o.Logs, _ = jsonscan.Str(outputs, jsonscan.Field(outputs, es, "logs"))
		outs = append(outs, o)
		return true
	})
	return schema.RenderCodeOutputs(outs)
}
