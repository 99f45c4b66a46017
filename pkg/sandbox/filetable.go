package sandbox

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// fileEntry is one file of a container's files table.
type fileEntry struct {
	info FileInfo
	// modTime is the file's modification time as the Manager last saw it: for a file it
	// wrote, the end of the write, which tells it apart from the code's later rewrite.
	modTime time.Time
}

// FileEntryOverhead is what one file of a files table costs the server besides its path's
// bytes: the entry, its id, and its two index slots, rounded up (TestFileEntryOverhead measures
// it). A table's cost is the sum of fileCost over its files.
const FileEntryOverhead = 384

// fileCost is what a file at path p costs its table.
func fileCost(p string) int64 { return int64(len(p)) + FileEntryOverhead }

// fileTable is a container's files, by path and by id, at most MaxFilesPerContainer files and
// ManagerConfig.MaxFileTableBytes of cost. The zero value is empty. Guarded by Manager.mu.
type fileTable struct {
	byPath map[string]*fileEntry
	byID   map[string]*fileEntry
	// reserved counts the writes in progress of files not in the table yet: each holds a
	// place (and its cost in bytes), so that concurrent uploads cannot take the table past
	// its bounds.
	reserved int
	// bytes is the cost of the files and of the reserved places, as charged to the Manager's
	// budgets (chargeLocked).
	bytes int64
}

func (t *fileTable) full() bool { return len(t.byPath)+t.reserved >= MaxFilesPerContainer }

func (t *fileTable) add(fe *fileEntry) {
	if t.byPath == nil {
		t.byPath, t.byID = map[string]*fileEntry{}, map[string]*fileEntry{}
	}
	t.byPath[fe.info.Path] = fe
	t.byID[fe.info.ID] = fe
}

// errTableFull is why a file could not be given a place in a files table.
var errTableFull = errors.New("the container's file table is full")

// takePlaceLocked takes the place of a new file at p in e's table: one of
// MaxFilesPerContainer, and its cost in the table's, the identity's and the Manager's budgets.
// It fails with errTableFull, taking nothing, when any bound would be passed.
func (m *Manager) takePlaceLocked(e *entry, p string) error {
	n := fileCost(p)
	id := e.key.identity
	if e.files.full() || e.files.bytes+n > m.cfg.MaxFileTableBytes ||
		m.fileBytes[id]+n > m.cfg.MaxFileTableBytesPerIdentity || m.allFileBytes+n > m.cfg.MaxAllFileTableBytes {
		return errTableFull
	}
	e.files.bytes += n
	m.fileBytes[id] += n
	m.allFileBytes += n
	return nil
}

// refundLocked returns n bytes of e's table's cost to the budgets.
func (m *Manager) refundLocked(e *entry, n int64) {
	id := e.key.identity
	e.files.bytes -= n
	m.allFileBytes -= n
	if m.fileBytes[id] -= n; m.fileBytes[id] <= 0 {
		delete(m.fileBytes, id)
	}
}

// dropFileLocked removes fe from e's table if the table still holds it.
func (m *Manager) dropFileLocked(e *entry, fe *fileEntry) {
	t := &e.files
	if t.byID[fe.info.ID] == fe {
		delete(t.byID, fe.info.ID)
		delete(t.byPath, fe.info.Path)
		m.refundLocked(e, fileCost(fe.info.Path))
	}
}

// clearFilesLocked empties e's table (e is being removed), places reserved included.
func (m *Manager) clearFilesLocked(e *entry) {
	m.refundLocked(e, e.files.bytes)
	e.files = fileTable{}
}

// newFileLocked adds a new file at path to e's table, first seen at now, in a place taken
// with takePlaceLocked.
func (e *entry) newFileLocked(path, source string, now time.Time) *fileEntry {
	fe := &fileEntry{info: FileInfo{ID: "cfile_" + randomHex(16), ContainerID: e.id, Path: path, CreatedAt: now, Source: source}}
	e.files.add(fe)
	return fe
}

// registerRunFiles registers the files a run of e's container c created or changed
// (res.Files) in e's table, as written by the code, and gives each its id. A file the Manager
// wrote that the run did not change (the run's scan saw it only because it was new to the
// container) is left out of res.Files and keeps its source.
func (m *Manager) registerRunFiles(ctx context.Context, e *entry, c Container, res *Result) {
	fa, _ := c.(Files)
	type check struct {
		fe *fileEntry
		st FileStat
		ok bool
	}
	checks := map[string]*check{}
	m.mu.Lock()
	for _, f := range res.Files {
		// The Manager's writes: uploads, and the files a restore put back (modTime set).
		if fe := e.files.byPath[f.Path]; fe != nil && (fe.info.Source == SourceUser || !fe.modTime.IsZero()) && fa != nil {
			checks[f.Path] = &check{fe: fe}
		}
	}
	m.mu.Unlock()
	for p, ck := range checks {
		st, err := fa.StatFile(ctx, p)
		ck.st, ck.ok = st, err == nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if e.dead {
		return
	}
	now := time.Now()
	out := res.Files[:0]
	unlisted := 0
	for _, f := range res.Files {
		fe := e.files.byPath[f.Path]
		ck := checks[f.Path]
		if ck != nil && ck.fe == fe && ck.ok && ck.st.Size == fe.info.Bytes && ck.st.ModTime.Equal(fe.modTime) {
			continue // the Manager's own write, unchanged
		}
		if fe == nil {
			if m.takePlaceLocked(e, f.Path) != nil {
				out = append(out, f) // listed, without an id
				unlisted++
				continue
			}
			fe = e.newFileLocked(f.Path, SourceAssistant, now)
		}
		fe.info.Bytes = f.Size
		if ck != nil && ck.fe == fe && ck.ok {
			fe.modTime = ck.st.ModTime
		}
		f.ID = fe.info.ID
		out = append(out, f)
	}
	res.Files = out
	if unlisted > 0 {
		res.AddFilesNote(fmt.Sprintf("[%d of the files written have no file id, so they cannot be cited or downloaded: "+
			"the container's file table is full; delete files to make room]", unlisted))
	}
}

// MaxFilesPerContainer bounds the files table of one container: the files the Manager knows
// of (uploaded, or written by the code) and gives ids to.
const MaxFilesPerContainer = 10000
