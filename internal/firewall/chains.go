// This file installs and removes the network's chains: Ensure on every start,
// Release at shutdown and Uninstall when the network goes.

package firewall

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

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
		intercept = fmt.Sprintf("%s proxy %d dns %d preview %d", ic.Addr, ic.ProxyPort, ic.DNSPort, ic.PreviewPort)
	}
	f.log.Info("firewall ready", "network", f.cfg.Network, "bridge", f.cfg.Bridge, "egress", f.cfg.Egress, "chains", f.prefix+"*",
		"host_addrs", f.cfg.HostAddrs, "intercept", intercept, "ipv6_rules", f.ipv6, "other_daemons", len(others))
	return nil
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
