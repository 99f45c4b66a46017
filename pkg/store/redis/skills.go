package redis

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"strconv"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/codeinterp/codeinterp/pkg/skills"
)

// Skills is the [skills.Store] of a fleet: the Skills API's skills, their versions and their
// bundles, kept in Redis so that a skill uploaded through one replica is listed, read and
// mounted through every other.
//
// Layout. Its keys share the hash tag {skills} (one Redis Cluster slot: its transactions span
// them), under SkillsOptions.Prefix:
//
//	{skills}:s:<identity>          hash: skill id → the skill and its versions' metadata (JSON)
//	{skills}:u                     hash: "i:<identity>" → the identity's bytes; "t" → all bytes
//	{skills}:b:<version id>        the version's bundle, a zip (deflated)
//	{skills}:a:<identity><id>      the skills container <id> was created with (Attach), JSON, with a TTL
//
// Bundles are in Redis, compressed: their uncompressed bytes are bounded per identity and in
// all by SkillsOptions (skills.max_bytes_per_identity and skills.max_bytes), as in one
// process's memory, and each is at most the native limits (a zip of at most 50 MB, 25 MB a
// file, 500 files) and skills.max_bundle_bytes uncompressed. Every write is a WATCH/MULTI
// transaction on the identity's hash and the byte counts, so that the bounds hold among
// replicas. A bundle is read back and checked again (ReadZip) when a container mounts it,
// unless this process read it recently (SkillsOptions.CacheBytes).
// Safe for concurrent use; it does not own the client.
type Skills struct {
	c    goredis.UniversalClient
	o    SkillsOptions
	base string

	// mu guards the fields below: the bundles read, by version id (a version's bundle never
	// changes), within o.CacheBytes, the oldest read dropped first.
	mu         sync.Mutex
	cache      map[string]*skills.Bundle
	cacheOrder []string
	cacheBytes int64
}

var _ skills.Store = (*Skills)(nil)

// SkillsOptions are a Skills' settings; the zero value of each field selects the default it
// names (skills.Bounds.WithDefaults for the bounds).
type SkillsOptions struct {
	// Prefix starts every key; DefaultPrefix when empty. It must not contain '{' or '}'.
	Prefix string
	// Timeout bounds each call that moves no bundle; DefaultTimeout when zero.
	Timeout time.Duration
	// BundleTimeout bounds each call that writes or reads a bundle (up to tens of MB); 30s
	// when zero.
	BundleTimeout time.Duration
	skills.Bounds
	// AttachTTL is how long Attach's record of a container is kept after it was last written or
	// read; zero means 30 days. A container's ids are never reused: a record outliving its
	// container is never read again, and its TTL frees it.
	AttachTTL time.Duration
	// CacheBytes bounds the bundles kept in the process once read (uncompressed), so that
	// the requests mounting a skill do not each read it from Redis; zero means 64 MiB, and a
	// bundle larger than it is not kept.
	CacheBytes int64
	// Now returns the time; nil means time.Now.
	Now func() time.Time
}

// NewSkills returns the Skills kept through c.
func NewSkills(c goredis.UniversalClient, o SkillsOptions) *Skills {
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.BundleTimeout <= 0 {
		o.BundleTimeout = 30 * time.Second
	}
	o.Bounds = o.Bounds.WithDefaults()
	if o.AttachTTL <= 0 {
		o.AttachTTL = 30 * 24 * time.Hour
	}
	if o.CacheBytes <= 0 {
		o.CacheBytes = 64 << 20
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Skills{c: c, o: o, base: o.Prefix + "{skills}:", cache: map[string]*skills.Bundle{}}
}

func (s *Skills) metaKey(identity string) string { return s.base + "s:" + boundedID(identity) }
func (s *Skills) usedKey() string                { return s.base + "u" }
func (s *Skills) bundleKey(versionID string) string {
	return s.base + "b:" + boundedID(versionID)
}
func (s *Skills) attachKey(identity, containerID string) string {
	return s.base + "a:" + part(identity) + boundedID(containerID)
}
func usedField(identity string) string { return "i:" + boundedID(identity) }

const usedTotal = "t"

// rskill is a skill as its identity's hash keeps it.
type rskill struct {
	ID          string           `json:"id"`
	CreatedAt   int64            `json:"created_at"` // Unix nanoseconds
	DisplayName string           `json:"display_name,omitempty"`
	Def         int              `json:"default"`
	Next        int              `json:"next"`                 // the number of the next version
	LastEpoch   int64            `json:"last_epoch,omitempty"` // the Epoch of the version made last
	Versions    map[int]rversion `json:"versions"`
}

type rversion struct {
	ID          string `json:"id"`
	Name        string `json:"name"`
	Description string `json:"description"`
	CreatedAt   int64  `json:"created_at"`
	Size        int64  `json:"size"`            // the bundle's bytes, uncompressed
	Epoch       int64  `json:"epoch,omitempty"` // skills.Version.Epoch
}

// epoch is v's skills.Version.Epoch; a version kept before versions had one shows its
// creation's microseconds.
func (v rversion) epoch() string { return strconv.FormatInt(v.epochMicros(), 10) }

func (v rversion) epochMicros() int64 {
	if v.Epoch == 0 {
		return v.CreatedAt / 1000
	}
	return v.Epoch
}

func (r *rskill) latest() int {
	l := 0
	for n := range r.Versions {
		l = max(l, n)
	}
	return l
}

func (r *rskill) show() skills.Skill {
	d := r.Versions[r.Def]
	return skills.Skill{ID: r.ID, Name: d.Name, Description: d.Description, CreatedAt: time.Unix(0, r.CreatedAt),
		DefaultVersion: strconv.Itoa(r.Def), LatestVersion: strconv.Itoa(r.latest()), DisplayName: r.DisplayName}
}

func (r *rskill) showVersion(n int) skills.Version {
	v := r.Versions[n]
	return skills.Version{ID: v.ID, SkillID: r.ID, Version: strconv.Itoa(n), Epoch: v.epoch(), Name: v.Name, Description: v.Description,
		CreatedAt: time.Unix(0, v.CreatedAt)}
}

// version returns the number of the version named version ("" the default, "latest", a
// number, an Epoch).
func (r *rskill) version(version string) (int, error) {
	for n, v := range r.Versions {
		if skills.EpochMatch(version, v.epoch()) {
			return n, nil
		}
	}
	n, err := skills.VersionNumber(version, r.Def, r.latest())
	if err != nil {
		return 0, err
	}
	if _, ok := r.Versions[n]; !ok {
		return 0, skills.ErrNotFound
	}
	return n, nil
}

func (r *rskill) size() int64 {
	var n int64
	for _, v := range r.Versions {
		n += v.Size
	}
	return n
}

func newSkillID(prefix string) string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails
	return prefix + hex.EncodeToString(b[:])
}

// errBusy: a transaction lost to others too many times in a row.
var errBusy = errors.New("redis skills: too many concurrent writes")

// txn runs fn in a transaction over identity's hash and the byte counts: fn reads through tx
// and returns the writes to make (queued on a MULTI pipeline), which are made only if neither
// key changed meanwhile; else fn runs again, a few times.
func (s *Skills) txn(ctx context.Context, identity string, fn func(tx *goredis.Tx) (func(p goredis.Pipeliner), error)) error {
	ctx, cancel := context.WithTimeout(ctx, s.o.BundleTimeout)
	defer cancel()
	for range 20 {
		err := s.c.Watch(ctx, func(tx *goredis.Tx) error {
			write, err := fn(tx)
			if err != nil {
				return err
			}
			_, err = tx.TxPipelined(ctx, func(p goredis.Pipeliner) error {
				write(p)
				return nil
			})
			return err
		}, s.metaKey(identity), s.usedKey())
		if !errors.Is(err, goredis.TxFailedErr) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redis skills: %w", ctx.Err())
		case <-time.After(time.Duration(mrand.Int64N(int64(20 * time.Millisecond)))):
		}
	}
	return errBusy
}

// load reads identity's skill id through g (a client or a transaction).
func (s *Skills) load(ctx context.Context, g goredis.Cmdable, identity, id string) (*rskill, error) {
	raw, err := g.HGet(ctx, s.metaKey(identity), id).Bytes()
	if errors.Is(err, goredis.Nil) {
		return nil, skills.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("redis skills: read skill: %w", err)
	}
	var r rskill
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, fmt.Errorf("redis skills: decode skill: %w", err)
	}
	if r.Versions == nil || r.Versions[r.Def].ID == "" {
		return nil, fmt.Errorf("redis skills: skill %q has no default version", id)
	}
	return &r, nil
}

func (s *Skills) used(ctx context.Context, g goredis.Cmdable, identity string) (mine, all int64, err error) {
	v, err := g.HMGet(ctx, s.usedKey(), usedField(identity), usedTotal).Result()
	if err != nil {
		return 0, 0, fmt.Errorf("redis skills: read bytes used: %w", err)
	}
	n := func(x any) int64 {
		str, _ := x.(string)
		i, _ := strconv.ParseInt(str, 10, 64)
		return i
	}
	return n(v[0]), n(v[1]), nil
}

// zipBundle is b as its key keeps it.
func zipBundle(b *skills.Bundle) ([]byte, error) {
	var buf bytes.Buffer
	if err := b.Zip(&buf, "skill"); err != nil {
		return nil, fmt.Errorf("redis skills: zip bundle: %w", err)
	}
	return buf.Bytes(), nil
}

// addVersion checks that identity has room for a version of b of size bytes in r, and
// returns the writes adding it (r changed accordingly).
func (s *Skills) addVersion(ctx context.Context, tx *goredis.Tx, identity string, r *rskill, b *skills.Bundle, data []byte, makeDefault bool) (func(p goredis.Pipeliner), int, error) {
	size := b.Size()
	mine, all, err := s.used(ctx, tx, identity)
	if err != nil {
		return nil, 0, err
	}
	if len(r.Versions) >= s.o.MaxVersionsPerSkill || mine+size > s.o.MaxBytesPerIdentity || all+size > s.o.MaxBytes {
		return nil, 0, skills.ErrFull
	}
	n := r.Next
	r.Next++
	now := s.o.Now()
	for _, v := range r.Versions {
		// A skill kept before epochs has no LastEpoch, and its versions' creation times
		// may be ahead of this replica's clock.
		r.LastEpoch = max(r.LastEpoch, v.epochMicros())
	}
	r.LastEpoch = skills.NextEpoch(now, r.LastEpoch)
	v := rversion{ID: newSkillID("skillver_"), Name: b.Name, Description: b.Description, CreatedAt: now.UnixNano(), Size: size, Epoch: r.LastEpoch}
	r.Versions[n] = v
	if makeDefault || r.Def == 0 {
		r.Def = n
	}
	enc, err := json.Marshal(r)
	if err != nil {
		return nil, 0, fmt.Errorf("redis skills: encode skill: %w", err)
	}
	return func(p goredis.Pipeliner) {
		p.Set(ctx, s.bundleKey(v.ID), data, 0)
		p.HSet(ctx, s.metaKey(identity), r.ID, enc)
		p.HIncrBy(ctx, s.usedKey(), usedField(identity), size)
		p.HIncrBy(ctx, s.usedKey(), usedTotal, size)
	}, n, nil
}

// Create implements [skills.Store].
func (s *Skills) Create(ctx context.Context, identity string, b *skills.Bundle) (skills.Skill, error) {
	data, err := zipBundle(b)
	if err != nil {
		return skills.Skill{}, err
	}
	var out skills.Skill
	err = s.txn(ctx, identity, func(tx *goredis.Tx) (func(goredis.Pipeliner), error) {
		n, err := tx.HLen(ctx, s.metaKey(identity)).Result()
		if err != nil {
			return nil, fmt.Errorf("redis skills: count skills: %w", err)
		}
		if n >= int64(s.o.MaxSkillsPerIdentity) {
			return nil, skills.ErrFull
		}
		r := &rskill{ID: newSkillID("skill_"), CreatedAt: s.o.Now().UnixNano(), DisplayName: b.DisplayName, Next: 1, Versions: map[int]rversion{}}
		write, _, err := s.addVersion(ctx, tx, identity, r, b, data, true)
		if err != nil {
			return nil, err
		}
		out = r.show()
		return write, nil
	})
	return out, err
}

// List implements [skills.Store].
func (s *Skills) List(ctx context.Context, identity string) ([]skills.Skill, error) {
	ctx, cancel := context.WithTimeout(ctx, s.o.Timeout)
	defer cancel()
	all, err := s.c.HGetAll(ctx, s.metaKey(identity)).Result()
	if err != nil {
		return nil, fmt.Errorf("redis skills: list: %w", err)
	}
	out := make([]skills.Skill, 0, len(all))
	for id, raw := range all {
		var r rskill
		if err := json.Unmarshal([]byte(raw), &r); err != nil {
			return nil, fmt.Errorf("redis skills: decode skill %q: %w", id, err)
		}
		out = append(out, r.show())
	}
	return out, nil
}

// Get implements [skills.Store].
func (s *Skills) Get(ctx context.Context, identity, id string) (skills.Skill, error) {
	ctx, cancel := context.WithTimeout(ctx, s.o.Timeout)
	defer cancel()
	r, err := s.load(ctx, s.c, identity, id)
	if err != nil {
		return skills.Skill{}, err
	}
	return r.show(), nil
}

// SetDefault implements [skills.Store].
func (s *Skills) SetDefault(ctx context.Context, identity, id, version string) (skills.Skill, error) {
	var out skills.Skill
	err := s.txn(ctx, identity, func(tx *goredis.Tx) (func(goredis.Pipeliner), error) {
		r, err := s.load(ctx, tx, identity, id)
		if err != nil {
			return nil, err
		}
		n, err := r.version(version)
		if err != nil {
			return nil, err
		}
		r.Def = n
		enc, err := json.Marshal(r)
		if err != nil {
			return nil, fmt.Errorf("redis skills: encode skill: %w", err)
		}
		out = r.show()
		return func(p goredis.Pipeliner) { p.HSet(ctx, s.metaKey(identity), id, enc) }, nil
	})
	return out, err
}

// Delete implements [skills.Store].
func (s *Skills) Delete(ctx context.Context, identity, id string) error {
	return s.txn(ctx, identity, func(tx *goredis.Tx) (func(goredis.Pipeliner), error) {
		r, err := s.load(ctx, tx, identity, id)
		if err != nil {
			return nil, err
		}
		return s.deleteSkill(ctx, identity, r), nil
	})
}

// deleteSkill returns the writes deleting r and its bundles.
func (s *Skills) deleteSkill(ctx context.Context, identity string, r *rskill) func(goredis.Pipeliner) {
	size := r.size()
	return func(p goredis.Pipeliner) {
		for _, v := range r.Versions {
			p.Del(ctx, s.bundleKey(v.ID))
		}
		p.HDel(ctx, s.metaKey(identity), r.ID)
		p.HIncrBy(ctx, s.usedKey(), usedField(identity), -size)
		p.HIncrBy(ctx, s.usedKey(), usedTotal, -size)
	}
}

// AddVersion implements [skills.Store].
func (s *Skills) AddVersion(ctx context.Context, identity, id string, b *skills.Bundle, makeDefault bool) (skills.Version, error) {
	data, err := zipBundle(b)
	if err != nil {
		return skills.Version{}, err
	}
	var out skills.Version
	err = s.txn(ctx, identity, func(tx *goredis.Tx) (func(goredis.Pipeliner), error) {
		r, err := s.load(ctx, tx, identity, id)
		if err != nil {
			return nil, err
		}
		write, n, err := s.addVersion(ctx, tx, identity, r, b, data, makeDefault)
		if err != nil {
			return nil, err
		}
		out = r.showVersion(n)
		return write, nil
	})
	return out, err
}

// Versions implements [skills.Store].
func (s *Skills) Versions(ctx context.Context, identity, id string) ([]skills.Version, error) {
	ctx, cancel := context.WithTimeout(ctx, s.o.Timeout)
	defer cancel()
	r, err := s.load(ctx, s.c, identity, id)
	if err != nil {
		return nil, err
	}
	out := make([]skills.Version, 0, len(r.Versions))
	for n := range r.Versions {
		out = append(out, r.showVersion(n))
	}
	return out, nil
}

// Version implements [skills.Store].
func (s *Skills) Version(ctx context.Context, identity, id, version string) (skills.Version, error) {
	ctx, cancel := context.WithTimeout(ctx, s.o.Timeout)
	defer cancel()
	r, err := s.load(ctx, s.c, identity, id)
	if err != nil {
		return skills.Version{}, err
	}
	n, err := r.version(version)
	if err != nil {
		return skills.Version{}, err
	}
	return r.showVersion(n), nil
}

// DeleteVersion implements [skills.Store].
func (s *Skills) DeleteVersion(ctx context.Context, identity, id, version string) error {
	return s.txn(ctx, identity, func(tx *goredis.Tx) (func(goredis.Pipeliner), error) {
		r, err := s.load(ctx, tx, identity, id)
		if err != nil {
			return nil, err
		}
		n, err := r.version(version)
		if err != nil {
			return nil, err
		}
		if len(r.Versions) == 1 {
			return s.deleteSkill(ctx, identity, r), nil
		}
		if n == r.Def {
			return nil, skills.ErrDefaultVersion
		}
		v := r.Versions[n]
		delete(r.Versions, n)
		enc, err := json.Marshal(r)
		if err != nil {
			return nil, fmt.Errorf("redis skills: encode skill: %w", err)
		}
		return func(p goredis.Pipeliner) {
			p.Del(ctx, s.bundleKey(v.ID))
			p.HSet(ctx, s.metaKey(identity), id, enc)
			p.HIncrBy(ctx, s.usedKey(), usedField(identity), -v.Size)
			p.HIncrBy(ctx, s.usedKey(), usedTotal, -v.Size)
		}, nil
	})
}

// storedLimits are those a bundle read back is checked against: it was checked when it was
// uploaded, and zipped again by Bundle.Zip, whose deflate may compress a file more than the
// client's zip did (hence no bound on the ratio here), within the native per-file and file
// count limits.
var storedLimits = skills.Limits{MaxZipBytes: 1 << 31, MaxBundleBytes: 1 << 31, MaxRatio: 1 << 40}

// Bundle implements [skills.Store]: the version is looked up in Redis each time (so that a
// version deleted through another replica is not found); its bundle is read from Redis and
// checked again, unless it was read recently (see SkillsOptions.CacheBytes).
func (s *Skills) Bundle(ctx context.Context, identity, id, version string) (*skills.Bundle, skills.Version, error) {
	ctx, cancel := context.WithTimeout(ctx, s.o.BundleTimeout)
	defer cancel()
	r, err := s.load(ctx, s.c, identity, id)
	if err != nil {
		return nil, skills.Version{}, err
	}
	n, err := r.version(version)
	if err != nil {
		return nil, skills.Version{}, err
	}
	v := r.showVersion(n)
	if b := s.cached(v.ID); b != nil {
		return b, v, nil
	}
	data, err := s.c.Get(ctx, s.bundleKey(v.ID)).Bytes()
	if errors.Is(err, goredis.Nil) {
		// Deleted since the skill was read.
		return nil, skills.Version{}, skills.ErrNotFound
	}
	if err != nil {
		return nil, skills.Version{}, fmt.Errorf("redis skills: read bundle: %w", err)
	}
	b, err := skills.ReadZip(bytes.NewReader(data), storedLimits)
	if err != nil {
		return nil, skills.Version{}, fmt.Errorf("redis skills: bundle of %s: %w", v.ID, err)
	}
	s.keep(v.ID, b)
	return b, v, nil
}

func (s *Skills) cached(versionID string) *skills.Bundle {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cache[versionID]
}

// keep caches b, the bundle of versionID, dropping the oldest bundles past CacheBytes.
func (s *Skills) keep(versionID string, b *skills.Bundle) {
	size := b.Size()
	if size > s.o.CacheBytes {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.cache[versionID]; ok {
		return
	}
	s.cache[versionID] = b
	s.cacheOrder = append(s.cacheOrder, versionID)
	s.cacheBytes += size
	for s.cacheBytes > s.o.CacheBytes {
		old := s.cacheOrder[0]
		s.cacheOrder = s.cacheOrder[1:]
		s.cacheBytes -= s.cache[old].Size()
		delete(s.cache, old)
	}
}

// Attach implements [skills.Store]: the record lives AttachTTL after it was last written or
// read.
func (s *Skills) Attach(ctx context.Context, identity, containerID string, as []skills.Announced) error {
	ctx, cancel := context.WithTimeout(ctx, s.o.Timeout)
	defer cancel()
	enc, err := json.Marshal(as)
	if err != nil {
		return fmt.Errorf("redis skills: encode attached skills: %w", err)
	}
	if err := s.c.Set(ctx, s.attachKey(identity, containerID), enc, s.o.AttachTTL).Err(); err != nil {
		return fmt.Errorf("redis skills: attach: %w", err)
	}
	return nil
}

// Attached implements [skills.Store].
func (s *Skills) Attached(ctx context.Context, identity, containerID string) ([]skills.Announced, error) {
	ctx, cancel := context.WithTimeout(ctx, s.o.Timeout)
	defer cancel()
	raw, err := s.c.GetEx(ctx, s.attachKey(identity, containerID), s.o.AttachTTL).Bytes()
	if errors.Is(err, goredis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("redis skills: attached: %w", err)
	}
	var as []skills.Announced
	if err := json.Unmarshal(raw, &as); err != nil {
		return nil, fmt.Errorf("redis skills: decode attached skills: %w", err)
	}
	return as, nil
}
