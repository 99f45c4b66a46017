package egress

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

const secretValue = "sk-live-THE-REAL-SECRET-0123456789"

// secretServer is an HTTPS server for api.secret.test (its certificate from a test CA, which
// it returns as a pool) that echoes the Authorization header it got, in a header and the body.
func secretServer(t testing.TB) (*httptest.Server, *x509.CertPool, chan string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	caTpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: "test CA"}, IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	caDER, err := x509.CreateCertificate(rand.Reader, caTpl, caTpl, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	ca, err := x509.ParseCertificate(caDER)
	require.NoError(t, err)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tpl := &x509.Certificate{SerialNumber: serial(), DNSNames: []string{"api.secret.test"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tpl, ca, &key.PublicKey, caKey)
	require.NoError(t, err)
	seen := make(chan string, 16)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Get("Authorization") + " " + r.URL.RawQuery
		w.Header().Set("X-Echo", r.Header.Get("Authorization"))
		fmt.Fprintf(w, "you sent %q and %q", r.Header.Get("Authorization"), r.URL.Query().Get("key"))
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return srv, pool, seen
}

func TestProxySecretSubstitutedOnlyForItsDomain(t *testing.T) {
	srv, roots, seen := secretServer(t)
	port := portOf(t, srv.URL)
	core, logs := observer.New(zap.DebugLevel)
	opts := loopbackOpts(port)
	opts.Resolve, opts.UpstreamRoots = testResolve, roots
	p, err := New(Policy{
		AllowedDomains: []string{"api.secret.test", "allowed.test"},
		Secrets:        []Secret{{Domain: "api.secret.test", Name: "API_TOKEN", Value: secretValue}},
	}, opts, zap.New(core))
	require.NoError(t, err)
	l := listen(t, p)
	placeholder := p.Placeholders()["API_TOKEN"]
	require.True(t, strings.HasPrefix(placeholder, "codeinterp_secret_"), placeholder)
	assert.NotContains(t, placeholder, secretValue)

	// The code trusts the proxy's CA, as its container does.
	trust := x509.NewCertPool()
	require.True(t, trust.AppendCertsFromPEM(p.CACertPEM()))
	tr := &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: l}), TLSClientConfig: &tls.Config{RootCAs: trust}}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}

	req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("https://api.secret.test:%d/v1?key=%s", port, placeholder), nil)
	req.Header.Set("Authorization", "Bearer "+placeholder)
	resp, err := c.Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "Bearer "+secretValue+" key="+secretValue, <-seen, "the server gets the secret")
	assert.Equal(t, fmt.Sprintf("you sent %q and %q", "Bearer "+placeholder, placeholder), string(body), "the code sees only placeholders")
	assert.Equal(t, "Bearer "+placeholder, resp.Header.Get("X-Echo"))

	// The placeholder to another domain, in plain HTTP: refused, and nothing substituted.
	req, _ = http.NewRequest(http.MethodGet, fmt.Sprintf("http://allowed.test:%d/", port), nil)
	req.Header.Set("Authorization", "Bearer "+placeholder)
	resp, err = c.Do(req)
	require.NoError(t, err)
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusForbidden, resp.StatusCode)
	assert.Contains(t, string(body), "placeholder of domain secret API_TOKEN")
	assert.NotContains(t, string(body), secretValue)

	for _, e := range logs.All() {
		assert.NotContains(t, fmt.Sprint(e.Message, e.ContextMap()), secretValue, "a log line holds the secret")
	}
}

// listen serves p on a loopback listener until the test ends; it returns its address.
func listen(t *testing.T, p *Proxy) string {
	t.Helper()
	l, err := localListener()
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- p.Serve(l) }()
	t.Cleanup(func() {
		require.NoError(t, p.Close())
		<-done
	})
	return l.Addr().String()
}

func TestProxyCAIsNameConstrained(t *testing.T) {
	p, err := New(Policy{AllowedDomains: []string{"api.secret.test", "*.corp.test"},
		Secrets: []Secret{{Domain: "api.secret.test", Name: "A", Value: "v"}, {Domain: "*.corp.test", Name: "B", Value: "w"}}}, Options{}, nil)
	require.NoError(t, err)
	defer p.Close()
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(p.CACertPEM())
	tests := []struct {
		host string
		ok   bool
	}{
		{"api.secret.test", true},
		{"x.corp.test", true},
		{"evil.test", false},
		{"example.com", false},
	}
	for _, tt := range tests {
		leaf, err := p.ca.leaf(tt.host)
		require.NoError(t, err)
		cert, err := x509.ParseCertificate(leaf.Certificate[0])
		require.NoError(t, err)
		_, err = cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: tt.host})
		assert.Equal(t, tt.ok, err == nil, "a certificate for %s verifies: %v", tt.host, err)
	}
}

func TestCheckPolicySecrets(t *testing.T) {
	allowed := []string{"api.example.com", "*.corp.example"}
	tests := []struct {
		name string
		give Secret
		ok   bool
	}{
		{"exact", Secret{Domain: "api.example.com", Name: "TOKEN", Value: "x"}, true},
		{"under a wildcard", Secret{Domain: "a.corp.example", Name: "TOKEN", Value: "x"}, true},
		{"a wildcard within", Secret{Domain: "*.b.corp.example", Name: "TOKEN", Value: "x"}, true},
		{"domain not allowed", Secret{Domain: "evil.example", Name: "TOKEN", Value: "x"}, false},
		{"wildcard wider than allowed", Secret{Domain: "*.example.com", Name: "TOKEN", Value: "x"}, false},
		{"bad name", Secret{Domain: "api.example.com", Name: "1TOKEN", Value: "x"}, false},
		{"reserved name", Secret{Domain: "api.example.com", Name: "https_proxy", Value: "x"}, false},
		{"empty value", Secret{Domain: "api.example.com", Name: "TOKEN"}, false},
		{"newline in value", Secret{Domain: "api.example.com", Name: "TOKEN", Value: "a\r\nX-Evil: 1"}, false},
	}
	for _, tt := range tests {
		err := CheckPolicy(Policy{AllowedDomains: allowed, Secrets: []Secret{tt.give}})
		assert.Equal(t, tt.ok, err == nil, "%s: %v", tt.name, err)
		if err != nil {
			assert.NotContains(t, err.Error(), tt.give.Value+"X", "%s: the error holds no value", tt.name)
		}
	}
	err := CheckPolicy(Policy{AllowedDomains: allowed, Secrets: []Secret{
		{Domain: "api.example.com", Name: "T", Value: "1"}, {Domain: "api.example.com", Name: "T", Value: "2"}}})
	assert.Error(t, err, "two secrets of one name")
	assert.Equal(t, "secret T for api.example.com", fmt.Sprint(Secret{Domain: "api.example.com", Name: "T", Value: secretValue}))
}

func TestScrubReader(t *testing.T) {
	secrets := []secret{{Secret: Secret{Value: "SECRET"}, placeholder: "<p1>"}, {Secret: Secret{Value: "SECOND"}, placeholder: "<p2>"}}
	tests := []struct{ give, want string }{
		{"no secret here", "no secret here"},
		{"SECRET", "<p1>"},
		{"aSECRETbSECONDcSECRET", "a<p1>b<p2>c<p1>"},
		{"SECRE", "SECRE"},
		{"SECSECRET", "SEC<p1>"},
		{"SECRESECRETT", "SECRE<p1>T"},
	}
	for _, tt := range tests {
		for _, r := range []io.Reader{strings.NewReader(tt.give), iotest.OneByteReader(strings.NewReader(tt.give)), iotest.HalfReader(strings.NewReader(tt.give))} {
			got, err := io.ReadAll(&scrubReader{r: r, secrets: secrets})
			require.NoError(t, err)
			assert.Equal(t, tt.want, string(got), "scrub %q", tt.give)
		}
	}
}

// BenchmarkProxySecretRequest measures what putting a secret in adds to one HTTPS request on
// loopback (a new connection each): through a plain CONNECT tunnel to a domain without
// secrets, then through the proxy's interception of a secret's domain, back to back; the
// medians are reported.
func BenchmarkProxySecretRequest(b *testing.B) {
	srv, roots, seen := secretServer(b)
	stop := make(chan struct{})
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		for {
			select {
			case <-seen:
			case <-stop:
				return
			}
		}
	}()
	b.Cleanup(func() { close(stop); <-drained })
	port := portOf(b, srv.URL)
	opts := loopbackOpts(port)
	opts.Resolve, opts.UpstreamRoots = testResolve, roots
	tunnel, err := New(Policy{AllowedDomains: []string{"api.secret.test"}}, opts, nil)
	require.NoError(b, err)
	secret, err := New(Policy{AllowedDomains: []string{"api.secret.test"},
		Secrets: []Secret{{Domain: "api.secret.test", Name: "T", Value: secretValue}}}, opts, nil)
	require.NoError(b, err)
	trust := roots.Clone()
	trust.AppendCertsFromPEM(secret.CACertPEM())
	clientVia := func(p *Proxy) *http.Client {
		l, err := localListener()
		require.NoError(b, err)
		done := make(chan error, 1)
		go func() { done <- p.Serve(l) }()
		b.Cleanup(func() { p.Close(); <-done })
		return &http.Client{Transport: &http.Transport{DisableKeepAlives: true, Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: l.Addr().String()}),
			TLSClientConfig: &tls.Config{RootCAs: trust}}}
	}
	viaTunnel, viaSecret := clientVia(tunnel), clientVia(secret)
	u := fmt.Sprintf("https://api.secret.test:%d/", port)
	fetch := func(c *http.Client) time.Duration {
		start := time.Now()
		req, _ := http.NewRequest(http.MethodGet, u, nil)
		req.Header.Set("Authorization", "Bearer "+secret.Placeholders()["T"])
		resp, err := c.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return time.Since(start)
	}
	var tun, sec []time.Duration
	for b.Loop() {
		tun = append(tun, fetch(viaTunnel))
		sec = append(sec, fetch(viaSecret))
	}
	slices.Sort(tun)
	slices.Sort(sec)
	b.ReportMetric(float64(tun[len(tun)/2].Microseconds()), "µs-tunnel")
	b.ReportMetric(float64(sec[len(sec)/2].Microseconds()), "µs-secret")
}
