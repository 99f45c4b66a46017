package local

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/codeinterp/codeinterp/pkg/egress"
	"github.com/codeinterp/codeinterp/pkg/sandbox"
)

// netTestResolve resolves the network tests' names: allowed.test and other.test to the
// loopback test servers, metadata.test to the metadata address.
func netTestResolve(_ context.Context, host string) ([]netip.Addr, error) {
	switch host {
	case "allowed.test", "other.test", "api.secret.test":
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	case "metadata.test":
		return []netip.Addr{netip.MustParseAddr("169.254.169.254")}, nil
	}
	return nil, errors.New("no such host")
}

// netTestLocal returns a Local whose containers may have network policies reaching the
// loopback test servers on ports.
func netTestLocal(t *testing.T, ports ...int) *Local {
	return netTestLocalRoots(t, nil, ports...)
}

// netTestLocalRoots is netTestLocal whose proxies trust roots for the secrets' servers.
func netTestLocalRoots(t *testing.T, roots *x509.CertPool, ports ...int) *Local {
	return newTestLocal(t, Config{Network: NetworkConfig{
		Enabled:        true,
		AllowedDomains: []string{"allowed.test", "other.test", "metadata.test", "api.secret.test"},
		Proxy: egress.Options{
			Resolve:       netTestResolve,
			AllowNetworks: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
			Ports:         ports,
			UpstreamRoots: roots,
		},
	}})
}

func serverPort(t *testing.T, srv *httptest.Server) int {
	t.Helper()
	u, err := url.Parse(srv.URL)
	require.NoError(t, err)
	port, err := strconv.Atoi(u.Port())
	require.NoError(t, err)
	return port
}

// TestLocalNetworkPolicy: code in a container with an allowlist reaches an allowed domain
// through its proxy, with urllib and curl, over HTTP and HTTPS, and nothing else: not another
// domain, not a redirect to one, not the metadata address, not a raw socket.
func TestLocalNetworkPolicy(t *testing.T) { inBothStarts(t, testLocalNetworkPolicy) }

func testLocalNetworkPolicy(t *testing.T) {
	var mu sync.Mutex
	var reached []string
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		reached = append(reached, r.Host+r.URL.Path)
		mu.Unlock()
		if r.URL.Path == "/redirect" {
			http.Redirect(w, r, "http://other.test:"+r.URL.Query().Get("port")+"/landed", http.StatusFound)
			return
		}
		fmt.Fprintf(w, "hello from %s", r.URL.Path)
	})
	srv := httptest.NewServer(handler)
	defer srv.Close()
	tlsSrv := httptest.NewTLSServer(handler)
	defer tlsSrv.Close()
	port, tlsPort := serverPort(t, srv), serverPort(t, tlsSrv)
	l := netTestLocal(t, port, tlsPort)
	c := newTestContainer(t, l, sandbox.Spec{NetworkPolicy: &sandbox.NetworkPolicy{AllowedDomains: []string{"allowed.test", "metadata.test"}}})
	ctx := context.Background()

	code := fmt.Sprintf(`
import os, ssl, socket, subprocess, urllib.request, urllib.error
def fetch(u, **kw):
    try:
        with urllib.request.urlopen(u, timeout=10, **kw) as r:
            return '%%d %%s' %% (r.status, r.read().decode())
    except urllib.error.HTTPError as e:
        return '%%d %%s' %% (e.code, e.read().decode().strip())
    except Exception as e:
        return 'error %%s: %%s' %% (type(e).__name__, e)
insecure = ssl._create_unverified_context()
print('proxy', os.environ.get('HTTPS_PROXY'))
print('http', fetch('http://allowed.test:%[1]d/plain'))
print('https', fetch('https://allowed.test:%[2]d/secure', context=insecure))
print('curl', subprocess.run(['curl', '-sS', '-k', 'https://allowed.test:%[2]d/curl'], capture_output=True, text=True).stdout)
print('other', fetch('http://other.test:%[1]d/other'))
print('other-https', fetch('https://other.test:%[2]d/other', context=insecure))
print('redirect', fetch('http://allowed.test:%[1]d/redirect?port=%[1]d'))
print('metadata', fetch('http://metadata.test:%[1]d/latest/meta-data/'))
for addr in [('127.0.0.1', %[1]d), ('1.1.1.1', 80)]:
    try:
        socket.create_connection(addr, timeout=3)
        print('raw', addr[0], 'connected')
    except OSError as e:
        print('raw', addr[0], 'refused')
`, port, tlsPort)
	res, err := c.Run(ctx, code)
	require.NoError(t, err)
	require.Nil(t, res.Error, "run: %+v", res.Error)
	out := res.Stdout
	assert.Contains(t, out, "proxy http://127.0.0.1:3128", "the code sees its proxy")
	assert.Contains(t, out, "http 200 hello from /plain", "HTTP to an allowed domain")
	assert.Contains(t, out, "https 200 hello from /secure", "HTTPS (CONNECT) to an allowed domain")
	assert.Contains(t, out, "curl hello from /curl", "curl through https_proxy")
	assert.Contains(t, out, `other 403 codeinterp egress proxy: refused: domain "other.test" is not on this container's allowed_domains`)
	assert.Contains(t, out, `other-https error URLError: <urlopen error Tunnel connection failed: 403 Forbidden (codeinterp egress proxy: domain "other.test" is not on this container's allowed_domains)>`,
		"CONNECT to a domain not on the list")
	assert.Contains(t, out, `redirect 403 codeinterp egress proxy: refused: domain "other.test"`, "a redirect to a domain not on the list")
	assert.Contains(t, out, "metadata 403 codeinterp egress proxy: refused", "the metadata address")
	assert.Contains(t, out, "raw 127.0.0.1 refused", "a raw socket to the host's loopback")
	assert.Contains(t, out, "raw 1.1.1.1 refused", "a raw socket out")
	mu.Lock()
	defer mu.Unlock()
	assert.NotContains(t, reached, "other.test:"+strconv.Itoa(port)+"/landed")
	assert.NotContains(t, reached, "other.test:"+strconv.Itoa(port)+"/other")
}

// TestLocalNoNetworkPolicy: a container without a policy has no proxy and no way out.
func TestLocalNoNetworkPolicy(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	l := netTestLocal(t, serverPort(t, srv))
	c := newTestContainer(t, l, sandbox.Spec{})
	res, err := c.Run(context.Background(), `
import os, socket
print('proxy', os.environ.get('HTTPS_PROXY'))
try:
    socket.create_connection(('127.0.0.1', 3128), timeout=3)
    print('connected')
except OSError:
    print('no proxy')
`)
	require.NoError(t, err)
	assert.Equal(t, "proxy None\nno proxy\n", res.Stdout)
}

func TestLocalNetworkPolicyRefused(t *testing.T) {
	policy := func(d ...string) sandbox.Spec {
		return sandbox.Spec{NetworkPolicy: &sandbox.NetworkPolicy{AllowedDomains: d}}
	}
	off := sharedLocal(t)
	var se *sandbox.SpecError
	err := off.CheckSpec(policy("allowed.test"))
	require.ErrorAs(t, err, &se, "network policies are off by default")
	assert.Equal(t, "network_policy", se.Field)
	_, err = off.Create(context.Background(), policy("allowed.test"))
	assert.ErrorIs(t, err, sandbox.ErrInvalidSpec)

	on := netTestLocal(t, 443)
	tests := []struct {
		name string
		give sandbox.Spec
	}{
		{"outside the operator's allowlist", policy("allowed.test", "evil.test")},
		{"no domain", policy()},
		{"an address", policy("127.0.0.1")},
		{"a bad wildcard", policy("*.test")},
	}
	for _, tt := range tests {
		assert.ErrorIs(t, on.CheckSpec(tt.give), sandbox.ErrInvalidSpec, tt.name)
	}
	assert.NoError(t, on.CheckSpec(policy("allowed.test")))
}

// secretTestServer is an HTTPS server for api.secret.test, its certificate from a test CA
// (returned as a pool), that records the Authorization header it gets and echoes it.
func secretTestServer(t *testing.T) (*httptest.Server, *x509.CertPool, chan string) {
	t.Helper()
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		require.NoError(t, err)
		return k
	}
	caKey, key := newKey(), newKey()
	now := time.Now()
	caTpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"}, IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour)}
	caDER, err := x509.CreateCertificate(rand.Reader, caTpl, caTpl, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	ca, err := x509.ParseCertificate(caDER)
	require.NoError(t, err)
	tpl := &x509.Certificate{SerialNumber: big.NewInt(2), DNSNames: []string{"api.secret.test"}, NotBefore: now.Add(-time.Hour),
		NotAfter: now.Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tpl, ca, &key.PublicKey, caKey)
	require.NoError(t, err)
	seen := make(chan string, 16)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Get("Authorization")
		fmt.Fprintf(w, "you sent %s", r.Header.Get("Authorization"))
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return srv, pool, seen
}

const testSecret = "sk-test-REAL-VALUE-4242"

// TestLocalDomainSecret: the code uses a domain secret through its placeholder, over HTTPS
// verified with the trust bundle it was given (urllib and curl, no verification turned off):
// the server gets the value, the code never sees it.
func TestLocalDomainSecret(t *testing.T) { inBothStarts(t, testLocalDomainSecret) }

func testLocalDomainSecret(t *testing.T) {
	srv, roots, seen := secretTestServer(t)
	port := serverPort(t, srv)
	l := netTestLocalRoots(t, roots, port)
	c := newTestContainer(t, l, sandbox.Spec{NetworkPolicy: &sandbox.NetworkPolicy{
		AllowedDomains: []string{"api.secret.test"},
		DomainSecrets:  []sandbox.DomainSecret{{Domain: "api.secret.test", Name: "API_TOKEN", Value: testSecret}},
	}})
	res, err := c.Run(context.Background(), fmt.Sprintf(`
import os, subprocess, urllib.request
token = os.environ['API_TOKEN']
print('token', token)
req = urllib.request.Request('https://api.secret.test:%[1]d/v1', headers={'Authorization': 'Bearer ' + token})
with urllib.request.urlopen(req, timeout=10) as r:
    print('urllib', r.read().decode())
print('curl', subprocess.run(['sh', '-c', 'curl -sS -H "Authorization: Bearer $API_TOKEN" https://api.secret.test:%[1]d/curl'],
    capture_output=True, text=True))
print(open('/proc/self/environ').read())
`, port))
	require.NoError(t, err)
	require.Nil(t, res.Error, "run: %+v", res.Error)
	assert.NotContains(t, res.Stdout+res.Stderr, testSecret, "the code saw the secret")
	assert.Contains(t, res.Stdout, "token codeinterp_secret_")
	assert.Contains(t, res.Stdout, "urllib you sent Bearer codeinterp_secret_", "urllib verified the proxy's certificate")
	assert.Contains(t, res.Stdout, "stdout='you sent Bearer codeinterp_secret_", "curl verified the proxy's certificate")
	assert.Equal(t, "Bearer "+testSecret, <-seen, "the server got the secret (urllib)")
	assert.Equal(t, "Bearer "+testSecret, <-seen, "the server got the secret (curl)")
}

// BenchmarkNetworkPolicyStart measures what a network policy adds to a container's start
// (forked): the proxy, its listener in the container's namespace, the trust bundle. Each op
// is one start with a policy and one without, back to back; the medians are reported.
func BenchmarkNetworkPolicyStart(b *testing.B) {
	l := benchLocal(b, Config{Start: StartFork, Network: NetworkConfig{Enabled: true}})
	spec := sandbox.Spec{NetworkPolicy: &sandbox.NetworkPolicy{AllowedDomains: []string{"example.com"},
		DomainSecrets: []sandbox.DomainSecret{{Domain: "example.com", Name: "TOKEN", Value: "secret"}}}}
	ctx := context.Background()
	var with, without []time.Duration
	for b.Loop() {
		for _, s := range []sandbox.Spec{{}, spec} {
			start := time.Now()
			c, err := l.Create(ctx, s)
			if err != nil {
				b.Fatal(err)
			}
			d := time.Since(start)
			_ = c.Delete(ctx)
			if s.NetworkPolicy == nil {
				without = append(without, d)
			} else {
				with = append(with, d)
			}
		}
	}
	b.ReportMetric(float64(median(without).Microseconds()), "µs-start-no-policy")
	b.ReportMetric(float64(median(with).Microseconds()), "µs-start-policy")
}

func TestNewRefusesAnInvalidOperatorAllowlist(t *testing.T) {
	_, err := New(Config{UnsafeNoIsolation: true, Network: NetworkConfig{AllowedDomains: []string{"10.0.0.0/8"}}}, nil)
	assert.ErrorContains(t, err, "network allowed domains")
}

func TestNewRefusesNetworkWithoutIsolation(t *testing.T) {
	_, err := New(Config{UnsafeNoIsolation: true, Network: NetworkConfig{Enabled: true}}, nil)
	assert.ErrorContains(t, err, "network policies need sandbox isolation")
}
