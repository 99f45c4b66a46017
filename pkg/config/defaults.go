package config

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"

	configv1 "github.com/codeinterp/codeinterp/api/codeinterp/config/v1"
)

// Defaults of the server configuration, as documented in config.proto. Those of the fields a
// package reads (the loop's bounds, the sandbox manager's caps, the local backend's limits) are
// that package's zero-value defaults too; internal/app's tests check that they agree.
const (
	DefaultListen             = "127.0.0.1:50051"
	DefaultAdminListen        = "127.0.0.1:9090"
	DefaultUpstream           = "http://127.0.0.1:10000"
	DefaultLogLevel           = "info"
	DefaultMaxRequestBytes    = 64 << 20
	DefaultShutdownGrace      = 30 * time.Second
	DefaultProfileMetadataKey = "x-codeinterp-profile"
	DefaultMaxResponseBytes   = 32 << 20
	DefaultAPIListen          = "127.0.0.1:8081"
	DefaultMaxUploadBytes     = 512 << 20
	DefaultStore              = StoreMemory
	DefaultRole               = RoleAll
	DefaultRedisAddress       = "127.0.0.1:6379"
	DefaultRedisKeyPrefix     = "codeinterp:"
	DefaultRedisTimeout       = 2 * time.Second

	DefaultFunctionName     = "code_interpreter"
	DefaultMaxRounds        = 8
	DefaultLoopDeadline     = 240 * time.Second
	DefaultRunTimeout       = 30 * time.Second
	DefaultModelOutputLimit = 16 << 10
	DefaultMaxOutputBytes   = 8 << 20
	DefaultMaxImages        = 32
	DefaultMaxCallsPerTurn  = 16
	// DefaultKeepAliveInterval is how long a progressive stream may send nothing before it
	// sends an SSE comment.
	DefaultKeepAliveInterval = 15 * time.Second

	DefaultSandboxBackend           = "local"
	DefaultWarmPoolSize             = 2
	DefaultSessionIdleTTL           = 20 * time.Minute
	DefaultMaxSessionsPerIdentity   = 10
	DefaultMaxContainers            = 64
	DefaultMaxContainersPerIdentity = 16
	DefaultMemoryLimit              = "1g"
	DefaultRunOutputLimit           = 1 << 20
	DefaultPython                   = "/usr/bin/python3"
	DefaultBwrap                    = "bwrap"
	DefaultCPUSeconds               = 300
	DefaultMaxProcesses             = 64
	DefaultMaxFileBytes             = 100 << 20
	DefaultDataBytes                = 512 << 20
	DefaultTmpBytes                 = 64 << 20
	DefaultCgroups                  = CgroupsAuto
	DefaultStart                    = StartFork
	DefaultInterruptGrace           = 2 * time.Second
	DefaultFirstUID                 = 1_000_000_000
	DefaultUIDCount                 = 65536
	DefaultCPUQuota                 = 1.0

	// The hibernation of the Messages API's containers (hibernation), as package sandbox has
	// it (its dir has none: "" is a directory of the server's own, made when it starts).
	DefaultHibernationLifetime            = 30 * 24 * time.Hour
	DefaultHibernationMaxBytesPerIdentity = 1 << 30
	DefaultHibernationMaxPerIdentity      = 100
	DefaultHibernationMaxBytes            = 16 << 30
	DefaultHibernationMaxContainers       = 10000

	// DefaultMaxContentBytes bounds a span's content attribute (tracing.capture_content).
	DefaultMaxContentBytes = 4096

	// The bounds of each container's egress proxy (network), as package egress has them.
	DefaultNetworkMaxConnections = 32
	DefaultNetworkMaxBytes       = 1 << 30
	DefaultNetworkMaxHeaderBytes = 64 << 10
	DefaultNetworkDialTimeout    = 10 * time.Second
	DefaultNetworkIdleTimeout    = 2 * time.Minute

	// DefaultPauseTimeout bounds a run paused for the client's tool calls (ptc.pause_timeout),
	// as sandbox.DefaultPauseTimeout does.
	DefaultPauseTimeout = 270 * time.Second
	// The bounds of the stored Responses answers (responses), as package memory has them,
	// and of the background responses, as package processor has them.
	DefaultStoredTTL                 = time.Hour
	DefaultMaxStoredPerIdentity      = 256
	DefaultMaxStoredBytesPerIdentity = 1 << 20
	DefaultMaxStored                 = 10000
	DefaultMaxStoredBytes            = 16 << 20
	DefaultMaxBackgroundPerIdentity  = 8
	DefaultMaxBackground             = 128
	DefaultBackgroundLease           = 10 * time.Second
)

// DefaultNetworkPorts are the destination ports a container may reach (network.ports).
var DefaultNetworkPorts = []uint32{80, 443, 8080, 8443}

// The values of tracing.protocol, as config.proto documents them.
const (
	TracingGRPC = "grpc"
	TracingHTTP = "http/protobuf"
)

// NodeAddress is the address other replicas dial to reach cfg's sandbox service:
// node_address, or sandbox_listen when that is unset.
func NodeAddress(cfg *configv1.Config) string {
	if a := cfg.GetNodeAddress(); a != "" {
		return a
	}
	return cfg.GetSandboxListen()
}

// The values of store, as config.proto documents them.
const (
	// StoreMemory keeps the cross-request state in this process.
	StoreMemory = "memory"
	// StoreRedis keeps it in Redis, shared by the replicas.
	StoreRedis = "redis"
)

// The values of role, as config.proto documents them.
const (
	// RoleAll serves the API and the sandboxes in one process.
	RoleAll = "all"
	// RoleGateway serves the API only; containers run on sandbox nodes.
	RoleGateway = "gateway"
	// RoleSandbox serves the sandbox service only.
	RoleSandbox = "sandbox"
)

// The values of sandbox.local.start, as config.proto documents them.
const (
	// StartFork forks each container from a template Python.
	StartFork = "fork"
	// StartExec starts each container as a new bubblewrap and Python.
	StartExec = "exec"
)

// The named values of sandbox.local.cgroups; an absolute cgroup v2 path is the third form.
const (
	CgroupsAuto = "auto"
	CgroupsOff  = "off"
)

// DefaultForwardHeaders returns, in a new slice, the request headers, besides the credentials,
// that the loop copies from the client's request onto its follow-up calls when a profile lists
// none. An entry ending in "*" matches a prefix. x-codeinterp-*, x-envoy-* and x-forwarded-*
// headers are never copied.
func DefaultForwardHeaders() []string { return slices.Clone(defaultForwardHeaders) }

var defaultForwardHeaders = []string{
	"content-type", "openai-organization", "openai-project", "openai-beta", "anthropic-version",
	"anthropic-beta", "user-agent", "x-*",
}

// derived is a default computed from fields defaulted before it.
type derived func(cfg *configv1.Config) any

// defaults are the documented defaults of the configuration's fields, by field path, in the
// order ApplyDefaults applies them: a derived default comes after the fields it reads. A value
// is a string, bool, whole number, float64, time.Duration, []string or a derived. Named
// profiles get none: a profile starts from default_profile and overrides what it sets.
var defaults = []struct {
	path  string
	value any
}{
	{"listen", DefaultListen},
	{"admin_listen", DefaultAdminListen},
	{"upstream", DefaultUpstream},
	{"log_level", DefaultLogLevel},
	{"profile_metadata_key", DefaultProfileMetadataKey},
	{"verify_api_credentials", true},
	{"api_listen", DefaultAPIListen},
	{"max_upload_bytes", DefaultMaxUploadBytes},
	{"max_request_bytes", DefaultMaxRequestBytes},
	{"max_response_bytes", DefaultMaxResponseBytes},
	{"shutdown_grace", DefaultShutdownGrace},
	{"store", DefaultStore},
	{"role", DefaultRole},
	{"node_id", derived(func(*configv1.Config) any {
		if h, err := os.Hostname(); err == nil && h != "" {
			return h
		}
		return "codeinterp"
	})},
	{"redis.addresses", []string{DefaultRedisAddress}},
	{"redis.key_prefix", DefaultRedisKeyPrefix},
	{"redis.timeout", DefaultRedisTimeout},

	{"default_profile.function_name", DefaultFunctionName},
	{"default_profile.max_rounds", DefaultMaxRounds},
	{"default_profile.loop_deadline", DefaultLoopDeadline},
	{"default_profile.run_timeout", DefaultRunTimeout},
	{"default_profile.output_limit_bytes", DefaultModelOutputLimit},
	{"default_profile.forward_headers", defaultForwardHeaders},
	// A server with a small max_request_bytes gets a budget its answers can carry.
	{"default_profile.max_output_bytes", derived(func(cfg *configv1.Config) any {
		if most := (int64(cfg.GetMaxRequestBytes()) - AnswerOverheadBytes) / 2; most >= 64<<10 && most < DefaultMaxOutputBytes {
			return most
		}
		return DefaultMaxOutputBytes
	})},
	{"default_profile.max_images", DefaultMaxImages},
	{"default_profile.max_calls_per_turn", DefaultMaxCallsPerTurn},
	{"default_profile.stream_mode", StreamProgressive},
	{"default_profile.keep_alive_interval", DefaultKeepAliveInterval},

	{"sandbox.backend", DefaultSandboxBackend},
	{"sandbox.warm_pool_size", DefaultWarmPoolSize},
	{"sandbox.session_idle_ttl", DefaultSessionIdleTTL},
	{"sandbox.max_sessions_per_identity", DefaultMaxSessionsPerIdentity},
	{"sandbox.max_containers", DefaultMaxContainers},
	// At least max_sessions_per_identity, at most max_containers.
	{"sandbox.max_containers_per_identity", derived(func(cfg *configv1.Config) any {
		s := cfg.GetSandbox()
		return min(max(DefaultMaxContainersPerIdentity, s.GetMaxSessionsPerIdentity()), s.GetMaxContainers())
	})},
	{"sandbox.default_memory_limit", DefaultMemoryLimit},
	{"sandbox.output_limit_bytes", DefaultRunOutputLimit},
	{"sandbox.local.python", DefaultPython},
	{"sandbox.local.bwrap", DefaultBwrap},
	{"sandbox.local.cpu_seconds", DefaultCPUSeconds},
	{"sandbox.local.max_processes", DefaultMaxProcesses},
	{"sandbox.local.max_file_bytes", DefaultMaxFileBytes},
	{"sandbox.local.data_bytes", DefaultDataBytes},
	{"sandbox.local.tmp_bytes", DefaultTmpBytes},
	{"sandbox.local.cgroups", DefaultCgroups},
	{"sandbox.local.start", DefaultStart},
	{"sandbox.local.first_uid", DefaultFirstUID},
	{"sandbox.local.uid_count", DefaultUIDCount},
	{"sandbox.local.cpu_quota", DefaultCPUQuota},
	{"sandbox.local.interrupt_grace", DefaultInterruptGrace},

	{"tracing.metrics", true},
	{"tracing.max_content_bytes", DefaultMaxContentBytes},

	{"hibernation.enabled", true},
	{"hibernation.lifetime", DefaultHibernationLifetime},
	{"hibernation.max_bytes_per_identity", DefaultHibernationMaxBytesPerIdentity},
	{"hibernation.max_per_identity", DefaultHibernationMaxPerIdentity},
	{"hibernation.max_bytes", DefaultHibernationMaxBytes},
	{"hibernation.max_containers", DefaultHibernationMaxContainers},

	{"network.ports", DefaultNetworkPorts},
	{"network.max_connections", DefaultNetworkMaxConnections},
	{"network.max_bytes", DefaultNetworkMaxBytes},
	{"network.max_header_bytes", DefaultNetworkMaxHeaderBytes},
	{"network.dial_timeout", DefaultNetworkDialTimeout},
	{"network.idle_timeout", DefaultNetworkIdleTimeout},
	{"ptc.pause_timeout", DefaultPauseTimeout},

	{"responses.stored_ttl", DefaultStoredTTL},
	{"responses.max_stored_per_identity", DefaultMaxStoredPerIdentity},
	{"responses.max_stored_bytes_per_identity", DefaultMaxStoredBytesPerIdentity},
	{"responses.max_stored", DefaultMaxStored},
	{"responses.max_stored_bytes", DefaultMaxStoredBytes},
	{"responses.max_background_per_identity", DefaultMaxBackgroundPerIdentity},
	{"responses.max_background", DefaultMaxBackground},
	{"background_lease", DefaultBackgroundLease},
}

// ApplyDefaults fills every unset field of cfg with its documented default, creating the
// sections (default_profile, sandbox, sandbox.local) it needs. A field is unset when it is
// absent (a section, a duration, or an optional field such as warm_pool_size, whose explicit 0
// is kept), empty (a list), or zero (any other field). It modifies cfg.
func ApplyDefaults(cfg *configv1.Config) {
	for _, d := range defaults {
		m, fd := fieldOf(cfg.ProtoReflect(), d.path)
		if m.Has(fd) {
			continue
		}
		v := d.value
		if f, ok := v.(derived); ok {
			v = f(cfg)
		}
		m.Set(fd, protoValue(m, fd, d.path, v))
	}
}

// fieldOf returns the message holding the field at path below m (creating the messages on the
// way) and the field's descriptor. A path naming no field is a mistake in the defaults table,
// which the package's tests find: it panics.
func fieldOf(m protoreflect.Message, path string) (protoreflect.Message, protoreflect.FieldDescriptor) {
	names := strings.Split(path, ".")
	for i, name := range names {
		fd := m.Descriptor().Fields().ByName(protoreflect.Name(name))
		if fd == nil {
			panic(fmt.Sprintf("config: default of %s: %s has no field %q", path, m.Descriptor().FullName(), name))
		}
		if i == len(names)-1 {
			return m, fd
		}
		m = m.Mutable(fd).Message()
	}
	panic(fmt.Sprintf("config: default of %q: empty path", path))
}

// protoValue converts a default from the table to the value of field fd of m. A value of the
// wrong type is a mistake in the table, which the package's tests find: it panics.
func protoValue(m protoreflect.Message, fd protoreflect.FieldDescriptor, path string, v any) protoreflect.Value {
	wrong := func() string {
		return fmt.Sprintf("config: default of %s: %T does not fit a %s field", path, v, fd.Kind())
	}
	if fd.IsList() {
		list := m.NewField(fd).List()
		switch vs := v.(type) {
		case []string:
			if fd.Kind() != protoreflect.StringKind {
				panic(wrong())
			}
			for _, s := range vs {
				list.Append(protoreflect.ValueOfString(s))
			}
		case []uint32:
			if fd.Kind() != protoreflect.Uint32Kind {
				panic(wrong())
			}
			for _, n := range vs {
				list.Append(protoreflect.ValueOfUint32(n))
			}
		default:
			panic(wrong())
		}
		return protoreflect.ValueOfList(list)
	}
	switch fd.Kind() {
	case protoreflect.StringKind:
		if s, ok := v.(string); ok {
			return protoreflect.ValueOfString(s)
		}
	case protoreflect.BoolKind:
		if b, ok := v.(bool); ok {
			return protoreflect.ValueOfBool(b)
		}
	case protoreflect.DoubleKind:
		if f, ok := v.(float64); ok {
			return protoreflect.ValueOfFloat64(f)
		}
	case protoreflect.Uint32Kind:
		if n, ok := whole(v); ok && n <= 1<<32-1 {
			return protoreflect.ValueOfUint32(uint32(n))
		}
	case protoreflect.Uint64Kind:
		if n, ok := whole(v); ok {
			return protoreflect.ValueOfUint64(n)
		}
	case protoreflect.MessageKind:
		if d, ok := v.(time.Duration); ok && fd.Message().FullName() == "google.protobuf.Duration" {
			return protoreflect.ValueOfMessage(durationpb.New(d).ProtoReflect())
		}
	}
	panic(wrong())
}

// whole returns v as a uint64 and reports whether it is a whole number ≥ 0.
func whole(v any) (uint64, bool) {
	switch n := v.(type) {
	case int:
		return uint64(n), n >= 0
	case int64:
		return uint64(n), n >= 0
	case uint32:
		return uint64(n), true
	case uint64:
		return n, true
	}
	return 0, false
}
