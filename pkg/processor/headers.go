package processor

import (
	"mime"
	"net/http"
	"slices"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
)

// reservedPrefix starts every header the server owns; clients cannot send them.
const reservedPrefix = "x-codeinterp-"

// headerMap is one direction's headers as Envoy sent them: lower-case keys (see docs/architecture.md, "Envoy's modes"),
// repeated keys as repeated entries, in order. It reads Envoy's message in place: a request has
// a dozen or two headers, so a linear scan is cheaper than building a map for every stream.
type headerMap []*corev3.HeaderValue

// newHeaderMap wraps Envoy's header map.
func newHeaderMap(hm *corev3.HeaderMap) headerMap { return hm.GetHeaders() }

// value returns a header's value: raw_value, which Envoy sends, or value for
// older Envoys.
func value(h *corev3.HeaderValue) string {
	if len(h.GetRawValue()) > 0 {
		return string(h.GetRawValue())
	}
	return h.GetValue()
}

// get returns the first value of key (lower case), or "".
func (m headerMap) get(key string) string {
	for _, h := range m {
		if h.GetKey() == key {
			return value(h)
		}
	}
	return ""
}

// reserved lists the reserved headers present, to be removed.
func (m headerMap) reserved() []string {
	var out []string
	for _, h := range m {
		if k := h.GetKey(); strings.HasPrefix(k, reservedPrefix) && !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out
}

// forward returns the headers a follow-up call carries: the credential headers creds (the model
// API authenticates them) and the headers matched by the allowlist (exact names, or a prefix ending in "*"). Pseudo-headers, hop-by-hop and
// framing headers (with those the Connection header names, as net/http/httputil's ReverseProxy
// drops them), reserved and Envoy-owned headers never are.
func (m headerMap) forward(creds, allow []string) http.Header {
	var hop []string
	for _, h := range m {
		if h.GetKey() == "connection" {
			for f := range strings.SplitSeq(value(h), ",") {
				if f = strings.ToLower(strings.TrimSpace(f)); f != "" {
					hop = append(hop, f)
				}
			}
		}
	}
	out := make(http.Header)
	for _, h := range m {
		if k := h.GetKey(); forwardable(k, creds, allow) && !slices.Contains(hop, k) {
			out[http.CanonicalHeaderKey(k)] = append(out[http.CanonicalHeaderKey(k)], value(h))
		}
	}
	return out
}

func forwardable(k string, creds, allow []string) bool {
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
	if slices.Contains(creds, k) {
		return true
	}
	for _, a := range allow {
		if a == k || (strings.HasSuffix(a, "*") && strings.HasPrefix(k, strings.TrimSuffix(a, "*"))) {
			return true
		}
	}
	return false
}

// isEventStream reports whether contentType names an event stream (text/event-stream).
func isEventStream(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && mt == "text/event-stream"
}
