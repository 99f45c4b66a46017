package local

import (
	"errors"
	"fmt"
	"net"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/codeinterp/codeinterp/pkg/egress"
	"github.com/codeinterp/codeinterp/pkg/sandbox"
)

// NetworkConfig is the operator's say on containers' network policies (issue 31). The zero
// value refuses them: every container has no network at all.
type NetworkConfig struct {
	// Enabled lets a container have a network policy. When false (the default), a Spec with
	// a NetworkPolicy is refused ([sandbox.ErrInvalidSpec], field network_policy).
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
	return nil
}

// startEgress gives a started container its proxy: a listener at proxyAddr in its network
// namespace, served by a proxy enforcing policy until Delete.
func (c *container) startEgress(policy *sandbox.NetworkPolicy) error {
	p, err := egress.New(egress.Policy{AllowedDomains: policy.AllowedDomains}, c.l.cfg.Network.Proxy, c.log)
	if err != nil {
		return err
	}
	c.initMu.Lock()
	fd := -1
	if c.initFD >= 0 {
		fd, err = unix.Dup(c.initFD)
	}
	c.initMu.Unlock()
	if fd < 0 {
		return fmt.Errorf("no pidfd of the container's init to reach its network namespace: %v", err)
	}
	defer unix.Close(fd)
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
