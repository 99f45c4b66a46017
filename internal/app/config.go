package app

import (
	"crypto/rand"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"

	configv1 "github.com/codeinterp/codeinterp/api/codeinterp/config/v1"
	"github.com/codeinterp/codeinterp/pkg/config"
	"github.com/codeinterp/codeinterp/pkg/egress"
	"github.com/codeinterp/codeinterp/pkg/memlimit"
	"github.com/codeinterp/codeinterp/pkg/sandbox"
	"github.com/codeinterp/codeinterp/pkg/sandbox/local"
	"github.com/codeinterp/codeinterp/pkg/store"
)

// Validate checks cfg, with defaults applied: everything [config.Validate] checks, and what
// only the packages know, which the configuration package (a leaf) cannot: that
// sandbox.default_memory_limit is a size a container may be asked for ([memlimit.Valid]), and
// that sandbox.max_memory_limit is a size ([sandbox.ParseMemory]) not below it, and that
// network.allowed_domains are domain rules ([egress.CheckPolicy]). The error lists
// every problem found, each naming its field. [New] calls it.
func Validate(cfg *configv1.Config) error {
	errs := []error{config.Validate(cfg)}
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
	}
	sb := cfg.GetSandbox()
	def := sb.GetDefaultMemoryLimit()
	if !memlimit.Valid(def) {
		bad("sandbox.default_memory_limit", "%q is not one of %s", def, strings.Join(memlimit.Sizes(), ", "))
	}
	if m := sb.GetMaxMemoryLimit(); m != "" {
		most, err := sandbox.ParseMemory(m)
		if err != nil {
			bad("sandbox.max_memory_limit", "%v", err)
		} else if n, err := sandbox.ParseMemory(def); err == nil && n > most {
			bad("sandbox.max_memory_limit", "%q is below default_memory_limit %q", m, def)
		}
	}
	if err := egress.CheckPolicy(egress.Policy{AllowedDomains: cfg.GetNetwork().GetAllowedDomains()}); err != nil {
		bad("network.allowed_domains", "%v", err)
	}
	return errors.Join(errs...)
}

// secretOf returns the secret that keys follow-up signatures and identity hashes: given, else
// the contents of the followup_secret_file at path, else a random one. It is made here only:
// the ext_proc server and the Containers API identify a caller alike, with this one secret.
func secretOf(given []byte, path string) ([]byte, error) {
	switch {
	case len(given) > 0:
		return given, nil
	case path != "":
		secret, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("read followup_secret_file: %w", err)
		}
		if len(strings.TrimSpace(string(secret))) < minSecretBytes {
			return nil, fmt.Errorf("followup_secret_file: the secret must be at least %d bytes", minSecretBytes)
		}
		return secret, nil
	}
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return nil, fmt.Errorf("make secret: %w", err)
	}
	return secret, nil
}

// minSecretBytes is the shortest followup_secret_file taken (leading and trailing white space
// not counted).
const minSecretBytes = 16

// managerConfig maps the configuration's sandbox section onto the sandbox manager's settings.
func managerConfig(cfg *configv1.Config, registry store.Registry) sandbox.ManagerConfig {
	sb := cfg.GetSandbox()
	return sandbox.ManagerConfig{
		WarmPool:                 int(sb.GetWarmPoolSize()),
		SessionIdleTTL:           sb.GetSessionIdleTtl().AsDuration(),
		MaxSessionsPerIdentity:   int(sb.GetMaxSessionsPerIdentity()),
		MaxContainers:            int(sb.GetMaxContainers()),
		MaxContainersPerIdentity: int(sb.GetMaxContainersPerIdentity()),
		RunTimeout:               cfg.GetDefaultProfile().GetRunTimeout().AsDuration(),
		PauseTimeout:             cfg.GetPtc().GetPauseTimeout().AsDuration(),
		Registry:                 registry,
		Node:                     nodeOf(cfg),
		Hibernation:              hibernationConfig(cfg.GetHibernation()),
	}
}

// nodeOf is the node id a Manager writes as the owner of its containers: "" in one process
// (store memory), node_id in a fleet.
func nodeOf(cfg *configv1.Config) string {
	if cfg.GetStore() == config.StoreRedis {
		return cfg.GetNodeId()
	}
	return ""
}

// localConfig maps the configuration's sandbox section onto the local backend's settings.
func localConfig(cfg *configv1.Config) local.Config {
	sb := cfg.GetSandbox()
	l := sb.GetLocal()
	return local.Config{
		Python:             l.GetPython(),
		Bwrap:              l.GetBwrap(),
		WorkDir:            l.GetWorkDir(),
		CPUSeconds:         int(l.GetCpuSeconds()),
		MaxProcesses:       int(l.GetMaxProcesses()),
		MaxFileBytes:       int64(l.GetMaxFileBytes()),
		OutputLimit:        int(sb.GetOutputLimitBytes()),
		DefaultMemoryLimit: sb.GetDefaultMemoryLimit(),
		UnsafeNoIsolation:  l.GetUnsafeNoIsolation(),
		DataBytes:          int64(l.GetDataBytes()),
		TmpBytes:           int64(l.GetTmpBytes()),
		Cgroups:            l.GetCgroups(),
		InterruptGrace:     l.GetInterruptGrace().AsDuration(),
		ReadOnlyPaths:      l.GetReadOnlyPaths(),
		Preload:            true,

		MaxMemoryLimit:          sb.GetMaxMemoryLimit(),
		FirstUID:                int(l.GetFirstUid()),
		UIDCount:                int(l.GetUidCount()),
		CPUQuota:                l.GetCpuQuota(),
		KeepBackgroundProcesses: l.GetKeepBackgroundProcesses(),
		StateDir:                l.GetStateDir(),
		Start:                   l.GetStart(),
		Network:                 networkConfig(cfg.GetNetwork()),
	}
}

// networkConfig is the local backend's network settings of the network section. Validate
// checked the networks and ports.
func networkConfig(n *configv1.Network) local.NetworkConfig {
	nc := local.NetworkConfig{
		Enabled:        n.GetEnabled(),
		AllowedDomains: n.GetAllowedDomains(),
		Proxy: egress.Options{
			MaxConns:       int(n.GetMaxConnections()),
			MaxBytes:       int64(n.GetMaxBytes()),
			MaxHeaderBytes: int(n.GetMaxHeaderBytes()),
			DialTimeout:    n.GetDialTimeout().AsDuration(),
			IdleTimeout:    n.GetIdleTimeout().AsDuration(),
		},
	}
	for _, c := range n.GetAllowNetworks() {
		if p, err := netip.ParsePrefix(c); err == nil {
			nc.Proxy.AllowNetworks = append(nc.Proxy.AllowNetworks, p)
		}
	}
	for _, p := range n.GetPorts() {
		nc.Proxy.Ports = append(nc.Proxy.Ports, int(p))
	}
	return nc
}
