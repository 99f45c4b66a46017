package remote

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/codeinterp/codeinterp/pkg/sandbox"
	"github.com/codeinterp/codeinterp/pkg/sandbox/sandboxtest"
)

// checkingProvider is a fake Provider that also checks Specs, recording each it is asked about.
type checkingProvider struct {
	*sandboxtest.Provider

	// mu guards checked.
	mu      sync.Mutex
	checked []sandbox.Spec
}

func (p *checkingProvider) CheckSpec(s sandbox.Spec) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.checked = append(p.checked, s)
	return nil
}

func (p *checkingProvider) specs() []sandbox.Spec {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]sandbox.Spec(nil), p.checked...)
}

// secretValue is the value of the test's domain secret: it must reach the node, and no log.
const secretValue = "sk-live-0123456789-never-logged"

// TestSpecTravels: a Spec's network policy, its domain secrets' values included, reaches the
// node in Acquire, Create and CheckSpec; no log line of either side holds a secret's value.
func TestSpecTravels(t *testing.T) {
	tests := []struct {
		name string
		give sandbox.Spec
	}{
		{"no policy", sandbox.Spec{MemoryLimit: "4g"}},
		{"empty policy", sandbox.Spec{NetworkPolicy: &sandbox.NetworkPolicy{}}},
		{"allowlist", sandbox.Spec{NetworkPolicy: &sandbox.NetworkPolicy{AllowedDomains: []string{"pypi.org", "*.example.com"}}}},
		{"skills", sandbox.Spec{Skills: &sandbox.SkillFiles{Root: "/skills", Files: []sandbox.SkillFile{
			{Path: "a/SKILL.md", Data: []byte("---\nname: a\n---\n")}, {Path: "a/bin/x", Data: []byte{0, 1, 2}, Exec: true},
		}}}},
		{"secrets", sandbox.Spec{MemoryLimit: "1g", NetworkPolicy: &sandbox.NetworkPolicy{
			AllowedDomains: []string{"api.example.com"},
			DomainSecrets: []sandbox.DomainSecret{
				{Domain: "api.example.com", Name: "API_KEY", Value: secretValue},
				{Domain: "api.example.com", Name: "OTHER", Value: secretValue + "-2"},
			},
		}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			core, logs := observer.New(zapcore.DebugLevel)
			p := &checkingProvider{Provider: &sandboxtest.Provider{}}
			m := sandbox.NewManager(p, sandbox.ManagerConfig{}, zap.New(core))
			t.Cleanup(func() { _ = m.Close(context.Background()) })
			s := serve(t, m, ServerOptions{Log: zap.New(core).Named("server")}, ClientOptions{Log: zap.New(core).Named("client")})

			require.NoError(t, s.client.CheckSpec(tt.give), "CheckSpec of %v", tt.name)
			// The Manager starts a container at its first run: of the lease's, and of the one created.
			l, err := s.client.Acquire(t.Context(), sandbox.AcquireRequest{Identity: "alice", Spec: tt.give})
			require.NoError(t, err, "Acquire with %v", tt.name)
			_, err = l.Run(t.Context(), "x = 1", 0)
			require.NoError(t, err, "Run on the lease")
			l.Release()
			ci, err := s.client.Create(t.Context(), sandbox.CreateRequest{Identity: "alice", Name: "c", Spec: tt.give})
			require.NoError(t, err, "Create with %v", tt.name)
			l, err = s.client.Acquire(t.Context(), sandbox.AcquireRequest{Identity: "alice", ContainerID: ci.ID})
			require.NoError(t, err, "Acquire the container created")
			_, err = l.Run(t.Context(), "x = 1", 0)
			require.NoError(t, err, "Run on the container created")
			l.Release()

			assert.Equal(t, []sandbox.Spec{tt.give, tt.give}, p.Specs(), "the specs of Acquire and Create on the node")
			assert.Equal(t, []sandbox.Spec{tt.give, tt.give}, p.specs(), "the specs CheckSpec checked on the node (CheckSpec, Create)")
			for _, e := range logs.All() {
				line, err := zapcore.NewJSONEncoder(zap.NewDevelopmentEncoderConfig()).EncodeEntry(e.Entry, e.Context)
				require.NoError(t, err, "encode a log entry")
				assert.False(t, strings.Contains(line.String(), secretValue), "a log line holds a secret's value: %s", line.String())
			}
		})
	}
}

// A container's allowlist (never its secrets) travels with its ContainerInfo, so GET and List
// through another replica echo its network_policy.
func TestContainerInfoTravels(t *testing.T) {
	in := sandbox.ContainerInfo{ID: "cntr_1", Name: "n", MemoryLimit: "1g", Status: sandbox.StatusRunning, AllowedDomains: []string{"api.example.com", "*.example.org"}}
	out := containerInfoOf(containerInfoProto(in))
	assert.Equal(t, in.AllowedDomains, out.AllowedDomains, "the allowlist")
	assert.Equal(t, in.ID, out.ID)
}

// An AcquireRequest's Hibernate and IDPrefix reach the node: the container created there has
// the prefix asked for, and hibernates (the node's Manager keeps it on disk when idle).
func TestHibernateTravels(t *testing.T) {
	m := sandbox.NewManager(&sandboxtest.Provider{}, sandbox.ManagerConfig{SessionIdleTTL: 100 * time.Millisecond,
		Hibernation: sandbox.HibernationConfig{Dir: filepath.Join(t.TempDir(), "hib")}}, zaptest.NewLogger(t))
	t.Cleanup(func() { _ = m.Close(context.Background()) })
	s := serve(t, m, ServerOptions{}, ClientOptions{})
	l, err := s.client.Acquire(t.Context(), sandbox.AcquireRequest{Identity: "alice", Session: "s", Hibernate: true, IDPrefix: "container_"})
	require.NoError(t, err, "Acquire")
	assert.True(t, strings.HasPrefix(l.ContainerID(), "container_"), "the node minted the prefix asked: %q", l.ContainerID())
	l.Release()
	assert.Eventually(t, func() bool { n, _ := m.Hibernated(); return n == 1 }, 10*time.Second, 20*time.Millisecond, "hibernated on the node")
}
