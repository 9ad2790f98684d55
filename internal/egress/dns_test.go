package egress_test

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/sandpit-dev/sandpit/internal/egress"
)

var loopback = netip.MustParseAddr("127.0.0.1")

// upstreamAnswers is what the fake upstream resolver answers for A
// questions; every other name gets fallbackAnswer.
var upstreamAnswers = map[string][]string{
	"allowed.test.": {"203.0.113.10"},
	// A name rebinding to an inside address, next to a public one.
	"rebind.test.": {"10.9.9.9", "203.0.113.11"},
	// A name pointing at the cloud metadata service.
	"meta.test.": {"169.254.169.254"},
}

const fallbackAnswer = "203.0.113.99"

// startUpstream runs a DNS server on a free UDP port of the loopback that
// answers as upstreamAnswers says, and returns its address.
func startUpstream(t *testing.T) string {
	t.Helper()
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	srv := &dns.Server{PacketConn: pc, NotifyStartedFunc: func() { close(started) },
		Handler: dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
			m := new(dns.Msg)
			m.SetReply(q)
			if len(q.Question) == 1 && q.Question[0].Qtype == dns.TypeAAAA && dns.CanonicalName(q.Question[0].Name) == "v6.test." {
				for _, a := range []string{"fd00::1", "2001:db8::1", "::ffff:10.0.0.1", "fe80::1", "::1", "::ffff:203.0.113.7"} {
					m.Answer = append(m.Answer, &dns.AAAA{
						Hdr:  dns.RR_Header{Name: q.Question[0].Name, Rrtype: dns.TypeAAAA, Class: dns.ClassINET, Ttl: 60},
						AAAA: net.ParseIP(a),
					})
				}
			}
			if len(q.Question) == 1 && q.Question[0].Qtype == dns.TypeA {
				name := q.Question[0].Name
				addrs, ok := upstreamAnswers[dns.CanonicalName(name)]
				if !ok {
					addrs = []string{fallbackAnswer}
				}
				for _, a := range addrs {
					m.Answer = append(m.Answer, &dns.A{
						Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60},
						A:   net.ParseIP(a),
					})
				}
			}
			_ = w.WriteMsg(m)
		})}
	errc := make(chan error, 1)
	go func() { errc <- srv.ActivateAndServe() }()
	select {
	case <-started:
	case err := <-errc:
		t.Fatalf("upstream DNS: %v", err)
	}
	t.Cleanup(func() {
		if err := srv.Shutdown(); err != nil {
			t.Errorf("upstream DNS shutdown: %v", err)
		}
	})
	return pc.LocalAddr().String()
}

// fixture is an egress server listening on the loopback, asking a fake
// upstream, with what it reported through OnDenied.
type fixture struct {
	s     *egress.Server
	ports egress.Ports

	mu     sync.Mutex
	denied []egress.Denial
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{}
	f.s = egress.New(egress.Config{
		Upstream: []string{startUpstream(t)},
		// OnDenied is called from the DNS server's goroutines.
		OnDenied: func(d egress.Denial) {
			f.mu.Lock()
			f.denied = append(f.denied, d)
			f.mu.Unlock()
		},
	})
	ports, err := f.s.Listen(loopback)
	if err != nil {
		t.Fatalf("Listen: %v", err)
	}
	f.ports = ports
	t.Cleanup(func() {
		if err := f.s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return f
}

func (f *fixture) reported() []egress.Denial {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.denied)
}

// query asks the egress DNS server for name's A records over netw ("udp"
// or "tcp").
func (f *fixture) query(t *testing.T, netw, name string) *dns.Msg {
	t.Helper()
	c := &dns.Client{Net: netw, Timeout: 5 * time.Second}
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), dns.TypeA)
	in, _, err := c.Exchange(m, netip.AddrPortFrom(loopback, uint16(f.ports.DNSPort)).String())
	if err != nil {
		t.Fatalf("query %s over %s: %v", name, netw, err)
	}
	if in.Id != m.Id {
		t.Errorf("query %s over %s: reply id %d, want %d", name, netw, in.Id, m.Id)
	}
	return in
}

// aRecords lists the addresses of a reply's A records.
func aRecords(m *dns.Msg) []string {
	var out []string
	for _, rr := range m.Answer {
		if a, ok := rr.(*dns.A); ok {
			out = append(out, a.A.String())
		}
	}
	return out
}

func TestListenPorts(t *testing.T) {
	f := newFixture(t)
	if f.ports.Addr != loopback || f.ports.DNSPort == 0 || f.ports.ProxyPort == 0 || f.ports.DNSPort == f.ports.ProxyPort {
		t.Errorf("Listen = %+v, want two distinct ports on %s", f.ports, loopback)
	}
}

func TestDNS(t *testing.T) {
	for _, netw := range []string{"udp", "tcp"} {
		t.Run(netw, func(t *testing.T) {
			f := newFixture(t)
			f.s.Set(loopback, egress.Rules{SandboxID: "sb1", AllowDomains: []string{"allowed.test", "rebind.test", "meta.test"}, None: true})

			tests := []struct {
				name     string
				rcode    int
				addrs    []string
				denial   bool
				addr     string // the address the denial names, if any
				reason   string
				denyName string
			}{
				{name: "allowed.test", rcode: dns.RcodeSuccess, addrs: []string{"203.0.113.10"}},
				// Names are compared in lower case.
				{name: "Allowed.TEST", rcode: dns.RcodeSuccess, addrs: []string{"203.0.113.10"}},
				{name: "other.test", rcode: dns.RcodeNameError, denial: true, reason: egress.ReasonNotAllowed, denyName: "other.test"},
				{name: "sub.allowed.test", rcode: dns.RcodeNameError, denial: true, reason: egress.ReasonNotAllowed, denyName: "sub.allowed.test"},
				// The inside address is dropped from the answer, the
				// public one kept.
				{name: "rebind.test", rcode: dns.RcodeSuccess, addrs: []string{"203.0.113.11"}, denial: true, addr: "10.9.9.9", reason: egress.ReasonPrivate, denyName: "rebind.test"},
				{name: "meta.test", rcode: dns.RcodeSuccess, denial: true, addr: "169.254.169.254", reason: egress.ReasonPrivate, denyName: "meta.test"},
			}
			want := 0
			for _, tt := range tests {
				in := f.query(t, netw, tt.name)
				if in.Rcode != tt.rcode {
					t.Errorf("%s: rcode %s, want %s", tt.name, dns.RcodeToString[in.Rcode], dns.RcodeToString[tt.rcode])
				}
				if got := aRecords(in); !slices.Equal(got, tt.addrs) {
					t.Errorf("%s: A records %q, want %q", tt.name, got, tt.addrs)
				}
				if !tt.denial {
					continue
				}
				want++
				// The denial is recorded before the reply is sent, so it
				// is there by now.
				ds, total := f.s.Denials("sb1")
				if len(ds) != want || total != uint64(want) {
					t.Fatalf("%s: Denials = %d, %d, want %d, %d", tt.name, len(ds), total, want, want)
				}
				d := ds[len(ds)-1]
				if d.SandboxID != "sb1" || d.Kind != egress.KindDNS || d.Name != tt.denyName || d.Addr != tt.addr || d.Reason != tt.reason || d.Time.IsZero() {
					t.Errorf("%s: Denial %+v, want sb1/%s/%s/%q/%s with a time", tt.name, d, egress.KindDNS, tt.denyName, tt.addr, tt.reason)
				}
				if rep := f.reported(); len(rep) != want || rep[len(rep)-1] != d {
					t.Errorf("%s: OnDenied was told %+v, want the same %d denials ending in %+v", tt.name, rep, want, d)
				}
			}

			// A sandbox no longer under name rules gets no answers (the
			// firewall no longer redirects it here), and keeps what was
			// recorded of it.
			f.s.Unset("sb1")
			if in := f.query(t, netw, "allowed.test"); in.Rcode != dns.RcodeRefused {
				t.Errorf("after Unset: rcode %s, want REFUSED", dns.RcodeToString[in.Rcode])
			}
			if _, total := f.s.Denials("sb1"); total != uint64(want) {
				t.Errorf("after Unset: %d denials, want the %d recorded before", total, want)
			}
		})
	}
}

// TestDNSUnknownSource checks that a query from an address no sandbox has
// is refused, not answered nor recorded.
func TestDNSUnknownSource(t *testing.T) {
	f := newFixture(t)
	f.s.Set(netip.MustParseAddr("192.0.2.7"), egress.Rules{SandboxID: "sb1", AllowDomains: []string{"allowed.test"}, None: true})
	if in := f.query(t, "udp", "allowed.test"); in.Rcode != dns.RcodeRefused {
		t.Errorf("rcode %s, want REFUSED", dns.RcodeToString[in.Rcode])
	}
	if ds, total := f.s.Denials("sb1"); len(ds) != 0 || total != 0 {
		t.Errorf("Denials = %v, %d, want none", ds, total)
	}
}

func TestDNSDenyList(t *testing.T) {
	f := newFixture(t)
	// Without None an unlisted name resolves, and only the deny list
	// refuses names.
	f.s.Set(loopback, egress.Rules{SandboxID: "sb1", DenyDomains: []string{"*.evil.test"}})
	if in := f.query(t, "udp", "other.test"); in.Rcode != dns.RcodeSuccess || !slices.Equal(aRecords(in), []string{fallbackAnswer}) {
		t.Errorf("other.test: %s %q, want NOERROR %s", dns.RcodeToString[in.Rcode], aRecords(in), fallbackAnswer)
	}
	if in := f.query(t, "udp", "x.evil.test"); in.Rcode != dns.RcodeNameError {
		t.Errorf("x.evil.test: rcode %s, want NXDOMAIN", dns.RcodeToString[in.Rcode])
	}
	ds, _ := f.s.Denials("sb1")
	if len(ds) != 1 || ds[0].Name != "x.evil.test" || ds[0].Reason != egress.ReasonDenied {
		t.Errorf("Denials = %+v, want one for x.evil.test, %q", ds, egress.ReasonDenied)
	}
}

func TestDNSLearn(t *testing.T) {
	f := newFixture(t)
	f.s.Set(loopback, egress.Rules{SandboxID: "sb2", Learn: true, None: true})
	for _, n := range []string{"zeta.test", "allowed.test", "Alpha.test", "zeta.test"} {
		in := f.query(t, "udp", n)
		if in.Rcode != dns.RcodeSuccess || len(aRecords(in)) != 1 {
			t.Errorf("%s: %s %q, want NOERROR and one A record", n, dns.RcodeToString[in.Rcode], aRecords(in))
		}
	}
	if got, want := f.s.Learned("sb2"), []string{"allowed.test", "alpha.test", "zeta.test"}; !slices.Equal(got, want) {
		t.Errorf("Learned = %q, want %q", got, want)
	}
	if ds, total := f.s.Denials("sb2"); len(ds) != 0 || total != 0 {
		t.Errorf("learn mode refused %+v", ds)
	}
	// Learn opens names, not inside addresses.
	if in := f.query(t, "udp", "meta.test"); len(aRecords(in)) != 0 {
		t.Errorf("meta.test in learn mode: A records %q, want none", aRecords(in))
	}
	if got := f.s.Learned("nobody"); len(got) != 0 {
		t.Errorf("Learned of an unknown sandbox = %q, want none", got)
	}
}

// TestDNSSetMovesSandbox checks that a sandbox set again at a new address
// is no longer answered at its old one, and keeps its record.
func TestDNSSetMovesSandbox(t *testing.T) {
	f := newFixture(t)
	f.s.Set(loopback, egress.Rules{SandboxID: "sb1", AllowDomains: []string{"allowed.test"}, None: true})
	f.query(t, "udp", "other.test")
	f.s.Set(netip.MustParseAddr("192.0.2.8"), egress.Rules{SandboxID: "sb1", AllowDomains: []string{"allowed.test"}, None: true})
	if in := f.query(t, "udp", "allowed.test"); in.Rcode != dns.RcodeRefused {
		t.Errorf("at the old address: rcode %s, want REFUSED", dns.RcodeToString[in.Rcode])
	}
	if _, total := f.s.Denials("sb1"); total != 1 {
		t.Errorf("after Set again: %d denials, want 1", total)
	}
	// Another sandbox given the address takes it over.
	f.s.Set(loopback, egress.Rules{SandboxID: "sb2", AllowDomains: []string{"other.test"}, None: true})
	if in := f.query(t, "udp", "other.test"); in.Rcode != dns.RcodeSuccess {
		t.Errorf("sb2: rcode %s, want NOERROR", dns.RcodeToString[in.Rcode])
	}
	f.s.Forget("sb1")
	if ds, total := f.s.Denials("sb1"); ds != nil || total != 0 {
		t.Errorf("after Forget: Denials = %v, %d, want nothing", ds, total)
	}
}

func TestDNSDenialsBounded(t *testing.T) {
	f := newFixture(t)
	f.s.Set(loopback, egress.Rules{SandboxID: "sb1", AllowDomains: []string{"allowed.test"}, None: true})
	const sent = 120
	for i := range sent {
		if in := f.query(t, "udp", fmt.Sprintf("n%d.test", i)); in.Rcode != dns.RcodeNameError {
			t.Fatalf("n%d.test: rcode %s, want NXDOMAIN", i, dns.RcodeToString[in.Rcode])
		}
	}
	ds, total := f.s.Denials("sb1")
	if len(ds) != 100 || total != sent {
		t.Fatalf("Denials = %d, %d, want 100, %d", len(ds), total, sent)
	}
	// The most recent are kept, oldest first.
	for i, d := range ds {
		if want := fmt.Sprintf("n%d.test", sent-100+i); d.Name != want {
			t.Fatalf("Denials[%d] = %s, want %s", i, d.Name, want)
		}
	}
	if n := len(f.reported()); n != sent {
		t.Errorf("OnDenied told of %d denials, want %d", n, sent)
	}
	// Denials hands out a copy: changing it changes nothing kept.
	ds[0].Name = "changed"
	if again, _ := f.s.Denials("sb1"); again[0].Name == "changed" {
		t.Error("Denials returned the server's own slice")
	}
}

// TestDNSDropsPrivateAAAA: IPv6 answers naming inside addresses (unique
// local, link-local, loopback, IPv4-mapped private) are dropped and
// recorded, as their IPv4 kin are; global ones are kept.
func TestDNSDropsPrivateAAAA(t *testing.T) {
	f := newFixture(t)
	f.s.Set(loopback, egress.Rules{SandboxID: "sb6", AllowDomains: []string{"v6.test"}, None: true})
	c := &dns.Client{Net: "udp", Timeout: 5 * time.Second}
	m := new(dns.Msg)
	m.SetQuestion("v6.test.", dns.TypeAAAA)
	in, _, err := c.Exchange(m, netip.AddrPortFrom(loopback, uint16(f.ports.DNSPort)).String())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, rr := range in.Answer {
		if a, ok := rr.(*dns.AAAA); ok {
			got = append(got, a.AAAA.String())
		}
	}
	if want := []string{"2001:db8::1", "203.0.113.7"}; !slices.Equal(got, want) {
		t.Fatalf("AAAA answers %v, want %v", got, want)
	}
	denials, total := f.s.Denials("sb6")
	if total != 4 {
		t.Fatalf("%d refusals recorded, want 4: %+v", total, denials)
	}
	for _, d := range denials {
		if d.Reason != egress.ReasonPrivate || d.Name != "v6.test" {
			t.Errorf("denial %+v", d)
		}
	}
}
