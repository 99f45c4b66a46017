package egress

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"time"
)

// Secret is a domain secret (the native domain_secrets): the code sees the environment
// variable Name holding a placeholder; the proxy replaces the placeholder with Value in HTTPS
// requests to Domain, and only there. Value never enters the container.
type Secret struct {
	// Domain is where the secret is sent: a rule as in Policy.AllowedDomains, which the
	// allowlist must allow.
	Domain string
	// Name is the environment variable the code finds the placeholder in.
	Name string
	// Value is the secret.
	Value string
}

// String names the secret without its value, so that printing one leaks nothing.
func (s Secret) String() string { return fmt.Sprintf("secret %s for %s", s.Name, s.Domain) }

// Limits of a policy's secrets.
const (
	maxSecrets     = 64
	maxSecretValue = 64 << 10 // it goes into a request's head, which servers bound to 8-64 KiB
)

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)

// reservedNames are variables a secret may not be named: the container's own.
var reservedNames = map[string]bool{
	"PATH": true, "HOME": true, "USER": true, "LOGNAME": true, "LANG": true, "LC_ALL": true, "TMPDIR": true,
	"TERM": true, "HTTP_PROXY": true, "HTTPS_PROXY": true, "NO_PROXY": true, "ALL_PROXY": true,
	"SSL_CERT_FILE": true, "REQUESTS_CA_BUNDLE": true, "CURL_CA_BUNDLE": true, "NODE_EXTRA_CA_CERTS": true,
	"PIP_CERT": true, "LD_PRELOAD": true, "LD_LIBRARY_PATH": true, "PYTHONPATH": true, "PYTHONHOME": true,
}

// secret is a checked Secret with its placeholder.
type secret struct {
	Secret
	rules       rules // its domain
	placeholder string
}

// compileSecrets checks secrets against the allowlist r and gives each a placeholder.
func compileSecrets(secrets []Secret, r rules) ([]secret, error) {
	if len(secrets) > maxSecrets {
		return nil, &SecretError{Reason: fmt.Sprintf("more than %d domain secrets", maxSecrets)}
	}
	seen := map[string]bool{}
	out := make([]secret, 0, len(secrets))
	for _, s := range secrets {
		bad := func(reason string) error { return &SecretError{Name: s.Name, Reason: reason} }
		switch {
		case !envName.MatchString(s.Name):
			return nil, bad("the name must be an environment variable name (letters, digits, underscores)")
		case reservedNames[strings.ToUpper(s.Name)]:
			return nil, bad("the name is one the container needs for itself")
		case seen[s.Name]:
			return nil, bad("two secrets have this name")
		case s.Value == "":
			return nil, bad("the value is empty")
		case len(s.Value) > maxSecretValue:
			return nil, bad(fmt.Sprintf("the value is longer than %d bytes", maxSecretValue))
		case strings.ContainsFunc(s.Value, func(c rune) bool { return c < 0x20 || c == 0x7f }):
			return nil, bad("the value has a control character")
		}
		seen[s.Name] = true
		norm, wildcard, err := ParseRule(s.Domain)
		if err != nil {
			return nil, bad(err.Error())
		}
		sr := rules{exact: map[string]bool{}}
		if wildcard {
			sr.suffixes = []string{"." + norm}
			if !slicesContainsSuffix(r.suffixes, "."+norm) {
				return nil, bad(fmt.Sprintf("its domain %q is not within allowed_domains", s.Domain))
			}
		} else {
			sr.exact[norm] = true
			if !r.allows(norm) {
				return nil, bad(fmt.Sprintf("its domain %q is not on allowed_domains", s.Domain))
			}
		}
		out = append(out, secret{Secret: s, rules: sr, placeholder: "codeinterp_secret_" + randomHex(16)})
	}
	return out, nil
}

// slicesContainsSuffix reports whether the wildcard whose suffix is s is within one of
// suffixes.
func slicesContainsSuffix(suffixes []string, s string) bool {
	for _, o := range suffixes {
		if s == o || strings.HasSuffix(s, o) {
			return true
		}
	}
	return false
}

// SecretError is a domain secret that may not be used; Reason says why, for a client. It
// never holds the value.
type SecretError struct {
	Name   string
	Reason string
}

func (e *SecretError) Error() string {
	if e.Name == "" {
		return "domain secrets: " + e.Reason
	}
	return fmt.Sprintf("domain secret %q: %s", e.Name, e.Reason)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b)
}

// Placeholders returns the placeholder of each secret by its name: what the code finds in its
// environment.
func (p *Proxy) Placeholders() map[string]string {
	out := make(map[string]string, len(p.secrets))
	for _, s := range p.secrets {
		out[s.Name] = s.placeholder
	}
	return out
}

// CACertPEM returns the certificate of the proxy's own CA, which the container must trust
// for its secrets' domains (the certificate is name-constrained to them: it vouches for no
// other name); nil without secrets.
func (p *Proxy) CACertPEM() []byte {
	if p.ca == nil {
		return nil
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: p.ca.cert.Raw})
}

// secretsFor returns the secrets sent to host.
func (p *Proxy) secretsFor(host string) []secret {
	var out []secret
	for _, s := range p.secrets {
		if s.rules.allows(host) {
			out = append(out, s)
		}
	}
	return out
}

// misplaced returns the secret whose placeholder the request's head carries although it is
// not for this request (another domain, or plain HTTP), if any.
func misplaced(req *http.Request, all, forHost []secret) (secret, bool) {
	head := requestHead(req)
	for _, s := range all {
		if strings.Contains(head, s.placeholder) && !containsSecret(forHost, s) {
			return s, true
		}
	}
	return secret{}, false
}

func containsSecret(list []secret, s secret) bool {
	for _, o := range list {
		if o.placeholder == s.placeholder {
			return true
		}
	}
	return false
}

// requestHead is the text of a request's head where a placeholder may be: its target and
// header values.
func requestHead(req *http.Request) string {
	var b strings.Builder
	b.WriteString(req.URL.String())
	b.WriteString(req.Host)
	for k, vs := range req.Header {
		b.WriteString(k)
		for _, v := range vs {
			b.WriteString(v)
		}
	}
	return b.String()
}

// substitute replaces the secrets' placeholders with their values in the request's target
// and header values.
func substitute(req *http.Request, secrets []secret) {
	for _, s := range secrets {
		req.URL.Path = strings.ReplaceAll(req.URL.Path, s.placeholder, s.Value)
		req.URL.RawPath = strings.ReplaceAll(req.URL.RawPath, s.placeholder, s.Value)
		req.URL.RawQuery = strings.ReplaceAll(req.URL.RawQuery, s.placeholder, s.Value)
		for k, vs := range req.Header {
			for i, v := range vs {
				req.Header[k][i] = strings.ReplaceAll(v, s.placeholder, s.Value)
			}
		}
	}
}

// scrubHeader replaces the secrets' values with their placeholders in h (an answer's).
func scrubHeader(h http.Header, secrets []secret) {
	for k, vs := range h {
		for i, v := range vs {
			for _, s := range secrets {
				v = strings.ReplaceAll(v, s.Value, s.placeholder)
			}
			h[k][i] = v
		}
	}
}

// scrubReader replaces the secrets' values with their placeholders in a stream (an answer's
// body), holding back what could be the start of a value cut by a read.
type scrubReader struct {
	r       io.Reader
	secrets []secret
	raw     []byte // read, not yet scrubbed
	out     []byte // scrubbed, not yet returned
	eof     bool
	err     error
}

func (s *scrubReader) Read(b []byte) (int, error) {
	for len(s.out) == 0 {
		if s.eof {
			return 0, s.err
		}
		buf := make([]byte, 32<<10)
		n, err := s.r.Read(buf)
		s.raw = append(s.raw, buf[:n]...)
		if err != nil {
			s.eof, s.err = true, err
		}
		s.scrub()
	}
	n := copy(b, s.out)
	s.out = s.out[n:]
	return n, nil
}

// scrub moves what of raw is known to hold no part of a value, scrubbed, to out.
func (s *scrubReader) scrub() {
	for {
		at, which := -1, -1
		for i, sec := range s.secrets {
			if j := bytes.Index(s.raw, []byte(sec.Value)); j >= 0 && (at < 0 || j < at) {
				at, which = j, i
			}
		}
		if at < 0 {
			break
		}
		s.out = append(s.out, s.raw[:at]...)
		s.out = append(s.out, s.secrets[which].placeholder...)
		s.raw = s.raw[at+len(s.secrets[which].Value):]
	}
	keep := 0
	if !s.eof {
		for _, sec := range s.secrets {
			for k := min(len(sec.Value)-1, len(s.raw)); k > keep; k-- {
				if bytes.HasSuffix(s.raw, []byte(sec.Value[:k])) {
					keep = k
					break
				}
			}
		}
	}
	s.out = append(s.out, s.raw[:len(s.raw)-keep]...)
	s.raw = append([]byte(nil), s.raw[len(s.raw)-keep:]...)
}

// authority is the proxy's own CA for one container: it signs a certificate for each secret's
// host the code connects to, and is name-constrained to the secrets' domains.
type authority struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey

	mu    sync.Mutex // guards leafs
	leafs map[string]*tls.Certificate
}

const maxLeafs = 256

func newAuthority(secrets []secret) (*authority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	var domains []string
	for _, s := range secrets {
		for d := range s.rules.exact {
			domains = append(domains, d)
		}
		for _, suf := range s.rules.suffixes {
			domains = append(domains, suf[1:]) // "example.com": it and its subdomains
		}
	}
	now := time.Now()
	tpl := &x509.Certificate{
		SerialNumber:                serial(),
		Subject:                     pkix.Name{CommonName: "codeinterp egress proxy (this container only)"},
		NotBefore:                   now.Add(-time.Hour),
		NotAfter:                    now.AddDate(1, 0, 0),
		IsCA:                        true,
		BasicConstraintsValid:       true,
		MaxPathLenZero:              true,
		KeyUsage:                    x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		PermittedDNSDomainsCritical: true,
		PermittedDNSDomains:         domains,
	}
	der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &authority{cert: cert, key: key, leafs: map[string]*tls.Certificate{}}, nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}

// leaf returns a certificate for host signed by the authority.
func (a *authority) leaf(host string) (*tls.Certificate, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if c := a.leafs[host]; c != nil {
		return c, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: host},
		DNSNames:     []string{host},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     a.cert.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tpl, a.cert, &key.PublicKey, a.key)
	if err != nil {
		return nil, err
	}
	c := &tls.Certificate{Certificate: [][]byte{der, a.cert.Raw}, PrivateKey: key}
	if len(a.leafs) < maxLeafs {
		a.leafs[host] = c
	}
	return c, nil
}
