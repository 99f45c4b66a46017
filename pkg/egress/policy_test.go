package egress

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestParseRule(t *testing.T) {
	tests := []struct {
		give         string
		wantDomain   string
		wantWildcard bool
		wantErr      bool
	}{
		{give: "api.example.com", wantDomain: "api.example.com"},
		{give: "API.Example.COM.", wantDomain: "api.example.com"},
		{give: "*.example.com", wantDomain: "example.com", wantWildcard: true},
		{give: "localhost", wantDomain: "localhost"},
		{give: "*.com", wantErr: true},
		{give: "*", wantErr: true},
		{give: "", wantErr: true},
		{give: "a..b", wantErr: true},
		{give: "-a.com", wantErr: true},
		{give: "exa mple.com", wantErr: true},
		{give: "ex*.com", wantErr: true},
		{give: "a.*.com", wantErr: true},
		{give: "127.0.0.1", wantErr: true},
		{give: "[::1]", wantErr: true},
		{give: "::1", wantErr: true},
		{give: "2130706433", wantErr: true},
		{give: "0x7f.1", wantErr: true},
		{give: "a.0x7f000001", wantErr: true},
		{give: "bücher.de", wantErr: true},
		{give: "xn--bcher-kva.de", wantDomain: "xn--bcher-kva.de"},
		{give: "example.com:443", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			d, w, err := ParseRule(tt.give)
			if tt.wantErr {
				assert.Error(t, err, "rule %q", tt.give)
				return
			}
			assert.NoError(t, err, "rule %q", tt.give)
			assert.Equal(t, tt.wantDomain, d, "rule %q", tt.give)
			assert.Equal(t, tt.wantWildcard, w, "rule %q", tt.give)
		})
	}
}

func TestRulesAllow(t *testing.T) {
	r, err := compile([]string{"api.example.com", "*.corp.example"})
	assert.NoError(t, err)
	tests := []struct {
		give string
		want bool
	}{
		{"api.example.com", true},
		{"example.com", false},
		{"x.api.example.com", false},
		{"evilapi.example.com", false},
		{"a.corp.example", true},
		{"a.b.corp.example", true},
		{"corp.example", false},
		{"evilcorp.example", false},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, r.allows(tt.give), "host %q", tt.give)
	}
}

func TestCheckPolicyTooMany(t *testing.T) {
	domains := make([]string, maxDomains+1)
	for i := range domains {
		domains[i] = "example.com"
	}
	assert.ErrorIs(t, CheckPolicy(Policy{AllowedDomains: domains}), ErrTooManyDomains)
	var re *RuleError
	assert.ErrorAs(t, CheckPolicy(Policy{AllowedDomains: []string{"10.0.0.1"}}), &re)
}

func TestDestinationAllowed(t *testing.T) {
	loop := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	link := []netip.Prefix{netip.MustParsePrefix("169.254.0.0/16"), netip.MustParsePrefix("fd00::/8")}
	tests := []struct {
		give  string
		allow []netip.Prefix
		want  bool
	}{
		{"93.184.215.14", nil, true},
		{"2606:2800:21f:cb07:6820:80da:af6b:8b2c", nil, true},
		{"127.0.0.1", nil, false},
		{"127.0.0.1", loop, true},
		{"::ffff:127.0.0.1", nil, false},
		{"::ffff:127.0.0.1", loop, true},
		{"::1", nil, false},
		{"::1", loop, false},
		{"10.1.2.3", nil, false},
		{"172.16.0.1", nil, false},
		{"192.168.1.1", nil, false},
		{"100.64.0.1", nil, false},
		{"0.0.0.0", nil, false},
		{"::", nil, false},
		{"169.254.169.254", nil, false},
		{"169.254.169.254", link, false},
		{"169.254.1.1", link, true},
		{"fd00:ec2::254", link, false},
		{"100.100.100.200", []netip.Prefix{netip.MustParsePrefix("100.64.0.0/10")}, false},
		{"fe80::1", nil, false},
		{"fc00::1", nil, false},
		{"224.0.0.1", nil, false},
		{"255.255.255.255", nil, false},
		{"64:ff9b::7f00:1", nil, false},
		{"64:ff9b::a9fe:a9fe", nil, false},
		{"2002:7f00:1::1", nil, false},
		{"2002:5db8:d70e::1", nil, true},
		{"192.0.2.1", nil, false},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, destinationAllowed(netip.MustParseAddr(tt.give), tt.allow), "address %s allow %v", tt.give, tt.allow)
	}
}

func FuzzParseRule(f *testing.F) {
	for _, s := range []string{"api.example.com", "*.example.com", "127.0.0.1", "[::1]", "a..b", "*.", "0x7f.1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, rule string) {
		d, w, err := ParseRule(rule)
		if err != nil {
			return
		}
		// A rule's domain is canonical: parsing it again gives itself, and it is never an address.
		d2, w2, err := ParseRule(d)
		if err != nil || d2 != d || w2 {
			t.Fatalf("rule %q gave %q (wildcard %v), which parses as %q, %v", rule, d, w, d2, err)
		}
		if _, err := netip.ParseAddr(d); err == nil {
			t.Fatalf("rule %q gave an address %q", rule, d)
		}
	})
}

func TestCheckWithin(t *testing.T) {
	org := []string{"api.example.com", "*.corp.example"}
	tests := []struct {
		give []string
		org  []string
		want bool
	}{
		{[]string{"api.example.com"}, org, true},
		{[]string{"API.example.com."}, org, true},
		{[]string{"a.corp.example", "*.b.corp.example", "*.corp.example"}, org, true},
		{[]string{"example.com"}, org, false},
		{[]string{"*.example.com"}, org, false},
		{[]string{"corp.example"}, org, false},
		{[]string{"api.example.com", "evil.test"}, org, false},
		{[]string{"anything.test", "*.wild.test"}, nil, true},
		{[]string{"10.0.0.1"}, nil, false},
	}
	for _, tt := range tests {
		err := CheckWithin(tt.give, tt.org)
		assert.Equal(t, tt.want, err == nil, "domains %v within %v: %v", tt.give, tt.org, err)
	}
}
