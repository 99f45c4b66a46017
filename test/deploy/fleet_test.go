package deploy_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// unprivileged are the podman flags the gateway image runs under: a non-root user, a read-only root
// filesystem, no capability and no privilege escalation (Kubernetes' restricted Pod Security
// Standard: runAsNonRoot, readOnlyRootFilesystem, capabilities.drop ALL, allowPrivilegeEscalation
// false).
var unprivileged = []string{"--read-only", "--cap-drop", "ALL", "--user", "65532:65532",
	"--security-opt", "no-new-privileges"}

// fleet is the configuration every process of a test fleet shares: the Redis address and the
// fleet secret, in files of a temporary directory.
type fleet struct {
	dir    string
	redis  string // host:port of the Redis
	secret string // host path of the fleet secret
}

// newFleet writes the fleet secret for a fleet whose Redis listens on redis.
func newFleet(t *testing.T, redis string) *fleet {
	t.Helper()
	f := &fleet{dir: t.TempDir(), redis: redis}
	f.secret = filepath.Join(f.dir, "fleet-secret")
	require.NoError(t, os.WriteFile(f.secret, []byte("a fleet secret of the deployment test\n"), 0o644))
	return f
}

// config writes envoy/codeinterp.yaml with the fleet's keys and extra (YAML, top-level keys) as
// name, and returns the podman flags that mount it and the secret and the server flag that reads
// it.
func (f *fleet) config(t *testing.T, name, extra string) (give, args []string) {
	t.Helper()
	base, err := os.ReadFile("../../envoy/codeinterp.yaml")
	require.NoError(t, err)
	cfg := string(base) + "store: redis\nredis:\n  addresses: [\"" + f.redis + "\"]\n" +
		"fleet_secret_file: /etc/codeinterp/fleet/secret\n" + extra
	path := filepath.Join(f.dir, name)
	require.NoError(t, os.WriteFile(path, []byte(cfg), 0o644))
	give = []string{"-v", path + ":/etc/codeinterp/" + name + ":ro", "-v", f.secret + ":/etc/codeinterp/fleet/secret:ro"}
	return give, []string{"--config", "/etc/codeinterp/" + name}
}

// startRedis runs Debian's redis-server (the redis-server package of the host, which
// scripts/deploy-deps.sh installs) in the sandbox image, unprivileged, on a free loopback port: no
// image comes from a registry here, and the sandbox image, the same Debian release, lacks only
// two of its libraries, mounted from the host too. It returns the address.
func startRedis(t *testing.T) string {
	t.Helper()
	addr := freeAddr(t)
	const lib = "/lib/x86_64-linux-gnu/"
	give := slices.Concat(unprivileged, []string{"-v", "/usr/bin/redis-server:/usr/local/bin/redis-server:ro"})
	for _, so := range []string{"liblzf.so.1", "libjemalloc.so.2"} {
		real, err := filepath.EvalSymlinks(lib + so)
		require.NoError(t, err, "%s of Debian's redis-server (scripts/deploy-deps.sh installs it)", so)
		give = append(give, "-v", real+":"+lib+so+":ro")
	}
	s := &server{name: "codeinterp-deploy-test-redis-" + port(addr)}
	s.run(t, slices.Concat(give, []string{"--entrypoint", "/usr/local/bin/redis-server", image,
		"--bind", "127.0.0.1", "--port", port(addr), "--save", "", "--appendonly", "no"}))
	deadline := time.Now().Add(20 * time.Second)
	for {
		out, err := execOutput("redis-cli", "-p", port(addr), "ping")
		if err == nil && strings.TrimSpace(out) == "PONG" {
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server in %s did not answer: %v; logs:\n%s", image, err, s.logs(t))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// processes are the commands running in container name (podman top).
func processes(t *testing.T, name string) []string {
	t.Helper()
	out, err := execOutput("podman", "top", name, "args")
	require.NoError(t, err, "podman top %s", name)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.NotEmpty(t, lines)
	return lines[1:] // the first line is the header
}

// startNode runs a sandbox node of fl: the sandbox image with the least privilege of
// docs/deploy.md's table for forked starts (row 9: a user namespace, SYS_ADMIN, NET_ADMIN,
// SYS_PTRACE, an unmasked /proc), role sandbox, its sandbox service on a free loopback port. It
// returns once the node serves.
func startNode(t *testing.T, fl *fleet) *server {
	t.Helper()
	addr := freeAddr(t)
	give, args := fl.config(t, "node-"+port(addr)+".yaml", "role: sandbox\nsandbox_listen: "+addr+
		"\nnode_id: sandbox-"+port(addr)+"\nsandbox:\n  local:\n    first_uid: 10000\n    uid_count: 50000\n")
	// The node's configuration replaces userns's, so only designed's other flags are kept (its -v
	// mounts userns's configuration).
	designedGive, _ := designed(t)
	var privs []string
	for i := 0; i < len(designedGive); i++ {
		if designedGive[i] == "-v" {
			i++
			continue
		}
		privs = append(privs, designedGive[i])
	}
	node := startServer(t, image, slices.Concat(privs, give), args...)
	serving, _ := node.wait(t, 60*time.Second)
	require.True(t, serving, "the sandbox node serves; logs:\n%s", node.logs(t))
	return node
}

// TestGatewayImage runs the gateway image as the restricted Pod Security Standard allows (a
// non-root user, a read-only root filesystem, every capability dropped, no privilege escalation)
// and checks that it serves: the gateway role runs no sandbox, so it needs none of the sandbox's
// privileges. Its only process is the server.
func TestGatewayImage(t *testing.T) {
	requirePodman(t)
	redis := startRedis(t)
	give, args := newFleet(t, redis).config(t, "gateway.yaml", "role: gateway\n")
	s := startServer(t, gatewayImage, slices.Concat(unprivileged, give), args...)
	serving, took := s.wait(t, 30*time.Second)
	logs := s.logs(t)
	require.True(t, serving, "the gateway image serves unprivileged; logs:\n%s", logs)
	assert.Contains(t, logs, `"role":"gateway"`, "the server's role")
	out, err := execOutput("podman", "inspect", "--format", "{{.Config.User}}", s.name)
	require.NoError(t, err)
	assert.Equal(t, "65532:65532", strings.TrimSpace(out), "the image's user")
	procs := processes(t, s.name)
	require.Len(t, procs, 1, "the gateway's processes: %q", procs)
	assert.True(t, strings.HasPrefix(procs[0], "/usr/local/bin/codeinterp "), "the gateway's process: %q", procs[0])
	t.Logf("gateway image, unprivileged: SERVING %v after podman run", took.Round(time.Millisecond))
}

// TestGatewayImageDefaults checks that the gateway image's own configuration is the gateway role:
// run with no configuration of ours and no fleet secret mounted, it exits naming the secret it
// lacks, not Python or bubblewrap.
func TestGatewayImageDefaults(t *testing.T) {
	requirePodman(t)
	s := startServer(t, gatewayImage, unprivileged)
	serving, _ := s.wait(t, 30*time.Second)
	logs := s.logs(t)
	require.False(t, serving, "serves with no fleet secret; logs:\n%s", logs)
	assert.Contains(t, logs, "fleet_secret_file", "why it exits")
	assert.NotContains(t, logs, "python", "a gateway looks for no Python")
}

// TestFleet runs the fleet topology in podman: Redis, a sandbox node (the sandbox image with the
// least privilege of docs/deploy.md's table, row 9), a gateway (the gateway image, unprivileged)
// and the real Envoy 1.40 on the host in front of the gateway and the demo model. A Responses and a
// Messages conversation run code through Envoy → gateway → sandbox node; the gateway's process
// list has no bubblewrap, the node's has.
func TestFleet(t *testing.T) {
	requirePodman(t)
	redis := startRedis(t)
	fl := newFleet(t, redis)

	start := time.Now()
	node := startNode(t, fl)

	listen := freeAddr(t)
	gg, ga := fl.config(t, "gateway.yaml", "role: gateway\n")
	gw := startServer(t, gatewayImage, slices.Concat(unprivileged, gg), append(ga, "--upstream", "http://"+listen)...)
	serving, _ := gw.wait(t, 30*time.Second)
	require.True(t, serving, "the gateway serves; logs:\n%s", gw.logs(t))
	toServing := time.Since(start)

	f := startFront(t, listen, gw.grpc, gw.api)
	logs, first := f.askSixTimesSeven(t)
	assert.Equal(t, "42\n", logs, "the code's logs through the fleet")
	blocks := f.askMessagesBash(t, "echo $((6*7))-from-the-node")
	assert.Contains(t, blocks, "42-from-the-node", "a Messages conversation with bash through the fleet")

	for _, p := range processes(t, gw.name) {
		assert.NotContains(t, p, "bwrap", "a process of the gateway")
		assert.NotContains(t, p, "python", "a process of the gateway")
	}
	assert.Contains(t, strings.Join(processes(t, node.name), "\n"), "bwrap", "the sandbox node runs the containers")
	assert.Contains(t, node.logs(t), logForked, "the sandbox node's start mode")
	t.Logf("fleet: both podman runs to SERVING %v; first conversation %v", toServing.Round(time.Millisecond), first.Round(time.Millisecond))
}
