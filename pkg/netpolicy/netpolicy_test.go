package netpolicy

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/codeinterp/codeinterp/pkg/sandbox"
	"github.com/codeinterp/codeinterp/pkg/schema"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name string
		give string
		want *sandbox.NetworkPolicy
	}{
		{"absent", ``, nil},
		{"null", `null`, nil},
		{"disabled", `{"type":"disabled"}`, nil},
		{"allowlist", `{"type":"allowlist","allowed_domains":["api.example.com","*.example.org"]}`,
			&sandbox.NetworkPolicy{AllowedDomains: []string{"api.example.com", "*.example.org"}}},
		{"secrets", `{"type":"allowlist","allowed_domains":["api.example.com"],"domain_secrets":[{"domain":"api.example.com","name":"T","value":"v"}]}`,
			&sandbox.NetworkPolicy{AllowedDomains: []string{"api.example.com"}, DomainSecrets: []sandbox.DomainSecret{{Domain: "api.example.com", Name: "T", Value: "v"}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse([]byte(tt.give), "network_policy")
			require.NoError(t, err, "parse %s", tt.give)
			assert.Equal(t, tt.want, got, "parse %s", tt.give)
		})
	}
}

func TestParseRefuses(t *testing.T) {
	tests := []struct {
		name      string
		give      string
		wantParam string
		wantCode  string
	}{
		{"no type", `{}`, "p.type", "missing_required_parameter"},
		{"unknown type", `{"type":"open"}`, "p.type", "invalid_value"},
		{"no domains", `{"type":"allowlist"}`, "p.allowed_domains", "missing_required_parameter"},
		{"empty domains", `{"type":"allowlist","allowed_domains":[]}`, "p.allowed_domains", "missing_required_parameter"},
		{"secret without value", `{"type":"allowlist","allowed_domains":["a.b"],"domain_secrets":[{"domain":"a.b","name":"T"}]}`,
			"p.domain_secrets[0].value", "missing_required_parameter"},
		{"unknown member", `{"type":"allowlist","allowed_domains":["a.b"],"ports":[1]}`, "p.ports", "unknown_parameter"},
		{"not an object", `"allowlist"`, "p", "invalid_type"},
		{"secret value of a wrong type", `{"type":"allowlist","allowed_domains":["a.b"],"domain_secrets":[{"domain":"a.b","name":"T","value":12345678}]}`, "p", "invalid_type"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.give), "p")
			var re *schema.RequestError
			require.True(t, errors.As(err, &re), "parse %s: a request error, got %v", tt.give, err)
			assert.Equal(t, tt.wantParam, re.Param, "parse %s", tt.give)
			assert.Equal(t, tt.wantCode, re.Code, "parse %s", tt.give)
			assert.NotContains(t, re.Message, "12345678", "parse %s: no value in the message", tt.give)
		})
	}
}

func TestShow(t *testing.T) {
	assert.Equal(t, Shown{Type: "disabled"}, Show(nil), "no allowlist")
	assert.Equal(t, Shown{Type: "allowlist", AllowedDomains: []string{"a.b"}}, Show([]string{"a.b"}), "an allowlist")
}
