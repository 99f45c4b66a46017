package responses

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/pkg/schema"
)

// A container's network_policy reaches admission whole (secrets included), under the name
// the tool gave it; the tool echoed in the answer keeps the policy without its secrets; the
// upstream never sees it.
func TestNetworkPolicyRead(t *testing.T) {
	const policy = `{"type":"allowlist","allowed_domains":["api.example.com"],"domain_secrets":[{"domain":"api.example.com","name":"T","value":"s3cr3t-value"}]}`
	tests := []struct {
		name      string
		give      string
		wantParam string
		echo      func(x *exchange) []byte // the tool echoed in the answer
		member    string                   // the echoed tool's container member
	}{
		{"code_interpreter", `{"model":"m","input":"x","tools":[{"type":"code_interpreter","container":{"type":"auto","network_policy":` + policy + `}}]}`,
			"tools[0].container.network_policy", func(x *exchange) []byte { return x.Request().Tool }, "container"},
		{"shell", `{"model":"m","input":"x","tools":[{"type":"function","name":"f","parameters":{}},{"type":"shell","environment":{"type":"container_auto","network_policy":` + policy + `}}]}`,
			"tools[1].environment.network_policy", func(x *exchange) []byte { return x.shell.tool }, "environment"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sx, err := Surface{}.NewExchange([]byte(tt.give), schema.Options{})
			require.NoError(t, err, "exchange of %s", tt.give)
			x := sx.(*exchange)
			rq := x.Request()
			assert.JSONEq(t, policy, string(rq.NetworkPolicy), "the policy of %s", tt.give)
			assert.Equal(t, tt.wantParam, rq.NetworkPolicyParam, "its name in errors")
			echo := tt.echo(x)
			assert.Equal(t, `["api.example.com"]`, gjson.GetBytes(echo, tt.member+".network_policy.allowed_domains").Raw, "the echo keeps the allowlist: %s", echo)
			assert.Equal(t, "allowlist", gjson.GetBytes(echo, tt.member+".network_policy.type").String(), "the echo keeps the type: %s", echo)
			assert.NotContains(t, string(echo), "s3cr3t-value", "the echo has no secret")
			assert.False(t, gjson.GetBytes(echo, tt.member+".network_policy.domain_secrets").Exists(), "the echo has no domain_secrets: %s", echo)
			assert.NotContains(t, string(rq.Body), "s3cr3t-value", "the upstream never sees the secret")
		})
	}
}

// Repeated members carry no secret past the echo: whichever member counts, none of the
// secrets is echoed.
func TestNetworkPolicyEchoRepeatedMembers(t *testing.T) {
	const secrets = `"domain_secrets":[{"domain":"a.example","name":"T","value":"s3cr3t-value"}]`
	tests := []struct {
		name string
		give string
	}{
		{"container twice", `{"type":"code_interpreter","container":{"type":"auto","network_policy":{"type":"allowlist","allowed_domains":["a.example"],` + secrets + `}},` +
			`"container":{"type":"auto","network_policy":{"type":"allowlist","allowed_domains":["a.example"]}}}`},
		{"network_policy twice", `{"type":"code_interpreter","container":{"type":"auto","network_policy":{"type":"allowlist","allowed_domains":["a.example"],` + secrets + `},` +
			`"network_policy":{"type":"allowlist","allowed_domains":["a.example"],` + secrets + `}}}`},
		{"domain_secrets twice", `{"type":"code_interpreter","container":{"type":"auto","network_policy":{"type":"allowlist","allowed_domains":["a.example"],` + secrets + `,` + secrets + `}}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := `{"model":"m","input":"x","tools":[` + tt.give + `]}`
			sx, err := Surface{}.NewExchange([]byte(body), schema.Options{})
			require.NoError(t, err, "exchange of %s", body)
			echo := sx.Request().Tool
			assert.NotContains(t, string(echo), "s3cr3t-value", "the echo of %s", tt.give)
			assert.Equal(t, "code_interpreter", gjson.GetBytes(echo, "type").String(), "the echo keeps the tool: %s", echo)
		})
	}
}

// The model is told which domains a container with an allowlist reaches, in place of the
// default description's "no internet access"; without a policy the description is the default.
func TestNetworkPolicyDescription(t *testing.T) {
	describe := func(t *testing.T, container string) string {
		t.Helper()
		body := `{"model":"m","input":"x","tools":[{"type":"code_interpreter","container":` + container + `}]}`
		sx, err := Surface{}.NewExchange([]byte(body), schema.Options{})
		require.NoError(t, err, "exchange of %s", body)
		return gjson.GetBytes(sx.Request().Body, `tools.#(name=="code_interpreter").description`).String()
	}
	plain := describe(t, `{"type":"auto"}`)
	assert.Contains(t, plain, "There is no internet access.", "no policy: the default")
	allow := describe(t, `{"type":"auto","network_policy":{"type":"allowlist","allowed_domains":["api.example.com","*.example.org"]}}`)
	assert.NotContains(t, allow, "no internet access", "an allowlist: not the default sentence")
	assert.Contains(t, allow, "Internet access: only to api.example.com, *.example.org, through the HTTP(S) proxy", "the allowlist told")
	off := describe(t, `{"type":"auto","network_policy":{"type":"disabled"}}`)
	assert.Equal(t, plain, off, "a disabled policy: the default")
}
