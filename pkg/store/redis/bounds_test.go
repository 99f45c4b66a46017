package redis_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/codeinterp/codeinterp/pkg/store"
	"github.com/codeinterp/codeinterp/pkg/store/redis"
	"github.com/codeinterp/codeinterp/pkg/store/redis/redistest"
)

// TestOptionBounds: the bounds in all that the contract tests reach only at package memory's
// sizes (bytes of all pending calls, aliases, context containers) hold at the sizes Options
// set, the least recently stored going first.
func TestOptionBounds(t *testing.T) {
	srv := redistest.Start(t)
	s := redis.New(srv.Client(), redis.Options{PendingMaxBytes: 100, AliasMaxEntries: 3, ContainersMaxEntries: 3})
	k := func(i int) store.Key { return store.Key{Kind: "response", ID: "resp_" + strconv.Itoa(i)} }
	call := []store.PendingCall{{CallID: "c", Output: strings.Repeat("x", 39)}} // 40 bytes
	for i := range 4 {
		s.Put("id"+strconv.Itoa(i), call, k(i))
	}
	assert.Nil(t, s.Get("id0", k(0)), "the oldest pending calls went at the bytes bound")
	assert.Nil(t, s.Get("id1", k(1)), "and the next, until 100 bytes are kept at most")
	assert.Equal(t, call, s.Get("id2", k(2)), "the newer stay")
	assert.Equal(t, call, s.Get("id3", k(3)), "the newest stays")

	for i := range 4 {
		s.PutAlias("id"+strconv.Itoa(i), "resp_"+strconv.Itoa(i), "up_"+strconv.Itoa(i))
		s.PutContainers("id"+strconv.Itoa(i), []string{"cntr_" + strconv.Itoa(i)}, k(i))
	}
	assert.Empty(t, s.Alias("id0", "resp_0"), "the oldest alias went")
	assert.Nil(t, s.Containers("id0", k(0)), "the oldest context containers went")
	for i := 1; i < 4; i++ {
		assert.Equal(t, "up_"+strconv.Itoa(i), s.Alias("id"+strconv.Itoa(i), "resp_"+strconv.Itoa(i)), "alias %d stays", i)
		assert.Equal(t, []string{"cntr_" + strconv.Itoa(i)}, s.Containers("id"+strconv.Itoa(i), k(i)), "context containers %d stay", i)
	}
}
