package messages

import (
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
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
