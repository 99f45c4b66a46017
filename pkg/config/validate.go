package config

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	configv1 "github.com/codeinterp/codeinterp/api/codeinterp/config/v1"
)

// Validate checks a configuration with defaults applied. The error lists every problem found, each
// naming its field. What only the packages know is checked by internal/app's Validate, which
// calls this one: whether sandbox.default_memory_limit is a size a container may have, and
// whether max_memory_limit is a size at all.
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
	if d := cfg.GetBackgroundLease(); d != nil && d.AsDuration() < time.Second {
		bad("background_lease", "%v is less than 1s", d.AsDuration())
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
	errs = append(errs, validateTracing(cfg.GetTracing())...)
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
	errs = append(errs, validateCredentials(cfg)...)
	errs = append(errs, validateSandbox(cfg.Sandbox)...)
	errs = append(errs, validateNetwork(cfg.GetNetwork(), cfg.GetSandbox())...)
	errs = append(errs, validateFleet(cfg)...)
	if d := cfg.GetPtc().GetPauseTimeout(); d != nil && d.AsDuration() <= 0 {
		errs = append(errs, fmt.Errorf("ptc.pause_timeout: %v must be positive", d.AsDuration()))
	}
	errs = append(errs, validateResponses(cfg.GetResponses())...)
	return errors.Join(errs...)
}

// validateResponses checks the bounds of the stored answers and the background responses:
// an answer kept for no time, or a caller allowed more than all, is a mistake.
func validateResponses(r *configv1.Responses) []error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("responses.%s: %s", field, fmt.Sprintf(format, args...)))
	}
	if d := r.GetStoredTtl(); d != nil && d.AsDuration() <= 0 {
		bad("stored_ttl", "%v must be positive", d.AsDuration())
	}
	if r.GetMaxStoredPerIdentity() > r.GetMaxStored() && r.GetMaxStored() > 0 {
		bad("max_stored_per_identity", "%d is more than max_stored (%d)", r.GetMaxStoredPerIdentity(), r.GetMaxStored())
	}
	if r.GetMaxStoredBytesPerIdentity() > r.GetMaxStoredBytes() && r.GetMaxStoredBytes() > 0 {
		bad("max_stored_bytes_per_identity", "%d is more than max_stored_bytes (%d)", r.GetMaxStoredBytesPerIdentity(), r.GetMaxStoredBytes())
	}
	if r.GetMaxBackgroundPerIdentity() > r.GetMaxBackground() && r.GetMaxBackground() > 0 {
		bad("max_background_per_identity", "%d is more than max_background (%d)", r.GetMaxBackgroundPerIdentity(), r.GetMaxBackground())
	}
	return errs
}

// MinFleetSecretBytes is the shortest fleet secret a fleet may share.
const MinFleetSecretBytes = 32

// validateFleet checks store, redis, role and the sandbox service's settings.
func validateFleet(cfg *configv1.Config) []error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
	}
	redis := cfg.GetStore() == StoreRedis
	switch cfg.GetStore() {
	case StoreMemory, StoreRedis:
	default:
		bad("store", "%q is not one of memory, redis", cfg.GetStore())
	}
	switch r := cfg.GetRole(); r {
	case RoleAll:
		if redis && cfg.GetSandboxListen() == "" {
			bad("sandbox_listen", "role all with store redis needs an address: the other replicas reach this node's containers through it")
		}
	case RoleGateway, RoleSandbox:
		if !redis {
			bad("role", "%q needs store redis (the nodes find each other and their containers there)", r)
		}
		if r == RoleSandbox && cfg.GetSandboxListen() == "" {
			bad("sandbox_listen", "role sandbox needs an address to serve the sandbox service on")
		}
		if r == RoleGateway && cfg.GetSandboxListen() != "" {
			bad("sandbox_listen", "a gateway holds no containers: leave it empty")
		}
	default:
		bad("role", "%q is not one of all, gateway, sandbox", r)
	}
	if a := cfg.GetSandboxListen(); a != "" {
		if _, _, err := net.SplitHostPort(a); err != nil {
			bad("sandbox_listen", "%q is not host:port", a)
		} else if na := NodeAddress(cfg); na != "" {
			host, _, err := net.SplitHostPort(na)
			if ip := net.ParseIP(host); err != nil || host == "" || (ip != nil && ip.IsUnspecified()) {
				bad("node_address", "%q is not an address other replicas can dial (host:port, not a wildcard host): set node_address", na)
			}
		}
	}
	if id := cfg.GetNodeId(); len(id) == 0 || len(id) > 64 || strings.Trim(id, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") != "" {
		bad("node_id", "%q must be 1-64 characters of a-z, A-Z, 0-9, ., _ or -", id)
	}
	if redis {
		if f := cfg.GetFleetSecretFile(); f == "" {
			bad("fleet_secret_file", "store redis needs the secret the replicas share")
		} else if b, err := os.ReadFile(f); err != nil {
			bad("fleet_secret_file", "%v", err)
		} else if len(strings.TrimSpace(string(b))) < MinFleetSecretBytes {
			bad("fleet_secret_file", "the secret has fewer than %d bytes", MinFleetSecretBytes)
		}
		rc := cfg.GetRedis()
		if len(rc.GetAddresses()) == 0 {
			bad("redis.addresses", "store redis needs at least one address")
		}
		for i, a := range rc.GetAddresses() {
			if _, _, err := net.SplitHostPort(a); err != nil {
				bad(fmt.Sprintf("redis.addresses[%d]", i), "%q is not host:port", a)
			}
		}
		if f := rc.GetPasswordFile(); f != "" {
			if _, err := os.Stat(f); err != nil {
				bad("redis.password_file", "%v", err)
			}
		}
		if d := rc.GetTimeout().AsDuration(); rc.GetTimeout() != nil && d <= 0 {
			bad("redis.timeout", "%v must be positive", d)
		}
	}
	if t := cfg.GetFleetTls(); t != nil {
		for _, f := range []struct{ name, path string }{{"cert_file", t.CertFile}, {"key_file", t.KeyFile}, {"ca_file", t.CaFile}} {
			if f.path == "" {
				bad("fleet_tls."+f.name, "mutual TLS needs all of cert_file, key_file and ca_file")
			} else if _, err := os.Stat(f.path); err != nil {
				bad("fleet_tls."+f.name, "%v", err)
			}
		}
	}
	return errs
}

// maxCredentialHeaders bounds credential_headers.
const maxCredentialHeaders = 16

// The api_key_check modes: the configured call, or the record of model calls the upstream took.
const (
	KeyCheckCall      = "call"
	KeyCheckModelCall = "model_call"
)

// MaxAcceptedTTL bounds api_key_check.accepted_ttl: the record lives in the store's pending
// entries, which no store keeps longer (memory.PendingTTL).
const MaxAcceptedTTL = time.Hour

// validateCredentials checks credential_headers, api_key_check and the upload bounds.
func validateCredentials(cfg *configv1.Config) []error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
	}
	if n := len(cfg.CredentialHeaders); n > maxCredentialHeaders {
		bad("credential_headers", "%d headers; at most %d", n, maxCredentialHeaders)
	}
	for i, h := range cfg.CredentialHeaders {
		if !headerName(h) || h != strings.ToLower(h) {
			bad(fmt.Sprintf("credential_headers[%d]", i), "%q is not a lower-case header name", h)
		}
	}
	if c := cfg.ApiKeyCheck; c != nil {
		if c.Path != "" && (!strings.HasPrefix(c.Path, "/") || strings.ContainsAny(c.Path, "#\r\n ")) {
			bad("api_key_check.path", "%q must start with / (for example \"/v1/models\")", c.Path)
		}
		if c.Method != "" && !headerName(c.Method) {
			bad("api_key_check.method", "%q is not an HTTP method", c.Method)
		}
		for k := range c.Headers {
			if !headerName(k) {
				bad("api_key_check.headers", "%q is not a header name", k)
			}
		}
		for i, st := range c.AcceptStatuses {
			if st < 100 || st > 599 || st == 401 || st == 403 {
				bad(fmt.Sprintf("api_key_check.accept_statuses[%d]", i), "%d is not an HTTP status that can mean a credential was taken", st)
			}
		}
		if c.Mode != "" && c.Mode != KeyCheckCall && c.Mode != KeyCheckModelCall {
			bad("api_key_check.mode", "%q is neither %q nor %q", c.Mode, KeyCheckCall, KeyCheckModelCall)
		}
		if d := c.AcceptedTtl.AsDuration(); c.AcceptedTtl != nil && (d <= 0 || d > MaxAcceptedTTL) {
			bad("api_key_check.accepted_ttl", "%v must be positive and at most %v", d, MaxAcceptedTTL)
		}
	}
	if d := cfg.ApiUploadIdle.AsDuration(); cfg.ApiUploadIdle != nil && d <= 0 {
		bad("api_upload_idle", "%v must be positive", d)
	}
	return errs
}

// headerName reports whether s is an HTTP token (a header name or a method).
func headerName(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r > 0x7e || r <= ' ' || strings.ContainsRune("\"(),/:;<=>?@[\\]{}", r) {
			return false
		}
	}
	return true
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
	if s.Backend != DefaultSandboxBackend {
		bad("backend", "%q is not a known backend (known: %s)", s.Backend, DefaultSandboxBackend)
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
	if st := s.Local.Start; st != StartExec && st != StartFork {
		bad("local.start", "%q is not %q or %q", st, StartExec, StartFork)
	}
	if c := s.Local.Cgroups; c != CgroupsAuto && c != CgroupsOff && !strings.HasPrefix(c, "/") {
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

// validateTracing checks the tracing section (also when tracing is off: a mistake shows before
// someone turns it on).
func validateTracing(t *configv1.Tracing) []error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("tracing.%s: %s", field, fmt.Sprintf(format, args...)))
	}
	if t.GetEndpoint() != "" {
		if err := checkUpstream(t.GetEndpoint()); err != nil {
			bad("endpoint", "%v", err)
		}
	}
	switch t.GetProtocol() {
	case "", TracingGRPC, TracingHTTP:
	default:
		bad("protocol", "%q is not %q or %q", t.GetProtocol(), TracingGRPC, TracingHTTP)
	}
	if t.SampleRatio != nil && (t.GetSampleRatio() < 0 || t.GetSampleRatio() > 1) {
		bad("sample_ratio", "%v is not between 0 and 1", t.GetSampleRatio())
	}
	for k := range t.GetHeaders() {
		if k == "" || strings.ContainsAny(k, " \t\r\n:") {
			bad("headers", "%q is not a header name", k)
		}
	}
	if t.GetCaptureContent() && t.GetMaxContentBytes() == 0 {
		bad("max_content_bytes", "must be above 0 when capture_content is on")
	}
	return errs
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

// validateNetwork checks the network section (also when it is off: a mistake shows before
// someone turns it on). Turned on, it needs the local sandbox with isolation: the proxy
// listens in each container's own network namespace. The allowed domains are internal/app's
// to check (package egress knows the rules).
func validateNetwork(n *configv1.Network, s *configv1.Sandbox) []error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("network.%s: %s", field, fmt.Sprintf(format, args...)))
	}
	if n.GetEnabled() && s.GetBackend() != DefaultSandboxBackend {
		bad("enabled", "needs the %q sandbox backend", DefaultSandboxBackend)
	}
	if n.GetEnabled() && s.GetLocal().GetUnsafeNoIsolation() {
		bad("enabled", "needs sandbox isolation: sandbox.local.unsafe_no_isolation is set")
	}
	for i, c := range n.GetAllowNetworks() {
		if _, err := netip.ParsePrefix(c); err != nil {
			bad(fmt.Sprintf("allow_networks[%d]", i), "%q is not a CIDR such as 10.20.0.0/16", c)
		}
	}
	for i, p := range n.GetPorts() {
		if p < 1 || p > 65535 {
			bad(fmt.Sprintf("ports[%d]", i), "%d is not a port (1-65535)", p)
		}
	}
	for _, d := range []struct {
		name string
		v    interface{ AsDuration() time.Duration }
		set  bool
	}{{"dial_timeout", n.GetDialTimeout(), n.GetDialTimeout() != nil}, {"idle_timeout", n.GetIdleTimeout(), n.GetIdleTimeout() != nil}} {
		if d.set && d.v.AsDuration() <= 0 {
			bad(d.name, "%v must be positive", d.v.AsDuration())
		}
	}
	return errs
}
