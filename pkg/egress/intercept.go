package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"

	"go.uber.org/zap"
)

// bufConn is a connection whose reads come from r first (the bytes a reader already
// buffered).
type bufConn struct {
	net.Conn
	r io.Reader
}

func (c *bufConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// intercept serves a CONNECT to a secret's host: it ends the code's TLS with a certificate
// of the proxy's CA, reads one request, puts the secrets' values in place of their
// placeholders, sends it over its own TLS connection to the host (verified as any client
// would), and answers with the response, the values scrubbed back to placeholders. One
// request per connection (the answer says Connection: close).
func (p *Proxy) intercept(client net.Conn, upstream net.Conn, host string, secrets []secret) {
	ctx, cancel := context.WithTimeout(p.ctx, p.opts.HandshakeTimeout)
	defer cancel()
	tc := tls.Server(client, &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return p.ca.leaf(host) // the CONNECT's host, whatever the code's SNI says
		},
	})
	if err := tc.HandshakeContext(ctx); err != nil {
		p.log.Info("egress: the code's TLS handshake failed (does it trust its proxy's CA?)", zap.String("host", host), zap.Error(err))
		return
	}
	defer tc.Close()
	head := &headLimit{r: tc, n: int64(p.opts.MaxHeaderBytes)}
	req, err := http.ReadRequest(bufio.NewReader(head))
	if err != nil {
		return
	}
	head.n = -1
	if s, ok := misplaced(req, p.secrets, secrets); ok {
		p.refuse(tc, host, &refusal{http.StatusForbidden, fmt.Sprintf(
			"the request carries the placeholder of domain secret %s, which is only sent to %s", s.Name, s.Domain)})
		return
	}
	uc := tls.Client(upstream, &tls.Config{
		MinVersion: tls.VersionTLS12,
		ServerName: host,
		RootCAs:    p.opts.UpstreamRoots,
		NextProtos: []string{"http/1.1"},
	})
	if err := uc.HandshakeContext(ctx); err != nil {
		p.refuse(tc, host, &refusal{http.StatusBadGateway, fmt.Sprintf("no trusted TLS connection to %s", host)})
		return
	}
	defer uc.Close()
	removeHopHeaders(req.Header)
	req.Header.Del("Expect")
	// An encoded answer could not be scrubbed of a value the server echoes.
	req.Header.Del("Accept-Encoding")
	substitute(req, secrets)
	req.RequestURI = ""
	req.URL.Scheme, req.URL.Host = "https", req.Host
	req.Close = true
	if err := req.Write(uc); err != nil {
		p.refuse(tc, host, &refusal{http.StatusBadGateway, "the request could not be sent to " + host})
		return
	}
	uhead := &headLimit{r: uc, n: int64(p.opts.MaxHeaderBytes)}
	ubr := bufio.NewReader(uhead)
	var resp *http.Response
	for {
		uhead.n = int64(p.opts.MaxHeaderBytes)
		resp, err = http.ReadResponse(ubr, req)
		if err != nil || resp.StatusCode >= 200 {
			break
		}
	}
	if err != nil {
		p.refuse(tc, host, &refusal{http.StatusBadGateway, "no valid answer from " + host})
		return
	}
	defer resp.Body.Close()
	uhead.n = -1
	removeHopHeaders(resp.Header)
	scrubHeader(resp.Header, secrets)
	resp.Body = io.NopCloser(&scrubReader{r: resp.Body, secrets: secrets})
	resp.ContentLength = -1 // a placeholder is not as long as its value
	resp.TransferEncoding = nil
	resp.Header.Del("Content-Length")
	resp.Close = true
	_ = resp.Write(tc)
}
