package identity

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
)

func headers(kv ...string) func(string) string {
	h := http.Header{}
	for i := 0; i < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h.Get
}

// TestStable pins the derivation: a change would move every caller away from its containers.
func TestStable(t *testing.T) {
	h := New([]byte("secret"))
	tests := []struct {
		name           string
		give           []string
		identityHeader string
		want           string
	}{
		{"bearer", []string{"Authorization", "Bearer sk-a"}, "", "3744bc55a30b62c3d803b15f2cdf84b2"},
		{"x-api-key", []string{"X-Api-Key", "sk-a"}, "", "c9ca07cdf19441efeaa2e1f09097660d"},
		{"identity header", []string{"X-Tenant", "t1", "Authorization", "Bearer a"}, "x-tenant", "c541b807865962b2653804327fbd6281"},
		{"x-api-key before api-key", []string{"Api-Key", "k", "X-Api-Key", "j"}, "", "059468cd381adcfd5bd3c611cec87b1e"},
		{"no credential", []string{"Content-Type", "x"}, "", ""},
		{"identity header missing", []string{"Authorization", "Bearer a"}, "x-tenant", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, h.Of(headers(tt.give...), tt.identityHeader), "identity of %v", tt.give)
		})
	}
}

func TestOf(t *testing.T) {
	h := New([]byte("k"))
	tests := []struct {
		name           string
		a, b           []string
		identityHeader string
		same           bool
	}{
		{"same bearer", []string{"Authorization", "Bearer a"}, []string{"authorization", "Bearer a"}, "", true},
		{"other bearer", []string{"Authorization", "Bearer a"}, []string{"Authorization", "Bearer b"}, "", false},
		{"x-api-key vs bearer of the same value", []string{"X-Api-Key", "a"}, []string{"Authorization", "a"}, "", false},
		{"identity header wins over credential", []string{"X-Tenant", "t1", "Authorization", "Bearer a"}, []string{"X-Tenant", "t1", "Authorization", "Bearer b"}, "x-tenant", true},
		{"identity header differs", []string{"X-Tenant", "t1"}, []string{"X-Tenant", "t2"}, "x-tenant", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := h.Of(headers(tt.a...), tt.identityHeader)
			b := h.Of(headers(tt.b...), tt.identityHeader)
			assert.NotEmpty(t, a, "identity of %v", tt.a)
			assert.Equal(t, tt.same, a == b, "identities of %v and %v", tt.a, tt.b)
		})
	}
	assert.NotEqual(t, h.Of(headers("Authorization", "Bearer a"), ""), New([]byte("other")).Of(headers("Authorization", "Bearer a"), ""),
		"another secret, another identity")
}
