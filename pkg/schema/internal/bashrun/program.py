# The functions of the program a bash, shell or text editor call runs in the container (see
# bashrun.go). They run inside the program's own function, indented into it, where the program
# defines a (the call's input), budget, output_max, view_max and SESSION (bash_session.sh).

def cut(s, n):
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
            (out, nout), (err, nerr), to = drain(p, a.get('budget') or budget, a.get('timeout'))
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
    if nout + nerr > output_max and not a.get('cut_only'):
        return fail('output_file_too_large', 'The command wrote %d bytes of output, more than the %d the tool returns. '
                    'Write the output to a file and look at parts of it.' % (nout + nerr, output_max))
    rc = p.returncode if p.returncode >= 0 else 128 - p.returncode
    # stderr gets a quarter of the budget, or what stdout leaves of it; stdout the rest.
    b = a.get('budget') or budget
    ob, eb = len(out.encode('utf-8', 'replace')), len(err.encode('utf-8', 'replace'))
    ecap = min(eb, max(b // 4, b - ob))
    return {'k': 'bash', 'rc': rc, 'out': cut(out, b - ecap), 'err': cut(err, ecap), 'to': to}
def shell(a):
    # The commands of one shell call, one after the other in the container's shell session,
    # each within the call's time limit; a command that times out ends the call. Each gets an
    # equal share of the budget, and keeps at most max_chars characters of stdout and stderr
    # together (stdout first).
    cmds = a['commands']
    # Each entry's own JSON (keys, base64) costs about 48 bytes of the result line.
    share = max(64, (budget - 48 * len(cmds)) // max(1, len(cmds)))
    res = []
    for c in cmds:
        r = bash({'command': c, 'timeout': a.get('timeout'), 'budget': share, 'cut_only': True})
        if r['k'] != 'bash':
            r = {'rc': 127, 'out': '', 'err': r['msg'], 'to': False}
        out, err = r['out'], r['err']
        n = a.get('max_chars')
        if n is not None and len(out) + len(err) > n:
            out = out[:n]
            err = err[:n - len(out)]
        res.append({'rc': r['rc'], 'out': out, 'err': err, 'to': r['to']})
        if r['to']:
            break
    return {'k': 'shell', 'r': res}
def drain(p, keep, timeout=None):
    # Reads the command's stdout and stderr to their end, keeping the head and the tail of
    # each (keep bytes each at most) and counting the rest, so that a command that prints a
    # lot does not fill the container's memory. With a timeout (seconds), the command's
    # process group is killed when it has not ended by then, and what it wrote is read for at
    # most a second more (a process that left the group may hold the pipes). It returns
    # (stdout, bytes), (stderr, bytes) and whether the command timed out.
    import selectors, time
    deadline = None if timeout is None else time.monotonic() + timeout
    to = False
    sel = selectors.DefaultSelector()
    got = {}
    for f in (p.stdout, p.stderr):
        got[f.fileno()] = [bytearray(), bytearray(), 0]
        sel.register(f.fileno(), selectors.EVENT_READ)
    left = 2
    while left:
        wait = None if deadline is None else deadline - time.monotonic()
        if wait is not None and wait <= 0:
            if to:
                break
            to = True
            try:
                os.killpg(p.pid, 9)
            except OSError:
                pass
            deadline = time.monotonic() + 1
            continue
        for key, _ in sel.select(wait):
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
    if to:
        try:
            os.killpg(p.pid, 9)
        except OSError:
            pass
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
    return out[0], out[1], to
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
        return fail('invalid_tool_input', '%s: %s' % (path, e.strerror or e) if isinstance(e, OSError) else str(e))
