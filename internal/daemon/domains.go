package daemon

import (
	"crypto/hmac"
	"crypto/sha256"
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/sandpit-dev/sandpit/internal/service"
)

// domainPolicy builds the service's custom-hostname policy: the daemon's own
// names (its API, proxy and Caddy admin hosts; the preview domain and the
// public host the service adds itself) are reserved along with the
// operator's --reserved-hostname names.
func domainPolicy(cfg Config, previewKey string) (service.DomainPolicy, error) {
	p := service.DomainPolicy{Suffixes: cfg.CustomDomainSuffixes, Resolver: cfg.CustomDomainResolver}
	switch strings.ToLower(cfg.CustomDomainVerify) {
	case "", "none":
	case service.DomainVerifyTXT:
		p.Verify = service.DomainVerifyTXT
	default:
		return p, fmt.Errorf("--custom-domain-verify %q: want none or txt", cfg.CustomDomainVerify)
	}
	if p.Resolver != "" {
		if _, _, err := net.SplitHostPort(p.Resolver); err != nil {
			return p, fmt.Errorf("--custom-domain-resolver %q: want host:port: %w", p.Resolver, err)
		}
	}
	for _, s := range cfg.CustomDomainSuffixes {
		if strings.Trim(s, ". *") == "" {
			return p, fmt.Errorf("--custom-domain-suffix %q: want a domain such as apps.example.com", s)
		}
	}
	for _, addr := range []string{cfg.Listen, cfg.ProxyListen} {
		if h, _, err := net.SplitHostPort(addr); err == nil && h != "" {
			p.Reserved = append(p.Reserved, h)
		}
	}
	if u, err := url.Parse(cfg.CaddyAdmin); err == nil && cfg.Router == RouterCaddy && u.Hostname() != "" {
		p.Reserved = append(p.Reserved, u.Hostname())
	}
	if cfg.Cluster != nil && cfg.Cluster.Advertise != "" {
		p.Reserved = append(p.Reserved, cfg.Cluster.Advertise)
	}
	if tlsOn(cfg) {
		// The proxy listener serves the API under this name.
		p.Reserved = append(p.Reserved, apiHost(cfg))
	}
	p.Reserved = append(p.Reserved, cfg.ReservedHostnames...)
	// The challenge tokens are keyed by the preview secret (the cluster's
	// on a cluster), so every node asks an owner for the same record.
	m := hmac.New(sha256.New, []byte(previewKey))
	m.Write([]byte("sandpit custom domain challenge key v1"))
	p.ChallengeKey = m.Sum(nil)
	return p, nil
}
