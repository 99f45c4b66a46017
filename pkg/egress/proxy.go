package egress

import (
	"bufio"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// Defaults of Options' fields, used where a field is zero.
const (
	DefaultMaxConns       = 32
	DefaultMaxBytes       = 1 << 30
	DefaultMaxHeaderBytes = 64 << 10
	DefaultDialTimeout    = 10 * time.Second
	DefaultIdleTimeout    = 2 * time.Minute
)

// DefaultPorts are the destination ports allowed when Options.Ports is empty.
var DefaultPorts = []int{80, 443, 8080, 8443}

// Options are the operator's settings of a container's proxy. The zero value works: public
// destinations only, on DefaultPorts, with the default limits.
type Options struct {
	// AllowNetworks are networks the proxy may dial although they are not public (private,
	// loopback, link-local, shared address space...): a cluster service an allowlisted name
	// points to, or 127.0.0.0/8 in tests. Cloud metadata addresses (169.254.169.254,
	// fd00:ec2::254, 100.100.100.200) are refused even inside them. Default none.
	AllowNetworks []netip.Prefix
	// Ports are the destination ports allowed, for HTTP and CONNECT alike. Default
	// DefaultPorts.
	Ports []int
	// MaxConns caps the container's connections to the proxy open at once; one more is
	// answered 429 and closed. Default 32.
	MaxConns int
	// MaxBytes caps the bytes the container moves through its proxy, both ways, over its
	// whole life; beyond it every connection fails. Default 1 GiB.
	MaxBytes int64
	// MaxHeaderBytes caps a request's head (request line and headers) and an upstream
	// response's head. Default 64 KiB.
	MaxHeaderBytes int
	// DialTimeout bounds resolving a name and connecting to it. Default 10s.
	DialTimeout time.Duration
	// IdleTimeout ends a connection (and its tunnel) after this long without data from one
	// side. Default 2 minutes.
	IdleTimeout time.Duration
	// Resolve resolves a name to its addresses. Default: the system resolver. A test hook
	// (a name resolving to a loopback test server, or DNS rebinding to a private address).
	Resolve func(ctx context.Context, host string) ([]netip.Addr, error)
	// UpstreamRoots are the roots the proxy verifies a secret's domain's server with, when
	// it opens the code's HTTPS to put the secret in. Default: the system's. A test hook.
	UpstreamRoots *x509.CertPool
	// HandshakeTimeout bounds the TLS handshakes of an intercepted connection (the code's and
	// the server's). Default 10s.
	HandshakeTimeout time.Duration
}

func (o *Options) setDefaults() {
	if len(o.Ports) == 0 {
		o.Ports = DefaultPorts
	}
	if o.MaxConns <= 0 {
		o.MaxConns = DefaultMaxConns
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.MaxHeaderBytes <= 0 {
		o.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	if o.HandshakeTimeout <= 0 {
		o.HandshakeTimeout = 10 * time.Second
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	if o.Resolve == nil {
		o.Resolve = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
}

// ErrClosed is what Serve returns once the Proxy is closed.
var ErrClosed = errors.New("egress proxy closed")

// Stats are what a proxy has done so far.
type Stats struct {
	// Conns is the connections accepted; Refused the requests refused (not allowed, or over a
	// limit).
	Conns, Refused int64
	// Bytes is what the container moved through the proxy, both ways.
	Bytes int64
}

// Proxy is one container's forward proxy. Safe for concurrent use. It owns every goroutine and
// connection it starts: Close ends them all and waits.
type Proxy struct {
	rules   rules
	secrets []secret
	ca      *authority // nil without secrets
	opts    Options
	log     *zap.Logger

	ctx    context.Context // canceled by Close: dials in progress stop
	cancel context.CancelFunc

	used    atomic.Int64 // bytes moved
	conns   atomic.Int64 // accepted
	refused atomic.Int64

	// mu guards the fields below.
	mu        sync.Mutex
	closed    bool
	listeners map[net.Listener]struct{}
	open      map[net.Conn]struct{} // client and upstream connections, closed by Close
	active    int                   // client connections open
	wg        sync.WaitGroup        // added to under mu while not closed
}

// New returns a proxy enforcing policy; it serves nothing until Serve. An invalid policy
// fails as CheckPolicy says.
func New(policy Policy, opts Options, log *zap.Logger) (*Proxy, error) {
	r, err := compile(policy.AllowedDomains)
	if err != nil {
		return nil, fmt.Errorf("new egress proxy: %w", err)
	}
	secrets, err := compileSecrets(policy.Secrets, r)
	if err != nil {
		return nil, fmt.Errorf("new egress proxy: %w", err)
	}
	var ca *authority
	if len(secrets) > 0 {
		if ca, err = newAuthority(secrets); err != nil {
			return nil, fmt.Errorf("new egress proxy: make its CA: %w", err)
		}
	}
	if log == nil {
		log = zap.NewNop()
	}
	opts.setDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	return &Proxy{
		rules: r, secrets: secrets, ca: ca, opts: opts, log: log.Named("egress"), ctx: ctx, cancel: cancel,
		listeners: map[net.Listener]struct{}{}, open: map[net.Conn]struct{}{},
	}, nil
}

// Stats returns what the proxy has done so far.
func (p *Proxy) Stats() Stats {
	return Stats{Conns: p.conns.Load(), Refused: p.refused.Load(), Bytes: p.used.Load()}
}

// Serve accepts connections on l and serves each in a goroutine of its own, until Close (then
// it returns ErrClosed) or l fails. It closes l.
func (p *Proxy) Serve(l net.Listener) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		l.Close()
		return ErrClosed
	}
	p.listeners[l] = struct{}{}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.listeners, l)
		p.mu.Unlock()
		l.Close()
	}()
	var delay time.Duration
	for {
		c, err := l.Accept()
		if err != nil {
			if p.isClosed() {
				return ErrClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				time.Sleep(delay)
				continue
			}
			return fmt.Errorf("egress proxy accept: %w", err)
		}
		delay = 0
		p.conns.Add(1)
		if !p.accept(c) {
			continue
		}
		go p.serveConn(c)
	}
}

// accept admits a client connection: tracked, under MaxConns, the proxy not closed. A
// connection refused is answered and closed here.
func (p *Proxy) accept(c net.Conn) bool {
	p.mu.Lock()
	switch {
	case p.closed:
		p.mu.Unlock()
		c.Close()
		return false
	case p.active >= p.opts.MaxConns:
		p.mu.Unlock()
		p.refused.Add(1)
		_ = c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
		writeRefusal(c, &refusal{http.StatusTooManyRequests,
			fmt.Sprintf("this container has %d connections open through its proxy, as many as it may", p.opts.MaxConns)})
		c.Close()
		return false
	}
	p.active++
	p.open[c] = struct{}{}
	p.wg.Add(1)
	p.mu.Unlock()
	return true
}

func (p *Proxy) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

// Close stops every Serve, closes every connection and waits for the goroutines. Idempotent.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	for l := range p.listeners {
		l.Close()
	}
	for c := range p.open {
		c.Close()
	}
	p.mu.Unlock()
	p.cancel()
	p.wg.Wait()
	return nil
}

// trackUpstream adds an upstream connection to those Close closes; false (and c closed) when
// the proxy is closed.
func (p *Proxy) trackUpstream(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.open[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn, client bool) {
	p.mu.Lock()
	delete(p.open, c)
	if client {
		p.active--
	}
	p.mu.Unlock()
	c.Close()
}

// refusal is a request the proxy does not serve: the status and the text the code sees.
type refusal struct {
	status int
	reason string
}

// writeRefusal answers a request the proxy refuses, closing the connection afterwards. The
// body, and the reason phrase (all a client shows of a refused CONNECT: Python's "Tunnel
// connection failed: 403 …"), name what the code asked for and why it is refused, never an
// address the proxy resolved.
func writeRefusal(w io.Writer, r *refusal) {
	body := "codeinterp egress proxy: refused: " + r.reason + "\n"
	phrase := strings.Map(func(c rune) rune {
		if c < 0x20 || c == 0x7f {
			return ' '
		}
		return c
	}, http.StatusText(r.status)+" (codeinterp egress proxy: "+r.reason+")")
	fmt.Fprintf(w, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\n"+
		"Connection: close\r\nX-Codeinterp-Egress: refused\r\n\r\n%s", r.status, phrase, len(body), body)
}

// serveConn serves one client connection: one request (a CONNECT tunnel, or one plain HTTP
// request and its response), then closes it.
func (p *Proxy) serveConn(raw net.Conn) {
	defer p.wg.Done()
	defer p.untrack(raw, true)
	c := &meteredConn{Conn: raw, used: &p.used, max: p.opts.MaxBytes, idle: p.opts.IdleTimeout}
	head := &headLimit{r: c, n: int64(p.opts.MaxHeaderBytes)}
	br := bufio.NewReader(head)
	req, err := http.ReadRequest(br)
	if err != nil {
		switch {
		case errors.Is(err, errByteLimit):
			p.refuse(c, "", &refusal{http.StatusTooManyRequests, "this container moved as many bytes through its proxy as it may"})
		case head.n == 0:
			p.refuse(c, "", &refusal{http.StatusRequestHeaderFieldsTooLarge, "the request's headers are too large"})
		case !errors.Is(err, io.EOF):
			p.refuse(c, "", &refusal{http.StatusBadRequest, "not an HTTP request"})
		}
		return
	}
	head.n = -1
	if req.Method == http.MethodConnect {
		p.connect(c, br, req)
		return
	}
	p.forward(c, req)
}

// refuse counts and answers a refused request; host is what the code asked for ("" when it
// named none).
func (p *Proxy) refuse(c net.Conn, host string, r *refusal) {
	p.refused.Add(1)
	p.log.Info("egress refused", zap.String("host", host), zap.Int("status", r.status), zap.String("reason", r.reason))
	writeRefusal(c, r)
}

// connect serves a CONNECT: a tunnel to the allowed host, the bytes the client sent early
// included.
func (p *Proxy) connect(c net.Conn, br *bufio.Reader, req *http.Request) {
	host, port, rf := p.target(req.Host, 0)
	if rf != nil {
		p.refuse(c, req.Host, rf)
		return
	}
	up, rf := p.dial(host, port)
	if rf != nil {
		p.refuse(c, req.Host, rf)
		return
	}
	defer p.untrack(up, false)
	upc := &meteredConn{Conn: up, used: new(atomic.Int64), max: math.MaxInt64, idle: p.opts.IdleTimeout}
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	if secrets := p.secretsFor(host); len(secrets) > 0 {
		p.intercept(&bufConn{Conn: c, r: br}, upc, host, secrets)
		return
	}
	if n := br.Buffered(); n > 0 {
		early, _ := br.Peek(n)
		if _, err := upc.Write(early); err != nil {
			return
		}
	}
	p.tunnel(c, upc, up)
}

// tunnel copies both ways until both directions end (or one fails: then both close).
func (p *Proxy) tunnel(client, upstream net.Conn, upRaw net.Conn) {
	done := make(chan struct{})
	p.wg.Add(1) // the proxy is open: this goroutine is the connection's, counted by serveConn's
	go func() {
		defer p.wg.Done()
		defer close(done)
		_, err := io.Copy(upstream, client)
		halfClose(upRaw, err)
	}()
	_, err := io.Copy(client, upstream)
	if err != nil {
		client.Close()
		upRaw.Close()
	} else {
		halfClose(rawOf(client), nil)
	}
	<-done
}

// rawOf returns the connection under a metered one.
func rawOf(c net.Conn) net.Conn {
	if m, ok := c.(*meteredConn); ok {
		return m.Conn
	}
	return c
}

// halfClose ends the writing side of c after a copy into it ended: cleanly (EOF) with a TCP
// half-close, on an error by closing it.
func halfClose(c net.Conn, err error) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok && err == nil {
		_ = cw.CloseWrite()
		return
	}
	c.Close()
}

// hopHeaders are the hop-by-hop headers a proxy does not pass on (RFC 9110 §7.6.1), and the
// proxy's own.
var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

func removeHopHeaders(h http.Header) {
	for _, f := range h.Values("Connection") {
		for _, name := range strings.Split(f, ",") {
			if name = strings.TrimSpace(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, name := range hopHeaders {
		h.Del(name)
	}
}

// forward serves one plain HTTP request in absolute form ("GET http://host/path").
func (p *Proxy) forward(c net.Conn, req *http.Request) {
	if req.URL.Scheme != "http" || req.URL.Host == "" {
		p.refuse(c, req.URL.Host, &refusal{http.StatusBadRequest,
			"only http:// URLs are fetched through the proxy (https goes through CONNECT: set HTTPS_PROXY)"})
		return
	}
	host, port, rf := p.target(req.URL.Host, 80)
	if rf != nil {
		p.refuse(c, req.URL.Host, rf)
		return
	}
	if s, ok := misplaced(req, p.secrets, nil); ok {
		p.refuse(c, req.URL.Host, &refusal{http.StatusForbidden, fmt.Sprintf(
			"the request carries the placeholder of domain secret %s, which is put in only in HTTPS requests to %s", s.Name, s.Domain)})
		return
	}
	up, rf := p.dial(host, port)
	if rf != nil {
		p.refuse(c, req.URL.Host, rf)
		return
	}
	defer p.untrack(up, false)
	upc := &meteredConn{Conn: up, used: new(atomic.Int64), max: math.MaxInt64, idle: p.opts.IdleTimeout}
	if strings.EqualFold(req.Header.Get("Expect"), "100-continue") {
		if _, err := io.WriteString(c, "HTTP/1.1 100 Continue\r\n\r\n"); err != nil {
			return
		}
	}
	req.Header.Del("Expect")
	removeHopHeaders(req.Header)
	req.RequestURI = ""
	req.Host = req.URL.Host
	req.Close = true
	if err := req.Write(upc); err != nil {
		p.refuse(c, req.URL.Host, &refusal{http.StatusBadGateway, "the request could not be sent to " + host})
		return
	}
	head := &headLimit{r: upc, n: int64(p.opts.MaxHeaderBytes)}
	ubr := bufio.NewReader(head)
	var resp *http.Response
	var err error
	for {
		head.n = int64(p.opts.MaxHeaderBytes)
		resp, err = http.ReadResponse(ubr, req)
		if err != nil || resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			break
		}
	}
	if err != nil {
		p.refuse(c, req.URL.Host, &refusal{http.StatusBadGateway, "no valid answer from " + host})
		return
	}
	defer resp.Body.Close()
	head.n = -1
	if resp.StatusCode == http.StatusSwitchingProtocols {
		p.refuse(c, req.URL.Host, &refusal{http.StatusBadGateway, "protocol upgrades are not proxied"})
		return
	}
	removeHopHeaders(resp.Header)
	resp.Close = true
	_ = resp.Write(c)
}

// target checks a request's authority: a domain on the allowlist and an allowed port
// (defPort when it names none; 0: a port is required).
func (p *Proxy) target(authority string, defPort int) (string, int, *refusal) {
	host, portText, err := net.SplitHostPort(authority)
	if err != nil {
		if defPort == 0 {
			return "", 0, &refusal{http.StatusBadRequest, fmt.Sprintf("%q is not host:port", authority)}
		}
		host, portText = authority, strconv.Itoa(defPort)
	}
	port, err := strconv.Atoi(portText)
	if err != nil || port < 1 || port > 65535 {
		return "", 0, &refusal{http.StatusBadRequest, fmt.Sprintf("%q has no valid port", authority)}
	}
	h, err := CanonicalHost(host)
	if err != nil {
		return "", 0, &refusal{http.StatusForbidden, fmt.Sprintf("%q is not a domain name on this container's allowed_domains (%v)", host, err)}
	}
	if !p.rules.allows(h) {
		return "", 0, &refusal{http.StatusForbidden, fmt.Sprintf("domain %q is not on this container's allowed_domains", h)}
	}
	if !slices.Contains(p.opts.Ports, port) {
		return "", 0, &refusal{http.StatusForbidden, fmt.Sprintf("port %d is not allowed (allowed: %s)", port, portList(p.opts.Ports))}
	}
	return h, port, nil
}

func portList(ports []int) string {
	s := make([]string, len(ports))
	for i, p := range ports {
		s[i] = strconv.Itoa(p)
	}
	return strings.Join(s, ", ")
}

// dial resolves host once, keeps the addresses the proxy may reach and connects to the first
// that answers: the address checked is the address dialled. The connection is tracked; the
// caller untracks it.
func (p *Proxy) dial(host string, port int) (net.Conn, *refusal) {
	ctx, cancel := context.WithTimeout(p.ctx, p.opts.DialTimeout)
	defer cancel()
	addrs, err := p.opts.Resolve(ctx, host)
	if err != nil || len(addrs) == 0 {
		return nil, &refusal{http.StatusBadGateway, fmt.Sprintf("cannot resolve %q", host)}
	}
	var allowed []netip.Addr
	for _, a := range addrs {
		if destinationAllowed(a, p.opts.AllowNetworks) {
			allowed = append(allowed, a.Unmap())
		}
	}
	if len(allowed) == 0 {
		return nil, &refusal{http.StatusForbidden,
			fmt.Sprintf("%q resolves to a private, loopback, link-local or metadata address, which this server does not reach", host)}
	}
	var d net.Dialer
	for _, a := range allowed {
		c, err := d.DialContext(ctx, "tcp", netip.AddrPortFrom(a, uint16(port)).String())
		if err == nil {
			if !p.trackUpstream(c) {
				return nil, &refusal{http.StatusServiceUnavailable, "the container is being deleted"}
			}
			return c, nil
		}
	}
	return nil, &refusal{http.StatusBadGateway, fmt.Sprintf("cannot connect to %s port %d", host, port)}
}
