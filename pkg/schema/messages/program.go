package messages

import (
	"crypto/sha256"
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
const bashSession = `__ci_f=$1 __ci_c=$2
shift 2
__ci_base=" $(compgen -v | tr '\n' ' ') "
. "$__ci_f" >/dev/null 2>&1
__ci_dump() {
  __ci_rc=$?
  trap - EXIT
  {
    printf 'cd -- %q\n' "$PWD"
    export -p
    for __ci_n in $(compgen -v); do
      case "$__ci_base" in *" $__ci_n "*) continue ;; esac
      case "$__ci_n" in __ci_*) continue ;; esac
      declare -p "$__ci_n" 2>/dev/null
    done
    for __ci_n in $(compgen -A function); do
      [ "$__ci_n" = __ci_dump ] || declare -f "$__ci_n"
    done
  } >"$__ci_f" 2>/dev/null
  exit "$__ci_rc"
}
trap __ci_dump EXIT
eval "$__ci_c"
`

// programBody holds the functions of the program, indented into its outer function.
const programBody = `    def cut(s, n):
        b = s.encode('utf-8', 'replace')
        if len(b) <= n:
            return s
        head, tail = n * 3 // 4, n - n * 3 // 4
        return (b[:head].decode('utf-8', 'ignore') + '\n[... %d bytes cut ...]\n' % (len(b) - n) +
                b[len(b) - tail:].decode('utf-8', 'ignore'))
    def bash(a):
        import shutil, sys, tempfile, types
        # The container's shell session: what a command leaves (working directory, variables,
        # functions) is kept by the interpreter, out of the code's namespace, for the next one.
        st = sys.modules.get('_codeinterp_bash')
        if st is None:
            st = sys.modules['_codeinterp_bash'] = types.ModuleType('_codeinterp_bash')
            st.state = b''
        if not os.path.exists('/bin/bash'):
            return fail('unavailable', 'bash is not installed in the container')
        env = dict(os.environ)
        env.setdefault('PATH', '/usr/local/bin:/usr/bin:/bin')
        d = tempfile.mkdtemp(prefix='.codeinterp-bash-')
        try:
            f = os.path.join(d, 'session')
            with open(f, 'wb') as w:
                w.write(st.state)
            # stdin is not the driver's; the command's processes are a group of their own, ended
            # with it when the run is interrupted (its time limit).
            try:
                p = subprocess.Popen(['/bin/bash', '--noprofile', '--norc', '-c', SESSION, 'bash', f, a['command']],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     cwd=os.getcwd(), start_new_session=True, env=env)
            except OSError as e:
                return fail('invalid_tool_input', 'The command could not be started: %s' % (e.strerror or e))
            try:
                (out, nout), (err, nerr) = drain(p, budget)
            except BaseException:
                try:
                    os.killpg(p.pid, 9)
                except OSError:
                    pass
                p.wait()
                for f in (p.stdout, p.stderr):
                    f.close()
                st.state = b''
                print('[bash: the command was stopped; the shell session was reset: working directory, variables and functions are as in a new shell]', flush=True)
                raise
            try:
                with open(f, 'rb') as r:
                    st.state = r.read()
            except OSError:
                pass
        finally:
            shutil.rmtree(d, ignore_errors=True)
        if nout + nerr > output_max:
            return fail('output_file_too_large', 'The command wrote %d bytes of output, more than the %d the tool returns. '
                        'Write the output to a file and look at parts of it.' % (nout + nerr, output_max))
        rc = p.returncode if p.returncode >= 0 else 128 - p.returncode
        # stderr gets a quarter of the budget, or what stdout leaves of it; stdout the rest.
        ob, eb = len(out.encode('utf-8', 'replace')), len(err.encode('utf-8', 'replace'))
        ecap = min(eb, max(budget // 4, budget - ob))
        return {'k': 'bash', 'rc': rc, 'out': cut(out, budget - ecap), 'err': cut(err, ecap)}
    def drain(p, keep):
        # Reads the command's stdout and stderr to their end, keeping the head and the tail of
        # each (keep bytes each at most) and counting the rest, so that a command that prints a
        # lot does not fill the container's memory.
        import selectors
        sel = selectors.DefaultSelector()
        got = {}
        for f in (p.stdout, p.stderr):
            got[f.fileno()] = [bytearray(), bytearray(), 0]
            sel.register(f.fileno(), selectors.EVENT_READ)
        left = 2
        while left:
            for key, _ in sel.select():
                b = os.read(key.fd, 65536)
                if not b:
                    sel.unregister(key.fd)
                    left -= 1
                    continue
                g = got[key.fd]
                g[2] += len(b)
                if len(g[0]) < keep:
                    n = keep - len(g[0])
                    g[0] += b[:n]
                    b = b[n:]
                g[1] += b
                if len(g[1]) > 2 * keep:
                    del g[1][:len(g[1]) - keep]
        sel.close()
        p.wait()
        out = []
        for f in (p.stdout, p.stderr):
            head, tail, n = got[f.fileno()]
            f.close()
            if n > len(head) + len(tail):
                text = (head.decode('utf-8', 'ignore') + '\n[... %d bytes cut ...]\n' % (n - len(head) - len(tail)) +
                        tail.decode('utf-8', 'ignore'))
            else:
                text = (head + tail).decode('utf-8', 'replace')
            out.append((text, n))
        return out
    def filetype(full):
        # An image or a PDF, by its first bytes, as the native view reports them; '' for text.
        with open(full, 'rb') as f:
            h = f.read(12)
        if h.startswith(b'\x89PNG\r\n\x1a\n') or h.startswith(b'\xff\xd8\xff') or h[:6] in (b'GIF87a', b'GIF89a') or \
                (h[:4] == b'RIFF' and h[8:12] == b'WEBP'):
            return 'image'
        if h.startswith(b'%PDF-'):
            return 'pdf'
        return ''
    def fail(code, msg):
        return {'k': 'error', 'code': code, 'msg': msg}
    def editor(a):
        path = a['path']
        if path == '':
            return fail('invalid_tool_input', 'path must not be empty')
        full = os.path.join(os.getcwd(), path)
        cmd = a['command']
        try:
            if cmd == 'create':
                update = os.path.exists(full)
                if os.path.isdir(full):
                    return fail('invalid_tool_input', 'The path %s is a directory.' % path)
                d = os.path.dirname(full)
                if d:
                    os.makedirs(d, exist_ok=True)
                with open(full, 'w', encoding='utf-8') as f:
                    f.write(a['file_text'])
                return {'k': 'create', 'u': update}
            if not os.path.exists(full):
                return fail('file_not_found', 'The file %s does not exist.' % path)
            if os.path.isdir(full):
                if cmd != 'view':
                    return fail('invalid_tool_input', 'The path %s is a directory.' % path)
                text = ''.join(e + '\n' for e in sorted(os.listdir(full)))
            elif cmd == 'view' and filetype(full):
                ft, size = filetype(full), os.path.getsize(full)
                if (size + 2) // 3 * 4 > budget:
                    return fail('invalid_tool_input', 'The %s file %s is %d bytes; the text editor shows images and PDFs '
                                'of at most %d bytes.' % (ft, path, size, budget // 4 * 3))
                with open(full, 'rb') as f:
                    data = base64.b64encode(f.read()).decode()
                return {'k': 'view', 'ft': ft, 'c': data, 'n': 0, 's': 0, 't': 0}
            elif os.path.getsize(full) > view_max:
                return fail('invalid_tool_input', 'The file %s is %d bytes, more than the %d the text editor views; '
                            'look at parts of it with bash (head, sed -n, grep).' % (path, os.path.getsize(full), view_max))
            else:
                with open(full, encoding='utf-8', errors='replace', newline='') as f:
                    text = f.read()
            if cmd == 'view':
                # Lines end at '\n' only, as the model's numbering counts them.
                lines = [l for l in re.split('(?<=\n)', text) if l]
                first, part = 1, lines
                if a.get('view_range'):
                    first, last = a['view_range']
                    if first > max(len(lines), 1):
                        return fail('invalid_tool_input', 'view_range starts at line %d; %s has %d lines.' % (first, path, len(lines)))
                    part = lines[first - 1:] if last == -1 else lines[first - 1:last]
                shown, size = [], 0
                for l in part:
                    size += len(l.encode('utf-8', 'replace'))
                    if size > budget:
                        break
                    shown.append(l)
                if part and not shown:
                    shown = [cut(part[0], budget)]
                return {'k': 'view', 'c': ''.join(shown), 'n': len(shown), 's': first, 't': len(lines)}
            old, new = a['old_str'], a['new_str']
            n = text.count(old) if old else 0
            if old == '':
                return fail('invalid_tool_input', 'old_str must not be empty.')
            if n == 0:
                return fail('invalid_tool_input', 'No replacement was performed: old_str did not appear verbatim in %s.' % path)
            if n > 1:
                return fail('invalid_tool_input', 'No replacement was performed: old_str appears %d times in %s; it must appear exactly once.' % (n, path))
            i = text.index(old)
            text = text[:i] + new + text[i + len(old):]
            with open(full, 'w', encoding='utf-8', newline='') as f:
                f.write(text)
            start = text.count('\n', 0, i) + 1
            new_lines = new.split('\n')
            after = text.split('\n')[start - 1:start - 1 + len(new_lines)]
            return {'k': 'replace', 'os': start, 'ol': old.count('\n') + 1, 'ns': start,
                    'nl': len(new_lines), 'lines': cut('\n'.join(after), budget)}
        except (OSError, UnicodeError) as e:
            return fail('invalid_tool_input', '%s: %s' % (path, e.strerror or e) if isinstance(e, OSError) else str(e))`

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
