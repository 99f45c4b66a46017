package redis_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/codeinterp/codeinterp/pkg/sandbox"
	"github.com/codeinterp/codeinterp/pkg/sandbox/sandboxtest"
	"github.com/codeinterp/codeinterp/pkg/store/redis"
	"github.com/codeinterp/codeinterp/pkg/store/redis/redistest"
)

// TestRegistryKeepsTheAllowlist: a container's network_policy allowlist is kept in Redis with
// its registration, where another replica reads it back; its secrets are not; a container
// without network has none.
func TestRegistryKeepsTheAllowlist(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	reg := redis.New(srv.Client(), redis.Options{})
	other := redis.New(srv.Client(), redis.Options{})
	m := sandbox.NewManager(&sandboxtest.Provider{}, sandbox.ManagerConfig{Registry: reg}, zaptest.NewLogger(t))
	defer func() { require.NoError(t, m.Close(ctx), "close manager") }()

	policy := &sandbox.NetworkPolicy{AllowedDomains: []string{"api.example.com", "*.example.org"},
		DomainSecrets: []sandbox.DomainSecret{{Domain: "api.example.com", Name: "T", Value: "s3cr3t-value"}}}
	withNet, err := m.Create(ctx, sandbox.CreateRequest{Identity: "alice", Name: "net", Spec: sandbox.Spec{NetworkPolicy: policy}})
	require.NoError(t, err, "create a container with a network policy")
	without, err := m.Create(ctx, sandbox.CreateRequest{Identity: "alice", Name: "none"})
	require.NoError(t, err, "create a container without network")

	got, ok, err := other.Lookup(ctx, withNet.ID)
	require.NoError(t, err, "Lookup")
	require.True(t, ok, "another replica finds the container")
	assert.Equal(t, policy.AllowedDomains, got.AllowedDomains, "the allowlist")
	assert.NotContains(t, fmt.Sprintf("%+v", got), "s3cr3t-value", "no secret in the registration")
	got, _, err = other.Lookup(ctx, without.ID)
	require.NoError(t, err, "Lookup")
	assert.Nil(t, got.AllowedDomains, "no allowlist without network")

	list, err := other.List(ctx, "alice")
	require.NoError(t, err, "List")
	byID := map[string][]string{}
	for _, r := range list {
		byID[r.ID] = r.AllowedDomains
	}
	assert.Equal(t, map[string][]string{withNet.ID: policy.AllowedDomains, without.ID: nil}, byID, "List keeps the allowlists")

	info, err := m.Container(ctx, "alice", withNet.ID)
	require.NoError(t, err, "Container")
	assert.Equal(t, policy.AllowedDomains, info.AllowedDomains, "the Manager shows the allowlist")
}
