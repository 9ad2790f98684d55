// This file renders rules: the hooks into the built-in chains, the network's
// own chains, one sandbox's chain and its dispatch rule, and the NAT rules that
// redirect an intercepted sandbox's web and DNS traffic.

package firewall

import (
	"net/netip"
	"strconv"
	"strings"
)

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
	out := []string{
		head + " -p tcp -m multiport --dports 80,443" + mark + proxy,
		head + " -p udp --dport 53" + mark + dns,
		head + " -p tcp --dport 53" + mark + dns,
	}
	if pp := ic.PreviewPort; pp > 0 && pp != 80 && pp != 443 {
		out = append(out, head+" -d "+ic.Addr.String()+"/32 -p tcp --dport "+strconv.Itoa(pp)+mark+proxy)
	}
	return out
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
