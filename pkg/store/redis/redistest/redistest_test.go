package redistest_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/codeinterp/codeinterp/pkg/store/redis/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestServer(t *testing.T) {
	ctx := context.Background()
	s := redistest.Start(t)
	c := s.Client()
	assert.Same(t, c, s.Client(), "one client per server")
	require.NoError(t, c.Set(ctx, "k", "v", 0).Err(), "SET on %s", s.Addr())
	addr := s.Addr()

	s.Stop()
	assert.Error(t, c.Ping(ctx).Err(), "PING of a stopped server")
	s.Stop() // stopping twice does nothing

	s.Restart()
	assert.Equal(t, addr, s.Addr(), "a restarted server keeps its address")
	require.NoError(t, c.Ping(ctx).Err(), "the same client reaches the restarted server")
	assert.Zero(t, c.Exists(ctx, "k").Val(), "a restarted server starts empty: nothing is persisted")

	s.Pause()
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	assert.Error(t, c.Ping(short).Err(), "PING of a paused server")
	s.Resume()
	require.NoError(t, c.Ping(ctx).Err(), "PING after Resume")
}

func TestCluster(t *testing.T) {
	ctx := context.Background()
	s := redistest.StartCluster(t)
	c := s.ClusterClient()
	require.NoError(t, c.Set(ctx, "{a}k", "v", 0).Err(), "SET through the cluster client")
	assert.Equal(t, "v", c.Get(ctx, "{a}k").Val(), "GET through the cluster client")
	s.Restart()
	require.Eventually(t, func() bool { return c.Ping(ctx).Err() == nil }, 5*time.Second, 50*time.Millisecond,
		"the cluster client reaches the restarted node")
	require.NoError(t, c.Set(ctx, "{b}k", "v", 0).Err(), "SET after the restart: the node holds every slot again")
}
