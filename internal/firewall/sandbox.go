// This file keeps the per-sandbox state: applying a sandbox's policy and NAT
// rules, removing them, and pruning those of sandboxes that are gone.

package firewall

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

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
