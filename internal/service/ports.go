package service

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/agentapi"
	"github.com/sandpit-dev/sandpit/internal/router"
)

// Protocols an exposure can use.
const (
	ProtoHTTP = "http"
	ProtoTCP  = "tcp"
)

// ExposeResult is an exposure and whether this call made it.
type ExposeResult struct {
	Port  sandpit.ExposedPort
	Reuse bool // true: the exposure already existed (a retry)
}

func upstream(ip string, port int) string { return net.JoinHostPort(ip, strconv.Itoa(port)) }

func portRoute(p sandpit.ExposedPort, ip string) router.Route {
	if p.Protocol == ProtoTCP {
		return router.Route{Kind: router.KindTCP, SandboxID: p.SandboxID, Port: p.Port, HostPort: p.HostPort, Upstream: upstream(ip, p.Port)}
	}
	return router.Route{Kind: router.KindHTTP, SandboxID: p.SandboxID, Port: p.Port, Upstream: upstream(ip, p.Port)}
}

// privateRoute makes r a route that serves only requests carrying the port's
// preview token (a private port's; see MarkPortPrivate); an empty token
// leaves it public.
func privateRoute(r router.Route, token string) router.Route {
	if token != "" {
		r.TrafficToken, r.TokenHeader = token, router.PreviewTokenHeader
	}
	return r
}

func domainRoute(d sandpit.CustomDomain, ip string) router.Route {
	return router.Route{Kind: router.KindDomain, SandboxID: d.SandboxID, Port: d.Port, Hostname: d.Hostname, Upstream: upstream(ip, d.Port)}
}

// PreviewURL is the URL of a sandbox port through the proxy.
func (s *Service) PreviewURL(id string, port int) string {
	return s.scheme() + "://" + s.PreviewHost(id, port) + s.proxyPortSuffix()
}

func (s *Service) scheme() string {
	if s.cfg.PreviewTLS {
		return "https"
	}
	return "http"
}

// PreviewHost is the Host the proxy routes to a sandbox port.
func (s *Service) PreviewHost(id string, port int) string {
	return id + "-" + strconv.Itoa(port) + "." + s.cfg.Domain
}

func (s *Service) proxyPortSuffix() string {
	if s.cfg.ProxyPort == 0 || (!s.cfg.PreviewTLS && s.cfg.ProxyPort == 80) || (s.cfg.PreviewTLS && s.cfg.ProxyPort == 443) {
		return ""
	}
	return ":" + strconv.Itoa(s.cfg.ProxyPort)
}

func (s *Service) tcpURL(hostPort int) string {
	return "tcp://" + net.JoinHostPort(s.cfg.PublicHost, strconv.Itoa(hostPort))
}

// ExposePort exposes a sandbox port. The store decides whether this is a new
// exposure or a retry of an existing one; the router install follows, and if
// it fails the row is deleted only when this call inserted it and no
// concurrent retry has installed it meanwhile: a row another caller
// installed, or answered success for, is not ours to undo (claimAndInstall).
func (s *Service) ExposePort(ctx context.Context, id string, port int, protocol string) (out ExposeResult, err error) {
	out, _, err = s.exposePort(ctx, id, port, protocol, false)
	return out, err
}

// ExposePrivatePort exposes an HTTP port whose plain preview hosts
// (<id>-<port> and <port>-<id> under the domain) serve only requests that
// carry the returned preview token in router.PreviewTokenHeader; signed
// preview URLs (Daytona's) are the other way in. A port exposed publicly
// before becomes private; a private port stays private until it is
// unexposed, and keeps its token.
func (s *Service) ExposePrivatePort(ctx context.Context, id string, port int) (ExposeResult, string, error) {
	return s.exposePort(ctx, id, port, ProtoHTTP, true)
}

// PreviewToken returns the preview token of a private port; "" when the
// port is public or not exposed.
func (s *Service) PreviewToken(ctx context.Context, id string, port int) (string, error) {
	tok, _, err := s.store.PrivatePortToken(ctx, id, port)
	return tok, err
}

func (s *Service) exposePort(ctx context.Context, id string, port int, protocol string, private bool) (out ExposeResult, token string, err error) {
	defer s.cluster.specChanged(ctx, id, &err)
	defer func() {
		if !out.Reuse {
			s.audit(ctx, "port.expose", id+":"+strconv.Itoa(port), err)
		}
	}()
	if port < 1 || port > 65535 {
		return ExposeResult{}, "", invalidf("port must be between 1 and 65535")
	}
	if port == agentapi.Port {
		return ExposeResult{}, "", invalidf("port %d is reserved for the sandbox agent", port)
	}
	if protocol == "" {
		protocol = ProtoHTTP
	}
	if protocol != ProtoHTTP && protocol != ProtoTCP {
		return ExposeResult{}, "", invalidf("protocol must be %q or %q", ProtoHTTP, ProtoTCP)
	}
	sb, unlock, err := s.lockRow(ctx, id)
	if err != nil {
		return ExposeResult{}, "", err
	}
	defer unlock()
	if sb.State == sandpit.StateDeleting {
		return ExposeResult{}, "", fmt.Errorf("sandbox %s is being deleted: %w", id, sandpit.ErrNotFound)
	}
	if err := s.checkPortQuota(ctx, sb, port); err != nil {
		return ExposeResult{}, "", err
	}
	now := s.now()
	want := sandpit.ExposedPort{SandboxID: id, Port: port, Protocol: protocol, CreatedAt: now}
	var row sandpit.ExposedPort
	claim := func() (claimOutcome, error) {
		var reused bool
		if protocol == ProtoTCP {
			row, reused, err = s.store.AllocateHostPort(ctx, want, s.cfg.PortRange, s.tcpURL, now)
			if err != nil {
				return claimOutcome{}, err
			}
		} else {
			want.PublicURL = s.PreviewURL(id, port)
			res, err := s.store.TryReserveHostPort(ctx, want, now)
			if err != nil {
				return claimOutcome{}, err
			}
			row, reused = res.Row, res.Outcome == sandpit.Existing
		}
		if row.Protocol != protocol {
			return claimOutcome{}, fmt.Errorf("%w: port %d is exposed as %s; unexpose it first", ErrProtocolConflict, port, row.Protocol)
		}
		out := claimOutcome{inserted: !reused}
		// The mark comes before the route is installed, so a private
		// port is never served without its token, not even for a moment;
		// a public expose of a private port keeps the token on its route.
		if private {
			token, err = s.store.MarkPortPrivate(ctx, id, port, newToken(), now)
		} else if protocol == ProtoHTTP {
			token, _, err = s.store.PrivatePortToken(ctx, id, port)
		}
		if err != nil {
			if !reused {
				s.deletePortRow(ctx, id, port)
			}
			return claimOutcome{}, err
		}
		if sb.State == sandpit.StateRunning && s.router != nil {
			ip, ierr := s.sandboxIP(ctx, id)
			if ierr != nil {
				if !reused {
					s.deletePortRow(ctx, id, port)
				}
				return claimOutcome{}, fmt.Errorf("%w: install route for port %d: %v", ErrRouter, port, ierr)
			}
			out.install, out.route = true, privateRoute(portRoute(row, ip), token)
		}
		return out, nil
	}
	claimed, err, ierr := s.claimAndInstall(ctx, portKey(id, port), claim, func(ctx context.Context) { s.deletePortRow(ctx, id, port) })
	if err != nil {
		return ExposeResult{}, "", err
	}
	if ierr != nil {
		return ExposeResult{}, "", fmt.Errorf("%w: install route for port %d: %v", ErrRouter, port, ierr)
	}
	if private && sb.State == sandpit.StateRunning && s.router != nil {
		// Custom domains of the port were public until now.
		if err := s.privateDomainRoutes(ctx, id, port, token); err != nil {
			return ExposeResult{}, "", err
		}
	}
	return ExposeResult{Port: row, Reuse: !claimed.inserted}, token, nil
}

// privateDomainRoutes reinstalls the routes of the custom domains of a port
// that has just become private, with its token. Called with the sandbox's
// lock held.
func (s *Service) privateDomainRoutes(ctx context.Context, id string, port int, token string) error {
	domains, err := s.store.ListCustomDomains(ctx, id)
	if err != nil {
		return err
	}
	for _, d := range domains {
		if d.Port != port {
			continue
		}
		ip, err := s.sandboxIP(ctx, id)
		if err != nil {
			return fmt.Errorf("%w: install route for %s: %v", ErrRouter, d.Hostname, err)
		}
		if err := s.router.Install(ctx, privateRoute(domainRoute(d, ip), token)); err != nil {
			return fmt.Errorf("%w: install route for %s: %v", ErrRouter, d.Hostname, err)
		}
	}
	return nil
}

func portKey(id string, port int) string { return "port:" + id + ":" + strconv.Itoa(port) }

func domainKey(hostname string) string { return "domain:" + hostname }

// deletePortRow is an exposure's rollback: the row goes, and with it its
// host port.
func (s *Service) deletePortRow(ctx context.Context, id string, port int) {
	if err := s.store.DeletePort(context.WithoutCancel(ctx), id, port); err != nil && !errors.Is(err, sandpit.ErrNotFound) {
		s.log.Error("expose rollback: delete row", "sandbox", id, "port", port, "err", err)
	}
}

// UnexposePort removes the route, then the row.
func (s *Service) UnexposePort(ctx context.Context, id string, port int) (err error) {
	defer s.cluster.specChanged(ctx, id, &err)
	if _, err := s.sandbox(ctx, id); err != nil {
		return err
	}
	defer func() { s.audit(ctx, "port.unexpose", id+":"+strconv.Itoa(port), err) }()
	unlock, err := s.lock(ctx, id)
	if err != nil {
		return err
	}
	defer unlock()
	row, err := s.store.GetPort(ctx, id, port)
	if err != nil {
		return err
	}
	// A custom domain rides on its port's exposure (that is what max_ports
	// counts); removing the exposure under it would leave the domain
	// serving a port nothing counts.
	if n, err := s.store.CountPortDomains(ctx, id, port); err != nil {
		return err
	} else if n > 0 {
		return fmt.Errorf("%w: port %d of sandbox %s has %d custom domain(s); remove them first", ErrPortInUse, port, id, n)
	}
	return s.removeThenDelete(ctx, portKey(id, port), portRoute(row, ""), func() error { return s.store.DeletePort(ctx, id, port) })
}

// removeThenDelete removes a route, then its row. The route goes first so
// that a failing router leaves the row (and a retry can finish the job); it
// is removed once more after the row, because a router reconciling against
// the store (Caddy after a restart) may have put it back from the row in
// between. That second removal is best effort: the row is gone, so the next
// reconcile removes whatever it leaves. The row's deletion and the second
// removal hold the key, so an exposure of the same key made meanwhile
// inserts its row only after both and keeps its route.
func (s *Service) removeThenDelete(ctx context.Context, key string, r router.Route, deleteRow func() error) error {
	if s.router == nil {
		return deleteRow()
	}
	if err := s.router.Remove(ctx, r); err != nil {
		return fmt.Errorf("%w: remove route: %v", ErrRouter, err)
	}
	_, unlock := s.exposing.lock(key)
	defer unlock()
	if err := deleteRow(); err != nil {
		return err
	}
	if err := s.router.Remove(ctx, r); err != nil {
		s.log.Warn("remove route after deleting its row", "route", r.Key(), "err", err)
	}
	return nil
}

// ListPorts lists a sandbox's exposures.
func (s *Service) ListPorts(ctx context.Context, id string) ([]sandpit.ExposedPort, error) {
	if _, err := s.sandbox(ctx, id); err != nil {
		return nil, err
	}
	return s.store.ListPorts(ctx, id)
}

var hostnameLabel = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// NormalizeHostname lower-cases and validates an RFC 1123 hostname; wildcards
// and IP addresses are refused.
func NormalizeHostname(h string) (string, error) {
	h = strings.TrimSuffix(strings.ToLower(strings.TrimSpace(h)), ".")
	if h == "" || len(h) > 253 {
		return "", invalidf("hostname must be 1-253 characters")
	}
	if net.ParseIP(h) != nil {
		return "", invalidf("hostname %q is an IP address", h)
	}
	labels := strings.Split(h, ".")
	if len(labels) < 2 {
		return "", invalidf("hostname %q needs at least two labels", h)
	}
	for _, l := range labels {
		if !hostnameLabel.MatchString(l) {
			return "", invalidf("invalid hostname %q: labels are 1-63 of a-z, 0-9 and '-', not starting or ending with '-', no wildcards", h)
		}
	}
	return h, nil
}

// AddCustomDomain binds a hostname to a sandbox port. The hostname primary key
// decides between two sandboxes racing for it.
func (s *Service) AddCustomDomain(ctx context.Context, id, hostname string, port int) (_ sandpit.CustomDomain, added bool, err error) {
	defer s.cluster.specChanged(ctx, id, &err)
	defer func() {
		if added || err != nil {
			s.audit(ctx, "domain.add", id+":"+hostname, err)
		}
	}()
	h, err := NormalizeHostname(hostname)
	if err != nil {
		return sandpit.CustomDomain{}, false, err
	}
	if err := s.checkHostnameStatic(h); err != nil {
		return sandpit.CustomDomain{}, false, err
	}
	if port < 1 || port > 65535 {
		return sandpit.CustomDomain{}, false, invalidf("port must be between 1 and 65535")
	}
	// The agent answers to its token, not to whoever knows a hostname; as
	// with exposing it, a domain may not point at it.
	if port == agentapi.Port {
		return sandpit.CustomDomain{}, false, invalidf("port %d is reserved for the sandbox agent", port)
	}
	sb, unlock, err := s.lockRow(ctx, id)
	if err != nil {
		return sandpit.CustomDomain{}, false, err
	}
	defer unlock()
	if sb.State == sandpit.StateDeleting {
		return sandpit.CustomDomain{}, false, fmt.Errorf("sandbox %s is being deleted: %w", id, sandpit.ErrNotFound)
	}
	if err := s.checkDomainBind(ctx, sb, h, port); err != nil {
		return sandpit.CustomDomain{}, false, err
	}
	// The cluster decides the hostname first; this store records it after.
	if err := s.cluster.bind(ctx, id, h); err != nil {
		return sandpit.CustomDomain{}, false, err
	}
	var d sandpit.CustomDomain
	rollback := func(ctx context.Context) {
		if derr := s.store.RemoveCustomDomain(context.WithoutCancel(ctx), id, h); derr != nil && !errors.Is(derr, sandpit.ErrNotFound) {
			s.log.Error("domain rollback", "hostname", h, "err", derr)
		}
		s.cluster.unbind(ctx, id, h)
	}
	claim := func() (claimOutcome, error) {
		var outcome sandpit.AddOutcome
		d, outcome, err = s.store.AddCustomDomain(ctx, sandpit.CustomDomain{Hostname: h, SandboxID: id, Port: port, CreatedAt: s.now()}, s.now())
		if err != nil {
			return claimOutcome{}, err
		}
		out := claimOutcome{inserted: outcome == sandpit.Added}
		if sb.State == sandpit.StateRunning && s.router != nil {
			ip, ierr := s.sandboxIP(ctx, id)
			if ierr != nil {
				if out.inserted {
					rollback(ctx)
				}
				return claimOutcome{}, fmt.Errorf("%w: install route for %s: %v", ErrRouter, h, ierr)
			}
			// A domain of a private port is private too.
			tok, _, terr := s.store.PrivatePortToken(ctx, id, d.Port)
			if terr != nil {
				if out.inserted {
					rollback(ctx)
				}
				return claimOutcome{}, terr
			}
			out.install, out.route = true, privateRoute(domainRoute(d, ip), tok)
		}
		return out, nil
	}
	out, err, ierr := s.claimAndInstall(ctx, domainKey(h), claim, rollback)
	if err != nil {
		if errors.Is(err, sandpit.ErrHostnameConflict) {
			// The cluster said the hostname was free (or already this
			// sandbox's); the local row is what stands.
			return sandpit.CustomDomain{}, false, err
		}
		s.cluster.unbind(ctx, id, h)
		return sandpit.CustomDomain{}, false, err
	}
	if ierr != nil {
		return sandpit.CustomDomain{}, false, fmt.Errorf("%w: install route for %s: %v", ErrRouter, h, ierr)
	}
	return d, out.inserted, nil
}

// RemoveCustomDomain unbinds a hostname from a sandbox.
func (s *Service) RemoveCustomDomain(ctx context.Context, id, hostname string) (err error) {
	defer s.cluster.specChanged(ctx, id, &err)
	h, err := NormalizeHostname(hostname)
	if err != nil {
		return err
	}
	if _, err := s.sandbox(ctx, id); err != nil {
		return err
	}
	defer func() { s.audit(ctx, "domain.remove", id+":"+h, err) }()
	unlock, err := s.lock(ctx, id)
	if err != nil {
		return err
	}
	defer unlock()
	d, err := s.store.GetCustomDomain(ctx, h)
	if err != nil {
		return err
	}
	if d.SandboxID != id {
		return fmt.Errorf("%w: hostname %s is not bound to sandbox %s", sandpit.ErrNotFound, h, id)
	}
	return s.removeThenDelete(ctx, domainKey(h), domainRoute(d, ""), func() error {
		if err := s.store.RemoveCustomDomain(ctx, id, h); err != nil {
			return err
		}
		s.cluster.unbind(ctx, id, h)
		return nil
	})
}

// ListCustomDomains lists a sandbox's hostnames.
func (s *Service) ListCustomDomains(ctx context.Context, id string) ([]sandpit.CustomDomain, error) {
	if _, err := s.sandbox(ctx, id); err != nil {
		return nil, err
	}
	return s.store.ListCustomDomains(ctx, id)
}

// CustomDomainURL is the URL a custom hostname serves on through the proxy.
func (s *Service) CustomDomainURL(hostname string) string {
	return s.scheme() + "://" + hostname + s.proxyPortSuffix()
}

// checkPortQuota refuses a new exposure that would take the sandbox's owner
// past its max_ports limit. Re-exposing a port already exposed is a retry,
// not a new exposure, and always passes. The check reads the owner's count
// before the reservation, so two exposures racing for an owner's last port
// may both pass; the limit bounds an owner's use, it is not a schema
// invariant like a host port's uniqueness.
func (s *Service) checkPortQuota(ctx context.Context, sb sandpit.Sandbox, port int) error {
	limits, err := s.store.GetOwnerLimits(ctx, sb.Owner)
	if err != nil || limits.MaxPorts == 0 {
		return err
	}
	if _, err := s.store.GetPort(ctx, sb.ID, port); err == nil {
		return nil
	}
	u, err := s.store.GetOwnerUsage(ctx, sb.Owner)
	if err != nil {
		return err
	}
	if u.Ports+1 > limits.MaxPorts {
		return fmt.Errorf("%w: owner %q may expose at most %d ports (limit max_ports)", sandpit.ErrQuotaExceeded, sb.Owner, limits.MaxPorts)
	}
	return nil
}

// CheckPortAccess decides whether a request through the E2B gateway may
// reach port of sandbox sb: the agent's port always (the agent checks its own
// token), an exposed port always unless it is private (then only with its
// preview token), and any other port only as the sandbox's port-access
// policy says (public, or with its traffic token). trafficToken is the
// credential the request presented. A refusal is ErrPortForbidden.
func (s *Service) CheckPortAccess(ctx context.Context, sb sandpit.Sandbox, port int, trafficToken string) error {
	if port == agentapi.Port {
		return nil
	}
	if _, err := s.store.GetPort(ctx, sb.ID, port); err == nil {
		tok, private, err := s.store.PrivatePortToken(ctx, sb.ID, port)
		if err != nil {
			return err
		}
		if private && subtle.ConstantTimeCompare([]byte(trafficToken), []byte(tok)) != 1 {
			return fmt.Errorf("%w: port %d of sandbox %s is private: it needs its preview token in the %s header", ErrPortForbidden, port, sb.ID, router.PreviewTokenHeader)
		}
		return nil
	} else if !errors.Is(err, sandpit.ErrNotFound) {
		return err
	}
	switch sb.PortAccess {
	case sandpit.PortAccessPublic:
		return nil
	case sandpit.PortAccessToken:
		if sb.TrafficToken != "" && subtle.ConstantTimeCompare([]byte(trafficToken), []byte(sb.TrafficToken)) == 1 {
			return nil
		}
		return fmt.Errorf("%w: port %d of sandbox %s needs the sandbox's traffic token", ErrPortForbidden, port, sb.ID)
	}
	return fmt.Errorf("%w: port %d of sandbox %s is not exposed", ErrPortForbidden, port, sb.ID)
}
