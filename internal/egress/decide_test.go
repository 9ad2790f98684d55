package egress

import (
	"context"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/miekg/dns"
)

func TestDecide(t *testing.T) {
	allowed := Rules{SandboxID: "sb1", AllowDomains: []string{"allowed.test"}, None: true}
	tests := []struct {
		name     string
		operator []netip.Prefix
		rules    Rules
		// remember maps names to the addresses the DNS server gave for
		// them, before the connection.
		remember map[string][]string
		host     string
		dst      string
		want     string
	}{
		{"allowed name to its address", nil, allowed,
			map[string][]string{"allowed.test": {"203.0.113.10"}}, "allowed.test", "203.0.113.10:443", ""},
		{"allowed name to one of its addresses", nil, allowed,
			map[string][]string{"allowed.test": {"203.0.113.9", "203.0.113.10"}}, "allowed.test", "203.0.113.10:80", ""},
		// A client picks its SNI freely: an allowed name must not open an
		// address it does not resolve to. No upstream is configured, so
		// the server cannot find that it does.
		{"allowed name to another address", nil, allowed,
			map[string][]string{"allowed.test": {"203.0.113.10"}}, "allowed.test", "198.51.100.7:443", ReasonSpoofed},
		{"allowed name never resolved", nil, allowed, nil, "allowed.test", "203.0.113.10:443", ReasonSpoofed},
		{"another name's address", nil, allowed,
			map[string][]string{"allowed.test": {"203.0.113.10"}, "other.test": {"198.51.100.7"}}, "allowed.test", "198.51.100.7:443", ReasonSpoofed},
		{"unlisted name", nil, allowed,
			map[string][]string{"other.test": {"203.0.113.20"}}, "other.test", "203.0.113.20:443", ReasonNotAllowed},
		{"no name", nil, allowed, nil, "", "203.0.113.10:443", ReasonNoName},
		{"allowed name to a private address", nil, allowed,
			map[string][]string{"allowed.test": {"10.1.2.3"}}, "allowed.test", "10.1.2.3:443", ReasonPrivate},
		{"allowed name to the metadata service", nil, allowed,
			map[string][]string{"allowed.test": {"169.254.169.254"}}, "allowed.test", "169.254.169.254:80", ReasonPrivate},
		{"operator opens a private range", []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, allowed,
			map[string][]string{"allowed.test": {"10.1.2.3"}}, "allowed.test", "10.1.2.3:443", ""},
		{"operator range still checks the name's address", []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, allowed,
			map[string][]string{"allowed.test": {"10.1.2.3"}}, "allowed.test", "10.1.2.4:443", ReasonSpoofed},
		{"operator range does not open link-local", []netip.Prefix{netip.MustParsePrefix("169.254.0.0/16")}, allowed,
			map[string][]string{"allowed.test": {"169.254.169.254"}}, "allowed.test", "169.254.169.254:80", ReasonPrivate},
		{"allow CIDR with an unlisted name", nil, withCIDR(allowed, "198.51.100.0/24"), nil, "other.test", "198.51.100.7:443", ""},
		{"allow CIDR with no name", nil, withCIDR(allowed, "198.51.100.0/24"), nil, "", "198.51.100.7:443", ""},
		{"allow CIDR with an allowed name elsewhere", nil, withCIDR(allowed, "198.51.100.0/24"),
			map[string][]string{"allowed.test": {"203.0.113.10"}}, "allowed.test", "198.51.100.7:443", ""},
		{"allow CIDR opens a private range", nil, withCIDR(allowed, "10.5.0.0/16"), nil, "other.test", "10.5.0.1:443", ""},
		{"outside the allow CIDR", nil, withCIDR(allowed, "198.51.100.0/24"), nil, "other.test", "198.51.101.7:443", ReasonNotAllowed},
		{"denied name", nil, Rules{SandboxID: "sb1", DenyDomains: []string{"*.evil.test"}},
			map[string][]string{"x.evil.test": {"203.0.113.30"}}, "x.evil.test", "203.0.113.30:443", ReasonDenied},
		{"denied name with None", nil, Rules{SandboxID: "sb1", AllowDomains: []string{"allowed.test"}, DenyDomains: []string{"evil.test"}, None: true},
			nil, "evil.test", "203.0.113.30:443", ReasonDenied},
		{"allow wins over deny", nil, Rules{SandboxID: "sb1", AllowDomains: []string{"api.evil.test"}, DenyDomains: []string{"*.evil.test"}},
			map[string][]string{"api.evil.test": {"203.0.113.31"}}, "api.evil.test", "203.0.113.31:443", ""},
		// Without None and without domains to allow, the addresses decide
		// as the firewall would.
		{"default public", nil, Rules{SandboxID: "sb1"}, nil, "other.test", "203.0.113.40:443", ""},
		{"default public without a name", nil, Rules{SandboxID: "sb1"}, nil, "", "203.0.113.40:443", ""},
		{"default private", nil, Rules{SandboxID: "sb1"}, nil, "other.test", "10.1.2.3:443", ReasonNotAllowed},
		{"default private without a name", nil, Rules{SandboxID: "sb1"}, nil, "", "10.1.2.3:443", ReasonAddress},
		{"default link-local", nil, Rules{SandboxID: "sb1"}, nil, "", "169.254.169.254:80", ReasonAddress},
		{"deny CIDR", nil, Rules{SandboxID: "sb1", DenyCIDRs: []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")}}, nil, "", "203.0.113.40:443", ReasonAddress},
		{"learn allows a resolved name", nil, Rules{SandboxID: "sb1", Learn: true, None: true},
			map[string][]string{"any.test": {"203.0.113.50"}}, "any.test", "203.0.113.50:443", ""},
		{"learn still checks the address", nil, Rules{SandboxID: "sb1", Learn: true, None: true},
			map[string][]string{"any.test": {"203.0.113.50"}}, "any.test", "203.0.113.51:443", ReasonSpoofed},
		{"learn still refuses private", nil, Rules{SandboxID: "sb1", Learn: true, None: true},
			map[string][]string{"any.test": {"10.1.2.3"}}, "any.test", "10.1.2.3:443", ReasonPrivate},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := New(Config{Operator: tt.operator})
			for n, as := range tt.remember {
				addrs := make([]netip.Addr, len(as))
				for i, a := range as {
					addrs[i] = netip.MustParseAddr(a)
				}
				s.remember(n, addrs, time.Minute)
			}
			got := s.decide(t.Context(), tt.rules, tt.host, netip.MustParseAddrPort(tt.dst))
			if got != tt.want {
				t.Errorf("decide(%q, %s) = %q, want %q", tt.host, tt.dst, got, tt.want)
			}
		})
	}
}

func withCIDR(r Rules, cidr string) Rules {
	r.AllowCIDRs = append(slices.Clone(r.AllowCIDRs), netip.MustParsePrefix(cidr))
	return r
}

// TestDecideLearns checks that a connection in learn mode records its name,
// and only its name.
func TestDecideLearns(t *testing.T) {
	s := New(Config{})
	r := Rules{SandboxID: "sb1", Learn: true}
	s.Set(netip.MustParseAddr("192.0.2.2"), r)
	s.remember("b.test", []netip.Addr{netip.MustParseAddr("203.0.113.1")}, time.Minute)
	s.remember("a.test", []netip.Addr{netip.MustParseAddr("203.0.113.2")}, time.Minute)
	for _, c := range []struct{ host, dst string }{
		{"b.test", "203.0.113.1:443"},
		{"a.test", "203.0.113.2:443"},
		{"", "203.0.113.3:443"},
		{"b.test", "203.0.113.1:80"},
	} {
		if why := s.decide(t.Context(), r, c.host, netip.MustParseAddrPort(c.dst)); why != "" {
			t.Errorf("decide(%q, %s) = %q, want allowed", c.host, c.dst, why)
		}
	}
	if got, want := s.Learned("sb1"), []string{"a.test", "b.test"}; !slices.Equal(got, want) {
		t.Errorf("Learned = %q, want %q", got, want)
	}
}

// TestDecideAsksUpstream checks that an allowed name the DNS server never
// answered is checked by asking the upstream resolver, since a sandbox may
// have learnt the address elsewhere, and that the answer is then kept.
func TestDecideAsksUpstream(t *testing.T) {
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	asked := make(chan string, 10)
	started := make(chan struct{})
	up := &dns.Server{PacketConn: pc, NotifyStartedFunc: func() { close(started) },
		Handler: dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
			asked <- q.Question[0].Name
			m := new(dns.Msg)
			m.SetReply(q)
			if q.Question[0].Name == "allowed.test." {
				m.Answer = append(m.Answer, &dns.A{
					Hdr: dns.RR_Header{Name: q.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60},
					A:   net.ParseIP("203.0.113.10"),
				})
			}
			_ = w.WriteMsg(m)
		})}
	go func() { _ = up.ActivateAndServe() }()
	<-started
	t.Cleanup(func() { _ = up.Shutdown() })

	s := New(Config{Upstream: []string{pc.LocalAddr().String()}})
	r := Rules{SandboxID: "sb1", AllowDomains: []string{"allowed.test"}, None: true}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if why := s.decide(ctx, r, "allowed.test", netip.MustParseAddrPort("203.0.113.10:443")); why != "" {
		t.Fatalf("decide for the address upstream gives = %q, want allowed", why)
	}
	if why := s.decide(ctx, r, "allowed.test", netip.MustParseAddrPort("203.0.113.11:443")); why != ReasonSpoofed {
		t.Errorf("decide for another address = %q, want %q", why, ReasonSpoofed)
	}
	for range 2 {
		if n := <-asked; n != "allowed.test." {
			t.Errorf("upstream asked %q, want allowed.test.", n)
		}
	}
	// The first answer is kept: a third connection to the address needs
	// no question upstream.
	if why := s.decide(ctx, r, "allowed.test", netip.MustParseAddrPort("203.0.113.10:443")); why != "" {
		t.Errorf("decide again = %q, want allowed", why)
	}
	select {
	case n := <-asked:
		t.Errorf("upstream asked %q again; the answer was not kept", n)
	default:
	}
}

// TestRememberExpires checks that addresses a name resolved to are kept at
// least minCacheTTL, however short the answer's TTL, and dropped once they
// expire.
func TestRememberExpires(t *testing.T) {
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	s := New(Config{Now: func() time.Time { return now }})
	r := Rules{SandboxID: "sb1", AllowDomains: []string{"allowed.test"}, None: true}
	dst := netip.MustParseAddrPort("203.0.113.10:443")
	s.remember("allowed.test", []netip.Addr{dst.Addr()}, time.Second)
	now = now.Add(minCacheTTL - time.Second)
	if why := s.decide(t.Context(), r, "allowed.test", dst); why != "" {
		t.Errorf("within minCacheTTL: decide = %q, want allowed", why)
	}
	now = now.Add(2 * time.Second)
	if why := s.decide(t.Context(), r, "allowed.test", dst); why != ReasonSpoofed {
		t.Errorf("after expiry: decide = %q, want %q", why, ReasonSpoofed)
	}
}
