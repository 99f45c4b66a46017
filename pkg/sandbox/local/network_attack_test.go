package local

// The adversarial suite's network part (issue 31): hostile code in a container with a network
// policy tries every way past its proxy. Each attempt must fail with a reason the code can
// read, the loopback test server must never see a request it should not, and the secret's
// value must appear nowhere the code can look.

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/codeinterp/codeinterp/pkg/egress"
	"github.com/codeinterp/codeinterp/pkg/sandbox"
)

func TestAdversarialNetworkPolicy(t *testing.T) {
	var mu sync.Mutex
	var hosts []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hosts = append(hosts, r.Host+" "+r.URL.Path+" "+r.Header.Get("Authorization"))
		mu.Unlock()
		fmt.Fprint(w, "ok")
	}))
	defer srv.Close()
	port := serverPort(t, srv)
	// rebind.test answers a public address, then loopback, alternately: whatever the proxy
	// dials must be what it checked. No network is allowed beyond public addresses here.
	var flips atomic.Int64
	resolve := func(ctx context.Context, host string) ([]netip.Addr, error) {
		switch host {
		case "rebind.test":
			if flips.Add(1)%2 == 1 {
				return []netip.Addr{netip.MustParseAddr("198.51.100.7")}, nil // documentation: refused too
			}
			return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
		case "loopback.test":
			return []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("::ffff:127.0.0.1")}, nil
		case "metadata.test":
			return []netip.Addr{netip.MustParseAddr("169.254.169.254")}, nil
		case "nat64.test":
			return []netip.Addr{netip.MustParseAddr("64:ff9b::7f00:1")}, nil
		}
		return netTestResolve(ctx, host)
	}
	l := newTestLocal(t, Config{Network: NetworkConfig{Enabled: true, Proxy: egress.Options{
		Resolve: resolve, Ports: []int{port}, MaxConns: 8, DialTimeout: time.Second,
	}}})
	c := newTestContainer(t, l, sandbox.Spec{NetworkPolicy: &sandbox.NetworkPolicy{
		AllowedDomains: []string{"rebind.test", "loopback.test", "metadata.test", "nat64.test", "allowed.test"},
		DomainSecrets:  []sandbox.DomainSecret{{Domain: "allowed.test", Name: "TOKEN", Value: testSecret}},
	}})

	attacks := []struct {
		name string
		code string
		want string
	}{
		{"DNS rebinding to loopback", fmt.Sprintf(`
import urllib.request, urllib.error
for i in range(4):
    try:
        urllib.request.urlopen('http://rebind.test:%d/rebind', timeout=5)
        print('reached')
    except urllib.error.HTTPError as e:
        print(e.code)
`, port), "403\n403\n403\n403\n"},
		{"a name pointing at loopback, mapped or not", fmt.Sprintf(`
import urllib.request, urllib.error
try:
    urllib.request.urlopen('http://loopback.test:%d/loopback', timeout=5)
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode().strip())
`, port), `403 codeinterp egress proxy: refused: "loopback.test" resolves to a private, loopback, link-local or metadata address, which this server does not reach` + "\n"},
		{"the metadata address", fmt.Sprintf(`
import urllib.request, urllib.error
try:
    urllib.request.urlopen('http://metadata.test:%d/latest/meta-data/', timeout=5)
except urllib.error.HTTPError as e:
    print(e.code)
`, port), "403\n"},
		{"loopback through NAT64", fmt.Sprintf(`
import urllib.request, urllib.error
try:
    urllib.request.urlopen('http://nat64.test:%d/nat64', timeout=5)
except urllib.error.HTTPError as e:
    print(e.code)
`, port), "403\n"},
		{"raw sockets around the proxy", fmt.Sprintf(`
import socket
out = []
for fam, typ, addr in [(socket.AF_INET, socket.SOCK_STREAM, ('127.0.0.1', %d)), (socket.AF_INET, socket.SOCK_STREAM, ('1.1.1.1', 443)),
                       (socket.AF_INET6, socket.SOCK_STREAM, ('::1', %d)), (socket.AF_INET, socket.SOCK_DGRAM, ('8.8.8.8', 53))]:
    s = socket.socket(fam, typ)
    s.settimeout(3)
    try:
        s.connect(addr)
        if typ == socket.SOCK_DGRAM:
            s.send(b'x'); s.recv(1)
        out.append('open')
    except OSError:
        out.append('closed')
    finally:
        s.close()
for fam, typ in [(socket.AF_INET, socket.SOCK_RAW), (socket.AF_PACKET, socket.SOCK_RAW)]:
    try:
        socket.socket(fam, typ, 0 if fam == socket.AF_INET else 3).close()
        out.append('raw')
    except OSError:
        out.append('no raw')
print(out)
`, port, port), "['closed', 'closed', 'closed', 'closed', 'no raw', 'no raw']\n"},
		{"taking the proxy's port", `
import socket
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
try:
    s.bind(('127.0.0.1', 3128)); s.listen()
    print('taken')
except OSError:
    print('in use')
`, "in use\n"},
		{"the placeholder over plain HTTP to its own domain", fmt.Sprintf(`
import os, urllib.request, urllib.error
req = urllib.request.Request('http://allowed.test:%d/plain', headers={'Authorization': os.environ['TOKEN']})
try:
    urllib.request.urlopen(req, timeout=5)
except urllib.error.HTTPError as e:
    print(e.code)
`, port), "403\n"},
		{"hunting the secret's value", `
import os, glob
found = []
for p in glob.glob('/proc/*/environ') + glob.glob('/proc/*/cmdline') + glob.glob('/tmp/.*') + glob.glob('/tmp/*'):
    try:
        data = open(p, 'rb').read()
    except OSError:
        continue
    if b'` + testSecret + `' in data:
        found.append(p)
bundle = open(os.environ['SSL_CERT_FILE']).read()
print(found, 'PRIVATE KEY' in bundle, 'BEGIN CERTIFICATE' in bundle)
`, "[] False True\n"},
		{"flooding the proxy with connections", `
import socket
held = [socket.create_connection(('127.0.0.1', 3128), timeout=5) for _ in range(12)]
import time; time.sleep(0.5)
answers = []
for s in held:
    s.settimeout(0.5)
    try:
        answers.append(s.recv(12))
    except OSError:
        answers.append(b'')
print(sum(1 for a in answers if a.startswith(b'HTTP/1.1 429')))
for s in held:
    s.close()
`, "4\n"},
	}
	for _, tt := range attacks {
		t.Run(tt.name, func(t *testing.T) {
			res := runIn(t, c, tt.code)
			require.Nil(t, res.Error, "%s: %+v", tt.name, res.Error)
			assert.Equal(t, tt.want, res.Stdout, tt.name)
			assert.NotContains(t, res.Stdout+res.Stderr, testSecret, tt.name)
		})
	}
	mu.Lock()
	assert.Empty(t, hosts, "the loopback server was reached")
	mu.Unlock()
	assertHealthy(t, l, c)
}
