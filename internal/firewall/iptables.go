// This file runs iptables and iptables-restore and reads rules back: listing
// chains, finding the per-sandbox rules by their comment and the daemon
// instance that made them.

package firewall

import (
	"context"
	"slices"
	"strings"
)

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
