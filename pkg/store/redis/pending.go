package redis

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/codeinterp/codeinterp/pkg/store"
)

// The pending calls live under the {pending} hash tag (B is its prefix):
//
//	B e:<entry>   "deadline-ms:" and the calls' JSON, with PX PendingTTL
//	B order       ZSET entry -> deadline, of all identities (the oldest go first)
//	B size        HASH entry -> bytes
//	B bytes       the bytes of all entries
//	B kinds       HASH kind -> entries (for Holds)
//	B id:<ident>  ZSET entry -> deadline, of one identity
//	B ib          HASH ident -> bytes
//
// where <entry> is entryID(identity, key) and <ident> part(identity). The scripts keep the
// indexes and the counts in step; the index keys get a PX of PendingTTL at every Put, so that
// an idle store empties itself.

// pendingLib is the Lua the pending scripts share: parse splits an entry into its identity part
// and kind, remove forgets an entry everywhere, and sweep forgets the expired ones (at most
// 1,000 a call).
const pendingLib = `
local B = ARGV[1]
local now = tonumber(ARGV[2])
local function parse(e)
  local c = string.find(e, ':', 1, true)
  local n = tonumber(string.sub(e, 1, c - 1))
  local ident = string.sub(e, 1, c + n)
  local r = c + n + 1
  local c2 = string.find(e, ':', r, true)
  local m = tonumber(string.sub(e, r, c2 - 1))
  return ident, string.sub(e, c2 + 1, c2 + m)
end
local function remove(e)
  local size = redis.call('HGET', B .. 'size', e)
  if not size then return end
  size = tonumber(size)
  local ident, kind = parse(e)
  redis.call('DEL', B .. 'e:' .. e)
  redis.call('ZREM', B .. 'order', e)
  redis.call('HDEL', B .. 'size', e)
  redis.call('DECRBY', B .. 'bytes', size)
  if redis.call('HINCRBY', B .. 'kinds', kind, -1) <= 0 then redis.call('HDEL', B .. 'kinds', kind) end
  redis.call('ZREM', B .. 'id:' .. ident, e)
  if redis.call('ZCARD', B .. 'id:' .. ident) == 0 then
    redis.call('HDEL', B .. 'ib', ident)
  else
    redis.call('HINCRBY', B .. 'ib', ident, -size)
  end
end
local function sweep()
  local old = redis.call('ZRANGEBYSCORE', B .. 'order', '-inf', '(' .. now, 'LIMIT', 0, 1000)
  for _, e in ipairs(old) do remove(e) end
end
`

// pendingPutBody stores one value under entries, from the kind/entry pair at ARGV[first] on
// (first is set before it). ARGV: B, now, ttl-ms, deadline, value, size, max entries, max
// bytes, max entries per identity, max bytes per identity, ident.
const pendingPutBody = `
local ttl, deadline, value, size = ARGV[3], ARGV[4], ARGV[5], tonumber(ARGV[6])
local maxE, maxB, maxIE, maxIB = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10])
local ident = ARGV[11]
local ik = B .. 'id:' .. ident
for i = first, #ARGV, 2 do
  local kind, e = ARGV[i], ARGV[i + 1]
  remove(e)
  redis.call('SET', B .. 'e:' .. e, value, 'PX', ttl)
  redis.call('ZADD', B .. 'order', deadline, e)
  redis.call('HSET', B .. 'size', e, size)
  redis.call('INCRBY', B .. 'bytes', size)
  redis.call('HINCRBY', B .. 'kinds', kind, 1)
  redis.call('ZADD', ik, deadline, e)
  redis.call('HINCRBY', B .. 'ib', ident, size)
  -- The identity's oldest entries go first when it holds more than its share.
  while redis.call('ZCARD', ik) > maxIE or tonumber(redis.call('HGET', B .. 'ib', ident) or 0) > maxIB do
    local first = redis.call('ZRANGE', ik, 0, 1)
    local victim = first[1]
    if victim == e then victim = first[2] end
    if not victim then break end
    remove(victim)
  end
end
sweep()
while true do
  local front = redis.call('ZRANGE', B .. 'order', 0, 0)
  if #front == 0 then break end
  if redis.call('ZCARD', B .. 'order') <= maxE and tonumber(redis.call('GET', B .. 'bytes') or 0) <= maxB then break end
  remove(front[1])
end
for _, k in ipairs({'order', 'size', 'bytes', 'kinds', 'ib'}) do redis.call('PEXPIRE', B .. k, ttl) end
redis.call('PEXPIRE', ik, ttl)
return 1
`

// pendingPut stores one value under entries: ARGV as pendingPutBody's, then kind/entry pairs.
var pendingPut = goredis.NewScript(pendingLib + "local first = 12\n" + pendingPutBody)

// pendingSwap stores one value under one entry when the entry holds the expected value, and
// returns 1 (else 0): ARGV as pendingPutBody's, then the expected value (the calls' JSON) and
// one kind/entry pair.
var pendingSwap = goredis.NewScript(pendingLib + `
local first = 13
local cur = redis.call('GET', B .. 'e:' .. ARGV[14])
if not cur then return 0 end
local c = string.find(cur, ':', 1, true)
if not c or tonumber(string.sub(cur, 1, c - 1)) < now or string.sub(cur, c + 1) ~= ARGV[12] then return 0 end
` + pendingPutBody)

// pendingDrop forgets entry ARGV[3].
var pendingDrop = goredis.NewScript(pendingLib + `
remove(ARGV[3])
return 0
`)

// pendingHolds reports how many live entries of kind ARGV[3] there are.
var pendingHolds = goredis.NewScript(pendingLib + `
sweep()
return tonumber(redis.call('HGET', B .. 'kinds', ARGV[3]) or 0)
`)

// Put implements [store.Pending]: with memory's bounds (per identity and in all), the least
// recently stored going first, in one script. Nothing is stored for the identity "".
func (s *Store) Put(identity string, calls []store.PendingCall, keys ...store.Key) {
	if len(calls) == 0 || len(keys) == 0 || identity == "" {
		return
	}
	size := 0
	for _, c := range calls {
		size += c.Size()
	}
	if size > s.o.PendingMaxBytesPerIdentity {
		return
	}
	body, err := json.Marshal(calls)
	if err != nil {
		s.logError("pending put", err)
		return
	}
	now := s.nowMS()
	deadline := now + s.o.PendingTTL.Milliseconds()
	args := []any{s.pending, now, s.o.PendingTTL.Milliseconds(), deadline, strconv.FormatInt(deadline, 10) + ":" + string(body), size,
		s.o.PendingMaxEntries, s.o.PendingMaxBytes, s.o.PendingMaxEntriesPerIdentity, s.o.PendingMaxBytesPerIdentity, part(identity)}
	n := len(args)
	for _, k := range keys {
		if k.ID != "" {
			args = append(args, k.Kind, entryID(identity, k))
		}
	}
	if len(args) == n {
		return
	}
	ctx, cancel := s.background()
	defer cancel()
	if err := pendingPut.Run(ctx, s.c, []string{s.pending + "order"}, args...).Err(); err != nil {
		s.logError("pending put", err)
	}
}

// Swap implements [store.Pending]: one script, which compares the entry's calls as JSON.
func (s *Store) Swap(identity string, key store.Key, old, calls []store.PendingCall) bool {
	if len(old) == 0 || len(calls) == 0 || identity == "" || key.ID == "" {
		return false
	}
	size := 0
	for _, c := range calls {
		size += c.Size()
	}
	if size > s.o.PendingMaxBytesPerIdentity {
		return false
	}
	want, err := json.Marshal(old)
	if err != nil {
		s.logError("pending swap", err)
		return false
	}
	body, err := json.Marshal(calls)
	if err != nil {
		s.logError("pending swap", err)
		return false
	}
	now := s.nowMS()
	deadline := now + s.o.PendingTTL.Milliseconds()
	ctx, cancel := s.background()
	defer cancel()
	n, err := pendingSwap.Run(ctx, s.c, []string{s.pending + "order"}, s.pending, now, s.o.PendingTTL.Milliseconds(), deadline,
		strconv.FormatInt(deadline, 10)+":"+string(body), size, s.o.PendingMaxEntries, s.o.PendingMaxBytes,
		s.o.PendingMaxEntriesPerIdentity, s.o.PendingMaxBytesPerIdentity, part(identity), string(want), key.Kind, entryID(identity, key)).Int()
	if err != nil {
		s.logError("pending swap", err)
		return false
	}
	return n == 1
}

// Get implements [store.Pending]: one GET.
func (s *Store) Get(identity string, key store.Key) []store.PendingCall {
	if identity == "" {
		return nil
	}
	ctx, cancel := s.background()
	defer cancel()
	v, err := s.c.Get(ctx, s.pending+"e:"+entryID(identity, key)).Result()
	if err != nil {
		if !errors.Is(err, goredis.Nil) {
			s.logError("pending get", err)
		}
		return nil
	}
	body, live := splitDeadline(v, s.nowMS())
	if !live {
		return nil
	}
	var calls []store.PendingCall
	if err := json.Unmarshal([]byte(body), &calls); err != nil {
		s.logError("pending get", err)
		return nil
	}
	return calls
}

// Drop implements [store.Pending].
func (s *Store) Drop(identity string, key store.Key) {
	ctx, cancel := s.background()
	defer cancel()
	if err := pendingDrop.Run(ctx, s.c, []string{s.pending + "order"}, s.pending, s.nowMS(), entryID(identity, key)).Err(); err != nil {
		s.logError("pending drop", err)
	}
}

// IDs implements [store.Pending]: one ZRANGEBYSCORE of the identity's live entries.
func (s *Store) IDs(identity, kind string) []string {
	ctx, cancel := s.background()
	defer cancel()
	ident := part(identity)
	entries, err := s.c.ZRangeByScore(ctx, s.pending+"id:"+ident, &goredis.ZRangeBy{
		Min: strconv.FormatInt(s.nowMS(), 10), Max: "+inf",
	}).Result()
	if err != nil {
		s.logError("pending ids", err)
		return nil
	}
	prefix := ident + part(kind)
	var ids []string
	for _, e := range entries {
		// A hashed id cannot be listed back (see memory.MaxKeyBytes).
		if id, ok := strings.CutPrefix(e, prefix); ok && !strings.HasPrefix(id, "\x00") {
			ids = append(ids, id)
		}
	}
	return ids
}

// Holds implements [store.Pending].
func (s *Store) Holds(kind string) bool {
	ctx, cancel := s.background()
	defer cancel()
	n, err := pendingHolds.Run(ctx, s.c, []string{s.pending + "order"}, s.pending, s.nowMS(), kind).Int()
	if err != nil {
		s.logError("pending holds", err)
		return false
	}
	return n > 0
}
