package messages

import (
	"fmt"
	"strings"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/codeinterp/codeinterp/pkg/schema"
)

// The REPL-state versions, code_execution_20260120 and _20260521, offer the model Python beside
// bash and the text editor (see toolsFor). Their Python runs in the container's one Python
// process, as every Python call here does: variables and imports persist across calls and
// across the requests that name the same container. Natively their answers name a caller on
// every tool_use block; the model here writes none, and the client's own calls are direct.

// directCaller is the caller of a call the model made itself.
const directCaller = `{"type":"direct"}`

// replState reports whether a tool version is one of the REPL-state versions, which offer
// Python beside bash and the text editor.
func replState(version string) bool {
	return version == Version20260120 || version == Version20260521
}

// clientBlock is the content block b of the model's answer as the client gets it: with a
// REPL-state version, a tool_use block of the client's own tools carries a direct caller, as
// natively.
func (rq Request) clientBlock(b gjson.Result) string {
	if !replState(rq.Version) || b.Get("type").String() != "tool_use" || b.Get("caller").Exists() {
		return b.Raw
	}
	out, err := sjson.SetRaw(b.Raw, "caller", directCaller)
	if err != nil {
		return b.Raw
	}
	return out
}

// withoutCaller is the content block b of a replayed assistant turn as the model gets it: a
// tool_use block without the caller the client echoes back.
func withoutCaller(b gjson.Result) string {
	if b.Get("type").String() != "tool_use" || !b.Get("caller").Exists() {
		return b.Raw
	}
	out, err := sjson.Delete(b.Raw, "caller")
	if err != nil {
		return b.Raw
	}
	return out
}

// directTool is the client's tool t (tools[i]) as the model gets it, and whether the code may
// call it (programmatic tool calling, served with the REPL-state versions, as natively): a tool
// whose allowed_callers name a REPL-state version, the request's, is callable from the code;
// one callable only from code is left out of the model's tools ("" : the Python tool's
// description tells it instead). A tool callable only from another version, or from
// code_execution_20250825 (which natively no longer serves it), is refused. A tool callable
// directly loses its allowed_callers (direct is the default), which an upstream would refuse
// once the code execution tool they name is replaced.
func directTool(i int, t gjson.Result, version string) (string, bool, error) {
	ac := t.Get("allowed_callers")
	if !ac.Exists() || ac.Type == gjson.Null {
		return t.Raw, false, nil
	}
	if !ac.IsArray() {
		return "", false, badRequest("tools.%d.allowed_callers: Input should be a valid list", i)
	}
	direct, fromCode := false, false
	for j, c := range ac.Array() {
		switch v := c.String(); {
		case c.Type != gjson.String || v != "direct" && !isCodeExecution(v):
			return "", false, badRequest("tools.%d.allowed_callers.%d: Input should be 'direct' or a code execution tool version", i, j)
		case v == "direct":
			direct = true
		case v == version:
			fromCode = replState(version)
		}
	}
	if !direct && !fromCode {
		if !replState(version) {
			return "", false, badRequest("tools.%d.allowed_callers: programmatic tool calling requires %s or later; "+
				"use that version, or allow \"direct\"", i, Version20260120)
		}
		return "", false, badRequest("tools.%d.allowed_callers: the tool is callable only from a code execution "+
			"version this request does not use; name %s or \"direct\"", i, version)
	}
	if !direct {
		return "", true, nil
	}
	out, err := sjson.Delete(t.Raw, "allowed_callers")
	if err != nil {
		return "", false, fmt.Errorf("tools.%d: remove allowed_callers: %w", i, err)
	}
	return out, fromCode, nil
}

// codeToolsDescription tells the model, after the Python tool's description, the client's
// tools its code may call, as natively: async functions taking one dict argument.
func codeToolsDescription(tools []gjson.Result) string {
	var b strings.Builder
	b.WriteString("\n\nThe code may call these tools of the user, each an async Python function taking one dict argument " +
		"that matches its input schema and returning the tool's result as a str: `result = await name({...})`; " +
		"call several at once with `asyncio.gather`. Their results reach only the code: print what the answer needs.")
	for _, t := range tools {
		b.WriteString("\n- " + t.Get("name").String())
		if d := t.Get("description").String(); d != "" {
			b.WriteString(": " + d)
		}
		if s := t.Get("input_schema"); s.Exists() {
			b.WriteString(" Input schema: " + s.Raw)
		}
	}
	return b.String()
}

// callerType is the caller type of a call made from the code of a tool version. The API's
// types know no "code_execution_20260521" caller (reference §1.1): its calls name the
// 20260120 version, whose REPL they share.
func callerType(version string) string {
	if version == Version20260521 {
		return Version20260120
	}
	return version
}

// codeToolUses are the tool_use blocks of calls of the client's tools that the code of the
// server_tool_use block toolID is paused on, each with its caller, as natively.
func (rq Request) codeToolUses(toolID string, calls []schema.ToolCall) []string {
	caller := `{"type":` + quote(callerType(rq.Version)) + `,"tool_id":` + quote(toolID) + `}`
	out := make([]string, len(calls))
	for i, c := range calls {
		input := c.Input
		if !gjson.Valid(input) || !gjson.Parse(input).IsObject() {
			input = "{}"
		}
		out[i] = `{"type":"tool_use","id":` + quote(c.ID) + `,"name":` + quote(c.Name) + `,"input":` + input + `,"caller":` + caller + `}`
	}
	return out
}
