package service

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/identity"
)

// Domain verification modes (--custom-domain-verify).
const (
	DomainVerifyNone = ""
	DomainVerifyTXT  = "txt"
)

// ChallengeLabel is the label the TXT record proving a hostname's ownership
// is published under: _sandpit-challenge.<hostname>.
const ChallengeLabel = "_sandpit-challenge"

// DomainPolicy decides which custom hostnames owners may bind. The zero
// value still refuses the daemon's own names and the special-use names
// (localhost, .internal, .local, IP literals).
type DomainPolicy struct {
	// Reserved are names no sandbox may take: the daemon's own (its API,
	// proxy and public hosts) and what the operator reserves. "*.example.com"
	// reserves every name under example.com.
	Reserved []string
	// Suffixes, when set, are the only suffixes a non-admin owner may bind
	// names under.
	Suffixes []string
	// Verify is DomainVerifyTXT to ask non-admin owners for a TXT record
	// holding their challenge token before a bind.
	Verify string
	// Resolver is the DNS server (host:port) the TXT record is looked up
	// at; empty means the system's resolver.
	Resolver string
	// ChallengeKey keys the per-owner challenge tokens.
	ChallengeKey []byte
	// HostTaken, when set, reports whether the edge already serves host on
	// the operator's behalf (a Caddy route the operator wrote); such a name
	// is the operator's.
	HostTaken func(ctx context.Context, host string) (bool, error)
}

// specialUseSuffixes are names that resolve to the host itself, to the
// cloud's metadata service or on the local link, never to a tenant's site.
var specialUseSuffixes = []string{"localhost", "localdomain", "internal", "local", "arpa", "invalid"}

// underOrAt reports whether h is suffix or a name under it.
func underOrAt(h, suffix string) bool {
	return h == suffix || strings.HasSuffix(h, "."+suffix)
}

// hostOnly strips a port and brackets from an address or URL host and
// lower-cases it.
func hostOnly(s string) string {
	s = strings.TrimSpace(s)
	if h, _, err := net.SplitHostPort(s); err == nil {
		s = h
	}
	return strings.TrimSuffix(strings.ToLower(strings.Trim(s, "[]")), ".")
}

// checkHostnameStatic refuses the names nobody may bind, whoever asks: the
// daemon's own, the operator's reserved ones and special-use names. h is
// normalized.
func (s *Service) checkHostnameStatic(h string) error {
	labels := strings.Split(h, ".")
	last := labels[len(labels)-1]
	if strings.Trim(last, "0123456789") == "" || strings.HasPrefix(last, "0x") {
		// No top-level domain is numeric: "127.1" or "10.0.0.1" is an
		// address however a resolver reads it.
		return invalidf("hostname %q is an IP address literal", h)
	}
	for _, sfx := range specialUseSuffixes {
		if underOrAt(h, sfx) {
			return invalidf("hostname %q is a special-use name (.%s resolves on the host or its network, not on the internet)", h, sfx)
		}
	}
	// The proxy looks custom hostnames up before preview hosts, so a
	// custom hostname at or under the preview domain would let one sandbox
	// take over another's preview URL (or the apex).
	if underOrAt(h, s.cfg.Domain) {
		return invalidf("hostname %q is the daemon's preview domain %q or under it", h, s.cfg.Domain)
	}
	if h == hostOnly(s.cfg.PublicHost) {
		return invalidf("hostname %q is the daemon's public host", h)
	}
	for _, r := range s.cfg.Domains.Reserved {
		r = hostOnly(r)
		if r == "" {
			continue
		}
		if sfx, ok := strings.CutPrefix(r, "*."); ok {
			if strings.HasSuffix(h, "."+sfx) {
				return invalidf("hostname %q is reserved by the operator (%s)", h, r)
			}
			continue
		}
		if h == r {
			return invalidf("hostname %q is reserved by the operator", h)
		}
	}
	return nil
}

// checkHostnameOwner applies the operator's suffix policy to owner.
func (s *Service) checkHostnameOwner(h string, admin bool) error {
	if admin || len(s.cfg.Domains.Suffixes) == 0 {
		return nil
	}
	for _, sfx := range s.cfg.Domains.Suffixes {
		sfx = strings.TrimPrefix(hostOnly(sfx), "*.")
		if sfx != "" && strings.HasSuffix(h, "."+sfx) {
			return nil
		}
	}
	return fmt.Errorf("%w: hostname %q is not under a suffix owners may bind (%s)", sandpit.ErrForbidden, h, strings.Join(s.cfg.Domains.Suffixes, ", "))
}

// DomainChallenge is the TXT record that proves an owner controls a
// hostname: a record named ChallengeLabel.<hostname> holding Token.
func (s *Service) DomainChallenge(owner string) string {
	m := hmac.New(sha256.New, s.cfg.Domains.ChallengeKey)
	m.Write([]byte("sandpit custom domain challenge v1\x00" + owner))
	return "sandpit-verify=" + hex.EncodeToString(m.Sum(nil))[:32]
}

// verifyOwnership looks the challenge record of h up and refuses the bind
// unless it holds owner's token.
func (s *Service) verifyOwnership(ctx context.Context, h, owner string) error {
	if s.cfg.Domains.Verify != DomainVerifyTXT {
		return nil
	}
	want := s.DomainChallenge(owner)
	res := net.DefaultResolver
	if addr := s.cfg.Domains.Resolver; addr != "" {
		res = &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}}
	}
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	name := ChallengeLabel + "." + h
	txts, err := res.LookupTXT(lctx, name)
	var dnsErr *net.DNSError
	if err != nil && !(errors.As(err, &dnsErr) && dnsErr.IsNotFound) {
		s.log.Warn("custom domain: challenge lookup", "name", name, "err", err)
	}
	for _, t := range txts {
		if hmac.Equal([]byte(strings.TrimSpace(t)), []byte(want)) {
			return nil
		}
	}
	return fmt.Errorf("%w: prove you control %q: publish a TXT record %s with the value %q, then bind again", sandpit.ErrForbidden, h, name, want)
}

// checkDomainQuota refuses a new binding that would take the sandbox's owner
// past max_domains. A retry of an existing binding never gets here.
func (s *Service) checkDomainQuota(ctx context.Context, sb sandpit.Sandbox) error {
	limits, err := s.store.GetOwnerLimits(ctx, sb.Owner)
	if err != nil || limits.MaxDomains == 0 {
		return err
	}
	n, err := s.store.CountOwnerDomains(ctx, sb.Owner)
	if err != nil {
		return err
	}
	if n+1 > limits.MaxDomains {
		return fmt.Errorf("%w: owner %q may bind at most %d custom domains (limit max_domains)", sandpit.ErrQuotaExceeded, sb.Owner, limits.MaxDomains)
	}
	return nil
}

// hostnameConforms reports whether a bound hostname still passes the
// policy: the ask endpoint approves certificates only for such names, so a
// binding made before a name was reserved gets none.
func (s *Service) hostnameConforms(ctx context.Context, d sandpit.CustomDomain, owner string) bool {
	if s.checkHostnameStatic(d.Hostname) != nil || s.checkHostnameOwner(d.Hostname, owner == sandpit.AdminOwner) != nil {
		return false
	}
	if s.cfg.Domains.HostTaken != nil {
		if taken, err := s.cfg.Domains.HostTaken(ctx, d.Hostname); err != nil || taken {
			return false
		}
	}
	return true
}

// checkDomainBind runs the checks of a bind that depend on who asks and on
// the sandbox: the target port must be exposed over HTTP (a domain is one
// more way into an exposure, never a way around max_ports), and a new
// binding must pass the operator's edge, the suffix policy, the ownership
// proof and the owner's max_domains. A retry of a binding that stands (same
// sandbox and port) skips the last four, so it stays idempotent even if the
// TXT record is gone by then. Called with the sandbox's lock held; it
// changes nothing.
func (s *Service) checkDomainBind(ctx context.Context, sb sandpit.Sandbox, h string, port int) error {
	d, err := s.store.GetCustomDomain(ctx, h)
	switch {
	case err == nil && (d.SandboxID != sb.ID || d.Port != port):
		// As the store says it: the message names neither the other
		// sandbox nor its port.
		return fmt.Errorf("add custom domain %s for sandbox %s port %d: %w", h, sb.ID, port, sandpit.ErrHostnameConflict)
	case err != nil && !errors.Is(err, sandpit.ErrNotFound):
		return err
	}
	retry := err == nil
	p, err := s.store.GetPort(ctx, sb.ID, port)
	if errors.Is(err, sandpit.ErrNotFound) {
		return invalidf("port %d of sandbox %s is not exposed: expose it (POST /v1/sandboxes/%s/ports) before binding a domain to it", port, sb.ID, sb.ID)
	}
	if err != nil {
		return err
	}
	if p.Protocol != ProtoHTTP {
		return invalidf("port %d of sandbox %s is exposed as %s; a custom domain needs an http exposure", port, sb.ID, p.Protocol)
	}
	if retry {
		return nil
	}
	if s.cfg.Domains.HostTaken != nil {
		taken, err := s.cfg.Domains.HostTaken(ctx, h)
		if err != nil {
			return fmt.Errorf("%w: check the edge's own routes for %s: %v", ErrRouter, h, err)
		}
		if taken {
			return invalidf("hostname %q is served by one of the operator's own routes", h)
		}
	}
	p0 := identity.Of(ctx)
	if err := s.checkHostnameOwner(h, p0.Admin); err != nil {
		return err
	}
	if !p0.Admin {
		if err := s.verifyOwnership(ctx, h, sb.Owner); err != nil {
			return err
		}
	}
	return s.checkDomainQuota(ctx, sb)
}
