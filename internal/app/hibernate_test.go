package app

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"google.golang.org/protobuf/proto"

	configv1 "github.com/codeinterp/codeinterp/api/codeinterp/config/v1"
	"github.com/codeinterp/codeinterp/pkg/config"
)

// TestHibernationConfigDirectory: hibernation is on by default, in a directory of the server's
// own (so that several servers on one machine never share one); a configured dir is that dir;
// off is no directory at all.
func TestHibernationConfigDirectory(t *testing.T) {
	tests := []struct {
		name        string
		give        *configv1.Hibernation
		wantDir     string
		wantPrivate bool
	}{
		{"default", nil, "", true},
		{"a dir configured", &configv1.Hibernation{Dir: "/var/lib/codeinterp/hibernation"}, "/var/lib/codeinterp/hibernation", false},
		{"off", &configv1.Hibernation{Enabled: proto.Bool(false)}, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := &configv1.Config{Hibernation: tt.give}
			config.ApplyDefaults(cfg)
			got := hibernationConfig(cfg.GetHibernation())
			assert.Equal(t, tt.wantDir, got.Dir, "Dir")
			assert.Equal(t, tt.wantPrivate, got.Private, "Private")
		})
	}
}
