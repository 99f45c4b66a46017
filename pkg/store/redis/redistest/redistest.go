// Package redistest runs a real redis-server for tests: the Redis stores' own tests, and the
// tests of the packages that share state through Redis (the fleet, the e2e).
package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// Binary is the redis-server the tests run: Debian's package redis-server (`make deps` installs
// it; by hand: `apt-get install redis-server`).
const Binary = "redis-server"

// Server is a redis-server a test started, on a loopback port of its own with its files in
// the test's temporary directory, persisting nothing. It is stopped when the test ends. Safe
// for concurrent use.
type Server struct {
	t       testing.TB
	addr    string
	dir     string
	cluster bool

	mu      sync.Mutex // guards cmd and done
	cmd     *exec.Cmd
	done    chan struct{} // closed when cmd has exited
	client  *goredis.Client
	cclient *goredis.ClusterClient
}

// Start runs a redis-server for t and returns once it answers PING. A missing binary fails the
// test, saying how to install it: nothing is skipped.
func Start(t testing.TB) *Server {
	t.Helper()
	return start(t, false)
}

// StartCluster runs a redis-server in cluster mode for t, a cluster of one node holding every
// slot, and returns once the cluster is up: for the tests of what must work on Redis Cluster
// (see ClusterClient).
func StartCluster(t testing.TB) *Server {
	t.Helper()
	return start(t, true)
}

func start(t testing.TB, cluster bool) *Server {
	t.Helper()
	if _, err := exec.LookPath(Binary); err != nil {
		t.Fatalf("redistest: %s not found (%v): install Debian's redis-server (make deps, or apt-get install redis-server)", Binary, err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("redistest: find a free port: %v", err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatalf("redistest: free port %s: %v", addr, err)
	}
	s := &Server{t: t, addr: addr, dir: t.TempDir(), cluster: cluster}
	t.Cleanup(s.Stop)
	s.start()
	return s
}

// Addr returns the server's address, "127.0.0.1:port"; it stays the same across Restart.
func (s *Server) Addr() string { return s.addr }

// Client returns a client of the server, the same one on every call, closed when the test
// ends. It reconnects on its own after a Restart (go-redis probes a server it could not dial
// once a second). Like the clients of redis.NewClient, it honours each call's deadline and dials
// once per attempt, so that a stopped or hung server fails a call within its deadline.
func (s *Server) Client() *goredis.Client {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.client == nil {
		s.client = goredis.NewClient(&goredis.Options{Addr: s.addr, DialerRetries: 1, ContextTimeoutEnabled: true})
		c := s.client
		s.t.Cleanup(func() { _ = c.Close() })
	}
	return s.client
}

// ClusterClient returns a Redis Cluster client of a server StartCluster started, the same one
// on every call, closed when the test ends; set like Client.
func (s *Server) ClusterClient() *goredis.ClusterClient {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.cluster {
		s.t.Fatalf("redistest: ClusterClient of a server Start started (use StartCluster)")
	}
	if s.cclient == nil {
		s.cclient = goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: []string{s.addr}, DialerRetries: 1, ContextTimeoutEnabled: true})
		c := s.cclient
		s.t.Cleanup(func() { _ = c.Close() })
	}
	return s.cclient
}

// Stop kills the server and waits until it has exited; the data it held is lost. Stopping a
// stopped server does nothing.
func (s *Server) Stop() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-done
}

// Pause stops the server's process (SIGSTOP) without ending it: it accepts connections but
// answers nothing, as a Redis behind a partition does, until Resume.
func (s *Server) Pause() { s.signal(syscall.SIGSTOP) }

// Resume lets a paused server run again (SIGCONT).
func (s *Server) Resume() { s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig os.Signal) {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		s.t.Fatalf("redistest: signal %v: the server is stopped", sig)
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		s.t.Fatalf("redistest: signal %v: %v", sig, err)
	}
}

// Restart stops the server if it runs, and starts an empty one on the same port.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	s.start()
}

// start runs redis-server and waits until it answers PING.
func (s *Server) start() {
	s.t.Helper()
	_, port, _ := net.SplitHostPort(s.addr)
	args := []string{"--port", port, "--bind", "127.0.0.1", "--dir", s.dir,
		"--save", "", "--appendonly", "no", "--protected-mode", "yes", "--loglevel", "warning"}
	if s.cluster {
		args = append(args, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
	}
	cmd := exec.Command(Binary, args...)
	log, err := os.Create(s.dir + "/redis-" + strconv.FormatInt(time.Now().UnixNano(), 36) + ".log")
	if err != nil {
		s.t.Fatalf("redistest: create log: %v", err)
	}
	defer func() { _ = log.Close() }()
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("redistest: start %s: %v", Binary, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	err = waitPing(s.addr, done)
	if err == nil && s.cluster {
		err = waitCluster(s.addr)
	}
	if err != nil {
		s.Stop()
		out, _ := os.ReadFile(log.Name())
		s.t.Fatalf("redistest: %s on %s: %v\n%s", Binary, s.addr, err, out)
	}
}

// waitPing returns once the server at addr answers PING, or an error after 10 s or when the
// process exits.
func waitPing(addr string, exited <-chan struct{}) error {
	c := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	defer func() { _ = c.Close() }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return errors.New("exited before answering PING")
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no answer to PING: %w", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitCluster gives the one-node cluster at addr every slot (unless its configuration file kept
// them from a run before a Restart) and returns once the cluster is up, or an error after 10 s.
func waitCluster(addr string) error {
	c := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1})
	defer func() { _ = c.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := c.ClusterInfo(ctx).Result()
	if err != nil {
		return fmt.Errorf("CLUSTER INFO: %w", err)
	}
	if strings.Contains(info, "cluster_slots_assigned:0") {
		if err := c.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", 0, 16383).Err(); err != nil {
			return fmt.Errorf("CLUSTER ADDSLOTSRANGE: %w", err)
		}
	}
	for {
		info, err = c.ClusterInfo(ctx).Result()
		if err == nil && strings.Contains(info, "cluster_state:ok") {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster not up: %q, %v", info, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
