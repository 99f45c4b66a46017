package redis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/codeinterp/codeinterp/pkg/store"
)

// The node directory lives under the {nodes} hash tag (B is its prefix):
//
//	B live  ZSET node id -> deadline of its last heartbeat (ms)
//	B info  HASH node id -> the node's JSON
//
// Both keys live as long as the longest heartbeat's TTL from when it was sent, so that a
// directory whose nodes all died empties itself.
// A script that reads them first forgets the nodes whose deadline has passed.

// nodesSweep is the Lua the node scripts share: sweep forgets the nodes whose deadline is
// before ARGV[2].
const nodesSweep = `
local B, now = ARGV[1], ARGV[2]
local function sweep()
  local gone = redis.call('ZRANGEBYSCORE', B .. 'live', '-inf', '(' .. now)
  for _, id in ipairs(gone) do
    redis.call('ZREM', B .. 'live', id)
    redis.call('HDEL', B .. 'info', id)
  end
end
`

// nodesHeartbeat records node ARGV[3] (JSON ARGV[4]) as live until ARGV[5], and lets the
// directory's keys live ARGV[6] ms at least, the heartbeat's TTL.
var nodesHeartbeat = goredis.NewScript(nodesSweep + `
sweep()
redis.call('ZADD', B .. 'live', ARGV[5], ARGV[3])
redis.call('HSET', B .. 'info', ARGV[3], ARGV[4])
for _, k in ipairs({B .. 'live', B .. 'info'}) do
  if redis.call('PTTL', k) < tonumber(ARGV[6]) then redis.call('PEXPIRE', k, ARGV[6]) end
end
return 0
`)

// nodesLive returns the JSON of the live nodes.
var nodesLive = goredis.NewScript(nodesSweep + `
sweep()
local ids = redis.call('ZRANGE', B .. 'live', 0, -1)
if #ids == 0 then return {} end
return redis.call('HMGET', B .. 'info', unpack(ids))
`)

// nodesLeave forgets node ARGV[3].
var nodesLeave = goredis.NewScript(`
redis.call('ZREM', ARGV[1] .. 'live', ARGV[3])
redis.call('HDEL', ARGV[1] .. 'info', ARGV[3])
return 0
`)

// node is a store.Node as the directory keeps it.
type node struct {
	ID         string `json:"id"`
	Addr       string `json:"addr"`
	Containers int    `json:"containers"`
	Capacity   int    `json:"capacity"`
}

func (s *Store) runNodes(ctx context.Context, op string, sc *goredis.Script, args ...any) *goredis.Cmd {
	ctx, cancel := s.call(ctx)
	defer cancel()
	cmd := sc.Run(ctx, s.c, []string{s.nodes}, append([]any{s.nodes, s.nowMS()}, args...)...)
	if err := cmd.Err(); err != nil && !errors.Is(err, goredis.Nil) {
		cmd.SetErr(fmt.Errorf("redis nodes %s: %w", op, err))
	}
	return cmd
}

// Heartbeat implements [store.Nodes]: one script; the ttl is counted on the Store's clock.
func (s *Store) Heartbeat(ctx context.Context, n store.Node, ttl time.Duration) error {
	b, err := json.Marshal(node(n))
	if err != nil {
		return fmt.Errorf("redis nodes heartbeat: %w", err)
	}
	ms := max(ttl.Milliseconds(), 1)
	return s.runNodes(ctx, "heartbeat", nodesHeartbeat, n.ID, string(b), s.o.Now().Add(ttl).UnixMilli(), ms).Err()
}

// Live implements [store.Nodes]: one script.
func (s *Store) Live(ctx context.Context) ([]store.Node, error) {
	v, err := s.runNodes(ctx, "live", nodesLive).Slice()
	if err != nil {
		return nil, err
	}
	out := make([]store.Node, 0, len(v))
	for _, e := range v {
		b, ok := e.(string)
		if !ok {
			continue // the node left between the two reads of the script: none
		}
		var n node
		if err := json.Unmarshal([]byte(b), &n); err != nil {
			return nil, fmt.Errorf("redis nodes live: %w", err)
		}
		out = append(out, store.Node(n))
	}
	return out, nil
}

// Leave implements [store.Nodes].
func (s *Store) Leave(ctx context.Context, id string) error {
	return s.runNodes(ctx, "leave", nodesLeave, id).Err()
}
