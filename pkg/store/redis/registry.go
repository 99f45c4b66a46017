package redis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/codeinterp/codeinterp/pkg/store"
)

// The Registry lives under the {registry} hash tag (B is its prefix):
//
//	B c:<id>               HASH of the registration (the fields below)
//	B s:<ident><session>   the id the session key names
//	B i:<ident>            SET of the identity's ids
//
// A record also keeps the suffixes of its session and identity keys (_sk, _ik), so that the
// scripts that know only the id can keep those in step, and its TTL (_ttl). Every key has a
// native TTL, so that the names of a node that died without a word go in the end: a live
// record and its session key live for its ExpiresAfter and TombstoneTTL from its last Add or
// Touch (a Manager removes it long before: a container expires after ExpiresAfter idle, its
// tombstone after TombstoneTTL), a hibernating one (Lifetime set) at least for its Lifetime and
// TombstoneTTL, so that it outlives its restore window; an expired one (a tombstone) for TombstoneTTL; an identity's
// set as long as the longest of its records.

// Fields of a registration's hash.
const (
	fID, fIdentity, fSession, fLastUsed, fName           = "id", "identity", "session", "last_used", "name"
	fCreatedAt, fExpiresAfter, fMemory, fOwner, fExpired = "created_at", "expires_after", "memory_limit", "owner", "expired"
	fSessionKey, fIdentityKey, fTTL                      = "_sk", "_ik", "_ttl"
	fAllowedDomains                                      = "allowed_domains" // a JSON array; "" for none
	fLifetime, fHibernated                               = "lifetime", "hibernated"
)

// registryLib is the Lua the registry scripts share: drop frees the session key of record k if
// it still names the record, forget deletes the record and its index entries, and keep gives
// record k (id, session key and identity key in f) the TTL ttl.
const registryLib = `
local B = ARGV[1]
local function drop(k)
  local f = redis.call('HMGET', k, 'id', '_sk')
  if f[2] and f[2] ~= '' and redis.call('GET', B .. 's:' .. f[2]) == f[1] then
    redis.call('DEL', B .. 's:' .. f[2])
  end
end
local function forget(k)
  drop(k)
  local f = redis.call('HMGET', k, 'id', '_ik')
  if f[2] then redis.call('SREM', B .. 'i:' .. f[2], f[1]) end
  redis.call('DEL', k)
end
local function keep(k, ttl, expired)
  local f = redis.call('HMGET', k, 'id', '_sk', '_ik')
  redis.call('PEXPIRE', k, ttl)
  if not expired and f[2] ~= '' and redis.call('GET', B .. 's:' .. f[2]) == f[1] then
    redis.call('PEXPIRE', B .. 's:' .. f[2], ttl)
  end
  local set = B .. 'i:' .. f[3]
  if redis.call('PTTL', set) < tonumber(ttl) then redis.call('PEXPIRE', set, ttl) end
end
`

// registryAdd records a registration. ARGV: B, id, identity key, session key ("" for none),
// expired ("1"), ttl-ms, then field/value pairs.
var registryAdd = goredis.NewScript(registryLib + `
local k = B .. 'c:' .. ARGV[2]
local old = redis.call('HGET', k, '_ik')
if old and old ~= ARGV[3] then forget(k) end
redis.call('DEL', k)
local fields = {}
for i = 7, #ARGV do fields[#fields + 1] = ARGV[i] end
redis.call('HSET', k, unpack(fields))
redis.call('SADD', B .. 'i:' .. ARGV[3], ARGV[2])
local expired = ARGV[5] == '1'
if not expired and ARGV[4] ~= '' then redis.call('SET', B .. 's:' .. ARGV[4], ARGV[2]) end
keep(k, ARGV[6], expired)
return 0
`)

// registrySession returns the record the session key ARGV[2] names.
var registrySession = goredis.NewScript(registryLib + `
local id = redis.call('GET', B .. 's:' .. ARGV[2])
if not id then return {} end
return redis.call('HGETALL', B .. 'c:' .. id)
`)

// registryList returns the records of identity key ARGV[2], forgetting the ids whose record
// has gone (its TTL ran out).
var registryList = goredis.NewScript(registryLib + `
local set = B .. 'i:' .. ARGV[2]
local out = {}
for _, id in ipairs(redis.call('SMEMBERS', set)) do
  local r = redis.call('HGETALL', B .. 'c:' .. id)
  if #r == 0 then redis.call('SREM', set, id) else out[#out + 1] = r end
end
return out
`)

// registryTouch sets the last use of record ARGV[2] to ARGV[3], if it is recorded, and renews
// its TTL.
var registryTouch = goredis.NewScript(registryLib + `
local k = B .. 'c:' .. ARGV[2]
local f = redis.call('HMGET', k, '_ttl', 'expired')
if not f[1] then return 0 end
redis.call('HSET', k, 'last_used', ARGV[3])
if f[2] ~= '1' then keep(k, f[1], false) end
return 0
`)

// registryExpire marks record ARGV[2] expired, frees its session key and gives it the
// tombstone TTL ARGV[3].
var registryExpire = goredis.NewScript(registryLib + `
local k = B .. 'c:' .. ARGV[2]
if redis.call('EXISTS', k) == 0 then return 0 end
drop(k)
redis.call('HSET', k, 'expired', '1', '_ttl', ARGV[3])
keep(k, ARGV[3], true)
return 0
`)

// registryRemove forgets record ARGV[2].
var registryRemove = goredis.NewScript(registryLib + `
forget(B .. 'c:' .. ARGV[2])
return 0
`)

// identityKey and sessionKey are the suffixes of the identity's set and of a session key.
func identityKey(identity string) string { return boundedID(identity) }

func sessionKey(identity, session string) string { return part(identity) + boundedID(session) }

func (s *Store) run(ctx context.Context, op string, sc *goredis.Script, args ...any) *goredis.Cmd {
	ctx, cancel := s.call(ctx)
	defer cancel()
	cmd := sc.Run(ctx, s.c, []string{s.registry}, append([]any{s.registry}, args...)...)
	if err := cmd.Err(); err != nil && !errors.Is(err, goredis.Nil) {
		cmd.SetErr(fmt.Errorf("redis registry %s: %w", op, err))
	}
	return cmd
}

// Add implements [store.Registry].
func (s *Store) Add(ctx context.Context, r store.Registration) error {
	sk := ""
	if r.Session != "" {
		sk = sessionKey(r.Identity, r.Session)
	}
	expired, ttl := "0", r.ExpiresAfter+s.o.TombstoneTTL
	if r.Lifetime > 0 {
		// A hibernating container's record lives as long as the container may be restored.
		ttl = max(ttl, r.Lifetime+s.o.TombstoneTTL)
	}
	if r.Expired {
		expired, ttl = "1", s.o.TombstoneTTL
	}
	hibernated := "0"
	if r.Hibernated {
		hibernated = "1"
	}
	args := []any{boundedID(r.ID), identityKey(r.Identity), sk, expired, ttl.Milliseconds(),
		fID, r.ID, fIdentity, r.Identity, fSession, r.Session, fLastUsed, formatTime(r.LastUsed), fName, r.Name,
		fCreatedAt, formatTime(r.CreatedAt), fExpiresAfter, int64(r.ExpiresAfter), fMemory, r.MemoryLimit,
		fOwner, r.Owner, fExpired, expired, fSessionKey, sk, fIdentityKey, identityKey(r.Identity), fTTL, ttl.Milliseconds(),
		fAllowedDomains, allowedDomains(r.AllowedDomains), fLifetime, int64(r.Lifetime), fHibernated, hibernated}
	return s.run(ctx, "add", registryAdd, args...).Err()
}

// Lookup implements [store.Registry]: one HGETALL.
func (s *Store) Lookup(ctx context.Context, id string) (store.Registration, bool, error) {
	ctx, cancel := s.call(ctx)
	defer cancel()
	m, err := s.c.HGetAll(ctx, s.registry+"c:"+boundedID(id)).Result()
	if err != nil {
		return store.Registration{}, false, fmt.Errorf("redis registry lookup: %w", err)
	}
	if len(m) == 0 {
		return store.Registration{}, false, nil
	}
	return parseRegistration(m)
}

// Session implements [store.Registry]: one script.
func (s *Store) Session(ctx context.Context, identity, session string) (store.Registration, bool, error) {
	v, err := s.run(ctx, "session", registrySession, sessionKey(identity, session)).StringSlice()
	if err != nil {
		return store.Registration{}, false, err
	}
	if len(v) == 0 {
		return store.Registration{}, false, nil
	}
	return parseRegistration(pairs(v))
}

// List implements [store.Registry]: one script.
func (s *Store) List(ctx context.Context, identity string) ([]store.Registration, error) {
	v, err := s.run(ctx, "list", registryList, identityKey(identity)).Slice()
	if err != nil {
		return nil, err
	}
	out := make([]store.Registration, 0, len(v))
	for _, rec := range v {
		fields, ok := rec.([]any)
		if !ok {
			return nil, fmt.Errorf("redis registry list: a record of type %T", rec)
		}
		ss := make([]string, len(fields))
		for i, f := range fields {
			ss[i], _ = f.(string)
		}
		r, ok, err := parseRegistration(pairs(ss))
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, r)
		}
	}
	return out, nil
}

// Touch implements [store.Registry]: one script.
func (s *Store) Touch(ctx context.Context, id string, t time.Time) error {
	return s.run(ctx, "touch", registryTouch, boundedID(id), formatTime(t)).Err()
}

// Expire implements [store.Registry]: the record is kept for Options.TombstoneTTL at most (the
// Manager's bounds may remove it earlier).
func (s *Store) Expire(ctx context.Context, id string) error {
	return s.run(ctx, "expire", registryExpire, boundedID(id), s.o.TombstoneTTL.Milliseconds()).Err()
}

// Remove implements [store.Registry].
func (s *Store) Remove(ctx context.Context, id string) error {
	return s.run(ctx, "remove", registryRemove, boundedID(id)).Err()
}

// pairs turns HGETALL's flat field, value list into a map.
func pairs(v []string) map[string]string {
	m := make(map[string]string, len(v)/2)
	for i := 0; i+1 < len(v); i += 2 {
		m[v[i]] = v[i+1]
	}
	return m
}

func formatTime(t time.Time) string {
	b, err := t.MarshalText()
	if err != nil { // a year outside [0, 9999]: no Manager makes one
		return ""
	}
	return string(b)
}

func parseTime(s string) (time.Time, error) {
	var t time.Time
	if s == "" {
		return t, nil
	}
	err := t.UnmarshalText([]byte(s))
	return t, err
}

// parseRegistration reads a registration's hash; ok is false for an empty one.
func parseRegistration(m map[string]string) (store.Registration, bool, error) {
	if len(m) == 0 {
		return store.Registration{}, false, nil
	}
	r := store.Registration{
		ID: m[fID], Identity: m[fIdentity], Session: m[fSession], Name: m[fName],
		MemoryLimit: m[fMemory], Owner: m[fOwner], Expired: m[fExpired] == "1", Hibernated: m[fHibernated] == "1",
	}
	if v := m[fLifetime]; v != "" { // absent from the records of earlier versions
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return store.Registration{}, false, fmt.Errorf("redis registry: record %q: lifetime: %w", r.ID, err)
		}
		r.Lifetime = time.Duration(n)
	}
	var err error
	if r.LastUsed, err = parseTime(m[fLastUsed]); err != nil {
		return store.Registration{}, false, fmt.Errorf("redis registry: record %q: last use: %w", r.ID, err)
	}
	if r.CreatedAt, err = parseTime(m[fCreatedAt]); err != nil {
		return store.Registration{}, false, fmt.Errorf("redis registry: record %q: creation: %w", r.ID, err)
	}
	if v := m[fAllowedDomains]; v != "" {
		if err := json.Unmarshal([]byte(v), &r.AllowedDomains); err != nil {
			return store.Registration{}, false, fmt.Errorf("redis registry: record %q: allowed domains: %w", r.ID, err)
		}
	}
	n, err := strconv.ParseInt(m[fExpiresAfter], 10, 64)
	if err != nil {
		return store.Registration{}, false, fmt.Errorf("redis registry: record %q: expiry: %w", r.ID, err)
	}
	r.ExpiresAfter = time.Duration(n)
	return r, true, nil
}

// allowedDomains is a registration's allowlist as its hash keeps it: a JSON array, "" for
// none (a container without network).
func allowedDomains(d []string) string {
	if d == nil {
		return ""
	}
	b, err := json.Marshal(d)
	if err != nil { // strings always marshal
		return ""
	}
	return string(b)
}
