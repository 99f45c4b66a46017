package local

import (
	"fmt"

	"github.com/codeinterp/codeinterp/pkg/sandbox"
)

// The frames between the server and its two Python programs, each a marshalled dict with an
// "op" (marshal.go): requests and answers to and from the driver (driver.py) over its pipes
// (protocol.go), and to and from the fork template (template.py) over its socket (template.go).
// Each frame type is a struct, and this file is the one place that encodes or decodes it. What
// the driver sends is the tenant's input (the code runs in its process): a field of the wrong
// type decodes as its zero value, and a frame of another op is an error; what an answer says is
// bounded and checked where it is used (run.go's result, report.go).

// runRequest asks the driver to run a cell.
type runRequest struct {
	seq    uint64
	code   string
	marker []byte // ends the run's output on each stream
	reap   bool   // the driver first reaps its children killed after the last run
}

func (r runRequest) encode() map[string]any {
	m := map[string]any{"op": "run", "seq": int64(r.seq), "code": r.code, "marker": r.marker}
	if r.reap {
		m["reap"] = true
	}
	return m
}

// driverConfig is the driver's configuration: its argv[1] in an exec start, part of the fork
// request in a forked one.
type driverConfig struct {
	dataDir      string
	outputLimit  int
	maxFiles     int
	maxFileBytes int // bytes of paths one run lists
	maxImages    int
	preload      bool
	// The rlimits the driver sets on itself: address space, CPU seconds, processes, file
	// size, open files.
	as, cpu, nproc, fsize, nofile int64
	// env are variables the driver adds to its environment before any run (the proxy's,
	// for a container with a network policy); nil for none.
	env map[string]string
}

func (c driverConfig) encode() map[string]any {
	env := map[string]any{}
	for k, v := range c.env {
		env[k] = v
	}
	return map[string]any{
		"data_dir":       c.dataDir,
		"output_limit":   c.outputLimit,
		"max_files":      c.maxFiles,
		"max_file_bytes": c.maxFileBytes,
		"max_images":     c.maxImages,
		"preload":        c.preload,
		"limits": map[string]any{
			"as": c.as, "cpu": c.cpu, "nproc": c.nproc, "fsize": c.fsize, "nofile": c.nofile,
		},
		"env": env,
	}
}

// readyAnswer is the driver's first frame: it is up and waits for runs.
type readyAnswer struct {
	preloaded any // the libraries it imported, for the log
}

// text is a text of a run's result as the driver sends it: [text, omitted], the text cut at the
// output limit and the bytes cut off (or a plain string, nothing cut).
type text struct {
	s       string
	omitted int64
}

// decodeText decodes a text of an answer; anything else is the empty text.
func decodeText(v any) text {
	switch v := v.(type) {
	case string:
		return text{s: v}
	case []any:
		if len(v) == 2 {
			s, _ := v[0].(string)
			n, _ := v[1].(int64)
			return text{s: s, omitted: max(n, 0)}
		}
	}
	return text{}
}

// resultAnswer is a run's result.
type resultAnswer struct {
	seq       int64
	value     text         // the repr of the cell's last expression
	err       *errorAnswer // the exception the code raised, or nil
	images    [][]byte     // PNG images
	truncated bool         // the driver cut something (output, images, the file scan)
	// files is the list of [path, size] pairs of the files the run changed, as sent:
	// reportFiles checks it. filesOmitted counts the files the driver left out of it.
	files        any
	filesOmitted int64
}

// errorAnswer is an exception the code raised.
type errorAnswer struct {
	name, value, traceback text
}

// decodeAnswer decodes a frame of the driver: a readyAnswer or a resultAnswer. A frame of any
// other op, or a result without an integer seq, is an error.
func decodeAnswer(v map[string]any) (any, error) {
	op, _ := v["op"].(string)
	switch op {
	case "ready":
		return readyAnswer{preloaded: v["preloaded"]}, nil
	case "calls":
		return decodeCalls(v)
	case "result":
	default:
		if len(op) > 32 {
			op = op[:32]
		}
		return nil, fmt.Errorf("protocol violation: a %q frame", op)
	}
	seq, ok := v["seq"].(int64)
	if !ok {
		return nil, fmt.Errorf("protocol violation: a %q frame with a seq of type %T", op, v["seq"])
	}
	a := resultAnswer{seq: seq, files: v["files"]}
	a.value = decodeText(v["value"])
	if e, ok := v["error"].(map[string]any); ok {
		a.err = &errorAnswer{name: decodeText(e["name"]), value: decodeText(e["value"]), traceback: decodeText(e["traceback"])}
	}
	if imgs, ok := v["images"].([]any); ok {
		for _, im := range imgs {
			if b, ok := im.([]byte); ok && len(b) > 0 {
				a.images = append(a.images, b)
			}
		}
	}
	a.truncated, _ = v["truncated"].(bool)
	a.filesOmitted, _ = v["files_omitted"].(int64)
	return a, nil
}

// forkRequest asks the template for a container. It goes with 6 + cgroups descriptors (see
// template.py).
type forkRequest struct {
	id      int64 // the answer names it
	uid     int64 // the container's host uid
	cgroups int   // cgroup.procs files among the descriptors
	driver  driverConfig
}

func (r forkRequest) encode() map[string]any {
	return map[string]any{"op": "fork", "id": r.id, "uid": r.uid, "cgroups": int64(r.cgroups), "driver": r.driver.encode()}
}

// Ops of the template's answers.
const (
	templateReady  = "ready"  // a template is up (again, after the keeper restarted it), with a pidfd of itself
	templateForked = "forked" // a fork request's container, with pidfds of its init and driver
	templateError  = "error"  // a fork request failed
)

// templateAnswer is a frame of the template: op is one of the template… ops (or another, which
// the server takes for a broken answer).
type templateAnswer struct {
	op  string
	id  int64  // the fork request's (forked, error)
	err string // what failed (error)
}

// decodeTemplateAnswer decodes a frame of the template.
func decodeTemplateAnswer(v map[string]any) templateAnswer {
	var a templateAnswer
	a.op, _ = v["op"].(string)
	a.id, _ = v["id"].(int64)
	if e, ok := v["error"]; ok {
		a.err = fmt.Sprint(e)
	}
	return a
}

// resumeRequest gives a paused run the results of its tool calls.
type resumeRequest struct {
	seq     uint64
	results []sandbox.ToolResult
}

func (r resumeRequest) encode() map[string]any {
	results := make([]any, len(r.results))
	for i, x := range r.results {
		m := map[string]any{"content": x.Content}
		if x.IsError {
			m["is_error"] = true
		}
		if x.Timeout {
			m["timeout"] = true
		}
		results[i] = m
	}
	return map[string]any{"op": "resume", "seq": int64(r.seq), "results": results}
}

// callsAnswer is the driver's "calls" frame: run seq is paused for these calls of the client's
// tools.
type callsAnswer struct {
	seq   int64
	calls []sandbox.ToolCall
}

// decodeCalls reads a "calls" frame. What the code sends is bounded as the driver bounds it
// (sandbox.MaxToolCalls, MaxToolInputBytes); beyond it, or malformed, the frame was forged.
func decodeCalls(v map[string]any) (callsAnswer, error) {
	seq, ok := v["seq"].(int64)
	if !ok {
		return callsAnswer{}, fmt.Errorf("protocol violation: a \"calls\" frame with a seq of type %T", v["seq"])
	}
	list, ok := v["calls"].([]any)
	if !ok || len(list) == 0 || len(list) > sandbox.MaxToolCalls {
		return callsAnswer{}, fmt.Errorf("protocol violation: a \"calls\" frame of %d calls (1 to %d)", len(list), sandbox.MaxToolCalls)
	}
	a := callsAnswer{seq: seq, calls: make([]sandbox.ToolCall, len(list))}
	for i, c := range list {
		m, _ := c.(map[string]any)
		name, ok1 := m["name"].(string)
		input, ok2 := m["input"].(string)
		if !ok1 || !ok2 || name == "" || len(name) > 128 || len(input) > sandbox.MaxToolInputBytes {
			return callsAnswer{}, fmt.Errorf("protocol violation: call %d of a \"calls\" frame is malformed or too large", i)
		}
		a.calls[i] = sandbox.ToolCall{Name: name, Input: input}
	}
	return a, nil
}
