package firewall_test

import (
	"context"
	"errors"
	"net/netip"
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

// fakeIptables answers iptables -S from a fixed table and records every
// transaction given to iptables-restore.
type fakeIptables struct {
	mu       sync.Mutex
	chains   map[string][]string // chain -> "-A ..." lines
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
	if len(args) == 2 && args[0] == "-S" {
		rules, ok := f.chains[args[1]]
		if !ok {
			return []byte("iptables: No chain/target/match by that name."), errors.New("exit status 1")
		}
		return []byte("-N " + args[1] + "\n" + strings.Join(rules, "\n") + "\n"), nil
	}
	if len(args) == 1 && args[0] == "-S" {
		var out []string
		for c, rules := range f.chains {
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
		"no network":       {Bridge: "br0"},
		"no bridge":        {Network: "n"},
		"long bridge":      {Network: "n", Bridge: "a-very-long-bridge-name"},
		"bad egress":       {Network: "n", Bridge: "br0", Egress: "some"},
		"allow link-local": {Network: "n", Bridge: "br0", Allow: []netip.Prefix{netip.MustParsePrefix("169.254.169.254/32")}},
		"bad port range":   {Network: "n", Bridge: "br0", HostPorts: []firewall.PortRange{{Lo: 9, Hi: 8}}},
		"ipv6 dns":         {Network: "n", Bridge: "br0", DNS: []netip.Addr{netip.MustParseAddr("::1")}},
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
