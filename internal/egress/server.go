package egress

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"

	"github.com/sandpit-dev/sandpit/internal/httpguard"
)

// Kinds of a Denial.
const (
	KindDNS = "dns"
	KindTCP = "tcp"
)

// Denial is one refused DNS answer or connection.
type Denial struct {
	Time      time.Time `json:"time"`
	SandboxID string    `json:"sandbox_id"`
	Kind      string    `json:"kind"`           // "dns" or "tcp"
	Name      string    `json:"name,omitempty"` // the name asked for or presented
	Addr      string    `json:"addr,omitempty"` // the destination address, for tcp
	Port      int       `json:"port,omitempty"`
	Reason    string    `json:"reason"`
}

// String is the line a user reads: "blocked pypi.org:443 (not in allow list)".
func (d Denial) String() string {
	what := d.Name
	if what == "" {
		what = d.Addr
	}
	if d.Kind == KindDNS {
		return fmt.Sprintf("blocked DNS %s (%s)", what, d.Reason)
	}
	return fmt.Sprintf("blocked %s:%d (%s)", what, d.Port, d.Reason)
}

// Config configures a Server.
type Config struct {
	// Upstream are the resolvers (host:port) the DNS server and the proxy
	// ask; the daemon's host resolves, not the sandbox.
	Upstream []string
	// Operator are the private ranges the operator opened to every
	// sandbox (--allow-cidr).
	Operator []netip.Prefix
	// OnDenied is told of every refusal (for metrics and events); it must
	// not block.
	OnDenied func(Denial)
	Logger   *slog.Logger
	Now      func() time.Time
	// MaxConns bounds the connections the proxy holds at once, over every
	// sandbox, and MaxConnsPerSandbox those of one sandbox: each is two
	// file descriptors (the sandbox's side and the upstream's). A sandbox
	// past its share has its new connections reset; the others are served
	// as before. Zero means no bound.
	MaxConns, MaxConnsPerSandbox int
	// IdleTimeout closes a spliced connection through which nothing has
	// passed, either way, for this long; default DefaultIdleTimeout.
	IdleTimeout time.Duration
	// CA signs the certificates the proxy presents for the hosts whose
	// requests a rule transforms; nil refuses such connections.
	CA *CA
	// UpstreamRoots verify the upstream of an intercepted connection: the
	// host's trust store plus the operator's --egress-ca. Nil means the
	// host's alone.
	UpstreamRoots *x509.CertPool
	// Secrets fills a transform's placeholders with an owner's secret.
	Secrets SecretSource
}

// SecretSource reveals an owner's secret to the proxy, for the requests
// whose rules name it; it is the only way a value leaves the store.
type SecretSource interface {
	Reveal(ctx context.Context, owner, name string) (string, error)
}

// DefaultIdleTimeout is how long a spliced connection may stay silent.
const DefaultIdleTimeout = 10 * time.Minute

// Limits of what is kept per sandbox.
const (
	maxDenials = 100
	maxLearned = 1000
	// minCacheTTL keeps the addresses a name resolved to at least this
	// long, so that a connection made just after a short-TTL answer is
	// not refused as spoofed.
	minCacheTTL = 5 * time.Minute
	maxCacheTTL = time.Hour
)

// record is what the server keeps for one sandbox, across the addresses
// its container has had.
type record struct {
	rules   Rules
	denials []Denial // a ring of the last maxDenials, oldest first
	denied  uint64
	learned map[string]bool
}

type cached struct {
	addrs   []netip.Addr
	expires time.Time
}

// Server is the DNS server and the egress proxy of one sandbox network.
type Server struct {
	cfg Config
	log *slog.Logger

	mu      sync.Mutex
	bySrc   map[netip.Addr]string // container address -> sandbox id
	records map[string]*record
	names   map[string]cached // name -> addresses the upstream gave

	preview Preview    // under mu
	addr    netip.Addr // where the server listens: the sandboxes' gateway

	proxyLn net.Listener
	dnsUDP  *dns.Server
	dnsTCP  *dns.Server
	client  *dns.Client
	wg      sync.WaitGroup
	closed  chan struct{}
}

// New builds a server; Listen starts it.
func New(cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	return &Server{cfg: cfg, log: cfg.Logger, bySrc: map[netip.Addr]string{}, records: map[string]*record{},
		names: map[string]cached{}, client: &dns.Client{Timeout: 3 * time.Second}, closed: make(chan struct{})}
}

// Ports are where a Server listens: the proxy on ProxyPort, DNS (UDP and
// TCP) on DNSPort, both on Addr.
type Ports struct {
	Addr      netip.Addr
	ProxyPort int
	DNSPort   int
}

// Listen binds the proxy and the DNS server on addr (the sandbox network's
// gateway) on free ports and starts serving.
func (s *Server) Listen(addr netip.Addr) (Ports, error) {
	ln, err := net.Listen("tcp4", net.JoinHostPort(addr.String(), "0"))
	if err != nil {
		return Ports{}, fmt.Errorf("egress proxy: %w", err)
	}
	// DNS needs one port for UDP and TCP both: take a free UDP port, then
	// the same TCP port, and try again when that one is taken.
	var (
		pc  net.PacketConn
		tln net.Listener
	)
	for range 20 {
		if pc, err = net.ListenPacket("udp4", net.JoinHostPort(addr.String(), "0")); err != nil {
			break
		}
		port := pc.LocalAddr().(*net.UDPAddr).Port
		if tln, err = net.Listen("tcp4", net.JoinHostPort(addr.String(), strconv.Itoa(port))); err == nil {
			break
		}
		pc.Close()
		pc = nil
	}
	if pc == nil || tln == nil {
		ln.Close()
		return Ports{}, fmt.Errorf("egress DNS: %v", err)
	}
	// A sandbox has one address on the network, so the per-source bound is
	// the per-sandbox one.
	s.mu.Lock()
	s.addr = addr
	s.mu.Unlock()
	s.proxyLn = httpguard.LimitListener(ln, "egress proxy", httpguard.ConnLimits{Total: s.cfg.MaxConns, PerSource: s.cfg.MaxConnsPerSandbox}, s.log)
	h := dns.HandlerFunc(s.serveDNS)
	s.dnsUDP = &dns.Server{PacketConn: pc, Handler: h}
	s.dnsTCP = &dns.Server{Listener: tln, Handler: h}
	for _, srv := range []*dns.Server{s.dnsUDP, s.dnsTCP} {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if err := srv.ActivateAndServe(); err != nil {
				select {
				case <-s.closed:
				default:
					s.log.Error("egress DNS stopped", "err", err)
				}
			}
		}()
	}
	s.wg.Add(1)
	go s.acceptLoop(s.proxyLn)
	p := Ports{Addr: addr, ProxyPort: ln.Addr().(*net.TCPAddr).Port, DNSPort: pc.LocalAddr().(*net.UDPAddr).Port}
	s.log.Info("egress proxy and DNS ready", "addr", addr, "proxy_port", p.ProxyPort, "dns_port", p.DNSPort, "upstream", s.cfg.Upstream)
	return p, nil
}

// Close stops the listeners; connections being spliced end with them.
func (s *Server) Close() error {
	select {
	case <-s.closed:
		return nil
	default:
	}
	close(s.closed)
	var errs []error
	if s.proxyLn != nil {
		errs = append(errs, s.proxyLn.Close())
	}
	for _, srv := range []*dns.Server{s.dnsUDP, s.dnsTCP} {
		if srv != nil && srv.Shutdown() != nil {
			// Not started yet (its goroutine has not run): Shutdown
			// refuses it, so close its socket, which makes it return as
			// soon as it starts instead of serving on and leaving
			// s.wg.Wait below waiting for ever.
			if srv.PacketConn != nil {
				errs = append(errs, srv.PacketConn.Close())
			}
			if srv.Listener != nil {
				errs = append(errs, srv.Listener.Close())
			}
		}
	}
	s.wg.Wait()
	return errors.Join(errs...)
}

// Set gives a sandbox, now at address ip, its rules; the next query and the
// next connection follow them. A sandbox set again keeps what was recorded
// of it.
func (s *Server) Set(ip netip.Addr, r Rules) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for a, id := range s.bySrc {
		if id == r.SandboxID || a == ip {
			delete(s.bySrc, a)
		}
	}
	s.bySrc[ip] = r.SandboxID
	rec := s.records[r.SandboxID]
	if rec == nil {
		rec = &record{learned: map[string]bool{}}
		s.records[r.SandboxID] = rec
	}
	rec.rules = r
}

// Unset stops applying rules to a sandbox (stopped, or its rules now need
// no names), keeping what was recorded of it.
func (s *Server) Unset(sandboxID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for a, id := range s.bySrc {
		if id == sandboxID {
			delete(s.bySrc, a)
		}
	}
}

// Forget drops everything kept of a sandbox (deleted).
func (s *Server) Forget(sandboxID string) {
	s.Unset(sandboxID)
	s.mu.Lock()
	delete(s.records, sandboxID)
	s.mu.Unlock()
}

// Denials returns a sandbox's recent refusals, oldest first, and how many
// there were in all.
func (s *Server) Denials(sandboxID string) ([]Denial, uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec := s.records[sandboxID]
	if rec == nil {
		return nil, 0
	}
	return slices.Clone(rec.denials), rec.denied
}

// Learned returns the names a sandbox in learn mode used, sorted.
func (s *Server) Learned(sandboxID string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec := s.records[sandboxID]
	if rec == nil {
		return nil
	}
	out := make([]string, 0, len(rec.learned))
	for n := range rec.learned {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// rulesFor returns the rules of the sandbox at ip.
func (s *Server) rulesFor(ip netip.Addr) (Rules, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id, ok := s.bySrc[ip]
	if !ok {
		return Rules{}, false
	}
	return s.records[id].rules, true
}

func (s *Server) learn(sandboxID, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rec := s.records[sandboxID]; rec != nil && len(rec.learned) < maxLearned {
		rec.learned[name] = true
	}
}

func (s *Server) deny(d Denial) {
	d.Time = s.cfg.Now()
	s.mu.Lock()
	if rec := s.records[d.SandboxID]; rec != nil {
		rec.denied++
		if len(rec.denials) >= maxDenials {
			rec.denials = slices.Delete(rec.denials, 0, 1)
		}
		rec.denials = append(rec.denials, d)
	}
	s.mu.Unlock()
	s.log.Debug("egress refused", "sandbox", d.SandboxID, "what", d.String())
	if s.cfg.OnDenied != nil {
		s.cfg.OnDenied(d)
	}
}

// srcAddr is the address a client connected or sent from.
func srcAddr(a net.Addr) netip.Addr {
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}

// canonical is a DNS name as rules see it.
func canonical(name string) string { return strings.TrimSuffix(strings.ToLower(name), ".") }

// serveDNS answers one query of a sandbox.
func (s *Server) serveDNS(w dns.ResponseWriter, q *dns.Msg) {
	reply := new(dns.Msg)
	r, ok := s.rulesFor(srcAddr(w.RemoteAddr()))
	if !ok || len(q.Question) != 1 {
		// Not a sandbox with name rules: nothing redirects it here.
		reply.SetRcode(q, dns.RcodeRefused)
		_ = w.WriteMsg(reply)
		return
	}
	qq := q.Question[0]
	name := canonical(qq.Name)
	if r.Learn {
		s.learn(r.SandboxID, name)
	}
	if addr, ok := s.previewAddr(name); ok {
		// The daemon's own preview hosts lead to the daemon, whatever the
		// public DNS says: a sandbox reaches another's public port as
		// anyone would, through the preview proxy, with its rules applied
		// on the way (see handle).
		reply.SetReply(q)
		reply.Authoritative = true
		if qq.Qtype == dns.TypeA {
			reply.Answer = append(reply.Answer, &dns.A{Hdr: dns.RR_Header{Name: qq.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: addr.AsSlice()})
		}
		_ = w.WriteMsg(reply)
		return
	}
	if ok, why := r.resolvable(name); !ok {
		s.deny(Denial{SandboxID: r.SandboxID, Kind: KindDNS, Name: name, Reason: why})
		reply.SetRcode(q, dns.RcodeNameError)
		_ = w.WriteMsg(reply)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	up, err := s.exchange(ctx, q)
	if err != nil {
		s.log.Warn("egress DNS: upstream", "name", name, "err", err)
		reply.SetRcode(q, dns.RcodeServerFailure)
		_ = w.WriteMsg(reply)
		return
	}
	up.Id = q.Id
	// Answers naming private or link-local addresses are dropped (DNS
	// rebinding: an allowed name made to point inside), unless the
	// operator or the sandbox's own allow list opened that range.
	var (
		keep  []dns.RR
		addrs []netip.Addr
		ttl   uint32
	)
	for _, rr := range up.Answer {
		if a, ok := rr.(*dns.A); ok {
			ip, _ := netip.AddrFromSlice(a.A.To4())
			if r.private(ip, s.cfg.Operator) {
				s.deny(Denial{SandboxID: r.SandboxID, Kind: KindDNS, Name: name, Addr: ip.String(), Reason: ReasonPrivate})
				continue
			}
			addrs = append(addrs, ip)
			ttl = max(ttl, a.Hdr.Ttl)
		}
		if a, ok := rr.(*dns.AAAA); ok {
			// Sandbox networks are IPv4 only, but an answer is no place to
			// leave an inside address either: ULA, link-local, loopback
			// and IPv4-mapped private addresses go the way of their IPv4
			// kin.
			ip, _ := netip.AddrFromSlice(a.AAAA)
			if private6(ip, func(v4 netip.Addr) bool { return r.private(v4, s.cfg.Operator) }) {
				s.deny(Denial{SandboxID: r.SandboxID, Kind: KindDNS, Name: name, Addr: ip.String(), Reason: ReasonPrivate})
				continue
			}
		}
		keep = append(keep, rr)
	}
	up.Answer = keep
	if len(addrs) > 0 {
		s.remember(name, addrs, time.Duration(ttl)*time.Second)
	}
	_ = w.WriteMsg(up)
}

// exchange asks the upstream resolvers in turn.
func (s *Server) exchange(ctx context.Context, q *dns.Msg) (*dns.Msg, error) {
	if len(s.cfg.Upstream) == 0 {
		return nil, errors.New("no upstream resolver configured (--egress-resolver)")
	}
	m := q.Copy()
	m.Id = dns.Id()
	var last error
	for _, u := range s.cfg.Upstream {
		in, _, err := s.client.ExchangeContext(ctx, m, u)
		if err == nil {
			return in, nil
		}
		last = err
	}
	return nil, last
}

// remember keeps the addresses a name resolved to, for the proxy's check.
func (s *Server) remember(name string, addrs []netip.Addr, ttl time.Duration) {
	ttl = min(max(ttl, minCacheTTL), maxCacheTTL)
	now := s.cfg.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.names[name]
	if c.expires.Before(now) {
		c.addrs = nil
	}
	for _, a := range addrs {
		if !slices.Contains(c.addrs, a) {
			c.addrs = append(c.addrs, a)
		}
	}
	c.expires = now.Add(ttl)
	s.names[name] = c
	// The cache is pruned as it grows, never past a few thousand names.
	if len(s.names) > 4096 {
		for n, e := range s.names {
			if e.expires.Before(now) {
				delete(s.names, n)
			}
		}
	}
}

// resolvesTo reports whether name resolves to a: from what the DNS server
// answered lately, or else by asking the upstream now (a sandbox may have
// learnt the address elsewhere, and names rotate their addresses).
func (s *Server) resolvesTo(ctx context.Context, name string, a netip.Addr) bool {
	s.mu.Lock()
	c, ok := s.names[name]
	s.mu.Unlock()
	if ok && c.expires.After(s.cfg.Now()) && slices.Contains(c.addrs, a) {
		return true
	}
	q := new(dns.Msg)
	q.SetQuestion(dns.Fqdn(name), dns.TypeA)
	in, err := s.exchange(ctx, q)
	if err != nil {
		return false
	}
	var addrs []netip.Addr
	var ttl uint32
	for _, rr := range in.Answer {
		if r, ok := rr.(*dns.A); ok {
			ip, _ := netip.AddrFromSlice(r.A.To4())
			addrs = append(addrs, ip)
			ttl = max(ttl, r.Hdr.Ttl)
		}
	}
	if len(addrs) > 0 {
		s.remember(name, addrs, time.Duration(ttl)*time.Second)
	}
	return slices.Contains(addrs, a)
}

// ula is IPv6's private range (fc00::/7).
var ula = netip.MustParsePrefix("fc00::/7")

// private6 reports an IPv6 address a sandbox must not be pointed at: not
// global unicast (loopback, link-local, multicast, unspecified), unique
// local, or an IPv4-mapped address that private4 refuses.
func private6(ip netip.Addr, private4 func(netip.Addr) bool) bool {
	if ip.Is4In6() {
		return private4(ip.Unmap())
	}
	return !ip.IsGlobalUnicast() || ula.Contains(ip)
}
