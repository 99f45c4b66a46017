# The codeinterp fork template: one interpreter that has run the driver's definitions and
# imported the preloaded libraries once, and forks each container from itself (copy on write).
#
# bubblewrap runs it as the server's root, in a PID namespace of its own, with no network and a
# read-only system (pkg/sandbox/local/template.go starts it); it never runs the caller's code.
# argv[1] is this program's source, argv[2] its configuration, a marshalled dict (both in hex;
# layout.go's templateConfig): the compiled driver, the containers' seccomp filter, 'preload',
# the containers' 'layout' (hostname, uid, data_dir, tmp_bytes, data_bytes: what bubblewrap
# makes of the same description in an exec start), this machine's 'syscalls' numbers, and
# 'maker_wait', the seconds a fork waits for an init (less than the server waits for an
# answer). fd 3 is a SOCK_SEQPACKET socket to the server, which sends marshalled dicts:
#   {'op': 'fork', 'uid': host uid, 'cgroups': n, 'driver': cfg}
#       with 6 + n descriptors: stdout, stderr, ctl-in, ctl-out, intr, the lifeline (a pipe whose
#       other end only the server holds), then the cgroup.procs files of the container's n
#       cgroups, opened by the server
# and gets {'op': 'ready'} with a pidfd of the template once it is up (again after a restart),
# and per fork {'op': 'forked', 'id'} with pidfds of the container's init and driver, or
# {'op': 'error', 'id', 'error': text}.
#
# A container is two processes: its init (I), pid 1 of a PID namespace of its own, and its
# driver (D), pid 2 there. What a start costs most is forking the template (its page tables,
# then the copy on write of every page the child writes), so it is forked once per container,
# for D, and everything else is made ahead:
#   - Z, the maker, is a small process the template forks before it imports anything big. On
#     the template's request it forks an init (I) into a new PID namespace; I enters new mount,
#     network, IPC and UTS namespaces, mounts its /proc, /tmp, /dev/shm and /mnt/data, names
#     its host, brings up its loopback, and Z hands the template a pidfd of it. The template
#     asks for the next init as soon as it takes one, so that Z makes it while the template
#     forks: one init at a time, made ahead of the fork that needs it.
#   - Per fork the template enters I's PID namespace (setns on the pidfd) and forks D there.
#     D's parent is the template (outside the namespace: getppid() is 0 in it, as for a process
#     entered with nsenter). D moves itself and I into the container's cgroups, joins I's other
#     namespaces, makes its /tmp and /mnt/data the container uid's, enters a new cgroup
#     namespace, becomes the container's host uid in a nested user namespace that allows no
#     further one, drops every capability, installs the seccomp filter, closes every descriptor
#     but its pipes, reseeds every random state it shares with the template and runs the
#     driver's main loop.
# I reaps what D's children orphan and ends the namespace (the kernel kills every process in
# it) when the lifeline closes: the server is gone, or gave the container up. The server kills I
# when D exits.

import os, sys

_SOCK = 3


def _keeper():
    # pid 2 of the template's PID namespace, before any import: bubblewrap's init ends the
    # namespace (every container with it) when its first child exits, so this process, that
    # child, only forks the template and forks a new one whenever it dies. It is the subreaper
    # of the containers' inits a dead template leaves.
    import ctypes, time, select
    ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    while True:
        tpl = os.fork()
        if tpl == 0:
            return
        while True:
            pid, status = os.waitpid(-1, 0)
            if pid == tpl:
                break
        p = select.poll()
        p.register(_SOCK, select.POLLIN)
        hup = any(ev & (select.POLLHUP | select.POLLERR) for _, ev in p.poll(0))
        if status == 0 or hup:
            # The server closed the socket: no new template. Reap what is left, then end.
            while True:
                try:
                    os.waitpid(-1, 0)
                except ChildProcessError:
                    os._exit(0)
        time.sleep(0.1)


if os.getpid() == 2:
    _keeper()

import ctypes, socket, marshal, select, signal, gc, fcntl, struct, errno, time, _signal

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long

CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE = 2, 4, 8, 16384, 1 << 18
PR_SET_DUMPABLE, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_SET_CHILD_SUBREAPER = 4, 24, 38, 36
_CFG = marshal.loads(bytes.fromhex(sys.argv[2]))
_LAYOUT = _CFG['layout']
SYS_close_range, SYS_capset, SYS_seccomp = (_CFG['syscalls'][n] for n in ('close_range', 'capset', 'seccomp'))


def _check(r, what):
    if r < 0:
        e = ctypes.get_errno()
        raise OSError(e, '%s: %s' % (what, os.strerror(e)))
    return r


def _unshare(flags):
    _check(_libc.unshare(flags), 'unshare')


def _mount(src, target, fstype, flags, data=None):
    _check(_libc.mount(src.encode() if src else None, target.encode(),
                       fstype.encode() if fstype else None, ctypes.c_ulong(flags),
                       data.encode() if data else None), 'mount ' + target)


def _prctl(op, a=0):
    return _check(_libc.prctl(op, ctypes.c_ulong(a), ctypes.c_ulong(0), ctypes.c_ulong(0),
                              ctypes.c_ulong(0)), 'prctl')


def _close_range(first):
    _check(_libc.syscall(SYS_close_range, ctypes.c_uint(first), ctypes.c_uint(0xffffffff),
                         ctypes.c_uint(0)), 'close_range')


def _write(path, text):
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _last_cap():
    # The highest capability the kernel knows: cap_last_cap, or where PR_CAPBSET_READ (23)
    # stops knowing them when it cannot be read.
    try:
        with open('/proc/sys/kernel/cap_last_cap') as f:
            return int(f.read())
    except (OSError, ValueError):
        cap = 0
        while cap < 63 and _libc.prctl(23, ctypes.c_ulong(cap + 1), ctypes.c_ulong(0), ctypes.c_ulong(0),
                                       ctypes.c_ulong(0)) >= 0:
            cap += 1
        return cap


# What the containers' inits pass to the kernel, made once here: the children only call.
_CAPBSET_DROP = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong,
                                 ctypes.c_ulong, ctypes.c_ulong, use_errno=True)(('prctl', _libc))
_LAST_CAP = _last_cap()
_CAP_HDR = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3
_CAP_DATA = (ctypes.c_uint32 * 6)()


def _drop_caps():
    # Every capability the kernel knows (see _last_cap) leaves
    # the bounding set, then the other sets are emptied.
    for cap in range(_LAST_CAP + 1):
        _check(_CAPBSET_DROP(PR_CAPBSET_DROP, cap, 0, 0, 0), 'drop capability %d' % cap)
    for cap in range(_LAST_CAP + 1, 64):
        if _CAPBSET_DROP(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0:
            break
    _check(_libc.syscall(SYS_capset, _CAP_HDR, _CAP_DATA), 'capset')


class _Fprog(ctypes.Structure):
    _fields_ = [('len', ctypes.c_ushort), ('filter', ctypes.c_void_p)]


def _seccomp_prog(prog):
    # The filter as the kernel reads it, made once: (the program struct, the buffer it points
    # into, which must stay alive with it).
    buf = ctypes.create_string_buffer(prog, len(prog))
    return _Fprog(len(prog) // 8, ctypes.cast(buf, ctypes.c_void_p)), buf


def _install_seccomp(fprog):
    _prctl(PR_SET_NO_NEW_PRIVS, 1)
    _check(_libc.syscall(SYS_seccomp, 1, 0, ctypes.byref(fprog)), 'seccomp')


def _lo_up():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        ifr = struct.pack('16sH14x', b'lo', 0)
        flags = struct.unpack('16sH14x', fcntl.ioctl(s, 0x8913, ifr))[1]  # SIOCGIFFLAGS
        fcntl.ioctl(s, 0x8914, struct.pack('16sH14x', b'lo', flags | 1))  # SIOCSIFFLAGS, IFF_UP
    finally:
        s.close()


def _threads():
    return len(os.listdir('/proc/self/task'))


def _reap():
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _wakeup_on_sigchld():
    # A pipe that turns readable when a child exits (select wakes on it; read it empty).
    r, w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(w)
    signal.signal(signal.SIGCHLD, lambda *a: None)
    return r


def _drain(fd):
    try:
        os.read(fd, 64)
    except BlockingIOError:
        pass


def _reset_signals():
    _signal.set_wakeup_fd(-1)
    for s in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        _signal.signal(s, _signal.SIG_DFL)


_SECCOMP = _seccomp_prog(_CFG['seccomp']) if _CFG['seccomp'] else None
_TMP_BYTES, _DATA_BYTES, _DATA_DIR = _LAYOUT['tmp_bytes'], _LAYOUT['data_bytes'], _LAYOUT['data_dir']
_UID, _HOSTNAME = _LAYOUT['uid'], _LAYOUT['hostname'].encode()
_MAKER_WAIT = _CFG['maker_wait']  # seconds a fork waits for an init
_NS = ('mnt', 'net', 'ipc', 'uts')
_OWN_NS = {n: os.stat('/proc/self/ns/' + n).st_ino for n in _NS}
_MPL_DIR = os.environ.get('MPLCONFIGDIR', '/tmp/.matplotlib')


# --- Z, the maker of the containers' inits ---------------------------------------------------

def _maker(sock):
    # Z. Per request (a byte) it makes an init and answers b'ok' once the init is set up, with a
    # pidfd of it and its claim (see _init), or b'error: ...'. It ends when the template's end
    # of its socket closes.
    try:
        os.close(_SOCK)  # the server's socket is the template's alone
        own = os.open('/proc/self/ns/pid', os.O_RDONLY | os.O_CLOEXEC)
        woke = _wakeup_on_sigchld()
        while True:
            try:
                ready, _, _ = select.select([sock, woke], [], [])
            except InterruptedError:
                continue
            if woke in ready:
                _drain(woke)
                _reap()
            if sock not in ready:
                continue
            if not sock.recv(16):
                os._exit(0)
            try:
                init = _make_init(own)
            except Exception as e:
                sock.send(('error: %s: %s' % (type(e).__name__, e)).encode()[:512])
                continue
            try:
                socket.send_fds(sock, [b'ok'], list(init))
            finally:
                for fd in init:
                    os.close(fd)
    except BaseException:
        os._exit(1)


def _make_init(own):
    # Forks an init into a new PID namespace and returns, once it is set up, a pidfd of it and
    # the write end of its claim.
    ready_r = ready_w = claim_r = claim_w = -1
    try:
        ready_r, ready_w = os.pipe2(os.O_CLOEXEC)
        claim_w, claim_r = (s.detach() for s in socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET))
        _unshare(CLONE_NEWPID)
        try:
            pid = os.fork()
            if pid == 0:
                os.close(ready_r)
                os.close(claim_w)
                _init(ready_w, claim_r)
        finally:
            _check(_libc.setns(own, CLONE_NEWPID), 'setns')
        init = os.pidfd_open(pid)
        os.close(ready_w)
        ready_w = -1
        ok, _, _ = select.select([ready_r], [], [], 10)
        if ok and os.read(ready_r, 1) == b'\x01':
            claim, claim_w = claim_w, -1
            return init, claim
        signal.pidfd_send_signal(init, signal.SIGKILL)
        os.close(init)
        raise RuntimeError('the init did not set up its namespaces')
    finally:
        for fd in (ready_r, ready_w, claim_r, claim_w):
            if fd >= 0:
                os.close(fd)


def _init(ready, claim):
    # I: pid 1 of a container's PID namespace. Never returns. Until the template claims it
    # (_claimed, as it forks a driver into it), it is root and ends when the claim (fd 1)
    # closes: its template is gone. Claimed, it holds nothing of the container but the lifeline
    # (fd 0), and ends when that closes.
    try:
        _reset_signals()
        mpl = {}
        try:
            for name in os.listdir(_MPL_DIR):  # the template's, before this /tmp hides it
                with open(os.path.join(_MPL_DIR, name), 'rb') as f:
                    mpl[name] = f.read()
        except OSError:
            pass
        _unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS)
        _mount(None, '/', None, MS_REC | MS_PRIVATE)
        _mount('proc', '/proc', 'proc', MS_NOSUID | MS_NODEV | MS_NOEXEC)
        fl = MS_NOSUID | MS_NODEV
        # Owned by root until the driver gives /tmp and /mnt/data to the container's uid.
        _mount('tmpfs', '/tmp', 'tmpfs', fl, 'mode=0755,size=%d' % _TMP_BYTES)
        _mount('tmpfs', '/dev/shm', 'tmpfs', fl, 'mode=1777,size=%d' % _TMP_BYTES)
        _mount('tmpfs', _DATA_DIR, 'tmpfs', fl, 'mode=0755,size=%d' % _DATA_BYTES)
        if mpl:
            # matplotlib's font cache, which the imports wrote to the template's /tmp: each
            # container gets a copy in its own /tmp, as a container started the exec way has.
            os.mkdir(_MPL_DIR, 0o755)
            for name, body in mpl.items():
                fd = os.open(os.path.join(_MPL_DIR, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
                os.write(fd, body)
                os.close(fd)
        _check(_libc.sethostname(_HOSTNAME, len(_HOSTNAME)), 'sethostname')
        _lo_up()
        null = os.open('/dev/null', os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(claim, 1)
        os.write(ready, b'\x01')
        _close_range(2)
        os.setsid()
        _prctl(PR_SET_DUMPABLE, 0)  # the code may not read or write this process's memory
        gc.disable()
        woke = _wakeup_on_sigchld()
        watch = [1, woke]
        while True:
            _reap()
            try:
                ready, _, _ = select.select(watch, [], [])
            except InterruptedError:
                continue
            if 0 in ready:
                os._exit(0)  # the server is gone, or gave the container up
            if 1 in ready:
                _claimed()
                watch = [0, woke]
            _drain(woke)
    except BaseException:
        os._exit(126)


def _claimed():
    # I, claimed: the message is the container's host uid, with a pipe to the driver, the
    # lifeline, then the cgroup.procs files of the container's cgroups. It moves into them, drops
    # its privileges as the driver does, and says so on the pipe: the driver runs no code before.
    msg, fds, _, _ = socket.recv_fds(socket.socket(fileno=1), 64, 16)
    if not msg:
        os._exit(0)  # never claimed, and its template is gone
    if len(fds) < 2:
        os._exit(126)
    os.dup2(fds[1], 0)
    os.close(fds[1])
    for fd in fds[2:]:
        os.write(fd, b'0')
        os.close(fd)
    _unshare(CLONE_NEWCGROUP)
    _become(marshal.loads(msg))
    _prctl(PR_SET_DUMPABLE, 0)  # the code may not read or write this process's memory
    os.write(fds[0], b'\x01')
    os.close(fds[0])


def _become(u):
    # Makes this process host uid u, the layout's uid in a user namespace of its own that allows no
    # further one, without any capability, under the seccomp filter.
    os.setgroups([])
    os.setresgid(u, u, u)
    os.setresuid(u, u, u)  # no capability from here on
    _prctl(PR_SET_DUMPABLE, 1)  # the uid change cleared it: /proc/self is writable again
    _unshare(CLONE_NEWUSER)
    _write('/proc/self/uid_map', '%d %d 1\n' % (_UID, u))
    _write('/proc/self/setgroups', 'deny')
    _write('/proc/self/gid_map', '%d %d 1\n' % (_UID, u))
    _write('/proc/sys/user/max_user_namespaces', '0')  # no user namespace below this one
    _drop_caps()
    if _SECCOMP:
        _install_seccomp(_SECCOMP[0])
    else:
        _prctl(PR_SET_NO_NEW_PRIVS, 1)


_MAKER, _maker_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
_MAKER_PID = os.fork()
if _MAKER_PID == 0:
    _MAKER.close()
    _maker(_maker_end)
_maker_end.close()


class _Inits:
    # The template's side of Z: the init in hand for the next fork (a pidfd and its claim), and
    # whether one was asked for and not yet received.
    def __init__(self):
        self.next = None
        self.asked = False
        self.error = None

    def ask(self):
        if self.next is None and not self.asked:
            try:
                _MAKER.send(b'm')
            except OSError:
                os._exit(1)  # Z is gone: the keeper starts a new template (and Z)
            self.asked = True

    def receive(self):
        # Takes Z's answer in (it is there to read).
        try:
            msg, fds, _, _ = socket.recv_fds(_MAKER, 512, 2)
        except OSError:
            os._exit(1)  # Z is gone: the keeper starts a new template (and Z)
        if not msg:
            os._exit(1)
        self.asked = False
        if msg == b'ok' and len(fds) == 2:
            self.next, self.error = (fds[0], fds[1]), None
            return
        for fd in fds:
            os.close(fd)
        self.error = msg.decode(errors='replace')

    def wait(self, woke, deadline):
        # Waits until deadline (time.monotonic) for the init asked for, reaping the drivers that
        # exit meanwhile (their inits wait for that to end). An init late comes in through
        # _serve, for a later fork.
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError('no init made in time')
            try:
                ready, _, _ = select.select([_MAKER, woke], [], [], left)
            except InterruptedError:
                continue
            if woke in ready:
                _drain(woke)
                _reap()
            if _MAKER in ready:
                self.receive()
                return

    def take(self, woke, deadline):
        # The init for the next fork (pidfd, claim), asking for another at once.
        if self.next is None:
            self.ask()
            self.wait(woke, deadline)
        init, self.next = self.next, None
        self.ask()
        if init is None:
            raise RuntimeError(self.error or 'no init')
        return init


_INITS = _Inits()


# --- the template -----------------------------------------------------------------------------

_DRIVER = {'_FORK_TEMPLATE': True, '__name__': '__codeinterp__', '__builtins__': __builtins__}
_SERVER = socket.socket(fileno=_SOCK)
exec(marshal.loads(_CFG['driver']), _DRIVER)
_DRIVER['_prepare'](_CFG['preload'])
del sys.argv[1:]
_OWN_PIDNS = os.open('/proc/self/ns/pid', os.O_RDONLY | os.O_CLOEXEC)
_prctl(PR_SET_CHILD_SUBREAPER, 1)


def _place(fds):
    # Moves fds to 1, 2, ... (above every other descriptor first, so that a dup2 never
    # overwrites one still to be moved), fd 0 to /dev/null, and closes everything else.
    high = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 200) for fd in fds]
    for i, fd in enumerate(high):
        os.dup2(fd, 1 + i, inheritable=(i < 2))
        os.close(fd)
    null = os.open('/dev/null', os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    _close_range(1 + len(fds))


def _container(req, fds, init, claimed):
    # D: the driver, pid 2 of I's PID namespace (init: a pidfd of I; claimed: the pipe on which
    # I says it has dropped its privileges). Never returns.
    try:
        # Into the container's cgroups first: what it writes from here on is charged there.
        for fd in fds[5:]:
            os.write(fd, b'0')
        _check(_libc.setns(init, CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS), 'setns')
        for n in _NS:
            if os.stat('/proc/self/ns/' + n).st_ino == _OWN_NS[n]:
                raise RuntimeError('still in the template\'s %s namespace' % n)
        _reset_signals()
        _place(fds[:5] + [claimed])  # 1 stdout, 2 stderr, 3 ctl-in, 4 ctl-out, 5 intr, 6 claimed
        os.setsid()
        u = req['uid']
        for d in ('/tmp', _DATA_DIR, _MPL_DIR):
            try:
                os.chown(d, u, u)
            except FileNotFoundError:
                continue
            if d == _MPL_DIR:
                for name in os.listdir(d):
                    os.chown(os.path.join(d, name), u, u)
        _unshare(CLONE_NEWCGROUP)
        _become(u)
        if os.read(6, 1) != b'\x01':
            raise RuntimeError('the init did not drop its privileges')
        os.close(6)
    except BaseException:
        try:
            import traceback
            os.write(2, ('container setup failed: ' + traceback.format_exc(limit=3)).encode())
        finally:
            os._exit(126)
    try:
        _DRIVER['_main'](dict(req['driver']))
    except SystemExit:
        pass
    except BaseException as e:
        os.write(2, ('driver: %r\n' % (e,)).encode())
    os._exit(0)


def _fork(req, fds, woke):
    # Returns pidfds of the container's init and driver.
    n = 6 + req.get('cgroups', 0)
    if len(fds) != n:
        raise ValueError('want %d descriptors, got %d' % (n, len(fds)))
    threads = _threads()
    if threads != 1:
        raise RuntimeError('the template runs %d threads' % threads)
    deadline = time.monotonic() + _MAKER_WAIT  # for the init, however many it takes
    for attempt in (0, 1):
        init, claim = _INITS.take(woke, deadline)
        claimed = -1
        try:
            claimed, claimed_w = os.pipe2(os.O_CLOEXEC)
            try:
                cs = socket.socket(fileno=claim)
                try:
                    socket.send_fds(cs, [marshal.dumps(req['uid'], 2)], [claimed_w] + fds[5:])
                finally:
                    cs.detach()
            finally:
                os.close(claimed_w)
            break
        except OSError as e:
            _discard(init, claimed)
            if attempt or e.errno not in (errno.EPIPE, errno.ECONNRESET, errno.ECONNREFUSED):
                raise
            # The init made ahead has died (killed from outside): the next one is made now.
        except BaseException:
            _discard(init, claimed)
            raise
        finally:
            os.close(claim)
    try:
        _check(_libc.setns(init, CLONE_NEWPID), 'setns')
        try:
            pid = os.fork()
            if pid == 0:
                _container(req, fds[:5] + fds[6:], init, claimed)  # the lifeline is I's alone
        finally:
            # The template goes back to its own PID namespace after forking D into I's.
            _check(_libc.setns(_OWN_PIDNS, CLONE_NEWPID), 'setns')
        return init, os.pidfd_open(pid)
    except BaseException:
        _discard(init, -1)
        raise
    finally:
        os.close(claimed)


def _discard(init, fd):
    # Kills an init taken for a fork that failed (its PID namespace with it) and closes it, and
    # fd if not -1.
    try:
        signal.pidfd_send_signal(init, signal.SIGKILL)
    except OSError:
        pass  # gone already
    os.close(init)
    if fd >= 0:
        os.close(fd)


class _Sigaction(ctypes.Structure):
    # glibc's struct sigaction on 64-bit Linux (x86_64, aarch64).
    _fields_ = [('handler', ctypes.c_void_p), ('mask', ctypes.c_ulong * 16), ('flags', ctypes.c_int),
                ('restorer', ctypes.c_void_p)]


def _no_stop_signals():
    # SIGCHLD only when a child exits, not when it stops or continues: a driver's code may stop
    # and continue its own driver (a child of the template's) at will, and wake the template
    # each time (SA_NOCLDSTOP on the handler the signal module installed).
    act = _Sigaction()
    _check(_libc.sigaction(signal.SIGCHLD, None, ctypes.byref(act)), 'sigaction')
    act.flags |= 1  # SA_NOCLDSTOP
    _check(_libc.sigaction(signal.SIGCHLD, ctypes.byref(act), None), 'sigaction')


def _serve():
    woke = _wakeup_on_sigchld()
    _no_stop_signals()
    _DRIVER['_reseed']()
    gc.collect()
    gc.freeze()  # the collector never writes to the template's objects in a child
    _INITS.ask()
    me = os.pidfd_open(os.getpid())
    socket.send_fds(_SERVER, [marshal.dumps({'op': 'ready', 'threads': _threads()}, 2)], [me])
    os.close(me)
    while True:
        try:
            ready, _, _ = select.select([_SERVER, woke, _MAKER], [], [])
        except InterruptedError:
            continue
        if woke in ready:
            _drain(woke)
            _reap()  # the drivers, whose init waits for them to be reaped before it ends
        if _MAKER in ready:
            _INITS.receive()  # the init asked for, or Z's end (then the template ends)
        if _SERVER not in ready:
            continue
        msg, fds, _, _ = socket.recv_fds(_SERVER, 1 << 20, 64)
        if not msg:
            return
        req = None
        try:
            req = marshal.loads(msg)
            if req.get('op') != 'fork':
                raise ValueError('unknown request')
            pidfds = _fork(req, fds, woke)
        except Exception as e:
            _SERVER.send(marshal.dumps({'op': 'error', 'id': req.get('id') if isinstance(req, dict) else 0,
                                        'error': '%s: %s' % (type(e).__name__, e)}, 2))
            continue
        finally:
            for fd in fds:
                os.close(fd)
        try:
            socket.send_fds(_SERVER, [marshal.dumps({'op': 'forked', 'id': req['id']}, 2)], list(pidfds))
        finally:
            for fd in pidfds:
                os.close(fd)
        _DRIVER['_reseed']()  # for the next child


_serve()
