package deploy_test

import (
	"bytes"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/pod-security-admission/api"
	"sigs.k8s.io/yaml"

	"github.com/codeinterp/codeinterp/envoy"
	"github.com/codeinterp/codeinterp/pkg/config"
)

var update = flag.Bool("update", false, "rewrite testdata/chart*.golden.yaml from helm template")

const chart = "../../deploy/helm/codeinterp"

// requireHelm skips the test unless CODEINTERP_DEPLOY_TEST is set, and then fails it if helm is
// not in bin/tools (make deploy-test installs it) and returns its path.
func requireHelm(t *testing.T) string {
	t.Helper()
	if os.Getenv("CODEINTERP_DEPLOY_TEST") == "" {
		t.Skip("the deployment tests run with CODEINTERP_DEPLOY_TEST=1 (make deploy-test)")
	}
	helm, err := filepath.Abs("../../bin/tools/helm")
	require.NoError(t, err)
	_, err = os.Stat(helm)
	require.NoError(t, err, "helm (make deploy-test installs it in bin/tools)")
	return helm
}

// rendered is the chart's manifests, each decoded strictly into its Kubernetes API type (the
// ServiceMonitor into the Prometheus Operator's). Kinds a chart renders more than once are by name.
type rendered struct {
	deployment     *appsv1.Deployment
	statefulSet    *appsv1.StatefulSet // fleet
	configMap      *corev1.ConfigMap
	secret         *corev1.Secret // fleet
	services       map[string]*corev1.Service
	pdbs           map[string]*policyv1.PodDisruptionBudget
	networkPolicy  *networkingv1.NetworkPolicy  // fleet
	serviceMonitor *monitoringv1.ServiceMonitor // serviceMonitor.enabled
}

// render runs helm template on the chart with the default values and the values files given,
// compares the output with the golden file and decodes every manifest strictly (an unknown field
// is an error).
func render(t *testing.T, helm, golden string, values ...string) rendered {
	t.Helper()
	args := []string{"template", "test", chart}
	for _, v := range values {
		args = append(args, "-f", v)
	}
	out, err := exec.Command(helm, args...).CombinedOutput()
	require.NoError(t, err, "helm template: %s", out)
	if *update {
		require.NoError(t, os.WriteFile(golden, out, 0o644))
	}
	want, err := os.ReadFile(golden)
	require.NoError(t, err, "the golden file (go test -run TestChart ./test/deploy/ -update writes it)")
	assert.Equal(t, string(want), string(out), "helm template differs from %s (-update rewrites it)", golden)
	return decode(t, out)
}

// renderWith runs helm template with the values set (--set each) and decodes the manifests.
func renderWith(t *testing.T, helm string, set ...string) rendered {
	t.Helper()
	args := []string{"template", "test", chart}
	for _, kv := range set {
		args = append(args, "--set", kv)
	}
	out, err := exec.Command(helm, args...).CombinedOutput()
	require.NoError(t, err, "helm template: %s", out)
	return decode(t, out)
}

// decode decodes each manifest of out strictly into its Kubernetes API type.
func decode(t *testing.T, out []byte) rendered {
	t.Helper()
	r := rendered{services: map[string]*corev1.Service{}, pdbs: map[string]*policyv1.PodDisruptionBudget{}}
	for _, doc := range strings.Split(string(out), "\n---\n") {
		if strings.TrimSpace(strings.TrimPrefix(doc, "---")) == "" {
			continue
		}
		var meta struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		require.NoError(t, yaml.Unmarshal([]byte(doc), &meta))
		var into any
		switch meta.Kind {
		case "Deployment":
			require.Nil(t, r.deployment, "one Deployment")
			r.deployment = &appsv1.Deployment{}
			into = r.deployment
		case "StatefulSet":
			require.Nil(t, r.statefulSet, "one StatefulSet")
			r.statefulSet = &appsv1.StatefulSet{}
			into = r.statefulSet
		case "Secret":
			require.Nil(t, r.secret, "one Secret")
			r.secret = &corev1.Secret{}
			into = r.secret
		case "NetworkPolicy":
			require.Nil(t, r.networkPolicy, "one NetworkPolicy")
			r.networkPolicy = &networkingv1.NetworkPolicy{}
			into = r.networkPolicy
		case "ServiceMonitor":
			require.Nil(t, r.serviceMonitor, "one ServiceMonitor")
			r.serviceMonitor = &monitoringv1.ServiceMonitor{}
			into = r.serviceMonitor
		case "ConfigMap":
			r.configMap = &corev1.ConfigMap{}
			into = r.configMap
		case "Service":
			svc := &corev1.Service{}
			r.services[meta.Metadata.Name] = svc
			into = svc
		case "PodDisruptionBudget":
			pdb := &policyv1.PodDisruptionBudget{}
			r.pdbs[meta.Metadata.Name] = pdb
			into = pdb
		default:
			t.Fatalf("unexpected kind %q in:\n%s", meta.Kind, doc)
		}
		require.NoError(t, yaml.UnmarshalStrict([]byte(doc), into), "strict decode of the %s", meta.Kind)
	}
	require.NotNil(t, r.deployment, "a Deployment")
	require.NotNil(t, r.configMap, "a ConfigMap")
	require.NotNil(t, r.services["test-codeinterp"], "Envoy's Service")
	require.NotNil(t, r.pdbs["test-codeinterp"], "the Envoy pods' PodDisruptionBudget")
	return r
}

// TestChart lints and renders deploy/helm/codeinterp, checks the pod it renders (codeinterp a native
// sidecar with the measured securityContext, Envoy with no capability on a read-only root), and
// checks the configurations it carries: the server's with the server's own validation, Envoy's with
// the project's bootstrap checks and with the real Envoy 1.40 (--mode validate).
func TestChart(t *testing.T) {
	helm := requireHelm(t)
	out, err := exec.Command(helm, "lint", "--strict", chart).CombinedOutput()
	require.NoError(t, err, "helm lint: %s", out)
	r := render(t, helm, "testdata/chart.golden.yaml")
	assert.Nil(t, r.serviceMonitor, "a ServiceMonitor only when enabled")
	assert.Nil(t, r.statefulSet, "sandbox nodes only in a fleet")

	pod := r.deployment.Spec.Template.Spec
	require.NotNil(t, pod.HostUsers, "hostUsers")
	assert.False(t, *pod.HostUsers, "hostUsers")
	require.Len(t, pod.InitContainers, 1)
	ci := pod.InitContainers[0]
	require.NotNil(t, ci.RestartPolicy, "the sidecar's restartPolicy")
	assert.Equal(t, corev1.ContainerRestartPolicyAlways, *ci.RestartPolicy, "codeinterp is a native sidecar")
	require.NotNil(t, ci.SecurityContext)
	require.NotNil(t, ci.SecurityContext.ProcMount)
	assert.Equal(t, corev1.UnmaskedProcMount, *ci.SecurityContext.ProcMount)
	assert.ElementsMatch(t, []corev1.Capability{"SYS_ADMIN", "NET_ADMIN", "SYS_PTRACE"}, ci.SecurityContext.Capabilities.Add,
		"the capabilities measured in docs/deploy.md")
	assert.Nil(t, ci.SecurityContext.Privileged, "not privileged")
	require.NotNil(t, ci.StartupProbe)
	assert.Equal(t, "/readyz", ci.StartupProbe.HTTPGet.Path)
	require.Len(t, pod.Containers, 1)
	ev := pod.Containers[0]
	require.NotNil(t, ev.SecurityContext)
	assert.Equal(t, []corev1.Capability{"ALL"}, ev.SecurityContext.Capabilities.Drop, "Envoy drops every capability")
	assert.Empty(t, ev.SecurityContext.Capabilities.Add)
	require.NotNil(t, ev.SecurityContext.ReadOnlyRootFilesystem)
	assert.True(t, *ev.SecurityContext.ReadOnlyRootFilesystem, "Envoy's root filesystem is read-only")
	require.NotNil(t, pod.SecurityContext.SeccompProfile)
	assert.Equal(t, corev1.SeccompProfileTypeRuntimeDefault, pod.SecurityContext.SeccompProfile.Type)
	allowed, _ := podSecurity(t, api.LevelBaseline, r.deployment.Spec.Template.ObjectMeta, pod)
	assert.False(t, allowed, "the sidecar pod (SYS_ADMIN) is at the privileged level")

	dir := t.TempDir()
	server := filepath.Join(dir, "codeinterp.yaml")
	require.NoError(t, os.WriteFile(server, []byte(r.configMap.Data["codeinterp.yaml"]), 0o644))
	cfg, err := config.Load(server)
	require.NoError(t, err, "the chart's server configuration:\n%s", r.configMap.Data["codeinterp.yaml"])
	config.ApplyDefaults(cfg)
	require.NoError(t, config.Validate(cfg), "the chart's server configuration")
	assert.Equal(t, "unix:///var/run/codeinterp/extproc.sock", cfg.GetListen())
	validateEnvoy(t, r)
}

// validateEnvoy checks the chart's Envoy bootstrap with the project's checks and with the real
// Envoy 1.40 (--mode validate).
func validateEnvoy(t *testing.T, r rendered) {
	t.Helper()
	b, err := envoy.Parse([]byte(r.configMap.Data["envoy.yaml"]))
	require.NoError(t, err, "the chart's Envoy bootstrap")
	require.NoError(t, envoy.Validate(b))
	_, err = envoy.FindIngress(b)
	require.NoError(t, err)
	bootstrap := filepath.Join(t.TempDir(), "envoy.yaml")
	require.NoError(t, os.WriteFile(bootstrap, []byte(r.configMap.Data["envoy.yaml"]), 0o644))
	var logs bytes.Buffer
	cmd := exec.Command(envoyBin(), "--mode", "validate", "-c", bootstrap)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	require.NoError(t, cmd.Run(), "envoy --mode validate: %s", logs.String())
}

// envoyBin is the Envoy of make deps, or $ENVOY_BIN.
func envoyBin() string {
	if bin := os.Getenv("ENVOY_BIN"); bin != "" {
		return bin
	}
	return "../../.venv/bin/envoy"
}
