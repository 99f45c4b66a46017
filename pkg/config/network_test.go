package config

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	configv1 "github.com/codeinterp/codeinterp/api/codeinterp/config/v1"
)

func TestNetworkDefaults(t *testing.T) {
	cfg := &configv1.Config{}
	ApplyDefaults(cfg)
	n := cfg.GetNetwork()
	assert.False(t, n.GetEnabled(), "network access is off by default")
	assert.Equal(t, []uint32{80, 443, 8080, 8443}, n.GetPorts(), "ports")
	assert.Equal(t, uint32(32), n.GetMaxConnections(), "max_connections")
	assert.Equal(t, uint64(1<<30), n.GetMaxBytes(), "max_bytes")
	assert.Equal(t, uint32(64<<10), n.GetMaxHeaderBytes(), "max_header_bytes")
	assert.Equal(t, 10*time.Second, n.GetDialTimeout().AsDuration(), "dial_timeout")
	assert.Equal(t, 2*time.Minute, n.GetIdleTimeout().AsDuration(), "idle_timeout")
}

func TestValidateNetworkAccepts(t *testing.T) {
	tests := []struct {
		name string
		give func(*configv1.Config)
	}{
		{"off", func(*configv1.Config) {}},
		{"on, any public domain", func(c *configv1.Config) { c.Network.Enabled = true }},
		{"on, configured", func(c *configv1.Config) {
			c.Network.Enabled = true
			c.Network.AllowedDomains = []string{"api.example.com", "*.example.org"}
			c.Network.AllowNetworks = []string{"10.20.0.0/16", "fd00::/8"}
			c.Network.Ports = []uint32{443, 9443}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := &configv1.Config{}
			ApplyDefaults(cfg)
			tt.give(cfg)
			assert.NoError(t, Validate(cfg), "validate network %v", cfg.Network)
		})
	}
}

func TestValidateNetworkRefuses(t *testing.T) {
	tests := []struct {
		name string
		give func(*configv1.Config)
		want string
	}{
		{"no isolation", func(c *configv1.Config) { c.Network.Enabled, c.Sandbox.Local.UnsafeNoIsolation = true, true }, "network.enabled:"},
		{"cidr", func(c *configv1.Config) { c.Network.AllowNetworks = []string{"10.20.0.0"} }, "network.allow_networks[0]:"},
		{"port zero", func(c *configv1.Config) { c.Network.Ports = []uint32{443, 0} }, "network.ports[1]:"},
		{"port too high", func(c *configv1.Config) { c.Network.Ports = []uint32{65536} }, "network.ports[0]:"},
		{"dial timeout", func(c *configv1.Config) { c.Network.DialTimeout = durationpb.New(0) }, "network.dial_timeout:"},
		{"idle timeout", func(c *configv1.Config) { c.Network.IdleTimeout = durationpb.New(-time.Second) }, "network.idle_timeout:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := &configv1.Config{}
			ApplyDefaults(cfg)
			tt.give(cfg)
			err := Validate(cfg)
			require.Error(t, err, "validate network %v", cfg.Network)
			assert.Contains(t, err.Error(), tt.want, "validate network %v", cfg.Network)
		})
	}
}
