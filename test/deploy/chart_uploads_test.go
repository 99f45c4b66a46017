package deploy_test

import (
	"os/exec"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/codeinterp/codeinterp/envoy"
)

// TestChartAnthropicUploads: with codeinterp.config.anthropic_files.own_uploads the chart's
// Envoy sends Anthropic's uploads (POST and GET /v1/files, the file_ ids) to codeinterp, as
// envoyconf -anthropic-uploads does; without it they stay with the model; the fleet topology,
// whose gateways cannot share the uploads, refuses the switch.
func TestChartAnthropicUploads(t *testing.T) {
	helm := requireHelm(t)
	routes := func(r rendered) map[string]string {
		b, err := envoy.Parse([]byte(r.configMap.Data["envoy.yaml"]))
		require.NoError(t, err, "the chart's Envoy bootstrap")
		in, err := envoy.FindIngress(b)
		require.NoError(t, err, "the ingress")
		out := map[string]string{}
		for _, vh := range in.HCM.GetRouteConfig().GetVirtualHosts() {
			for _, rt := range vh.GetRoutes() {
				out[rt.GetMatch().GetPath()+rt.GetMatch().GetPrefix()] = rt.GetRoute().GetCluster()
			}
		}
		return out
	}
	off := routes(renderWith(t, helm))
	assert.NotContains(t, off, "/v1/files", "by default the uploads are the model's")
	assert.NotContains(t, off, "/v1/files/file_", "by default the uploads are the model's")

	r := renderWith(t, helm, "codeinterp.config.anthropic_files.own_uploads=true")
	on := routes(r)
	assert.Equal(t, "codeinterp_api", on["/v1/files"], "POST and GET /v1/files go to codeinterp")
	assert.Equal(t, "codeinterp_api", on["/v1/files/file_"], "the uploads' ids go to codeinterp")
	assert.Equal(t, "codeinterp_api", on["/v1/files/cfile_"], "the container files still do")
	var server struct {
		AnthropicFiles struct {
			OwnUploads bool `json:"own_uploads"`
		} `json:"anthropic_files"`
	}
	require.NoError(t, yaml.Unmarshal([]byte(r.configMap.Data["codeinterp.yaml"]), &server), "the server's config")
	assert.True(t, server.AnthropicFiles.OwnUploads, "the server is told it owns them")
	validateEnvoy(t, r)

	out, err := exec.Command(helm, "template", "test", chart, "--set", "topology=fleet", "--set", "fleet.redis.addresses={redis:6379}",
		"--set", "fleet.secret.existingSecret=mine", "--set", "codeinterp.config.anthropic_files.own_uploads=true").CombinedOutput()
	require.Error(t, err, "the fleet with own_uploads renders: %s", out)
	assert.Contains(t, string(out), "codeinterp.config.anthropic_files.own_uploads", "the refusal names the value")
}
