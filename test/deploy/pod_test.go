package deploy_test

import (
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/codeinterp/codeinterp/internal/demo"
)

// usernsBase is the first host uid of the user namespace the pod's hostUsers: false stands for here.
const usernsBase = 200000

// TestChartPod runs the pod the chart renders as a podman pod (startPod) and podman runs in it
// (podman kube play runs an init container to completion, so a native sidecar would block the pod,
// and it ignores procMount and hostUsers): hostUsers: false → the pod's user namespace; the
// codeinterp sidecar from its rendered securityContext (procMount: Unmasked → unmask=ALL,
// capabilities.add → --cap-add), command and configuration, started first as the native sidecar
// is; then, once it serves, the Envoy container (the real Envoy 1.40 in image.envoy, envoyImage
// here) with its rendered command, securityContext and bootstrap, in front of the demo model. The
// two talk over the Unix socket in the sockets emptyDir (a host directory mounted into both). A
// Responses and a Messages conversation with code go through it.
func TestChartPod(t *testing.T) {
	helm := requireHelm(t)
	requirePodman(t)
	model := httptest.NewServer(&demo.Model{})
	t.Cleanup(model.Close)
	modelHost, modelPort, ok := strings.Cut(strings.TrimPrefix(model.URL, "http://"), ":")
	require.True(t, ok, "demo model URL %s", model.URL)
	listen, envoyAdmin, admin := freeAddr(t), freeAddr(t), freeAddr(t)
	envoyRepo, envoyTag, _ := strings.Cut(strings.TrimPrefix(envoyImage, "localhost/"), ":")
	r := renderWith(t, helm,
		"model.host="+modelHost, "model.port="+modelPort, "model.tls=false",
		"image.envoy.repository="+envoyRepo, "image.envoy.tag="+envoyTag,
		"envoy.port="+port(listen), "envoy.adminPort="+port(envoyAdmin),
		"codeinterp.config.admin_listen="+admin)

	pod := r.deployment.Spec.Template.Spec
	sidecar := pod.InitContainers[0]
	dir := t.TempDir()
	sockets := filepath.Join(dir, "sockets")
	config := filepath.Join(dir, "config")
	require.NoError(t, os.Mkdir(sockets, 0o755))
	require.NoError(t, os.Chown(sockets, usernsBase, usernsBase), "the emptyDir belongs to the pod's root")
	require.NoError(t, os.Mkdir(config, 0o755))
	for k, v := range r.configMap.Data {
		require.NoError(t, os.WriteFile(filepath.Join(config, k), []byte(v), 0o644))
	}

	start := time.Now()
	var podOpts []string
	require.NotNil(t, pod.HostUsers)
	if !*pod.HostUsers {
		idmap := fmt.Sprintf("0:%d:65536", usernsBase)
		podOpts = append(podOpts, "--uidmap", idmap, "--gidmap", idmap)
	}
	name := startPod(t, "codeinterp-deploy-test-pod-"+port(listen), podOpts...)
	// A user namespace on the host's network cannot mount a sysfs of its own (runc: "mount sysfs:
	// operation not permitted"): the host's /sys, read-only, as podman binds it for a container of
	// its own with a user namespace on the host's network. A Kubernetes pod has a network namespace of
	// its own, and its sysfs.
	sys := []string{"-v", "/sys:/sys:ro"}
	args := slices.Clone(sys)
	sc := sidecar.SecurityContext
	if sc.ProcMount != nil && *sc.ProcMount == corev1.UnmaskedProcMount {
		args = append(args, "--security-opt", "unmask=ALL")
	}
	for _, c := range sc.Capabilities.Add {
		args = append(args, "--cap-add", string(c))
	}
	for _, m := range sidecar.VolumeMounts {
		src := map[string]string{"sockets": sockets, "config": config}[m.Name]
		require.NotEmpty(t, src, "volume %s", m.Name)
		opt := ""
		if m.ReadOnly {
			opt = ":ro"
		}
		args = append(args, "-v", src+":"+m.MountPath+opt)
	}
	args = append(args, "--entrypoint", sidecar.Command[0], image)
	args = append(args, sidecar.Command[1:]...)
	s := &server{name: name + "-codeinterp", pod: name, grpc: "unix://" + filepath.Join(sockets, "extproc.sock")}
	s.run(t, args)
	serving, _ := s.wait(t, 60*time.Second)
	require.True(t, serving, "the sidecar serves; logs:\n%s", s.logs(t))

	require.Len(t, pod.Containers, 1)
	ec := pod.Containers[0]
	assert.Equal(t, envoyImage, "localhost/"+ec.Image, "the Envoy container's image")
	inPod := pod
	inPod.HostUsers = nil // the podman pod's user namespace, not one of the container's own
	envoyArgs := podmanFlags(t, inPod, ec, map[string]string{"sockets": sockets, "config": config})
	envoyArgs = slices.Concat(envoyArgs, sys, []string{"--entrypoint", ec.Command[0], envoyImage})
	ev := &server{name: name + "-envoy", pod: name}
	ev.run(t, append(envoyArgs, ec.Command[1:]...))
	listening, envoyToListening := ev.waitListen(t, listen, 30*time.Second)
	require.True(t, listening, "Envoy listens; logs:\n%s", ev.logs(t))
	toServing := time.Since(start)

	f := &front{listen: listen}
	logs, first := f.askSixTimesSeven(t)
	assert.Equal(t, "42\n", logs, "the code's logs through the chart's pod")
	blocks := f.askMessagesBash(t, "echo $((6*7))-from-the-pod")
	assert.Contains(t, blocks, "42-from-the-pod", "a Messages conversation with bash through the chart's pod")
	assert.Contains(t, strings.Join(processes(t, ev.name), "\n"), "envoy", "Envoy runs in the pod")
	assert.Contains(t, s.logs(t), logForked, "the sidecar's start mode")
	t.Logf("chart pod: pod (codeinterp, then Envoy) start to SERVING and Envoy listening %v (Envoy's podman run to listening %v); first conversation %v",
		toServing.Round(time.Millisecond), envoyToListening.Round(time.Millisecond), first.Round(time.Millisecond))
}

// port is the port of addr (host:port).
func port(addr string) string {
	_, p, _ := strings.Cut(addr, ":")
	return p
}
