// Package bashrun builds the Python programs that run shell commands (and the text editor's
// file operations) in a request's container: the Messages surface's bash and text editor calls
// and the Responses surface's shell calls run as such a program, so that the container's
// isolation, limits, working directory and /mnt/data apply to them as to Python code, and a
// shell command and a code_interpreter call of the same request share one container.
//
// A program does its work in a function of its own (the namespace keeps no name of it) and
// prints, as the first line of its output, a marker unique to the call followed by the result as
// one JSON line whose texts are base64: the commands' own output goes to pipes, so the marker
// line is the run's first output, and the marker, derived from a key the client never sees,
// cannot be forged by a file or a command that prints a look-alike.
package bashrun

import (
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"strings"
)

// ResultBudget bounds the bytes of text a result line carries (before base64), so that it
// stays within the head of the run's output the loop keeps (3/4 of its 16 KiB default limit).
// Longer outputs and views keep their head and tail, with a note of what was cut.
const ResultBudget = 8 << 10

// BashOutputMax is the most output (stdout and stderr) a Messages bash command may write for its
// result to show it, cut to its head and tail; a command that writes more gets the native
// output_file_too_large error (the native API documents no figure: this is ours). Only the head
// and tail are kept while the command runs.
const BashOutputMax = 1 << 20

// ViewFileMax is the largest text file the text editor views (it reads the whole file to count
// its lines); a larger one is an invalid_tool_input error that says to read it in parts. An
// image or a PDF is shown whole, as base64, when it fits the result's budget.
const ViewFileMax = 64 << 20

// Operations a program performs, with the input each takes.
const (
	// OpBash runs {"command"} as one bash command: result {"k":"bash","rc","out","err","to"}.
	OpBash = "bash"
	// OpEditor performs a text editor command {"command","path",...}.
	OpEditor = "editor"
	// OpShell runs {"commands":[…],"timeout":seconds|null,"max_chars":n|null} one after the
	// other, each as an OpBash command with the time limit: result {"k":"shell","r":[{"rc",
	// "out","err","to"}, …]}, one entry per command that ran (a command that times out ends
	// the list), each cut to its share of the budget and to max_chars characters of stdout and
	// stderr together.
	OpShell = "shell"
)

// Marker is the prefix of the result line of the call id, under the key.
func Marker(key []byte, id string) string {
	h := sha256.New()
	h.Write(key)
	h.Write([]byte(id))
	return "codeinterp-result-" + hex.EncodeToString(h.Sum(nil)[:12]) + ":"
}

// Program is the Python code that performs op with input in and prints its result after mark.
func Program(op string, in map[string]any, mark string) string {
	raw, _ := json.Marshal(in) // strings, ints and their slices always marshal
	// The function's name is fixed: a traceback (a timeout's) shows it, and the marker must
	// not be shown.
	const fn = "_codeinterp_call"
	return "def " + fn + "():\n" +
		"    import base64, json, os, re, subprocess\n" +
		"    a = json.loads(base64.b64decode(" + strconv.Quote(base64.StdEncoding.EncodeToString(raw)) + ").decode())\n" +
		"    budget = " + strconv.Itoa(ResultBudget) + "\n" +
		"    output_max = " + strconv.Itoa(BashOutputMax) + "\n" +
		"    view_max = " + strconv.Itoa(ViewFileMax) + "\n" +
		"    SESSION = " + strconv.Quote(bashSession) + "\n" +
		programBody + "\n" +
		"    r = " + op + "(a)\n" +
		"    for k in ('out', 'err', 'c', 'lines', 'msg'):\n" +
		"        if k in r:\n" +
		"            r[k] = base64.b64encode(r[k].encode('utf-8', 'replace')).decode()\n" +
		"    for e in r.get('r', ()):\n" +
		"        for k in ('out', 'err'):\n" +
		"            e[k] = base64.b64encode(e[k].encode('utf-8', 'replace')).decode()\n" +
		"    print(" + strconv.Quote(mark) + " + json.dumps(r), flush=True)\n" +
		"try:\n" +
		"    " + fn + "()\n" +
		"finally:\n" +
		"    del " + fn + "\n"
}

// Line returns the JSON result line the program printed after mark in out, the run's output,
// and reports whether it found one.
func Line(mark, out string) (string, bool) {
	if !strings.HasPrefix(out, mark) {
		return "", false
	}
	line, _, _ := strings.Cut(out[len(mark):], "\n")
	return line, true
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
