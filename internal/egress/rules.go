// Package egress enforces a sandbox's outbound rules by domain name, which
// the address filter (package firewall) cannot do: the addresses behind a
// name change, and many names share one address. It runs two listeners on
// the sandbox network's gateway, to which the firewall redirects the DNS
// queries and the TCP connections to ports 80 and 443 of every sandbox that
// has name rules:
//
//   - a DNS server that answers only the names a sandbox may reach (asking
//     the daemon's upstream resolvers) and remembers the addresses it gave,
//     so that a name is never enough on its own to reach an address;
//   - a transparent proxy that reads the server name of each connection (the
//     TLS ClientHello's SNI, or the HTTP Host header), decides by it and by
//     the connection's original destination, and then either splices the
//     connection to that destination or resets it. TLS is terminated only
//     for the hosts a sandbox's rules transform (intercept.go).
//
// Every refusal is recorded for the sandbox (recent, bounded) and reported,
// so a user can see why a connection failed. In learn mode nothing is
// refused by name and the names a sandbox used are recorded instead.
package egress

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/sandpit-dev/sandpit/internal/firewall"
)

// ErrInvalid marks a rule the package refuses.
var ErrInvalid = errors.New("invalid egress rule")

// Reasons a connection or a DNS answer was refused, as users read them.
const (
	ReasonNotAllowed = "not in allow list"
	ReasonDenied     = "in deny list"
	ReasonPrivate    = "resolves to a private or link-local address"
	ReasonNoName     = "no server name (TLS SNI or HTTP Host) to check"
	ReasonSpoofed    = "address is not one the name resolves to"
	ReasonAddress    = "address not allowed"
)

// Rules are one sandbox's outbound rules as the proxy and the DNS server
// apply them. Domains are lower case without a final dot; "*.example.com"
// matches every name below example.com (not example.com itself).
type Rules struct {
	SandboxID    string
	Owner        string
	AllowDomains []string
	DenyDomains  []string
	AllowCIDRs   []netip.Prefix
	DenyCIDRs    []netip.Prefix
	// None refuses every name and address not allowed (egress "none", or
	// a deny list covering every address).
	None bool
	// Learn allows every name and records those used.
	Learn bool
	// Transforms are the per-host request transforms; a connection to a
	// host with one is intercepted (TLS terminated with the daemon's
	// egress CA) so that the transform can be applied.
	Transforms []HostTransform
}

// maxDomain is the longest DNS name.
const maxDomain = 253

// NormalizeDomain returns a domain rule in canonical form: lower case, no
// final dot, an optional leading "*." wildcard, labels of letters, digits,
// '-' and '_'. An address or CIDR is not a domain (the caller tries those
// first).
func NormalizeDomain(s string) (string, error) {
	d := strings.TrimSuffix(strings.ToLower(strings.TrimSpace(s)), ".")
	body, wild := strings.CutPrefix(d, "*.")
	if body == "" || len(d) > maxDomain {
		return "", fmt.Errorf("%w: %q is not a domain name", ErrInvalid, s)
	}
	labels := strings.Split(body, ".")
	for _, l := range labels {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return "", fmt.Errorf("%w: %q is not a domain name", ErrInvalid, s)
		}
		for _, c := range l {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				if c == '*' {
					return "", fmt.Errorf("%w: %q: a wildcard is only allowed as the first label (\"*.example.com\")", ErrInvalid, s)
				}
				return "", fmt.Errorf("%w: %q is not a domain name", ErrInvalid, s)
			}
		}
	}
	if _, err := netip.ParseAddr(body); err == nil {
		return "", fmt.Errorf("%w: %q is an address, not a domain name", ErrInvalid, s)
	}
	if wild && len(labels) < 2 {
		// "*.com" would allow a whole top-level domain: almost certainly
		// a mistake, and the same as allowing everything.
		return "", fmt.Errorf("%w: %q: a wildcard needs at least two labels after it (\"*.example.com\")", ErrInvalid, s)
	}
	return d, nil
}

// matchDomain reports whether name (lower case, no final dot) matches one
// of the patterns.
func matchDomain(patterns []string, name string) bool {
	for _, p := range patterns {
		if suffix, ok := strings.CutPrefix(p, "*"); ok {
			if strings.HasSuffix(name, suffix) && len(name) > len(suffix) {
				return true
			}
		} else if p == name {
			return true
		}
	}
	return false
}

// nameVerdict is what the rules say of a name alone.
type nameVerdict int

const (
	// nameUnlisted: neither list names it; addresses decide.
	nameUnlisted nameVerdict = iota
	nameAllowed
	nameDenied
)

// name judges a name by the domain lists. Allow wins over deny, as it does
// for addresses (and on E2B), so "deny *.example.com, allow
// api.example.com" works.
func (r *Rules) name(n string) nameVerdict {
	switch {
	case r.Learn:
		return nameAllowed
	case matchDomain(r.AllowDomains, n):
		return nameAllowed
	case matchDomain(r.DenyDomains, n):
		return nameDenied
	}
	return nameUnlisted
}

// resolvable reports whether the DNS server answers a name, and if not,
// why: an unlisted name resolves unless the sandbox may reach no address
// by default.
func (r *Rules) resolvable(n string) (bool, string) {
	switch r.name(n) {
	case nameAllowed:
		return true, ""
	case nameDenied:
		return false, ReasonDenied
	}
	if r.None {
		return false, ReasonNotAllowed
	}
	return true, ""
}

// The ranges a sandbox does not reach unless allowed are the firewall's:
// the proxy decides for the connections the firewall hands it, and must
// not judge an address differently.
var (
	blocked   = firewall.Blocked
	linkLocal = firewall.LinkLocal
)

func inAny(ps []netip.Prefix, a netip.Addr) bool {
	return slices.ContainsFunc(ps, func(p netip.Prefix) bool { return p.Contains(a) })
}

// private reports an address the sandbox may not reach through a name:
// link-local always, a blocked range unless allowed by the operator or the
// sandbox's own allow list.
func (r *Rules) private(a netip.Addr, operator []netip.Prefix) bool {
	if linkLocal.Contains(a) {
		return true
	}
	if !inAny(blocked, a) {
		return false
	}
	return !inAny(operator, a) && !inAny(r.AllowCIDRs, a)
}

// address judges a destination by the address rules alone, as the firewall
// would have for a sandbox without name rules.
func (r *Rules) address(a netip.Addr, operator []netip.Prefix) bool {
	if linkLocal.Contains(a) {
		return false
	}
	if inAny(r.AllowCIDRs, a) {
		return true
	}
	if inAny(r.DenyCIDRs, a) || r.None {
		return false
	}
	return !inAny(blocked, a) || inAny(operator, a)
}
