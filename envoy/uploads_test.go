package envoy_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/codeinterp/codeinterp/envoy"
	"github.com/codeinterp/codeinterp/test/e2e/harness"
)

// TestRouteAnthropicUploads: the uploads' routes come right after each cfile_ route, as copies
// of it (codeinterp_api, ext_proc off), before the catch-all routes; the result is a bootstrap
// Envoy takes; twice is an error.
func TestRouteAnthropicUploads(t *testing.T) {
	b, err := envoy.Load("envoy.yaml")
	require.NoError(t, err, "load envoy.yaml")
	require.NoError(t, envoy.RouteAnthropicUploads(b), "route the uploads")
	in, err := envoy.FindIngress(b)
	require.NoError(t, err, "ingress")
	var order []string
	for _, r := range in.HCM.GetRouteConfig().GetVirtualHosts()[0].GetRoutes() {
		m := r.GetMatch().GetPath() + r.GetMatch().GetPrefix()
		order = append(order, m)
		switch m {
		case "/v1/files", "/v1/files/file_", "/analyst/v1/files", "/analyst/v1/files/file_":
			assert.Equal(t, "codeinterp_api", r.GetRoute().GetCluster(), "%s goes to codeinterp", m)
			assert.NotNil(t, r.GetTypedPerFilterConfig()["envoy.filters.http.ext_proc"], "%s: no ext_proc exchange", m)
		}
	}
	for _, base := range []string{"", "/analyst"} {
		at := slices.Index(order, base+"/v1/files/cfile_")
		require.GreaterOrEqual(t, at, 0, "the %s cfile_ route: %v", base, order)
		assert.Equal(t, []string{base + "/v1/files", base + "/v1/files/file_"}, order[at+1:at+3], "after the %s cfile_ route", base)
		assert.Less(t, at, slices.Index(order, base+"/v1/"), "before %s/v1/", base)
	}
	assert.Error(t, envoy.RouteAnthropicUploads(b), "the routes are there already")

	bin := harness.RequireEnvoy(t)
	js, err := protojson.Marshal(b)
	require.NoError(t, err, "encode")
	path := filepath.Join(t.TempDir(), "bootstrap.json")
	require.NoError(t, os.WriteFile(path, js, 0o600), "write")
	out, err := exec.Command(bin, "--mode", "validate", "-c", path, "--log-level", "error").CombinedOutput()
	assert.NoError(t, err, "envoy --mode validate:\n%s", out)
}
