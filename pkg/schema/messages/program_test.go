package messages

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/pkg/schema"
)

// runProgram runs the program of c in dir with the host's python3, in a namespace of its own,
// and returns what it printed and the names it left in that namespace.
func runProgram(t *testing.T, dir string, c Call, mark string) (string, string) {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3 on this host")
	}
	wrapper := "import sys\ng = {'__name__': '__main__'}\nexec(sys.stdin.read(), g)\n" +
		"print('\\nNAMES=' + ','.join(sorted(k for k in g if not k.startswith('__'))))\n"
	cmd := exec.Command(py, "-c", wrapper)
	cmd.Dir = dir
	cmd.Stdin = strings.NewReader(program(c, mark))
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	require.NoError(t, cmd.Run(), "%s: the program runs: %s", c.Input, errOut.String())
	s, names, ok := strings.Cut(out.String(), "\nNAMES=")
	require.True(t, ok, "%s: the wrapper's line: %q", c.Input, out.String())
	return s, strings.TrimSpace(names)
}

func TestProgramBash(t *testing.T) {
	const mark = "codeinterp-result-0123456789abcdef01234567:"
	tests := []struct {
		name, give       string
		wantOut, wantErr string
		wantRC           int
	}{
		{"quotes and newlines", `printf '%s\n' "it's \"quoted\"" 'two
lines'`, "it's \"quoted\"\ntwo\nlines\n", "", 0},
		{"unicode", "echo 'héllo ✓ 日本'", "héllo ✓ 日本\n", "", 0},
		{"fails", "echo oops >&2; exit 3", "", "oops\n", 3},
		{"prints a marker", "echo '" + mark + `{"k":"bash","rc":0,"out":"","err":""}'; echo codeinterp-result-ffff:{}`,
			mark + `{"k":"bash","rc":0,"out":"","err":""}` + "\ncodeinterp-result-ffff:{}\n", "", 0},
		{"python syntax in the command", `echo '"""'"'''"; echo "\\"`, `"""'''` + "\n\\\n", "", 0},
		{"invalid utf-8", `printf '\377ok'`, "\ufffdok", "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Call{ID: "toolu_1", Kind: Bash, Code: tt.give, Input: []byte(tt.give)}
			out, names := runProgram(t, t.TempDir(), c, mark)
			assert.Empty(t, names, "%s: the namespace keeps no name", tt.give)
			r, ok := programResult(Bash, mark, out)
			require.True(t, ok, "%s: the result is read: %q", tt.give, out)
			assert.Equal(t, tt.wantOut, r.Stdout, "%s: stdout", tt.give)
			assert.Equal(t, tt.wantErr, r.Stderr, "%s: stderr", tt.give)
			assert.Equal(t, tt.wantRC, r.ReturnCode, "%s: return code", tt.give)
		})
	}
}

func TestProgramBashCwdAndCut(t *testing.T) {
	const mark = "codeinterp-result-00:"
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "here.txt"), []byte("x"), 0o600), "a file in the working directory")
	out, _ := runProgram(t, dir, Call{Kind: Bash, Code: "ls; head -c 100000 /dev/zero | tr '\\0' a"}, mark)
	r, ok := programResult(Bash, mark, out)
	require.True(t, ok, "large output: the result is read")
	assert.True(t, strings.HasPrefix(r.Stdout, "here.txt\n"), "the command runs in the working directory: %.40q", r.Stdout)
	assert.Contains(t, r.Stdout, "bytes cut ...]", "a large output is cut")
	assert.Less(t, len(out), 12<<10, "the result line stays within the head of the run's output the loop keeps")
}

func TestProgramEditor(t *testing.T) {
	const mark = "codeinterp-result-01:"
	dir := t.TempDir()
	run := func(c Call) Result {
		t.Helper()
		c.Kind = Editor
		out, names := runProgram(t, dir, c, mark)
		assert.Empty(t, names, "%s %s: the namespace keeps no name", c.Command, c.Path)
		r, ok := programResult(Editor, mark, out)
		require.True(t, ok, "%s %s: the result is read: %q", c.Command, c.Path, out)
		return r
	}
	text := "line one\nsecond 'line' \"q\"\nthird ✓ \f\u2028\r\n"
	r := run(Call{Command: "create", Path: "sub/notes.txt", FileText: text})
	require.NotNil(t, r.Create, "create: %+v", r)
	assert.False(t, r.Create.IsFileUpdate, "create: a new file")
	got, err := os.ReadFile(filepath.Join(dir, "sub/notes.txt"))
	require.NoError(t, err, "create: the file is written")
	assert.Equal(t, text, string(got), "create: its content")

	r = run(Call{Command: "create", Path: filepath.Join(dir, "sub/notes.txt"), FileText: text})
	require.NotNil(t, r.Create, "create again (absolute path): %+v", r)
	assert.True(t, r.Create.IsFileUpdate, "create again: an update")

	r = run(Call{Command: "view", Path: "sub/notes.txt"})
	require.NotNil(t, r.View, "view: %+v", r)
	assert.Equal(t, View{FileType: "text", Content: text, NumLines: 3, StartLine: 1, TotalLines: 3}, *r.View, "view")
	forModel, isErr := r.ForModel()
	assert.False(t, isErr, "view: not an error")
	assert.Equal(t, "     1\tline one\n     2\tsecond 'line' \"q\"\n     3\tthird ✓ \f\u2028\r", forModel, "view: numbered lines for the model")

	r = run(Call{Command: "str_replace", Path: "sub/notes.txt", OldStr: "second 'line'", NewStr: "2nd\nand a half"})
	require.NotNil(t, r.Replace, "str_replace: %+v", r)
	assert.Equal(t, Replace{OldStart: 2, OldLines: 1, NewStart: 2, NewLines: 2, Lines: []string{`2nd`, `and a half "q"`}}, *r.Replace, "str_replace")
	got, _ = os.ReadFile(filepath.Join(dir, "sub/notes.txt"))
	assert.Equal(t, "line one\n2nd\nand a half \"q\"\nthird ✓ \f\u2028\r\n", string(got), "str_replace: the file")

	errs := []struct {
		give      Call
		code, msg string
	}{
		{Call{Command: "view", Path: "missing.txt"}, ErrFileNotFound, "The file missing.txt does not exist."},
		{Call{Command: "str_replace", Path: "missing.txt", OldStr: "a"}, ErrFileNotFound, "does not exist"},
		{Call{Command: "str_replace", Path: "sub/notes.txt", OldStr: "absent"}, ErrInvalidInput, "did not appear verbatim"},
		{Call{Command: "str_replace", Path: "sub/notes.txt", OldStr: "n"}, ErrInvalidInput, "appears 4 times"},
		{Call{Command: "str_replace", Path: "sub/notes.txt", OldStr: ""}, ErrInvalidInput, "must not be empty"},
		{Call{Command: "create", Path: "sub", FileText: "x"}, ErrInvalidInput, "is a directory"},
	}
	for _, e := range errs {
		r := run(e.give)
		assert.Equal(t, e.code, r.ErrorCode, "%s %s %q: error code", e.give.Command, e.give.Path, e.give.OldStr)
		assert.Contains(t, r.ErrorMessage, e.msg, "%s %s %q: error message", e.give.Command, e.give.Path, e.give.OldStr)
	}
}

func TestProgramResultRejects(t *testing.T) {
	const mark = "codeinterp-result-02:"
	tests := []struct{ name, give string }{
		{"no marker", `{"k":"bash","rc":0}`},
		{"another marker first", "codeinterp-result-03:{\"k\":\"bash\"}\n" + mark + `{"k":"bash","rc":0}`},
		{"user output first", "hello\n" + mark + `{"k":"bash","rc":0}`},
		{"cut short", mark + `{"k":"bash","rc":0,"out":"aGVsbG`},
		{"not base64", mark + `{"k":"bash","rc":0,"out":"%%%"}`},
		{"another kind", mark + `{"k":"view","c":""}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, ok := programResult(Bash, mark, tt.give)
			assert.False(t, ok, "%q: not a result", tt.give)
		})
	}
}

func TestMarker(t *testing.T) {
	k1, k2 := []byte("key one"), []byte("key two")
	assert.Equal(t, marker(k1, "toolu_1"), marker(k1, "toolu_1"), "the same key and call: the same marker")
	assert.NotEqual(t, marker(k1, "toolu_1"), marker(k1, "toolu_2"), "another call: another marker")
	assert.NotEqual(t, marker(k1, "toolu_1"), marker(k2, "toolu_1"), "another key: another marker")
}

const (
	bashRequest = `{"model":"claude-x","max_tokens":1024,"tools":[{"type":"code_execution_20250825","name":"code_execution"}],` +
		`"messages":[{"role":"user","content":"look around"}]}`
	bashAnswer = `{"id":"msg_1","type":"message","role":"assistant","model":"claude-x","stop_reason":"tool_use","stop_sequence":null,` +
		`"content":[{"type":"tool_use","id":"toolu_b","name":"bash_code_execution","input":{"command":"echo hi"}},` +
		`{"type":"tool_use","id":"toolu_e","name":"text_editor_code_execution","input":{"command":"view","path":"a.txt"}},` +
		`{"type":"tool_use","id":"toolu_x","name":"text_editor_code_execution","input":{"command":"delete","path":"a.txt"}},` +
		`{"type":"tool_use","id":"toolu_t","name":"bash_code_execution","input":{"command":"sleep 99"}}],` +
		`"usage":{"input_tokens":10,"output_tokens":5}}`
	bashAnswer2 = `{"id":"msg_2","type":"message","role":"assistant","model":"claude-x","stop_reason":"end_turn","stop_sequence":null,` +
		`"content":[{"type":"text","text":"Done."}],"usage":{"input_tokens":20,"output_tokens":3}}`
)

func TestExchangeBashAndEditor(t *testing.T) {
	sx, err := Surface{}.NewExchange([]byte(bashRequest), schema.Options{})
	require.NoError(t, err, "code_execution_20250825 is served")
	x := sx.(*exchange)
	turn, err := x.ParseTurn([]byte(bashAnswer))
	require.NoError(t, err, "parse turn")
	require.Len(t, turn.Calls, 4, "four calls")
	assert.Contains(t, turn.Calls[0].Code, "subprocess.Popen(", "bash runs as a Python program")
	assert.Equal(t, 1, strings.Count(turn.Calls[0].Code, marker(x.key, "toolu_b")), "with the call's marker, in its print only")
	assert.NoError(t, turn.Calls[1].ArgsErr, "a valid view")
	assert.Error(t, turn.Calls[2].ArgsErr, "an unknown editor command is invalid input")

	bashOut := marker(x.key, "toolu_b") + `{"k":"bash","rc":0,"out":"aGkK","err":""}` + "\n"
	viewOut := marker(x.key, "toolu_e") + `{"k":"error","code":"file_not_found","msg":"VGhlIGZpbGUgYS50eHQgZG9lcyBub3QgZXhpc3Qu"}` + "\n"
	next, err := x.FollowUp([]schema.CallOutput{
		{CallID: "toolu_b", Output: bashOut}, {CallID: "toolu_e", Output: viewOut},
		{CallID: "toolu_x", Output: "[invalid tool arguments]"}, {CallID: "toolu_t", Output: "[execution timed out after 2s and was interrupted]"},
	}, schema.FollowUpOptions{})
	require.NoError(t, err, "follow up")
	res := gjson.GetBytes(next, "messages.2.content").Array()
	require.Len(t, res, 4, "four tool results: %s", next)
	assert.Equal(t, "hi\n", res[0].Get("content").String(), "bash: the model reads the command's output")
	assert.Equal(t, "[error: file_not_found: The file a.txt does not exist.]", res[1].Get("content").String(), "view: the native error")
	assert.True(t, res[1].Get("is_error").Bool(), "view: an error")
	assert.Contains(t, res[2].Get("content").String(), "[error: invalid_tool_input: unknown command", "bad input: the native error")
	assert.Equal(t, "[execution timed out after 2s and was interrupted]", res[3].Get("content").String(), "timeout: the loop's text")

	_, err = x.ParseTurn([]byte(bashAnswer2))
	require.NoError(t, err, "parse the last turn")
	final, err := x.Final([]schema.Round{
		{Body: []byte(bashAnswer), Calls: []schema.CodeCall{
			{Status: "completed", ContainerID: "cntr_1", Run: &schema.CodeRun{Stdout: bashOut}},
			{Status: "completed", ContainerID: "cntr_1", Run: &schema.CodeRun{Stdout: viewOut}},
			{Status: "failed", ContainerID: "cntr_1"},
			{Status: "failed", ContainerID: "cntr_1", Run: &schema.CodeRun{TimedOut: true}},
		}},
		{Body: []byte(bashAnswer2)},
	}, "")
	require.NoError(t, err, "final")
	var m anthropic.Message
	require.NoError(t, json.Unmarshal(final, &m), "the SDK decodes the answer: %s", final)
	require.Len(t, m.Content, 9, "4 × (server_tool_use, result), text: %s", final)
	assert.Equal(t, "bash_code_execution", m.Content[0].Name, "bash server tool use")
	b := m.Content[1].AsBashCodeExecutionToolResult()
	assert.Equal(t, "hi\n", b.Content.Stdout, "bash stdout")
	assert.Equal(t, "bash_code_execution_result", gjson.GetBytes(final, "content.1.content.type").String(), "bash result type")
	assert.Equal(t, "text_editor_code_execution_tool_result", gjson.GetBytes(final, "content.3.type").String(), "editor result block")
	assert.Equal(t, "file_not_found", gjson.GetBytes(final, "content.3.content.error_code").String(), "view error code")
	assert.Equal(t, "The file a.txt does not exist.", gjson.GetBytes(final, "content.3.content.error_message").String(), "view error message")
	assert.Equal(t, "invalid_tool_input", gjson.GetBytes(final, "content.5.content.error_code").String(), "bad input")
	assert.Equal(t, "execution_time_exceeded", gjson.GetBytes(final, "content.7.content.error_code").String(), "timeout")
	assert.Equal(t, "Done.", m.Content[8].Text, "final text")
}

// runSession runs the programs of calls one after the other in one python3 interpreter and
// namespace, as a container runs a request's calls; a call with a positive interrupt gets a
// KeyboardInterrupt that long after it starts (its time limit). It returns each program's
// output.
func runSession(t *testing.T, dir, mark string, calls []Call, interrupt []float64) []string {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3 on this host")
	}
	var progs []map[string]any
	for i, c := range calls {
		progs = append(progs, map[string]any{"code": program(c, mark), "interrupt": interrupt[i]})
	}
	js, err := json.Marshal(progs)
	require.NoError(t, err)
	wrapper := `import json, signal, sys
def stop(*a):
    raise KeyboardInterrupt
signal.signal(signal.SIGALRM, stop)
g = {'__name__': '__main__'}
for p in json.loads(sys.stdin.read()):
    if p['interrupt'] > 0:
        signal.setitimer(signal.ITIMER_REAL, p['interrupt'])
    try:
        exec(p['code'], g)
    except KeyboardInterrupt:
        print('INTERRUPTED')
    signal.setitimer(signal.ITIMER_REAL, 0)
    print('\n=END=', flush=True)
print('NAMES=' + ','.join(sorted(k for k in g if not k.startswith('__'))))
`
	cmd := exec.Command(py, "-c", wrapper)
	cmd.Dir = dir
	cmd.Stdin = bytes.NewReader(js)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	require.NoError(t, cmd.Run(), "the programs run: %s", errOut.String())
	parts := strings.Split(out.String(), "\n=END=\n")
	require.Len(t, parts, len(calls)+1, "one output per program: %q", out.String())
	assert.Equal(t, "NAMES=", strings.TrimSpace(parts[len(calls)]), "the namespace keeps no name")
	return parts[:len(calls)]
}

// TestProgramBashSession: the working directory, exported and shell variables and functions a
// command leaves are there for the next command of the container, also after a failing or
// exiting one; a command stopped at its time limit leaves a new session, and says so.
func TestProgramBashSession(t *testing.T) {
	const mark = "codeinterp-result-0123456789abcdef01234567:"
	dir := t.TempDir()
	bash := func(cmd string) Call { return Call{ID: "toolu_s", Kind: Bash, Code: cmd} }
	calls := []Call{
		bash(`mkdir -p sub && cd sub && export GREETING='hi there' && f() { echo "f:$1"; } && X=(a "b c") && echo set`),
		bash(`pwd; echo "$GREETING"; f x; echo "${X[1]}"; bash -c 'echo "child:$GREETING"'; echo warn >&2`),
		bash(`cd .. && Y=1; false`),
		bash(`pwd; echo "y=$Y"; cd sub; exit 7`),
		bash(`pwd; echo "$GREETING"; sleep 30`),
		bash(`pwd; echo "greeting=$GREETING"; type f >/dev/null 2>&1 || echo "no f"`),
	}
	outs := runSession(t, dir, mark, calls, []float64{0, 0, 0, 0, 1, 0})
	results := make([]Result, len(outs))
	for i, out := range outs {
		if i == 4 {
			continue
		}
		r, ok := programResult(Bash, mark, out)
		require.True(t, ok, "command %d: the result is read: %q", i, out)
		results[i] = r
	}
	real, err := filepath.EvalSymlinks(dir)
	require.NoError(t, err)
	assert.Equal(t, "set\n", results[0].Stdout, "the first command")
	assert.Equal(t, real+"/sub\nhi there\nf:x\nb c\nchild:hi there\n", results[1].Stdout, "cd, export, a function and an array carried over")
	assert.Equal(t, "warn\n", results[1].Stderr, "stderr apart")
	assert.Equal(t, 1, results[2].ReturnCode, "a failing command's return code")
	assert.Equal(t, real+"\ny=1\n", results[3].Stdout, "after a failing command the session goes on")
	assert.Equal(t, 7, results[3].ReturnCode, "exit's status")
	assert.Contains(t, outs[4], "the shell session was reset", "the stopped command says the session is new")
	assert.Contains(t, outs[4], "INTERRUPTED", "and the interrupt goes on to the run")
	assert.True(t, strings.HasPrefix(results[5].Stdout, real+"\n"), "a new session starts in the working directory: %q", results[5].Stdout)
	assert.Contains(t, results[5].Stdout, "greeting=\nno f\n", "with nothing of the old one")
}

// TestProgramLimits: a bash command's output is cut to the result's budget (stderr keeps what
// stdout leaves of it), more than bashOutputMax is output_file_too_large; the text editor views
// an image or a PDF whole as base64, by type, and refuses one beyond the budget.
func TestProgramLimits(t *testing.T) {
	const mark = "codeinterp-result-0123456789abcdef01234567:"
	dir := t.TempDir()
	png := append([]byte("\x89PNG\r\n\x1a\n"), bytes.Repeat([]byte{7}, 100)...)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "pic.png"), png, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "doc.pdf"), []byte("%PDF-1.4\nrest"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "big.png"), append([]byte("\x89PNG\r\n\x1a\n"), make([]byte, 20000)...), 0o644))
	run := func(c Call) Result {
		t.Helper()
		out, _ := runProgram(t, dir, c, mark)
		r, ok := programResult(c.Kind, mark, out)
		require.True(t, ok, "%s: the result is read: %.200q", c.Input, out)
		return r
	}
	bash := func(cmd string) Call { return Call{ID: "toolu_l", Kind: Bash, Code: cmd, Input: []byte(cmd)} }
	view := func(path string) Call {
		return Call{ID: "toolu_v", Kind: Editor, Command: "view", Path: path, Input: []byte(path)}
	}

	huge := run(bash(`head -c 2000000 /dev/zero | tr '\0' a`))
	assert.Equal(t, ErrOutputTooLarge, huge.ErrorCode, "more than bashOutputMax")
	text, isErr := huge.ForModel()
	assert.True(t, isErr, "an error for the model")
	assert.Contains(t, text, "2000000 bytes", "which says how much: %s", text)
	assert.Contains(t, huge.Block("srvtoolu_l"), `"error_code":"output_file_too_large"}`, "the native block")

	long := run(bash(`head -c 100000 /dev/zero | tr '\0' a; echo; echo end; echo oops >&2`))
	assert.Equal(t, "oops\n", long.Stderr, "a short stderr whole")
	assert.LessOrEqual(t, len(long.Stdout)+len(long.Stderr), resultBudget+64, "within the budget")
	assert.Contains(t, long.Stdout, "bytes cut", "the cut is marked")
	assert.True(t, strings.HasSuffix(long.Stdout, "\nend\n"), "the tail is kept")

	both := run(bash(`head -c 50000 /dev/zero | tr '\0' o; head -c 50000 /dev/zero | tr '\0' e >&2`))
	assert.Greater(t, len(both.Stdout), 2*len(both.Stderr), "stdout gets most of the budget")
	assert.GreaterOrEqual(t, len(both.Stderr), resultBudget/4-64, "stderr a quarter")

	img := run(view("pic.png"))
	require.NotNil(t, img.View, "a view")
	assert.Equal(t, "image", img.View.FileType, "by type")
	assert.Equal(t, base64.StdEncoding.EncodeToString(png), img.View.Content, "the bytes as base64")
	forModel, _ := img.ForModel()
	assert.Equal(t, "[image file, 108 bytes: shown to the user; its content is not text]", forModel, "the model's text")
	pdf := run(view("doc.pdf"))
	require.NotNil(t, pdf.View, "a view")
	assert.Equal(t, "pdf", pdf.View.FileType, "a PDF")
	big := run(view("big.png"))
	assert.Equal(t, ErrInvalidInput, big.ErrorCode, "an image beyond the budget")
	assert.Contains(t, big.ErrorMessage, "20008 bytes", "says its size")
}

// TestProgramViewRange: a view shows the lines its view_range asks for, numbered from its
// start; a range that is not two line numbers is the call's invalid input.
func TestProgramViewRange(t *testing.T) {
	const mark = "codeinterp-result-0123456789abcdef01234567:"
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "f.txt"), []byte("one\ntwo\nthree\nfour\n"), 0o644))
	view := func(input string) (Call, Result, bool) {
		t.Helper()
		c := parseCall("toolu_r", Editor, gjson.Parse(input))
		if c.InputErr != nil {
			return c, Result{}, false
		}
		out, _ := runProgram(t, dir, c, mark)
		r, ok := programResult(Editor, mark, out)
		require.True(t, ok, "%s: the result is read: %q", input, out)
		return c, r, true
	}
	_, r, _ := view(`{"command":"view","path":"f.txt","view_range":[2,3]}`)
	require.NotNil(t, r.View, "a view")
	assert.Equal(t, View{FileType: "text", Content: "two\nthree\n", NumLines: 2, StartLine: 2, TotalLines: 4}, *r.View, "lines 2 to 3")
	text, _ := r.ForModel()
	assert.Equal(t, "     2\ttwo\n     3\tthree\n[1 more lines not shown]", text, "numbered from the range's start")
	_, r, _ = view(`{"command":"view","path":"f.txt","view_range":[3,-1]}`)
	assert.Equal(t, "three\nfour\n", r.View.Content, "to the end")
	_, r, _ = view(`{"command":"view","path":"f.txt","view_range":[9,-1]}`)
	assert.Equal(t, ErrInvalidInput, r.ErrorCode, "beyond the file")
	for _, bad := range []string{`[0,2]`, `[3,2]`, `[1]`, `["1","2"]`, `[1.5,2]`, `{}`} {
		c, _, ran := view(`{"command":"view","path":"f.txt","view_range":` + bad + `}`)
		assert.False(t, ran, "view_range %s: not run", bad)
		assert.Error(t, c.InputErr, "view_range %s: invalid input", bad)
	}
	_, r, _ = view(`{"command":"view","path":"f.txt","view_range":null}`)
	assert.Equal(t, 4, r.View.NumLines, "a null range is the whole file")
}
