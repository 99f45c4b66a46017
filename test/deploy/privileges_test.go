package deploy_test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The server's start-up messages (pkg/sandbox/local) that tell which mode it runs in.
const (
	logForked     = "containers start forked from a template"
	logNoFork     = "the fork start mode is not available here"
	logNoHostname = "Can't set hostname to sandbox: Operation not permitted"
	logNoStop     = "background processes of this container will not be stopped"
	logNoProc     = "Can't mount proc on /newroot/proc: Operation not permitted"
	logNoLoopback = "loopback: Failed RTM_NEWADDR"
)

// userns returns the podman flags of a user namespace like a Kubernetes pod's with hostUsers:
// false (65,536 ids from host uid 200000 on), and a configuration whose container uids lie inside
// it (first_uid 10000, uid_count 50000; the default first uid, 1000000000, is not mapped there).
func userns(t *testing.T) []string {
	t.Helper()
	base, err := os.ReadFile("../../envoy/codeinterp.yaml")
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "userns.yaml")
	require.NoError(t, os.WriteFile(path, append(base, "  local:\n    first_uid: 10000\n    uid_count: 50000\n"...), 0o644))
	return []string{"--uidmap", "0:200000:65536", "--gidmap", "0:200000:65536",
		"-v", path + ":/etc/codeinterp/userns.yaml:ro"}
}

// usernsConfig are the server flags that read userns's configuration (a later --config wins).
var usernsConfig = []string{"--config", "/etc/codeinterp/userns.yaml"}

// TestPrivileges runs the image under each row of docs/deploy.md's privilege table and checks what
// the server does: exits, serves with exec starts (degraded but isolated), or serves with forked
// starts (the designed isolation). A serving row answers a conversation with code through Envoy.
func TestPrivileges(t *testing.T) {
	requirePodman(t)
	unmask := []string{"--security-opt", "unmask=ALL"}
	caps := func(c ...string) []string {
		var out []string
		for _, name := range c {
			out = append(out, "--cap-add", name)
		}
		return out
	}
	tests := []struct {
		name        string
		img         string   // the image; "" is the sandbox image
		fleet       bool     // a gateway: run with Redis and a sandbox node (row 9)
		give        []string // podman run flags
		args        []string // server flags
		wantServing bool
		wantLogs    []string // each is in the log
		wantNotLogs []string // none is
	}{
		{
			name:     "defaults",
			wantLogs: []string{logNoHostname},
		},
		{
			name:     "unmasked /proc",
			give:     unmask,
			wantLogs: []string{logNoHostname},
		},
		{
			name:     "SYS_ADMIN",
			give:     caps("SYS_ADMIN"),
			wantLogs: []string{logNoProc},
		},
		{
			name:        "SYS_ADMIN, unmasked /proc",
			give:        append(caps("SYS_ADMIN"), unmask...),
			wantServing: true,
			wantLogs:    []string{logNoFork, logNoLoopback, logNoStop},
			wantNotLogs: []string{logForked},
		},
		{
			name:        "SYS_ADMIN, NET_ADMIN, unmasked /proc",
			give:        append(caps("SYS_ADMIN", "NET_ADMIN"), unmask...),
			wantServing: true,
			// Why the fork mode fails varies with timing: "setns: Operation not permitted", or the
			// test container's driver ends before it is ready ("read frame: EOF").
			wantLogs:    []string{logNoFork, logNoStop},
			wantNotLogs: []string{logForked},
		},
		{
			name:        "SYS_ADMIN, NET_ADMIN, SYS_PTRACE, unmasked /proc",
			give:        append(caps("SYS_ADMIN", "NET_ADMIN", "SYS_PTRACE"), unmask...),
			wantServing: true,
			wantLogs:    []string{logForked},
			wantNotLogs: []string{logNoFork, logNoStop},
		},
		{
			name:     "user namespace, default capabilities, unmasked /proc",
			give:     append(userns(t), unmask...),
			args:     usernsConfig,
			wantLogs: []string{logNoHostname},
		},
		{
			name:        "user namespace, SYS_ADMIN, unmasked /proc",
			give:        append(append(userns(t), caps("SYS_ADMIN")...), unmask...),
			args:        usernsConfig,
			wantServing: true,
			wantLogs:    []string{logNoFork, logNoLoopback, logNoStop},
			wantNotLogs: []string{logForked},
		},
		{
			name:        "user namespace, SYS_ADMIN, NET_ADMIN, SYS_PTRACE, unmasked /proc",
			give:        append(append(userns(t), caps("SYS_ADMIN", "NET_ADMIN", "SYS_PTRACE")...), unmask...),
			args:        usernsConfig,
			wantServing: true,
			wantLogs:    []string{logForked},
			wantNotLogs: []string{logNoFork, logNoStop},
		},
		{
			name:        "privileged",
			give:        []string{"--privileged"},
			wantServing: true,
			wantLogs:    []string{logForked},
			wantNotLogs: []string{logNoFork, logNoStop},
		},
		{
			name:        "gateway image, role gateway, non-root, read-only root, no capabilities, no-new-privileges",
			img:         gatewayImage,
			fleet:       true,
			give:        unprivileged,
			wantServing: true,
			wantLogs:    []string{`"role":"gateway"`},
			wantNotLogs: []string{"bwrap", logForked, logNoFork},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			listen := freeAddr(t)
			img, give, args := image, tt.give, tt.args
			if tt.img != "" {
				img = tt.img
			}
			if tt.fleet {
				fl := newFleet(t, startRedis(t))
				startNode(t, fl)
				g, a := fl.config(t, "gateway.yaml", "role: gateway\n")
				give, args = slices.Concat(give, g), slices.Concat(args, a)
			}
			s := startServer(t, img, give, append(args, "--upstream", "http://"+listen)...)
			serving, took := s.wait(t, 60*time.Second)
			require.Equal(t, tt.wantServing, serving, "serves under %q; logs:\n%s", tt.give, s.logs(t))
			if serving {
				f := startFront(t, listen, s.grpc, s.api)
				out, latency := f.askSixTimesSeven(t)
				assert.Equal(t, "42\n", out, "the code's logs under %q", tt.give)
				t.Logf("%s: SERVING %v after podman run; first conversation %v", tt.name, took.Round(time.Millisecond), latency.Round(time.Millisecond))
			} else {
				t.Logf("%s: exited %v after podman run", tt.name, took.Round(time.Millisecond))
			}
			logs := s.logs(t)
			for _, want := range tt.wantLogs {
				assert.Contains(t, logs, want, "log under %q", tt.give)
			}
			for _, not := range tt.wantNotLogs {
				assert.NotContains(t, logs, not, "log under %q", tt.give)
			}
		})
	}
}
