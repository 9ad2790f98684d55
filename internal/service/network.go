package service

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/egress"
	"github.com/sandpit-dev/sandpit/internal/events"
	"github.com/sandpit-dev/sandpit/internal/firewall"
	"github.com/sandpit-dev/sandpit/internal/identity"
	"github.com/sandpit-dev/sandpit/internal/router"
)

// maxCIDRs bounds each of a policy's allow and deny lists.
const maxCIDRs = 64

// NormalizeNetwork validates a sandbox's network policy and returns it in
// canonical form (masked CIDRs, bare addresses as /32, "public" as ""), so
// that equal policies compare and fingerprint equal.
func NormalizeNetwork(p sandpit.NetworkPolicy) (sandpit.NetworkPolicy, error) {
	fp, err := toFirewall(p)
	if err != nil {
		return sandpit.NetworkPolicy{}, err
	}
	out := sandpit.NetworkPolicy{}
	if fp.Egress == firewall.EgressNone {
		out.Egress = sandpit.EgressNone
	}
	for _, a := range fp.Allow {
		out.Allow = append(out.Allow, a.String())
	}
	for _, d := range fp.Deny {
		out.Deny = append(out.Deny, d.String())
	}
	if out.AllowDomains, err = normalizeDomains(p.AllowDomains, "allow_domains"); err != nil {
		return sandpit.NetworkPolicy{}, err
	}
	if out.DenyDomains, err = normalizeDomains(p.DenyDomains, "deny_domains"); err != nil {
		return sandpit.NetworkPolicy{}, err
	}
	if out.MaskRequestHost, err = normalizeHostMask(p.MaskRequestHost); err != nil {
		return sandpit.NetworkPolicy{}, err
	}
	if out.Rules, err = egress.NormalizeRules(p.Rules); err != nil {
		return sandpit.NetworkPolicy{}, invalidf("%v", err)
	}
	switch p.Mode {
	case "":
	case sandpit.NetworkModeLearn:
		out.Mode = p.Mode
	default:
		return sandpit.NetworkPolicy{}, invalidf("network mode %q: want \"learn\" or none", p.Mode)
	}
	return out, nil
}

// normalizeHostMask checks a MaskRequestHost: once "${PORT}" is put in, a
// host, optionally with a port, that a Host header may carry.
func normalizeHostMask(mask string) (string, error) {
	mask = strings.TrimSpace(mask)
	if mask == "" {
		return "", nil
	}
	host := strings.ReplaceAll(mask, router.PortPlaceholder, "8080")
	if len(host) > 253 || strings.ContainsAny(host, " /?#@\\\"'<>") {
		return "", invalidf("maskRequestHost %q is not a host name", mask)
	}
	for _, c := range host {
		if c < '!' || c > '~' {
			return "", invalidf("maskRequestHost %q is not a host name", mask)
		}
	}
	if _, err := url.Parse("http://" + host + "/"); err != nil {
		return "", invalidf("maskRequestHost %q is not a host name", mask)
	}
	return mask, nil
}

// MaskHost is the Host header a request for port arrives with at a sandbox
// whose policy masks it, or "" when it does not.
func MaskHost(p sandpit.NetworkPolicy, port int) string {
	if p.MaskRequestHost == "" {
		return ""
	}
	return strings.ReplaceAll(p.MaskRequestHost, router.PortPlaceholder, strconv.Itoa(port))
}

// maxDomains bounds each of a policy's domain lists.
const maxDomains = 256

// normalizeDomains checks a domain list and returns it canonical, without
// repeats, in the order given.
func normalizeDomains(list []string, what string) ([]string, error) {
	if len(list) > maxDomains {
		return nil, invalidf("network %s: at most %d names", what, maxDomains)
	}
	var out []string
	for _, d := range list {
		n, err := egress.NormalizeDomain(d)
		if err != nil {
			return nil, invalidf("network %s: %v", what, err)
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out, nil
}

// SplitAddressesAndNames sorts the entries of an allow or deny list that
// mixes addresses and names (E2B's allowOut and denyOut): what parses as an
// IPv4 address or CIDR is an address, anything else a name.
func SplitAddressesAndNames(list []string) (cidrs, names []string) {
	for _, e := range list {
		if _, err := firewall.ParseCIDR(e); err == nil {
			cidrs = append(cidrs, e)
		} else {
			names = append(names, e)
		}
	}
	return cidrs, names
}

// egressRules are a sandbox's rules in the egress server's terms.
func egressRules(sb sandpit.Sandbox, fp firewall.Policy) egress.Rules {
	r := egress.Rules{SandboxID: sb.ID, Owner: sb.Owner, AllowDomains: sb.Network.AllowDomains, DenyDomains: sb.Network.DenyDomains,
		AllowCIDRs: fp.Allow, DenyCIDRs: fp.Deny, Learn: sb.Network.Mode == sandpit.NetworkModeLearn, Transforms: egress.Transforms(sb.Network.Rules)}
	r.None = fp.Egress == firewall.EgressNone || slices.ContainsFunc(fp.Deny, func(p netip.Prefix) bool { return p.Bits() == 0 })
	return r
}

// toFirewall parses a stored or requested policy into the firewall's terms.
func toFirewall(p sandpit.NetworkPolicy) (firewall.Policy, error) {
	eg, err := firewall.ParseEgress(p.Egress)
	if err != nil {
		return firewall.Policy{}, invalidf("network: %v", err)
	}
	if len(p.Allow) > maxCIDRs || len(p.Deny) > maxCIDRs {
		return firewall.Policy{}, invalidf("network: at most %d allow and %d deny entries", maxCIDRs, maxCIDRs)
	}
	parse := func(list []string, what string) ([]netip.Prefix, error) {
		var out []netip.Prefix
		seen := map[netip.Prefix]bool{}
		for _, s := range list {
			c, err := firewall.ParseCIDR(s)
			if err != nil {
				return nil, invalidf("network %s: %v", what, err)
			}
			if !seen[c] {
				seen[c] = true
				out = append(out, c)
			}
		}
		return out, nil
	}
	fp := firewall.Policy{Egress: eg, Intercept: p.ByName()}
	if fp.Allow, err = parse(p.Allow, "allow"); err != nil {
		return firewall.Policy{}, err
	}
	if fp.Deny, err = parse(p.Deny, "deny"); err != nil {
		return firewall.Policy{}, err
	}
	return fp, nil
}

// applyFirewall installs a sandbox's rules for the address its container
// has now. It runs after the container starts and before the agent is
// reported ready: until then only the agent runs in the sandbox, so no
// untrusted code sees the sandbox unfiltered.
func (s *Service) applyFirewall(ctx context.Context, sb sandpit.Sandbox, ip string) error {
	if s.cfg.Firewall == nil {
		return nil
	}
	addr, err := netip.ParseAddr(ip)
	if err != nil {
		return fmt.Errorf("%w: container address %q: %v", ErrRuntime, ip, err)
	}
	p, err := toFirewall(sb.Network)
	if err != nil {
		return err
	}
	if p.Intercept {
		if s.cfg.Egress == nil {
			return fmt.Errorf("%w: this daemon has no egress proxy, so it cannot enforce rules on names", sandpit.ErrInvalid)
		}
		// The rules are in the proxy before the firewall sends it the
		// sandbox's traffic, so no connection finds it without them.
		s.cfg.Egress.Set(addr, egressRules(sb, p))
	}
	if err := s.cfg.Firewall.Apply(ctx, sb.ID, addr, p); err != nil {
		return runtimeErr("apply the sandbox's firewall rules", err)
	}
	if !p.Intercept && s.cfg.Egress != nil {
		s.cfg.Egress.Unset(sb.ID)
	}
	return nil
}

// removeFirewall drops a sandbox's rules (stop, delete, failed create).
// Failures are logged: the rules name an address no container of this
// sandbox holds any more, and the next Apply for that address replaces them.
func (s *Service) removeFirewall(ctx context.Context, id string) {
	if s.cfg.Firewall == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := s.cfg.Firewall.Remove(ctx, id); err != nil {
		s.log.Error("firewall: remove sandbox rules", "sandbox", id, "err", err)
	}
	if s.cfg.Egress != nil {
		s.cfg.Egress.Unset(id)
	}
}

// pruneFirewall removes the rules of every sandbox not in keep, after a
// restart has re-applied the rules of those that run.
func (s *Service) pruneFirewall(ctx context.Context, keep map[string]bool) {
	if s.cfg.Firewall == nil {
		return
	}
	if err := s.cfg.Firewall.Prune(ctx, keep); err != nil {
		s.log.Error("firewall: prune", "err", err)
	}
}

// checkByName refuses rules on names this daemon cannot enforce: without
// its egress proxy they would be silently ignored.
func (s *Service) checkByName(p sandpit.NetworkPolicy) error {
	if p.ByName() && (s.cfg.Egress == nil || s.cfg.Firewall == nil) {
		return invalidf("network: this daemon enforces no rules on names (allow_domains, deny_domains, mode learn): it runs without its sandbox firewall")
	}
	return nil
}

// UpdateNetwork replaces a sandbox's egress policy. The new rules hold for
// every connection and DNS query that starts after the call returns (ones
// already open are left alone, as on E2B); a stopped or paused sandbox gets
// them when it runs again. Sending the same policy again changes nothing,
// so a retry is safe.
func (s *Service) UpdateNetwork(ctx context.Context, id string, p sandpit.NetworkPolicy) (_ sandpit.Sandbox, err error) {
	defer s.cluster.specChanged(ctx, id, &err)
	if p, err = s.expandProfiles(p); err != nil {
		return sandpit.Sandbox{}, err
	}
	np, err := NormalizeNetwork(p)
	if err != nil {
		return sandpit.Sandbox{}, err
	}
	if err := checkLinkLocal(np); err != nil {
		return sandpit.Sandbox{}, err
	}
	if err := s.checkByName(np); err != nil {
		return sandpit.Sandbox{}, err
	}
	if _, err := s.sandbox(ctx, id); err != nil {
		return sandpit.Sandbox{}, err
	}
	// The lock keeps a start from installing the old rules after this
	// call installed the new ones.
	unlock, err := s.lock(ctx, id)
	if err != nil {
		return sandpit.Sandbox{}, err
	}
	defer unlock()
	sb, err := s.sandbox(ctx, id)
	if err != nil {
		return sandpit.Sandbox{}, err
	}
	// An update replaces the egress rules (E2B's updateNetwork sends them
	// all); the host mask, set at create, is not one of them.
	if np.MaskRequestHost == "" {
		np.MaskRequestHost = sb.Network.MaskRequestHost
	}
	limits, err := s.store.GetOwnerLimits(ctx, sb.Owner)
	if err != nil {
		return sandpit.Sandbox{}, err
	}
	if err := checkEgressGrant(identity.Of(ctx), limits, np); err != nil {
		return sandpit.Sandbox{}, err
	}
	defer func() { s.audit(ctx, "sandbox.network", id, err) }()
	if !slices.Equal(sb.Network.Allow, np.Allow) || !slices.Equal(sb.Network.Deny, np.Deny) || sb.Network.Egress != np.Egress ||
		!slices.Equal(sb.Network.AllowDomains, np.AllowDomains) || !slices.Equal(sb.Network.DenyDomains, np.DenyDomains) || sb.Network.Mode != np.Mode {
		if err := s.store.SetSandboxNetwork(ctx, id, np, s.now()); err != nil {
			return sandpit.Sandbox{}, err
		}
	}
	sb.Network = np
	if sb.State == sandpit.StateRunning {
		ip, err := s.sandboxIP(ctx, id)
		if err != nil {
			return sandpit.Sandbox{}, err
		}
		if err := s.applyFirewall(ctx, sb, ip); err != nil {
			return sandpit.Sandbox{}, err
		}
	}
	return s.GetSandbox(ctx, id)
}

// NetworkReport is what the egress server recorded of a sandbox.
type NetworkReport struct {
	// Denied are the recent refusals, oldest first (at most 100).
	Denied []egress.Denial
	// DeniedTotal counts every refusal since the daemon started.
	DeniedTotal uint64
	// Learned are the names the sandbox used in learn mode, sorted.
	Learned []string
}

// NetworkDenials reports a sandbox's refused connections and DNS answers
// and, in learn mode, the names it used.
func (s *Service) NetworkDenials(ctx context.Context, id string) (NetworkReport, error) {
	if _, err := s.sandbox(ctx, id); err != nil {
		return NetworkReport{}, err
	}
	if s.cfg.Egress == nil {
		return NetworkReport{Denied: []egress.Denial{}, Learned: []string{}}, nil
	}
	d, n := s.cfg.Egress.Denials(id)
	r := NetworkReport{Denied: d, DeniedTotal: n, Learned: s.cfg.Egress.Learned(id)}
	if r.Denied == nil {
		r.Denied = []egress.Denial{}
	}
	if r.Learned == nil {
		r.Learned = []string{}
	}
	return r, nil
}

// EgressDenied is the egress server's report of a refusal: it is counted
// and announced on the event stream. The sandbox is read from the store
// so the event carries its owner (who alone may see it); a sandbox that
// is gone by then is not announced.
func (s *Service) EgressDenied(d egress.Denial) {
	s.cfg.Metrics.EgressDenied(d.SandboxID, d.Kind)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	sb, err := s.store.GetSandbox(ctx, d.SandboxID)
	if err != nil {
		return
	}
	s.bus.Publish(events.Event{Type: events.NetworkDenied, Sandbox: sb, OldState: sb.State, Time: d.Time, Node: s.cfg.NodeName, Denial: &d})
}

// expandProfiles adds the domains of the operator's profiles a policy names
// to its allow list.
func (s *Service) expandProfiles(p sandpit.NetworkPolicy) (sandpit.NetworkPolicy, error) {
	if len(p.Profiles) == 0 {
		return p, nil
	}
	allow := slices.Clone(p.AllowDomains)
	for _, name := range p.Profiles {
		domains, ok := s.cfg.EgressProfiles[name]
		if !ok {
			known := slices.Sorted(maps.Keys(s.cfg.EgressProfiles))
			if len(known) == 0 {
				return p, invalidf("network profile %q: this daemon defines no profiles (--egress-profile name=domain,...)", name)
			}
			return p, invalidf("network profile %q: unknown (known: %s)", name, strings.Join(known, ", "))
		}
		allow = append(allow, domains...)
	}
	p.AllowDomains, p.Profiles = allow, nil
	return p, nil
}
