// Package deploy_test runs the container images of make image in podman (with runc): the least
// privilege the sandbox needs, measured row by row (docs/deploy.md's table), a conversation from a
// real Envoy on the host into the image, and the Helm chart's pods as podman pods with the real
// Envoy in them (envoyImage). The tests need podman and the images; they run only
// with CODEINTERP_DEPLOY_TEST set (make deploy-test sets it, and builds the images first).
package deploy_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

const (
	// image is the server with its sandbox (deploy/image/Containerfile).
	image = "localhost/codeinterp:dev"
	// gatewayImage is the server alone (deploy/image/Containerfile.gateway).
	gatewayImage = "localhost/codeinterp-gateway:dev"
	// envoyImage is the real Envoy 1.40 of .venv (deploy/image/Containerfile.envoy), the chart's
	// image.envoy in the pod tests.
	envoyImage = "localhost/codeinterp-envoy:dev"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// requirePodman skips the test unless CODEINTERP_DEPLOY_TEST is set, and then fails it if podman
// or the images are missing.
func requirePodman(t *testing.T) {
	t.Helper()
	if os.Getenv("CODEINTERP_DEPLOY_TEST") == "" {
		t.Skip("the deployment tests run with CODEINTERP_DEPLOY_TEST=1 (make deploy-test)")
	}
	_, err := exec.LookPath("podman")
	require.NoError(t, err, "podman (scripts/deploy-deps.sh installs it)")
	for _, img := range []string{image, gatewayImage, envoyImage} {
		require.NoError(t, exec.Command("podman", "image", "exists", img).Run(), "image %s (make image builds it)", img)
	}
}

// freeAddr returns a loopback address nothing listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

var containerSeq atomic.Int64

// server is one container, on the host's network or in a pod on it, listening on loopback only.
type server struct {
	name    string
	pod     string // the podman pod the container runs in; "" is none
	grpc    string // ext_proc and gRPC health
	admin   string // /healthz, /readyz, /metrics
	api     string // the Containers API
	started time.Time
}

// startServer runs img in podman with the podman flags give, the server's listeners on free
// loopback ports and extra server flags after them. The container is removed when t ends.
func startServer(t *testing.T, img string, give []string, extra ...string) *server {
	t.Helper()
	s := &server{
		name:  fmt.Sprintf("codeinterp-deploy-test-%d-%d", os.Getpid(), containerSeq.Add(1)),
		grpc:  freeAddr(t),
		admin: freeAddr(t),
		api:   freeAddr(t),
	}
	s.run(t, slices.Concat(give, []string{img, "--listen", s.grpc, "--admin-listen", s.admin, "--api-listen", s.api}, extra))
	return s
}

// run runs podman run -d --name s.name --network host (or --pod s.pod) with args, and removes the
// container when t ends.
func (s *server) run(t *testing.T, args []string) {
	t.Helper()
	where := []string{"--network", "host"}
	if s.pod != "" {
		where = []string{"--pod", s.pod}
	}
	args = slices.Concat([]string{"run", "-d", "--name", s.name}, where, args)
	t.Cleanup(func() { s.remove() })
	s.started = time.Now()
	out, err := exec.Command("podman", args...).CombinedOutput()
	require.NoError(t, err, "podman %s: %s", strings.Join(args, " "), out)
}

// wait returns whether the server reports SERVING on gRPC health within timeout (true), or its
// container exits first (false), and how long after the podman run it came to that.
func (s *server) wait(t *testing.T, timeout time.Duration) (serving bool, took time.Duration) {
	t.Helper()
	conn, err := grpc.NewClient(s.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	health := healthpb.NewHealthClient(conn)
	deadline := time.Now().Add(timeout)
	for i := 0; time.Now().Before(deadline); i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		resp, err := health.Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return true, time.Since(s.started)
		}
		if i%5 == 0 && s.state(t) == "exited" {
			return false, time.Since(s.started)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("container %s neither served nor exited within %v; logs:\n%s", s.name, timeout, s.logs(t))
	return false, 0
}

// waitListen returns whether something accepts TCP connections on addr within timeout (true), or
// the container exits first (false), and how long after the podman run it came to that.
func (s *server) waitListen(t *testing.T, addr string, timeout time.Duration) (listening bool, took time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for i := 0; time.Now().Before(deadline); i++ {
		if c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
			c.Close()
			return true, time.Since(s.started)
		}
		if i%5 == 0 && s.state(t) == "exited" {
			return false, time.Since(s.started)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("container %s neither listened on %s nor exited within %v; logs:\n%s", s.name, addr, timeout, s.logs(t))
	return false, 0
}

// startPod creates a podman pod on the host's network standing for a Kubernetes pod, with opts
// (e.g. the user namespace of hostUsers: false) for all its containers, and removes it when t ends.
// Its containers (server.pod) share the pod's infra container's namespaces — IPC, UTS and the
// network, which is the host's: no CNI network is set up here, and the demo model, Redis and the
// sandbox nodes listen on the host's loopback, as in the other tests.
func startPod(t *testing.T, name string, opts ...string) string {
	t.Helper()
	args := slices.Concat([]string{"pod", "create", "--name", name, "--network", "host"}, opts)
	t.Cleanup(func() {
		for range 3 {
			if exec.Command("podman", "pod", "rm", "-f", "-t", "0", name).Run() == nil {
				return
			}
			time.Sleep(500 * time.Millisecond)
		}
	})
	out, err := exec.Command("podman", args...).CombinedOutput()
	require.NoError(t, err, "podman %s: %s", strings.Join(args, " "), out)
	return name
}

// state is the container's podman state: running, exited, ...
func (s *server) state(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("podman", "inspect", "--format", "{{.State.Status}}", s.name).Output()
	require.NoError(t, err, "podman inspect %s", s.name)
	return strings.TrimSpace(string(out))
}

// logs is what the container wrote to stdout and stderr so far.
func (s *server) logs(t *testing.T) string {
	t.Helper()
	var out bytes.Buffer
	cmd := exec.Command("podman", "logs", s.name)
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Run(), "podman logs %s", s.name)
	return out.String()
}

// execOutput runs a command and returns its standard output.
func execOutput(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).Output()
	return string(out), err
}

// remove removes the container. With a user namespace, podman's first removal can fail on the
// container's shm mount ("device or resource busy"); the second one succeeds.
func (s *server) remove() {
	for range 3 {
		if exec.Command("podman", "rm", "-f", "-t", "0", s.name).Run() == nil {
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
}
