package firewall_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"maps"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/sandpit-dev/sandpit/internal/firewall"
)

func TestParseCIDR(t *testing.T) {
	for in, want := range map[string]string{
		"1.2.3.4":      "1.2.3.4/32",
		" 8.8.8.0/24 ": "8.8.8.0/24",
		"10.1.2.3/8":   "10.0.0.0/8",
		"0.0.0.0/0":    "0.0.0.0/0",
		"example.com":  "",
		"*.example":    "",
		"::1":          "",
		"fd00::/8":     "",
		"1.2.3.4/33":   "",
		"":             "",
		"1.2.3":        "",
	} {
		got, err := firewall.ParseCIDR(in)
		switch {
		case want == "" && !errors.Is(err, firewall.ErrInvalid):
			t.Errorf("ParseCIDR(%q) = %v, %v; want ErrInvalid", in, got, err)
		case want != "" && (err != nil || got.String() != want):
			t.Errorf("ParseCIDR(%q) = %v, %v; want %s", in, got, err, want)
		}
	}
}

// fakeIptables answers iptables -S from fixed tables and records every
// transaction given to iptables-restore.
type fakeIptables struct {
	mu       sync.Mutex
	chains   map[string][]string // filter table: chain -> "-A ..." lines
	nat      map[string][]string // nat table, the same way
	restores []string
	calls    []string
}

func (f *fakeIptables) run(_ context.Context, stdin []byte, name string, args ...string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, name+" "+strings.Join(args, " "))
	if strings.HasSuffix(name, "-restore") {
		f.restores = append(f.restores, string(stdin))
		return nil, nil
	}
	args = slices.DeleteFunc(args, func(a string) bool { return a == "--wait" })
	table := f.chains
	if len(args) >= 2 && args[0] == "-t" {
		if args[1] == "nat" {
			table = f.nat
		}
		args = args[2:]
	}
	if len(args) == 2 && args[0] == "-S" {
		rules, ok := table[args[1]]
		if !ok {
			return []byte("iptables: No chain/target/match by that name."), errors.New("exit status 1")
		}
		return []byte("-N " + args[1] + "\n" + strings.Join(rules, "\n") + "\n"), nil
	}
	if len(args) == 1 && args[0] == "-S" {
		var out []string
		for c, rules := range table {
			out = append(out, "-N "+c)
			out = append(out, rules...)
		}
		return []byte(strings.Join(out, "\n") + "\n"), nil
	}
	return nil, nil
}

func newFirewall(t *testing.T, cfg firewall.Config, fake *fakeIptables) *firewall.Firewall {
	t.Helper()
	if cfg.Network == "" {
		cfg.Network = "sandpit"
	}
	if cfg.Bridge == "" {
		cfg.Bridge = "sp-test"
	}
	f, err := firewall.NewWithRunner(cfg, fake.run)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestNewRefuses(t *testing.T) {
	for name, cfg := range map[string]firewall.Config{
		"no network":           {Bridge: "br0"},
		"no bridge":            {Network: "n"},
		"long bridge":          {Network: "n", Bridge: "a-very-long-bridge-name"},
		"bad egress":           {Network: "n", Bridge: "br0", Egress: "some"},
		"allow link-local":     {Network: "n", Bridge: "br0", Allow: []netip.Prefix{netip.MustParsePrefix("169.254.169.254/32")}},
		"bad port range":       {Network: "n", Bridge: "br0", HostPorts: []firewall.PortRange{{Lo: 9, Hi: 8}}},
		"ipv6 dns":             {Network: "n", Bridge: "br0", DNS: []netip.Addr{netip.MustParseAddr("::1")}},
		"intercept no address": {Network: "n", Bridge: "br0", Intercept: &firewall.Intercept{ProxyPort: 1, DNSPort: 2}},
		"intercept ipv6": {Network: "n", Bridge: "br0", Intercept: &firewall.Intercept{
			Addr: netip.MustParseAddr("fd00::1"), ProxyPort: 1, DNSPort: 2}},
		"intercept loopback": {Network: "n", Bridge: "br0", Intercept: &firewall.Intercept{
			Addr: netip.MustParseAddr("127.0.0.1"), ProxyPort: 1, DNSPort: 2}},
		"intercept port 0": {Network: "n", Bridge: "br0", Intercept: &firewall.Intercept{
			Addr: netip.MustParseAddr("10.0.0.1"), ProxyPort: 0, DNSPort: 2}},
		"intercept port too high": {Network: "n", Bridge: "br0", Intercept: &firewall.Intercept{
			Addr: netip.MustParseAddr("10.0.0.1"), ProxyPort: 1, DNSPort: 65536}},
	} {
		if _, err := firewall.NewWithRunner(cfg, (&fakeIptables{}).run); !errors.Is(err, firewall.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
}

// The global chains: sandboxes never reach each other or link-local, the
// private ranges are refused after the operator's allow list, and the
// daemon's "none" refuses the rest.
func TestGlobalRules(t *testing.T) {
	fw := newFirewall(t, firewall.Config{
		Egress:    firewall.EgressNone,
		Allow:     []netip.Prefix{netip.MustParsePrefix("10.9.0.0/16")},
		HostPorts: []firewall.PortRange{{Lo: 7480, Hi: 7480}, {Lo: 22000, Hi: 23000}},
		HostAddrs: []netip.Addr{netip.MustParseAddr("10.0.0.1")},
		Instance:  "abc",
		DNS:       []netip.Addr{netip.MustParseAddr("10.255.255.53"), netip.MustParseAddr("169.254.169.254")},
	}, &fakeIptables{})
	p := firewall.ChainPrefix("sandpit")
	keep := "-A " + p + "FWD -s 10.0.0.2/32 -m comment --comment sandpit:sb1 -g " + p + "0123456789"
	got := strings.Join(fw.GlobalRules([]string{keep}), "\n")
	for _, want := range []string{
		"-A " + p + "IN -m comment --comment sandpit-instance:abc\n-A " + p + "IN -d 10.0.0.1/32 -p tcp -m multiport --dports 7480,22000:23000 -m comment --comment sandpit-instance:abc -j RETURN\n-A " + p + "IN -j " + p + "REJ",
		"-A " + p + "FWD -o sp-test -j " + p + "REJ\n-A " + p + "FWD -d 169.254.0.0/16 -j " + p + "LL\n" + keep + "\n-A " + p + "FWD -g " + p + "DEF",
		"-A " + p + "LL -d 169.254.169.254/32 -p udp --dport 53 -j RETURN\n-A " + p + "LL -d 169.254.169.254/32 -p tcp --dport 53 -j RETURN\n-A " + p + "LL -j " + p + "REJ",
		"-A " + p + "DEF -d 10.255.255.53/32 -p udp --dport 53 -j RETURN\n-A " + p + "DEF -d 10.255.255.53/32 -p tcp --dport 53 -j RETURN\n" +
			"-A " + p + "DEF -d 10.9.0.0/16 -j RETURN\n-A " + p + "DEF -d 10.0.0.0/8 -j " + p + "REJ",
		"-A " + p + "DEF -d 240.0.0.0/4 -j " + p + "REJ\n-A " + p + "DEF -j " + p + "REJ",
		"-A " + p + "REJ -p tcp -j REJECT --reject-with tcp-reset",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("global rules lack\n%s\nin\n%s", want, got)
		}
	}
	if strings.Contains(got, "IN -p tcp") {
		t.Errorf("host ports open on every host address:\n%s", got)
	}
	if strings.Contains(got, "ACCEPT") {
		t.Errorf("global rules ACCEPT (they must only RETURN or refuse):\n%s", got)
	}
}

func TestSandboxRules(t *testing.T) {
	p := firewall.ChainPrefix("sandpit")
	lan := netip.MustParsePrefix("10.1.0.0/16")
	all := netip.MustParsePrefix("0.0.0.0/0")
	cases := []struct {
		name   string
		daemon firewall.Egress
		policy firewall.Policy
		want   []string // rule bodies after "-A <chain> "
	}{
		{"none", firewall.EgressPublic, firewall.Policy{Egress: firewall.EgressNone}, []string{"-j " + p + "REJ"}},
		{"deny", firewall.EgressPublic, firewall.Policy{Deny: []netip.Prefix{all}}, []string{"-d 0.0.0.0/0 -j " + p + "REJ", "-g " + p + "DEF"}},
		{"allow wins", firewall.EgressPublic, firewall.Policy{Allow: []netip.Prefix{lan}, Deny: []netip.Prefix{all}},
			[]string{"-d 10.1.0.0/16 -j RETURN", "-d 0.0.0.0/0 -j " + p + "REJ", "-g " + p + "DEF"}},
		{"daemon none is a ceiling", firewall.EgressNone, firewall.Policy{Allow: []netip.Prefix{lan}},
			[]string{"-d 10.1.0.0/16 -g " + p + "DEF", "-g " + p + "DEF"}},
	}
	for _, tc := range cases {
		fw := newFirewall(t, firewall.Config{Egress: tc.daemon}, &fakeIptables{})
		chain := fw.SandboxChain("sb1")
		var want []string
		want = append(want, ":"+chain+" - [0:0]")
		for _, w := range tc.want {
			want = append(want, "-A "+chain+" "+w)
		}
		if got := fw.SandboxRules("sb1", tc.policy); !slices.Equal(got, want) {
			t.Errorf("%s:\n got %q\nwant %q", tc.name, got, want)
		}
	}
}

// Apply replaces the sandbox's own rules and any rule another sandbox left
// for the same address, in one transaction; Remove deletes exactly the
// sandbox's rule.
func TestApplyAndRemove(t *testing.T) {
	p := firewall.ChainPrefix("sandpit")
	old := "-A " + p + "FWD -s 10.0.0.5/32 -m comment --comment sandpit:gone -g " + p + "aaaaaaaaaa"
	other := "-A " + p + "FWD -s 10.0.0.6/32 -m comment --comment \"sandpit:other\" -g " + p + "bbbbbbbbbb"
	fake := &fakeIptables{chains: map[string][]string{p + "FWD": {
		"-A " + p + "FWD -o sp-test -j " + p + "REJ", old, other, "-A " + p + "FWD -g " + p + "DEF",
	}}}
	fw := newFirewall(t, firewall.Config{}, fake)
	ctx := context.Background()
	err := fw.Apply(ctx, "sb1", netip.MustParseAddr("10.0.0.5"), firewall.Policy{Egress: firewall.EgressNone})
	if err != nil {
		t.Fatal(err)
	}
	if len(fake.restores) != 1 {
		t.Fatalf("%d transactions, want 1: %q", len(fake.restores), fake.restores)
	}
	tx := fake.restores[0]
	for _, want := range []string{
		":" + fw.SandboxChain("sb1") + " - [0:0]",
		"-D" + strings.TrimPrefix(old, "-A") + "\n",
		"-I " + p + "FWD 3 -s 10.0.0.5/32 -m comment --comment sandpit:sb1 -g " + fw.SandboxChain("sb1"),
	} {
		if !strings.Contains(tx, want) {
			t.Errorf("transaction lacks %q:\n%s", want, tx)
		}
	}
	if strings.Contains(tx, "sandpit:other") {
		t.Errorf("transaction touched another sandbox's rule:\n%s", tx)
	}
	if !strings.Contains(tx, "-X "+p+"aaaaaaaaaa\n") {
		t.Errorf("the replaced sandbox's chain was not deleted in the same transaction:\n%s", tx)
	}
	if strings.Contains(tx, "-X "+fw.SandboxChain("sb1")) {
		t.Errorf("the sandbox's own chain was deleted:\n%s", tx)
	}

	fake.restores = nil
	if err := fw.Remove(ctx, "other"); err != nil {
		t.Fatal(err)
	}
	if len(fake.restores) != 1 || !strings.Contains(fake.restores[0], "-D"+strings.TrimPrefix(other, "-A")+"\n-F "+p+"bbbbbbbbbb\n-X "+p+"bbbbbbbbbb\n") {
		t.Errorf("remove: %q", fake.restores)
	}
	// Removing a sandbox that has no rules changes nothing.
	fake.restores = nil
	if err := fw.Remove(ctx, "never-had-rules"); err != nil || len(fake.restores) != 0 {
		t.Errorf("remove of nothing: %v %q", err, fake.restores)
	}
}

// Two daemons share a network: re-asserting the chains keeps the other
// daemon's port rule and its sandboxes' rules, pruning leaves its sandboxes
// alone, and releasing reports that the network is still used.
func TestSharedNetwork(t *testing.T) {
	p := firewall.ChainPrefix("sandpit")
	theirsIN := "-A " + p + "IN -d 10.0.0.1/32 -p tcp -m multiport --dports 9000 -m comment --comment sandpit-instance:other -j RETURN"
	mineIN := "-A " + p + "IN -d 10.0.0.1/32 -p tcp -m multiport --dports 7480 -m comment --comment sandpit-instance:mine -j RETURN"
	theirs := "-A " + p + "FWD -s 10.0.0.7/32 -m comment --comment sandpit:sbx@other -g " + p + "cccccccccc"
	fake := &fakeIptables{chains: map[string][]string{
		"DOCKER-USER":    {},
		p + "IN":         {"-A " + p + "IN -m conntrack --ctstate ESTABLISHED,RELATED -j RETURN", theirsIN, mineIN, "-A " + p + "IN -j " + p + "REJ"},
		p + "FWD":        {"-A " + p + "FWD -o sp-test -j " + p + "REJ", theirs, "-A " + p + "FWD -g " + p + "DEF"},
		p + "cccccccccc": {"-A " + p + "cccccccccc -j " + p + "REJ"},
	}}
	fw := newFirewall(t, firewall.Config{Instance: "mine", HostPorts: []firewall.PortRange{{Lo: 7480, Hi: 7480}},
		HostAddrs: []netip.Addr{netip.MustParseAddr("10.0.0.1")}}, fake)
	ctx := context.Background()
	if err := fw.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(fake.restores[0], theirsIN+"\n") || !strings.Contains(fake.restores[0], theirs+"\n") {
		t.Errorf("Ensure dropped the other daemon's rules:\n%s", fake.restores[0])
	}
	fake.restores = nil
	if err := fw.Prune(ctx, map[string]bool{}); err != nil {
		t.Fatal(err)
	}
	for _, tx := range fake.restores {
		if strings.Contains(tx, "sbx") {
			t.Errorf("Prune removed the other daemon's sandbox: %s", tx)
		}
	}
	for _, c := range fake.calls {
		if strings.Contains(c, "cccccccccc") && (strings.Contains(c, " -X ") || strings.Contains(c, " -F ")) {
			t.Errorf("Prune deleted the other daemon's chain: %s", c)
		}
	}
	fake.restores = nil
	others, err := fw.Release(ctx)
	if err != nil || !others {
		t.Errorf("Release: %v, %v; want the other daemon reported", others, err)
	}
	if len(fake.restores) != 1 || !strings.Contains(fake.restores[0], "-D"+strings.TrimPrefix(mineIN, "-A")) || strings.Contains(fake.restores[0], "other") {
		t.Errorf("Release transaction: %q", fake.restores)
	}
}

// intercept is the target the interception tests send traffic to.
var intercept = &firewall.Intercept{Addr: netip.MustParseAddr("10.0.0.1"), ProxyPort: 3128, DNSPort: 5353}

// A sandbox that intercepts has its web traffic and its DNS, to any
// destination, rewritten to the listeners; any other has no NAT rule.
func TestNATRules(t *testing.T) {
	p := firewall.ChainPrefix("sandpit")
	ip := netip.MustParseAddr("10.0.0.5")
	head := "-A " + p + "NAT -s 10.0.0.5/32 "
	mark := " -m comment --comment sandpit:sb1@mine "
	cases := []struct {
		name      string
		intercept *firewall.Intercept
		policy    firewall.Policy
		want      []string
	}{
		{"intercept", intercept, firewall.Policy{Intercept: true}, []string{
			head + "-p tcp -m multiport --dports 80,443" + mark + "-j DNAT --to-destination 10.0.0.1:3128",
			head + "-p udp --dport 53" + mark + "-j DNAT --to-destination 10.0.0.1:5353",
			head + "-p tcp --dport 53" + mark + "-j DNAT --to-destination 10.0.0.1:5353",
		}},
		// Egress none does not stop the redirection: the listeners decide.
		{"intercept and egress none", intercept, firewall.Policy{Intercept: true, Egress: firewall.EgressNone}, []string{
			head + "-p tcp -m multiport --dports 80,443" + mark + "-j DNAT --to-destination 10.0.0.1:3128",
			head + "-p udp --dport 53" + mark + "-j DNAT --to-destination 10.0.0.1:5353",
			head + "-p tcp --dport 53" + mark + "-j DNAT --to-destination 10.0.0.1:5353",
		}},
		{"no intercept", intercept, firewall.Policy{Egress: firewall.EgressNone}, nil},
		{"zero policy", intercept, firewall.Policy{}, nil},
		{"no target", nil, firewall.Policy{Intercept: true}, nil},
	}
	for _, tc := range cases {
		fw := newFirewall(t, firewall.Config{Instance: "mine", Intercept: tc.intercept}, &fakeIptables{})
		if got := fw.NATRules("sb1", ip, tc.policy); !slices.Equal(got, tc.want) {
			t.Errorf("%s:\n got %q\nwant %q", tc.name, got, tc.want)
		}
	}
	if (firewall.Policy{Intercept: true}).IsZero() {
		t.Error("a policy that intercepts is zero")
	}
}

// IN admits the rewritten traffic, which arrives addressed to the
// listeners, ahead of its final refusal, whether or not the daemon has host
// ports of its own; without a target it admits nothing of the kind.
func TestInterceptPortRules(t *testing.T) {
	p := firewall.ChainPrefix("sandpit")
	in := "-A " + p + "IN -d 10.0.0.1/32 "
	cases := []struct {
		name string
		cfg  firewall.Config
		want []string
	}{
		{"with instance", firewall.Config{Instance: "abc", Intercept: intercept}, []string{
			in + "-p tcp --dport 3128 -m comment --comment sandpit-instance:abc -j RETURN",
			in + "-p udp --dport 5353 -m comment --comment sandpit-instance:abc -j RETURN",
			in + "-p tcp --dport 5353 -m comment --comment sandpit-instance:abc -j RETURN",
		}},
		{"with host ports", firewall.Config{Instance: "abc", Intercept: intercept,
			HostPorts: []firewall.PortRange{{Lo: 7480, Hi: 7480}}, HostAddrs: []netip.Addr{netip.MustParseAddr("10.0.0.1")}}, []string{
			in + "-p tcp -m multiport --dports 7480 -m comment --comment sandpit-instance:abc -j RETURN",
			in + "-p tcp --dport 3128 -m comment --comment sandpit-instance:abc -j RETURN",
			in + "-p udp --dport 5353 -m comment --comment sandpit-instance:abc -j RETURN",
			in + "-p tcp --dport 5353 -m comment --comment sandpit-instance:abc -j RETURN",
		}},
		{"without instance", firewall.Config{Intercept: intercept}, []string{
			in + "-p tcp --dport 3128 -j RETURN",
			in + "-p udp --dport 5353 -j RETURN",
			in + "-p tcp --dport 5353 -j RETURN",
		}},
		{"no target", firewall.Config{Instance: "abc"}, nil},
	}
	for _, tc := range cases {
		rules := newFirewall(t, tc.cfg, &fakeIptables{}).GlobalRules(nil)
		reject := slices.Index(rules, "-A "+p+"IN -j "+p+"REJ")
		if reject < 0 {
			t.Fatalf("%s: IN has no final reject:\n%s", tc.name, strings.Join(rules, "\n"))
		}
		var got []string
		for _, r := range rules[:reject] {
			if strings.HasPrefix(r, in) {
				got = append(got, r)
			}
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: IN rules before the reject:\n got %q\nwant %q", tc.name, got, tc.want)
		}
		for _, r := range rules[reject:] {
			if strings.Contains(r, "--dport") {
				t.Errorf("%s: port rule after IN's reject: %s", tc.name, r)
			}
		}
	}
}

// A policy that intercepts needs a target: without one, Apply refuses it
// before touching iptables.
func TestApplyInterceptWithoutTarget(t *testing.T) {
	fake := &fakeIptables{}
	fw := newFirewall(t, firewall.Config{}, fake)
	err := fw.Apply(context.Background(), "sb1", netip.MustParseAddr("10.0.0.5"), firewall.Policy{Intercept: true})
	if !errors.Is(err, firewall.ErrInvalid) {
		t.Errorf("Apply = %v, want ErrInvalid", err)
	}
	if len(fake.calls) != 0 {
		t.Errorf("ran iptables: %q", fake.calls)
	}
}

// tables splits an iptables-restore input into its tables' lines, in order.
func tables(tx string) (names []string, lines map[string][]string) {
	lines = map[string][]string{}
	var cur string
	for _, l := range strings.Split(strings.TrimSpace(tx), "\n") {
		switch {
		case strings.HasPrefix(l, "*"):
			cur = strings.TrimPrefix(l, "*")
			names = append(names, cur)
		case l == "COMMIT":
		default:
			lines[cur] = append(lines[cur], l)
		}
	}
	return names, lines
}

// Apply replaces a sandbox's NAT rules and any other sandbox's for the same
// address, along with its filter rules in the same iptables-restore: a
// redirection being added is committed before the filter rules, one being
// taken away after them, so that the sandbox's web traffic never meets the
// old filter rules the old redirection kept it from. Remove takes the NAT
// rules away too.
func TestApplyIntercept(t *testing.T) {
	p := firewall.ChainPrefix("sandpit")
	nat := p + "NAT"
	// Rules as iptables -S prints them: the comment quoted, the implicit
	// protocol match spelled out.
	printed := func(id, ip string) []string {
		h := "-A " + nat + " -s " + ip + "/32 "
		c := ` -m comment --comment "sandpit:` + id + `@mine" `
		return []string{
			h + "-p tcp -m multiport --dports 80,443" + c + "-j DNAT --to-destination 10.0.0.1:3128",
			h + "-p udp -m udp --dport 53" + c + "-j DNAT --to-destination 10.0.0.1:5353",
			h + "-p tcp -m tcp --dport 53" + c + "-j DNAT --to-destination 10.0.0.1:5353",
		}
	}
	deletions := func(rules []string) []string {
		var out []string
		for _, r := range rules {
			out = append(out, "-D"+strings.TrimPrefix(r, "-A"))
		}
		return out
	}
	sb1, gone, other := printed("sb1", "10.0.0.5"), printed("gone", "10.0.0.5"), printed("other", "10.0.0.6")
	fw := newFirewall(t, firewall.Config{Instance: "mine", Intercept: intercept}, &fakeIptables{})
	fresh := fw.NATRules("sb1", netip.MustParseAddr("10.0.0.5"), firewall.Policy{Intercept: true})
	cases := []struct {
		name    string
		present []string // the NAT chain before
		policy  firewall.Policy
		order   []string // the tables of the transaction
		want    []string // the nat table's lines
	}{
		{"start intercepting", append(slices.Clone(gone), other...), firewall.Policy{Intercept: true},
			[]string{"nat", "filter"}, append(deletions(gone), fresh...)},
		{"stop intercepting", append(slices.Clone(sb1), other...), firewall.Policy{Egress: firewall.EgressNone},
			[]string{"filter", "nat"}, deletions(sb1)},
		{"stop intercepting, back to the defaults", append(slices.Clone(sb1), other...), firewall.Policy{},
			[]string{"filter", "nat"}, deletions(sb1)},
		{"go on intercepting", append(slices.Clone(sb1), other...), firewall.Policy{Intercept: true, Egress: firewall.EgressNone},
			[]string{"nat", "filter"}, append(deletions(sb1), fresh...)},
	}
	for _, tc := range cases {
		fake := &fakeIptables{
			chains: map[string][]string{p + "FWD": {
				"-A " + p + "FWD -o sp-test -j " + p + "REJ",
				"-A " + p + "FWD -s 10.0.0.5/32 -m comment --comment sandpit:sb1@mine -g " + fw.SandboxChain("sb1"),
				"-A " + p + "FWD -g " + p + "DEF",
			}},
			nat: map[string][]string{nat: tc.present},
		}
		fw := newFirewall(t, firewall.Config{Instance: "mine", Intercept: intercept}, fake)
		if err := fw.Apply(context.Background(), "sb1", netip.MustParseAddr("10.0.0.5"), tc.policy); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if len(fake.restores) != 1 {
			t.Fatalf("%s: %d iptables-restore runs, want 1: %q", tc.name, len(fake.restores), fake.restores)
		}
		order, lines := tables(fake.restores[0])
		if !slices.Equal(order, tc.order) {
			t.Errorf("%s: tables in the order %q, want %q", tc.name, order, tc.order)
		}
		if !slices.Equal(lines["nat"], tc.want) {
			t.Errorf("%s: nat lines\n got %q\nwant %q", tc.name, lines["nat"], tc.want)
		}
	}

	fake := &fakeIptables{nat: map[string][]string{nat: append(slices.Clone(sb1), other...)}}
	fw = newFirewall(t, firewall.Config{Instance: "mine", Intercept: intercept}, fake)
	if err := fw.Remove(context.Background(), "sb1"); err != nil {
		t.Fatal(err)
	}
	if len(fake.restores) != 1 {
		t.Fatalf("remove: %d iptables-restore runs, want 1: %q", len(fake.restores), fake.restores)
	}
	if _, lines := tables(fake.restores[0]); !slices.Equal(lines["nat"], deletions(sb1)) {
		t.Errorf("remove: nat lines\n got %q\nwant %q", lines["nat"], deletions(sb1))
	}
}

// Ensure re-creates the NAT chain with every sandbox's rules in it, its own
// and another daemon's, and hooks it at the top of nat PREROUTING; Prune
// then drops the NAT rules of this daemon's sandboxes that are gone (even
// one whose dispatch rule is already gone) and keeps another daemon's;
// Release still reports the other daemon.
func TestSharedNetworkNAT(t *testing.T) {
	p := firewall.ChainPrefix("sandpit")
	nat := p + "NAT"
	rule := func(id, ip string) string {
		return "-A " + nat + " -s " + ip + "/32 -p udp -m udp --dport 53 -m comment --comment \"sandpit:" + id + "\" -j DNAT --to-destination 10.0.0.1:5353"
	}
	theirs, gone, live := rule("sbx@other", "10.0.0.7"), rule("gone@mine", "10.0.0.8"), rule("live@mine", "10.0.0.9")
	fake := &fakeIptables{
		chains: map[string][]string{"DOCKER-USER": {}},
		nat:    map[string][]string{nat: {theirs, gone, live}},
	}
	fw := newFirewall(t, firewall.Config{Instance: "mine", Intercept: intercept}, fake)
	ctx := context.Background()
	if err := fw.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	_, lines := tables(fake.restores[0])
	want := []string{":" + nat + " - [0:0]", gone, live, theirs}
	if !slices.Equal(lines["nat"], want) {
		t.Errorf("Ensure's NAT chain\n got %q\nwant %q", lines["nat"], want)
	}
	hook := `-I PREROUTING 1 -i sp-test -m comment --comment "sandpit network sandpit" -j ` + nat
	hooked := false
	for _, tx := range fake.restores {
		order, lines := tables(tx)
		if slices.Equal(order, []string{"nat"}) && slices.Contains(lines["nat"], hook) {
			hooked = true
		}
	}
	if !hooked {
		t.Errorf("Ensure did not hook the NAT chain into nat PREROUTING (%s): %q", hook, fake.restores)
	}

	fake.restores = nil
	if err := fw.Prune(ctx, map[string]bool{"live": true}); err != nil {
		t.Fatal(err)
	}
	if len(fake.restores) != 1 {
		t.Fatalf("Prune: %d iptables-restore runs, want 1: %q", len(fake.restores), fake.restores)
	}
	if _, lines := tables(fake.restores[0]); !slices.Equal(lines["nat"], []string{"-D" + strings.TrimPrefix(gone, "-A")}) {
		t.Errorf("Prune's nat lines: %q, want only the gone sandbox's rule deleted", lines["nat"])
	}
	if others, err := fw.Release(ctx); err != nil || !others {
		t.Errorf("Release: %v, %v; want the other daemon (only NAT rules of its own) reported", others, err)
	}
}

// Uninstall unhooks the NAT chain from PREROUTING, whatever bridge the hook
// names, and deletes it, before it touches the filter table.
func TestUninstallNAT(t *testing.T) {
	p := firewall.ChainPrefix("sandpit")
	nat := p + "NAT"
	hook := `-A PREROUTING -i sp-old -m comment --comment "sandpit network sandpit" -j ` + nat
	fake := &fakeIptables{
		chains: map[string][]string{"INPUT": {"-A INPUT -i sp-test -j " + p + "IN"}, p + "IN": {}},
		nat: map[string][]string{
			"PREROUTING": {"-A PREROUTING -m addrtype --dst-type LOCAL -j DOCKER", hook},
			nat:          {},
		},
	}
	fw := newFirewall(t, firewall.Config{}, fake)
	if err := fw.Uninstall(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(fake.restores) == 0 || fake.restores[0] != "*nat\n-D"+strings.TrimPrefix(hook, "-A")+"\nCOMMIT\n" {
		t.Errorf("first transaction is not the PREROUTING hook's removal: %q", fake.restores)
	}
	for _, want := range []string{"iptables --wait -t nat -F " + nat, "iptables --wait -t nat -X " + nat} {
		if !slices.Contains(fake.calls, want) {
			t.Errorf("Uninstall did not run %q: %q", want, fake.calls)
		}
	}
	for _, c := range fake.calls {
		if strings.Contains(c, "DOCKER") && !strings.Contains(c, "-S") {
			t.Errorf("Uninstall touched Docker's rules: %s", c)
		}
	}
}

// The NAT chain with the real iptables: Ensure hooks it into PREROUTING,
// Apply adds and takes away a sandbox's redirections (which iptables must
// accept as rendered, and delete again as -S prints them), a restart keeps
// them, Prune and Remove drop this daemon's and never another's, and
// Uninstall leaves nothing in the nat table. The chains hang off a bridge
// name no interface has, so no packet meets them.
func TestNATRealIptables(t *testing.T) {
	// CI has root, iptables and Docker's chains: there a missing one is a
	// broken machine, not a reason to skip.
	skip := t.Skip
	if os.Getenv("CI") == "true" {
		skip = t.Fatal
	}
	if os.Geteuid() != 0 {
		skip("needs root")
	}
	if _, err := exec.LookPath("iptables-restore"); err != nil {
		skip("no iptables")
	}
	if err := exec.Command("iptables", "--wait", "-S", "DOCKER-USER").Run(); err != nil {
		skip("no DOCKER-USER chain (Docker is not managing iptables)")
	}
	var r [4]byte
	_, _ = rand.Read(r[:])
	network, bridge := "sandpit-nattest-"+hex.EncodeToString(r[:]), "spn"+hex.EncodeToString(r[:3])
	target := &firewall.Intercept{Addr: netip.MustParseAddr("10.97.0.1"), ProxyPort: 18080, DNSPort: 15353}
	daemon := func(instance string) *firewall.Firewall {
		fw, err := firewall.New(firewall.Config{Network: network, Bridge: bridge, Instance: instance, Intercept: target})
		if err != nil {
			t.Fatal(err)
		}
		return fw
	}
	mine, theirs := daemon("mine"), daemon("other")
	ctx := context.Background()
	t.Cleanup(func() {
		if err := mine.Uninstall(context.Background()); err != nil {
			t.Errorf("uninstall: %v", err)
		}
	})
	p := firewall.ChainPrefix(network)
	list := func(table, chain string) []string {
		t.Helper()
		out, err := exec.Command("iptables", "--wait", "-t", table, "-S", chain).CombinedOutput()
		if err != nil {
			t.Fatalf("iptables -t %s -S %s: %v: %s", table, chain, err, out)
		}
		var rules []string
		for _, l := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(l, "-A ") {
				rules = append(rules, l)
			}
		}
		return rules
	}
	// sources counts the NAT rules per sandbox address.
	sources := func() map[string]int {
		t.Helper()
		n := map[string]int{}
		for _, r := range list("nat", p+"NAT") {
			n[strings.Fields(r)[3]]++
		}
		return n
	}
	expect := func(step string, want map[string]int) {
		t.Helper()
		if got := sources(); !maps.Equal(got, want) {
			t.Errorf("%s: NAT rules per source %v, want %v:\n%s", step, got, want, strings.Join(list("nat", p+"NAT"), "\n"))
		}
	}
	on := firewall.Policy{Intercept: true}
	sb1, sbx := netip.MustParseAddr("10.97.0.5"), netip.MustParseAddr("10.97.0.7")

	if err := mine.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	hook := `-A PREROUTING -i ` + bridge + ` -m comment --comment "sandpit network ` + network + `" -j ` + p + "NAT"
	if !slices.Contains(list("nat", "PREROUTING"), hook) {
		t.Fatalf("no %q in nat PREROUTING", hook)
	}
	if err := mine.Apply(ctx, "sb1", sb1, on); err != nil {
		t.Fatal(err)
	}
	if err := theirs.Apply(ctx, "sbx", sbx, on); err != nil {
		t.Fatal(err)
	}
	expect("applied", map[string]int{"10.97.0.5/32": 3, "10.97.0.7/32": 3})
	want := []string{
		"-A " + p + `NAT -s 10.97.0.5/32 -p tcp -m multiport --dports 80,443 -m comment --comment "sandpit:sb1@mine" -j DNAT --to-destination 10.97.0.1:18080`,
		"-A " + p + `NAT -s 10.97.0.5/32 -p udp -m udp --dport 53 -m comment --comment "sandpit:sb1@mine" -j DNAT --to-destination 10.97.0.1:15353`,
		"-A " + p + `NAT -s 10.97.0.5/32 -p tcp -m tcp --dport 53 -m comment --comment "sandpit:sb1@mine" -j DNAT --to-destination 10.97.0.1:15353`,
	}
	for _, w := range want {
		if !slices.Contains(list("nat", p+"NAT"), w) {
			t.Errorf("NAT chain lacks %q", w)
		}
	}
	in := strings.Join(list("filter", p+"IN"), "\n")
	for _, w := range []string{"-d 10.97.0.1/32 -p tcp -m tcp --dport 18080", "-d 10.97.0.1/32 -p udp -m udp --dport 15353", "-d 10.97.0.1/32 -p tcp -m tcp --dport 15353"} {
		if !strings.Contains(in, w) {
			t.Errorf("IN lacks %q:\n%s", w, in)
		}
	}

	// A restarted daemon keeps every sandbox's redirections.
	if err := mine.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	expect("re-ensured", map[string]int{"10.97.0.5/32": 3, "10.97.0.7/32": 3})
	if err := mine.Apply(ctx, "sb1", sb1, firewall.Policy{}); err != nil {
		t.Fatal(err)
	}
	expect("stopped intercepting", map[string]int{"10.97.0.7/32": 3})
	if err := mine.Apply(ctx, "sb1", sb1, on); err != nil {
		t.Fatal(err)
	}
	if err := mine.Prune(ctx, map[string]bool{}); err != nil {
		t.Fatal(err)
	}
	expect("pruned", map[string]int{"10.97.0.7/32": 3})
	if err := mine.Apply(ctx, "sb1", sb1, on); err != nil {
		t.Fatal(err)
	}
	if err := mine.Remove(ctx, "sb1"); err != nil {
		t.Fatal(err)
	}
	expect("removed", map[string]int{"10.97.0.7/32": 3})

	if err := mine.Uninstall(ctx); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("iptables", "--wait", "-t", "nat", "-S").CombinedOutput()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), p) {
		t.Errorf("nat table still has the network's rules after Uninstall:\n%s", out)
	}
}
