// Package config loads the server configuration (the codeinterp.config.v1.Config proto) from YAML,
// fills in the documented defaults, validates it with errors that name the field, and resolves the
// per-route profiles into plain Go values.
package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/codeinterp/codeinterp/pkg/sandbox/local"

	"github.com/codeinterp/codeinterp/pkg/schema"

	"github.com/codeinterp/codeinterp/pkg/loop"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
	"sigs.k8s.io/yaml"

	configv1 "github.com/codeinterp/codeinterp/api/codeinterp/config/v1"
	"github.com/codeinterp/codeinterp/pkg/sandbox"
)

// Defaults of the server configuration, as documented in config.proto.
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

	DefaultFunctionName     = schema.DefaultFunctionName
	DefaultMaxRounds        = loop.DefaultMaxRounds
	DefaultLoopDeadline     = 240 * time.Second
	DefaultRunTimeout       = sandbox.DefaultRunTimeout
	DefaultModelOutputLimit = loop.DefaultOutputLimit
	DefaultMaxOutputBytes   = loop.DefaultMaxOutputBytes
	DefaultMaxImages        = loop.DefaultMaxImages
	DefaultMaxCallsPerTurn  = loop.DefaultMaxCallsPerTurn
	// DefaultKeepAliveInterval is how long a progressive stream may send nothing before it
	// sends an SSE comment.
	DefaultKeepAliveInterval = 15 * time.Second

	DefaultSandboxBackend           = "local"
	DefaultWarmPoolSize             = 2
	DefaultSessionIdleTTL           = sandbox.DefaultSessionIdleTTL
	DefaultMaxSessionsPerIdentity   = sandbox.DefaultMaxSessionsPerIdentity
	DefaultMaxContainers            = sandbox.DefaultMaxContainers
	DefaultMaxContainersPerIdentity = sandbox.DefaultMaxContainersPerIdentity
	DefaultMemoryLimit              = local.DefaultMemoryLimit
	DefaultRunOutputLimit           = local.DefaultOutputLimit
	DefaultPython                   = local.DefaultPython
	DefaultBwrap                    = local.DefaultBwrap
	DefaultCPUSeconds               = local.DefaultCPUSeconds
	DefaultMaxProcesses             = local.DefaultMaxProcesses
	DefaultMaxFileBytes             = local.DefaultMaxFileBytes
	DefaultDataBytes                = local.DefaultDataBytes
	DefaultTmpBytes                 = local.DefaultTmpBytes
	DefaultInterruptGrace           = local.DefaultInterruptGrace
	DefaultFirstUID                 = local.DefaultFirstUID
	DefaultUIDCount                 = local.DefaultUIDCount
	DefaultCPUQuota                 = local.DefaultCPUQuota
)

// The stream modes of a profile (stream_mode).
const (
	// StreamProgressive switches a streaming answer to FULL_DUPLEX_STREAMED and sends each
	// event as it happens.
	StreamProgressive = "progressive"
	// StreamReplay sends a streaming answer once the loop is over.
	StreamReplay = "replay"
)

// LoopDeadlineMargin is the part of a profile's loop_deadline that the server keeps for itself:
// the loop runs for loop_deadline minus this margin, and the rest is for sending the final answer
// before Envoy's message timer, extended to loop_deadline, fires. So a loop_deadline must be
// longer than the margin.
const LoopDeadlineMargin = time.Second

// DefaultForwardHeaders returns, in a new slice, the request headers, besides the credentials,
// that the loop copies from the client's request onto its follow-up calls when a profile lists
// none. An entry ending in "*" matches a prefix. x-codeinterp-*, x-envoy-* and x-forwarded-*
// headers are never copied.
func DefaultForwardHeaders() []string { return slices.Clone(defaultForwardHeaders) }

var defaultForwardHeaders = []string{
	"content-type", "openai-organization", "openai-project", "openai-beta", "anthropic-version",
	"anthropic-beta", "user-agent", "x-*",
}

// memoryLimits are the container memory sizes a request may name, as OpenAI's containers offer.
var memoryLimits = []string{"1g", "4g", "16g", "64g"}

// MemoryLimits returns the container memory sizes a request may name ("1g", "4g", "16g",
// "64g"), in a new slice.
func MemoryLimits() []string { return slices.Clone(memoryLimits) }

// Load reads the YAML file at path (an empty path means no file), decodes it into a Config through
// the protobuf JSON mapping, and returns it without defaults applied. Unknown fields are errors.
func Load(path string) (*configv1.Config, error) {
	cfg := &configv1.Config{}
	if path == "" {
		return cfg, nil
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	if err := Parse(raw, cfg); err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return cfg, nil
}

// Parse decodes YAML (or JSON) bytes into cfg. Field names may be the proto's snake_case names or
// their lowerCamelCase JSON names; durations may be written as Go durations ("90s", "20m", "1h").
// Errors name the offending field by its path, for example "sandbox.local.cpu_seconds".
func Parse(raw []byte, cfg *configv1.Config) error {
	js, err := yaml.YAMLToJSON(raw)
	if err != nil {
		return fmt.Errorf("parse yaml: %w", err)
	}
	var tree any
	if err := json.Unmarshal(js, &tree); err != nil {
		return fmt.Errorf("parse yaml: %w", err)
	}
	if tree == nil {
		return nil
	}
	norm, err := normalize(cfg.ProtoReflect().Descriptor(), tree, "")
	if err != nil {
		return err
	}
	js, err = json.Marshal(norm)
	if err != nil {
		return fmt.Errorf("re-encode: %w", err)
	}
	if err := protojson.Unmarshal(js, cfg); err != nil {
		return fmt.Errorf("decode: %w", err)
	}
	return nil
}

// normalize checks v against the message descriptor md, naming the field path in errors, and turns
// Go-style durations into the protobuf JSON form.
func normalize(md protoreflect.MessageDescriptor, v any, path string) (any, error) {
	if md.FullName() == "google.protobuf.Duration" {
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("%s: want a duration such as \"30s\", got %v", path, v)
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			return nil, fmt.Errorf("%s: %q is not a duration (for example \"30s\", \"20m\")", path, s)
		}
		return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + "s", nil
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s: want a mapping, got %v", displayPath(path), v)
	}
	out := make(map[string]any, len(obj))
	for key, val := range obj {
		fd := md.Fields().ByName(protoreflect.Name(key))
		if fd == nil {
			fd = md.Fields().ByJSONName(key)
		}
		sub := joinPath(path, key)
		if fd == nil {
			return nil, fmt.Errorf("%s: unknown field", sub)
		}
		sub = joinPath(path, string(fd.Name()))
		nv, err := normalizeField(fd, val, sub)
		if err != nil {
			return nil, err
		}
		out[string(fd.Name())] = nv
	}
	return out, nil
}

func normalizeField(fd protoreflect.FieldDescriptor, v any, path string) (any, error) {
	if v == nil {
		return nil, nil
	}
	switch {
	case fd.IsMap():
		obj, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%s: want a mapping, got %v", path, v)
		}
		out := make(map[string]any, len(obj))
		for k, item := range obj {
			nv, err := normalizeValue(fd.MapValue(), item, fmt.Sprintf("%s[%q]", path, k))
			if err != nil {
				return nil, err
			}
			out[k] = nv
		}
		return out, nil
	case fd.IsList():
		list, ok := v.([]any)
		if !ok {
			return nil, fmt.Errorf("%s: want a list, got %v", path, v)
		}
		out := make([]any, len(list))
		for i, item := range list {
			nv, err := normalizeValue(fd, item, fmt.Sprintf("%s[%d]", path, i))
			if err != nil {
				return nil, err
			}
			out[i] = nv
		}
		return out, nil
	default:
		return normalizeValue(fd, v, path)
	}
}

func normalizeValue(fd protoreflect.FieldDescriptor, v any, path string) (any, error) {
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return normalize(fd.Message(), v, path)
	case protoreflect.StringKind:
		if _, ok := v.(string); !ok {
			return nil, fmt.Errorf("%s: want a string, got %v", path, v)
		}
	case protoreflect.BoolKind:
		if _, ok := v.(bool); !ok {
			return nil, fmt.Errorf("%s: want true or false, got %v", path, v)
		}
	case protoreflect.Uint32Kind, protoreflect.Uint64Kind, protoreflect.Fixed32Kind, protoreflect.Fixed64Kind:
		f, ok := v.(float64)
		if !ok || f < 0 || f != float64(uint64(f)) {
			return nil, fmt.Errorf("%s: want a whole number ≥ 0, got %v", path, v)
		}
		if fd.Kind() == protoreflect.Uint32Kind && f > float64(^uint32(0)) {
			return nil, fmt.Errorf("%s: %v is too large", path, v)
		}
	}
	return v, nil
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func displayPath(path string) string {
	if path == "" {
		return "config"
	}
	return path
}

// ApplyDefaults fills every unset field of cfg with its documented default. It modifies cfg.
func ApplyDefaults(cfg *configv1.Config) {
	setString(&cfg.Listen, DefaultListen)
	setString(&cfg.AdminListen, DefaultAdminListen)
	setString(&cfg.Upstream, DefaultUpstream)
	setString(&cfg.LogLevel, DefaultLogLevel)
	setString(&cfg.ProfileMetadataKey, DefaultProfileMetadataKey)
	if cfg.VerifyApiCredentials == nil {
		cfg.VerifyApiCredentials = proto.Bool(true)
	}
	if cfg.ApiListen == nil {
		cfg.ApiListen = proto.String(DefaultAPIListen)
	}
	if cfg.MaxUploadBytes == 0 {
		cfg.MaxUploadBytes = DefaultMaxUploadBytes
	}
	if cfg.MaxRequestBytes == 0 {
		cfg.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if cfg.MaxResponseBytes == 0 {
		cfg.MaxResponseBytes = DefaultMaxResponseBytes
	}
	if cfg.ShutdownGrace == nil {
		cfg.ShutdownGrace = durationpb.New(DefaultShutdownGrace)
	}
	if cfg.DefaultProfile == nil {
		cfg.DefaultProfile = &configv1.Profile{}
	}
	p := cfg.DefaultProfile
	setString(&p.FunctionName, DefaultFunctionName)
	if p.MaxRounds == 0 {
		p.MaxRounds = DefaultMaxRounds
	}
	if p.LoopDeadline == nil {
		p.LoopDeadline = durationpb.New(DefaultLoopDeadline)
	}
	if p.RunTimeout == nil {
		p.RunTimeout = durationpb.New(DefaultRunTimeout)
	}
	if p.OutputLimitBytes == 0 {
		p.OutputLimitBytes = DefaultModelOutputLimit
	}
	if len(p.ForwardHeaders) == 0 {
		p.ForwardHeaders = DefaultForwardHeaders()
	}
	if p.MaxOutputBytes == 0 {
		p.MaxOutputBytes = DefaultMaxOutputBytes
		// A server with a small max_request_bytes gets a budget its answers can carry.
		if most := (int64(cfg.MaxRequestBytes) - AnswerOverheadBytes) / 2; most >= 64<<10 && int64(p.MaxOutputBytes) > most {
			p.MaxOutputBytes = uint64(most)
		}
	}
	if p.MaxImages == 0 {
		p.MaxImages = DefaultMaxImages
	}
	if p.MaxCallsPerTurn == 0 {
		p.MaxCallsPerTurn = DefaultMaxCallsPerTurn
	}
	if p.StreamMode == "" {
		p.StreamMode = StreamProgressive
	}
	if p.KeepAliveInterval == nil {
		p.KeepAliveInterval = durationpb.New(DefaultKeepAliveInterval)
	}

	if cfg.Sandbox == nil {
		cfg.Sandbox = &configv1.Sandbox{}
	}
	s := cfg.Sandbox
	setString(&s.Backend, DefaultSandboxBackend)
	if s.WarmPoolSize == nil {
		s.WarmPoolSize = proto.Uint32(DefaultWarmPoolSize)
	}
	if s.SessionIdleTtl == nil {
		s.SessionIdleTtl = durationpb.New(DefaultSessionIdleTTL)
	}
	if s.MaxSessionsPerIdentity == 0 {
		s.MaxSessionsPerIdentity = DefaultMaxSessionsPerIdentity
	}
	if s.MaxContainers == 0 {
		s.MaxContainers = DefaultMaxContainers
	}
	if s.MaxContainersPerIdentity == 0 {
		s.MaxContainersPerIdentity = min(max(DefaultMaxContainersPerIdentity, s.MaxSessionsPerIdentity), s.MaxContainers)
	}
	setString(&s.DefaultMemoryLimit, DefaultMemoryLimit)
	if s.OutputLimitBytes == 0 {
		s.OutputLimitBytes = DefaultRunOutputLimit
	}
	if s.Local == nil {
		s.Local = &configv1.LocalSandbox{}
	}
	l := s.Local
	setString(&l.Python, DefaultPython)
	setString(&l.Bwrap, DefaultBwrap)
	if l.CpuSeconds == 0 {
		l.CpuSeconds = DefaultCPUSeconds
	}
	if l.MaxProcesses == 0 {
		l.MaxProcesses = DefaultMaxProcesses
	}
	if l.MaxFileBytes == 0 {
		l.MaxFileBytes = DefaultMaxFileBytes
	}
	if l.DataBytes == 0 {
		l.DataBytes = DefaultDataBytes
	}
	if l.TmpBytes == 0 {
		l.TmpBytes = DefaultTmpBytes
	}
	setString(&l.Cgroups, "auto")
	setString(&l.Start, local.DefaultStart)
	if l.FirstUid == 0 {
		l.FirstUid = DefaultFirstUID
	}
	if l.UidCount == 0 {
		l.UidCount = DefaultUIDCount
	}
	if l.CpuQuota == 0 {
		l.CpuQuota = DefaultCPUQuota
	}
	if l.InterruptGrace == nil {
		l.InterruptGrace = durationpb.New(DefaultInterruptGrace)
	}
}

func setString(p *string, def string) {
	if *p == "" {
		*p = def
	}
}

// Validate checks a configuration with defaults applied. The error lists every problem found, each
// naming its field.
func Validate(cfg *configv1.Config) error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
	}
	if err := checkAddr(cfg.Listen); err != nil {
		bad("listen", "%v", err)
	}
	if err := checkAddr(cfg.AdminListen); err != nil {
		bad("admin_listen", "%v", err)
	}
	if a := cfg.GetApiListen(); a != "" {
		if err := checkAddr(a); err != nil {
			bad("api_listen", "%v", err)
		}
	}
	if err := checkUpstream(cfg.Upstream); err != nil {
		bad("upstream", "%v", err)
	}
	switch cfg.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		bad("log_level", "%q is not one of debug, info, warn, error", cfg.LogLevel)
	}
	for i, p := range cfg.PathPrefixes {
		if !strings.HasPrefix(p, "/") || strings.HasSuffix(p, "/") || strings.ContainsAny(p, "?#") {
			bad(fmt.Sprintf("path_prefixes[%d]", i), "%q must start with / and not end with / (for example \"/openai\")", p)
		}
	}
	if cfg.MaxRequestBytes < 1<<20 {
		bad("max_request_bytes", "%d is below 1 MiB; it must be at least the Envoy buffer limit", cfg.MaxRequestBytes)
	}
	if cfg.MaxResponseBytes < 1<<20 {
		bad("max_response_bytes", "%d is below 1 MiB", cfg.MaxResponseBytes)
	}
	if d := cfg.ShutdownGrace.AsDuration(); d < 0 {
		bad("shutdown_grace", "%v is negative", d)
	}
	if cfg.FollowupSecretFile != "" {
		if _, err := os.Stat(cfg.FollowupSecretFile); err != nil {
			bad("followup_secret_file", "%v", err)
		}
	}
	if cfg.ProfileMetadataKey != strings.ToLower(cfg.ProfileMetadataKey) {
		bad("profile_metadata_key", "%q must be lower case (gRPC metadata keys are)", cfg.ProfileMetadataKey)
	}
	errs = append(errs, validateProfile("default_profile", cfg.DefaultProfile, cfg.MaxRequestBytes)...)
	for name, p := range cfg.Profiles {
		field := fmt.Sprintf("profiles[%q]", name)
		if name == "" {
			bad(field, "a profile needs a name")
		}
		if p == nil {
			continue
		}
		errs = append(errs, validateProfile(field, p, cfg.MaxRequestBytes)...)
	}
	if cfg.GetApiListen() != "" {
		// The Containers API identifies its callers as the default profile does: a profile
		// identifying them otherwise would see, or be shown, the containers of other tenants.
		var differ []string
		for name, p := range cfg.Profiles {
			if p != nil && p.IdentityHeader != "" && p.IdentityHeader != cfg.GetDefaultProfile().GetIdentityHeader() {
				differ = append(differ, fmt.Sprintf("%q", name))
			}
		}
		if len(differ) > 0 {
			slices.Sort(differ)
			bad("api_listen", "the Containers API identifies callers by default_profile.identity_header (%q), but profiles %s set another identity_header: give every profile the default's, or set api_listen to \"\"",
				cfg.GetDefaultProfile().GetIdentityHeader(), strings.Join(differ, ", "))
		}
	}
	errs = append(errs, validateSandbox(cfg.Sandbox)...)
	return errors.Join(errs...)
}

func validateProfile(field string, p *configv1.Profile, maxRequestBytes uint64) []error {
	var errs []error
	bad := func(sub, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s.%s: %s", field, sub, fmt.Sprintf(format, args...)))
	}
	if n := p.GetFunctionName(); n != "" && !validFunctionName(n) {
		bad("function_name", "%q must be 1-64 characters of a-z, A-Z, 0-9, _ or -", n)
	}
	if p.GetMaxRounds() > 64 {
		bad("max_rounds", "%d is above 64", p.GetMaxRounds())
	}
	if d := p.GetLoopDeadline(); d != nil && d.AsDuration() <= LoopDeadlineMargin {
		bad("loop_deadline", "%v leaves the loop no time: it must be longer than the %v the server keeps for sending its answer", d.AsDuration(), LoopDeadlineMargin)
	}
	if d := p.GetRunTimeout(); d != nil && d.AsDuration() <= 0 {
		bad("run_timeout", "%v must be positive", d.AsDuration())
	}
	if p.GetLoopDeadline() != nil && p.GetRunTimeout() != nil && p.GetRunTimeout().AsDuration() > p.GetLoopDeadline().AsDuration() {
		bad("run_timeout", "%v is longer than loop_deadline %v", p.GetRunTimeout().AsDuration(), p.GetLoopDeadline().AsDuration())
	}
	for i, h := range p.GetForwardHeaders() {
		if h == "" || h == "*" || h != strings.ToLower(h) || strings.HasPrefix(h, ":") || strings.Contains(strings.TrimSuffix(h, "*"), "*") {
			bad(fmt.Sprintf("forward_headers[%d]", i), "%q must be a lower-case header name, or a prefix ending in *", h)
		}
		if strings.HasPrefix(h, "x-codeinterp-") {
			bad(fmt.Sprintf("forward_headers[%d]", i), "%q is reserved for the server", h)
		}
	}
	for _, f := range []struct{ name, v string }{{"session_header", p.GetSessionHeader()}, {"identity_header", p.GetIdentityHeader()}} {
		if f.v != "" && (f.v != strings.ToLower(f.v) || strings.HasPrefix(f.v, "x-codeinterp-")) {
			bad(f.name, "%q must be a lower-case header name not starting with x-codeinterp-", f.v)
		}
	}
	if u := p.GetUpstream(); u != "" {
		if err := checkUpstream(u); err != nil {
			bad("upstream", "%v", err)
		}
	}
	if n := p.GetMaxOutputBytes(); n != 0 && n < 64<<10 {
		bad("max_output_bytes", "%d is below 65536", n)
	}
	// An event stream carries the outputs twice (as the items are added and in the final
	// response), within what one ext_proc message may carry.
	if n, most := p.GetMaxOutputBytes(), (uint64(maxRequestBytes)-min(uint64(maxRequestBytes), AnswerOverheadBytes))/2; n > most {
		bad("max_output_bytes", "%d is above %d, half of what one answer may carry (max_request_bytes %d less %d): a streamed answer with that much output could not be sent to Envoy",
			n, most, maxRequestBytes, AnswerOverheadBytes)
	}
	if n := p.GetMaxCallsPerTurn(); n > 256 {
		bad("max_calls_per_turn", "%d is above 256", n)
	}
	switch m := p.GetStreamMode(); m {
	case "", StreamProgressive, StreamReplay:
	default:
		bad("stream_mode", "%q is not %q or %q", m, StreamProgressive, StreamReplay)
	}
	if d := p.GetKeepAliveInterval(); d != nil && d.AsDuration() < time.Second {
		bad("keep_alive_interval", "%s is below 1s", d.AsDuration())
	}
	if n := p.GetMaxImages(); n > 1000 {
		bad("max_images", "%d is above 1000", n)
	}
	return errs
}

func validateSandbox(s *configv1.Sandbox) []error {
	var errs []error
	bad := func(sub, format string, args ...any) {
		errs = append(errs, fmt.Errorf("sandbox.%s: %s", sub, fmt.Sprintf(format, args...)))
	}
	if s.Backend != "local" {
		bad("backend", "%q is not a known backend (known: local)", s.Backend)
	}
	if !validMemoryLimit(s.DefaultMemoryLimit) {
		bad("default_memory_limit", "%q is not one of %s", s.DefaultMemoryLimit, strings.Join(memoryLimits, ", "))
	}
	if s.SessionIdleTtl.AsDuration() <= 0 {
		bad("session_idle_ttl", "%v must be positive", s.SessionIdleTtl.AsDuration())
	}
	if s.GetWarmPoolSize() > 64 {
		bad("warm_pool_size", "%d is above 64", s.GetWarmPoolSize())
	}
	if s.MaxContainersPerIdentity > s.MaxContainers {
		bad("max_containers_per_identity", "%d is above max_containers %d", s.MaxContainersPerIdentity, s.MaxContainers)
	}
	if s.MaxSessionsPerIdentity > s.MaxContainersPerIdentity {
		bad("max_sessions_per_identity", "%d is above max_containers_per_identity %d", s.MaxSessionsPerIdentity, s.MaxContainersPerIdentity)
	}
	if s.OutputLimitBytes < 1024 {
		bad("output_limit_bytes", "%d is below 1024", s.OutputLimitBytes)
	}
	if m := s.MaxMemoryLimit; m != "" {
		max, err := sandbox.ParseMemory(m)
		if err != nil {
			bad("max_memory_limit", "%v", err)
		} else if def, err := sandbox.ParseMemory(s.DefaultMemoryLimit); err == nil && def > max {
			bad("max_memory_limit", "%q is below default_memory_limit %q", m, s.DefaultMemoryLimit)
		}
	}
	if l := s.Local; l.FirstUid == 0 || uint64(l.FirstUid)+uint64(l.UidCount) > 1<<32-2 {
		bad("local.first_uid", "%d with uid_count %d must name uids above 0 and below 4294967294", l.FirstUid, l.UidCount)
	}
	if need := uint64(s.MaxContainers) + uint64(s.GetWarmPoolSize()) + 1; uint64(s.Local.UidCount) < need {
		bad("local.uid_count", "%d is below max_containers + warm_pool_size + 1 = %d (each container runs as a uid of its own)", s.Local.UidCount, need)
	}
	if q := s.Local.CpuQuota; !(q >= 0.01 && q <= 1024) {
		bad("local.cpu_quota", "%v must be between 0.01 and 1024 cores", q)
	}
	if s.Local.Python == "" || !strings.HasPrefix(s.Local.Python, "/") {
		bad("local.python", "%q must be an absolute path", s.Local.Python)
	}
	if s.Local.MaxProcesses < 4 {
		bad("local.max_processes", "%d is below 4", s.Local.MaxProcesses)
	}
	if s.Local.DataBytes < 1<<20 {
		bad("local.data_bytes", "%d is below 1 MiB", s.Local.DataBytes)
	}
	if s.Local.TmpBytes < 1<<20 {
		bad("local.tmp_bytes", "%d is below 1 MiB", s.Local.TmpBytes)
	}
	if st := s.Local.Start; st != local.StartExec && st != local.StartFork {
		bad("local.start", "%q is not %q or %q", st, local.StartExec, local.StartFork)
	}
	if c := s.Local.Cgroups; c != "auto" && c != "off" && !strings.HasPrefix(c, "/") {
		bad("local.cgroups", "%q is not auto, off or an absolute cgroup v2 path", c)
	}
	if d := s.Local.InterruptGrace.AsDuration(); d <= 0 {
		bad("local.interrupt_grace", "%v must be positive", d)
	}
	if d := s.Local.StateDir; d != "" && !strings.HasPrefix(d, "/") {
		bad("local.state_dir", "%q must be an absolute path", d)
	}
	for i, p := range s.Local.ReadOnlyPaths {
		if !strings.HasPrefix(p, "/") {
			bad(fmt.Sprintf("local.read_only_paths[%d]", i), "%q must be an absolute path", p)
		}
	}
	return errs
}

func validMemoryLimit(v string) bool {
	for _, m := range memoryLimits {
		if v == m {
			return true
		}
	}
	return false
}

// ValidMemoryLimit reports whether v is a memory limit a container may have.
func ValidMemoryLimit(v string) bool { return validMemoryLimit(v) }

func validFunctionName(n string) bool {
	if len(n) == 0 || len(n) > 64 {
		return false
	}
	for _, r := range n {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}

func checkAddr(a string) error {
	if strings.HasPrefix(a, "unix://") {
		if strings.TrimPrefix(a, "unix://") == "" {
			return fmt.Errorf("%q names no socket path", a)
		}
		return nil
	}
	if i := strings.LastIndex(a, ":"); i < 0 || i == len(a)-1 {
		return fmt.Errorf("%q is not host:port or unix:///path", a)
	}
	return nil
}

func checkUpstream(u string) error {
	pu, err := url.Parse(u)
	if err != nil {
		return err
	}
	if pu.Scheme != "http" && pu.Scheme != "https" {
		return fmt.Errorf("%q must be an http or https URL", u)
	}
	if pu.Host == "" {
		return fmt.Errorf("%q names no host", u)
	}
	if pu.RawQuery != "" || pu.Fragment != "" {
		return fmt.Errorf("%q must not have a query or fragment", u)
	}
	return nil
}

// Profile is a resolved per-route profile: the default profile with a named profile's set fields
// laid over it, in plain Go values.
type Profile struct {
	Name                   string
	Disabled               bool
	FunctionName           string
	FunctionDescription    string
	MaxRounds              int
	LoopDeadline           time.Duration
	RunTimeout             time.Duration
	SessionHeader          string
	IdentityHeader         string
	ForwardHeaders         []string
	Upstream               string
	OutputLimit            int
	AllowAnonymousSessions bool
	// MaxOutputBytes, MaxImages and MaxCallsPerTurn are the profile's output budget.
	MaxOutputBytes  int
	MaxImages       int
	MaxCallsPerTurn int
	// Progressive reports whether a streaming answer is switched to FULL_DUPLEX_STREAMED and
	// sent as it happens (stream_mode "progressive"); KeepAlive is keep_alive_interval.
	Progressive bool
	KeepAlive   time.Duration
	// MaxResponseBytes is Config.max_response_bytes, the bound of one upstream answer.
	MaxResponseBytes int64
	// MaxAnswerBytes is the largest answer body the server can send Envoy: max_request_bytes
	// (the gRPC send limit) less AnswerOverheadBytes for the rest of the ext_proc message.
	MaxAnswerBytes int
}

// AnswerOverheadBytes is the room kept in one ext_proc message for what it carries besides the
// answer body (headers, framing).
const AnswerOverheadBytes = 64 << 10

// Profiles resolves the default profile and every named profile of cfg (defaults applied). The
// default profile has the empty name.
func Profiles(cfg *configv1.Config) map[string]*Profile {
	out := map[string]*Profile{"": resolve("", cfg.DefaultProfile, cfg)}
	for name, p := range cfg.Profiles {
		merged := proto.Clone(cfg.DefaultProfile).(*configv1.Profile)
		if p != nil {
			// Repeated fields replace rather than append.
			if len(p.ForwardHeaders) > 0 {
				merged.ForwardHeaders = nil
			}
			proto.Merge(merged, p)
		}
		out[name] = resolve(name, merged, cfg)
	}
	return out
}

func resolve(name string, p *configv1.Profile, cfg *configv1.Config) *Profile {
	r := &Profile{
		Name:                   name,
		Disabled:               p.GetDisabled(),
		FunctionName:           p.GetFunctionName(),
		FunctionDescription:    p.GetFunctionDescription(),
		MaxRounds:              int(p.GetMaxRounds()),
		LoopDeadline:           p.GetLoopDeadline().AsDuration(),
		RunTimeout:             p.GetRunTimeout().AsDuration(),
		SessionHeader:          p.GetSessionHeader(),
		IdentityHeader:         p.GetIdentityHeader(),
		ForwardHeaders:         append([]string(nil), p.GetForwardHeaders()...),
		Upstream:               p.GetUpstream(),
		OutputLimit:            int(p.GetOutputLimitBytes()),
		AllowAnonymousSessions: p.GetAllowAnonymousSessions(),
		MaxOutputBytes:         int(p.GetMaxOutputBytes()),
		MaxImages:              int(p.GetMaxImages()),
		MaxCallsPerTurn:        int(p.GetMaxCallsPerTurn()),
		Progressive:            p.GetStreamMode() != StreamReplay,
		KeepAlive:              p.GetKeepAliveInterval().AsDuration(),
		MaxResponseBytes:       int64(cfg.GetMaxResponseBytes()),
		MaxAnswerBytes:         int(cfg.GetMaxRequestBytes()) - AnswerOverheadBytes,
	}
	if r.Upstream == "" {
		r.Upstream = cfg.GetUpstream()
	}
	return r
}
