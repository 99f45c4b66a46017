package messages

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/codeinterp/codeinterp/pkg/schema"
)

func sprintf(format string, args ...any) string { return fmt.Sprintf(format, args...) }

// Options tune [Rewrite].
type Options struct {
	// Names are the tool names the model sees; the zero value uses the native names.
	Names Names
	// WholeFirst asks the upstream for a whole answer although the client streams (see
	// schema.Options.WholeFirst).
	WholeFirst bool
	// CellLimit is the wall-clock limit of one code run, which code_execution_20260521's Python
	// tool description discloses; zero leaves it out of the description.
	CellLimit time.Duration
}

// Request is what [Rewrite] learned of a request.
type Request struct {
	// Body is the body to send upstream: the request as the client sent it, with the
	// code_execution tool replaced, and the rest of what Rewrite changes.
	Body []byte
	// Found reports whether the request has a code_execution tool; when false, Body is the
	// client's body unchanged.
	Found bool
	// Version is the tool's type, e.g. "code_execution_20250825".
	Version string
	// Names are the tool names the model sees.
	Names Names
	// Stream reports whether the client asked for an event stream (the upstream is asked for
	// a whole answer).
	Stream bool
	// ContainerID is the container the request names (top-level "container", a string or
	// {"id"}), removed from the body.
	ContainerID string
	// ForcedChoice reports whether tool_choice named the code_execution tool: round 1 forces
	// the matching tool, later rounds use LaterChoice.
	ForcedChoice bool
	// LaterChoice is the tool_choice of the rounds after the first when ForcedChoice is set.
	LaterChoice []byte
	// FileIDs are the files the container_upload blocks name (see upload.go), copied into
	// the container before the first run.
	FileIDs []string
	// CodeTools are the names of the client's tools the code may call (Options.CodeTools).
	CodeTools []string
	// Resume is the request's answer to a paused cell's calls (Options.CodeTools), nil when
	// it answers none.
	Resume *schema.Resume
	// Skills are the container's custom skills (container.skills, see skills.go), removed
	// from the body with the container; admission resolves them.
	Skills []Skill
}

// descriptions of the tools the model sees.
const (
	pythonDescription = "Run Python code in a persistent, sandboxed Python process (no network). Variables, imports and " +
		"files under /mnt/data persist between calls. Returns stdout, stderr and the return code."
	replDescription = "Run a cell of Python code in the container's persistent Python REPL (no network; numpy, pandas and " +
		"matplotlib installed). Variables, functions and imports persist between calls and across requests that reuse the " +
		"container, as do files under /mnt/data, the working directory. Returns stdout, stderr and the return code."
	bashDescription = "Run a bash command in a persistent, sandboxed Linux container (no network; Python 3 with numpy, " +
		"pandas and matplotlib). The working directory is /mnt/data; files there persist between calls. Returns stdout, " +
		"stderr and the return code."
	editorDescription = "View, create or edit a text file in the sandboxed container. command 'view' shows a file with " +
		"line numbers (or lists a directory); 'create' writes file_text to path; 'str_replace' replaces the one occurrence " +
		"of old_str with new_str. Paths are absolute or relative to /mnt/data. A view shows at most 8 KiB; view_range shows other lines."
)

// cellLimitDescription is what code_execution_20260521's Python tool description adds: the
// per-cell time limit.
func cellLimitDescription(limit time.Duration) string {
	return " Each cell may run for at most " + limit.String() + " of wall-clock time; a cell that runs longer is " +
		"interrupted (what it defined before the interruption is kept)."
}

// toolsFor returns the tools that stand for a code_execution tool of version, with the
// client's cache_control (a prompt cache breakpoint) on the last one. cellLimit is the
// per-cell time limit _20260521 discloses.
func toolsFor(version string, n Names, cacheControl string, cellLimit time.Duration) []string {
	var out []string
	add := func(name, description, schema string) {
		t := `{"name":` + quote(name) + `,"description":` + quote(description) + `,"input_schema":` + schema
		if cacheControl != "" {
			t += `,"cache_control":` + cacheControl
		}
		out = append(out, t+"}")
	}
	if version == Version20250522 {
		add(n.Python, pythonDescription, `{"type":"object","properties":{"code":{"type":"string","description":"The Python code to run."}},"required":["code"]}`)
		return out
	}
	cc := cacheControl
	cacheControl = ""
	if replState(version) {
		d := replDescription
		if version == Version20260521 && cellLimit > 0 {
			d += cellLimitDescription(cellLimit)
		}
		add(n.Python, d, `{"type":"object","properties":{"code":{"type":"string","description":"The Python code of the cell."}},"required":["code"]}`)
	}
	add(n.Bash, bashDescription, `{"type":"object","properties":{"command":{"type":"string","description":"The bash command to run."}},"required":["command"]}`)
	cacheControl = cc
	add(n.Editor, editorDescription, `{"type":"object","properties":{"command":{"type":"string","enum":["view","create","str_replace"]},`+
		`"path":{"type":"string"},"file_text":{"type":"string"},"old_str":{"type":"string"},"new_str":{"type":"string"},`+
		`"view_range":{"type":"array","items":{"type":"integer"},"minItems":2,"maxItems":2,"description":"view only: [start_line, end_line], from line 1; end_line -1 reads to the end."}},`+
		`"required":["command","path"]}`)
	return out
}

// Rewrite finds the request's code_execution tool and, when there is one, makes the body the
// upstream gets: the tool replaced by ordinary tools in the same place, a tool_choice naming it
// pointed at them, stream as asked, the top-level container removed, and the server tool blocks of
// replayed assistant turns turned into tool_use / tool_result pairs. A client mistake is a
// *RequestError.
func Rewrite(body []byte, o Options) (Request, error) {
	if !gjson.ValidBytes(body) {
		return Request{}, badRequest("The request body is not valid JSON.")
	}
	root := gjson.ParseBytes(body)
	if !root.IsObject() {
		return Request{}, badRequest("The request body must be a JSON object.")
	}
	rq := Request{Body: body, Names: o.Names.withDefaults()}
	tools := root.Get("tools")
	if !tools.Exists() {
		return rq, nil
	}
	if !tools.IsArray() {
		return Request{}, badRequest("tools: Input should be a valid list")
	}
	at, version, cache := -1, "", ""
	var clientNames []string
	for i, t := range tools.Array() {
		typ := t.Get("type").String()
		if !isCodeExecution(typ) {
			clientNames = append(clientNames, t.Get("name").String())
			continue
		}
		switch {
		case at >= 0:
			return Request{}, badRequest("tools.%d: only one code_execution tool may be given", i)
		case typ != Version20250522 && typ != Version20250825 && typ != Version20260120 && typ != Version20260521:
			return Request{}, badRequest("tools.%d.type: unknown code execution tool version %q", i, typ)
		case t.Get("name").Exists() && t.Get("name").String() != "code_execution":
			return Request{}, badRequest("tools.%d.name: the code execution tool's name must be 'code_execution'", i)
		}
		at, version = i, typ
		if cc := t.Get("cache_control"); cc.Exists() {
			cache = cc.Raw
		}
	}
	if at < 0 {
		return rq, nil
	}
	rq.Found, rq.Version = true, version
	for _, name := range clientNames {
		if rq.Names.kindOf(name, version) != 0 {
			return Request{}, badRequest("tools: the tool name %q is reserved for code execution; rename your tool", name)
		}
	}

	elems := tools.Array()
	raws := make([]string, len(elems))
	var codeTools []gjson.Result
	for i, t := range elems {
		if i == at {
			continue
		}
		var err error
		var fromCode bool
		if raws[i], fromCode, err = directTool(i, t, version); err != nil {
			return Request{}, err
		}
		if fromCode {
			codeTools = append(codeTools, t)
			rq.CodeTools = append(rq.CodeTools, t.Get("name").String())
		}
	}
	replaced := toolsFor(version, rq.Names, cache, o.CellLimit)
	if len(codeTools) > 0 {
		// The Python tool comes first (toolsFor): its description tells the model the tools.
		var err error
		if replaced[0], err = sjson.Set(replaced[0], "description", gjson.Get(replaced[0], "description").String()+codeToolsDescription(codeTools)); err != nil {
			return Request{}, fmt.Errorf("describe the code tools: %w", err)
		}
	}
	out, err := replaceTool(body, raws, at, replaced)
	if err != nil {
		return Request{}, err
	}
	if out, err = rq.rewriteChoice(out, root.Get("tool_choice")); err != nil {
		return Request{}, err
	}
	if s := root.Get("stream"); s.Exists() {
		if s.Type != gjson.True && s.Type != gjson.False {
			return Request{}, badRequest("stream: Input should be a valid boolean")
		}
		// A stream stays asked for, the upstream's answer streaming through to the client,
		// unless the client's stream is replayed.
		rq.Stream = s.Type == gjson.True
		if rq.Stream && o.WholeFirst {
			if out, err = sjson.SetBytes(out, "stream", false); err != nil {
				return Request{}, fmt.Errorf("set stream: %w", err)
			}
		}
	}
	if c := root.Get("container"); c.Exists() {
		switch {
		case c.Type == gjson.String:
			rq.ContainerID = c.String()
		case c.IsObject() && (c.Get("id").Type == gjson.String || !c.Get("id").Exists()):
			rq.ContainerID = c.Get("id").String()
			if rq.Skills, err = parseSkills(c); err != nil {
				return Request{}, err
			}
		case c.Type == gjson.Null:
		default:
			return Request{}, badRequest("container: expected a container id or an object with an id")
		}
		if out, err = sjson.DeleteBytes(out, "container"); err != nil {
			return Request{}, fmt.Errorf("remove container: %w", err)
		}
	}
	if replState(version) {
		if rq.Resume, err = pendingResume(root, rq.ContainerID, rq.Names.Python); err != nil {
			return Request{}, err
		}
		if out, err = dropCodeCalls(out); err != nil {
			return Request{}, err
		}
	}
	if out, err = replayHistory(out, rq.Names, version); err != nil {
		return Request{}, err
	}
	if out, rq.FileIDs, err = rewriteUploads(out); err != nil {
		return Request{}, err
	}
	rq.Body = out
	return rq, nil
}

// replaceTool makes tools the request's tools, with repl in the place of tools[at].
func replaceTool(body []byte, tools []string, at int, repl []string) ([]byte, error) {
	parts := make([]string, 0, len(tools)+len(repl))
	for i, e := range tools {
		switch {
		case i == at:
			parts = append(parts, repl...)
		case e != "": // "": a tool callable only from code
			parts = append(parts, e)
		}
	}
	out, err := sjson.SetRawBytes(body, "tools", []byte("["+strings.Join(parts, ",")+"]"))
	if err != nil {
		return nil, fmt.Errorf("replace tools: %w", err)
	}
	return out, nil
}

// rewriteChoice points a tool_choice that names code_execution at the tool standing for it.
func (rq *Request) rewriteChoice(body []byte, choice gjson.Result) ([]byte, error) {
	if !choice.IsObject() || choice.Get("type").String() != "tool" || choice.Get("name").String() != "code_execution" {
		return body, nil
	}
	name := rq.Names.Bash
	if rq.Version == Version20250522 || replState(rq.Version) {
		name = rq.Names.Python
	}
	forced := `{"type":"tool","name":` + quote(name)
	later := `{"type":"auto"`
	if d := choice.Get("disable_parallel_tool_use"); d.Exists() {
		forced += `,"disable_parallel_tool_use":` + d.Raw
		later += `,"disable_parallel_tool_use":` + d.Raw
	}
	rq.ForcedChoice, rq.LaterChoice = true, []byte(later+"}")
	out, err := sjson.SetRawBytes(body, "tool_choice", []byte(forced+"}"))
	if err != nil {
		return nil, fmt.Errorf("set tool_choice: %w", err)
	}
	return out, nil
}

// replayHistory turns the server tool blocks of replayed assistant turns into what the model
// knows: each server_tool_use becomes a tool_use of the matching tool, and its result block a
// tool_result in a user turn right after it (the assistant turn is split around it, and a
// following user turn takes the results at its start); the caller of a client's tool_use block
// (which the REPL-state versions' answers carry) is left out. Messages without server tool
// blocks or callers stay byte for byte as they were.
func replayHistory(body []byte, n Names, version string) ([]byte, error) {
	msgs := gjson.GetBytes(body, "messages")
	if !msgs.IsArray() || !replayed(msgs.Raw) {
		return body, nil
	}
	elems := msgs.Array()
	out := make([]string, 0, len(elems)+2)
	var carry []string // tool_result blocks waiting for the next user turn
	changed := false
	for _, m := range elems {
		role := m.Get("role").String()
		if len(carry) > 0 && role == "user" {
			out = append(out, prependBlocks(m, carry))
			carry, changed = nil, true
			continue
		}
		if len(carry) > 0 {
			out = append(out, userTurn(carry))
			carry = nil
		}
		content := m.Get("content")
		if role != "assistant" || !content.IsArray() || !replayed(content.Raw) {
			out = append(out, m.Raw)
			continue
		}
		turns, pending, err := splitAssistant(content, n, version)
		if err != nil {
			return nil, err
		}
		out = append(out, turns...)
		carry, changed = pending, true
	}
	if len(carry) > 0 {
		out = append(out, userTurn(carry))
	}
	if !changed {
		return body, nil
	}
	res, err := sjson.SetRawBytes(body, "messages", []byte("["+strings.Join(out, ",")+"]"))
	if err != nil {
		return nil, fmt.Errorf("replay history: %w", err)
	}
	return res, nil
}

// replayed reports whether raw may hold what replayHistory changes: a server tool's block, its
// result (alone in a turn once the calls a paused cell made from code are left out), or a
// caller.
func replayed(raw string) bool {
	return strings.Contains(raw, `"server_tool_use"`) || strings.Contains(raw, `code_execution_tool_result"`) || strings.Contains(raw, `"caller"`)
}

// splitAssistant splits one replayed assistant turn's blocks around its server tool results:
// the turns to send, and the tool_result blocks still to be put in a user turn after them.
func splitAssistant(content gjson.Result, n Names, version string) (turns, pending []string, err error) {
	var blocks, results []string
	flush := func() {
		if len(blocks) > 0 {
			turns = append(turns, `{"role":"assistant","content":[`+strings.Join(blocks, ",")+`]}`)
			blocks = nil
		}
		if len(results) > 0 {
			turns = append(turns, userTurn(results))
			results = nil
		}
	}
	for _, b := range content.Array() {
		typ := b.Get("type").String()
		switch {
		case typ == "server_tool_use":
			k := nativeKind(b.Get("name").String())
			if k == 0 {
				// Another server tool (web search, ...): not ours to translate.
				blocks = append(blocks, b.Raw)
				continue
			}
			if len(results) > 0 {
				flush()
			}
			name := n.kindName(k)
			if version == Version20250522 && k != Python || version == Version20250825 && k == Python {
				// History from another tool version: still runnable as the tool of this one.
				name = n.Bash
				if version == Version20250522 {
					name = n.Python
				}
			}
			input := b.Get("input").Raw
			if input == "" {
				input = "{}"
			}
			blocks = append(blocks, `{"type":"tool_use","id":`+quote(b.Get("id").String())+`,"name":`+quote(name)+`,"input":`+input+`}`)
		case resultKind(typ) != 0:
			results = append(results, toolResult(b))
		default:
			if len(results) > 0 {
				flush()
			}
			blocks = append(blocks, withoutCaller(b))
		}
	}
	if len(blocks) > 0 {
		turns = append(turns, `{"role":"assistant","content":[`+strings.Join(blocks, ",")+`]}`)
	}
	return turns, results, nil
}

func (n Names) kindName(k Kind) string {
	switch k {
	case Python:
		return n.Python
	case Bash:
		return n.Bash
	default:
		return n.Editor
	}
}

// nativeKind is the kind of a server_tool_use block's name, or 0.
func nativeKind(name string) Kind {
	for _, k := range []Kind{Python, Bash, Editor} {
		if name == k.nativeName() {
			return k
		}
	}
	return 0
}

// resultKind is the kind of a result block's type, or 0.
func resultKind(typ string) Kind {
	for _, k := range []Kind{Python, Bash, Editor} {
		if typ == k.resultType() {
			return k
		}
	}
	return 0
}

func userTurn(blocks []string) string {
	return `{"role":"user","content":[` + strings.Join(blocks, ",") + `]}`
}

// prependBlocks puts blocks at the start of a user turn's content.
func prependBlocks(m gjson.Result, blocks []string) string {
	content := m.Get("content")
	rest := ""
	switch {
	case content.Type == gjson.String:
		rest = `,{"type":"text","text":` + content.Raw + `}`
	case content.IsArray():
		if inner := strings.TrimSpace(content.Raw[1 : len(content.Raw)-1]); inner != "" {
			rest = "," + inner
		}
	}
	out, err := sjson.SetRaw(m.Raw, "content", "["+strings.Join(blocks, ",")+rest+"]")
	if err != nil {
		return userTurn(blocks)
	}
	return out
}

// toolResult is the tool_result block the model gets for a replayed result block.
func toolResult(b gjson.Result) string {
	text, isErr := renderResultBlock(resultKind(b.Get("type").String()), b.Get("content"))
	out := `{"type":"tool_result","tool_use_id":` + quote(b.Get("tool_use_id").String()) + `,"content":` + quote(text)
	if isErr {
		out += `,"is_error":true`
	}
	return out + "}"
}

func quote(s string) string {
	js, _ := json.Marshal(s)
	return string(js)
}
