package deploy_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	configv1 "github.com/codeinterp/codeinterp/api/codeinterp/config/v1"
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
	assert.Contains(t, strings.Join(nc.Command, " "), `s|@NODE_ADDRESS@|$NODE_ADDRESS|`, "the node writes its address into its configuration")
	assert.Contains(t, strings.Join(nc.Command, " "), "exec /usr/local/bin/codeinterp --config /run/codeinterp/sandbox.yaml")

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
	ncfg := load("sandbox.yaml", "@NODE_ADDRESS@", "test-codeinterp-sandbox-0.test-codeinterp-sandbox.ns.svc:7070")
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
