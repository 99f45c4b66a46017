package skills

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"slices"
	"strconv"
	"sync"
	"time"
)

// Bounds bound a [Store]'s skills, whichever keeps them. The zero value of each field means its
// default (see WithDefaults).
type Bounds struct {
	// MaxSkillsPerIdentity bounds one identity's skills; zero means 100.
	MaxSkillsPerIdentity int
	// MaxVersionsPerSkill bounds one skill's versions; zero means 50.
	MaxVersionsPerSkill int
	// MaxBytesPerIdentity bounds one identity's bundles' bytes, uncompressed; zero means 200 MiB.
	MaxBytesPerIdentity int64
	// MaxBytes bounds every identity's bundles' bytes together; zero means 1 GiB.
	MaxBytes int64
}

// WithDefaults returns b with each zero field set to its default.
func (b Bounds) WithDefaults() Bounds {
	if b.MaxSkillsPerIdentity <= 0 {
		b.MaxSkillsPerIdentity = 100
	}
	if b.MaxVersionsPerSkill <= 0 {
		b.MaxVersionsPerSkill = 50
	}
	if b.MaxBytesPerIdentity <= 0 {
		b.MaxBytesPerIdentity = 200 << 20
	}
	if b.MaxBytes <= 0 {
		b.MaxBytes = 1 << 30
	}
	return b
}

// MemoryConfig bounds a [Memory]. The zero value of each field means its default.
type MemoryConfig struct {
	Bounds
	// MaxAttached bounds the containers whose skills Attach records, every identity's
	// together (the oldest record is forgotten first); zero means 10000.
	MaxAttached int
	// Now returns the time; nil means time.Now.
	Now func() time.Time
}

// Memory is a [Store] in the process's memory: the single process's (a fleet's replicas
// would each see their own). It is safe for concurrent use.
type Memory struct {
	cfg MemoryConfig

	// mu guards the fields below.
	mu     sync.Mutex
	skills map[string]map[string]*memSkill // identity → id → skill
	used   map[string]int64                // identity → bytes
	total  int64
	// attached are Attach's records, by attachKey; attachOrder their keys, oldest first
	// (a key replaced is found again further on, and skipped when its turn comes).
	attached    map[attachKey]attachRec
	attachOrder []attachEntry
	attachSeq   uint64
}

type attachEntry struct {
	key attachKey
	seq uint64
}

type attachKey struct{ identity, container string }

type attachRec struct {
	seq uint64
	as  []Announced
}

var _ Store = (*Memory)(nil)

type memSkill struct {
	id        string
	createdAt time.Time
	display   string
	def       int
	next      int   // the number of the next version
	lastEpoch int64 // the Epoch of the version made last
	versions  map[int]*memVersion
}

type memVersion struct {
	v      Version
	bundle *Bundle
	size   int64
}

// NewMemory returns an empty Memory bounded by cfg.
func NewMemory(cfg MemoryConfig) *Memory {
	cfg.Bounds = cfg.Bounds.WithDefaults()
	if cfg.MaxAttached <= 0 {
		cfg.MaxAttached = 10000
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Memory{cfg: cfg, skills: map[string]map[string]*memSkill{}, used: map[string]int64{}, attached: map[attachKey]attachRec{}}
}

func newID(prefix string) string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails
	return prefix + hex.EncodeToString(b[:])
}

// Create implements [Store].
func (m *Memory) Create(_ context.Context, identity string, b *Bundle) (Skill, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.skills[identity]) >= m.cfg.MaxSkillsPerIdentity {
		return Skill{}, ErrFull
	}
	s := &memSkill{id: newID("skill_"), createdAt: m.cfg.Now(), display: b.DisplayName, next: 1, versions: map[int]*memVersion{}}
	if _, err := m.addLocked(identity, s, b, true); err != nil {
		return Skill{}, err
	}
	if m.skills[identity] == nil {
		m.skills[identity] = map[string]*memSkill{}
	}
	m.skills[identity][s.id] = s
	return s.show(), nil
}

// addLocked adds a version of b to s, accounting its bytes to identity.
func (m *Memory) addLocked(identity string, s *memSkill, b *Bundle, makeDefault bool) (Version, error) {
	size := b.Size()
	if len(s.versions) >= m.cfg.MaxVersionsPerSkill || m.used[identity]+size > m.cfg.MaxBytesPerIdentity || m.total+size > m.cfg.MaxBytes {
		return Version{}, ErrFull
	}
	n := s.next
	s.next++
	now := m.cfg.Now()
	s.lastEpoch = NextEpoch(now, s.lastEpoch)
	v := &memVersion{bundle: b, size: size, v: Version{ID: newID("skillver_"), SkillID: s.id, Version: strconv.Itoa(n),
		Epoch: strconv.FormatInt(s.lastEpoch, 10), Name: b.Name, Description: b.Description, CreatedAt: now}}
	s.versions[n] = v
	if makeDefault || s.def == 0 {
		s.def = n
	}
	m.used[identity] += size
	m.total += size
	return v.v, nil
}

func (s *memSkill) latest() int {
	l := 0
	for n := range s.versions {
		l = max(l, n)
	}
	return l
}

func (s *memSkill) show() Skill {
	d := s.versions[s.def].v
	return Skill{ID: s.id, Name: d.Name, Description: d.Description, CreatedAt: s.createdAt,
		DefaultVersion: strconv.Itoa(s.def), LatestVersion: strconv.Itoa(s.latest()), DisplayName: s.display}
}

// version returns the version named version ("" the default, "latest", a number).
func (s *memSkill) version(version string) (int, *memVersion, error) {
	for n, v := range s.versions {
		if EpochMatch(version, v.v.Epoch) {
			return n, v, nil
		}
	}
	n, err := VersionNumber(version, s.def, s.latest())
	if err != nil {
		return 0, nil, err
	}
	v, ok := s.versions[n]
	if !ok {
		return 0, nil, ErrNotFound
	}
	return n, v, nil
}

func (m *Memory) skillLocked(identity, id string) (*memSkill, error) {
	s, ok := m.skills[identity][id]
	if !ok {
		return nil, ErrNotFound
	}
	return s, nil
}

// List implements [Store].
func (m *Memory) List(_ context.Context, identity string) ([]Skill, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Skill, 0, len(m.skills[identity]))
	for _, s := range m.skills[identity] {
		out = append(out, s.show())
	}
	return out, nil
}

// Get implements [Store].
func (m *Memory) Get(_ context.Context, identity, id string) (Skill, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, err := m.skillLocked(identity, id)
	if err != nil {
		return Skill{}, err
	}
	return s.show(), nil
}

// SetDefault implements [Store].
func (m *Memory) SetDefault(_ context.Context, identity, id, version string) (Skill, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, err := m.skillLocked(identity, id)
	if err != nil {
		return Skill{}, err
	}
	n, _, err := s.version(version)
	if err != nil {
		return Skill{}, err
	}
	s.def = n
	return s.show(), nil
}

// Delete implements [Store].
func (m *Memory) Delete(_ context.Context, identity, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, err := m.skillLocked(identity, id)
	if err != nil {
		return err
	}
	m.deleteLocked(identity, s)
	return nil
}

func (m *Memory) deleteLocked(identity string, s *memSkill) {
	for n := range s.versions {
		m.dropLocked(identity, s, n)
	}
	delete(m.skills[identity], s.id)
	if len(m.skills[identity]) == 0 {
		delete(m.skills, identity)
		delete(m.used, identity)
	}
}

func (m *Memory) dropLocked(identity string, s *memSkill, n int) {
	m.used[identity] -= s.versions[n].size
	m.total -= s.versions[n].size
	delete(s.versions, n)
}

// AddVersion implements [Store].
func (m *Memory) AddVersion(_ context.Context, identity, id string, b *Bundle, makeDefault bool) (Version, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, err := m.skillLocked(identity, id)
	if err != nil {
		return Version{}, err
	}
	return m.addLocked(identity, s, b, makeDefault)
}

// Versions implements [Store].
func (m *Memory) Versions(_ context.Context, identity, id string) ([]Version, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, err := m.skillLocked(identity, id)
	if err != nil {
		return nil, err
	}
	out := make([]Version, 0, len(s.versions))
	for _, v := range s.versions {
		out = append(out, v.v)
	}
	return out, nil
}

// Version implements [Store].
func (m *Memory) Version(_ context.Context, identity, id, version string) (Version, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, err := m.skillLocked(identity, id)
	if err != nil {
		return Version{}, err
	}
	_, v, err := s.version(version)
	if err != nil {
		return Version{}, err
	}
	return v.v, nil
}

// DeleteVersion implements [Store].
func (m *Memory) DeleteVersion(_ context.Context, identity, id, version string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, err := m.skillLocked(identity, id)
	if err != nil {
		return err
	}
	n, _, err := s.version(version)
	if err != nil {
		return err
	}
	if len(s.versions) == 1 {
		m.deleteLocked(identity, s)
		return nil
	}
	if n == s.def {
		return ErrDefaultVersion
	}
	m.dropLocked(identity, s, n)
	return nil
}

// Bundle implements [Store].
func (m *Memory) Bundle(_ context.Context, identity, id, version string) (*Bundle, Version, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, err := m.skillLocked(identity, id)
	if err != nil {
		return nil, Version{}, err
	}
	_, v, err := s.version(version)
	if err != nil {
		return nil, Version{}, err
	}
	return v.bundle, v.v, nil
}

// Attach implements [Store]: at most MaxAttached containers are remembered, the oldest
// record forgotten first.
func (m *Memory) Attach(_ context.Context, identity, containerID string, as []Announced) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := attachKey{identity, containerID}
	m.attachSeq++
	m.attached[k] = attachRec{seq: m.attachSeq, as: slices.Clone(as)}
	m.attachOrder = append(m.attachOrder, attachEntry{k, m.attachSeq})
	// Replaced records leave stale entries in attachOrder: it is kept within twice the bound
	// by forgetting from its front, the oldest first.
	for len(m.attached) > m.cfg.MaxAttached || len(m.attachOrder) > 2*m.cfg.MaxAttached {
		old := m.attachOrder[0]
		m.attachOrder = m.attachOrder[1:]
		if r, ok := m.attached[old.key]; ok && r.seq == old.seq {
			delete(m.attached, old.key)
		}
	}
	return nil
}

// Attached implements [Store].
func (m *Memory) Attached(_ context.Context, identity, containerID string) ([]Announced, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.attached[attachKey{identity, containerID}].as), nil
}
