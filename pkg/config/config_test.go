package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	configv1 "github.com/codeinterp/codeinterp/api/codeinterp/config/v1"
)

func TestLoadFullFile(t *testing.T) {
	cfg, err := Load("testdata/full.yaml")
	require.NoError(t, err, "load testdata/full.yaml")
	ApplyDefaults(cfg)
	require.NoError(t, Validate(cfg), "validate testdata/full.yaml")

	assert.Equal(t, "unix:///run/codeinterp/extproc.sock", cfg.GetListen())
	assert.Equal(t, "", cfg.GetApiListen(), "api_listen: \"\" is kept: no Containers API")
	assert.Equal(t, uint64(1<<30), cfg.GetMaxUploadBytes(), "max_upload_bytes from the file")
	assert.Equal(t, []string{"/openai"}, cfg.GetPathPrefixes())
	assert.Equal(t, 20*time.Second, cfg.GetShutdownGrace().AsDuration())
	assert.Equal(t, uint32(0), cfg.GetSandbox().GetWarmPoolSize(), "an explicit warm_pool_size: 0 disables the pool")
	assert.NotNil(t, cfg.GetSandbox().WarmPoolSize, "warm_pool_size: 0 is kept as set")
	assert.Equal(t, "4g", cfg.GetSandbox().GetDefaultMemoryLimit())
	assert.Equal(t, uint32(120), cfg.GetSandbox().GetLocal().GetCpuSeconds())
	assert.Equal(t, "fork", cfg.GetSandbox().GetLocal().GetStart(), "start from the file")
	assert.Equal(t, uint32(DefaultMaxProcesses), cfg.GetSandbox().GetLocal().GetMaxProcesses(), "unset local field gets its default")
	assert.Equal(t, uint32(DefaultMaxContainersPerIdentity), cfg.GetSandbox().GetMaxContainersPerIdentity(), "unset identity cap gets its default")

	profiles := Profiles(cfg)
	require.Len(t, profiles, 3)
	def := profiles[""]
	assert.Equal(t, 6, def.MaxRounds)
	assert.Equal(t, "x-tenant-id", def.IdentityHeader)
	assert.Equal(t, DefaultFunctionName, def.FunctionName)
	assert.Equal(t, DefaultForwardHeaders(), def.ForwardHeaders)

	strict := profiles["strict"]
	assert.Equal(t, 2, strict.MaxRounds, "named profile overrides max_rounds")
	assert.Equal(t, 200*time.Second, strict.LoopDeadline, "named profile inherits loop_deadline")
	assert.Equal(t, "x-tenant-id", strict.IdentityHeader, "named profile inherits identity_header")
	assert.Equal(t, []string{"content-type"}, strict.ForwardHeaders, "forward_headers replaces, not appends")
	assert.Equal(t, "http://127.0.0.1:10000", strict.Upstream)
	assert.True(t, profiles["passthrough"].Disabled)
	assert.Equal(t, int64(16<<20), def.MaxResponseBytes, "max_response_bytes from the file")
	assert.Equal(t, 4<<20, strict.MaxOutputBytes, "named profile sets max_output_bytes")
	assert.Equal(t, 4, strict.MaxImages, "named profile sets max_images")
	assert.Equal(t, 2<<20, def.MaxOutputBytes, "max_output_bytes from the file")
	assert.Equal(t, 8, strict.MaxCallsPerTurn, "named profile inherits max_calls_per_turn")
}

func TestDefaults(t *testing.T) {
	cfg, err := Load("")
	require.NoError(t, err)
	ApplyDefaults(cfg)
	require.NoError(t, Validate(cfg), "defaults must validate")
	l := cfg.GetSandbox().GetLocal()
	assert.Equal(t, uint32(DefaultFirstUID), l.GetFirstUid(), "first_uid default")
	assert.Equal(t, uint32(DefaultUIDCount), l.GetUidCount(), "uid_count default")
	assert.Equal(t, DefaultCPUQuota, l.GetCpuQuota(), "cpu_quota default")
	assert.False(t, l.GetKeepBackgroundProcesses(), "background processes are stopped by default")
	assert.Equal(t, DefaultStart, l.GetStart(), "start default")
	assert.Empty(t, cfg.GetSandbox().GetMaxMemoryLimit(), "max_memory_limit: the backend's default (host RAM, at most 64g)")
	assert.Equal(t, DefaultListen, cfg.GetListen())
	assert.Equal(t, DefaultAdminListen, cfg.GetAdminListen())
	assert.Equal(t, DefaultAPIListen, cfg.GetApiListen(), "the Containers API is served by default")
	assert.Equal(t, uint64(DefaultMaxUploadBytes), cfg.GetMaxUploadBytes())
	assert.Equal(t, DefaultUpstream, cfg.GetUpstream())
	assert.Equal(t, uint32(DefaultWarmPoolSize), cfg.GetSandbox().GetWarmPoolSize())
	assert.Equal(t, uint64(DefaultMaxRequestBytes), cfg.GetMaxRequestBytes())
	p := Profiles(cfg)[""]
	assert.Equal(t, DefaultMaxRounds, p.MaxRounds)
	assert.Equal(t, DefaultLoopDeadline, p.LoopDeadline)
	assert.Equal(t, DefaultRunTimeout, p.RunTimeout)
	assert.Equal(t, DefaultMaxOutputBytes, p.MaxOutputBytes)
	assert.Equal(t, DefaultMaxImages, p.MaxImages)
	assert.Equal(t, DefaultMaxCallsPerTurn, p.MaxCallsPerTurn)
	assert.Equal(t, int64(DefaultMaxResponseBytes), p.MaxResponseBytes)
	assert.Equal(t, DefaultMaxRequestBytes-AnswerOverheadBytes, p.MaxAnswerBytes, "the answer fits one ext_proc message")
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		give string
		want string
	}{
		{name: "unknown field", give: "listne: 1.2.3.4:5\n", want: "listne"},
		{name: "wrong type", give: "max_request_bytes: lots\n", want: "max_request_bytes"},
		{name: "bad duration", give: "shutdown_grace: soon\n", want: "shutdown_grace"},
		{name: "not yaml", give: "listen: [\n", want: "parse yaml"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "c.yaml")
			require.NoError(t, os.WriteFile(path, []byte(tt.give), 0o600))
			_, err := Load(path)
			require.Error(t, err, "load %q", tt.give)
			assert.Contains(t, err.Error(), tt.want, "load %q", tt.give)
		})
	}
}

func TestValidateNamesTheField(t *testing.T) {
	tests := []struct {
		name string
		give func(*configv1.Config)
		want string
	}{
		{"listen", func(c *configv1.Config) { c.Listen = "nowhere" }, "listen:"},
		{"unix listen without path", func(c *configv1.Config) { c.Listen = "unix://" }, "listen:"},
		{"api listen", func(c *configv1.Config) { c.ApiListen = proto.String("8081") }, "api_listen:"},
		{"upstream scheme", func(c *configv1.Config) { c.Upstream = "ftp://x" }, "upstream:"},
		{"log level", func(c *configv1.Config) { c.LogLevel = "loud" }, "log_level:"},
		{"prefix", func(c *configv1.Config) { c.PathPrefixes = []string{"openai/"} }, "path_prefixes[0]:"},
		{"small grpc limit", func(c *configv1.Config) { c.MaxRequestBytes = 4096 }, "max_request_bytes:"},
		{"function name", func(c *configv1.Config) { c.DefaultProfile.FunctionName = "run code" }, "default_profile.function_name:"},
		{"named profile run timeout", func(c *configv1.Config) {
			c.Profiles = map[string]*configv1.Profile{"p": {RunTimeout: c.DefaultProfile.LoopDeadline, LoopDeadline: c.DefaultProfile.RunTimeout}}
		}, `profiles["p"].run_timeout:`},
		{"loop deadline within the margin", func(c *configv1.Config) { c.DefaultProfile.LoopDeadline = durationpb.New(LoopDeadlineMargin) }, "default_profile.loop_deadline:"},
		{"named profile loop deadline within the margin", func(c *configv1.Config) {
			c.Profiles = map[string]*configv1.Profile{"p": {LoopDeadline: durationpb.New(LoopDeadlineMargin / 2), RunTimeout: durationpb.New(time.Millisecond)}}
		}, `profiles["p"].loop_deadline:`},
		{"forward reserved header", func(c *configv1.Config) { c.DefaultProfile.ForwardHeaders = []string{"x-codeinterp-followup"} }, "default_profile.forward_headers[0]:"},
		{"backend", func(c *configv1.Config) { c.Sandbox.Backend = "e2b" }, "sandbox.backend:"},
		{"python path", func(c *configv1.Config) { c.Sandbox.Local.Python = "python3" }, "sandbox.local.python:"},
		{"identity cap above the global cap", func(c *configv1.Config) { c.Sandbox.MaxContainersPerIdentity = c.Sandbox.MaxContainers + 1 }, "sandbox.max_containers_per_identity:"},
		{"session cap above the identity cap", func(c *configv1.Config) { c.Sandbox.MaxSessionsPerIdentity = c.Sandbox.MaxContainersPerIdentity + 1 }, "sandbox.max_sessions_per_identity:"},
		{"secret file", func(c *configv1.Config) { c.FollowupSecretFile = "/nonexistent/secret" }, "followup_secret_file:"},
		{"small response limit", func(c *configv1.Config) { c.MaxResponseBytes = 1024 }, "max_response_bytes:"},
		{"credential header case", func(c *configv1.Config) { c.CredentialHeaders = []string{"X-Api-Key"} }, "credential_headers[0]:"},
		{"credential header token", func(c *configv1.Config) { c.CredentialHeaders = []string{"x key"} }, "credential_headers[0]:"},
		{"key check path", func(c *configv1.Config) { c.ApiKeyCheck = &configv1.ApiKeyCheck{Path: "props"} }, "api_key_check.path:"},
		{"key check method", func(c *configv1.Config) { c.ApiKeyCheck = &configv1.ApiKeyCheck{Method: "GET /"} }, "api_key_check.method:"},
		{"key check refusal status", func(c *configv1.Config) { c.ApiKeyCheck = &configv1.ApiKeyCheck{AcceptStatuses: []uint32{401}} }, "api_key_check.accept_statuses[0]:"},
		{"key check mode", func(c *configv1.Config) { c.ApiKeyCheck = &configv1.ApiKeyCheck{Mode: "models"} }, "api_key_check.mode:"},
		{"key check accepted ttl", func(c *configv1.Config) {
			c.ApiKeyCheck = &configv1.ApiKeyCheck{AcceptedTtl: durationpb.New(2 * time.Hour)}
		}, "api_key_check.accepted_ttl:"},
		{"upload idle", func(c *configv1.Config) { c.ApiUploadIdle = durationpb.New(0) }, "api_upload_idle:"},
		{"store", func(c *configv1.Config) { c.Store = "etcd" }, "store:"},
		{"role", func(c *configv1.Config) { c.Role = "worker" }, "role:"},
		{"gateway without redis", func(c *configv1.Config) { c.Role = RoleGateway }, "role:"},
		{"redis without a secret", func(c *configv1.Config) { c.Store = StoreRedis; c.SandboxListen = "127.0.0.1:7000" }, "fleet_secret_file:"},
		{"redis all without a sandbox address", func(c *configv1.Config) { c.Store = StoreRedis }, "sandbox_listen:"},
		{"gateway with a sandbox address", func(c *configv1.Config) {
			c.Store, c.Role, c.SandboxListen = StoreRedis, RoleGateway, "127.0.0.1:7000"
		}, "sandbox_listen:"},
		{"wildcard node address", func(c *configv1.Config) { c.SandboxListen = "0.0.0.0:7000" }, "node_address:"},
		{"node id", func(c *configv1.Config) { c.NodeId = "node/1" }, "node_id:"},
		{"redis address", func(c *configv1.Config) { c.Store = StoreRedis; c.Redis.Addresses = []string{"redis"} }, "redis.addresses[0]:"},
		{"fleet tls", func(c *configv1.Config) { c.FleetTls = &configv1.FleetTLS{CertFile: "/nonexistent"} }, "fleet_tls.key_file:"},
		{"small output budget", func(c *configv1.Config) { c.DefaultProfile.MaxOutputBytes = 1024 }, "default_profile.max_output_bytes:"},
		{"output budget beyond the send limit", func(c *configv1.Config) {
			c.Profiles = map[string]*configv1.Profile{"p": {MaxOutputBytes: c.MaxRequestBytes/2 + 1}}
		}, `profiles["p"].max_output_bytes:`},
		{"calls per turn", func(c *configv1.Config) { c.DefaultProfile.MaxCallsPerTurn = 1000 }, "default_profile.max_calls_per_turn:"},
		{"images", func(c *configv1.Config) { c.DefaultProfile.MaxImages = 5000 }, "default_profile.max_images:"},
		{"uid range beyond 32 bits", func(c *configv1.Config) { c.Sandbox.Local.FirstUid = 1<<32 - 100 }, "sandbox.local.first_uid:"},
		{"uid range smaller than the containers", func(c *configv1.Config) { c.Sandbox.Local.UidCount = c.Sandbox.MaxContainers }, "sandbox.local.uid_count:"},
		{"cpu quota too small", func(c *configv1.Config) { c.Sandbox.Local.CpuQuota = 0.001 }, "sandbox.local.cpu_quota:"},
		{"cpu quota negative", func(c *configv1.Config) { c.Sandbox.Local.CpuQuota = -1 }, "sandbox.local.cpu_quota:"},
		{"relative state dir", func(c *configv1.Config) { c.Sandbox.Local.StateDir = "run/codeinterp" }, "sandbox.local.state_dir:"},
		{"profile identity header with the api", func(c *configv1.Config) {
			c.Profiles = map[string]*configv1.Profile{"analyst": {IdentityHeader: "x-analyst"}, "same": {}}
		}, `api_listen: the Containers API identifies callers by default_profile.identity_header (""), but profiles "analyst" set another`},
		{"unknown start mode", func(c *configv1.Config) { c.Sandbox.Local.Start = "clone" }, "sandbox.local.start:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := &configv1.Config{}
			ApplyDefaults(cfg)
			tt.give(cfg)
			err := Validate(cfg)
			require.Error(t, err, "validate with %s changed", tt.name)
			assert.Contains(t, err.Error(), tt.want, "validate with %s changed", tt.name)
		})
	}
}

// TestAPIIdentityHeader: a profile's own identity_header is refused only while the Containers
// API is served; one equal to the default's is fine.
func TestAPIIdentityHeader(t *testing.T) {
	cfg := &configv1.Config{}
	ApplyDefaults(cfg)
	cfg.DefaultProfile.IdentityHeader = "x-tenant"
	cfg.Profiles = map[string]*configv1.Profile{"a": {IdentityHeader: "x-tenant"}, "b": {}}
	require.NoError(t, Validate(cfg), "every profile identifies as the default")
	cfg.Profiles["c"] = &configv1.Profile{IdentityHeader: "x-other"}
	err := Validate(cfg)
	require.Error(t, err, "a profile identifying otherwise")
	assert.Contains(t, err.Error(), `profiles "c" set another identity_header`, "names the profile")
	cfg.ApiListen = proto.String("")
	require.NoError(t, Validate(cfg), "without the Containers API")
}

// TestLoopDeadlineMargin: the loop gets loop_deadline minus LoopDeadlineMargin, so a
// loop_deadline must be longer than the margin.
func TestSandboxRobustnessFields(t *testing.T) {
	cfg := &configv1.Config{}
	require.NoError(t, Parse([]byte(`
sandbox:
  max_memory_limit: 16g
  local:
    first_uid: 200000
    uid_count: 1000
    cpu_quota: 0.5
    keep_background_processes: true
    state_dir: /var/run/ci
`), cfg), "parse")
	ApplyDefaults(cfg)
	require.NoError(t, Validate(cfg), "validate")
	assert.Equal(t, "16g", cfg.GetSandbox().GetMaxMemoryLimit(), "max_memory_limit")
	l := cfg.GetSandbox().GetLocal()
	assert.Equal(t, uint32(200000), l.GetFirstUid(), "first_uid")
	assert.Equal(t, uint32(1000), l.GetUidCount(), "uid_count")
	assert.Equal(t, 0.5, l.GetCpuQuota(), "cpu_quota")
	assert.True(t, l.GetKeepBackgroundProcesses(), "keep_background_processes")
	assert.Equal(t, "/var/run/ci", l.GetStateDir(), "state_dir")
}

func TestLoopDeadlineMargin(t *testing.T) {
	tests := []struct {
		give    time.Duration
		wantErr bool
	}{
		{give: LoopDeadlineMargin / 2, wantErr: true},
		{give: LoopDeadlineMargin, wantErr: true},
		{give: LoopDeadlineMargin + time.Millisecond},
		{give: DefaultLoopDeadline},
	}
	for _, tt := range tests {
		cfg := &configv1.Config{}
		ApplyDefaults(cfg)
		cfg.DefaultProfile.LoopDeadline = durationpb.New(tt.give)
		cfg.DefaultProfile.RunTimeout = durationpb.New(time.Millisecond)
		err := Validate(cfg)
		if tt.wantErr {
			require.Error(t, err, "validate with loop_deadline %v", tt.give)
			assert.Contains(t, err.Error(), "default_profile.loop_deadline:", "validate with loop_deadline %v", tt.give)
			continue
		}
		assert.NoError(t, err, "validate with loop_deadline %v", tt.give)
	}
}

// TestOutputBudgetDefaultFitsTheSendLimit: with a small max_request_bytes, the default output
// budget shrinks to what a streamed answer can carry, so the defaults stay valid.
func TestOutputBudgetDefaultFitsTheSendLimit(t *testing.T) {
	cfg := &configv1.Config{MaxRequestBytes: 4 << 20}
	ApplyDefaults(cfg)
	require.NoError(t, Validate(cfg), "validate")
	assert.Equal(t, uint64((4<<20-AnswerOverheadBytes)/2), cfg.GetDefaultProfile().GetMaxOutputBytes(), "default budget")
}

func TestValidateAcceptsTheFleetTopologies(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "fleet-secret")
	require.NoError(t, os.WriteFile(secret, []byte(strings.Repeat("s", MinFleetSecretBytes)), 0o600))
	tests := []struct {
		name string
		give func(*configv1.Config)
	}{
		{"one process", func(*configv1.Config) {}},
		{"replicas sharing redis", func(c *configv1.Config) {
			c.Store, c.FleetSecretFile, c.SandboxListen, c.NodeAddress = StoreRedis, secret, "0.0.0.0:7000", "pod-0.sandbox:7000"
		}},
		{"gateway", func(c *configv1.Config) { c.Store, c.Role, c.FleetSecretFile = StoreRedis, RoleGateway, secret }},
		{"sandbox node", func(c *configv1.Config) {
			c.Store, c.Role, c.FleetSecretFile, c.SandboxListen = StoreRedis, RoleSandbox, secret, "127.0.0.1:7000"
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := &configv1.Config{}
			tt.give(cfg)
			ApplyDefaults(cfg)
			assert.NoError(t, Validate(cfg))
		})
	}
}
