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
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
)

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

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
