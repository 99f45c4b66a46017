package egress

import (
	"net/netip"
)

// metadata are cloud instance metadata addresses: never a destination, whatever the operator
// allowed (AWS, GCP, Azure and OpenStack use 169.254.169.254; AWS's IPv6 one; Alibaba's).
var metadata = []netip.Addr{
	netip.MustParseAddr("169.254.169.254"),
	netip.MustParseAddr("fd00:ec2::254"),
	netip.MustParseAddr("100.100.100.200"),
}

// special are ranges that are no public destination beyond what netip's predicates name:
// "this network", shared address space (carrier NAT, often a cluster's), IETF protocol
// assignments, documentation, benchmarking, reserved and broadcast; IPv6 discard,
// documentation and ORCHID.
var special = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("192.0.2.0/24"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("198.51.100.0/24"),
	netip.MustParsePrefix("203.0.113.0/24"),
	netip.MustParsePrefix("240.0.0.0/4"),
	netip.MustParsePrefix("100::/64"),
	netip.MustParsePrefix("2001::/23"),
	netip.MustParsePrefix("2001:db8::/32"),
}

// Prefixes that embed an IPv4 address, which is what such an address reaches.
var (
	nat64  = netip.MustParsePrefix("64:ff9b::/96")
	nat64l = netip.MustParsePrefix("64:ff9b:1::/48")
	sixTo4 = netip.MustParsePrefix("2002::/16")
)

// embedded returns the IPv4 address a (unmapped) IPv6 address reaches through NAT64 or 6to4,
// and whether it embeds one.
func embedded(a netip.Addr) (netip.Addr, bool) {
	b := a.As16()
	switch {
	case nat64.Contains(a), nat64l.Contains(a):
		return netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]}), true
	case sixTo4.Contains(a):
		return netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]}), true
	}
	return netip.Addr{}, false
}

// public reports whether a is an ordinary public unicast destination.
func public(a netip.Addr) bool {
	if !a.IsValid() || a.Zone() != "" {
		return false
	}
	if a.IsLoopback() || a.IsPrivate() || a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() ||
		a.IsInterfaceLocalMulticast() || a.IsMulticast() || a.IsUnspecified() || !a.IsGlobalUnicast() {
		return false
	}
	for _, p := range special {
		if p.Contains(a) {
			return false
		}
	}
	return true
}

// isMetadata reports whether a is a cloud metadata address.
func isMetadata(a netip.Addr) bool {
	for _, m := range metadata {
		if a == m {
			return true
		}
	}
	return false
}

// destinationAllowed reports whether the proxy may dial a: a public address, or one in a
// network the operator allowed; a metadata address never. An IPv4-mapped IPv6 address is its
// IPv4 address; one embedding an IPv4 address (NAT64, 6to4) must pass for that address too.
func destinationAllowed(a netip.Addr, allow []netip.Prefix) bool {
	a = a.Unmap()
	if v4, ok := embedded(a); ok && !destinationAllowed(v4, allow) {
		return false
	}
	if isMetadata(a) {
		return false
	}
	if public(a) {
		return true
	}
	if a.Zone() != "" {
		return false
	}
	for _, p := range allow {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
