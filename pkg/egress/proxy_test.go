package egress

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
)

// names is the test resolver: every name of the tests and what it resolves to.
var names = map[string][]netip.Addr{
	"allowed.test":    {netip.MustParseAddr("127.0.0.1")},
	"api.secret.test": {netip.MustParseAddr("127.0.0.1")},
	"other.test":      {netip.MustParseAddr("127.0.0.1")},
	"a.wild.test":     {netip.MustParseAddr("127.0.0.1")},
	"metadata.test":   {netip.MustParseAddr("169.254.169.254")},
	"mixed.test":      {netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("127.0.0.1")},
}

func testResolve(_ context.Context, host string) ([]netip.Addr, error) {
	if a, ok := names[host]; ok {
		return a, nil
	}
	return nil, errors.New("no such host")
}

// startProxy serves a proxy for policy on a loopback listener until the test ends; it returns
// the proxy and its URL.
func startProxy(t *testing.T, policy Policy, opts Options) (*Proxy, *url.URL) {
	t.Helper()
	if opts.Resolve == nil {
		opts.Resolve = testResolve
	}
	p, err := New(policy, opts, zaptest.NewLogger(t))
	require.NoError(t, err)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- p.Serve(l) }()
	t.Cleanup(func() {
		require.NoError(t, p.Close())
		assert.ErrorIs(t, <-done, ErrClosed, "Serve after Close")
	})
	return p, &url.URL{Scheme: "http", Host: l.Addr().String()}
}

// loopbackOpts allow the loopback test servers on port.
func loopbackOpts(port int) Options {
	return Options{AllowNetworks: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, Ports: []int{port}}
}

func portOf(t testing.TB, u string) int {
	t.Helper()
	pu, err := url.Parse(u)
	require.NoError(t, err)
	port, err := strconv.Atoi(pu.Port())
	require.NoError(t, err)
	return port
}

// client returns an HTTP client going through the proxy at proxyURL, trusting srv's
// certificate (when it has one) under the name example.com.
func client(t *testing.T, proxyURL *url.URL, srv *httptest.Server) *http.Client {
	tr := &http.Transport{Proxy: http.ProxyURL(proxyURL), DisableKeepAlives: true}
	if srv != nil && srv.TLS != nil {
		tr.TLSClientConfig = srv.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
		tr.TLSClientConfig.ServerName = "example.com"
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

func get(t *testing.T, c *http.Client, u string) (int, string, error) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

func hello(w http.ResponseWriter, r *http.Request) {
	fmt.Fprintf(w, "hello %s %s", r.Host, r.URL.Path)
}

func TestProxyHTTPAllowed(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(hello))
	defer srv.Close()
	port := portOf(t, srv.URL)
	p, pu := startProxy(t, Policy{AllowedDomains: []string{"allowed.test", "*.wild.test"}}, loopbackOpts(port))
	c := client(t, pu, nil)
	for _, host := range []string{"allowed.test", "ALLOWED.test.", "a.wild.test"} {
		code, body, err := get(t, c, fmt.Sprintf("http://%s:%d/x", host, port))
		require.NoError(t, err, host)
		assert.Equal(t, http.StatusOK, code, host)
		assert.Contains(t, body, "/x", host)
	}
	assert.Positive(t, p.Stats().Bytes)
	assert.Zero(t, p.Stats().Refused)
}

func TestProxyHTTPSConnectAllowed(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(hello))
	defer srv.Close()
	port := portOf(t, srv.URL)
	_, pu := startProxy(t, Policy{AllowedDomains: []string{"allowed.test"}}, loopbackOpts(port))
	code, body, err := get(t, client(t, pu, srv), fmt.Sprintf("https://allowed.test:%d/secure", port))
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, fmt.Sprintf("hello allowed.test:%d /secure", port), body)
}

// TestProxyRefuses: every way out but an allowed domain is refused, with a status and a text
// that say why, and the proxy never dials the refused target.
func TestProxyRefuses(t *testing.T) {
	var hits sync.Map
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Store(r.URL.Path, true)
		if r.URL.Path == "/redirect" {
			http.Redirect(w, r, "http://other.test:"+r.URL.Query().Get("port")+"/landed", http.StatusFound)
			return
		}
		hello(w, r)
	}))
	defer srv.Close()
	port := portOf(t, srv.URL)
	policy := Policy{AllowedDomains: []string{"allowed.test", "metadata.test", "mixed.test"}}
	tests := []struct {
		name     string
		opts     Options
		url      string
		wantCode int
		wantText string
	}{
		{"domain not on the list", loopbackOpts(port), fmt.Sprintf("http://other.test:%d/a", port), 403, `domain "other.test" is not on this container's allowed_domains`},
		{"an IP address", loopbackOpts(port), fmt.Sprintf("http://127.0.0.2:%d/b", port), 403, "not a domain name"},
		{"a port not allowed", loopbackOpts(port + 1), fmt.Sprintf("http://allowed.test:%d/c", port), 403, "port"},
		{"loopback without the operator's leave", Options{Ports: []int{port}}, fmt.Sprintf("http://allowed.test:%d/d", port), 403, "private, loopback"},
		{"metadata even when link-local is allowed", Options{Ports: []int{port}, AllowNetworks: []netip.Prefix{netip.MustParsePrefix("169.254.0.0/16")}},
			fmt.Sprintf("http://metadata.test:%d/e", port), 403, "metadata"},
		{"a name that does not resolve", loopbackOpts(port), fmt.Sprintf("http://nowhere.test:%d/f", port), 403, "not on this container's"},
		{"a redirect to a domain not on the list", loopbackOpts(port), fmt.Sprintf("http://allowed.test:%d/redirect?port=%d", port, port), 403, `"other.test" is not on`},
		{"https through a plain request", loopbackOpts(port), fmt.Sprintf("https://allowed.test:%d/g", port), 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, pu := startProxy(t, policy, tt.opts)
			code, body, err := get(t, client(t, pu, nil), tt.url)
			if tt.wantCode == 0 {
				// https:// makes the client CONNECT; the plain server is no TLS server.
				assert.Error(t, err, tt.url)
				return
			}
			require.NoError(t, err, tt.url)
			assert.Equal(t, tt.wantCode, code, tt.url)
			assert.Contains(t, body, tt.wantText, tt.url)
			assert.Contains(t, body, "codeinterp egress proxy: refused", tt.url)
			assert.NotContains(t, body, "127.0.0.1", "the refusal names no resolved address")
			assert.Positive(t, p.Stats().Refused)
		})
	}
	_, landed := hits.Load("/landed")
	assert.False(t, landed, "the redirect's target was reached")
	for _, path := range []string{"/a", "/b", "/c", "/d", "/e", "/f"} {
		_, hit := hits.Load(path)
		assert.False(t, hit, "refused request %s reached the server", path)
	}
}

func TestProxyConnectRefused(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(hello))
	defer srv.Close()
	port := portOf(t, srv.URL)
	_, pu := startProxy(t, Policy{AllowedDomains: []string{"allowed.test"}}, Options{Ports: []int{port}})
	_, _, err := get(t, client(t, pu, srv), fmt.Sprintf("https://allowed.test:%d/", port))
	require.Error(t, err, "a loopback destination without AllowNetworks")
	assert.Contains(t, err.Error(), "Forbidden (codeinterp egress proxy: \"allowed.test\" resolves to a private")

	c, err := net.Dial("tcp", pu.Host)
	require.NoError(t, err)
	defer c.Close()
	fmt.Fprintf(c, "CONNECT other.test:%d HTTP/1.1\r\nHost: other.test:%d\r\n\r\n", port, port)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	assert.Equal(t, http.StatusForbidden, resp.StatusCode)
	assert.Contains(t, string(body), `"other.test" is not on`)
}

func TestProxyMixedAnswerDialsOnlyAllowed(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(hello))
	defer srv.Close()
	port := portOf(t, srv.URL)
	// mixed.test resolves to 10.0.0.1 and 127.0.0.1; only loopback is allowed: the proxy must
	// dial 127.0.0.1 and never try 10.0.0.1.
	_, pu := startProxy(t, Policy{AllowedDomains: []string{"mixed.test"}}, loopbackOpts(port))
	code, _, err := get(t, client(t, pu, nil), fmt.Sprintf("http://mixed.test:%d/", port))
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, code)
}

func TestProxyBadRequests(t *testing.T) {
	_, pu := startProxy(t, Policy{AllowedDomains: []string{"allowed.test"}}, Options{MaxHeaderBytes: 1024})
	tests := []struct {
		name, give string
		wantCode   int
	}{
		{"garbage", "NOT HTTP\r\n\r\n", 400},
		{"origin form", "GET /x HTTP/1.1\r\nHost: allowed.test\r\n\r\n", 400},
		{"headers too large", "GET http://allowed.test/ HTTP/1.1\r\nX: " + strings.Repeat("a", 2000) + "\r\n\r\n", 431},
		{"connect without a port", "CONNECT allowed.test HTTP/1.1\r\nHost: allowed.test\r\n\r\n", 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := net.Dial("tcp", pu.Host)
			require.NoError(t, err)
			defer c.Close()
			_, err = io.WriteString(c, tt.give)
			require.NoError(t, err)
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			require.NoError(t, err, tt.give)
			resp.Body.Close()
			assert.Equal(t, tt.wantCode, resp.StatusCode, tt.give)
		})
	}
}

func TestProxyMaxConns(t *testing.T) {
	_, pu := startProxy(t, Policy{AllowedDomains: []string{"allowed.test"}}, Options{MaxConns: 2})
	var held []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", pu.Host)
		require.NoError(t, err)
		defer c.Close()
		held = append(held, c)
	}
	// The proxy counts a connection once it accepted it: wait until both are.
	require.Eventually(t, func() bool {
		c, err := net.Dial("tcp", pu.Host)
		if err != nil {
			return false
		}
		defer c.Close()
		_ = c.SetReadDeadline(time.Now().Add(time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusTooManyRequests
	}, 5*time.Second, 10*time.Millisecond, "a third connection is refused")
	held[0].Close()
}

func TestProxyMaxBytes(t *testing.T) {
	big := strings.Repeat("x", 1<<20)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, big) }))
	defer srv.Close()
	port := portOf(t, srv.URL)
	opts := loopbackOpts(port)
	opts.MaxBytes = 256 << 10
	p, pu := startProxy(t, Policy{AllowedDomains: []string{"allowed.test"}}, opts)
	c := client(t, pu, nil)
	_, body, err := get(t, c, fmt.Sprintf("http://allowed.test:%d/", port))
	assert.True(t, err != nil || len(body) < len(big), "a download beyond MaxBytes is cut")
	assert.LessOrEqual(t, p.Stats().Bytes, int64(300<<10), "bytes moved")
	code, body, err := get(t, c, fmt.Sprintf("http://allowed.test:%d/", port))
	if err == nil {
		assert.Equal(t, http.StatusTooManyRequests, code, "a request once the budget is spent: %s", body)
	}
}

// TestProxyCloseEndsTunnels: Close ends an open tunnel and waits for its goroutines (goleak
// checks in TestMain).
func TestProxyCloseEndsTunnels(t *testing.T) {
	up, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer up.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := up.Accept()
		if err == nil {
			accepted <- c
		}
		close(accepted)
	}()
	port := up.Addr().(*net.TCPAddr).Port
	p, err := New(Policy{AllowedDomains: []string{"allowed.test"}},
		Options{Resolve: testResolve, Ports: []int{port}, AllowNetworks: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}, nil)
	require.NoError(t, err)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- p.Serve(l) }()
	c, err := net.Dial("tcp", l.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	fmt.Fprintf(c, "CONNECT allowed.test:%d HTTP/1.1\r\nHost: allowed.test\r\n\r\nearly bytes", port)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	uc := <-accepted
	require.NotNil(t, uc)
	defer uc.Close()
	buf := make([]byte, len("early bytes"))
	_, err = io.ReadFull(uc, buf)
	require.NoError(t, err)
	assert.Equal(t, "early bytes", string(buf), "bytes sent with the CONNECT reach the target")
	_, err = io.WriteString(uc, "pong")
	require.NoError(t, err)
	got := make([]byte, 4)
	_, err = io.ReadFull(br, got)
	require.NoError(t, err)
	assert.Equal(t, "pong", string(got))

	require.NoError(t, p.Close())
	assert.ErrorIs(t, <-done, ErrClosed)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = br.ReadByte()
	assert.Error(t, err, "the tunnel is closed")
}

// FuzzServeConn feeds arbitrary bytes to a proxy as a client connection: it never panics, and
// it resolves (so dials) only names on its allowlist.
func FuzzServeConn(f *testing.F) {
	for _, s := range []string{
		"GET http://allowed.test/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n",
		"CONNECT allowed.test:443 HTTP/1.1\r\nHost: allowed.test:443\r\n\r\n",
		"CONNECT evil.test:443 HTTP/1.1\r\n\r\n",
		"GET http://127.0.0.1/ HTTP/1.1\r\n\r\n",
		"GET http://[::1]:80/ HTTP/1.1\r\n\r\n",
		"GET http://allowed.test@evil.test/ HTTP/1.1\r\n\r\n",
		"POST http://allowed.test/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		resolve := func(_ context.Context, host string) ([]netip.Addr, error) {
			if host != "allowed.test" && host != "x.wild.test" {
				t.Errorf("resolved %q, which is not on the allowlist", host)
			}
			return nil, errors.New("no network in the fuzzer")
		}
		p, err := New(Policy{AllowedDomains: []string{"allowed.test", "*.wild.test"}}, Options{Resolve: resolve, MaxHeaderBytes: 4096}, nil)
		if err != nil {
			t.Fatal(err)
		}
		c := &fuzzConn{r: bytes.NewReader(in)}
		if !p.accept(c) {
			t.Fatal("not accepted")
		}
		p.serveConn(c)
		_ = p.Close()
	})
}

// fuzzConn is a client connection that sends its bytes, then ends; what the proxy answers is
// dropped.
type fuzzConn struct {
	r *bytes.Reader
}

func (c *fuzzConn) Read(b []byte) (int, error)       { return c.r.Read(b) }
func (c *fuzzConn) Write(b []byte) (int, error)      { return len(b), nil }
func (c *fuzzConn) Close() error                     { return nil }
func (c *fuzzConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *fuzzConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *fuzzConn) SetDeadline(time.Time) error      { return nil }
func (c *fuzzConn) SetReadDeadline(time.Time) error  { return nil }
func (c *fuzzConn) SetWriteDeadline(time.Time) error { return nil }

func localListener() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }

// BenchmarkProxyRequest measures what the proxy adds to one plain HTTP request on loopback
// (a new connection each, as through the proxy): direct, then through the proxy, back to
// back; the medians are reported.
func BenchmarkProxyRequest(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(hello))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	port, _ := strconv.Atoi(u.Port())
	p, err := New(Policy{AllowedDomains: []string{"allowed.test"}}, Options{Resolve: testResolve, Ports: []int{port},
		AllowNetworks: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}, nil)
	if err != nil {
		b.Fatal(err)
	}
	l, err := localListener()
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.Serve(l) }()
	defer func() { p.Close(); <-done }()
	direct := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	proxied := &http.Client{Transport: &http.Transport{DisableKeepAlives: true, Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: l.Addr().String()})}}
	fetch := func(c *http.Client, u string) time.Duration {
		start := time.Now()
		resp, err := c.Get(u)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return time.Since(start)
	}
	var d, pr []time.Duration
	for b.Loop() {
		d = append(d, fetch(direct, srv.URL+"/"))
		pr = append(pr, fetch(proxied, fmt.Sprintf("http://allowed.test:%d/", port)))
	}
	slices.Sort(d)
	slices.Sort(pr)
	b.ReportMetric(float64(d[len(d)/2].Microseconds()), "µs-direct")
	b.ReportMetric(float64(pr[len(pr)/2].Microseconds()), "µs-proxied")
}

// TestProxyHostFromURL: the Host header a request forges does not pick the server's virtual
// host: the upstream sees the host the proxy checked.
func TestProxyHostFromURL(t *testing.T) {
	got := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got <- r.Host }))
	defer srv.Close()
	port := portOf(t, srv.URL)
	_, pu := startProxy(t, Policy{AllowedDomains: []string{"allowed.test"}}, loopbackOpts(port))
	c, err := net.Dial("tcp", pu.Host)
	require.NoError(t, err)
	defer c.Close()
	fmt.Fprintf(c, "GET http://allowed.test:%d/x HTTP/1.1\r\nHost: evil.test\r\n\r\n", port)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, fmt.Sprintf("allowed.test:%d", port), <-got)
}

// FuzzTarget: whatever authority a request names, the proxy accepts it only for a domain on
// its allowlist and a port it allows, in canonical form.
func FuzzTarget(f *testing.F) {
	for _, s := range []string{"allowed.test:443", "ALLOWED.test.:443", "a.wild.test:80", "127.0.0.1:443", "[::1]:443",
		"allowed.test", "allowed.test:0", "allowed.test:+443", "allowed.test:443:1", "evil.test%00allowed.test:443", "x.wild.test.:8080"} {
		f.Add(s)
	}
	p, err := New(Policy{AllowedDomains: []string{"allowed.test", "*.wild.test"}}, Options{}, nil)
	if err != nil {
		f.Fatal(err)
	}
	defer p.Close()
	f.Fuzz(func(t *testing.T, authority string) {
		host, port, rf := p.target(authority, 80)
		if rf != nil {
			return
		}
		if host != "allowed.test" && !strings.HasSuffix(host, ".wild.test") {
			t.Fatalf("%q accepted as host %q", authority, host)
		}
		if !slices.Contains(DefaultPorts, port) {
			t.Fatalf("%q accepted with port %d", authority, port)
		}
		if _, err := CanonicalHost(host); err != nil {
			t.Fatalf("%q accepted as a host that is not canonical: %q", authority, host)
		}
	})
}
