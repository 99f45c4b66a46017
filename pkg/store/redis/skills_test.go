package redis_test

import (
	"encoding/json"
	"strconv"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/codeinterp/codeinterp/pkg/skills"
	"github.com/codeinterp/codeinterp/pkg/skills/skillstest"
	"github.com/codeinterp/codeinterp/pkg/store/redis"
	"github.com/codeinterp/codeinterp/pkg/store/redis/redistest"
)

func skillStores(c goredis.UniversalClient) skillstest.NewStore {
	return func(t *testing.T, b skills.Bounds) skills.Store {
		return redis.NewSkills(c, redis.SkillsOptions{Prefix: "t" + strconv.FormatInt(prefixes.Add(1), 10) + ":", Bounds: b})
	}
}

// TestSkills runs the skills.Store contract on a real Redis, and through a Cluster client
// (every transaction's keys in the slot of {skills}).
func TestSkills(t *testing.T) {
	t.Run("redis", func(t *testing.T) { skillstest.Run(t, skillStores(redistest.Start(t).Client())) })
	t.Run("cluster", func(t *testing.T) { skillstest.Run(t, skillStores(redistest.StartCluster(t).ClusterClient())) })
}

// TestSkillsShared: a skill created through one Skills is read, mounted and deleted through
// another on the same Redis (two replicas), and what Attach recorded is read there too.
func TestSkillsShared(t *testing.T) {
	srv := redistest.Start(t)
	o := redis.SkillsOptions{Prefix: "shared:"}
	c2 := goredis.NewClient(&goredis.Options{Addr: srv.Addr()}) // the second replica's own client
	t.Cleanup(func() { _ = c2.Close() })
	one, two := redis.NewSkills(srv.Client(), o), redis.NewSkills(c2, o)
	ctx := t.Context()
	s, err := one.Create(ctx, "alice", skillstest.Bundle("csv", 100))
	require.NoError(t, err)
	got, err := two.Get(ctx, "alice", s.ID)
	require.NoError(t, err, "the skill through the other replica")
	assert.Equal(t, s, got)
	b, _, err := two.Bundle(ctx, "alice", s.ID, "")
	require.NoError(t, err, "the bundle through the other replica")
	assert.Equal(t, "csv", b.Name)
	as := []skills.Announced{{Name: "csv", Description: "d csv", Path: "/home/oai/skills/csv-x/SKILL.md"}}
	require.NoError(t, one.Attach(ctx, "alice", "cntr_1", as))
	att, err := two.Attached(ctx, "alice", "cntr_1")
	require.NoError(t, err)
	assert.Equal(t, as, att, "attached through the other replica")
	require.NoError(t, two.Delete(ctx, "alice", s.ID))
	_, err = one.Get(ctx, "alice", s.ID)
	assert.ErrorIs(t, err, skills.ErrNotFound, "deleted through the other replica")
}

// TestSkillsAttachTTL: Attach's record has a TTL, renewed when it is read.
func TestSkillsAttachTTL(t *testing.T) {
	srv := redistest.Start(t)
	st := redis.NewSkills(srv.Client(), redis.SkillsOptions{Prefix: "ttl:", AttachTTL: time.Hour})
	require.NoError(t, st.Attach(t.Context(), "alice", "cntr_1", []skills.Announced{{Name: "a"}}))
	keys, err := srv.Client().Keys(t.Context(), "ttl:{skills}:a:*").Result()
	require.NoError(t, err)
	require.Len(t, keys, 1, "one attach key")
	ttl, err := srv.Client().TTL(t.Context(), keys[0]).Result()
	require.NoError(t, err)
	assert.InDelta(t, time.Hour.Seconds(), ttl.Seconds(), 5, "the record's TTL")
	require.NoError(t, srv.Client().Expire(t.Context(), keys[0], time.Minute).Err())
	_, err = st.Attached(t.Context(), "alice", "cntr_1")
	require.NoError(t, err)
	ttl, err = srv.Client().TTL(t.Context(), keys[0]).Result()
	require.NoError(t, err)
	assert.InDelta(t, time.Hour.Seconds(), ttl.Seconds(), 5, "the TTL renewed by a read")
}

// TestSkillsBundleCache: a bundle read is kept in the process (its key is not read again), but
// a version deleted through another replica is not found; a bundle past CacheBytes is not kept.
func TestSkillsBundleCache(t *testing.T) {
	srv := redistest.Start(t)
	ctx := t.Context()
	o := redis.SkillsOptions{Prefix: "cache:", CacheBytes: 1 << 20}
	one, two := redis.NewSkills(srv.Client(), o), redis.NewSkills(srv.Client(), o)
	s, err := one.Create(ctx, "alice", skillstest.Bundle("small", 100))
	require.NoError(t, err)
	_, _, err = one.Bundle(ctx, "alice", s.ID, "")
	require.NoError(t, err, "the first read")
	keys, err := srv.Client().Keys(ctx, "cache:{skills}:b:*").Result()
	require.NoError(t, err)
	require.Len(t, keys, 1, "one bundle key")
	require.NoError(t, srv.Client().Del(ctx, keys[0]).Err(), "drop the bundle's key behind the store's back")
	b, _, err := one.Bundle(ctx, "alice", s.ID, "")
	require.NoError(t, err, "the second read, from the cache")
	assert.Equal(t, "small", b.Name)

	require.NoError(t, two.Delete(ctx, "alice", s.ID), "deleted through the other replica")
	_, _, err = one.Bundle(ctx, "alice", s.ID, "")
	assert.ErrorIs(t, err, skills.ErrNotFound, "a deleted skill's bundle, cached, is not found")

	big, err := one.Create(ctx, "alice", skillstest.Bundle("big", 2<<20))
	require.NoError(t, err)
	_, _, err = one.Bundle(ctx, "alice", big.ID, "")
	require.NoError(t, err, "the big bundle's first read")
	keys, err = srv.Client().Keys(ctx, "cache:{skills}:b:*").Result()
	require.NoError(t, err)
	require.Len(t, keys, 1, "the big bundle's key")
	require.NoError(t, srv.Client().Del(ctx, keys[0]).Err())
	_, _, err = one.Bundle(ctx, "alice", big.ID, "")
	assert.ErrorIs(t, err, skills.ErrNotFound, "a bundle past CacheBytes is read from Redis again")
}

// TestSkillsKeptBeforeEpochs: a skill kept before versions had an Epoch shows each version's
// creation microseconds as its Epoch, by which it is read, and a version added now has a later
// one, even when the kept one was made by a replica whose clock was ahead.
func TestSkillsKeptBeforeEpochs(t *testing.T) {
	srv := redistest.Start(t)
	ctx := t.Context()
	st := redis.NewSkills(srv.Client(), redis.SkillsOptions{Prefix: "old:"})
	s, err := st.Create(ctx, "alice", skillstest.Bundle("csv", 100))
	require.NoError(t, err, "create")
	keys, err := srv.Client().Keys(ctx, "old:{skills}:s:*").Result()
	require.NoError(t, err, "the skills' hash")
	require.Len(t, keys, 1, "one identity's hash")
	raw, err := srv.Client().HGet(ctx, keys[0], s.ID).Result()
	require.NoError(t, err, "the skill's record")
	var rec map[string]any
	require.NoError(t, json.Unmarshal([]byte(raw), &rec), "decode the record")
	delete(rec, "last_epoch")
	v1 := rec["versions"].(map[string]any)["1"].(map[string]any)
	delete(v1, "epoch")
	// Made by a replica whose clock was an hour ahead.
	created := time.Now().Add(time.Hour).UnixNano()
	v1["created_at"] = created
	old, err := json.Marshal(rec)
	require.NoError(t, err, "encode the record")
	require.NoError(t, srv.Client().HSet(ctx, keys[0], s.ID, old).Err(), "write the record as kept before epochs")

	v, err := st.Version(ctx, "alice", s.ID, "1")
	require.NoError(t, err, "version 1")
	want := strconv.FormatInt(created/1000, 10)
	assert.Equal(t, want, v.Epoch, "its creation's microseconds")
	byEpoch, err := st.Version(ctx, "alice", s.ID, want)
	require.NoError(t, err, "version 1 by that epoch")
	assert.Equal(t, "1", byEpoch.Version)
	v2, err := st.AddVersion(ctx, "alice", s.ID, skillstest.Bundle("csv", 100), true)
	require.NoError(t, err, "add a version")
	e2, _ := strconv.ParseInt(v2.Epoch, 10, 64)
	assert.Greater(t, e2, created/1000, "a later epoch than the kept version's")
}
