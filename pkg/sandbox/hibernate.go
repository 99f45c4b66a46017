package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/codeinterp/codeinterp/pkg/store"
)

// Hibernation is Anthropic's container lifetime: a container acquired with
// AcquireRequest.Hibernate that idles past its expiry is not expired but hibernated. The
// sweeper copies the files of its files table (what it holds under /mnt/data with an id:
// uploaded, or written by the code) to a directory of its own under HibernationConfig.Dir,
// ends its process and keeps its registration, marked Hibernated, on this node (its Owner). A
// request naming its id restores it: a fresh container under the same id, with the files put
// back (the same paths, file ids and sources) when it starts; the first run after that tells
// the model, in its Result's FilesNote, that its Python variables, imports, processes and shell
// session did not survive. Lifetime after its creation it is gone and forgotten: its id is
// unknown, as is the id of a hibernating container that was deleted, lost, or refused
// hibernation at the bounds.

// HibernationConfig configures hibernation (ManagerConfig.Hibernation). Dir "" without Private
// disables it.
type HibernationConfig struct {
	// Dir is the directory the hibernated containers' files are kept in, one directory per
	// container. The Manager creates it (mode 0700) and refuses one that is not a directory of
	// its own user with mode 0700: hibernation is then off, which is logged. It must be on the
	// server's side only: no container's mount may reach it. One Manager at a time uses it (a
	// lock file): another given it runs without hibernation, which is logged.
	Dir string
	// Private makes the Manager keep them in a directory of its own instead, made (mode 0700,
	// "codeinterp-hibernation-<random>") inside Dir (checked as above), or inside the system's
	// temporary directory when Dir is "", when the Manager starts, and removed by Close: several
	// servers on one machine each have theirs, and the containers hibernated there do not
	// outlive the Manager (with a Registry that does, a restarted server finds them gone: their
	// ids are unknown). A directory a process left when it ended without Close is removed by
	// the next Manager to make its own there, once no one holds its lock.
	Private bool
	// Lifetime is how long after its creation a hibernating container may be restored.
	// Default 30 days, as Anthropic's containers live.
	Lifetime time.Duration
	// MaxBytesPerIdentity bounds the bytes of the files one identity's hibernated containers
	// keep on disk. Default 1 GiB.
	MaxBytesPerIdentity int64
	// MaxPerIdentity bounds how many hibernated containers one identity has. Default 100.
	MaxPerIdentity int
	// MaxBytes bounds the bytes of all hibernated containers' files. Default 16 GiB.
	MaxBytes int64
	// MaxContainers bounds the hibernated containers in all. Default 10,000.
	MaxContainers int
}

// Defaults of a HibernationConfig's fields, used where a field is zero.
const (
	DefaultHibernationLifetime            = 30 * 24 * time.Hour
	DefaultHibernationMaxBytesPerIdentity = 1 << 30
	DefaultHibernationMaxPerIdentity      = 100
	DefaultHibernationMaxBytes            = 16 << 30
	DefaultHibernationMaxContainers       = 10000
)

func (c *HibernationConfig) setDefaults() {
	if c.Lifetime <= 0 {
		c.Lifetime = DefaultHibernationLifetime
	}
	if c.MaxBytesPerIdentity <= 0 {
		c.MaxBytesPerIdentity = DefaultHibernationMaxBytesPerIdentity
	}
	if c.MaxPerIdentity <= 0 {
		c.MaxPerIdentity = DefaultHibernationMaxPerIdentity
	}
	if c.MaxBytes <= 0 {
		c.MaxBytes = DefaultHibernationMaxBytes
	}
	if c.MaxContainers <= 0 {
		c.MaxContainers = DefaultHibernationMaxContainers
	}
}

// RestoredNote is what the first run of a restored container tells the model (in its Result's
// FilesNote).
const RestoredNote = "[This container was restored after being idle: its files under /mnt/data were kept, " +
	"but Python variables, imports, running processes and the shell session (working directory, " +
	"environment variables) of earlier runs did not survive. Re-run what the next steps need.]"

// errHibernated means a container id names a container hibernated on this node: restored when a
// request names it (see restoreIfHibernatedLocked).
var errHibernated = errors.New("sandbox: container hibernated")

// hibernateTimeout bounds the copy of one container's files to disk.
const hibernateTimeout = 5 * time.Minute

// manifestName is the file of a hibernated container's directory that says what it holds;
// its files are under blobDir, named by number (never by their container paths).
const (
	manifestName = "manifest.json"
	blobDir      = "f"
	skillBlobDir = "s"
	tmpPrefix    = ".tmp-"
	lockName     = ".lock"
	// privatePrefix begins the name of a directory of a Manager's own (HibernationConfig.Private).
	privatePrefix = "codeinterp-hibernation-"
)

// hibManifest is what a hibernated container's directory holds besides its files' bytes.
type hibManifest struct {
	ID       string    `json:"id"`
	Identity string    `json:"identity"`
	Created  time.Time `json:"created_at"`
	// Until is when its lifetime ends.
	Until time.Time `json:"until"`
	// MemoryLimit is its Spec's ("" for the provider's default); AllowedDomains its network
	// policy's allowlist (its domain secrets are never written: a restored container has none).
	MemoryLimit    string    `json:"memory_limit,omitempty"`
	AllowedDomains []string  `json:"allowed_domains,omitempty"`
	Files          []hibFile `json:"files"`
	// SkillsRoot and Skills are its Spec's Skills (nil: none), their bytes under skillBlobDir:
	// a restored container mounts them again.
	SkillsRoot string     `json:"skills_root,omitempty"`
	Skills     []hibSkill `json:"skills,omitempty"`
}

// hibSkill is one file of a hibernated container's skills.
type hibSkill struct {
	Path  string `json:"path"`
	Exec  bool   `json:"exec,omitempty"`
	Bytes int64  `json:"bytes"`
	Blob  string `json:"blob"`
}

// hibFile is one file of a hibernated container.
type hibFile struct {
	ID      string    `json:"id"`
	Path    string    `json:"path"`
	Source  string    `json:"source"`
	Created time.Time `json:"created_at"`
	Bytes   int64     `json:"bytes"`
	Blob    string    `json:"blob"`
}

// hibernated is one hibernated container on disk.
type hibernated struct {
	dir   string
	man   hibManifest
	bytes int64
}

// hibIndex is what the Manager knows of the hibernated containers on its disk. Guarded by
// Manager.mu.
type hibIndex struct {
	cfg HibernationConfig
	// lock holds the directory's lock file, locked (flock) while the Manager uses it, so that
	// two servers given one directory never remove each other's containers; closed by Close.
	lock  *os.File
	byID  map[string]*hibernated
	bytes int64
	// perIdentity are the bytes and count of each identity's.
	perIdentity map[string]hibUsage
}

type hibUsage struct {
	bytes int64
	n     int
}

func (x *hibIndex) add(h *hibernated) {
	x.byID[h.man.ID] = h
	x.bytes += h.bytes
	u := x.perIdentity[h.man.Identity]
	u.bytes += h.bytes
	u.n++
	x.perIdentity[h.man.Identity] = u
}

func (x *hibIndex) remove(id string) *hibernated {
	h := x.byID[id]
	if h == nil {
		return nil
	}
	delete(x.byID, id)
	x.bytes -= h.bytes
	u := x.perIdentity[h.man.Identity]
	u.bytes -= h.bytes
	u.n--
	if u.n <= 0 {
		delete(x.perIdentity, h.man.Identity)
	} else {
		x.perIdentity[h.man.Identity] = u
	}
	return h
}

// room returns how many bytes one more hibernated container of identity may keep, or an
// error saying which bound it is at. The bounds refuse a new hibernation rather than evict an
// older one: a container hibernated earlier is, natively, still there.
func (x *hibIndex) room(identity string) (int64, error) {
	u := x.perIdentity[identity]
	switch {
	case len(x.byID) >= x.cfg.MaxContainers:
		return 0, fmt.Errorf("%d containers hibernated in all", x.cfg.MaxContainers)
	case u.n >= x.cfg.MaxPerIdentity:
		return 0, fmt.Errorf("%d containers of this identity hibernated", x.cfg.MaxPerIdentity)
	}
	return min(x.cfg.MaxBytes-x.bytes, x.cfg.MaxBytesPerIdentity-u.bytes), nil
}

// lastingMeta returns the entryMeta of a new lasting container for r.
func (m *Manager) lastingMeta(r AcquireRequest) entryMeta {
	return entryMeta{expiresAfter: m.cfg.SessionIdleTTL, hibernate: r.Hibernate, prefix: r.IDPrefix}
}

// checkDir makes dir (mode 0700) if it is missing and checks that it is a directory, not a
// symlink, of this process's user, reachable by no one else.
func checkDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	if fi.Mode().Perm() != 0o700 {
		return fmt.Errorf("%s has mode %v, not 0700", dir, fi.Mode().Perm())
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("%s belongs to uid %d, not to this process's %d", dir, st.Uid, os.Geteuid())
	}
	return nil
}

// loadHibernated returns the index of the hibernated containers under the configured
// directory (nil when hibernation is off): those the Registry still names as this node's
// hibernated containers, within their lifetime. Any other directory there is removed (left by a
// hibernation that did not finish, or by a container the Registry forgot).
func (m *Manager) loadHibernated() *hibIndex {
	cfg := m.cfg.Hibernation
	if cfg.Dir == "" && !cfg.Private {
		return nil
	}
	cfg.setDefaults()
	if cfg.Private {
		if cfg.Dir != "" {
			if err := checkDir(cfg.Dir); err != nil {
				m.log.Error("hibernation off: its directory is not usable", zap.Error(err))
				return nil
			}
		}
		m.removeStalePrivate(cfg.Dir)
		dir, err := os.MkdirTemp(cfg.Dir, privatePrefix) // mode 0700
		if err != nil {
			m.log.Error("hibernation off: no directory of its own", zap.Error(err))
			return nil
		}
		cfg.Dir = dir
	}
	drop := func() {
		if cfg.Private {
			_ = os.RemoveAll(cfg.Dir)
		}
	}
	if err := checkDir(cfg.Dir); err != nil {
		drop()
		m.log.Error("hibernation off: its directory is not usable", zap.Error(err))
		return nil
	}
	lock, err := lockDir(cfg.Dir)
	if err != nil {
		drop()
		m.log.Error("hibernation off: its directory is not this server's alone", zap.Error(err))
		return nil
	}
	x := &hibIndex{cfg: cfg, lock: lock, byID: map[string]*hibernated{}, perIdentity: map[string]hibUsage{}}
	if cfg.Private {
		return x // made just now: empty
	}
	des, err := os.ReadDir(cfg.Dir)
	if err != nil {
		_ = lock.Close()
		m.log.Error("hibernation off: its directory is not readable", zap.Error(err))
		return nil
	}
	ctx, now := context.Background(), time.Now()
	for _, de := range des {
		if de.Name() == lockName {
			continue
		}
		dir := filepath.Join(cfg.Dir, de.Name())
		h, err := readHibernated(dir)
		if err == nil && h.man.ID == de.Name() && now.Before(h.man.Until) {
			r, ok, err := m.reg.Lookup(ctx, h.man.ID)
			if err == nil && ok && r.Hibernated && !r.Expired && r.Owner == m.cfg.Node && r.Identity == h.man.Identity {
				x.add(h)
				continue
			}
		}
		_ = os.RemoveAll(dir)
	}
	return x
}

// stalePrivateAge is how old a private hibernation directory whose lock no one holds must be
// for removeStalePrivate to remove it: a server that has just made its own holds its lock a
// moment later.
const stalePrivateAge = time.Minute

// removeStalePrivate removes the private hibernation directories (HibernationConfig.Private)
// that servers of this user left in parent ("" for the system's temporary directory) when they
// ended without Close (killed, or crashed): those whose lock no one holds, made over
// stalePrivateAge ago. Their containers were this node's alone, and are gone with their server.
func (m *Manager) removeStalePrivate(parent string) {
	if parent == "" {
		parent = os.TempDir()
	}
	dirs, err := filepath.Glob(filepath.Join(parent, privatePrefix+"*"))
	if err != nil {
		return
	}
	for _, dir := range dirs {
		fi, err := os.Lstat(dir)
		if err != nil || !fi.IsDir() || time.Since(fi.ModTime()) < stalePrivateAge {
			continue
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Geteuid() {
			continue
		}
		f, err := os.OpenFile(filepath.Join(dir, lockName), os.O_RDWR|syscall.O_NOFOLLOW, 0)
		if err != nil {
			continue // no lock file: not (yet) a server's
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
			if err := os.RemoveAll(dir); err != nil {
				m.log.Warn("remove a stale hibernation directory", zap.String("dir", dir), zap.Error(err))
			} else {
				m.log.Info("removed a stale hibernation directory", zap.String("dir", dir))
			}
		}
		_ = f.Close()
	}
}

// lockDir locks dir's lock file for this process, or fails when another holds it.
func lockDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, lockName), os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("lock %s: %w (another server uses it)", dir, err)
	}
	return f, nil
}

// unlockHibernation lets go of the hibernation directory (Close, once all is done), and
// removes it when it is the Manager's own (HibernationConfig.Private).
func (m *Manager) unlockHibernation() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.hib == nil || m.hib.lock == nil {
		return
	}
	_ = m.hib.lock.Close()
	m.hib.lock = nil
	if m.hib.cfg.Private {
		if err := os.RemoveAll(m.hib.cfg.Dir); err != nil {
			m.log.Warn("remove the hibernation directory", zap.Error(err))
		}
	}
}

// readHibernated reads the manifest of the hibernated container in dir.
func readHibernated(dir string) (*hibernated, error) {
	b, err := os.ReadFile(filepath.Join(dir, manifestName))
	if err != nil {
		return nil, err
	}
	h := &hibernated{dir: dir}
	if err := json.Unmarshal(b, &h.man); err != nil {
		return nil, err
	}
	for _, f := range h.man.Files {
		h.bytes += f.Bytes
	}
	for _, f := range h.man.Skills {
		h.bytes += f.Bytes
	}
	return h, nil
}

// readSkills reads the skills' files of hibernated container h (nil when it has none), for
// its restored container's Spec.
func readSkills(h *hibernated) (*SkillFiles, error) {
	if len(h.man.Skills) == 0 {
		return nil, nil
	}
	s := &SkillFiles{Root: h.man.SkillsRoot, Files: make([]SkillFile, 0, len(h.man.Skills))}
	for _, f := range h.man.Skills {
		b, err := os.ReadFile(filepath.Join(h.dir, skillBlobDir, f.Blob))
		if err != nil {
			return nil, fmt.Errorf("read skill %s: %w", f.Path, err)
		}
		s.Files = append(s.Files, SkillFile{Path: f.Path, Data: b, Exec: f.Exec})
	}
	return s, nil
}

// restorableLocked reports whether hibernated container r can be restored at now: within its
// lifetime, with its files on this node's disk.
func (m *Manager) restorableLocked(r store.Registration, now time.Time) bool {
	if m.hib == nil {
		return false
	}
	h := m.hib.byID[r.ID]
	return h != nil && now.Before(h.man.Until)
}

// dropHibernatedLocked forgets container id, hibernated, and removes its files.
func (m *Manager) dropHibernatedLocked(id string) {
	m.forgetLocked(id)
	if m.hib == nil {
		return
	}
	if h := m.hib.remove(id); h != nil {
		m.removeDirLocked(h.dir)
	}
}

// removeDirLocked removes dir off the request path; Close waits for it.
func (m *Manager) removeDirLocked(dir string) {
	rm := func() {
		if err := os.RemoveAll(dir); err != nil {
			m.log.Warn("remove a hibernated container's files", zap.Error(err))
		}
	}
	if m.closed {
		rm() // no goroutine may start once Close waits
		return
	}
	m.goLocked(rm)
}

// restoreIfHibernatedLocked restores container id of identity if it is hibernated on this
// node, so that it is live again under its id. Anything else is left to issuedLocked.
func (m *Manager) restoreIfHibernatedLocked(ctx context.Context, identity, id string, now time.Time) error {
	if m.hib == nil {
		return nil
	}
	r, e, ok, err := m.lookupLocked(ctx, identity, id)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if !ok || e != nil || !r.Hibernated || r.Owner != m.cfg.Node {
		return nil
	}
	_, err = m.restoreLocked(ctx, r, now)
	return err
}

// restoreLocked makes hibernated container r (restorable) live again under its id, within
// the caps as a new container is: its files table as it was, its files put back when it
// starts (restoreFiles), and the model told on its first run. It fails as newEntryLocked does.
func (m *Manager) restoreLocked(ctx context.Context, r store.Registration, now time.Time) (*entry, error) {
	h := m.hib.byID[r.ID]
	k := sandboxKey{kind: kindKept, identity: r.Identity, name: randomHex(16)}
	if r.Session != "" {
		k = sandboxKey{kind: kindSession, identity: r.Identity, name: r.Session}
	}
	spec := Spec{MemoryLimit: h.man.MemoryLimit}
	if h.man.AllowedDomains != nil {
		spec.NetworkPolicy = &NetworkPolicy{AllowedDomains: h.man.AllowedDomains}
	}
	// Its skills are read back under the lock: at most MaxSkillBytes, from this node's disk.
	sk, err := readSkills(h)
	if err != nil {
		return nil, fmt.Errorf("%w: restore container: %w", ErrUnavailable, err)
	}
	spec.Skills = sk
	prefix := r.ID[:strings.LastIndexByte(r.ID, '_')+1]
	meta := entryMeta{name: r.Name, expiresAfter: r.ExpiresAfter, hibernate: true, prefix: prefix}
	e, err := m.enterLocked(ctx, r.ID, k, spec, meta, r.CreatedAt, now)
	if err != nil {
		return nil, fmt.Errorf("restore container: %w", err)
	}
	m.hib.remove(r.ID)
	e.restore, e.restoredNote = h, true
	for _, f := range h.man.Files {
		if m.takePlaceLocked(e, f.Path) != nil {
			continue // put back, without an id
		}
		e.files.add(&fileEntry{info: FileInfo{ID: f.ID, ContainerID: e.id, Path: f.Path, Bytes: f.Bytes,
			CreatedAt: f.Created, Source: f.Source}})
	}
	m.metrics.starts.WithLabelValues("restored").Inc()
	m.log.Debug("container restored", zap.String("container_id", e.id))
	return e, nil
}

// restoreFiles puts the files of e's hibernated state back into its container c, which has
// just started; then its directory goes. The caller holds e.sem.
func (m *Manager) restoreFiles(ctx context.Context, e *entry, c Container) {
	m.mu.Lock()
	h := e.restore
	e.restore = nil
	m.mu.Unlock()
	if h == nil {
		return
	}
	// The files go back whatever becomes of the request that started the container: its
	// directory is removed after.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), hibernateTimeout)
	defer cancel()
	fa, _ := c.(Files)
	failed := 0
	for _, f := range h.man.Files {
		st, err := putBack(ctx, fa, filepath.Join(h.dir, blobDir, f.Blob), f.Path)
		if err != nil {
			m.log.Warn("restore a file", zap.String("container_id", e.id), zap.Error(err))
			failed++
			continue
		}
		m.mu.Lock()
		if fe := e.files.byID[f.ID]; fe != nil && fe.info.Path == f.Path {
			fe.modTime, fe.info.Bytes = st.ModTime, st.Size
		}
		m.mu.Unlock()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if failed > 0 && e.restoredNote {
		e.restoreFailed = failed
	}
	m.removeDirLocked(h.dir)
}

// putBack writes the blob at src to path through fa.
func putBack(ctx context.Context, fa Files, src, path string) (FileStat, error) {
	if fa == nil {
		return FileStat{}, ErrNoFileAccess
	}
	f, err := os.Open(src)
	if err != nil {
		return FileStat{}, err
	}
	defer f.Close()
	return fa.WriteFile(ctx, path, f, 0)
}

// takeRestoredNote returns what the first run of a restored container e tells the model, once;
// "" otherwise.
func (m *Manager) takeRestoredNote(e *entry) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !e.restoredNote {
		return ""
	}
	e.restoredNote = false
	if e.restoreFailed > 0 {
		return RestoredNote + fmt.Sprintf("\n[%d of its files could not be put back.]", e.restoreFailed)
	}
	return RestoredNote
}

// sweepOnce hibernates the hibernating containers idle past their expiry and forgets the
// hibernated ones past their lifetime; the pruner runs it after each of its rounds.
func (m *Manager) sweepOnce(now time.Time) {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	var due []*entry
	for _, e := range m.live {
		if !e.meta.hibernate || e.leases > 0 || !m.maybeIdleLocked(e, now) {
			continue
		}
		r, ok := m.registrationLocked(e)
		if !ok || now.Sub(r.LastUsed) < m.expiryOf(r) {
			continue
		}
		if !now.Before(r.CreatedAt.Add(m.hib.cfg.Lifetime)) {
			m.metrics.evictions.WithLabelValues("lifetime").Inc()
			m.removeLocked(e) // forgotten
			continue
		}
		e.leases++ // held while its files are copied: neither used nor evicted meanwhile
		due = append(due, e)
	}
	for id, h := range m.hib.byID {
		if !now.Before(h.man.Until) {
			m.dropHibernatedLocked(id)
		}
	}
	m.mu.Unlock()
	for _, e := range due {
		m.hibernate(e, now)
	}
}

// hibernate hibernates e, held by one lease of the sweeper's, idle since before now: its files
// are copied to disk, its registration marked Hibernated, its container deleted. At the
// bounds, or when its files cannot be copied, it is removed instead (and forgotten).
func (m *Manager) hibernate(e *entry, now time.Time) {
	select {
	case <-e.sem:
	case <-m.ctx.Done():
		m.unpin(e)
		return
	}
	defer func() { e.sem <- struct{}{} }()
	m.mu.Lock()
	if m.closed || e.dead || e.leases > 1 {
		m.unpinLocked(e)
		m.mu.Unlock()
		return
	}
	r, ok := m.registrationLocked(e)
	if !ok {
		m.unpinLocked(e)
		m.mu.Unlock()
		return
	}
	if e.restore != nil {
		// Restored but never started since: its files are still on disk, as they were.
		m.rehibernateLocked(e, r)
		m.mu.Unlock()
		return
	}
	man := hibManifest{ID: e.id, Identity: e.key.identity, Created: r.CreatedAt, Until: r.CreatedAt.Add(m.hib.cfg.Lifetime),
		MemoryLimit: e.spec.MemoryLimit}
	if p := e.spec.NetworkPolicy; p != nil {
		man.AllowedDomains = slices.Clone(p.AllowedDomains)
	}
	skills := e.spec.Skills
	if e.c != nil {
		for _, fe := range e.files.byPath {
			man.Files = append(man.Files, hibFile{ID: fe.info.ID, Path: fe.info.Path, Source: fe.info.Source, Created: fe.info.CreatedAt})
		}
		slices.SortFunc(man.Files, func(a, b hibFile) int { return strings.Compare(a.Path, b.Path) })
	}
	room, err := m.hib.room(e.key.identity)
	if err != nil {
		m.refuseHibernationLocked(e, err)
		m.mu.Unlock()
		return
	}
	c := e.c
	m.mu.Unlock()

	ctx, cancel := context.WithTimeout(m.ctx, hibernateTimeout)
	defer cancel()
	h, err := m.writeHibernated(ctx, c, man, skills, room)

	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case err == nil && (m.closed || e.dead || e.leases > 1):
		// Closed, deleted, or asked for while its files were copied: it stays as it is.
		m.removeDirLocked(h.dir)
		m.unpinLocked(e)
		return
	case err != nil:
		m.refuseHibernationLocked(e, err)
		return
	}
	r.Hibernated = true
	if err := m.reg.Add(context.Background(), r); err != nil {
		m.removeDirLocked(h.dir)
		m.refuseHibernationLocked(e, fmt.Errorf("register: %w", err))
		return
	}
	m.hib.add(h)
	e.leases--
	m.detachLocked(e)
	m.metrics.evictions.WithLabelValues("hibernated").Inc()
	m.log.Debug("container hibernated", zap.String("container_id", e.id), zap.Int64("bytes", h.bytes))
}

// rehibernateLocked hibernates again e, registered as r and held by the sweeper's lease, which
// was restored and never started: its hibernated state is still on disk.
func (m *Manager) rehibernateLocked(e *entry, r store.Registration) {
	r.Hibernated = true
	if err := m.reg.Add(context.Background(), r); err != nil {
		m.refuseHibernationLocked(e, fmt.Errorf("register: %w", err))
		return
	}
	m.hib.add(e.restore)
	e.restore = nil
	e.leases--
	m.detachLocked(e)
	m.metrics.evictions.WithLabelValues("hibernated").Inc()
}

// refuseHibernationLocked removes e, held by the sweeper's lease, which could not hibernate
// (why says why): it is gone as an expired container is, and forgotten.
func (m *Manager) refuseHibernationLocked(e *entry, why error) {
	m.unpinLocked(e)
	if m.closed || e.dead {
		return
	}
	m.log.Info("container not hibernated: deleting it", zap.String("container_id", e.id), zap.Error(why))
	m.metrics.evictions.WithLabelValues("idle").Inc()
	m.removeLocked(e)
}

// writeHibernated copies the files man lists from c (nil when it never started) and the
// skills' files sk (nil: none) into a new directory of the container's under the hibernation
// directory, at most limit bytes in all, and writes man there: atomically (a temporary directory renamed into place). On an error
// nothing of it is left.
func (m *Manager) writeHibernated(ctx context.Context, c Container, man hibManifest, sk *SkillFiles, limit int64) (h *hibernated, err error) {
	tmp, err := os.MkdirTemp(m.hib.cfg.Dir, tmpPrefix) // mode 0700
	if err != nil {
		return nil, fmt.Errorf("hibernate: %w", err)
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(tmp)
		}
	}()
	if err := os.Mkdir(filepath.Join(tmp, blobDir), 0o700); err != nil {
		return nil, fmt.Errorf("hibernate: %w", err)
	}
	fa, _ := c.(Files)
	if fa == nil && len(man.Files) > 0 {
		return nil, ErrNoFileAccess
	}
	var total int64
	files := man.Files[:0]
	for i, f := range man.Files {
		f.Blob = strconv.Itoa(i)
		n, err := copyOut(ctx, fa, f.Path, filepath.Join(tmp, blobDir, f.Blob), limit-total)
		if errors.Is(err, ErrFileNotFound) {
			continue // removed by the code since
		}
		if err != nil {
			return nil, fmt.Errorf("hibernate %s: %w", f.Path, err)
		}
		f.Bytes = n
		total += n
		files = append(files, f)
	}
	man.Files = files
	if sk != nil {
		if err := os.Mkdir(filepath.Join(tmp, skillBlobDir), 0o700); err != nil {
			return nil, fmt.Errorf("hibernate: %w", err)
		}
		man.SkillsRoot = sk.Root
		for i, f := range sk.Files {
			n := int64(len(f.Data))
			if n > limit-total {
				return nil, errHibernationFull
			}
			hs := hibSkill{Path: f.Path, Exec: f.Exec, Bytes: n, Blob: strconv.Itoa(i)}
			if err := writeSynced(filepath.Join(tmp, skillBlobDir, hs.Blob), f.Data); err != nil {
				return nil, fmt.Errorf("hibernate skill %s: %w", f.Path, err)
			}
			total += n
			man.Skills = append(man.Skills, hs)
		}
	}
	b, err := json.Marshal(man)
	if err != nil {
		return nil, fmt.Errorf("hibernate: %w", err)
	}
	if err := writeSynced(filepath.Join(tmp, manifestName), b); err != nil {
		return nil, fmt.Errorf("hibernate: %w", err)
	}
	dir := filepath.Join(m.hib.cfg.Dir, man.ID)
	_ = os.RemoveAll(dir) // left by an earlier hibernation the Registry forgot
	if err := os.Rename(tmp, dir); err != nil {
		return nil, fmt.Errorf("hibernate: %w", err)
	}
	syncDir(m.hib.cfg.Dir)
	return &hibernated{dir: dir, man: man, bytes: total}, nil
}

// errHibernationFull means a container's files are beyond the room hibernation has left.
var errHibernationFull = errors.New("its files are beyond the bytes left for hibernated containers")

// copyOut copies the file at path through fa to dst (created, mode 0600), at most limit bytes.
func copyOut(ctx context.Context, fa Files, path, dst string, limit int64) (int64, error) {
	rc, st, err := fa.OpenFile(ctx, path)
	if err != nil {
		return 0, err
	}
	defer rc.Close()
	if st.Size > limit {
		return 0, errHibernationFull
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(out, io.LimitReader(rc, limit+1))
	if err == nil && n > limit {
		err = errHibernationFull
	}
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return n, err
}

// writeSynced writes b to a new file at p (mode 0600) and syncs it.
func writeSynced(p string, b []byte) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// syncDir syncs directory dir, so that a rename in it lasts; best effort.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
}

// Hibernated returns how many containers are hibernated on this node and the bytes their
// files keep on disk.
func (m *Manager) Hibernated() (containers int, bytes int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.hib == nil {
		return 0, 0
	}
	return len(m.hib.byID), m.hib.bytes
}
