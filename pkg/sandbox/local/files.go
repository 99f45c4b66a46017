package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"runtime"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/codeinterp/codeinterp/pkg/sandbox"
)

// The container's files, reached from the server. Under isolation /mnt/data is a tmpfs inside
// the container's mount namespace, reached through its init's /proc/<pid>/root (the pidfd of
// the init proves the pid is still the container's); without isolation it is the host data
// directory. Every path is resolved below that directory with openat2 and RESOLVE_BENEATH,
// RESOLVE_NO_SYMLINKS, RESOLVE_NO_MAGICLINKS and RESOLVE_NO_XDEV: the code is hostile and may
// plant symlinks (to host paths, to /proc/1/root/..., to directories), FIFOs and hard links;
// none is followed, only regular files are read (opened non-blocking, so a FIFO cannot hang
// the server; the tmpfs is nodev, so a device node cannot be opened), and a write replaces
// what is at its path by a rename, never writing through it.
//
// Files and directories are made with the file system credentials (fsuid, fsgid) of the code's
// user, on a thread of their own: the tmpfs belongs to the container's user namespace, in
// which the server's root is no one (the kernel refuses to create an inode it could not name),
// and the code's user owns, and may change, what the server writes.

var _ sandbox.Files = (*container)(nil)

// uploadPrefix names the temporary file of a write in progress, renamed over its path at the
// end; a run's file list leaves such files out.
const uploadPrefix = ".codeinterp-upload-"

// isUploadTemp reports whether container path p is a write's temporary file.
func isUploadTemp(p string) bool { return strings.HasPrefix(path.Base(p), uploadPrefix) }

// resolveBeneath is how every path below the data directory is resolved.
const resolveBeneath = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// openRetries bounds the retries of an open that a concurrent rename made fail with EAGAIN:
// code renaming in a loop must not keep the server spinning.
const openRetries = 64

// openBeneath opens rel below the directory dirfd, following no symlink.
func openBeneath(dirfd int, rel string, flags int, mode uint32) (int, error) {
	how := unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC | unix.O_NOFOLLOW), Resolve: resolveBeneath}
	if flags&unix.O_CREAT != 0 {
		how.Mode = uint64(mode)
	}
	for i := 0; ; i++ {
		fd, err := unix.Openat2(dirfd, rel, &how)
		if (errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN)) && i < openRetries {
			continue // EAGAIN: a rename raced the lookup
		}
		return fd, err
	}
}

// relPath returns container path p relative to the data directory, and split into its
// directory ("" for the data directory itself) and base name.
func relPath(p string) (rel, dir, base string, err error) {
	c, err := sandbox.CleanPath(p)
	if err != nil {
		return "", "", "", err
	}
	rel = strings.TrimPrefix(c, dataDir+"/")
	dir, base = path.Split(rel)
	return rel, strings.TrimSuffix(dir, "/"), base, nil
}

// dataRoot opens the container's data directory. It fails with ErrClosed once the container
// is deleted and with ErrLost once it has died.
func (c *container) dataRoot() (int, error) {
	if c.isDeleted() {
		return -1, sandbox.ErrClosed
	}
	select {
	case <-c.exited:
		return -1, fmt.Errorf("%w: container exited", sandbox.ErrLost)
	default:
	}
	const dirFlags = unix.O_DIRECTORY | unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NOFOLLOW
	if !c.l.isolated() {
		fd, err := unix.Open(c.hostDir, dirFlags, 0)
		if err != nil {
			return -1, fmt.Errorf("%w: open the data directory: %w", sandbox.ErrLost, err)
		}
		return fd, nil
	}
	c.initMu.Lock()
	defer c.initMu.Unlock()
	if c.initFD < 0 || c.initPID <= 0 {
		return -1, fmt.Errorf("%w: no handle on the container's init", sandbox.ErrNoFileAccess)
	}
	fd, err := unix.Open(fmt.Sprintf("/proc/%d/root%s", c.initPID, dataDir), dirFlags, 0)
	// The init may have died and its pid been reused before the open: the pidfd tells.
	if serr := unix.PidfdSendSignal(c.initFD, 0, nil, 0); serr != nil {
		if err == nil {
			unix.Close(fd)
		}
		return -1, fmt.Errorf("%w: the container's init is gone", sandbox.ErrLost)
	}
	if err != nil {
		return -1, fmt.Errorf("open the data directory: %w", err)
	}
	return fd, nil
}

// openDir opens directory dir below root; with create, it makes the missing directories
// (owned by the code's user). A component that is not a directory, or a symlink, is
// ErrInvalidPath.
func (c *container) openDir(root int, dir string, create bool) (int, error) {
	cur, err := unix.Dup(root)
	if err != nil {
		return -1, fmt.Errorf("open directory: %w", err)
	}
	if dir == "" {
		return cur, nil
	}
	for comp := range strings.SplitSeq(dir, "/") {
		made := false
		if create {
			if err := unix.Mkdirat(cur, comp, 0o755); err == nil {
				made = true
			} else if !errors.Is(err, unix.EEXIST) {
				unix.Close(cur)
				return -1, fileErr("make directory", err)
			}
		}
		next, err := openBeneath(cur, comp, unix.O_DIRECTORY|unix.O_RDONLY, 0)
		unix.Close(cur)
		if err != nil {
			if errors.Is(err, unix.ENOENT) && !create {
				return -1, sandbox.ErrFileNotFound
			}
			if errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EXDEV) {
				return -1, fmt.Errorf("%w: %q is not a directory", sandbox.ErrInvalidPath, comp)
			}
			return -1, fileErr("open directory", err)
		}
		if made {
			_ = unix.Fchmod(next, 0o755) // whatever the server's umask
		}
		cur = next
	}
	return cur, nil
}

// fileErr turns a system call's failure on a file into the sandbox's errors: a full /mnt/data
// is ErrFileTooLarge, a path that names nothing ErrFileNotFound, a directory whose mode the
// code set to refuse its own user (as whom the server writes) ErrInvalidPath.
func fileErr(op string, err error) error {
	switch {
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
		return fmt.Errorf("%w: %s: the code's permissions refuse it", sandbox.ErrInvalidPath, op)
	case errors.Is(err, unix.ENOSPC), errors.Is(err, unix.EFBIG), errors.Is(err, unix.EDQUOT):
		return fmt.Errorf("%w: %s: /mnt/data is full", sandbox.ErrFileTooLarge, op)
	case errors.Is(err, unix.ENOENT):
		return sandbox.ErrFileNotFound
	case errors.Is(err, unix.ENAMETOOLONG):
		return fmt.Errorf("%w: %s: name too long", sandbox.ErrInvalidPath, op)
	}
	return fmt.Errorf("%s: %w", op, err)
}

// WriteFile implements [sandbox.Files]: the bytes go to a temporary file in path's directory
// (created as needed), owned by the code's user with mode 0644, renamed over path once all is
// written. On any failure the temporary file is removed. Only the system calls that make,
// rename and remove names run with the code's user's credentials, on a locked thread: the
// bytes are copied as the server, so that a slow upload holds no thread of its own. A write
// into a container deleted meanwhile stops at its next chunk with ErrClosed.
func (c *container) WriteFile(ctx context.Context, p string, r io.Reader, limit int64) (sandbox.FileStat, error) {
	_, dir, base, err := relPath(p)
	if err != nil {
		return sandbox.FileStat{}, err
	}
	if isUploadTemp(base) {
		// A run's file list leaves such names out: the code's changes would go unseen.
		return sandbox.FileStat{}, fmt.Errorf("%w: %q names a write in progress", sandbox.ErrInvalidPath, base)
	}
	st, err := c.write(ctx, dir, base, r, limit)
	if err != nil && !errors.Is(err, sandbox.ErrInvalidPath) && !errors.Is(err, sandbox.ErrFileTooLarge) && c.isDeleted() {
		return sandbox.FileStat{}, sandbox.ErrClosed
	}
	return st, err
}

// asCodeUser runs f with the file system credentials of the code's user (when the container
// has a uid of its own), on a thread locked for the purpose. A thread whose credentials could
// not be restored is not given back to the runtime: it ends with the goroutine.
func (c *container) asCodeUser(f func() error) error {
	uid := c.fileUID
	if uid < 0 {
		return f()
	}
	runtime.LockOSThread()
	oldGID, _ := unix.SetfsgidRetGid(uid)
	oldUID, _ := unix.SetfsuidRetUid(uid)
	if cur, _ := unix.SetfsuidRetUid(-1); cur != uid {
		// Not switched: do nothing as the server.
		unix.SetfsuidRetUid(oldUID)
		unix.SetfsgidRetGid(oldGID)
		return fmt.Errorf("take the code's user's file credentials (uid %d)", uid)
	}
	err := f()
	unix.SetfsuidRetUid(oldUID)
	unix.SetfsgidRetGid(oldGID)
	if cur, _ := unix.SetfsuidRetUid(-1); cur == oldUID {
		runtime.UnlockOSThread()
	}
	return err
}

// write is WriteFile's work. While the bytes are copied it holds only the directory and the
// temporary file, both closed by Delete: an upload stalled by its client must not keep a
// deleted container's tmpfs alive.
func (c *container) write(ctx context.Context, dir, base string, r io.Reader, limit int64) (sandbox.FileStat, error) {
	tmp := uploadPrefix + randomHex(8)
	dirF, tmpF, err := c.createTemp(dir, tmp)
	if err != nil {
		return sandbox.FileStat{}, err
	}
	defer func() {
		if c.release(dirF) {
			dirF.Close()
		}
	}()
	st, err := c.fill(ctx, tmpF, r, limit)
	if c.release(tmpF) {
		if cerr := tmpF.Close(); err == nil && cerr != nil {
			err = fileErr("close file", cerr)
		}
	}
	if err == nil {
		err = c.asCodeUser(func() error {
			return atFD(dirF, func(dfd int) error {
				rerr := unix.Renameat(dfd, tmp, dfd, base)
				switch {
				case rerr == nil:
					return nil
				case errors.Is(rerr, unix.EISDIR), errors.Is(rerr, unix.ENOTEMPTY), errors.Is(rerr, unix.EEXIST):
					return fmt.Errorf("%w: a directory is at %q", sandbox.ErrInvalidPath, base)
				}
				return fileErr("rename file", rerr)
			})
		})
	}
	if err != nil {
		_ = c.asCodeUser(func() error {
			return atFD(dirF, func(dfd int) error { return unix.Unlinkat(dfd, tmp, 0) })
		})
		return sandbox.FileStat{}, err
	}
	return st, nil
}

// createTemp makes directory dir (as needed) and the temporary file tmp in it, owned by the
// code's user with mode 0644, and returns both open, held until Delete (see hold).
func (c *container) createTemp(dir, tmp string) (dirF, tmpF *os.File, err error) {
	root, err := c.dataRoot()
	if err != nil {
		return nil, nil, err
	}
	defer unix.Close(root)
	dfd, fd := -1, -1
	err = c.asCodeUser(func() error {
		var err error
		if dfd, err = c.openDir(root, dir, true); err != nil {
			return err
		}
		if fd, err = openBeneath(dfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, 0o644); err != nil {
			return fileErr("create file", err)
		}
		if err := unix.Fchmod(fd, 0o644); err != nil { // whatever the server's umask
			_ = unix.Unlinkat(dfd, tmp, 0)
			return fmt.Errorf("file mode: %w", err)
		}
		return nil
	})
	if err != nil {
		if fd >= 0 {
			unix.Close(fd)
		}
		if dfd >= 0 {
			unix.Close(dfd)
		}
		return nil, nil, err
	}
	dirF, tmpF = os.NewFile(uintptr(dfd), dir), os.NewFile(uintptr(fd), tmp)
	if !c.hold(dirF, tmpF) {
		_ = c.asCodeUser(func() error { return unix.Unlinkat(dfd, tmp, 0) })
		dirF.Close()
		tmpF.Close()
		return nil, nil, sandbox.ErrClosed
	}
	return dirF, tmpF, nil
}

// atFD calls f with f's descriptor, which stays open meanwhile (Delete may close f from another
// goroutine: its number must not be reused under f); a closed f is ErrClosed.
func atFD(file *os.File, f func(fd int) error) error {
	rc, err := file.SyscallConn()
	if err != nil {
		return sandbox.ErrClosed
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = f(int(fd)) }); err != nil {
		return sandbox.ErrClosed
	}
	return ferr
}

// hold records files open on the container's tmpfs, which Delete closes; it fails (holding
// nothing) once the container is deleted.
func (c *container) hold(files ...*os.File) bool {
	c.openMu.Lock()
	defer c.openMu.Unlock()
	if c.isDeleted() {
		return false
	}
	if c.held == nil {
		c.held = map[*os.File]struct{}{}
	}
	for _, f := range files {
		c.held[f] = struct{}{}
	}
	return true
}

// release forgets file, and reports whether it was still held: then the caller closes it;
// otherwise Delete closed it.
func (c *container) release(file *os.File) bool {
	c.openMu.Lock()
	defer c.openMu.Unlock()
	_, ok := c.held[file]
	delete(c.held, file)
	return ok
}

// closeHeld closes the files still held; the container is deleted.
func (c *container) closeHeld() {
	c.openMu.Lock()
	defer c.openMu.Unlock()
	for f := range c.held {
		f.Close() // safe while a system call is in progress on it: the descriptor goes when it ends
	}
	c.held = nil
}

// copyBuffer is the size of the chunks a write copies: the file streams through it.
const copyBuffer = 256 << 10

// fill writes r's bytes to f, at most limit of them when limit > 0, checking ctx and the
// container's deletion between chunks.
func (c *container) fill(ctx context.Context, f *os.File, r io.Reader, limit int64) (sandbox.FileStat, error) {
	src := r
	if limit > 0 {
		src = io.LimitReader(r, limit+1)
	}
	buf := make([]byte, copyBuffer)
	var n int64
	for {
		if err := ctx.Err(); err != nil {
			return sandbox.FileStat{}, fmt.Errorf("write file: %w", err)
		}
		if c.isDeleted() {
			// The container's tmpfs lives on only through the descriptors held here.
			return sandbox.FileStat{}, sandbox.ErrClosed
		}
		k, rerr := src.Read(buf)
		if k > 0 {
			n += int64(k)
			if limit > 0 && n > limit {
				return sandbox.FileStat{}, fmt.Errorf("%w: beyond %d bytes", sandbox.ErrFileTooLarge, limit)
			}
			if _, werr := f.Write(buf[:k]); werr != nil {
				return sandbox.FileStat{}, fileErr("write file", werr)
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return sandbox.FileStat{}, fmt.Errorf("read the file's content: %w", rerr)
		}
	}
	fi, err := f.Stat()
	if err != nil {
		return sandbox.FileStat{}, fmt.Errorf("stat file: %w", err)
	}
	return sandbox.FileStat{Size: fi.Size(), ModTime: fi.ModTime()}, nil
}

// openRegular opens container path p below the data directory with flags, and checks that
// it is a regular file.
func (c *container) openRegular(p string, flags int) (int, sandbox.FileStat, error) {
	rel, _, _, err := relPath(p)
	if err != nil {
		return -1, sandbox.FileStat{}, err
	}
	root, err := c.dataRoot()
	if err != nil {
		return -1, sandbox.FileStat{}, err
	}
	defer unix.Close(root)
	fd, err := openBeneath(root, rel, flags, 0)
	if err != nil {
		switch {
		case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENOTDIR),
			errors.Is(err, unix.EXDEV), errors.Is(err, unix.ENXIO), errors.Is(err, unix.EACCES),
			errors.Is(err, unix.EPERM), errors.Is(err, unix.EISDIR):
			return -1, sandbox.FileStat{}, sandbox.ErrFileNotFound
		}
		return -1, sandbox.FileStat{}, fmt.Errorf("open file: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, sandbox.FileStat{}, fmt.Errorf("stat file: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return -1, sandbox.FileStat{}, sandbox.ErrFileNotFound
	}
	return fd, sandbox.FileStat{Size: st.Size, ModTime: time.Unix(st.Mtim.Unix())}, nil
}

// OpenFile implements [sandbox.Files]. The file is opened non-blocking (a FIFO planted in its
// place cannot hang the server, and is refused as not regular), then read blocking, up to its
// size when opened: code appending to it cannot make the read endless. Delete closes the
// readers still open, which fail from then on with ErrClosed: a reader left open (a download
// read slowly) must not keep a deleted container's tmpfs, which any descriptor on it keeps
// alive, beyond the container's caps.
func (c *container) OpenFile(_ context.Context, p string) (io.ReadCloser, sandbox.FileStat, error) {
	fd, st, err := c.openRegular(p, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY)
	if err != nil {
		return nil, sandbox.FileStat{}, err
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, sandbox.FileStat{}, fmt.Errorf("open file: %w", err)
	}
	f := os.NewFile(uintptr(fd), path.Base(p))
	if !c.hold(f) {
		f.Close()
		return nil, sandbox.FileStat{}, sandbox.ErrClosed
	}
	return &openFile{c: c, f: f, r: io.LimitReader(f, st.Size)}, st, nil
}

// openFile is a reader of a container file, up to the size it had when opened.
type openFile struct {
	c *container
	f *os.File
	r io.Reader
}

func (o *openFile) Read(p []byte) (int, error) {
	if o.c.isDeleted() {
		return 0, sandbox.ErrClosed
	}
	n, err := o.r.Read(p)
	if err != nil && errors.Is(err, os.ErrClosed) {
		err = sandbox.ErrClosed // closed by Delete
	}
	return n, err
}

func (o *openFile) Close() error {
	if !o.c.release(o.f) {
		return nil // closed already, by Delete or an earlier Close
	}
	return o.f.Close()
}

// StatFile implements [sandbox.Files].
func (c *container) StatFile(_ context.Context, p string) (sandbox.FileStat, error) {
	fd, st, err := c.openRegular(p, unix.O_PATH)
	if err != nil {
		return sandbox.FileStat{}, err
	}
	unix.Close(fd)
	return st, nil
}

// RemoveFile implements [sandbox.Files]: it unlinks what is at p (a symlink itself), but not
// a directory.
func (c *container) RemoveFile(_ context.Context, p string) error {
	_, dir, base, err := relPath(p)
	if err != nil {
		return err
	}
	root, err := c.dataRoot()
	if err != nil {
		return err
	}
	defer unix.Close(root)
	return c.asCodeUser(func() error {
		dfd, err := c.openDir(root, dir, false)
		if errors.Is(err, sandbox.ErrInvalidPath) {
			return sandbox.ErrFileNotFound
		}
		if err != nil {
			return err
		}
		defer unix.Close(dfd)
		if err := unix.Unlinkat(dfd, base, 0); err != nil {
			if errors.Is(err, unix.EISDIR) || errors.Is(err, syscall.EPERM) {
				return sandbox.ErrFileNotFound
			}
			return fileErr("remove file", err)
		}
		return nil
	})
}
