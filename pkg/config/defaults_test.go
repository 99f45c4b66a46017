package config

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	configv1 "github.com/codeinterp/codeinterp/api/codeinterp/config/v1"
)

// TestApplyDefaultsSetsEveryTableField: each path of the table names a field, each value fits
// it, and an empty configuration ends up with every one of them set; a second pass changes
// nothing.
func TestApplyDefaultsSetsEveryTableField(t *testing.T) {
	cfg := &configv1.Config{}
	require.NotPanics(t, func() { ApplyDefaults(cfg) }, "the defaults table fits the proto")
	for _, d := range defaults {
		m, fd := fieldOf(cfg.ProtoReflect(), d.path)
		assert.True(t, m.Has(fd), "%s is set by ApplyDefaults", d.path)
	}
	again := proto.Clone(cfg).(*configv1.Config)
	ApplyDefaults(again)
	assert.True(t, proto.Equal(cfg, again), "ApplyDefaults twice is ApplyDefaults once: %v then %v", cfg, again)
}

// TestApplyDefaultsKeepsSetFields: a field the configuration sets keeps its value, for every
// field of the table.
func TestApplyDefaultsKeepsSetFields(t *testing.T) {
	for _, d := range defaults {
		t.Run(d.path, func(t *testing.T) {
			cfg := &configv1.Config{}
			m, fd := fieldOf(cfg.ProtoReflect(), d.path)
			m.Set(fd, protoValue(m, fd, d.path, setValue(fd)))
			want := proto.Clone(cfg).(*configv1.Config)
			ApplyDefaults(cfg)
			got, gotFD := fieldOf(cfg.ProtoReflect(), d.path)
			wantM, _ := fieldOf(want.ProtoReflect(), d.path)
			assert.True(t, got.Get(gotFD).Equal(wantM.Get(fd)), "%s set to %v is kept, got %v", d.path, wantM.Get(fd), got.Get(gotFD))
		})
	}
}

// setValue returns a value of fd's type that no default has.
func setValue(fd protoreflect.FieldDescriptor) any {
	if fd.IsList() && fd.Kind() == protoreflect.Uint32Kind {
		return []uint32{7}
	}
	if fd.IsList() {
		return []string{"x-set"}
	}
	switch fd.Kind() {
	case protoreflect.StringKind:
		return "set"
	case protoreflect.BoolKind:
		return false // only optional bools have defaults, and they default to true
	case protoreflect.DoubleKind:
		return 0.25
	case protoreflect.MessageKind:
		return 7 * time.Second
	default:
		return 7
	}
}

// TestApplyDefaultsKeepsExplicitZeros: a field with presence keeps an explicit zero, which
// means something other than the default.
func TestApplyDefaultsKeepsExplicitZeros(t *testing.T) {
	cfg := &configv1.Config{
		ApiListen:            proto.String(""),
		VerifyApiCredentials: proto.Bool(false),
		Sandbox:              &configv1.Sandbox{WarmPoolSize: proto.Uint32(0)},
	}
	ApplyDefaults(cfg)
	assert.Equal(t, "", cfg.GetApiListen(), "api_listen: \"\" serves no Containers API")
	assert.False(t, cfg.GetVerifyApiCredentials(), "verify_api_credentials: false")
	assert.Equal(t, uint32(0), cfg.GetSandbox().GetWarmPoolSize(), "warm_pool_size: 0 disables the pool")
}

// TestDerivedDefaults: the defaults computed from other fields.
func TestDerivedDefaults(t *testing.T) {
	tests := []struct {
		name                  string
		give                  *configv1.Config
		wantMaxOutputBytes    uint64
		wantPerIdentityCap    uint32
		wantSessionsPerIdent  uint32
		wantContainersInTotal uint32
	}{
		{
			name:               "defaults",
			give:               &configv1.Config{},
			wantMaxOutputBytes: DefaultMaxOutputBytes, wantPerIdentityCap: DefaultMaxContainersPerIdentity,
			wantSessionsPerIdent: DefaultMaxSessionsPerIdentity, wantContainersInTotal: DefaultMaxContainers,
		},
		{
			name:               "a small send limit shrinks the output budget",
			give:               &configv1.Config{MaxRequestBytes: 4 << 20},
			wantMaxOutputBytes: (4<<20 - AnswerOverheadBytes) / 2, wantPerIdentityCap: DefaultMaxContainersPerIdentity,
			wantSessionsPerIdent: DefaultMaxSessionsPerIdentity, wantContainersInTotal: DefaultMaxContainers,
		},
		{
			name:               "the identity cap is at least the sessions per identity",
			give:               &configv1.Config{Sandbox: &configv1.Sandbox{MaxSessionsPerIdentity: 40}},
			wantMaxOutputBytes: DefaultMaxOutputBytes, wantPerIdentityCap: 40,
			wantSessionsPerIdent: 40, wantContainersInTotal: DefaultMaxContainers,
		},
		{
			name:               "the identity cap is at most the containers in total",
			give:               &configv1.Config{Sandbox: &configv1.Sandbox{MaxContainers: 8, MaxSessionsPerIdentity: 4}},
			wantMaxOutputBytes: DefaultMaxOutputBytes, wantPerIdentityCap: 8,
			wantSessionsPerIdent: 4, wantContainersInTotal: 8,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ApplyDefaults(tt.give)
			assert.Equal(t, tt.wantMaxOutputBytes, tt.give.GetDefaultProfile().GetMaxOutputBytes(), "%s: max_output_bytes", tt.name)
			assert.Equal(t, tt.wantPerIdentityCap, tt.give.GetSandbox().GetMaxContainersPerIdentity(), "%s: max_containers_per_identity", tt.name)
			assert.Equal(t, tt.wantSessionsPerIdent, tt.give.GetSandbox().GetMaxSessionsPerIdentity(), "%s: max_sessions_per_identity", tt.name)
			assert.Equal(t, tt.wantContainersInTotal, tt.give.GetSandbox().GetMaxContainers(), "%s: max_containers", tt.name)
		})
	}
}
