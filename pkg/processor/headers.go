package processor

import (
	"net/http"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
)

// reservedPrefix starts every header the server owns; clients cannot send them.
const reservedPrefix = "x-codeinterp-"

// headerMap holds one direction's headers as Envoy sent them: lower-case keys, repeated keys
// kept in order.
type headerMap struct {
	keys   []string
	values map[string][]string
}

// newHeaderMap reads Envoy's header map. Envoy sends values in raw_value (reference §0); value
// is read only when raw_value is empty, for older Envoys.
func newHeaderMap(hm *corev3.HeaderMap) headerMap {
	m := headerMap{values: make(map[string][]string, len(hm.GetHeaders()))}
	for _, h := range hm.GetHeaders() {
		k := strings.ToLower(h.GetKey())
		v := string(h.GetRawValue())
		if v == "" {
			v = h.GetValue()
		}
		if _, ok := m.values[k]; !ok {
			m.keys = append(m.keys, k)
		}
		m.values[k] = append(m.values[k], v)
	}
	return m
}

// get returns the first value of key, or "".
func (m headerMap) get(key string) string {
	if vs := m.values[key]; len(vs) > 0 {
		return vs[0]
	}
	return ""
}

// reserved lists the reserved headers present, to be removed.
func (m headerMap) reserved() []string {
	var out []string
	for _, k := range m.keys {
		if strings.HasPrefix(k, reservedPrefix) {
			out = append(out, k)
		}
	}
	return out
}

// credentialHeaders are always carried to follow-up calls: the model API authenticates them.
var credentialHeaders = []string{"authorization", "x-api-key", "api-key"}

// forward returns the headers a follow-up call carries: the credentials and the headers matched
// by the allowlist (exact names, or a prefix ending in "*"). Pseudo-headers, hop-by-hop and
// framing headers, reserved and Envoy-owned headers never are.
func (m headerMap) forward(allow []string) http.Header {
	out := make(http.Header)
	for _, k := range m.keys {
		if !forwardable(k, allow) {
			continue
		}
		for _, v := range m.values[k] {
			out.Add(k, v)
		}
	}
	return out
}

func forwardable(k string, allow []string) bool {
	switch {
	case strings.HasPrefix(k, ":"), strings.HasPrefix(k, reservedPrefix), strings.HasPrefix(k, "x-envoy-"),
		strings.HasPrefix(k, "x-forwarded-"):
		return false
	}
	switch k {
	case "host", "content-length", "transfer-encoding", "connection", "keep-alive", "te", "trailer",
		"upgrade", "proxy-connection", "accept-encoding", "expect":
		return false
	}
	for _, c := range credentialHeaders {
		if k == c {
			return true
		}
	}
	for _, a := range allow {
		if a == k || (strings.HasSuffix(a, "*") && strings.HasPrefix(k, strings.TrimSuffix(a, "*"))) {
			return true
		}
	}
	return false
}
