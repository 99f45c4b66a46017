package processor

import (
	"net/http"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/stretchr/testify/assert"

	"github.com/codeinterp/codeinterp/pkg/identity"
)

// TestForwardDropsHopByHop: a follow-up carries the credentials and the allowed headers, never
// pseudo, framing or hop-by-hop headers, nor those the Connection header names.
func TestForwardDropsHopByHop(t *testing.T) {
	hv := func(k, v string) *corev3.HeaderValue { return &corev3.HeaderValue{Key: k, RawValue: []byte(v)} }
	m := newHeaderMap(&corev3.HeaderMap{Headers: []*corev3.HeaderValue{
		hv(":path", "/v1/responses"), hv("authorization", "Bearer sk"), hv("openai-organization", "org"),
		hv("connection", "keep-alive, X-Trace-Hop"), hv("x-trace-hop", "secret"), hv("keep-alive", "5"),
		hv("content-length", "10"), hv("x-codeinterp-followup", "forged"), hv("x-envoy-internal", "1"),
	}})
	got := m.forward(identity.DefaultCredentialHeaders, []string{"openai-*", "x-trace-hop", "keep-alive"})
	want := http.Header{"Authorization": {"Bearer sk"}, "Openai-Organization": {"org"}}
	assert.Equal(t, want, got, "forwarded headers")
}
