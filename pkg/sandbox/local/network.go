package local

import (
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/codeinterp/codeinterp/pkg/egress"
	"github.com/codeinterp/codeinterp/pkg/sandbox"
)

// NetworkConfig is the operator's say on containers' network policies (issue 31). The zero
// value refuses them: every container has no network at all.
type NetworkConfig struct {
	// Enabled lets a container have a network policy. When false (the default), a Spec with
	// a NetworkPolicy is refused ([sandbox.ErrInvalidSpec], field network_policy). It needs
	// isolation and a server running as root (New fails otherwise): the server opens each
	// container's proxy listener inside the container's network namespace.
	Enabled bool
	// AllowedDomains is the operator's allowlist, which a container's can only narrow: each of
	// a policy's allowed domains must be within it (see [egress.CheckWithin]), else the Spec
	// is refused. Empty: any domain.
	AllowedDomains []string
	// Proxy are the settings of each container's proxy: the destinations it may reach beyond
	// public addresses, ports, limits.
	Proxy egress.Options
}

// proxyAddr is where the code finds its proxy: a listener the server opens inside the
// container's own network namespace, which has nothing else but its loopback.
const proxyAddr = "127.0.0.1:3128"

// proxyEnv are the variables that point the code's HTTP clients (Python's urllib, requests,
// httpx, pip; curl, which reads only the lower-case http_proxy) at the proxy.
func proxyEnv() map[string]string {
	u := "http://" + proxyAddr
	return map[string]string{
		"HTTP_PROXY": u, "HTTPS_PROXY": u, "http_proxy": u, "https_proxy": u,
		"NO_PROXY": "", "no_proxy": "",
	}
}

// egressPolicy is the proxy's policy of a container's.
func egressPolicy(p *sandbox.NetworkPolicy) egress.Policy {
	out := egress.Policy{AllowedDomains: p.AllowedDomains}
	for _, s := range p.DomainSecrets {
		out.Secrets = append(out.Secrets, egress.Secret{Domain: s.Domain, Name: s.Name, Value: s.Value})
	}
	return out
}

// checkNetwork reports whether a container of policy may be created here.
func (l *Local) checkNetwork(p *sandbox.NetworkPolicy) error {
	if p == nil {
		return nil
	}
	spec := func(reason string) error {
		return &sandbox.SpecError{Field: "network_policy", Value: strings.Join(p.AllowedDomains, ","), Reason: reason}
	}
	switch {
	case !l.cfg.Network.Enabled:
		return spec("network access is not enabled on this server")
	case !l.isolated():
		return spec("network policies need sandbox isolation, which is off on this server")
	case len(p.AllowedDomains) == 0:
		return spec("an allowlist needs at least one allowed domain")
	}
	if err := egress.CheckWithin(p.AllowedDomains, l.cfg.Network.AllowedDomains); err != nil {
		return spec(err.Error())
	}
	if err := egress.CheckPolicy(egressPolicy(p)); err != nil {
		return spec(err.Error()) // a SecretError names a secret, never its value
	}
	return nil
}

// caBundle is where a container with a network policy finds the certificates it trusts: the
// host's, and its proxy's CA when it has domain secrets. The container sees no /etc/ssl.
const caBundle = "/tmp/.codeinterp-ca.pem"

// hostBundles are where hosts keep their trusted certificates, the first found is used.
var hostBundles = []string{"/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem"}

// networkEnv is the environment a container of proxy p gets: the proxy variables, the
// placeholders of its secrets, and the trust store variables of Python's ssl (urllib, httpx),
// requests, pip, curl and Node.
func networkEnv(p *egress.Proxy) map[string]string {
	env := proxyEnv()
	for k, v := range p.Placeholders() {
		env[k] = v
	}
	for _, k := range []string{"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "PIP_CERT", "NODE_EXTRA_CA_CERTS"} {
		env[k] = caBundle
	}
	return env
}

// startEgress gives a started container (whose code has not run yet) its proxy: the trust
// bundle in its /tmp, a listener at proxyAddr in its network namespace, served by p until
// Delete.
func (c *container) startEgress(p *egress.Proxy) error {
	c.initMu.Lock()
	fd := -1
	var err error
	if c.initFD >= 0 {
		fd, err = unix.Dup(c.initFD)
	}
	c.initMu.Unlock()
	if fd < 0 {
		return fmt.Errorf("no pidfd of the container's init to reach its network namespace: %v", err)
	}
	defer unix.Close(fd)
	if err := c.writeBundle(p.CACertPEM()); err != nil {
		return err
	}
	ln, err := listenInNetns(fd, proxyAddr)
	if err != nil {
		return err
	}
	c.egressMu.Lock()
	defer c.egressMu.Unlock()
	if c.isDeleted() { // Local.Close deleted it meanwhile
		ln.Close()
		return sandbox.ErrClosed
	}
	c.egress = p
	c.goTracked(func() { _ = p.Serve(ln) }) // ends when Delete closes p
	return nil
}

// writeBundle writes the host's trusted certificates and ca (if any) to the container's
// caBundle, through its init's root (/proc/PID/root): no code has run in it yet, so nothing
// there is planted, and the file is created, never opened through a link.
func (c *container) writeBundle(ca []byte) error {
	var bundle []byte
	for _, p := range hostBundles {
		if b, err := os.ReadFile(p); err == nil {
			bundle = b
			break
		}
	}
	if len(bundle) > 0 && bundle[len(bundle)-1] != '\n' {
		bundle = append(bundle, '\n')
	}
	bundle = append(bundle, ca...)
	path := "/proc/" + strconv.Itoa(c.initPID) + "/root" + caBundle
	var f *os.File
	// As the code's user: root's uid means nothing in the container's user namespace (its
	// tmpfs refuses a file root would own).
	err := c.asCodeUser(func() (err error) {
		f, err = os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o444)
		return err
	})
	if err != nil {
		return fmt.Errorf("write the container's trust bundle: %w", err)
	}
	_, err = f.Write(bundle)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write the container's trust bundle: %w", err)
	}
	return nil
}

// listenInNetns listens on addr (TCP) in the network namespace of the process whose pidfd is
// pidfd. The server needs CAP_SYS_ADMIN for it (it runs as root).
//
// A goroutine locked to its thread enters the namespace, listens, and goes back to the
// server's namespace before it unlocks the thread: the thread must survive. Go discards a
// thread whose goroutine ends locked, and a container's processes started from that thread
// would get their parent-death signal (SIGKILL) with it.
func listenInNetns(pidfd int, addr string) (net.Listener, error) {
	type result struct {
		l   net.Listener
		err error
	}
	done := make(chan result, 1)
	go func() { // owned: it ends at once
		runtime.LockOSThread()
		self, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			done <- result{err: fmt.Errorf("open the server's network namespace: %w", err)}
			return
		}
		defer unix.Close(self)
		if err := unix.Setns(pidfd, unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			done <- result{err: fmt.Errorf("enter the container's network namespace: %w", err)}
			return
		}
		l, err := net.Listen("tcp", addr)
		if rerr := unix.Setns(self, unix.CLONE_NEWNET); rerr != nil {
			// The thread stays in the container's namespace: it stays locked, and Go
			// discards it when this goroutine ends, rather than run anything else there.
			if l != nil {
				l.Close()
			}
			done <- result{err: fmt.Errorf("return to the server's network namespace: %w", rerr)}
			return
		}
		runtime.UnlockOSThread()
		if err != nil {
			err = fmt.Errorf("listen in the container's network namespace: %w", err)
		}
		done <- result{l, err}
	}()
	r := <-done
	return r.l, r.err
}

// errNoEgress wraps why a container's proxy could not start.
var errNoEgress = errors.New("start the container's egress proxy")
