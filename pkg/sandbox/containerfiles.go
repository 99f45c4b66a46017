package sandbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// File sources, as the Containers API shows them.
const (
	SourceUser      = "user"      // uploaded, or copied in from the Files API
	SourceAssistant = "assistant" // written by the code
)

// FileInfo is one container file.
type FileInfo struct {
	// ID is the container file id: "cfile_" and 32 hex digits, stable for the path while the
	// file exists.
	ID string
	// ContainerID is the id of the container holding it.
	ContainerID string
	// Path is its absolute path, under /mnt/data.
	Path string
	// Bytes is its length, as last seen.
	Bytes int64
	// CreatedAt is when the Manager first saw it.
	CreatedAt time.Time
	// Source is SourceUser (uploaded, copied in) or SourceAssistant (written by the code).
	Source string
}

// PutFile writes r's bytes (at most limit, when limit > 0) to path in container containerID
// of identity, starting the container if it has not started, and registers the file with
// source (SourceUser when empty); a file already at path is replaced and keeps its id. The
// write is atomic: on any error nothing of it is left. Errors: ErrUnknownContainer,
// ErrExpiredContainer, ErrInvalidPath, ErrFileTooLarge, ErrNoFileAccess, ErrUnavailable (the
// container could not be started), ctx's or r's error. Only the container's own failure (the
// backend finds it lost or deleted) expires it; r's error, whatever it matches, and ctx's
// leave it as it was.
func (m *Manager) PutFile(ctx context.Context, identity, containerID, path, source string, r io.Reader, limit int64) (FileInfo, error) {
	p, err := CleanPath(path)
	if err != nil {
		return FileInfo{}, err
	}
	m.mu.Lock()
	e, err := m.callEntryLocked(ctx, identity, containerID)
	if err != nil {
		m.mu.Unlock()
		return FileInfo{}, err
	}
	e.leases++ // not evicted nor expired while the file is written
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		m.unpinLocked(e)
		m.mu.Unlock()
	}()
	fi, err := m.putFile(ctx, e, p, source, r, limit)
	if errors.Is(err, errEntryDead) {
		return FileInfo{}, ErrExpiredContainer
	}
	return fi, err
}

func (l *localLease) PutFile(ctx context.Context, path, source string, r io.Reader, limit int64) (FileInfo, error) {
	if l.released {
		return FileInfo{}, errLeaseReleased
	}
	p, err := CleanPath(path)
	if err != nil {
		return FileInfo{}, err
	}
	for {
		e, err := l.current()
		if err != nil {
			return FileInfo{}, err
		}
		fi, err := l.m.putFile(ctx, e, p, source, r, limit)
		if errors.Is(err, errEntryDead) {
			continue // before anything was read of r: take the key's current container
		}
		return fi, err
	}
}

// putFile writes the file into e, pinned by the caller. It fails with errEntryDead, before
// anything is read of r, when e died before its container could be had.
func (m *Manager) putFile(ctx context.Context, e *entry, p, source string, r io.Reader, limit int64) (FileInfo, error) {
	if source == "" {
		source = SourceUser
	}
	m.mu.Lock()
	reserve := e.files.byPath[p] == nil
	if reserve {
		if err := m.takePlaceLocked(e, p); err != nil {
			m.mu.Unlock()
			return FileInfo{}, m.tableFullErr()
		}
		e.files.reserved++
	}
	m.mu.Unlock()
	defer func() {
		if !reserve {
			return
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		if !e.dead { // a dead entry's table is gone, its reservations with it
			e.files.reserved--
			m.refundLocked(e, fileCost(p))
		}
	}()
	c, err := m.startedContainer(ctx, e)
	if err != nil {
		return FileInfo{}, err
	}
	fa, ok := c.(Files)
	if !ok {
		return FileInfo{}, ErrNoFileAccess
	}
	st, err := fa.WriteFile(ctx, p, &sourceReader{r: r}, limit)
	var se *sourceError
	switch {
	case errors.As(err, &se), err != nil && ctx.Err() != nil:
		// The source's failure, or the caller's giving up, not the container's: whatever
		// it names (a copy from another container may fail with ErrClosed or ErrLost),
		// the container stays.
		return FileInfo{}, fmt.Errorf("write container file: %w", err)
	case err != nil:
		return FileInfo{}, m.fileErr(e, c, fmt.Errorf("write container file: %w", err))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if e.dead {
		return FileInfo{}, ErrExpiredContainer // deleted meanwhile, and the file with it
	}
	now := time.Now()
	fe := e.files.byPath[p]
	switch {
	case fe == nil && reserve:
		e.files.reserved-- // the place is taken now, by the file
		reserve = false
		fe = e.newFileLocked(p, source, now)
	case fe == nil:
		// The file at p was dropped from the table while this one was written.
		if err := m.takePlaceLocked(e, p); err != nil {
			return FileInfo{}, m.tableFullErr()
		}
		fe = e.newFileLocked(p, source, now)
	}
	fe.info.Bytes, fe.info.Source, fe.modTime = st.Size, source, st.ModTime
	m.touchLocked(ctx, e, now)
	return fe.info, nil
}

// tableFullErr is the error of an upload that finds no place in the files table.
func (m *Manager) tableFullErr() error {
	return fmt.Errorf("%w: the container holds as many files as it may", ErrFileTooLarge)
}

// sourceReader marks the errors of the reader a file is written from, so that they are told
// apart from the container's: a source that fails with ErrLost (another container's file,
// say) must not make the Manager take the container written to for lost.
type sourceReader struct{ r io.Reader }

func (s *sourceReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if err != nil && err != io.EOF {
		err = &sourceError{err: err}
	}
	return n, err
}

// sourceError is an error of a sourceReader's reader; it reads as, and matches, that error.
type sourceError struct{ err error }

func (e *sourceError) Error() string { return e.err.Error() }
func (e *sourceError) Unwrap() error { return e.err }

// startedContainer returns e's container, starting it if it has not started (waiting for a
// run in progress only then). It fails with errEntryDead when e died first.
func (m *Manager) startedContainer(ctx context.Context, e *entry) (Container, error) {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, ErrClosed
	}
	if e.dead {
		m.mu.Unlock()
		return nil, errEntryDead
	}
	if c := e.c; c != nil {
		m.mu.Unlock()
		return c, nil
	}
	m.mu.Unlock()
	select {
	case <-e.sem:
	case <-ctx.Done():
		return nil, fmt.Errorf("wait for the container: %w", ctx.Err())
	}
	defer func() { e.sem <- struct{}{} }()
	return m.ensureStarted(ctx, e)
}

// fileErr returns err, a file operation's failure on e's container c; when the container has
// died (ErrLost) or was deleted (ErrClosed), e is removed if it still holds c, and the error
// is ErrExpiredContainer: the container's state is gone.
func (m *Manager) fileErr(e *entry, c Container, err error) error {
	if !errors.Is(err, ErrLost) && !errors.Is(err, ErrClosed) {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	if !e.dead && e.c == c {
		m.log.Info("container lost: evicting it", zap.String("container_id", e.id), zap.Error(err))
		m.metrics.evictions.WithLabelValues("lost").Inc()
		m.removeLocked(e)
	}
	return fmt.Errorf("%w: %w", ErrExpiredContainer, err)
}

// callEntryLocked returns the live entry of container id of identity for a call on its files,
// and records the use.
func (m *Manager) callEntryLocked(ctx context.Context, identity, id string) (*entry, error) {
	if m.closed {
		return nil, ErrClosed
	}
	if identity == "" {
		return nil, ErrUnknownContainer
	}
	now := time.Now()
	if err := m.restoreIfHibernatedLocked(ctx, identity, id, now); err != nil {
		return nil, err
	}
	e, err := m.issuedLocked(ctx, identity, id, now)
	if err != nil {
		return nil, err
	}
	m.touchLocked(ctx, e, now)
	return e, nil
}

// fileCall is one call on a file of a live container: its entry, container and file access
// (nil when the container has not started), and the file's table entry.
type fileCall struct {
	e  *entry
	c  Container
	fa Files
	fe *fileEntry
	fi FileInfo // fe's info when the call began
}

// beginFileCall looks up file fileID of container containerID of identity. With pin, the
// container is held in use as by a lease (neither expired nor evicted) until the caller
// unpins it.
func (m *Manager) beginFileCall(ctx context.Context, identity, containerID, fileID string, pin bool) (fileCall, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, err := m.callEntryLocked(ctx, identity, containerID)
	if err != nil {
		return fileCall{}, err
	}
	fe := e.files.byID[fileID]
	if fe == nil || e.c == nil {
		return fileCall{}, ErrFileNotFound
	}
	fa, ok := e.c.(Files)
	if !ok {
		return fileCall{}, ErrNoFileAccess
	}
	if pin {
		e.leases++
	}
	return fileCall{e: e, c: e.c, fa: fa, fe: fe, fi: fe.info}, nil
}

// unpin ends the hold of a file call begun with pin.
func (m *Manager) unpin(e *entry) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.unpinLocked(e)
}

// seen records what a file call found: the file as st, or gone (the code removed it).
func (m *Manager) seen(e *entry, fe *fileEntry, st FileStat, gone bool) FileInfo {
	m.mu.Lock()
	defer m.mu.Unlock()
	if gone {
		m.dropFileLocked(e, fe)
		return FileInfo{}
	}
	if e.files.byID[fe.info.ID] == fe {
		// Not modTime: that stays the Manager's own write's, or the last run's, so that a
		// later run's scan still tells the code's change.
		fe.info.Bytes = st.Size
	}
	fi := fe.info
	fi.Bytes = st.Size
	return fi
}

// Files returns the files of container containerID of identity, by CreatedAt then ID
// ascending. Files the code removed since are dropped from the table (each file is looked at).
// Errors: ErrUnknownContainer, ErrExpiredContainer, ErrNoFileAccess.
func (m *Manager) Files(ctx context.Context, identity, containerID string) ([]FileInfo, error) {
	m.mu.Lock()
	e, err := m.callEntryLocked(ctx, identity, containerID)
	if err != nil {
		m.mu.Unlock()
		return nil, err
	}
	c := e.c
	entries := make([]*fileEntry, 0, len(e.files.byID))
	for _, fe := range e.files.byID {
		entries = append(entries, fe)
	}
	m.mu.Unlock()
	if len(entries) == 0 || c == nil {
		return []FileInfo{}, nil
	}
	fa, ok := c.(Files)
	if !ok {
		return nil, ErrNoFileAccess
	}
	out := make([]FileInfo, 0, len(entries))
	for _, fe := range entries {
		st, err := fa.StatFile(ctx, fe.info.Path) // Path never changes
		if errors.Is(err, ErrFileNotFound) {
			m.seen(e, fe, FileStat{}, true)
			continue
		}
		if err != nil {
			return nil, m.fileErr(e, c, fmt.Errorf("look at container file: %w", err))
		}
		out = append(out, m.seen(e, fe, st, false))
	}
	slices.SortFunc(out, func(a, b FileInfo) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.ID, b.ID))
	})
	return out, nil
}

// File returns file fileID of container containerID of identity. A file the code removed is
// dropped and fails with ErrFileNotFound, as an id never given does. Errors also:
// ErrUnknownContainer, ErrExpiredContainer, ErrNoFileAccess.
func (m *Manager) File(ctx context.Context, identity, containerID, fileID string) (FileInfo, error) {
	fc, err := m.beginFileCall(ctx, identity, containerID, fileID, false)
	if err != nil {
		return FileInfo{}, err
	}
	st, err := fc.fa.StatFile(ctx, fc.fi.Path)
	if errors.Is(err, ErrFileNotFound) {
		m.seen(fc.e, fc.fe, FileStat{}, true)
		return FileInfo{}, ErrFileNotFound
	}
	if err != nil {
		return FileInfo{}, m.fileErr(fc.e, fc.c, fmt.Errorf("look at container file: %w", err))
	}
	return m.seen(fc.e, fc.fe, st, false), nil
}

// OpenFile opens file fileID of container containerID of identity for reading: the content is
// streamed from the container as it is read, never held whole in memory. Until the reader is
// closed the container is in use, as a lease holds it: it neither expires nor is evicted at
// the caps (a download is not cut midway). The caller must close the reader; its Close ends
// the use and refreshes the container's last activity (a long download is activity). A
// reader still open when the container is deleted (DeleteContainer, Manager.Close) is ended:
// its reads fail with ErrClosed. Errors as File's.
func (m *Manager) OpenFile(ctx context.Context, identity, containerID, fileID string) (io.ReadCloser, FileInfo, error) {
	fc, err := m.beginFileCall(ctx, identity, containerID, fileID, true)
	if err != nil {
		return nil, FileInfo{}, err
	}
	rc, st, err := fc.fa.OpenFile(ctx, fc.fi.Path)
	if errors.Is(err, ErrFileNotFound) {
		m.unpin(fc.e)
		m.seen(fc.e, fc.fe, FileStat{}, true)
		return nil, FileInfo{}, ErrFileNotFound
	}
	if err != nil {
		m.unpin(fc.e)
		return nil, FileInfo{}, m.fileErr(fc.e, fc.c, fmt.Errorf("open container file: %w", err))
	}
	d := &download{rc: rc, m: m, e: fc.e}
	m.mu.Lock()
	if fc.e.dead {
		// Deleted while it opened: nothing may hold it.
		m.unpinLocked(fc.e)
		m.mu.Unlock()
		_ = rc.Close()
		return nil, FileInfo{}, ErrExpiredContainer
	}
	if fc.e.downloads == nil {
		fc.e.downloads = map[*download]struct{}{}
	}
	fc.e.downloads[d] = struct{}{}
	m.mu.Unlock()
	return d, m.seen(fc.e, fc.fe, st, false), nil
}

// download is a reader of a container file that holds its container in use until closed.
type download struct {
	rc io.ReadCloser
	m  *Manager
	e  *entry
	// ended is set once the container is deleted (by the Manager, under its mu): reads fail
	// from then on.
	ended     atomic.Bool
	closeOnce sync.Once // closes rc, once: by Close, or by the Manager ending it
	closeErr  error
	doneOnce  sync.Once // ends the hold, once
}

func (d *download) Read(p []byte) (int, error) {
	if d.ended.Load() {
		return 0, ErrClosed
	}
	n, err := d.rc.Read(p)
	if err != nil && d.ended.Load() {
		err = ErrClosed // rc was closed under the read
	}
	return n, err
}

// Close closes the reader and ends its container's use, refreshing its last activity.
// Idempotent.
func (d *download) Close() error {
	err := d.closeRC()
	d.doneOnce.Do(func() {
		d.m.mu.Lock()
		defer d.m.mu.Unlock()
		delete(d.e.downloads, d)
		d.m.unpinLocked(d.e)
	})
	return err
}

func (d *download) closeRC() error {
	d.closeOnce.Do(func() { d.closeErr = d.rc.Close() })
	return d.closeErr
}

// endDownloadsLocked ends the readers of e still open: e is being deleted. Their holds end
// with their Close.
func (e *entry) endDownloadsLocked() {
	for d := range e.downloads {
		d.ended.Store(true)
		_ = d.closeRC()
	}
	e.downloads = nil
}

// DeleteFile removes file fileID of container containerID of identity, from the container and
// the table. A file the code removed already fails with ErrFileNotFound, as an id never given
// does. Errors also: ErrUnknownContainer, ErrExpiredContainer, ErrNoFileAccess.
func (m *Manager) DeleteFile(ctx context.Context, identity, containerID, fileID string) error {
	fc, err := m.beginFileCall(ctx, identity, containerID, fileID, false)
	if err != nil {
		return err
	}
	err = fc.fa.RemoveFile(ctx, fc.fi.Path)
	if err != nil && !errors.Is(err, ErrFileNotFound) {
		return m.fileErr(fc.e, fc.c, fmt.Errorf("remove container file: %w", err))
	}
	m.seen(fc.e, fc.fe, FileStat{}, true)
	return err
}
