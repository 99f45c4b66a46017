// Package netpolicy reads the native network_policy object (issue 31) wherever a client gives
// one: POST /v1/containers, the code_interpreter tool's auto container and the shell tool's
// container_auto environment. One parser, so that the three say the same of the same object:
//
//	{"type": "disabled"}
//	{"type": "allowlist", "allowed_domains": ["api.example.com"],
//	 "domain_secrets": [{"domain": "api.example.com", "name": "API_TOKEN", "value": "…"}]}
//
// It checks the object's shape only. Whether the server allows the policy (network access
// enabled, the domains within the operator's allowlist, valid domain rules and secrets) is the
// sandbox backend's to say (sandbox.ErrInvalidSpec).
package netpolicy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/codeinterp/codeinterp/pkg/sandbox"
	"github.com/codeinterp/codeinterp/pkg/schema"
)

// body is network_policy as the client sends it.
type body struct {
	Type           *string  `json:"type"`
	AllowedDomains []string `json:"allowed_domains"`
	DomainSecrets  []struct {
		Domain *string `json:"domain"`
		Name   *string `json:"name"`
		Value  *string `json:"value"`
	} `json:"domain_secrets"`
}

// Parse reads the network_policy object raw, named param in errors ("network_policy",
// "tools[0].container.network_policy"), and returns the policy it asks for: nil for type
// disabled (or a null policy). A mistake is a *[schema.RequestError], a 400 naming the member
// at fault; its message never holds a secret's value.
func Parse(raw []byte, param string) (*sandbox.NetworkPolicy, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var b body
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil {
		if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			p := param + "." + strings.Trim(f, `"`)
			return nil, &schema.RequestError{Message: "Unknown parameter: '" + p + "'.", Param: p, Code: "unknown_parameter"}
		}
		// Not the decoder's message: it may quote a value, and a value may be a secret.
		return nil, &schema.RequestError{Message: fmt.Sprintf("Invalid '%s': expected an object with a string 'type', a list of strings 'allowed_domains' and a list of objects 'domain_secrets' of strings 'domain', 'name' and 'value'.", param),
			Param: param, Code: "invalid_type"}
	}
	switch typ := b.Type; {
	case typ == nil || *typ == "":
		return nil, &schema.RequestError{Message: "Missing required parameter: '" + param + ".type'.", Param: param + ".type", Code: "missing_required_parameter"}
	case *typ == "disabled":
		return nil, nil
	case *typ != "allowlist":
		return nil, &schema.RequestError{Message: fmt.Sprintf("Invalid '%s.type': expected one of 'disabled', 'allowlist', got '%s'.", param, *typ),
			Param: param + ".type", Code: "invalid_value"}
	}
	if len(b.AllowedDomains) == 0 {
		return nil, &schema.RequestError{Message: "Missing required parameter: '" + param + ".allowed_domains'.", Param: param + ".allowed_domains", Code: "missing_required_parameter"}
	}
	p := &sandbox.NetworkPolicy{AllowedDomains: b.AllowedDomains}
	for i, s := range b.DomainSecrets {
		for _, f := range []struct {
			name string
			v    *string
		}{{"domain", s.Domain}, {"name", s.Name}, {"value", s.Value}} {
			if f.v == nil {
				sub := fmt.Sprintf("%s.domain_secrets[%d].%s", param, i, f.name)
				return nil, &schema.RequestError{Message: "Missing required parameter: '" + sub + "'.", Param: sub, Code: "missing_required_parameter"}
			}
		}
		p.DomainSecrets = append(p.DomainSecrets, sandbox.DomainSecret{Domain: *s.Domain, Name: *s.Name, Value: *s.Value})
	}
	return p, nil
}

// Shown is a container's network_policy as the API shows it: its type and allowlist, never
// its secrets, as natively.
type Shown struct {
	Type           string   `json:"type"`
	AllowedDomains []string `json:"allowed_domains,omitempty"`
}

// Show returns how a container whose allowlist is allowed shows its network_policy: type
// disabled for a nil allowlist.
func Show(allowed []string) Shown {
	if allowed == nil {
		return Shown{Type: "disabled"}
	}
	return Shown{Type: "allowlist", AllowedDomains: allowed}
}
