// Package firewall keeps sandboxes from reaching what they must not: the host,
// link-local addresses (cloud metadata), private ranges and each other. It
// owns a few iptables chains per sandbox network, hooked into INPUT (traffic
// from a sandbox to any of the host's own addresses) and DOCKER-USER (traffic
// the host forwards for a sandbox), plus one chain per sandbox that has an
// egress policy of its own, and one chain in the nat table that redirects
// the web and DNS traffic of the sandboxes whose policy asks for it.
//
// Every change is one iptables-restore run with --noflush and one
// transaction per table it touches, so a table's rule set is never seen
// half-applied. Where a change touches both filter and nat, the two commits
// are ordered so that a sandbox's web traffic goes from its old rules
// straight to its new ones (see Apply). Every operation is idempotent:
// Ensure re-asserts the network's chains on every start, Apply replaces a
// sandbox's rules, Remove and Uninstall remove what is there and nothing
// else.
//
// The chains of one network (named after it) look like this:
//
//	PREROUTING  -i BR -j SANDPIT-<net>-NAT   (nat table)
//	INPUT       -i BR -j SANDPIT-<net>-IN
//	DOCKER-USER -i BR -j SANDPIT-<net>-FWD   (and FORWARD too: see jumps)
//	SANDPIT-<net>-NAT  (nat table) per sandbox that intercepts, marked like its dispatch rule:
//	                   -s IP TCP 80,443 DNAT to the egress proxy; -s IP UDP and TCP 53 DNAT to
//	                   the DNS server (both on the Intercept address); nothing else is rewritten
//	SANDPIT-<net>-REJ  TCP reset, else ICMP port unreachable (every refusal jumps here)
//	SANDPIT-<net>-IN   established/related RETURN; the proxy and TCP-forward ports RETURN, on the
//	                   host addresses they are bound to only, and the egress proxy's and DNS
//	                   server's ports on the Intercept address, one set per daemon sharing the
//	                   network (marked with its instance id); the rest REJECT
//	SANDPIT-<net>-FWD  to another sandbox REJECT; to link-local -j LL (REJECT but DNS to a resolver);
//	                   then one rule per sandbox with a policy: -s IP -g SANDPIT-<net>-<sandbox>;
//	                   last -g SANDPIT-<net>-DEF
//	SANDPIT-<net>-<sb> allow CIDRs RETURN (allow wins over deny, as on E2B); deny CIDRs REJECT;
//	                   egress none REJECT, else -g SANDPIT-<net>-DEF
//	SANDPIT-<net>-DEF  DNS to the host's resolvers RETURN; operator allow CIDRs RETURN;
//	                   private ranges REJECT; egress none REJECT
//
// A RETURN from a chain entered by goto (-g) returns to DOCKER-USER, so an
// allowed packet goes on through Docker's own rules (which accept traffic
// leaving a bridge and keep networks apart); nothing here ever ACCEPTs.
// IPv6 from the bridge is refused outright, since sandbox networks are IPv4
// only (ip6tables: SANDPIT-<net>-V6 from INPUT and FORWARD). Without
// ip6tables the daemon refuses to start while IPv6 is enabled on the bridge,
// since a sandbox's link-local IPv6 address would reach the host unfiltered.
//
// A sandbox whose policy intercepts has its web traffic (TCP 80 and 443)
// and its DNS (port 53, whatever the destination, so that a resolver the
// sandbox picks itself is no way around the allow list) rewritten to the
// daemon's egress proxy and DNS server, which enforce domain-name allow
// lists that CIDRs cannot express. The rewrite is a DNAT in nat PREROUTING,
// keyed on the sandbox's source address: it happens before routing, so the
// rewritten packet is addressed to the host and meets INPUT and IN (whose
// RETURN rules for the two listeners admit it), never FORWARD and FWD, while
// everything else the sandbox sends still meets FWD unchanged. The kernel
// decides a connection's translation on its first packet only, so a
// connection opened before the rules changed keeps its old destination.
//
// Several daemons (different data directories) may share one network: the
// chains are the network's, the IN port rules and the per-sandbox dispatch
// and NAT rules are each daemon's own (marked with its instance id), and a
// daemon re-asserting or pruning the chains keeps the other daemons' rules.
package firewall

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
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
}

// PortRange is an inclusive range of host ports sandboxes may connect to on
// the host (the proxy, the TCP forwards).
type PortRange struct{ Lo, Hi int }

// Config describes one sandbox network.
type Config struct {
	// Network names the network; chain names derive from it.
	Network string
	// Bridge is the network's bridge interface on the host.
	Bridge string
	// Egress is the daemon's default posture for every sandbox.
	Egress Egress
	// Allow are CIDRs every sandbox reaches even though they are private.
	Allow []netip.Prefix
	// HostPorts are the TCP ports of the host sandboxes may connect to: the
	// preview proxy and the TCP-forward pool, so that one sandbox reaches
	// another's exposed port the way anyone else does.
	HostPorts []PortRange
	// HostAddrs are the host addresses those ports are reachable on: where
	// the proxy and the pool are bound (the bridge's gateway when they are
	// bound to every address). The same ports on any other host address
	// stay refused; with none, no host port is reachable at all.
	HostAddrs []netip.Addr
	// Instance names the daemon that installs the rules (its data
	// directory's instance id), so that daemons sharing the network keep
	// each other's rules.
	Instance string
	// DNS are the resolvers Docker's embedded DNS forwards sandboxes'
	// queries to (the host's, from /etc/resolv.conf): it sends them from
	// the sandbox's own network namespace, so port 53 of these addresses
	// stays reachable under the daemon's default policy even when they are
	// private or link-local. A sandbox with egress none has no DNS (but
	// one that intercepts has the DNS server's).
	DNS []netip.Addr
	// Intercept is the target of the sandboxes whose policy intercepts
	// (nil: the daemon runs no egress proxy, and such a policy is refused).
	Intercept *Intercept
	Logger    *slog.Logger
}

// Runner runs one command with optional stdin and returns its combined
// output; tests replace it to see the commands without root.
type Runner func(ctx context.Context, stdin []byte, name string, args ...string) ([]byte, error)

func execRunner(ctx context.Context, stdin []byte, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return out, nil
}

// Firewall manages the rules of one sandbox network.
type Firewall struct {
	cfg    Config
	log    *slog.Logger
	run    Runner
	prefix string // "SANDPIT-<8 hex>-"
	ipv6   bool   // ip6tables is available
	// bridgeIPv6 reports whether IPv6 is enabled on the bridge (tests
	// replace it).
	bridgeIPv6 func(bridge string) bool

	// mu serialises every change: each one reads the FWD chain and rewrites
	// part of it, so two at once could drop each other's rules.
	mu sync.Mutex
}

// New checks the configuration and that iptables is installed.
func New(cfg Config) (*Firewall, error) {
	return NewWithRunner(cfg, nil)
}

// NewWithRunner is New with another command runner (nil: run the commands).
func NewWithRunner(cfg Config, run Runner) (*Firewall, error) {
	if cfg.Network == "" || cfg.Bridge == "" {
		return nil, fmt.Errorf("%w: network and bridge names are required", ErrInvalid)
	}
	if len(cfg.Bridge) > 15 || strings.ContainsAny(cfg.Bridge, " \t\n\"'/") {
		return nil, fmt.Errorf("%w: bridge name %q", ErrInvalid, cfg.Bridge)
	}
	eg, err := ParseEgress(string(cfg.Egress))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	cfg.Egress = eg
	for _, p := range cfg.Allow {
		if p.Overlaps(LinkLocal) {
			return nil, fmt.Errorf("%w: allow %s: link-local addresses are never reachable from a sandbox", ErrInvalid, p)
		}
	}
	for _, r := range cfg.DNS {
		if !r.Is4() {
			return nil, fmt.Errorf("%w: DNS server %s is not IPv4", ErrInvalid, r)
		}
	}
	for _, a := range cfg.HostAddrs {
		if !a.Is4() {
			return nil, fmt.Errorf("%w: host address %s is not IPv4", ErrInvalid, a)
		}
	}
	if strings.ContainsAny(cfg.Instance, " \t\n\"'@") {
		return nil, fmt.Errorf("%w: instance %q", ErrInvalid, cfg.Instance)
	}
	for _, r := range cfg.HostPorts {
		if r.Lo < 1 || r.Hi > 65535 || r.Lo > r.Hi {
			return nil, fmt.Errorf("%w: host port range %d-%d", ErrInvalid, r.Lo, r.Hi)
		}
	}
	if ic := cfg.Intercept; ic != nil {
		// The kernel drops a packet from the bridge rewritten to a loopback
		// address (a martian, unless route_localnet is on), and 0.0.0.0 is
		// no destination: the listeners must be on a real host address.
		if !ic.Addr.Is4() || ic.Addr.IsLoopback() || ic.Addr.IsUnspecified() {
			return nil, fmt.Errorf("%w: intercept address %s: want a host IPv4 address on the bridge", ErrInvalid, ic.Addr)
		}
		for _, port := range []int{ic.ProxyPort, ic.DNSPort} {
			if port < 1 || port > 65535 {
				return nil, fmt.Errorf("%w: intercept port %d", ErrInvalid, port)
			}
		}
		// A copy, so that the caller changing its value later cannot move
		// the target under rules already rendered.
		c := *ic
		cfg.Intercept = &c
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	f := &Firewall{cfg: cfg, log: cfg.Logger, run: run, prefix: ChainPrefix(cfg.Network), bridgeIPv6: bridgeHasIPv6}
	if f.run == nil {
		f.run = execRunner
		for _, bin := range []string{"iptables", "iptables-restore"} {
			if _, err := exec.LookPath(bin); err != nil {
				return nil, fmt.Errorf("%s not found: install the iptables package (sandbox isolation needs it): %w", bin, err)
			}
		}
		_, err6 := exec.LookPath("ip6tables-restore")
		f.ipv6 = err6 == nil
	} else {
		f.ipv6 = true
	}
	return f, nil
}

// ChainPrefix is the prefix of every chain of a network: "SANDPIT-" and
// eight hex digits of the network name's hash, short enough that a
// sandbox's chain name fits iptables' 28 characters.
func ChainPrefix(network string) string {
	h := sha256.Sum256([]byte(network))
	return "SANDPIT-" + hex.EncodeToString(h[:4]) + "-"
}

// SandboxChain is the chain holding one sandbox's policy.
func (f *Firewall) SandboxChain(sandboxID string) string {
	h := sha256.Sum256([]byte(sandboxID))
	return f.prefix + hex.EncodeToString(h[:5])
}

func (f *Firewall) chain(suffix string) string { return f.prefix + suffix }

// fixedChains are the network's own chains, as opposed to per-sandbox ones.
// NAT lives in the nat table, where no per-sandbox chain is ever deleted;
// it is listed all the same so that no code path deleting a sandbox's
// chain can ever take it for one.
func (f *Firewall) fixedChains() []string {
	return []string{f.chain("IN"), f.chain("FWD"), f.chain("DEF"), f.chain("REJ"), f.chain("LL"), f.chain("NAT")}
}

// The iptables tables the firewall writes to.
const (
	filterTable = "filter"
	natTable    = "nat"
)

// Comment marks the dispatch rule (and the NAT rules) of one sandbox, so
// removal is exact; the daemon that made it follows an "@", so that another
// daemon sharing the network leaves it alone.
func (f *Firewall) Comment(sandboxID string) string {
	if f.cfg.Instance == "" {
		return "sandpit:" + sandboxID
	}
	return "sandpit:" + sandboxID + "@" + f.cfg.Instance
}

// instanceComment marks a daemon's own IN rules.
func instanceComment(instance string) string { return "sandpit-instance:" + instance }

// bridgeHasIPv6 reads the kernel's IPv6 switch of an interface: a missing
// file means IPv6 is off in the kernel (or the bridge is not there yet).
func bridgeHasIPv6(bridge string) bool {
	b, err := os.ReadFile("/proc/sys/net/ipv6/conf/" + bridge + "/disable_ipv6")
	return err == nil && strings.TrimSpace(string(b)) == "0"
}

// fixedFWD is how many rules precede the per-sandbox dispatch rules in FWD.
const fixedFWD = 2

// jump is one rule in a chain sandpit does not own.
type jump struct {
	v6    bool
	table string
	chain string
	spec  []string
}

// line is the jump as an iptables-restore rule body (the comment quoted).
func (j jump) line() string {
	parts := make([]string, len(j.spec))
	for i, p := range j.spec {
		if strings.Contains(p, " ") {
			p = `"` + p + `"`
		}
		parts[i] = p
	}
	return strings.Join(parts, " ")
}

// jumps hooks the network's chains into the built-in ones. Forwarded
// traffic is hooked twice: from DOCKER-USER, which Docker keeps ahead of its
// own rules, and straight from FORWARD, because Docker re-arranges
// DOCKER-USER by deleting its jump and inserting it again whenever any
// network is created; in between, only a jump of our own stands in front of
// Docker's accept rules. FWD decides the same way however often it runs.
// The NAT chain is hooked at the top of nat PREROUTING, ahead of Docker's
// jump for published ports, so that an intercepted sandbox's web traffic
// is redirected even when it is addressed to a port Docker publishes.
func (f *Firewall) jumps() []jump {
	c := "sandpit network " + f.cfg.Network
	hook := func(v6 bool, table, parent, target string) jump {
		return jump{v6: v6, table: table, chain: parent, spec: []string{"-i", f.cfg.Bridge, "-m", "comment", "--comment", c, "-j", target}}
	}
	j := []jump{
		hook(false, filterTable, "INPUT", f.chain("IN")),
		hook(false, filterTable, "FORWARD", f.chain("FWD")),
		hook(false, filterTable, "DOCKER-USER", f.chain("FWD")),
		hook(false, natTable, "PREROUTING", f.chain("NAT")),
	}
	if f.ipv6 {
		j = append(j, hook(true, filterTable, "INPUT", f.chain("V6")), hook(true, filterTable, "FORWARD", f.chain("V6")))
	}
	return j
}

// reject refuses at once rather than dropping, so a blocked connection
// fails fast instead of hanging until its timeout. The REJ chain answers TCP
// with a reset, since the kernel rate-limits the ICMP errors it would
// otherwise send (a sandbox retrying in a loop would see timeouts).
func (f *Firewall) reject() string { return "-j " + f.chain("REJ") }

// GlobalRules renders the network's own chains (IN, FWD head and tail, DEF)
// as iptables-restore lines, given the dispatch rules to keep in FWD.
func (f *Firewall) GlobalRules(dispatch []string) []string {
	return f.globalRules(dispatch, nil)
}

// ownPortRules are this daemon's RETURN rules in IN: its ports, on the
// addresses they are bound to, and the egress proxy's and DNS server's
// ports on the Intercept address.
func (f *Firewall) ownPortRules() []string {
	var (
		mark  string
		lines []string
	)
	if f.cfg.Instance != "" {
		mark = " -m comment --comment " + instanceComment(f.cfg.Instance)
		// A rule without a target matches and does nothing: it marks the
		// network as used by this daemon even when none of its ports is
		// reachable from sandboxes (a loopback bind).
		lines = append(lines, "-A "+f.chain("IN")+mark)
	}
	if ports := portList(f.cfg.HostPorts); ports != "" {
		for _, a := range f.cfg.HostAddrs {
			lines = append(lines, "-A "+f.chain("IN")+" -d "+a.String()+"/32 -p tcp -m multiport --dports "+ports+mark+" -j RETURN")
		}
	}
	// A packet DNATed in PREROUTING meets INPUT with its new destination,
	// the listener's address and port, so these rules are what admits the
	// intercepted traffic; without them IN would refuse it like any other
	// connection to the host. They admit a sandbox that does not intercept
	// too, if it connects to the listeners itself: the listeners decide by
	// the sandbox's address either way.
	if ic := f.cfg.Intercept; ic != nil {
		in, d := "-A "+f.chain("IN"), " -d "+ic.Addr.String()+"/32"
		proxy, dns := strconv.Itoa(ic.ProxyPort), strconv.Itoa(ic.DNSPort)
		lines = append(lines,
			in+d+" -p tcp --dport "+proxy+mark+" -j RETURN",
			in+d+" -p udp --dport "+dns+mark+" -j RETURN",
			in+d+" -p tcp --dport "+dns+mark+" -j RETURN",
		)
	}
	return lines
}

// globalRules is GlobalRules keeping others, the IN rules of other daemons
// sharing the network.
func (f *Firewall) globalRules(dispatch, others []string) []string {
	in, fwd, def, rej, ll := f.chain("IN"), f.chain("FWD"), f.chain("DEF"), f.chain("REJ"), f.chain("LL")
	lines := []string{
		":" + rej + " - [0:0]",
		":" + ll + " - [0:0]",
		":" + in + " - [0:0]",
		":" + fwd + " - [0:0]",
		":" + def + " - [0:0]",
		"-A " + rej + " -p tcp -j REJECT --reject-with tcp-reset",
		"-A " + rej + " -j REJECT",
		// Replies to connections the host opened (the daemon reaching the
		// agent, the proxy reaching a port) come back through INPUT.
		"-A " + in + " -m conntrack --ctstate ESTABLISHED,RELATED -j RETURN",
	}
	lines = append(lines, f.ownPortRules()...)
	lines = append(lines, others...)
	lines = append(lines,
		"-A "+in+" "+f.reject(),
		"-A "+fwd+" -o "+f.cfg.Bridge+" "+f.reject(),
		"-A "+fwd+" -d "+LinkLocal.String()+" -j "+ll,
	)
	lines = append(lines, dispatch...)
	lines = append(lines, "-A "+fwd+" -g "+def)
	// Link-local is refused but for DNS to a link-local resolver, which
	// RETURNs to FWD and so still meets the sandbox's own policy.
	for _, r := range f.cfg.DNS {
		if LinkLocal.Contains(r) {
			lines = append(lines, dnsRules(ll, r, "-j RETURN")...)
		}
	}
	lines = append(lines, "-A "+ll+" "+f.reject())
	for _, r := range f.cfg.DNS {
		if !LinkLocal.Contains(r) {
			lines = append(lines, dnsRules(def, r, "-j RETURN")...)
		}
	}
	for _, p := range f.cfg.Allow {
		lines = append(lines, "-A "+def+" -d "+p.String()+" -j RETURN")
	}
	for _, p := range Blocked {
		lines = append(lines, "-A "+def+" -d "+p.String()+" "+f.reject())
	}
	if f.cfg.Egress == EgressNone {
		lines = append(lines, "-A "+def+" "+f.reject())
	}
	return lines
}

// SandboxRules renders one sandbox's chain (declared, hence flushed, first).
func (f *Firewall) SandboxRules(sandboxID string, p Policy) []string {
	c := f.SandboxChain(sandboxID)
	lines := []string{":" + c + " - [0:0]"}
	for _, a := range p.Allow {
		if f.cfg.Egress == EgressNone {
			// The daemon's "none" is a ceiling a sandbox cannot lift: its
			// allow list only falls back to the daemon's own rules.
			lines = append(lines, "-A "+c+" -d "+a.String()+" -g "+f.chain("DEF"))
		} else {
			lines = append(lines, "-A "+c+" -d "+a.String()+" -j RETURN")
		}
	}
	for _, d := range p.Deny {
		lines = append(lines, "-A "+c+" -d "+d.String()+" "+f.reject())
	}
	if p.Egress == EgressNone {
		lines = append(lines, "-A "+c+" "+f.reject())
	} else {
		lines = append(lines, "-A "+c+" -g "+f.chain("DEF"))
	}
	return lines
}

// NATRules renders the rules that redirect one sandbox's web and DNS
// traffic to the Intercept target, for appending to the NAT chain: none
// unless the policy intercepts and the network has a target. They are
// marked with the sandbox's comment, so that they are found, kept and
// removed the way its dispatch rule is.
func (f *Firewall) NATRules(sandboxID string, ip netip.Addr, p Policy) []string {
	ic := f.cfg.Intercept
	if !p.Intercept || ic == nil {
		return nil
	}
	head := "-A " + f.chain("NAT") + " -s " + ip.String() + "/32"
	mark := " -m comment --comment " + f.Comment(sandboxID)
	proxy := " -j DNAT --to-destination " + netip.AddrPortFrom(ic.Addr, uint16(ic.ProxyPort)).String()
	dns := " -j DNAT --to-destination " + netip.AddrPortFrom(ic.Addr, uint16(ic.DNSPort)).String()
	return []string{
		head + " -p tcp -m multiport --dports 80,443" + mark + proxy,
		head + " -p udp --dport 53" + mark + dns,
		head + " -p tcp --dport 53" + mark + dns,
	}
}

func (f *Firewall) dispatchRule(sandboxID string, ip netip.Addr) string {
	return "-s " + ip.String() + "/32 -m comment --comment " + f.Comment(sandboxID) + " -g " + f.SandboxChain(sandboxID)
}

// dnsRules match DNS (UDP and TCP port 53) to one resolver.
func dnsRules(chain string, r netip.Addr, target string) []string {
	return []string{
		"-A " + chain + " -d " + r.String() + "/32 -p udp --dport 53 " + target,
		"-A " + chain + " -d " + r.String() + "/32 -p tcp --dport 53 " + target,
	}
}

func portList(rs []PortRange) string {
	var parts []string
	for _, r := range rs {
		if r.Lo == r.Hi {
			parts = append(parts, strconv.Itoa(r.Lo))
		} else {
			parts = append(parts, strconv.Itoa(r.Lo)+":"+strconv.Itoa(r.Hi))
		}
	}
	return strings.Join(parts, ",")
}

// section is one table's part of an iptables-restore input.
type section struct {
	table string
	lines []string
}

// restore applies lines to one table in one transaction.
func (f *Firewall) restore(ctx context.Context, v6 bool, table string, lines []string) error {
	return f.restoreTables(ctx, v6, section{table, lines})
}

// restoreTables applies several tables' lines with one iptables-restore, in
// the order given. Each table is committed as one transaction (both back
// ends commit table by table), so the order is what a packet can see in
// between. Sections without lines are left out; with none, nothing runs.
func (f *Firewall) restoreTables(ctx context.Context, v6 bool, secs ...section) error {
	var b strings.Builder
	for _, sec := range secs {
		if len(sec.lines) == 0 {
			continue
		}
		b.WriteString("*" + sec.table + "\n")
		for _, l := range sec.lines {
			b.WriteString(l)
			b.WriteByte('\n')
		}
		b.WriteString("COMMIT\n")
	}
	if b.Len() == 0 {
		return nil
	}
	bin := "iptables-restore"
	if v6 {
		bin = "ip6tables-restore"
	}
	_, err := f.run(ctx, []byte(b.String()), bin, "--noflush", "--wait")
	return err
}

// iptables runs iptables (ip6tables) on a table; the filter table is
// iptables' default and is not named.
func (f *Firewall) iptables(ctx context.Context, v6 bool, table string, args ...string) ([]byte, error) {
	bin := "iptables"
	if v6 {
		bin = "ip6tables"
	}
	pre := []string{"--wait"}
	if table != filterTable {
		pre = append(pre, "-t", table)
	}
	return f.run(ctx, nil, bin, append(pre, args...)...)
}

// listChain returns the rules of a chain as -S prints them ("-A CHAIN ...");
// a missing chain has none.
func (f *Firewall) listChain(ctx context.Context, v6 bool, table, chain string) ([]string, error) {
	out, err := f.iptables(ctx, v6, table, "-S", chain)
	if err != nil {
		// The message for a missing chain differs between the legacy and
		// nf_tables back ends (the latter may even call it "incompatible"),
		// so ask the whole table whether the chain exists.
		all, lerr := f.iptables(ctx, v6, table, "-S")
		if lerr == nil && !slices.Contains(strings.Split(string(all), "\n"), "-N "+chain) {
			return nil, nil
		}
		return nil, err
	}
	var rules []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "-A ") {
			rules = append(rules, l)
		}
	}
	return rules, nil
}

// dispatchRules returns FWD's per-sandbox rules, keyed by the sandbox id in
// their comment.
func (f *Firewall) dispatchRules(ctx context.Context) (map[string][]string, error) {
	return f.sandboxTagged(ctx, filterTable, f.chain("FWD"))
}

// natRules returns the NAT chain's per-sandbox rules, keyed by the sandbox
// id in their comment.
func (f *Firewall) natRules(ctx context.Context) (map[string][]string, error) {
	return f.sandboxTagged(ctx, natTable, f.chain("NAT"))
}

// sandboxTagged returns the rules of a chain that carry a sandbox's
// comment, keyed by the sandbox id.
func (f *Firewall) sandboxTagged(ctx context.Context, table, chain string) (map[string][]string, error) {
	rules, err := f.listChain(ctx, false, table, chain)
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for _, r := range rules {
		if id, ok := commentID(r); ok {
			out[id] = append(out[id], r)
		}
	}
	return out, nil
}

// commentID extracts the sandbox id of a rule carrying Comment(id); -S
// prints the comment bare or in double quotes.
func commentID(rule string) (string, bool) {
	id, _, ok := ruleOwner(rule)
	return id, ok
}

// ruleOwner extracts the sandbox id and the daemon instance of a dispatch or
// NAT rule ("" for a rule written before instances were recorded).
func ruleOwner(rule string) (id, instance string, ok bool) {
	_, after, ok := strings.Cut(rule, "--comment ")
	if !ok {
		return "", "", false
	}
	c, _, _ := strings.Cut(after, " ")
	c = strings.Trim(c, `"`)
	c, ok = strings.CutPrefix(c, "sandpit:")
	if !ok {
		return "", "", false
	}
	id, instance, _ = strings.Cut(c, "@")
	return id, instance, true
}

// foreign reports a rule another daemon sharing the network made.
func (f *Firewall) foreign(instance string) bool {
	return instance != "" && instance != f.cfg.Instance
}

// ruleInstance returns the daemon instance a rule's comment names
// ("sandpit-instance:<id>"), and whether it names one.
func ruleInstance(rule string) (string, bool) {
	_, after, ok := strings.Cut(rule, "--comment ")
	if !ok {
		return "", false
	}
	c, _, _ := strings.Cut(after, " ")
	return strings.CutPrefix(strings.Trim(c, `"`), "sandpit-instance:")
}

// otherPortRules returns the IN rules other daemons sharing the network
// installed for their ports.
func (f *Firewall) otherPortRules(ctx context.Context) ([]string, error) {
	rules, err := f.listChain(ctx, false, filterTable, f.chain("IN"))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, r := range rules {
		inst, ok := ruleInstance(r)
		if ok && inst != f.cfg.Instance {
			out = append(out, r)
		}
	}
	return out, nil
}

// ruleSource is the -s address of a dispatch or NAT rule.
func ruleSource(rule string) string { return strings.TrimSuffix(ruleArg(rule, "-s"), "/32") }

// ruleArg is the argument of an option in a rule as -S prints it.
func ruleArg(rule, opt string) string {
	f := strings.Fields(rule)
	for i := 0; i+1 < len(f); i++ {
		if f[i] == opt {
			return f[i+1]
		}
	}
	return ""
}

// Ensure installs (or re-asserts) the network's chains and the jumps into
// INPUT, DOCKER-USER and nat PREROUTING, keeping the per-sandbox rules
// already in place (FWD's dispatch rules, the NAT chain's redirections): a
// restarted daemon must not open a window in which a sandbox denied egress
// has it, or in which an intercepted sandbox reaches the web past the
// proxy. Prune then drops the rules of sandboxes that are gone.
func (f *Firewall) Ensure(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.iptables(ctx, false, filterTable, "-S", "DOCKER-USER"); err != nil {
		return fmt.Errorf("chain DOCKER-USER missing (is Docker managing iptables?): %w", err)
	}
	disp, err := f.dispatchRules(ctx)
	if err != nil {
		return err
	}
	var keep []string
	for _, id := range sortedKeys(disp) {
		keep = append(keep, disp[id]...)
	}
	nat, err := f.natRules(ctx)
	if err != nil {
		return err
	}
	// Declaring the NAT chain flushes it; its sandboxes' rules go back in
	// the same transaction, so none is ever missing.
	natLines := []string{":" + f.chain("NAT") + " - [0:0]"}
	for _, id := range sortedKeys(nat) {
		natLines = append(natLines, nat[id]...)
	}
	others, err := f.otherPortRules(ctx)
	if err != nil {
		return err
	}
	if err := f.restoreTables(ctx, false, section{filterTable, f.globalRules(keep, others)}, section{natTable, natLines}); err != nil {
		return fmt.Errorf("install chains: %w", err)
	}
	if f.ipv6 {
		v6 := f.chain("V6")
		if err := f.restore(ctx, true, filterTable, []string{
			":" + v6 + " - [0:0]",
			"-A " + v6 + " -m conntrack --ctstate ESTABLISHED,RELATED -j RETURN",
			"-A " + v6 + " -j REJECT",
		}); err != nil {
			if f.bridgeIPv6(f.cfg.Bridge) {
				return fmt.Errorf("ip6tables: IPv6 is enabled on bridge %s and its rules cannot be installed, so sandboxes would reach the host over IPv6 unfiltered: %w", f.cfg.Bridge, err)
			}
			f.log.Warn("ip6tables failed; IPv6 is off on the sandbox bridge, so there is nothing to filter", "bridge", f.cfg.Bridge, "err", err)
			f.ipv6 = false
		}
	} else if f.bridgeIPv6(f.cfg.Bridge) {
		return fmt.Errorf("ip6tables-restore not found and IPv6 is enabled on the sandbox bridge %s: sandboxes would reach the host and each other over IPv6 (link-local) unfiltered; "+
			"install ip6tables (the iptables package) or disable IPv6 on the bridge (sysctl -w net.ipv6.conf.%s.disable_ipv6=1)", f.cfg.Bridge, f.cfg.Bridge)
	} else {
		f.log.Warn("ip6tables not found; IPv6 is off on the sandbox bridge, so no IPv6 rules are needed", "bridge", f.cfg.Bridge)
	}
	// Each jump goes (back) to the top of its chain, atomically: a delete
	// and an insert in one transaction leave no moment without it.
	for _, j := range f.jumps() {
		var lines []string
		if _, err := f.iptables(ctx, j.v6, j.table, append([]string{"-C", j.chain}, j.spec...)...); err == nil {
			lines = append(lines, "-D "+j.chain+" "+j.line())
		}
		lines = append(lines, "-I "+j.chain+" 1 "+j.line())
		if err := f.restore(ctx, j.v6, j.table, lines); err != nil {
			return fmt.Errorf("hook %s: %w", j.chain, err)
		}
	}
	var intercept string
	if ic := f.cfg.Intercept; ic != nil {
		intercept = fmt.Sprintf("%s proxy %d dns %d", ic.Addr, ic.ProxyPort, ic.DNSPort)
	}
	f.log.Info("firewall ready", "network", f.cfg.Network, "bridge", f.cfg.Bridge, "egress", f.cfg.Egress, "chains", f.prefix+"*",
		"host_addrs", f.cfg.HostAddrs, "intercept", intercept, "ipv6_rules", f.ipv6, "other_daemons", len(others))
	return nil
}

// Apply installs a sandbox's policy for its address, replacing whatever
// rules it had, and drops any other sandbox's rule for the same address (an
// address freed by a dead container is handed out again). A zero policy
// leaves the sandbox to the network's defaults. A policy that intercepts
// needs the network's Intercept target.
func (f *Firewall) Apply(ctx context.Context, sandboxID string, ip netip.Addr, p Policy) error {
	if !ip.Is4() {
		return fmt.Errorf("%w: sandbox address %s is not IPv4", ErrInvalid, ip)
	}
	if p.Intercept && f.cfg.Intercept == nil {
		return fmt.Errorf("%w: sandbox %s: its traffic is to be intercepted, but the network has no egress proxy to send it to", ErrInvalid, sandboxID)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	disp, err := f.dispatchRules(ctx)
	if err != nil {
		return err
	}
	nat, err := f.natRules(ctx)
	if err != nil {
		return err
	}
	own := f.SandboxChain(sandboxID)
	replaced := func(id, rule string) bool { return id == sandboxID || ruleSource(rule) == ip.String() }
	lines, stale := unhook(disp, replaced)
	// The sandbox's own chain is declared (hence flushed) again below
	// unless its policy is now the default.
	var drop []string
	for _, c := range stale {
		if c != own || p.IsZero() {
			drop = append(drop, c)
		}
	}
	if !p.IsZero() {
		lines = append(f.SandboxRules(sandboxID, p), lines...)
		lines = append(lines, "-I "+f.chain("FWD")+" "+strconv.Itoa(fixedFWD+1)+" "+f.dispatchRule(sandboxID, ip))
	}
	natLines, _ := unhook(nat, replaced)
	natLines = append(natLines, f.NATRules(sandboxID, ip, p)...)
	// The two tables are committed one after the other, so the order
	// decides what the sandbox's web traffic meets in between. It must go
	// from the old way of deciding it straight to the new one, never meet
	// the old filter rules that the old redirection kept it from (a sandbox
	// leaving interception for a stricter policy would reach the web
	// directly, meanwhile, under its old, looser one). So a redirection
	// being added comes first, and one being taken away last.
	filter, natSec := section{filterTable, append(lines, f.deleteChains(drop)...)}, section{natTable, natLines}
	secs := []section{filter, natSec}
	if p.Intercept {
		secs = []section{natSec, filter}
	}
	if err := f.restoreTables(ctx, false, secs...); err != nil {
		return fmt.Errorf("firewall: sandbox %s: %w", sandboxID, err)
	}
	return nil
}

// unhook returns the deletions of the rules match selects (dispatch or NAT
// rules) and the chains those rules jump to.
func unhook(disp map[string][]string, match func(id, rule string) bool) (lines, chains []string) {
	for _, id := range sortedKeys(disp) {
		for _, r := range disp[id] {
			if !match(id, r) {
				continue
			}
			lines = append(lines, "-D"+strings.TrimPrefix(r, "-A"))
			if t := ruleArg(r, "-g"); t != "" && !slices.Contains(chains, t) {
				chains = append(chains, t)
			}
		}
	}
	return lines, chains
}

// deleteChains are the transaction lines that flush and delete per-sandbox
// chains (named by rules being deleted in the same transaction, so they
// exist); the network's own chains are never among them.
func (f *Firewall) deleteChains(chains []string) []string {
	var lines []string
	for _, c := range chains {
		if strings.HasPrefix(c, f.prefix) && !slices.Contains(f.fixedChains(), c) {
			lines = append(lines, "-F "+c, "-X "+c)
		}
	}
	return lines
}

// dropChains flushes and deletes per-sandbox chains no rule jumps to any
// more; a chain that is not there is not an error.
func (f *Firewall) dropChains(ctx context.Context, chains []string) {
	for _, c := range chains {
		if !strings.HasPrefix(c, f.prefix) || slices.Contains(f.fixedChains(), c) {
			continue // only ever a sandbox's own chain
		}
		if _, err := f.iptables(ctx, false, filterTable, "-F", c); err != nil {
			continue
		}
		if _, err := f.iptables(ctx, false, filterTable, "-X", c); err != nil {
			f.log.Warn("firewall: delete chain", "chain", c, "err", err)
		}
	}
}

// Remove deletes a sandbox's rules and chain (on stop and delete) in one
// iptables-restore. Removing rules that are not there is not an error.
func (f *Firewall) Remove(ctx context.Context, sandboxID string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	disp, err := f.dispatchRules(ctx)
	if err != nil {
		return err
	}
	nat, err := f.natRules(ctx)
	if err != nil {
		return err
	}
	mine := func(id, _ string) bool { return id == sandboxID }
	lines, chains := unhook(disp, mine)
	natLines, _ := unhook(nat, mine)
	// The sandbox falls back to the network's defaults, which intercept
	// nothing: filter first, as Apply orders a policy that does not
	// intercept.
	if err := f.restoreTables(ctx, false, section{filterTable, append(lines, f.deleteChains(chains)...)}, section{natTable, natLines}); err != nil {
		return fmt.Errorf("firewall: remove sandbox %s: %w", sandboxID, err)
	}
	return nil
}

// Prune removes the rules of every sandbox not in keep (after a restart,
// those of sandboxes deleted or stopped while the daemon was down).
func (f *Firewall) Prune(ctx context.Context, keep map[string]bool) error {
	f.mu.Lock()
	disp, err := f.dispatchRules(ctx)
	var nat map[string][]string
	if err == nil {
		nat, err = f.natRules(ctx)
	}
	f.mu.Unlock()
	if err != nil {
		return err
	}
	var errs []error
	// Another daemon's sandboxes are not this one's to prune: their rules
	// and chains stay. A sandbox may have NAT rules and no dispatch rule
	// (a crash between the two tables' commits), so both are looked at.
	theirs := map[string]bool{}
	ids := map[string]bool{}
	for _, tagged := range []map[string][]string{disp, nat} {
		for id, rules := range tagged {
			ids[id] = true
			for _, r := range rules {
				if _, inst, _ := ruleOwner(r); f.foreign(inst) {
					theirs[id] = true
					if c := ruleArg(r, "-g"); c != "" {
						theirs[c] = true
					}
				}
			}
		}
	}
	for _, id := range sortedKeys(ids) {
		if !keep[id] && !theirs[id] {
			errs = append(errs, f.Remove(ctx, id))
		}
	}
	// Chains no dispatch rule names any more (a crash between two steps).
	chains, err := f.chains(ctx, false, filterTable)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	want := map[string]bool{}
	for _, c := range f.fixedChains() {
		want[c] = true
	}
	for id := range keep {
		want[f.SandboxChain(id)] = true
	}
	for c := range theirs {
		want[c] = true
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var stale []string
	for _, c := range chains {
		if !want[c] {
			stale = append(stale, c)
		}
	}
	f.dropChains(ctx, stale)
	return errors.Join(errs...)
}

// Release removes this daemon's own IN rules (at shutdown) and reports
// whether other daemons still have rules on the network: while they do, it
// is theirs too, and neither it nor its chains may go. The per-sandbox
// rules stay, since the sandboxes may outlive the daemon.
func (f *Firewall) Release(ctx context.Context) (othersUse bool, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	rules, err := f.listChain(ctx, false, filterTable, f.chain("IN"))
	if err != nil {
		return true, err
	}
	var del []string
	for _, r := range rules {
		if !strings.Contains(r, "--comment ") {
			continue
		}
		inst, ok := ruleInstance(r)
		switch {
		case !ok:
		case inst == f.cfg.Instance:
			del = append(del, "-D"+strings.TrimPrefix(r, "-A"))
		default:
			othersUse = true
		}
	}
	disp, err := f.dispatchRules(ctx)
	if err != nil {
		return true, err
	}
	nat, err := f.natRules(ctx)
	if err != nil {
		return true, err
	}
	for _, tagged := range []map[string][]string{disp, nat} {
		for _, rs := range tagged {
			for _, r := range rs {
				if _, inst, _ := ruleOwner(r); f.foreign(inst) {
					othersUse = true
				}
			}
		}
	}
	if err := f.restore(ctx, false, filterTable, del); err != nil {
		return true, fmt.Errorf("firewall: release: %w", err)
	}
	return othersUse, nil
}

// chains lists the chains of this network in one table.
func (f *Firewall) chains(ctx context.Context, v6 bool, table string) ([]string, error) {
	out, err := f.iptables(ctx, v6, table, "-S")
	if err != nil {
		return nil, err
	}
	var cs []string
	for _, l := range strings.Split(string(out), "\n") {
		if c, ok := strings.CutPrefix(l, "-N "); ok && strings.HasPrefix(c, f.prefix) {
			cs = append(cs, strings.TrimSpace(c))
		}
	}
	return cs, nil
}

// Uninstall removes every rule and chain of the network: the jumps into it
// first (found by their target, whatever bridge they name), so no packet
// ever meets a half-removed chain, then the chains. The nat table goes
// first, so that nothing is rewritten towards the host any more once the
// IN chain filtering such traffic is gone.
func (f *Firewall) Uninstall(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	var errs []error
	builtin := []string{"INPUT", "DOCKER-USER", "FORWARD"}
	for _, t := range []struct {
		v6      bool
		table   string
		parents []string
	}{
		{false, natTable, []string{"PREROUTING"}},
		{false, filterTable, builtin},
		{true, filterTable, builtin},
	} {
		if t.v6 && !f.ipv6 {
			continue
		}
		for _, parent := range t.parents {
			rules, err := f.listChain(ctx, t.v6, t.table, parent)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			var del []string
			for _, r := range rules {
				if strings.Contains(r, " -j "+f.prefix) || strings.Contains(r, " -g "+f.prefix) {
					del = append(del, "-D"+strings.TrimPrefix(r, "-A"))
				}
			}
			errs = append(errs, f.restore(ctx, t.v6, t.table, del))
		}
		chains, err := f.chains(ctx, t.v6, t.table)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, c := range chains {
			if _, err := f.iptables(ctx, t.v6, t.table, "-F", c); err != nil {
				errs = append(errs, err)
			}
		}
		for _, c := range chains {
			if _, err := f.iptables(ctx, t.v6, t.table, "-X", c); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
