package app

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/protobuf/proto"

	configv1 "github.com/codeinterp/codeinterp/api/codeinterp/config/v1"
	"github.com/codeinterp/codeinterp/pkg/config"
	"github.com/codeinterp/codeinterp/pkg/egress"
	"github.com/codeinterp/codeinterp/pkg/loop"
	"github.com/codeinterp/codeinterp/pkg/memlimit"
	"github.com/codeinterp/codeinterp/pkg/sandbox"
	"github.com/codeinterp/codeinterp/pkg/sandbox/local"
	"github.com/codeinterp/codeinterp/pkg/schema"
)

// TestConfigDefaultsAreThePackages: the defaults config.proto documents (pkg/config's, a leaf)
// are the zero-value defaults of the packages the fields are mapped onto, so a field left out of
// the configuration and a zero field of a package's Config mean the same.
func TestConfigDefaultsAreThePackages(t *testing.T) {
	tests := []struct {
		name string
		give any // pkg/config's default
		want any // the package's
	}{
		{"default_profile.function_name", config.DefaultFunctionName, schema.DefaultFunctionName},
		{"default_profile.max_rounds", config.DefaultMaxRounds, loop.DefaultMaxRounds},
		{"default_profile.run_timeout", config.DefaultRunTimeout, sandbox.DefaultRunTimeout},
		{"default_profile.output_limit_bytes", config.DefaultModelOutputLimit, loop.DefaultOutputLimit},
		{"default_profile.max_output_bytes", config.DefaultMaxOutputBytes, loop.DefaultMaxOutputBytes},
		{"default_profile.max_images", config.DefaultMaxImages, loop.DefaultMaxImages},
		{"default_profile.max_calls_per_turn", config.DefaultMaxCallsPerTurn, loop.DefaultMaxCallsPerTurn},
		{"sandbox.session_idle_ttl", config.DefaultSessionIdleTTL, sandbox.DefaultSessionIdleTTL},
		{"sandbox.max_sessions_per_identity", config.DefaultMaxSessionsPerIdentity, sandbox.DefaultMaxSessionsPerIdentity},
		{"sandbox.max_containers", config.DefaultMaxContainers, sandbox.DefaultMaxContainers},
		{"sandbox.max_containers_per_identity", config.DefaultMaxContainersPerIdentity, sandbox.DefaultMaxContainersPerIdentity},
		{"sandbox.default_memory_limit", config.DefaultMemoryLimit, local.DefaultMemoryLimit},
		{"sandbox.output_limit_bytes", config.DefaultRunOutputLimit, local.DefaultOutputLimit},
		{"sandbox.local.python", config.DefaultPython, local.DefaultPython},
		{"sandbox.local.bwrap", config.DefaultBwrap, local.DefaultBwrap},
		{"sandbox.local.cpu_seconds", config.DefaultCPUSeconds, local.DefaultCPUSeconds},
		{"sandbox.local.max_processes", config.DefaultMaxProcesses, local.DefaultMaxProcesses},
		{"sandbox.local.max_file_bytes", config.DefaultMaxFileBytes, local.DefaultMaxFileBytes},
		{"sandbox.local.data_bytes", config.DefaultDataBytes, local.DefaultDataBytes},
		{"sandbox.local.tmp_bytes", config.DefaultTmpBytes, local.DefaultTmpBytes},
		{"sandbox.local.start", config.DefaultStart, local.DefaultStart},
		{"sandbox.local.start fork", config.StartFork, local.StartFork},
		{"sandbox.local.start exec", config.StartExec, local.StartExec},
		{"sandbox.local.first_uid", config.DefaultFirstUID, local.DefaultFirstUID},
		{"sandbox.local.uid_count", config.DefaultUIDCount, local.DefaultUIDCount},
		{"sandbox.local.cpu_quota", config.DefaultCPUQuota, local.DefaultCPUQuota},
		{"sandbox.local.interrupt_grace", config.DefaultInterruptGrace, local.DefaultInterruptGrace},
		{"hibernation.lifetime", config.DefaultHibernationLifetime, sandbox.DefaultHibernationLifetime},
		{"hibernation.max_bytes_per_identity", config.DefaultHibernationMaxBytesPerIdentity, sandbox.DefaultHibernationMaxBytesPerIdentity},
		{"hibernation.max_per_identity", config.DefaultHibernationMaxPerIdentity, sandbox.DefaultHibernationMaxPerIdentity},
		{"hibernation.max_bytes", config.DefaultHibernationMaxBytes, sandbox.DefaultHibernationMaxBytes},
		{"hibernation.max_containers", config.DefaultHibernationMaxContainers, sandbox.DefaultHibernationMaxContainers},
		{"network.max_connections", config.DefaultNetworkMaxConnections, egress.DefaultMaxConns},
		{"network.max_bytes", config.DefaultNetworkMaxBytes, egress.DefaultMaxBytes},
		{"network.max_header_bytes", config.DefaultNetworkMaxHeaderBytes, egress.DefaultMaxHeaderBytes},
		{"network.dial_timeout", config.DefaultNetworkDialTimeout, egress.DefaultDialTimeout},
		{"network.idle_timeout", config.DefaultNetworkIdleTimeout, egress.DefaultIdleTimeout},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, tt.give, "%s: pkg/config's default is the package's", tt.name)
		})
	}
	assert.True(t, memlimit.Valid(config.DefaultMemoryLimit), "the default memory limit %q is a size a request may name", config.DefaultMemoryLimit)
}

// TestValidateNamesThePackageFields: what only the packages know is checked by Validate, naming
// the field, besides what config.Validate checks.
func TestValidateNamesThePackageFields(t *testing.T) {
	tests := []struct {
		name string
		give func(*configv1.Config)
		want string
	}{
		{"memory", func(c *configv1.Config) { c.Sandbox.DefaultMemoryLimit = "2g" }, "sandbox.default_memory_limit:"},
		{"max memory not a size", func(c *configv1.Config) { c.Sandbox.MaxMemoryLimit = "lots" }, "sandbox.max_memory_limit:"},
		{"max memory below the default", func(c *configv1.Config) { c.Sandbox.MaxMemoryLimit = "512m" }, "sandbox.max_memory_limit:"},
		{"a field config checks", func(c *configv1.Config) { c.LogLevel = "loud" }, "log_level:"},
		{"allowed domain", func(c *configv1.Config) { c.Network.AllowedDomains = []string{"10.0.0.1"} }, "network.allowed_domains:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := &configv1.Config{}
			config.ApplyDefaults(cfg)
			require.NoError(t, Validate(cfg), "the defaults are valid")
			tt.give(cfg)
			err := Validate(cfg)
			require.Error(t, err, "validate with %s changed", tt.name)
			assert.Contains(t, err.Error(), tt.want, "validate with %s changed", tt.name)
		})
	}
}

func TestValidateTakesAMaxMemoryAboveTheDefault(t *testing.T) {
	cfg := &configv1.Config{}
	config.ApplyDefaults(cfg)
	cfg.Sandbox.DefaultMemoryLimit = "4g"
	cfg.Sandbox.MaxMemoryLimit = "16g"
	assert.NoError(t, Validate(cfg), "default_memory_limit 4g within max_memory_limit 16g")
}

// TestNewValidates: New refuses a configuration Validate refuses, before it starts anything.
func TestNewValidates(t *testing.T) {
	cfg := &configv1.Config{}
	config.ApplyDefaults(cfg)
	cfg.Sandbox.DefaultMemoryLimit = "3g"
	_, err := New(Options{Config: cfg})
	require.Error(t, err, "New with default_memory_limit 3g")
	assert.Contains(t, err.Error(), "sandbox.default_memory_limit", "the error names the field")
	_, err = New(Options{})
	assert.Error(t, err, "New without a Config")
}

func TestSecretOf(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	require.NoError(t, os.WriteFile(good, []byte("0123456789abcdef\n"), 0o600), "write the secret file")

	tests := []struct {
		name      string
		giveBytes []byte
		givePath  string
		want      []byte
	}{
		{name: "given wins over the file", giveBytes: []byte("given"), givePath: good, want: []byte("given")},
		{name: "the file", givePath: good, want: []byte("0123456789abcdef\n")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := secretOf(tt.giveBytes, tt.givePath)
			require.NoError(t, err, "secretOf(%q, %q)", tt.giveBytes, tt.givePath)
			assert.Equal(t, tt.want, got, "secretOf(%q, %q)", tt.giveBytes, tt.givePath)
		})
	}
}

func TestSecretOfRefusesABadFile(t *testing.T) {
	dir := t.TempDir()
	short := filepath.Join(dir, "short")
	require.NoError(t, os.WriteFile(short, []byte("  0123456789  \n"), 0o600), "write the short secret file")
	tests := []struct {
		name     string
		givePath string
		wantErr  string
	}{
		{name: "a short file", givePath: short, wantErr: "at least 16 bytes"},
		{name: "a missing file", givePath: filepath.Join(dir, "missing"), wantErr: "read followup_secret_file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := secretOf(nil, tt.givePath)
			require.Error(t, err, "secretOf(nil, %q)", tt.givePath)
			assert.Contains(t, err.Error(), tt.wantErr, "secretOf(nil, %q)", tt.givePath)
		})
	}
}

func TestSecretOfMakesARandomOne(t *testing.T) {
	a, err := secretOf(nil, "")
	require.NoError(t, err, "a random secret")
	b, err := secretOf(nil, "")
	require.NoError(t, err, "another random secret")
	assert.Len(t, a, 32, "32 random bytes")
	assert.NotEqual(t, a, b, "each made anew")
}

// TestIsolationWarningOnce: a configuration turning isolation off is warned about once, by the
// backend that runs without it.
func TestIsolationWarningOnce(t *testing.T) {
	cfg := &configv1.Config{Sandbox: &configv1.Sandbox{
		WarmPoolSize: proto.Uint32(0),
		Local:        &configv1.LocalSandbox{UnsafeNoIsolation: true, Start: config.StartExec, WorkDir: t.TempDir(), StateDir: t.TempDir()},
	}}
	config.ApplyDefaults(cfg)
	core, logs := observer.New(zap.WarnLevel)
	svc, err := New(Options{Config: cfg, Log: zap.New(core)})
	require.NoError(t, err, "new app without isolation")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, svc.Shutdown(ctx), "shutdown")
	var warned []string
	for _, e := range logs.FilterMessageSnippet("isolation is OFF").All() {
		warned = append(warned, e.LoggerName+": "+e.Message)
	}
	assert.Len(t, warned, 1, "one warning that isolation is off: %q", warned)
}

// TestNetworkConfig: the network section becomes the local backend's network settings.
func TestNetworkConfig(t *testing.T) {
	cfg := &configv1.Config{Network: &configv1.Network{
		Enabled: true, AllowedDomains: []string{"api.example.com"}, AllowNetworks: []string{"10.20.0.0/16"},
		Ports: []uint32{443}, MaxConnections: 4, MaxBytes: 1 << 20, MaxHeaderBytes: 4096,
	}}
	config.ApplyDefaults(cfg)
	require.NoError(t, Validate(cfg), "the configuration is valid")
	got := localConfig(cfg).Network
	want := local.NetworkConfig{Enabled: true, AllowedDomains: []string{"api.example.com"}, Proxy: egress.Options{
		AllowNetworks: []netip.Prefix{netip.MustParsePrefix("10.20.0.0/16")}, Ports: []int{443},
		MaxConns: 4, MaxBytes: 1 << 20, MaxHeaderBytes: 4096,
		DialTimeout: config.DefaultNetworkDialTimeout, IdleTimeout: config.DefaultNetworkIdleTimeout,
	}}
	assert.Equal(t, want, got, "the network settings of %v", cfg.Network)
}
