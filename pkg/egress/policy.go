// Package egress is a container's only way out to the network: a forward proxy, one per
// container, owned by the server, that lets the code make HTTP requests and HTTPS CONNECT
// tunnels to the domains of the container's allowlist and to nothing else (issue 31, the
// native network_policy).
//
// The proxy resolves names itself and dials the very address it checked (no second
// resolution a DNS answer could change in between); it refuses private, loopback, link-local,
// unspecified, multicast and cloud metadata destinations unless the operator allowed the
// network (Options.AllowNetworks; metadata addresses never), so that an allowed name pointing
// into the cluster reaches nothing. It bounds each container's concurrent connections and the
// bytes it moves. Redirects are the client's to follow: each new request is checked again.
//
// Domain secrets (Policy.Secrets) let the code use a credential it never holds: it sees a
// placeholder (Proxy.Placeholders); in an HTTPS request to the secret's domain the proxy ends
// the code's TLS with a certificate of its own CA (Proxy.CACertPEM, name-constrained to the
// secrets' domains, its key never leaving the proxy), puts the value in place of the
// placeholder in the request line and headers, sends the request over its own verified TLS
// connection, and scrubs the value back to the placeholder in the answer. A placeholder in
// any other request is refused.
//
// What it cannot see: inside a CONNECT tunnel the TLS handshake is the code's, so a TLS server
// name other than the CONNECT host (domain fronting on a shared CDN address) is not refused.
package egress

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// Policy is what one container may reach.
type Policy struct {
	// AllowedDomains are the domains the code may reach, as the native allowed_domains: an
	// exact name ("api.example.com": that host only), or a wildcard ("*.example.com": every
	// name under example.com, at any depth, but not example.com itself). Names are matched
	// without case and without a trailing dot. IP addresses are not domains: a request to an
	// address is refused.
	AllowedDomains []string
	// Secrets are the domain secrets: each for a domain the allowlist allows.
	Secrets []Secret
}

// maxDomains bounds a policy's allowlist.
const maxDomains = 256

// RuleError is an allowlist entry that is not a domain rule; Reason says why, for a client.
type RuleError struct {
	Rule   string
	Reason string
}

func (e *RuleError) Error() string { return fmt.Sprintf("allowed domain %q: %s", e.Rule, e.Reason) }

// ErrTooManyDomains means a policy has more than 256 allowed domains.
var ErrTooManyDomains = fmt.Errorf("more than %d allowed domains", maxDomains)

// rules is a checked allowlist.
type rules struct {
	exact    map[string]bool
	suffixes []string // ".example.com" for "*.example.com"
}

// CheckPolicy reports whether p is a valid policy: an error is a *RuleError (or
// ErrTooManyDomains), the client's mistake.
func CheckPolicy(p Policy) error {
	r, err := compile(p.AllowedDomains)
	if err != nil {
		return err
	}
	_, err = compileSecrets(p.Secrets, r)
	return err
}

// compile checks and normalizes an allowlist.
func compile(domains []string) (rules, error) {
	if len(domains) > maxDomains {
		return rules{}, ErrTooManyDomains
	}
	r := rules{exact: map[string]bool{}}
	for _, d := range domains {
		norm, wildcard, err := ParseRule(d)
		if err != nil {
			return rules{}, err
		}
		if wildcard {
			r.suffixes = append(r.suffixes, "."+norm)
		} else {
			r.exact[norm] = true
		}
	}
	return r, nil
}

// allows reports whether host (normalized by CanonicalHost) is on the list.
func (r rules) allows(host string) bool {
	if r.exact[host] {
		return true
	}
	for _, s := range r.suffixes {
		if strings.HasSuffix(host, s) {
			return true
		}
	}
	return false
}

// ParseRule checks one allowlist entry and returns its domain in canonical form (lower case,
// no trailing dot), without the "*." of a wildcard, and whether it is a wildcard. An error is a
// *RuleError.
func ParseRule(rule string) (domain string, wildcard bool, err error) {
	d := rule
	if rest, ok := strings.CutPrefix(d, "*."); ok {
		d, wildcard = rest, true
	}
	d, reason := canonicalDomain(d)
	if reason != "" {
		return "", false, &RuleError{Rule: rule, Reason: reason}
	}
	if wildcard && !strings.Contains(d, ".") {
		return "", false, &RuleError{Rule: rule, Reason: "a wildcard must name a domain of at least two labels (*.example.com)"}
	}
	return d, wildcard, nil
}

// CanonicalHost returns host (a request's, without port) in the form rules are matched
// against, or an error when it is not a domain name (an IP address is not).
func CanonicalHost(host string) (string, error) {
	d, reason := canonicalDomain(host)
	if reason != "" {
		return "", errors.New(reason)
	}
	return d, nil
}

// canonicalDomain lowercases d and drops one trailing dot; reason is why d is not a domain
// name ("" when it is).
func canonicalDomain(d string) (string, string) {
	d = strings.TrimSuffix(d, ".")
	if d == "" {
		return "", "empty"
	}
	if len(d) > 253 {
		return "", "longer than 253 characters"
	}
	if _, err := netip.ParseAddr(strings.Trim(d, "[]")); err == nil {
		return "", "an IP address, not a domain"
	}
	d = strings.ToLower(d)
	labels := strings.Split(d, ".")
	for _, l := range labels {
		if l == "" || len(l) > 63 {
			return "", "a label is empty or longer than 63 characters"
		}
		if l[0] == '-' || l[len(l)-1] == '-' {
			return "", "a label starts or ends with a hyphen"
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return "", "not a domain name (letters, digits, hyphens; punycode for others)"
			}
		}
	}
	// An all-numeric last label is an address in another form (0x7f.1, 2130706433).
	last := labels[len(labels)-1]
	if strings.Trim(last, "0123456789") == "" || strings.HasPrefix(last, "0x") {
		return "", "an IP address, not a domain"
	}
	return d, ""
}

// CheckWithin reports whether every rule of domains is within the operator's allowlist org:
// an exact name org allows (listed, or under a wildcard listed), or a wildcard under one of
// org's (the same wildcard or a deeper one). An empty org allows every valid rule. An error
// is a *RuleError (or ErrTooManyDomains), the client's mistake; org must be valid (an
// invalid org rule fails too).
func CheckWithin(domains, org []string) error {
	if _, err := compile(domains); err != nil {
		return err
	}
	if len(org) == 0 {
		return nil
	}
	o, err := compile(org)
	if err != nil {
		return fmt.Errorf("operator's allowed domains: %w", err)
	}
	for _, d := range domains {
		norm, wildcard, _ := ParseRule(d) // compiled above
		within := o.allows(norm)
		if wildcard {
			// Every name under norm is under one of org's wildcards: norm is that wildcard's
			// domain or under it.
			within = slices.ContainsFunc(o.suffixes, func(s string) bool { return "."+norm == s || strings.HasSuffix(norm, s) })
		}
		if !within {
			return &RuleError{Rule: d, Reason: "outside the allowed domains of this server"}
		}
	}
	return nil
}
