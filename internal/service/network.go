package service

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/firewall"
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
	return out, nil
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
	fp := firewall.Policy{Egress: eg}
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
	if err := s.cfg.Firewall.Apply(ctx, sb.ID, addr, p); err != nil {
		return runtimeErr("apply the sandbox's firewall rules", err)
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
