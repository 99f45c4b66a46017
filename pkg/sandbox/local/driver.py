# The codeinterp container driver: the interpreter of one container.
#
# It runs cells like a notebook: each run compiles the cell, executes all but a trailing
# expression, evaluates that and returns its repr; stdout and stderr are the process's own fds 1
# and 2 (read by the server, each run ended by a marker the server chose); an exception is returned
# as name, value and a traceback naming the cell's lines; open matplotlib figures become PNG images
# and are closed; files created or changed under the data directory are listed.
#
# Protocol (the server's side is pkg/sandbox/local/container.go):
#   fd 3  server -> driver  frames: 4-byte big-endian length, marshal (version 2) dict
#   fd 4  driver -> server  frames: same encoding
#   fd 5  server -> driver  8-byte big-endian run numbers to interrupt (SIGINT, KeyboardInterrupt)
# A run whose code awaits the client's tools (programmatic tool calling, through
# __codeinterp_tool_call__) pauses: the driver sends a "calls" frame of the run's pending calls
# and blocks reading fd 3 until the server's "resume" frame brings their results; then the run
# goes on, and may pause again, until its "result" frame.
# This driver arrives compiled: argv[1] is its code object and argv[2] the configuration, both
# marshalled, in hex. In a fork template (template.py) it is run with _FORK_TEMPLATE set: it then
# only defines its functions; the template calls _prepare once and _reseed before each fork, and
# each forked container _main(cfg).
#
# It imports nothing slow at start (no json, re, traceback, signal or ast module) to keep cold
# starts near a bare interpreter's; marshal, select, _signal, _ast and _thread are built in.

import sys, os, marshal, select, _thread, _ast, builtins, io
import _signal as signal  # the signal module would import enum: 7 ms of a cold start

R_IN, R_OUT, R_INTR = 3, 4, 5
MAX_REQUEST = 64 << 20
# Bounds of programmatic tool calls (pkg/sandbox/local/frames.go checks the same): the calls of
# one pause, and the bytes of one call's JSON input.
MAX_TOOL_CALLS = 16
MAX_TOOL_INPUT = 256 << 10
FLUSH_EVERY = 0.1  # seconds: output of a running cell reaches the server at least this often


def _close_inherited():
    # A descriptor the server held without close-on-exec passes through bubblewrap to this
    # process: close every one above the protocol's before anything else runs, so that no code
    # reaches what the server holds (a socket would reach the network).
    try:
        fds = [int(n) for n in os.listdir('/proc/self/fd')]
    except (OSError, ValueError):
        os.closerange(R_INTR + 1, os.sysconf('SC_OPEN_MAX'))
        return
    for fd in fds:
        if fd > R_INTR:
            try:
                os.close(fd)
            except OSError:
                pass  # the listing's own descriptor, closed already


class _State:
    pass


S = _State()
S.lock = _thread.allocate_lock()
S.running = False
S.seq = 0
S.interrupted = 0  # the latest run the server interrupted
S.count = 0
S.images = []
S.image_bytes = 0
S.shown = set()
S.sources = {}
S.files = {}
S.truncated = False
S.tool_pending = []  # calls of the client's tools not sent yet: (name, input JSON, future)


def _read_exact(fd, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = os.read(fd, n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def _recv():
    head = _read_exact(R_IN, 4)
    if head is None:
        return None
    n = int.from_bytes(head, 'big')
    if n > MAX_REQUEST:
        return None
    body = _read_exact(R_IN, n)
    if body is None:
        return None
    return marshal.loads(body)


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _frame(obj):
    body = marshal.dumps(obj, 2)
    return len(body).to_bytes(4, 'big') + body


def _send(obj):
    _write_all(R_OUT, _frame(obj))


def _send_result(res):
    try:
        frame = _frame(res)
    except Exception as e:
        # Something marshal refuses (the code can reach the driver's state), or no memory left
        # to encode the result: the run fails, the container lives on.
        frame = _frame(_error_result(res.get('seq', 0), type(e).__name__,
                                     'the result could not be returned: %s' % str(e)))
    _write_all(R_OUT, frame)


def _error_result(seq, name, value):
    # A run's result that is only an error, as Python would print it without a traceback.
    text = name + (': ' + value if value else '') + '\n'
    return {'op': 'result', 'seq': seq, 'value': '', 'files': [], 'images': [], 'truncated': False,
            'error': {'name': _cap(name), 'value': _cap(value), 'traceback': _cap(text)}}


# --- interrupts -----------------------------------------------------------------------------

def _interrupt_loop(main_ident):
    # Also flushes the running cell's output now and then, so that what a cell printed before
    # it hangs or is killed is not lost in a buffer.
    while True:
        try:
            ready, _, _ = select.select([R_INTR], [], [], FLUSH_EVERY)
            if not ready:
                if S.running:
                    _flush_buffers()
                continue
            b = _read_exact(R_INTR, 8)
        except (OSError, ValueError):
            return
        if b is None:
            return
        seq = int.from_bytes(b, 'big')
        with S.lock:
            # A run interrupted before it starts is stopped as it starts (_intr_on).
            S.interrupted = max(S.interrupted, seq)
            if S.running and S.seq == seq:
                _flush_buffers()
                signal.pthread_kill(main_ident, signal.SIGINT)


def _flush_buffers():
    # The byte buffers under the text streams are locked, so flushing them from this thread
    # keeps the order of the bytes; the text layers write through to them.
    for f in (S.stdout, S.stderr):
        try:
            f.buffer.flush()
        except Exception:
            pass


def _intr_on(seq):
    # The handler is in place before the run counts as running: only then is SIGINT sent.
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    signal.signal(signal.SIGINT, signal.default_int_handler)
    with S.lock:
        S.seq = seq
        S.running = True
        early = S.interrupted >= seq
    if early:
        raise KeyboardInterrupt


def _intr_off():
    # Ignoring SIGINT first discards a signal sent but not yet handled; then no new one is sent.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with S.lock:
        S.running = False


# --- output ---------------------------------------------------------------------------------

def _new_stream(fd):
    raw = io.FileIO(fd, 'w', closefd=False)
    return io.TextIOWrapper(io.BufferedWriter(raw, 1 << 16), encoding='utf-8',
                            errors='backslashreplace', write_through=True)


def _reset_streams():
    # Undo what the previous cell may have done to fds 1 and 2 or to sys.stdout/sys.stderr.
    try:
        os.dup2(S.saved_out, 1)
        os.dup2(S.saved_err, 2)
    except OSError:
        pass
    if S.stdout.closed:
        S.stdout = _new_stream(1)
    if S.stderr.closed:
        S.stderr = _new_stream(2)
    sys.stdout, sys.stderr = S.stdout, S.stderr


def _finish_streams(marker):
    for f in (sys.stdout, sys.stderr, S.stdout, S.stderr):
        try:
            f.flush()
        except BaseException:
            pass
    try:
        os.dup2(S.saved_out, 1)
        os.dup2(S.saved_err, 2)
    except OSError:
        pass
    # The marker ends this run's output on each stream; the server waits for it.
    for fd in (1, 2):
        try:
            _write_all(fd, marker)
        except OSError:
            pass


# --- images ---------------------------------------------------------------------------------

def _add_image(png):
    if not isinstance(png, (bytes, bytearray)) or not png:
        return
    if S.image_bytes + len(png) > S.limit or len(S.images) >= S.max_images:
        S.truncated = True
        return
    S.image_bytes += len(png)
    S.images.append(bytes(png))


def _figure_png(fig):
    buf = io.BytesIO()
    fig.savefig(buf, format='png', bbox_inches='tight')
    return buf.getvalue()


def _is_figure(obj):
    mpl_figure = sys.modules.get('matplotlib.figure')
    return mpl_figure is not None and isinstance(obj, mpl_figure.Figure)


def _show_figure(fig):
    if id(fig) in S.shown:
        return
    S.shown.add(id(fig))
    try:
        _add_image(_figure_png(fig))
    except Exception as e:
        print('[figure could not be rendered: %s: %s]' % (type(e).__name__, e), file=sys.stderr)


def _collect_figures(close=True):
    helpers = sys.modules.get('matplotlib._pylab_helpers')
    if helpers is None:
        return
    managers = helpers.Gcf.get_all_fig_managers()
    for m in managers:
        _show_figure(m.canvas.figure)
    if close and managers:
        plt = sys.modules.get('matplotlib.pyplot')
        if plt is not None:
            plt.close('all')


def _pyplot_show(*args, **kwargs):
    # As a notebook's inline backend: show the open figures now, then close them.
    _collect_figures(close=True)


def _display_one(obj):
    if obj is None:
        return
    if _is_figure(obj):
        _show_figure(obj)
        return
    repr_png = getattr(type(obj), '_repr_png_', None)
    if repr_png is not None:
        png = obj._repr_png_()
        if png:
            _add_image(png)
            return
    print(repr(obj))


def display(*objs, **kwargs):
    """Show objects as a notebook would: figures and images as PNG, anything else as its repr."""
    for obj in objs:
        _display_one(obj)


class _PyplotHook:
    """Patches matplotlib.pyplot.show when pyplot is first imported."""

    def find_spec(self, name, path=None, target=None):
        if name != 'matplotlib.pyplot':
            return None
        import importlib.util
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None or not hasattr(spec.loader, 'exec_module'):
            return spec
        loader = spec.loader
        orig = loader.exec_module

        def exec_module(module):
            orig(module)
            _patch_pyplot(module)

        loader.exec_module = exec_module
        return spec


def _patch_pyplot(plt):
    plt.show = _pyplot_show
    for i, f in enumerate(sys.meta_path):
        if isinstance(f, _PyplotHook):
            del sys.meta_path[i]
            break


# --- running a cell -------------------------------------------------------------------------

def _suppressed(code, node):
    # A trailing semicolon hides the value, as in a notebook.
    lines = code.splitlines()
    line = lines[node.end_lineno - 1] if node.end_lineno <= len(lines) else ''
    rest = line.encode('utf-8')[node.end_col_offset:].decode('utf-8', 'replace').lstrip()
    return rest.startswith(';')


def _exec_cell(code, fname, res):
    flags = _ast.PyCF_ONLY_AST
    tree = compile(code, fname, 'exec', flags, dont_inherit=True)
    last = None
    if tree.body and isinstance(tree.body[-1], _ast.Expr) and not _suppressed(code, tree.body[-1]):
        last = tree.body.pop()
    exec(compile(tree, fname, 'exec', dont_inherit=True), S.ns)
    if last is None:
        return
    value = eval(compile(_ast.Expression(last.value), fname, 'eval', dont_inherit=True), S.ns)
    if value is None:
        return
    S.ns['_'] = value
    if _is_figure(value):
        _show_figure(value)
        return
    repr_png = getattr(type(value), '_repr_png_', None)
    if repr_png is not None:
        try:
            png = value._repr_png_()
        except Exception:
            png = None
        if png:
            _add_image(png)
            return
    res['value'] = _cap(repr(value))


def _cap(text):
    # [text, omitted]: the text cut at the output limit, and how many bytes were cut off. The
    # server makes the cut visible (run.go's result: the one cut of a run's texts), so that
    # what the answer holds stays bounded but a note is written in one place.
    # repr() and str() may return a str subclass (numpy.str_ is one), which marshal refuses.
    if type(text) is not str:
        text = str.__str__(text)
    data = text.encode('utf-8', 'surrogatepass')
    if len(data) <= S.limit:
        return [text, 0]
    S.truncated = True
    return [data[:S.limit].decode('utf-8', 'ignore'), len(data) - S.limit]


def _format_error(e):
    import linecache, traceback
    for name, src in S.sources.items():
        if name not in linecache.cache:
            linecache.cache[name] = (len(src), None, src.splitlines(True), name)
    tb = e.__traceback__
    # Drop the driver's own frames in front of the cell's.
    while tb is not None and tb.tb_frame.f_code.co_filename == _DRIVER_FILE:
        tb = tb.tb_next
    text = ''.join(traceback.TracebackException(type(e), e, tb, limit=None).format())
    try:
        value = str(e)
    except Exception:
        value = '<exception str() failed>'
    return {'name': _cap(type(e).__name__), 'value': _cap(value), 'traceback': _cap(text)}


def _forked_child_exit(e):
    # A process the cell forked has run off the end of the cell (or raised out of it): it must
    # not act as the driver. It ends as a forked child of a script would.
    code = 0
    if isinstance(e, SystemExit):
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    elif e is not None:
        try:
            sys.stderr.write(_format_error(e)['traceback'][0])  # [text, omitted]: stderr is cut as it is captured
        except BaseException:
            pass
        code = 1
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except BaseException:
            pass
    _flush_buffers()
    os._exit(code)


def _scan_files():
    old, new, changed = S.files, {}, []
    count = 0
    stack = [S.data_dir]
    while stack:
        d = stack.pop()
        try:
            it = os.scandir(d)
        except OSError:
            continue
        with it:
            for entry in it:
                count += 1
                if count > S.max_files:
                    S.truncated = True
                    stack = []
                    break
                try:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
                        continue
                    if not entry.is_file(follow_symlinks=False):
                        continue
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                key = (st.st_size, st.st_mtime_ns, st.st_ino)
                new[entry.path] = key
                if old.get(entry.path) != key:
                    changed.append((entry.path, st.st_size))
    S.files = new
    changed.sort()
    # The list is bounded in bytes too (the server refuses a longer answer): the files beyond
    # it are counted, not listed.
    listed, size = [], 0
    for p, n in changed:
        size += len(p.encode('utf-8', 'surrogateescape'))
        if size > S.max_file_bytes:
            break
        listed.append([p, n])
    S.files_omitted = len(changed) - len(listed)
    return listed


def _reap_killed():
    # The server kills what a run left running (unless configured not to), and says so in the
    # next request. The children of this process among them stay zombies, counted against the
    # process limits, until reaped: reap those that died of SIGKILL. Another child's status is
    # left for the code to collect.
    try:
        tasks = os.listdir('/proc/self/task')
    except OSError:
        return
    for task in tasks:
        try:
            with open('/proc/self/task/%s/children' % task) as f:
                kids = [int(k) for k in f.read().split()]
        except (OSError, ValueError):
            continue
        for pid in kids:
            try:
                info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
                if info is not None and info.si_code == os.CLD_KILLED and info.si_status == 9:
                    os.waitpid(pid, 0)
            except OSError:
                pass


def _run(req):
    seq = req['seq']
    if req.get('reap'):
        _reap_killed()
    code = req['code']
    marker = req['marker']
    S.count += 1
    fname = '<cell %d>' % S.count
    S.sources[fname] = code
    S.images, S.image_bytes, S.shown, S.truncated = [], 0, set(), False
    S.tool_pending = []
    res = {'op': 'result', 'seq': seq, 'value': '', 'error': None}
    _reset_streams()
    try:
        _intr_on(seq)
        try:
            _exec_cell(code, fname, res)
        except BaseException as e:
            if os.getpid() != S.pid:
                _forked_child_exit(e)
            res['error'] = _format_error(e)
        if os.getpid() != S.pid:
            _forked_child_exit(None)
        _collect_figures(close=True)
        _intr_off()
    except KeyboardInterrupt:
        # An interrupt that landed between the cell and the end of the run.
        _intr_off()
        if res['error'] is None:
            res['error'] = {'name': 'KeyboardInterrupt', 'value': '', 'traceback': 'KeyboardInterrupt\n'}
    _finish_streams(marker)
    res['files'] = _scan_files()
    res['files_omitted'] = S.files_omitted
    res['images'] = S.images
    res['truncated'] = S.truncated
    return res



# --- programmatic tool calls ----------------------------------------------------------------

class ToolCallError(Exception):
    """The client's tool answered a call with an error (its tool_result's is_error)."""


async def _tool_call(name, args=None):
    # A call of the client's tool name from the cell's code: the calls the running event loop
    # makes before it next waits are sent together (asyncio.gather makes them in parallel), and
    # each call's result is the client's tool_result content, as a str.
    import asyncio
    if os.getpid() != S.pid:
        raise RuntimeError('the client\'s tools can only be called from the cell\'s own process')
    import json
    text = json.dumps({} if args is None else args)
    if len(text) > MAX_TOOL_INPUT:
        raise ValueError('the input of a call of %s is %d bytes, more than %d' % (name, len(text), MAX_TOOL_INPUT))
    loop = asyncio.get_running_loop()
    fut = loop.create_future()
    S.tool_pending.append((name, text, fut))
    if len(S.tool_pending) == 1:
        # Twice around the loop: every task ready now makes its calls first.
        loop.call_soon(loop.call_soon, _tool_flush)
    return await fut


def _tool_flush():
    pending, S.tool_pending = S.tool_pending, []
    if not pending:
        return
    if len(pending) > MAX_TOOL_CALLS:
        # None is sent: each call raises.
        for _, _, fut in pending:
            if not fut.done():
                fut.set_exception(RuntimeError('%d calls of the client\'s tools at once, more than %d'
                                               % (len(pending), MAX_TOOL_CALLS)))
        return
    _flush_buffers()
    _send({'op': 'calls', 'seq': S.seq, 'calls': [{'name': n, 'input': t} for n, t, _ in pending]})
    req = _recv()
    if req is None or req.get('op') != 'resume' or req.get('seq') != S.seq:
        os._exit(3)  # the server is gone, or broke the protocol
    results = req.get('results') or []
    for i, (name, _, fut) in enumerate(pending):
        r = results[i] if i < len(results) else {'timeout': True}
        if fut.done():
            continue
        if r.get('timeout'):
            fut.set_exception(TimeoutError('Calling tool [%r] timed out.' % name))
        elif r.get('is_error'):
            fut.set_exception(ToolCallError(r.get('content', '')))
        else:
            fut.set_result(r.get('content', ''))


# --- start ----------------------------------------------------------------------------------

def _preload():
    loaded = []
    for name in ('numpy', 'pandas', 'matplotlib', 'matplotlib.pyplot'):
        try:
            __import__(name)
            loaded.append(name)
        except Exception:
            pass
    plt = sys.modules.get('matplotlib.pyplot')
    if plt is not None:
        # Render once so the first real figure finds fonts and the PNG writer loaded.
        try:
            fig = plt.figure(figsize=(1, 1))
            plt.plot([0, 1])
            _figure_png(fig)
            plt.close('all')
        except Exception:
            pass
    return loaded


def _set_limits(lim):
    import resource
    pairs = [
        (resource.RLIMIT_CORE, 0),
        (resource.RLIMIT_AS, lim.get('as', 0)),
        (resource.RLIMIT_NPROC, lim.get('nproc', 0)),
        (resource.RLIMIT_FSIZE, lim.get('fsize', 0)),
        (resource.RLIMIT_NOFILE, lim.get('nofile', 0)),
    ]
    cpu = lim.get('cpu', 0)
    if cpu:
        # The CPU limit counts from now: start-up and preloading are not the code's.
        used = resource.getrusage(resource.RUSAGE_SELF)
        pairs.append((resource.RLIMIT_CPU, int(used.ru_utime + used.ru_stime) + 1 + cpu))
    for res, val in pairs:
        if val:
            resource.setrlimit(res, (val, val))
        elif res == resource.RLIMIT_CORE:
            resource.setrlimit(res, (0, 0))


def _prepare(preload):
    # In the template, once, before any fork: the pyplot hook and the preloaded libraries, and
    # resource for _set_limits (an extension module: loading it in each child costs ~2 ms).
    import resource  # noqa: F401
    sys.meta_path.insert(0, _PyplotHook())
    S.loaded = _preload() if preload else []
    # matplotlib empties its cache of open fonts in every forked child (os.register_at_fork):
    # freeing them there would copy on write pages all over the heap (a third of a child's
    # start). Each child opens the fonts it uses again anyway, so the cache is emptied here.
    fm = sys.modules.get('matplotlib.font_manager')
    if fm is not None:
        fm._get_font.cache_clear()


def _reseed():
    # In the template, before each fork: the state a forked child would share with the template
    # and its siblings, made new for the next child only (the template calls it again after
    # every fork, so no two children start with the same). random reseeds itself in each child
    # (os.register_at_fork); numpy's global RandomState, tempfile's name sequence and
    # multiprocessing's authkey do not. Python's str hash secret cannot be changed in a running
    # interpreter: it stays the template's.
    np_random = sys.modules.get('numpy.random')
    if np_random is not None:
        # The global RandomState's MT19937 state itself from the kernel (about a third of the cost
        # of seed(), which would mix the same words into it first), the first word's top bit
        # set as seed() does so that it is never all zero; pos 624 makes the next draw
        # generate from it, and no cached gaussian is kept.
        np = sys.modules['numpy']
        key = np.frombuffer(os.urandom(2496), dtype=np.uint32).copy()
        key[0] |= 0x80000000
        np_random.set_state(('MT19937', key, 624, 0, 0.0))
    tf = sys.modules.get('tempfile')
    if tf is not None:
        tf._name_sequence = None
    mp = sys.modules.get('multiprocessing.process')
    if mp is not None:
        mp.current_process().authkey = os.urandom(32)


def _prepare_child():
    # In a forked child, before its configuration: everything of the start that does not need
    # it.
    sys.argv[:] = ['']
    sys.stdin = io.StringIO()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    S.pid = os.getpid()
    os.register_at_fork(before=_flush_buffers)
    main = type(sys)('__main__')
    main.__dict__['__builtins__'] = builtins
    sys.modules['__main__'] = main
    builtins.display = display
    builtins.__codeinterp_tool_call__ = _tool_call
    builtins.ToolCallError = ToolCallError
    S.ns = main.__dict__
    # Fault in (copy on write) what the first run touches, now rather than then.
    compile(compile('pass', '<warm>', 'exec', _ast.PyCF_ONLY_AST, dont_inherit=True), '<warm>', 'exec')


def _main(cfg=None):
    forked = cfg is not None
    if not forked:
        cfg = marshal.loads(bytes.fromhex(sys.argv[-1]))
        del sys.argv[1:]
        sys.argv[0] = ''
    else:
        # A forked container is isolated already: the server may send the first run now, which
        # waits in the pipe while what is left of the start below is done.
        _ready(S.loaded)
        _prepare_child()
    for fd in (R_IN, R_OUT, R_INTR):
        os.set_inheritable(fd, False)
    S.data_dir = cfg['data_dir']
    S.limit = cfg['output_limit']
    S.max_files = cfg['max_files']
    S.max_file_bytes = cfg['max_file_bytes']
    S.files_omitted = 0
    S.max_images = cfg['max_images']
    S.saved_out = os.dup(1)
    S.saved_err = os.dup(2)
    S.stdout = _new_stream(1)
    S.stderr = _new_stream(2)
    sys.stdout, sys.stderr = S.stdout, S.stderr
    if not forked:
        sys.stdin = io.StringIO()
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    if cfg.get('data_dir'):
        try:
            os.chdir(cfg['data_dir'])
        except OSError:
            pass
    if forked:
        loaded = S.loaded
    else:
        sys.meta_path.insert(0, _PyplotHook())
        loaded = _preload() if cfg.get('preload') else []
    _set_limits(cfg.get('limits', {}))
    # The proxy's variables, for a container with a network policy: before any run.
    os.environ.update(cfg.get('env') or {})
    _thread.start_new_thread(_interrupt_loop, (_thread.get_ident(),))
    if not forked:
        S.pid = os.getpid()
        # A forked child must not inherit (and later repeat) output still in the buffers.
        os.register_at_fork(before=_flush_buffers)
        main = type(sys)('__main__')
        main.__dict__['__builtins__'] = builtins
        sys.modules['__main__'] = main
        builtins.display = display
        builtins.__codeinterp_tool_call__ = _tool_call
        builtins.ToolCallError = ToolCallError
        S.ns = main.__dict__
    S.files = {}
    if not forked:  # a forked container's data directory is a new, empty file system
        _scan_files()
        _ready(loaded)
    while True:
        try:
            req = _recv()
        except KeyboardInterrupt:
            continue
        if req is None or req.get('op') != 'run':
            return
        try:
            res = _run(req)
        except KeyboardInterrupt:
            res = _error_result(req.get('seq', 0), 'KeyboardInterrupt', '')
        _send_result(res)


def _ready(loaded):
    _send({'op': 'ready', 'python': sys.version.split()[0], 'preloaded': loaded})


_DRIVER_FILE = _main.__code__.co_filename
if not globals().get('_FORK_TEMPLATE'):
    _close_inherited()
    _main()
