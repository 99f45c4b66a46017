package identity

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// headers returns the values function of a request with the headers kv (name, value, …).
func headers(kv ...string) func(string) []string {
	h := http.Header{}
	for i := 0; i < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h.Values
}

// TestStable pins the derivation: a change would move every caller away from its containers.
func TestStable(t *testing.T) {
	h := New([]byte("secret"), Config{})
	tests := []struct {
		name           string
		give           []string
		identityHeader string
		want           string
	}{
		{"bearer", []string{"Authorization", "Bearer sk-a"}, "", "5d8349332a39e7696c9b2faa6f6099ef"},
		{"x-api-key", []string{"X-Api-Key", "sk-a"}, "", "5d8349332a39e7696c9b2faa6f6099ef"},
		{"identity header", []string{"X-Tenant", "t1", "Authorization", "Bearer a"}, "x-tenant", "c541b807865962b2653804327fbd6281"},
		{"no credential", []string{"Content-Type", "x"}, "", ""},
		{"identity header missing", []string{"Authorization", "Bearer a"}, "x-tenant", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := h.Of(headers(tt.give...), tt.identityHeader)
			require.NoError(t, err, "identity of %v", tt.give)
			assert.Equal(t, tt.want, got, "identity of %v", tt.give)
		})
	}
}

func TestOf(t *testing.T) {
	h := New([]byte("k"), Config{})
	tests := []struct {
		name           string
		a, b           []string
		identityHeader string
		same           bool
	}{
		{"same bearer", []string{"Authorization", "Bearer a"}, []string{"authorization", "Bearer a"}, "", true},
		{"other bearer", []string{"Authorization", "Bearer a"}, []string{"Authorization", "Bearer b"}, "", false},
		{"one key in any header is one identity", []string{"X-Api-Key", "a"}, []string{"Authorization", "Bearer a"}, "", true},
		{"api-key is the same key", []string{"Api-Key", "a"}, []string{"X-Litellm-Api-Key", "a"}, "", true},
		{"bearer scheme in any case", []string{"Authorization", "bearer a"}, []string{"Authorization", "BEARER  a "}, "", true},
		{"another scheme stays", []string{"Authorization", "Basic a"}, []string{"Authorization", "Bearer a"}, "", false},
		{"one key in several headers", []string{"Authorization", "Bearer a", "X-Api-Key", "a", "Api-Key", "a"}, []string{"X-Api-Key", "a"}, "", true},
		{"a repeated header of one key", []string{"X-Api-Key", "a", "X-Api-Key", "a"}, []string{"X-Api-Key", "a"}, "", true},
		{"identity header wins over credential", []string{"X-Tenant", "t1", "Authorization", "Bearer a"}, []string{"X-Tenant", "t1", "Authorization", "Bearer b"}, "x-tenant", true},
		{"identity header wins over many credentials", []string{"X-Tenant", "t1", "Authorization", "Bearer a", "X-Api-Key", "b"}, []string{"X-Tenant", "t1"}, "x-tenant", true},
		{"identity header differs", []string{"X-Tenant", "t1"}, []string{"X-Tenant", "t2"}, "x-tenant", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := h.Of(headers(tt.a...), tt.identityHeader)
			require.NoError(t, err, "identity of %v", tt.a)
			b, err := h.Of(headers(tt.b...), tt.identityHeader)
			require.NoError(t, err, "identity of %v", tt.b)
			assert.NotEmpty(t, a, "identity of %v", tt.a)
			assert.Equal(t, tt.same, a == b, "identities of %v and %v", tt.a, tt.b)
		})
	}
	a, _ := h.Of(headers("Authorization", "Bearer a"), "")
	b, _ := New([]byte("other"), Config{}).Of(headers("Authorization", "Bearer a"), "")
	assert.NotEqual(t, a, b, "another secret, another identity")
}

// TestRefused: a request that carries two credentials, or its identity header twice, has no
// identity — issue 23: one valid api-key and a made-up x-api-key per request were a fresh
// identity each time.
func TestRefused(t *testing.T) {
	h := New([]byte("k"), Config{})
	tests := []struct {
		name           string
		give           []string
		identityHeader string
		want           error
	}{
		{"api-key and a made-up x-api-key", []string{"Api-Key", "sk-real", "X-Api-Key", "made-up-1"}, "", ErrManyCredentials},
		{"bearer and x-api-key", []string{"Authorization", "Bearer a", "X-Api-Key", "b"}, "", ErrManyCredentials},
		{"litellm's own header", []string{"Authorization", "Bearer a", "X-Litellm-Api-Key", "b"}, "", ErrManyCredentials},
		{"a repeated x-api-key", []string{"X-Api-Key", "a", "X-Api-Key", "b"}, "", ErrManyCredentials},
		{"a repeated identity header", []string{"X-Tenant", "t1", "X-Tenant", "t2"}, "x-tenant", ErrRepeatedIdentityHeader},
		{"a repeated identity header of one value", []string{"X-Tenant", "t1", "X-Tenant", "t1"}, "x-tenant", ErrRepeatedIdentityHeader},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := h.Of(headers(tt.give...), tt.identityHeader)
			assert.ErrorIs(t, err, tt.want, "identity of %v", tt.give)
			assert.Empty(t, got, "identity of %v", tt.give)
		})
	}
}

// TestCredentialHeaders: the configured list replaces the default one.
func TestCredentialHeaders(t *testing.T) {
	h := New([]byte("k"), Config{CredentialHeaders: []string{"X-Custom-Key"}})
	assert.Equal(t, []string{"x-custom-key"}, h.CredentialHeaders(), "configured headers, lower case")
	got, err := h.Of(headers("X-Custom-Key", "a", "Authorization", "Bearer b"), "")
	require.NoError(t, err, "a header outside the list is not a credential")
	want, _ := h.Of(headers("X-Custom-Key", "a"), "")
	assert.Equal(t, want, got, "identity of the configured header alone")
	_, err = h.Of(headers("X-Custom-Key", "a", "X-Custom-Key", "b"), "")
	assert.ErrorIs(t, err, ErrManyCredentials, "two values of the configured header")
	assert.Equal(t, DefaultCredentialHeaders, New([]byte("k"), Config{}).CredentialHeaders(), "default headers")
}

// FuzzOf checks the rule on any header values: an identity is a fixed-size hash; a request
// with one credential, however often repeated, is that credential's identity; two different
// credentials are refused.
func FuzzOf(f *testing.F) {
	f.Add("Bearer a", "a", "")
	f.Add("Bearer a", "b", "x")
	f.Add("", "", "t")
	f.Add("bearer ", " ", "\x00")
	h := New([]byte("k"), Config{})
	f.Fuzz(func(t *testing.T, auth, key, tenant string) {
		hd := http.Header{}
		if auth != "" {
			hd["Authorization"] = []string{auth}
		}
		if key != "" {
			hd["X-Api-Key"] = []string{key, key}
		}
		values := func(name string) []string { return hd[http.CanonicalHeaderKey(name)] }
		got, err := h.Of(values, "")
		a, k := Credential("authorization", auth), Credential("x-api-key", key)
		switch {
		case a != "" && k != "" && a != k:
			assert.ErrorIs(t, err, ErrManyCredentials, "auth %q key %q", auth, key)
		case a == "" && k == "":
			assert.NoError(t, err, "auth %q key %q", auth, key)
			assert.Empty(t, got, "no credential: auth %q key %q", auth, key)
		default:
			require.NoError(t, err, "auth %q key %q", auth, key)
			assert.Len(t, got, 32, "a fixed-size identity")
			one := http.Header{"X-Api-Key": {a + k}}
			if a != "" && k != "" {
				one = http.Header{"X-Api-Key": {a}}
			}
			want, err := h.Of(func(name string) []string { return one[http.CanonicalHeaderKey(name)] }, "")
			require.NoError(t, err, "the credential alone")
			assert.Equal(t, want, got, "the credential's identity: auth %q key %q", auth, key)
		}
		hd["X-Tenant"] = []string{tenant}
		id, err := h.Of(values, "x-tenant")
		assert.NoError(t, err, "one identity header %q", tenant)
		assert.Equal(t, tenant == "", id == "", "identity of tenant %q", tenant)
		assert.False(t, strings.ContainsAny(id, "\x00 "), "hex identity")
	})
}
