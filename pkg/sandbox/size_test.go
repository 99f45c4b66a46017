package sandbox

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseMemory(t *testing.T) {
	tests := []struct {
		give     string
		want     int64
		wantForm string
	}{
		{"1g", 1 << 30, "1g"},
		{"4g", 4 << 30, "4g"},
		{"16G", 16 << 30, "16g"},
		{"64gb", 64 << 30, "64g"},
		{"512m", 512 << 20, "512m"},
		{"1024m", 1 << 30, "1g"},
		{"2048k", 2 << 20, "2m"},
		{"1t", 1 << 40, "1t"},
		{" 3g ", 3 << 30, "3g"},
		{"1000", 1000, "1000"},
	}
	for _, tt := range tests {
		got, err := ParseMemory(tt.give)
		require.NoError(t, err, "ParseMemory(%q)", tt.give)
		assert.Equal(t, tt.want, got, "ParseMemory(%q)", tt.give)
		assert.Equal(t, tt.wantForm, FormatMemory(got), "FormatMemory(ParseMemory(%q))", tt.give)
	}
	for _, bad := range []string{"", "g", "-1g", "0", "1x", "1.5g", "99999999999t", "lots"} {
		_, err := ParseMemory(bad)
		assert.Error(t, err, "ParseMemory(%q)", bad)
	}
}
