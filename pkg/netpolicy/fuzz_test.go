package netpolicy

import (
	"errors"
	"strings"
	"testing"

	"github.com/codeinterp/codeinterp/pkg/schema"
)

// FuzzParse: on any input Parse returns a policy or a client error, never both, never
// panics; an error names the member it is about (under the param given) and its message
// never holds a secret's value; an allowlist policy has domains.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`{"type":"disabled"}`,
		`{"type":"allowlist","allowed_domains":["api.example.com"]}`,
		`{"type":"allowlist","allowed_domains":["a.b"],"domain_secrets":[{"domain":"a.b","name":"T","value":"v"}]}`,
		`{"type":"allowlist","allowed_domains":["a.b"],"domain_secrets":[{"domain":"a.b","name":"T","value":7}]}`,
		`{"type":"allowlist","allowed_domains":["a.b"],"x":1}`,
		`null`, `[]`, `{`,
	} {
		f.Add([]byte(s), "zz-secret-zz")
	}
	f.Fuzz(func(t *testing.T, raw []byte, value string) {
		p, err := Parse(raw, "np")
		if err != nil {
			var re *schema.RequestError
			if !errors.As(err, &re) {
				t.Fatalf("Parse(%q): error %v is not a request error", raw, err)
			}
			if p != nil {
				t.Fatalf("Parse(%q): a policy and an error", raw)
			}
			if re.Param != "np" && !strings.HasPrefix(re.Param, "np.") {
				t.Fatalf("Parse(%q): param %q is not under np", raw, re.Param)
			}
			return
		}
		if p != nil && len(p.AllowedDomains) == 0 {
			t.Fatalf("Parse(%q): an allowlist without domains", raw)
		}
		// The value of a secret the input holds never shows in a refusal of it.
		if len(value) < 8 || strings.ContainsAny(value, "\"\\") || !strings.HasPrefix(string(raw), "{") {
			return
		}
		bad := strings.Replace(string(raw), "{", `{"domain_secrets":[{"value":"`+value+`"}],`, 1)
		if _, err := Parse([]byte(bad), "np"); err != nil && strings.Contains(err.Error(), value) {
			t.Fatalf("Parse(%q): the refusal %q holds the secret's value", bad, err)
		}
	})
}
