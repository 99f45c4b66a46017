package deploy_test

import (
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"

	configv1 "github.com/codeinterp/codeinterp/api/codeinterp/config/v1"
	"github.com/codeinterp/codeinterp/internal/demo"
	"github.com/codeinterp/codeinterp/pkg/config"
)

// fleetValues are the values TestChartFleet renders the fleet topology with.
const fleetValues = "testdata/fleet-values.yaml"

// TestChartFleet lints and renders the chart's fleet topology and checks what it promises: the
// gateway pod at the restricted Pod Security Standard (non-root, read-only root, every capability
// dropped, no privilege escalation, RuntimeDefault seccomp) running the gateway image as role
// gateway; the sandbox StatefulSet with exactly the measured privileges, each node's address its
// stable name under the headless Service; the fleet secret a Secret both mount; a NetworkPolicy
// letting only the gateway pods reach the sandbox port; the ServiceMonitor's Services. Both server
// configurations pass the server's own validation, and Envoy's bootstrap the real Envoy's.
func TestChartFleet(t *testing.T) {
	helm := requireHelm(t)
	out, err := exec.Command(helm, "lint", "--strict", chart, "-f", fleetValues).CombinedOutput()
	require.NoError(t, err, "helm lint: %s", out)
	r := render(t, helm, "testdata/chart-fleet.golden.yaml", fleetValues)
	require.NotNil(t, r.statefulSet, "the sandbox nodes")
	require.NotNil(t, r.secret, "the fleet secret")
	require.NotNil(t, r.networkPolicy, "the sandbox nodes' NetworkPolicy")
	require.NotNil(t, r.serviceMonitor, "the ServiceMonitor (enabled in %s)", fleetValues)

	// The gateway pod: restricted.
	gw := r.deployment.Spec.Template
	pod := gw.Spec
	assert.Nil(t, pod.HostUsers, "the gateway pod needs no user namespace")
	require.NotNil(t, pod.SecurityContext)
	require.NotNil(t, pod.SecurityContext.RunAsNonRoot)
	assert.True(t, *pod.SecurityContext.RunAsNonRoot, "the gateway pod's runAsNonRoot")
	require.NotNil(t, pod.SecurityContext.RunAsUser)
	assert.NotZero(t, *pod.SecurityContext.RunAsUser, "the gateway pod's uid")
	require.NotNil(t, pod.SecurityContext.SeccompProfile)
	assert.Equal(t, corev1.SeccompProfileTypeRuntimeDefault, pod.SecurityContext.SeccompProfile.Type)
	require.Len(t, pod.InitContainers, 1)
	require.Len(t, pod.Containers, 1)
	ci := pod.InitContainers[0]
	require.NotNil(t, ci.RestartPolicy)
	assert.Equal(t, corev1.ContainerRestartPolicyAlways, *ci.RestartPolicy, "the gateway is a native sidecar")
	assert.Equal(t, "codeinterp-gateway:dev", ci.Image, "the gateway image")
	for _, c := range []corev1.Container{ci, pod.Containers[0]} {
		sc := c.SecurityContext
		require.NotNil(t, sc, "%s's securityContext", c.Name)
		require.NotNil(t, sc.RunAsNonRoot, c.Name)
		assert.True(t, *sc.RunAsNonRoot, "%s runs as non-root", c.Name)
		require.NotNil(t, sc.AllowPrivilegeEscalation, c.Name)
		assert.False(t, *sc.AllowPrivilegeEscalation, "%s's allowPrivilegeEscalation", c.Name)
		require.NotNil(t, sc.ReadOnlyRootFilesystem, c.Name)
		assert.True(t, *sc.ReadOnlyRootFilesystem, "%s's root filesystem is read-only", c.Name)
		require.NotNil(t, sc.Capabilities, c.Name)
		assert.Equal(t, []corev1.Capability{"ALL"}, sc.Capabilities.Drop, "%s drops every capability", c.Name)
		assert.Empty(t, sc.Capabilities.Add, "%s adds none", c.Name)
		assert.Nil(t, sc.Privileged, c.Name)
		assert.Nil(t, sc.ProcMount, c.Name)
		assert.Nil(t, sc.RunAsUser, "%s's uid is the pod's", c.Name)
	}

	// The Pod Security Admission's own verdicts: the gateway pod is restricted; the sandbox pod,
	// with SYS_ADMIN, is not even baseline (the privileged level, on nodes of its own).
	allowed, detail := podSecurity(t, api.LevelRestricted, gw.ObjectMeta, pod)
	assert.True(t, allowed, "the gateway pod at the restricted level: %s", detail)
	allowed, detail = podSecurity(t, api.LevelBaseline, r.statefulSet.Spec.Template.ObjectMeta, r.statefulSet.Spec.Template.Spec)
	assert.False(t, allowed, "the sandbox pod at the baseline level")
	assert.Contains(t, detail, "SYS_ADMIN", "why the sandbox pod is privileged")

	// The sandbox nodes: the measured privileges (docs/deploy.md, row 9), and no more.
	ss := r.statefulSet
	headless := r.services[ss.Spec.ServiceName]
	require.NotNil(t, headless, "the StatefulSet's Service %q", ss.Spec.ServiceName)
	assert.Equal(t, corev1.ClusterIPNone, headless.Spec.ClusterIP, "the sandbox nodes' Service is headless")
	node := ss.Spec.Template.Spec
	require.NotNil(t, node.HostUsers)
	assert.False(t, *node.HostUsers, "the sandbox pods' own user namespace")
	require.Len(t, node.Containers, 1)
	nc := node.Containers[0]
	assert.Equal(t, "codeinterp:dev", nc.Image, "the sandbox image")
	require.NotNil(t, nc.SecurityContext)
	require.NotNil(t, nc.SecurityContext.ProcMount)
	assert.Equal(t, corev1.UnmaskedProcMount, *nc.SecurityContext.ProcMount)
	assert.ElementsMatch(t, []corev1.Capability{"SYS_ADMIN", "NET_ADMIN", "SYS_PTRACE"}, nc.SecurityContext.Capabilities.Add,
		"the capabilities measured in docs/deploy.md")
	assert.Nil(t, nc.SecurityContext.Privileged, "not privileged")
	env := map[string]string{}
	for _, e := range nc.Env {
		env[e.Name] = e.Value
	}
	assert.Equal(t, "$(POD_NAME)."+ss.Spec.ServiceName+".$(POD_NAMESPACE).svc:7070", env["NODE_ADDRESS"],
		"each node's address is its stable name under the headless Service")
	assert.Contains(t, strings.Join(nc.Command, " "), `-e "s|@NODE_ID@|$POD_NAME|" -e "s|@NODE_ADDRESS@|$NODE_ADDRESS|"`,
		"the node writes its name and address into its configuration")
	require.NotEmpty(t, nc.Env)
	require.NotNil(t, nc.Env[0].ValueFrom)
	assert.Equal(t, "POD_NAME", nc.Env[0].Name)
	assert.Equal(t, "metadata.name", nc.Env[0].ValueFrom.FieldRef.FieldPath, "the node's name is its pod's")
	assert.Contains(t, strings.Join(nc.Command, " "), "exec /usr/local/bin/codeinterp --config /etc/codeinterp/node/sandbox.yaml")

	// The fleet secret: the Secret both pods mount.
	assert.GreaterOrEqual(t, len(r.secret.Data["secret"]), config.MinFleetSecretBytes, "the fleet secret's length")
	for name, spec := range map[string]corev1.PodSpec{"gateway": pod, "sandbox": node} {
		var names []string
		for _, v := range spec.Volumes {
			if v.Secret != nil {
				names = append(names, v.Secret.SecretName)
			}
		}
		assert.Equal(t, []string{r.secret.Name}, names, "the %s pod's Secret volumes", name)
	}

	// The NetworkPolicy: the sandbox port, from the gateway pods only.
	np := r.networkPolicy.Spec
	sel := func(ls map[string]string) labels.Selector { return labels.SelectorFromSet(ls) }
	assert.True(t, sel(np.PodSelector.MatchLabels).Matches(labels.Set(ss.Spec.Template.Labels)), "the policy selects the sandbox pods")
	assert.False(t, sel(np.PodSelector.MatchLabels).Matches(labels.Set(gw.Labels)), "the policy selects no gateway pod")
	require.Len(t, np.Ingress, 1, "one ingress rule (fleet.networkPolicy.adminFrom is empty)")
	require.Len(t, np.Ingress[0].From, 1)
	from := np.Ingress[0].From[0]
	require.NotNil(t, from.PodSelector)
	assert.Nil(t, from.NamespaceSelector, "pods of this namespace only")
	assert.True(t, sel(from.PodSelector.MatchLabels).Matches(labels.Set(gw.Labels)), "the gateway pods may reach the nodes")
	assert.False(t, sel(from.PodSelector.MatchLabels).Matches(labels.Set(ss.Spec.Template.Labels)), "the nodes may not reach each other")
	require.Len(t, np.Ingress[0].Ports, 1)
	assert.Equal(t, int32(7070), np.Ingress[0].Ports[0].Port.IntVal, "the sandbox port only")
	assert.Equal(t, []string{"Ingress"}, []string{string(np.PolicyTypes[0])})

	// Envoy's Service and PodDisruptionBudget select the gateways only.
	for _, sl := range []map[string]string{r.services["test-codeinterp"].Spec.Selector, r.pdbs["test-codeinterp"].Spec.Selector.MatchLabels} {
		assert.True(t, sel(sl).Matches(labels.Set(gw.Labels)), "selects the gateway pods: %v", sl)
		assert.False(t, sel(sl).Matches(labels.Set(ss.Spec.Template.Labels)), "selects no sandbox pod: %v", sl)
	}

	// The ServiceMonitor: the admin port of the gateways and of the nodes.
	sm := r.serviceMonitor.Spec
	var scraped []string
	for name, svc := range r.services {
		if sel(sm.Selector.MatchLabels).Matches(labels.Set(svc.Labels)) {
			scraped = append(scraped, name)
			require.Len(t, svc.Spec.Ports, 1, name)
			assert.Equal(t, "admin", svc.Spec.Ports[0].Name, name)
		}
	}
	assert.ElementsMatch(t, []string{"test-codeinterp-metrics", "test-codeinterp-sandbox-metrics"}, scraped, "the Services scraped")
	require.Len(t, sm.Endpoints, 1)
	assert.Equal(t, "admin", sm.Endpoints[0].Port)
	assert.Equal(t, "/metrics", sm.Endpoints[0].Path)

	// The configurations, with the server's own validation: the fleet secret at a path of this
	// test, the node's address as its start writes it.
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret")
	require.NoError(t, os.WriteFile(secret, r.secret.Data["secret"], 0o600))
	load := func(key string, replace ...string) *configv1.Config {
		t.Helper()
		data := strings.NewReplacer(append(replace, "/etc/codeinterp/fleet/secret", secret)...).Replace(r.configMap.Data[key])
		path := filepath.Join(dir, key)
		require.NoError(t, os.WriteFile(path, []byte(data), 0o644))
		cfg, err := config.Load(path)
		require.NoError(t, err, "the chart's %s:\n%s", key, data)
		config.ApplyDefaults(cfg)
		require.NoError(t, config.Validate(cfg), "the chart's %s:\n%s", key, data)
		return cfg
	}
	gcfg := load("codeinterp.yaml")
	assert.Equal(t, config.RoleGateway, gcfg.GetRole())
	assert.Equal(t, config.StoreRedis, gcfg.GetStore())
	assert.Equal(t, []string{"redis.codeinterp.svc:6379"}, gcfg.GetRedis().GetAddresses())
	ncfg := load("sandbox.yaml", "@NODE_ADDRESS@", "test-codeinterp-sandbox-0.test-codeinterp-sandbox.ns.svc:7070",
		"@NODE_ID@", "test-codeinterp-sandbox-0")
	assert.Equal(t, "test-codeinterp-sandbox-0", ncfg.GetNodeId())
	assert.Equal(t, config.RoleSandbox, ncfg.GetRole())
	assert.Equal(t, "0.0.0.0:7070", ncfg.GetSandboxListen())
	assert.Equal(t, "test-codeinterp-sandbox-0.test-codeinterp-sandbox.ns.svc:7070", ncfg.GetNodeAddress())
	validateEnvoy(t, r)
}

// TestChartValues checks the values the chart refuses, each with a message naming the value.
func TestChartValues(t *testing.T) {
	helm := requireHelm(t)
	secret := "fleet.secret.value=a fleet secret of the chart test of 32+ bytes"
	tests := []struct {
		name string
		give []string
		want string
	}{
		{name: "unknown topology", give: []string{"topology=mesh"}, want: `topology: "mesh" is not one of sidecar, fleet`},
		{name: "fleet without Redis", give: []string{"topology=fleet", secret}, want: "fleet.redis.addresses"},
		{name: "fleet without a secret", give: []string{"topology=fleet", "fleet.redis.addresses={redis:6379}"}, want: "fleet.secret"},
		{name: "fleet with a short secret", give: []string{"topology=fleet", "fleet.redis.addresses={redis:6379}", "fleet.secret.value=short"}, want: "fleet.secret"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := []string{"template", "test", chart}
			for _, kv := range tt.give {
				args = append(args, "--set", kv)
			}
			out, err := exec.Command(helm, args...).CombinedOutput()
			require.Error(t, err, "helm template %v renders: %s", tt.give, out)
			assert.Contains(t, string(out), tt.want, "helm template %v", tt.give)
		})
	}
	// An existing Secret instead of a value: the chart makes none and mounts that one.
	r := renderWith(t, helm, "topology=fleet", "fleet.redis.addresses={redis:6379}", "fleet.secret.existingSecret=mine")
	assert.Nil(t, r.secret, "no Secret of the chart's own")
	assert.Equal(t, "mine", r.statefulSet.Spec.Template.Spec.Volumes[2].Secret.SecretName)
	assert.Nil(t, r.serviceMonitor, "the ServiceMonitor is off by default")
}

// podSecurity evaluates a pod with the Pod Security Admission's checks at level (the latest
// version) and reports whether it is allowed, and if not, why.
func podSecurity(t *testing.T, level api.Level, meta metav1.ObjectMeta, spec corev1.PodSpec) (bool, string) {
	t.Helper()
	eval, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	require.NoError(t, err)
	res := policy.AggregateCheckResults(eval.EvaluatePod(api.LevelVersion{Level: level, Version: api.LatestVersion()}, &meta, &spec))
	return res.Allowed, res.ForbiddenDetail()
}

// podmanFlags translates the securityContext of container c of pod into podman run flags, as
// TestChartPod does (hostUsers: false → a user namespace from host uid usernsBase; procMount:
// Unmasked → unmask=ALL; capabilities → --cap-add/--cap-drop; runAsUser → --user;
// readOnlyRootFilesystem → --read-only; allowPrivilegeEscalation: false → no-new-privileges), and
// its volume mounts into -v flags from the host paths of src (by volume name).
func podmanFlags(t *testing.T, pod corev1.PodSpec, c corev1.Container, src map[string]string) []string {
	t.Helper()
	var args []string
	if pod.HostUsers != nil && !*pod.HostUsers {
		idmap := fmt.Sprintf("0:%d:65536", usernsBase)
		args = append(args, "--uidmap", idmap, "--gidmap", idmap)
	}
	uid := pod.SecurityContext.RunAsUser
	sc := c.SecurityContext
	require.NotNil(t, sc, "%s's securityContext", c.Name)
	if sc.RunAsUser != nil {
		uid = sc.RunAsUser
	}
	if uid != nil {
		args = append(args, "--user", fmt.Sprintf("%d:%d", *uid, *uid))
	}
	if sc.ProcMount != nil && *sc.ProcMount == corev1.UnmaskedProcMount {
		args = append(args, "--security-opt", "unmask=ALL")
	}
	if sc.Capabilities != nil {
		for _, d := range sc.Capabilities.Drop {
			args = append(args, "--cap-drop", string(d))
		}
		for _, a := range sc.Capabilities.Add {
			args = append(args, "--cap-add", string(a))
		}
	}
	if sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem {
		args = append(args, "--read-only")
	}
	if sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation {
		args = append(args, "--security-opt", "no-new-privileges")
	}
	for _, m := range c.VolumeMounts {
		path, ok := src[m.Name]
		require.True(t, ok, "volume %s of %s", m.Name, c.Name)
		if path == "" { // an emptyDir of the container's own
			args = append(args, "--tmpfs", m.MountPath)
			continue
		}
		opt := ""
		if m.ReadOnly {
			opt = ":ro"
		}
		args = append(args, "-v", path+":"+m.MountPath+opt)
	}
	return args
}

// TestChartFleetPods runs the fleet the chart renders, as the equivalent podman runs (see
// TestChartPod for why not podman kube play): Redis; a sandbox node from the StatefulSet's pod (its
// rendered command, which writes its address into its configuration, and its securityContext
// translated), NODE_ADDRESS standing for its name under the headless Service; and the Deployment's
// gateway pod as a podman pod (startPod): the gateway container (the gateway image, non-root,
// read-only root, no capability) started first as the native sidecar is, then, once it serves, the
// Envoy container (the real Envoy 1.40 in image.envoy, envoyImage here) with its rendered command,
// securityContext and the rendered bootstrap, the two talking over the Unix socket in the sockets
// emptyDir (a host directory mounted into both), in front of the demo model. A Responses and a
// Messages conversation run code through them; the code runs on the node, whose processes include
// bubblewrap, and the gateway's do not.
func TestChartFleetPods(t *testing.T) {
	helm := requireHelm(t)
	requirePodman(t)
	redis := startRedis(t)
	model := httptest.NewServer(&demo.Model{})
	t.Cleanup(model.Close)
	modelHost, modelPort, ok := strings.Cut(strings.TrimPrefix(model.URL, "http://"), ":")
	require.True(t, ok, "demo model URL %s", model.URL)
	listen, envoyAdmin, gwAdmin := freeAddr(t), freeAddr(t), freeAddr(t)
	sandboxAddr, nodeHealth, nodeAdmin := freeAddr(t), freeAddr(t), freeAddr(t)
	envoyRepo, envoyTag, _ := strings.Cut(strings.TrimPrefix(envoyImage, "localhost/"), ":")
	r := renderWith(t, helm, "topology=fleet",
		"fleet.redis.addresses={"+redis+"}", "fleet.secret.value=a fleet secret of the chart pods test",
		"model.host="+modelHost, "model.port="+modelPort, "model.tls=false",
		"image.envoy.repository="+envoyRepo, "image.envoy.tag="+envoyTag,
		"envoy.port="+port(listen), "envoy.adminPort="+port(envoyAdmin),
		"codeinterp.config.admin_listen="+gwAdmin,
		"fleet.sandbox.port="+port(sandboxAddr),
		// On the host's network, the node listens on loopback (the pod's 0.0.0.0 is its own).
		"fleet.sandbox.config.sandbox_listen="+sandboxAddr,
		"fleet.sandbox.config.listen="+nodeHealth, "fleet.sandbox.config.admin_listen="+nodeAdmin)

	dir := t.TempDir()
	config := filepath.Join(dir, "config")
	secret := filepath.Join(dir, "secret")
	sockets := filepath.Join(dir, "sockets")
	require.NoError(t, os.Mkdir(config, 0o755))
	for k, v := range r.configMap.Data {
		require.NoError(t, os.WriteFile(filepath.Join(config, k), []byte(v), 0o644))
	}
	require.NoError(t, os.Mkdir(secret, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(secret, "secret"), r.secret.Data["secret"], 0o644))
	require.NoError(t, os.Mkdir(sockets, 0o755))
	gwPod := r.deployment.Spec.Template.Spec
	require.NoError(t, os.Chown(sockets, int(*gwPod.SecurityContext.RunAsUser), int(*gwPod.SecurityContext.RunAsUser)),
		"the emptyDir is writable by the pod's uid (fsGroup-like)")

	nodePod := r.statefulSet.Spec.Template.Spec
	nc := nodePod.Containers[0]
	nodeArgs := podmanFlags(t, nodePod, nc, map[string]string{"node-config": "", "config": config, "fleet-secret": secret})
	nodeArgs = append(nodeArgs, "--env", "POD_NAME=test-codeinterp-sandbox-0", "--env", "NODE_ADDRESS="+sandboxAddr, "--entrypoint", nc.Command[0], image)
	node := &server{name: "codeinterp-deploy-test-node-" + port(sandboxAddr), grpc: nodeHealth}
	node.run(t, append(nodeArgs, nc.Command[1:]...))
	serving, nodeToServing := node.wait(t, 60*time.Second)
	require.True(t, serving, "the sandbox node serves; logs:\n%s", node.logs(t))

	// The gateway pod: the sidecar, then (once it serves: its startupProbe) Envoy.
	start := time.Now()
	pod := startPod(t, "codeinterp-deploy-test-gwpod-"+port(listen))
	gc := gwPod.InitContainers[0]
	gwArgs := podmanFlags(t, gwPod, gc, map[string]string{"sockets": sockets, "config": config, "fleet-secret": secret})
	gwArgs = append(gwArgs, "--entrypoint", gc.Command[0], gatewayImage)
	gw := &server{name: pod + "-codeinterp", pod: pod, grpc: "unix://" + filepath.Join(sockets, "extproc.sock")}
	gw.run(t, append(gwArgs, gc.Command[1:]...))
	serving, _ = gw.wait(t, 30*time.Second)
	require.True(t, serving, "the gateway serves; logs:\n%s", gw.logs(t))

	require.Len(t, gwPod.Containers, 1)
	ec := gwPod.Containers[0]
	assert.Equal(t, envoyImage, "localhost/"+ec.Image, "the Envoy container's image")
	envoyArgs := podmanFlags(t, gwPod, ec, map[string]string{"sockets": sockets, "config": config})
	envoyArgs = append(envoyArgs, "--entrypoint", ec.Command[0], envoyImage)
	ev := &server{name: pod + "-envoy", pod: pod}
	ev.run(t, append(envoyArgs, ec.Command[1:]...))
	listening, envoyToListening := ev.waitListen(t, listen, 30*time.Second)
	require.True(t, listening, "Envoy listens; logs:\n%s", ev.logs(t))
	podToServing := time.Since(start)

	f := &front{listen: listen}
	logs, first := f.askSixTimesSeven(t)
	assert.Equal(t, "42\n", logs, "the code's logs through the chart's fleet")
	blocks := f.askMessagesBash(t, "echo $((6*7))-from-the-fleet")
	assert.Contains(t, blocks, "42-from-the-fleet", "a Messages conversation with bash through the chart's fleet")
	for _, p := range processes(t, gw.name) {
		assert.NotContains(t, p, "bwrap", "a process of the gateway")
	}
	assert.Contains(t, strings.Join(processes(t, ev.name), "\n"), "envoy", "Envoy runs in the gateway pod")
	assert.Contains(t, strings.Join(processes(t, node.name), "\n"), "bwrap", "the node runs the containers")
	assert.Contains(t, node.logs(t), logForked, "the node's start mode")
	// The node directory (pkg/store/redis): node id → the node's JSON, with its address.
	info, err := execOutput("redis-cli", "-p", port(redis), "HGET", "codeinterp:{nodes}:info", "test-codeinterp-sandbox-0")
	require.NoError(t, err)
	assert.Contains(t, info, sandboxAddr, "the node registered in Redis under its pod's name, with its address")
	t.Logf("chart fleet: node podman run to SERVING %v; gateway pod (codeinterp, then Envoy) start to SERVING and Envoy listening %v (Envoy's podman run to listening %v); first conversation %v",
		nodeToServing.Round(time.Millisecond), podToServing.Round(time.Millisecond), envoyToListening.Round(time.Millisecond), first.Round(time.Millisecond))
}
