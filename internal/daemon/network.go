package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/sandpit-dev/sandpit/internal/driver"
	"github.com/sandpit-dev/sandpit/internal/driver/docker"
	"github.com/sandpit-dev/sandpit/internal/egress"
	"github.com/sandpit-dev/sandpit/internal/firewall"
)

// DefaultNetworkName is the bridge network sandboxes join by default.
const DefaultNetworkName = "sandpit"

// networkNameRE is what Docker accepts as a network name, bounded.
var networkNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// NetworkConfig is the sandbox network and its default egress policy.
type NetworkConfig struct {
	// Name of the Docker network (created when missing); default "sandpit".
	Name string
	// Subnet of the network when sandpit creates it ("" lets Docker pick).
	Subnet string
	// Pool, when Subnet is empty, is a range a free /24 is taken from.
	Pool string
	// Egress is "public" (default) or "none".
	Egress string
	// Allow are CIDRs every sandbox reaches although they are private.
	Allow []string
	// DNS are the resolvers sandboxes' DNS queries go to (port 53 stays
	// open to them); empty means the host's, from /etc/resolv.conf, which
	// is where Docker's embedded DNS forwards.
	DNS []string
	// EgressResolvers (host or host:port) are where the egress DNS server
	// and proxy resolve the names sandboxes ask for; empty means the
	// host's, from /etc/resolv.conf (loopback ones included: the daemon
	// asks from the host).
	EgressResolvers []string
	// EgressProfiles are "name=domain,domain,..." lists a sandbox's policy
	// may name; they add to (and may replace) DefaultEgressProfiles.
	EgressProfiles []string
	// EgressCAs are PEM files of CAs the egress proxy trusts, besides the
	// host's trust store, when it verifies the upstream of a connection it
	// intercepts (a host whose requests a sandbox's rules transform).
	EgressCAs []string
}

// DefaultEgressProfiles are the domain lists every daemon knows: what
// installing packages from the usual registries needs.
var defaultEgressProfiles = map[string][]string{
	"pypi":   {"pypi.org", "files.pythonhosted.org"},
	"npm":    {"registry.npmjs.org", "registry.yarnpkg.com"},
	"github": {"github.com", "*.github.com", "*.githubusercontent.com", "codeload.github.com"},
	"debian": {"deb.debian.org", "security.debian.org"},
	"golang": {"proxy.golang.org", "sum.golang.org", "storage.googleapis.com"},
}

// parsedNetwork is a validated NetworkConfig.
type parsedNetwork struct {
	name            string
	subnet, pool    netip.Prefix
	egress          firewall.Egress
	allow           []netip.Prefix
	dns             []netip.Addr
	egressResolvers []string
	egressProfiles  map[string][]string
}

// parse validates the flags before anything is opened or created.
func (n NetworkConfig) parse() (parsedNetwork, error) {
	p := parsedNetwork{name: n.Name}
	if p.name == "" {
		p.name = DefaultNetworkName
	}
	if !networkNameRE.MatchString(p.name) {
		return p, fmt.Errorf("--network-name %q: want 1-64 letters, digits, '_', '.' or '-', starting with a letter or digit", p.name)
	}
	var err error
	if p.egress, err = firewall.ParseEgress(n.Egress); err != nil {
		return p, fmt.Errorf("--sandbox-egress: %w", err)
	}
	for _, s := range []struct {
		flag, val string
		dst       *netip.Prefix
	}{{"--network-subnet", n.Subnet, &p.subnet}, {"--network-pool", n.Pool, &p.pool}} {
		if s.val == "" {
			continue
		}
		pr, err := netip.ParsePrefix(s.val)
		if err != nil || !pr.Addr().Is4() {
			return p, fmt.Errorf("%s %q: want an IPv4 CIDR", s.flag, s.val)
		}
		*s.dst = pr.Masked()
	}
	for _, a := range n.Allow {
		c, err := firewall.ParseCIDR(a)
		if err != nil {
			return p, fmt.Errorf("--allow-cidr: %w", err)
		}
		if c.Overlaps(firewall.LinkLocal) {
			return p, fmt.Errorf("--allow-cidr %s: link-local addresses (cloud metadata) are never reachable from a sandbox", c)
		}
		p.allow = append(p.allow, c)
	}
	for _, d := range n.DNS {
		a, err := netip.ParseAddr(d)
		if err != nil || !a.Is4() {
			return p, fmt.Errorf("--sandbox-dns %q: want an IPv4 address", d)
		}
		p.dns = append(p.dns, a)
	}
	if len(n.DNS) == 0 {
		p.dns = hostResolvers("/etc/resolv.conf")
	}
	for _, r := range n.EgressResolvers {
		hp := r
		if _, _, err := net.SplitHostPort(r); err != nil {
			hp = net.JoinHostPort(r, "53")
		}
		if ap, err := netip.ParseAddrPort(hp); err != nil || !ap.Addr().Is4() {
			return p, fmt.Errorf("--egress-resolver %q: want an IPv4 address, optionally with a port", r)
		}
		p.egressResolvers = append(p.egressResolvers, hp)
	}
	if len(p.egressResolvers) == 0 {
		for _, a := range resolvConf("/etc/resolv.conf") {
			p.egressResolvers = append(p.egressResolvers, net.JoinHostPort(a.String(), "53"))
		}
	}
	p.egressProfiles = maps.Clone(defaultEgressProfiles)
	for _, e := range n.EgressProfiles {
		name, list, ok := strings.Cut(e, "=")
		name = strings.TrimSpace(name)
		if !ok || !profileNameRE.MatchString(name) {
			return p, fmt.Errorf("--egress-profile %q: want name=domain,domain,... (a name of letters, digits, '_' or '-')", e)
		}
		var domains []string
		for _, d := range strings.Split(list, ",") {
			nd, err := egress.NormalizeDomain(d)
			if err != nil {
				return p, fmt.Errorf("--egress-profile %s: %w", name, err)
			}
			domains = append(domains, nd)
		}
		p.egressProfiles[name] = domains
	}
	return p, nil
}

var profileNameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// resolvConf reads every IPv4 nameserver of a resolv.conf.
func resolvConf(path string) []netip.Addr {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var out []netip.Addr
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "nameserver" {
			if a, err := netip.ParseAddr(f[1]); err == nil && a.Is4() {
				out = append(out, a)
			}
		}
	}
	return out
}

// hostResolvers reads the IPv4 nameservers of a resolv.conf. Loopback ones
// are left out: Docker does not forward to them (it falls back to public
// resolvers, which sandboxes reach anyway). A missing file means none.
func hostResolvers(path string) []netip.Addr {
	var out []netip.Addr
	for _, a := range resolvConf(path) {
		if !a.IsLoopback() {
			out = append(out, a)
		}
	}
	return out
}

// hostAddrs are the host addresses on which sandboxes may reach the proxy
// and the TCP pool: the address they are bound to, or, bound to every
// address, the bridge's gateway (the host's address on the sandbox network).
// A loopback bind is unreachable from a sandbox anyway (the kernel drops
// packets to 127/8 arriving on another interface), so it opens nothing.
func hostAddrs(bindHost string, gateway netip.Addr) []netip.Addr {
	if bindHost == "" || bindHost == "0.0.0.0" || bindHost == "::" {
		if gateway.IsValid() {
			return []netip.Addr{gateway}
		}
		return nil
	}
	a, err := netip.ParseAddr(bindHost)
	if err != nil || !a.Is4() || a.IsLoopback() {
		return nil
	}
	return []netip.Addr{a}
}

// setupNetwork makes sure the sandbox network exists and its firewall is in
// place. hostPorts are the ports of the host sandboxes may reach (the proxy
// and the TCP pool), on bindHost, the host they listen on.
func setupNetwork(ctx context.Context, rt *docker.Docker, pn parsedNetwork, instance string, hostPorts []firewall.PortRange, bindHost string, eg *egress.Server, previewPort int, log *slog.Logger) (docker.Network, *firewall.Firewall, error) {
	netw, err := rt.EnsureNetwork(ctx, docker.NetworkSpec{
		Name: pn.name, Subnet: pn.subnet, Pool: pn.pool,
		Labels: map[string]string{driver.LabelInstance: instance},
	})
	if err != nil {
		return netw, nil, err
	}
	if !netw.Created && netw.Instance != instance {
		log.Info("sandbox network made by another daemon or the operator: sharing it, never removing it", "network", netw.Name, "made_by", netw.Instance)
	}
	// The egress proxy and DNS server listen on the gateway, where the
	// firewall sends the web and DNS traffic of sandboxes with rules on
	// names.
	var intercept *firewall.Intercept
	if eg != nil && netw.Gateway.IsValid() {
		ports, err := eg.Listen(netw.Gateway)
		if err != nil {
			return netw, nil, err
		}
		intercept = &firewall.Intercept{Addr: ports.Addr, ProxyPort: ports.ProxyPort, DNSPort: ports.DNSPort, PreviewPort: previewPort}
	}
	fw, err := firewall.New(firewall.Config{
		Network: netw.Name, Bridge: netw.Bridge, Egress: pn.egress, Allow: pn.allow,
		HostPorts: hostPorts, HostAddrs: hostAddrs(bindHost, netw.Gateway), Instance: instance, DNS: pn.dns, Logger: log,
		Intercept: intercept,
	})
	if err != nil {
		return netw, nil, err
	}
	if err := fw.Ensure(ctx); err != nil {
		return netw, nil, fmt.Errorf("firewall: %w", err)
	}
	log.Info("sandbox network", "network", netw.Name, "subnet", netw.Subnet, "gateway", netw.Gateway, "bridge", netw.Bridge, "egress", pn.egress, "dns", pn.dns)
	return netw, fw, nil
}

// teardownNetwork runs at shutdown. The daemon drops its own host-port
// rules; then, when it made the network itself (its instance label), no
// other daemon has rules on it and no container is left on it, the network
// and its rules go. Otherwise both stay: another daemon's sandboxes use
// them, or this daemon's sandboxes keep running untrusted code after it
// exits and must stay confined (the next start re-asserts the rules).
func teardownNetwork(ctx context.Context, rt *docker.Docker, netw docker.Network, fw *firewall.Firewall, instance string, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	othersUse, err := fw.Release(ctx)
	if err != nil {
		log.Error("release firewall rules", "network", netw.Name, "err", err)
	}
	switch {
	case !netw.Managed:
		log.Info("network not made by sandpit; leaving it and its firewall rules", "network", netw.Name)
		return
	case netw.Instance != instance:
		log.Info("network made by another daemon; leaving it and its firewall rules", "network", netw.Name, "made_by", netw.Instance)
		return
	case othersUse:
		log.Info("other daemons use the network; leaving it and its firewall rules", "network", netw.Name)
		return
	}
	err = rt.RemoveNetwork(ctx, netw.Name)
	switch {
	case errors.Is(err, docker.ErrNetworkInUse):
		log.Info("sandboxes still run: keeping their network and firewall rules", "network", netw.Name)
		return
	case err != nil:
		log.Error("remove network", "network", netw.Name, "err", err)
		return
	}
	if err := fw.Uninstall(ctx); err != nil {
		log.Error("remove firewall rules", "network", netw.Name, "err", err)
		return
	}
	log.Info("network and firewall rules removed", "network", netw.Name)
}

// Uninstall removes what serve installed on the host for one network: its
// firewall chains and, when sandpit made it, the network. It refuses while
// containers are attached, since removing their rules would set them loose.
func Uninstall(ctx context.Context, network string, log *slog.Logger) error {
	if network == "" {
		network = DefaultNetworkName
	}
	rt, err := docker.New(ctx, docker.Options{Logger: log, Network: network})
	if err != nil {
		return fmt.Errorf("docker: %w", err)
	}
	defer rt.Close()
	bridge := docker.BridgeName(network)
	if n, err := rt.InspectNetwork(ctx, network); err == nil {
		bridge = n.Bridge
	}
	if err := rt.RemoveNetwork(ctx, network); err != nil {
		return err
	}
	fw, err := firewall.New(firewall.Config{Network: network, Bridge: bridge, Logger: log})
	if err != nil {
		return err
	}
	return fw.Uninstall(ctx)
}
