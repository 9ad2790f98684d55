package egress

import (
	"crypto/x509"
	"net/netip"
	"strings"
)

// Preview is how the server treats the daemon's own preview hosts
// (<port>-<id>.<domain>): the sandboxes it serves resolve them to the
// server's address, and their connections to it go to the daemon's proxy,
// so that one sandbox reaches another's public port by its URL, as on E2B,
// with its own rules (a transform on that host) applied on the way.
type Preview struct {
	// Domain is the preview domain, lower case, without a final dot.
	Domain string
	// Upstream is where the daemon reaches its own proxy (host:port).
	Upstream string
	// Port is the proxy's port as sandboxes dial it on the server's
	// address; a connection there is the proxy's whatever name it gives,
	// as it was before the firewall handed such connections to the
	// egress proxy.
	Port uint16
	// Roots verify the proxy's certificate when a connection to a preview
	// host is intercepted (the daemon's internal CA); nil means the
	// host's trust store.
	Roots *x509.CertPool
}

// SetPreview starts (or, with a zero Preview, stops) serving preview hosts.
// The router starts after the server, so this comes after Listen.
func (s *Server) SetPreview(p Preview) {
	p.Domain = canonical(p.Domain)
	s.mu.Lock()
	s.preview = p
	s.mu.Unlock()
}

// isPreview reports a name under the preview domain. The domain "localhost"
// never reaches here from a sandbox (programs resolve it themselves), and
// is refused anyway: it names the sandbox's own loopback.
func (p Preview) isPreview(name string) bool {
	return p.Domain != "" && p.Domain != "localhost" && p.Upstream != "" && strings.HasSuffix(name, "."+p.Domain)
}

// previewAddr is the address the DNS server answers for a preview host.
func (s *Server) previewAddr(name string) (netip.Addr, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.preview.isPreview(name) || !s.addr.IsValid() {
		return netip.Addr{}, false
	}
	return s.addr, true
}

// previewTarget is the daemon's proxy, for a connection to a preview host
// at the address the DNS server gave for it.
func (s *Server) previewTarget(name string, dst netip.AddrPort) (Preview, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.preview
	if p.Upstream == "" || dst.Addr() != s.addr || !p.isPreview(name) && (p.Port == 0 || dst.Port() != p.Port) {
		return Preview{}, false
	}
	return s.preview, true
}
