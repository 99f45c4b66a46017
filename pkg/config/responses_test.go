package config

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	configv1 "github.com/codeinterp/codeinterp/api/codeinterp/config/v1"
)

func TestResponsesDefaults(t *testing.T) {
	cfg := &configv1.Config{}
	ApplyDefaults(cfg)
	r := cfg.GetResponses()
	assert.Equal(t, time.Hour, r.GetStoredTtl().AsDuration(), "stored_ttl")
	assert.Equal(t, uint32(256), r.GetMaxStoredPerIdentity(), "max_stored_per_identity")
	assert.Equal(t, uint64(1<<20), r.GetMaxStoredBytesPerIdentity(), "max_stored_bytes_per_identity")
	assert.Equal(t, uint32(10000), r.GetMaxStored(), "max_stored")
	assert.Equal(t, uint64(16<<20), r.GetMaxStoredBytes(), "max_stored_bytes")
	assert.Equal(t, uint32(8), r.GetMaxBackgroundPerIdentity(), "max_background_per_identity")
	assert.Equal(t, uint32(128), r.GetMaxBackground(), "max_background")
	assert.Equal(t, 10*time.Second, cfg.GetBackgroundLease().AsDuration(), "background_lease")
	require.NoError(t, Validate(cfg))
}

func TestValidateResponsesRefuses(t *testing.T) {
	tests := []struct {
		name string
		give func(*configv1.Config)
		want string
	}{
		{"ttl zero", func(c *configv1.Config) { c.Responses.StoredTtl = durationpb.New(0) }, "responses.stored_ttl:"},
		{"per caller above all", func(c *configv1.Config) { c.Responses.MaxStoredPerIdentity = 20000 }, "responses.max_stored_per_identity:"},
		{"bytes per caller above all", func(c *configv1.Config) { c.Responses.MaxStoredBytesPerIdentity = 32 << 20 }, "responses.max_stored_bytes_per_identity:"},
		{"background per caller above all", func(c *configv1.Config) { c.Responses.MaxBackgroundPerIdentity = 200 }, "responses.max_background_per_identity:"},
		{"lease below a second", func(c *configv1.Config) { c.BackgroundLease = durationpb.New(500 * time.Millisecond) }, "background_lease:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := &configv1.Config{}
			ApplyDefaults(cfg)
			tt.give(cfg)
			err := Validate(cfg)
			require.Error(t, err, "validate responses %v", cfg.Responses)
			assert.Contains(t, err.Error(), tt.want, "validate responses %v", cfg.Responses)
		})
	}
}
