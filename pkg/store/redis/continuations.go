package redis

import (
	"encoding/json"
	"errors"
	"slices"
	"strconv"

	goredis "github.com/redis/go-redis/v9"

	"github.com/codeinterp/codeinterp/pkg/store"
	"github.com/codeinterp/codeinterp/pkg/store/memory"
)

// The aliases and the context containers are each a bounded map under a hash tag of its own (B
// is its prefix):
//
//	B e:<entry>  "deadline-ms:" and the value, with PX of the map's TTL
//	B order      ZSET entry -> deadline (the least recently stored go first)

// boundedPut stores ARGV[5] under the entries ARGV[6:], then forgets the expired entries and
// the oldest beyond ARGV[4] in all. ARGV: B, now, ttl-ms, max, value, entries.
var boundedPut = goredis.NewScript(`
local B, now, ttl, max, value = ARGV[1], tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4]), ARGV[5]
local deadline = now + tonumber(ttl)
for i = 6, #ARGV do
  redis.call('SET', B .. 'e:' .. ARGV[i], value, 'PX', ttl)
  redis.call('ZADD', B .. 'order', deadline, ARGV[i])
end
while true do
  local front = redis.call('ZRANGE', B .. 'order', 0, 0, 'WITHSCORES')
  if #front == 0 then break end
  if redis.call('ZCARD', B .. 'order') <= max and now <= tonumber(front[2]) then break end
  redis.call('ZREM', B .. 'order', front[1])
  redis.call('DEL', B .. 'e:' .. front[1])
end
redis.call('PEXPIRE', B .. 'order', ttl)
return 0
`)

// putBounded stores value under entries of the map at prefix b.
func (s *Store) putBounded(op, b string, ttl int64, max int, value string, entries ...string) {
	now := s.nowMS()
	args := make([]any, 0, 5+len(entries))
	args = append(args, b, now, ttl, max, strconv.FormatInt(now+ttl, 10)+":"+value)
	for _, e := range entries {
		args = append(args, e)
	}
	ctx, cancel := s.background()
	defer cancel()
	if err := boundedPut.Run(ctx, s.c, []string{b + "order"}, args...).Err(); err != nil {
		s.logError(op, err)
	}
}

// getBounded returns the live value of entry in the map at prefix b, and whether there is one.
func (s *Store) getBounded(op, b, entry string) (string, bool) {
	ctx, cancel := s.background()
	defer cancel()
	v, err := s.c.Get(ctx, b+"e:"+entry).Result()
	if err != nil {
		if !errors.Is(err, goredis.Nil) {
			s.logError(op, err)
		}
		return "", false
	}
	return splitDeadline(v, s.nowMS())
}

// PutAlias implements [store.Aliases]. As in package memory, aliases are kept for the
// anonymous identity too (a name is the upstream's unguessable id), and an alias to an id
// longer than memory.MaxAliasBytes is not kept.
func (s *Store) PutAlias(identity, from, to string) {
	if from == "" || to == "" || len(to) > memory.MaxAliasBytes {
		return
	}
	s.putBounded("alias put", s.alias, s.o.AliasTTL.Milliseconds(), s.o.AliasMaxEntries, to, part(identity)+boundedID(from))
}

// Alias implements [store.Aliases]: one GET.
func (s *Store) Alias(identity, from string) string {
	if to, ok := s.getBounded("alias get", s.alias, part(identity)+boundedID(from)); ok {
		return to
	}
	return ""
}

// PutContainers implements [store.ContextContainers].
func (s *Store) PutContainers(identity string, ids []string, keys ...store.Key) {
	if identity == "" || len(ids) == 0 {
		return
	}
	kept := make([]string, 0, min(len(ids), store.MaxContextContainers))
	for i := len(ids) - 1; i >= 0 && len(kept) < store.MaxContextContainers; i-- {
		if id := ids[i]; id != "" && len(id) <= store.MaxContainerIDBytes && !slices.Contains(kept, id) {
			kept = append(kept, id)
		}
	}
	if len(kept) == 0 {
		return
	}
	slices.Reverse(kept)
	var entries []string
	for _, k := range keys {
		if k.ID != "" {
			entries = append(entries, entryID(identity, k))
		}
	}
	if len(entries) == 0 {
		return
	}
	body, err := json.Marshal(kept)
	if err != nil {
		s.logError("containers put", err)
		return
	}
	s.putBounded("containers put", s.containers, s.o.ContainersTTL.Milliseconds(), s.o.ContainersMaxEntries, string(body), entries...)
}

// Containers implements [store.ContextContainers]: one GET.
func (s *Store) Containers(identity string, key store.Key) []string {
	if identity == "" {
		return nil
	}
	v, ok := s.getBounded("containers get", s.containers, entryID(identity, key))
	if !ok {
		return nil
	}
	var ids []string
	if err := json.Unmarshal([]byte(v), &ids); err != nil {
		s.logError("containers get", err)
		return nil
	}
	return ids
}
