# The codeinterp fork template: one interpreter that has run the driver's definitions and
# imported the preloaded libraries once, and forks each container from itself (copy on write).
#
# bubblewrap runs it as the server's root, in a PID namespace of its own, with no network and a
# read-only system (pkg/sandbox/local/template.go starts it); it never runs the caller's code. argv[1] is this program's source, argv[2] the compiled driver (marshalled), argv[3]
# the seccomp filter of the containers, all in hex, and argv[4] "1" to preload the libraries; fd 3
# is a SOCK_SEQPACKET socket to the server, which sends marshalled dicts:
#   {'op': 'fork', 'uid': host uid, 'tmp_bytes', 'data_bytes', 'driver': cfg}
#       with 7 descriptors: stdout, stderr, ctl-in, ctl-out, intr, block, lifeline
# and gets {'op': 'ready'} with a pidfd of the template once it is up (again after a restart),
# and per fork {'op': 'forked', 'id'} with a pidfd of the container's init, or {'op': 'error',
# 'id', 'error': text}.
#
# A container's init (B) is pid 1 of a new PID namespace: it takes its descriptors (1-7, closing
# everything else), enters new mount, network, IPC and UTS namespaces, mounts its own /proc,
# /tmp, /dev/shm and /mnt/data, waits on the block pipe until the server has put it in its
# cgroups, enters a new cgroup namespace, becomes the container's host uid in a nested user namespace that allows no further
# one, drops every capability, installs the seccomp filter and forks the driver (C), which
# reseeds every random state it shares with the template and runs the driver's main loop. B
# then reaps the namespace's orphans and exits when the driver exits or the server's end of the
# lifeline closes; its exit makes the kernel kill every process left in the container.

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

import ctypes, socket, marshal, select, signal, gc, fcntl, struct

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
SYS_close_range, SYS_capset, SYS_seccomp = {
    'x86_64': (436, 126, 317), 'aarch64': (436, 91, 277)}[os.uname().machine]


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


_DRIVER = {'_FORK_TEMPLATE': True, '__name__': '__codeinterp__', '__builtins__': __builtins__}
_SERVER = socket.socket(fileno=_SOCK)
_SECCOMP = _seccomp_prog(bytes.fromhex(sys.argv[3])) if sys.argv[3] else None
exec(marshal.loads(bytes.fromhex(sys.argv[2])), _DRIVER)
_DRIVER['_prepare'](sys.argv[4] == '1')
del sys.argv[1:]
_OWN_PIDNS = os.open('/proc/self/ns/pid', os.O_RDONLY | os.O_CLOEXEC)
# matplotlib's font cache, which bubblewrap copied into the template's /tmp: each container gets
# a copy in its own /tmp, as a container started the exec way has.
_MPL_DIR = os.environ.get('MPLCONFIGDIR', '/tmp/.matplotlib')
_MPL = {}
try:
    for _name in os.listdir(_MPL_DIR):
        with open(os.path.join(_MPL_DIR, _name), 'rb') as _f:
            _MPL[_name] = _f.read()
except OSError:
    pass
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


def _container_init(req, fds):
    # B: pid 1 of the container's PID namespace. Never returns.
    try:
        signal.set_wakeup_fd(-1)
        for s in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(s, signal.SIG_DFL)
        _place(fds)  # 1 stdout, 2 stderr, 3 ctl-in, 4 ctl-out, 5 intr, 6 block, 7 lifeline
        os.setsid()
        u = req['uid']
        _unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS)
        _mount(None, '/', None, MS_REC | MS_PRIVATE)
        _mount('proc', '/proc', 'proc', MS_NOSUID | MS_NODEV | MS_NOEXEC)
        fl = MS_NOSUID | MS_NODEV
        _mount('tmpfs', '/tmp', 'tmpfs', fl, 'mode=0755,uid=%d,gid=%d,size=%d' % (u, u, req['tmp_bytes']))
        _mount('tmpfs', '/dev/shm', 'tmpfs', fl, 'mode=1777,size=%d' % req['tmp_bytes'])
        _mount('tmpfs', '/mnt/data', 'tmpfs', fl, 'mode=0755,uid=%d,gid=%d,size=%d' % (u, u, req['data_bytes']))
        if _MPL:
            os.mkdir(_MPL_DIR, 0o755)
            os.chown(_MPL_DIR, u, u)
            for name, body in _MPL.items():
                fd = os.open(os.path.join(_MPL_DIR, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
                os.write(fd, body)
                os.fchown(fd, u, u)
                os.close(fd)
        name = b'sandbox'
        _check(_libc.sethostname(name, len(name)), 'sethostname')
        _lo_up()
        # Meanwhile the server has put this process in the container's cgroups: its cgroup
        # namespace is rooted there.
        if os.read(6, 1) != b'\x01':
            os._exit(125)  # the server gave up on this container
        os.close(6)
        _unshare(CLONE_NEWCGROUP)
        os.setgroups([])
        os.setresgid(u, u, u)
        os.setresuid(u, u, u)  # no capability from here on
        _prctl(PR_SET_DUMPABLE, 1)  # the uid change cleared it: /proc/self is writable again
        _unshare(CLONE_NEWUSER)  # N: the code is uid 1000 in it
        _write('/proc/self/uid_map', '1000 %d 1\n' % u)
        _write('/proc/self/setgroups', 'deny')
        _write('/proc/self/gid_map', '1000 %d 1\n' % u)
        _write('/proc/sys/user/max_user_namespaces', '0')  # no user namespace below N
        _drop_caps()
        if _SECCOMP:
            _install_seccomp(_SECCOMP[0])
        else:
            _prctl(PR_SET_NO_NEW_PRIVS, 1)
        driver = os.fork()
        if driver == 0:
            _close_range(6)  # the lifeline is the init's alone
            _run_driver(req)
        null = os.open('/dev/null', os.O_RDWR)
        for fd in range(6):  # the protocol's pipes are the driver's alone
            os.dup2(null, fd, inheritable=False)
        os.close(null)
        _prctl(PR_SET_DUMPABLE, 0)  # the code may not read or write this process's memory
        _init_loop(driver)
    except BaseException:
        try:
            import traceback
            os.write(2, ('container setup failed: ' + traceback.format_exc(limit=3)).encode())
        finally:
            os._exit(126)


def _run_driver(req):
    # C: the driver (pid 2), uid 1000 in N.
    try:
        _prctl(PR_SET_DUMPABLE, 1)  # its own /proc/self, as in a container started cold
        _DRIVER['_prepare_child']()
        _DRIVER['_main'](dict(req['driver']))
    except SystemExit:
        pass
    except BaseException as e:
        os.write(2, ('driver: %r\n' % (e,)).encode())
    os._exit(0)


def _init_loop(driver):
    # B after the fork: reaps what is orphaned in the container; ends it when the driver ends or
    # the server's end of the lifeline (fd 7) closes.
    gc.disable()
    r, w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(w)
    signal.signal(signal.SIGCHLD, lambda *a: None)
    while True:
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                os._exit(0)
            if pid == 0:
                break
            if pid == driver:
                os._exit(0)  # the kernel kills every other process of the namespace
        try:
            ready, _, _ = select.select([7, r], [], [])
        except InterruptedError:
            continue
        if 7 in ready:
            os._exit(0)  # the server is gone
        try:
            os.read(r, 64)
        except BlockingIOError:
            pass


def _reap():
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _fork(req, fds):
    if len(fds) != 7:
        raise ValueError('want 7 descriptors, got %d' % len(fds))
    n = _threads()
    if n != 1:
        raise RuntimeError('the template runs %d threads' % n)
    # The template may go back to its own PID namespace after forking B into a new one.
    _unshare(CLONE_NEWPID)
    try:
        pid = os.fork()
        if pid == 0:
            _container_init(req, fds)
    finally:
        _check(_libc.setns(_OWN_PIDNS, CLONE_NEWPID), 'setns')
    return os.pidfd_open(pid)


def _serve():
    r, w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(w)
    signal.signal(signal.SIGCHLD, lambda *a: None)
    gc.collect()
    gc.freeze()  # the collector never writes to the template's objects in a child
    me = os.pidfd_open(os.getpid())
    socket.send_fds(_SERVER, [marshal.dumps({'op': 'ready', 'threads': _threads()}, 2)], [me])
    os.close(me)
    while True:
        try:
            ready, _, _ = select.select([_SERVER, r], [], [])
        except InterruptedError:
            continue
        if r in ready:
            try:
                os.read(r, 64)
            except BlockingIOError:
                pass
            _reap()
        if _SERVER not in ready:
            continue
        msg, fds, _, _ = socket.recv_fds(_SERVER, 1 << 20, 16)
        if not msg:
            return
        req = None
        try:
            req = marshal.loads(msg)
            if req.get('op') != 'fork':
                raise ValueError('unknown request')
            pidfd = _fork(req, fds)
        except Exception as e:
            _SERVER.send(marshal.dumps({'op': 'error', 'id': req.get('id') if isinstance(req, dict) else 0,
                                        'error': '%s: %s' % (type(e).__name__, e)}, 2))
            continue
        finally:
            for fd in fds:
                os.close(fd)
        try:
            socket.send_fds(_SERVER, [marshal.dumps({'op': 'forked', 'id': req['id']}, 2)], [pidfd])
        finally:
            os.close(pidfd)


_serve()
