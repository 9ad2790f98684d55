// This file holds the policy vocabulary: egress postures, the blocked and
// link-local ranges, CIDR parsing, a sandbox's Policy and the intercept target.

package firewall

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// Egress is an outbound posture: the daemon's default or one sandbox's.
type Egress string

const (
	// EgressPublic allows public addresses (the default).
	EgressPublic Egress = "public"
	// EgressNone allows nothing beyond explicit allow CIDRs.
	EgressNone Egress = "none"
)

// ParseEgress accepts "public" and "none"; "" is public.
func ParseEgress(s string) (Egress, error) {
	switch Egress(s) {
	case "", EgressPublic:
		return EgressPublic, nil
	case EgressNone:
		return EgressNone, nil
	}
	return "", fmt.Errorf("egress %q: want public or none", s)
}

// Blocked are the destinations a sandbox does not reach unless allowed: the
// RFC 1918 ranges, CGNAT, loopback, "this network", multicast and reserved
// space. Link-local (169.254.0.0/16) is refused even before that and cannot
// be allowed at all.
var Blocked = []netip.Prefix{
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.168.0.0/16"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("224.0.0.0/4"),
	netip.MustParsePrefix("240.0.0.0/4"),
}

// LinkLocal is never reachable from a sandbox: cloud metadata services live
// there and hand out the machine's credentials.
var LinkLocal = netip.MustParsePrefix("169.254.0.0/16")

// ErrInvalid marks a policy or configuration the firewall refuses.
var ErrInvalid = errors.New("invalid network policy")

// ParseCIDR accepts an IPv4 CIDR or a bare IPv4 address (taken as /32). The
// result is masked, so "10.1.2.3/8" is 10.0.0.0/8. IPv6 is refused: sandbox
// networks have no IPv6.
func ParseCIDR(s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	var p netip.Prefix
	if strings.Contains(s, "/") {
		var err error
		if p, err = netip.ParsePrefix(s); err != nil {
			return p, fmt.Errorf("%w: %q is not a CIDR", ErrInvalid, s)
		}
	} else {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return p, fmt.Errorf("%w: %q is not an IP address or CIDR (domain names are not supported)", ErrInvalid, s)
		}
		p = netip.PrefixFrom(a, a.BitLen())
	}
	if !p.Addr().Is4() {
		return p, fmt.Errorf("%w: %q is not IPv4 (sandbox networks are IPv4 only)", ErrInvalid, s)
	}
	return p.Masked(), nil
}

// Policy is one sandbox's own egress policy. The zero Policy follows the
// daemon's defaults and installs no rule of its own.
type Policy struct {
	// Egress none refuses every destination not in Allow. Public (or "")
	// leaves the sandbox to the daemon's default.
	Egress Egress
	// Allow CIDRs are reachable even when private or denied (but never
	// link-local, the host, or other sandboxes). When the daemon's own
	// egress is none they only fall back to the daemon's rules.
	Allow []netip.Prefix
	// Deny CIDRs are refused unless also allowed.
	Deny []netip.Prefix
	// Intercept sends the sandbox's TCP to ports 80 and 443 to the egress
	// proxy and its DNS to the DNS server (Config.Intercept), whatever
	// address it was for; the proxy and the DNS server then decide by
	// domain name. Egress, Allow and Deny do not apply to that traffic,
	// since it is addressed to the host once rewritten; they still govern
	// everything else.
	Intercept bool
}

// IsZero reports a policy that adds nothing to the daemon's.
func (p Policy) IsZero() bool {
	return (p.Egress == "" || p.Egress == EgressPublic) && len(p.Allow) == 0 && len(p.Deny) == 0 && !p.Intercept
}

// Intercept is where the web and DNS traffic of sandboxes whose policy
// intercepts goes: the daemon's egress proxy and DNS server, listening on a
// host address on the bridge (the network's gateway).
type Intercept struct {
	// Addr is the host address both listen on.
	Addr netip.Addr
	// ProxyPort is the egress proxy's TCP port; TCP to ports 80 and 443
	// goes there.
	ProxyPort int
	// DNSPort is the DNS server's port, on UDP and TCP alike; port 53 goes
	// there.
	DNSPort int
	// PreviewPort, when set, is the daemon's preview proxy port: TCP to it
	// on Addr goes to the egress proxy too, which the sandbox's DNS sent
	// there for a preview host (a preview domain with a port in it, as in
	// a drop-in E2B_DOMAIN), so that rules apply to it as to 443.
	PreviewPort int
}

// PortRange is an inclusive range of host ports sandboxes may connect to on
// the host (the proxy, the TCP forwards).
type PortRange struct{ Lo, Hi int }
