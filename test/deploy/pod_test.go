package deploy_test

import (
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/codeinterp/codeinterp/envoy"
	"github.com/codeinterp/codeinterp/internal/demo"
)

// usernsBase is the first host uid of the user namespace the pod's hostUsers: false stands for here.
const usernsBase = 200000

// TestChartPod runs the pod the chart renders, as the equivalent podman run (podman kube play runs
// an init container to completion, so a native sidecar would block the pod, and it ignores procMount
// and hostUsers): the codeinterp sidecar from its rendered securityContext (hostUsers: false → a
// user namespace, procMount: Unmasked → unmask=ALL, capabilities.add → --cap-add), its rendered
// command and configuration, its sockets in a host directory standing for the emptyDir; and Envoy
// (on the host, the real Envoy 1.40) with the rendered bootstrap, its socket paths moved to that
// directory, in front of the demo model. A conversation with code goes through it.
func TestChartPod(t *testing.T) {
	helm := requireHelm(t)
	requirePodman(t)
	model := httptest.NewServer(&demo.Model{})
	t.Cleanup(model.Close)
	modelHost, modelPort, ok := strings.Cut(strings.TrimPrefix(model.URL, "http://"), ":")
	require.True(t, ok, "demo model URL %s", model.URL)
	listen, envoyAdmin, admin := freeAddr(t), freeAddr(t), freeAddr(t)
	r := renderWith(t, helm,
		"model.host="+modelHost, "model.port="+modelPort, "model.tls=false",
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
	require.NoError(t, os.WriteFile(filepath.Join(config, "codeinterp.yaml"), []byte(r.configMap.Data["codeinterp.yaml"]), 0o644))

	var args []string
	require.NotNil(t, pod.HostUsers)
	if !*pod.HostUsers {
		idmap := fmt.Sprintf("0:%d:65536", usernsBase)
		args = append(args, "--uidmap", idmap, "--gidmap", idmap)
	}
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
	s := &server{
		name: "codeinterp-deploy-test-pod-" + port(listen),
		grpc: "unix://" + filepath.Join(sockets, "extproc.sock"),
	}
	s.run(t, args)
	serving, toServing := s.wait(t, 60*time.Second)
	require.True(t, serving, "the sidecar serves; logs:\n%s", s.logs(t))

	b, err := envoy.Parse([]byte(r.configMap.Data["envoy.yaml"]))
	require.NoError(t, err)
	for _, c := range b.GetStaticResources().GetClusters() {
		for _, le := range c.GetLoadAssignment().GetEndpoints() {
			for _, ep := range le.GetLbEndpoints() {
				if pipe := ep.GetEndpoint().GetAddress().GetPipe(); pipe != nil {
					pipe.Path = filepath.Join(sockets, filepath.Base(pipe.Path))
				}
			}
		}
	}
	runEnvoy(t, b, listen)
	f := &front{listen: listen}
	logs, first := f.askSixTimesSeven(t)
	assert.Equal(t, "42\n", logs, "the code's logs through the chart's pod")
	blocks := f.askMessagesBash(t, "echo $((6*7))-from-the-pod")
	assert.Contains(t, blocks, "42-from-the-pod", "a Messages conversation with bash through the chart's pod")
	assert.Contains(t, s.logs(t), logForked, "the sidecar's start mode")
	t.Logf("chart pod: podman run to SERVING %v; first conversation %v", toServing.Round(time.Millisecond), first.Round(time.Millisecond))
}

// port is the port of addr (host:port).
func port(addr string) string {
	_, p, _ := strings.Cut(addr, ":")
	return p
}
