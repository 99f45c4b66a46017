package messages

import (
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"strings"
)

// The bash and text editor calls of code_execution_20250825 and later run as Python in the
// request's container, so that the container's isolation, limits, working directory and
// /mnt/data apply to them as to Python code. The program does the call in a function of its own
// (the namespace keeps no name of it) and prints, as the first line of its output, a
// marker unique to the call followed by the result as one JSON line whose texts are base64: the
// command's own output goes to pipes, so the marker line is the run's first output, and the
// marker, derived from a key the client never sees, cannot be forged by a file or a command
// that prints a look-alike.

// resultBudget bounds the bytes of text a result line carries (before base64), so that it
// stays within the head of the run's output the loop keeps (3/4 of its 16 KiB default limit).
// Longer outputs and views keep their head and tail, with a note of what was cut.
const resultBudget = 8 << 10

// bashOutputMax is the most output (stdout and stderr) a bash command may write for its result
// to show it, cut to its head and tail; a command that writes more gets the native
// output_file_too_large error (the native API documents no figure: this is ours). Only the
// head and tail are kept while the command runs.
const bashOutputMax = 1 << 20

// viewFileMax is the largest text file the text editor views (it reads the whole file to count
// its lines); a larger one is an invalid_tool_input error that says to read it in parts. An
// image or a PDF is shown whole, as base64, when it fits the result's budget.
const viewFileMax = 64 << 20

// marker is the prefix of the result line of the call id, under the exchange's key.
func marker(key []byte, id string) string {
	h := sha256.New()
	h.Write(key)
	h.Write([]byte(id))
	return "codeinterp-result-" + hex.EncodeToString(h.Sum(nil)[:12]) + ":"
}

// program is the Python code that performs the bash or text editor call c and prints its
// result after mark.
func program(c Call, mark string) string {
	in := map[string]any{"command": c.Code}
	op := "bash"
	if c.Kind == Editor {
		op = "editor"
		in = map[string]any{"command": c.Command, "path": c.Path, "file_text": c.FileText, "old_str": c.OldStr, "new_str": c.NewStr}
		if c.ViewRange != nil {
			in["view_range"] = c.ViewRange[:]
		}
	}
	raw, _ := json.Marshal(in) // strings and ints always marshal
	// The function's name is fixed: a traceback (a timeout's) shows it, and the marker must
	// not be shown.
	const fn = "_codeinterp_call"
	return "def " + fn + "():\n" +
		"    import base64, json, os, re, subprocess\n" +
		"    a = json.loads(base64.b64decode(" + strconv.Quote(base64.StdEncoding.EncodeToString(raw)) + ").decode())\n" +
		"    budget = " + itoa(resultBudget) + "\n" +
		"    output_max = " + itoa(bashOutputMax) + "\n" +
		"    view_max = " + itoa(viewFileMax) + "\n" +
		"    SESSION = " + strconv.Quote(bashSession) + "\n" +
		programBody + "\n" +
		"    r = " + op + "(a)\n" +
		"    for k in ('out', 'err', 'c', 'lines', 'msg'):\n" +
		"        if k in r:\n" +
		"            r[k] = base64.b64encode(r[k].encode('utf-8', 'replace')).decode()\n" +
		"    print(" + strconv.Quote(mark) + " + json.dumps(r), flush=True)\n" +
		"try:\n" +
		"    " + fn + "()\n" +
		"finally:\n" +
		"    del " + fn + "\n"
}

// bashSession is the script a bash command runs in (bash -c, with the session file and the
// command as $1 and $2): it restores the session the file holds — the working directory, the
// exported and the shell's own variables, the functions — runs the command, and on its way out
// (also by exit) writes the session back and exits with the command's status. Variables of a new
// shell that the command only changed without exporting them are not kept.
//
//go:embed bash_session.sh
var bashSession string

// programPy holds the functions of the program, after a comment that ends at its first blank
// line.
//
//go:embed program.py
var programPy string

// programBody is programPy's functions indented into the program's outer function.
var programBody = indent(programPy)

// indent returns the code of py, after its leading comment (up to the first blank line),
// with each line indented by four spaces and without its last newline.
func indent(py string) string {
	_, code, _ := strings.Cut(py, "\n\n")
	code = strings.TrimSuffix(code, "\n")
	return "    " + strings.ReplaceAll(code, "\n", "\n    ")
}

// programResult reads the result the program of a call of kind k printed after mark in out,
// the run's output, and reports whether it found one.
func programResult(k Kind, mark, out string) (Result, bool) {
	if !strings.HasPrefix(out, mark) {
		return Result{}, false
	}
	line, _, _ := strings.Cut(out[len(mark):], "\n")
	// The texts are base64, which encoding/json decodes into []byte.
	var p struct {
		K     string `json:"k"`
		FT    string `json:"ft"`
		Code  string `json:"code"`
		Msg   []byte `json:"msg"`
		Out   []byte `json:"out"`
		Err   []byte `json:"err"`
		C     []byte `json:"c"`
		Lines []byte `json:"lines"`
		RC    int    `json:"rc"`
		N     int    `json:"n"`
		S     int    `json:"s"`
		T     int    `json:"t"`
		U     bool   `json:"u"`
		OS    int    `json:"os"`
		OL    int    `json:"ol"`
		NS    int    `json:"ns"`
		NL    int    `json:"nl"`
	}
	if err := json.Unmarshal([]byte(line), &p); err != nil {
		return Result{}, false
	}
	r := Result{Kind: k}
	switch {
	case p.K == "error":
		r.ErrorCode, r.ErrorMessage = p.Code, string(p.Msg)
	case p.K == "bash" && k == Bash:
		r.Stdout, r.Stderr, r.ReturnCode = string(p.Out), string(p.Err), p.RC
	case p.K == "view" && k == Editor:
		ft := p.FT
		if ft == "" {
			ft = "text"
		}
		r.View = &View{FileType: ft, Content: string(p.C), NumLines: p.N, StartLine: p.S, TotalLines: p.T}
	case p.K == "create" && k == Editor:
		r.Create = &Create{IsFileUpdate: p.U}
	case p.K == "replace" && k == Editor:
		r.Replace = &Replace{OldStart: p.OS, OldLines: p.OL, NewStart: p.NS, NewLines: p.NL, Lines: strings.Split(string(p.Lines), "\n")}
	default:
		return Result{}, false
	}
	return r, true
}
