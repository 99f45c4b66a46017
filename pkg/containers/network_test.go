package containers

import (
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/pkg/sandbox"
)

// TestSandboxStoreNetworkPolicyShown: retrieve and list show a container's network_policy as
// it was created, its allowlist without the secrets (kept in the Manager's registry, not
// remembered by the handler).
func TestSandboxStoreNetworkPolicyShown(t *testing.T) {
	f, _, _ := managerFixture(t, sandbox.ManagerConfig{}, Config{})
	const value = "sk-the-real-value"
	status, body := post(t, f, "sk-a", "/v1/containers", "application/json",
		`{"name":"x","network_policy":{"type":"allowlist","allowed_domains":["api.example.com","*.example.org"],`+
			`"domain_secrets":[{"domain":"api.example.com","name":"API_TOKEN","value":"`+value+`"}]}}`)
	require.Equal(t, http.StatusOK, status, body)
	id := gjson.Get(body, "id").String()
	status, body = post(t, f, "sk-a", "/v1/containers", "application/json", `{"name":"y"}`)
	require.Equal(t, http.StatusOK, status, body)
	plain := gjson.Get(body, "id").String()

	get := func(path string) string {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, f.srv.URL+path, nil)
		require.NoError(t, err, "request %s", path)
		req.Header.Set("Authorization", "Bearer sk-a")
		resp, err := f.srv.Client().Do(req)
		require.NoError(t, err, "GET %s", path)
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		require.Equal(t, http.StatusOK, resp.StatusCode, "GET %s: %s", path, out)
		assert.NotContains(t, string(out), value, "GET %s shows no secret", path)
		return string(out)
	}
	const shown = `{"type":"allowlist","allowed_domains":["api.example.com","*.example.org"]}`
	body = get("/v1/containers/" + id)
	assert.JSONEq(t, shown, gjson.Get(body, "network_policy").Raw, "retrieve: %s", body)
	body = get("/v1/containers/" + plain)
	assert.JSONEq(t, `{"type":"disabled"}`, gjson.Get(body, "network_policy").Raw, "retrieve without network: %s", body)
	body = get("/v1/containers")
	assert.JSONEq(t, shown, gjson.Get(body, `data.#(id=="`+id+`").network_policy`).Raw, "list: %s", body)
	assert.JSONEq(t, `{"type":"disabled"}`, gjson.Get(body, `data.#(id=="`+plain+`").network_policy`).Raw, "list without network: %s", body)
}
