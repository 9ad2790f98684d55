package daemon

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/agentapi"
	"github.com/sandpit-dev/sandpit/internal/api/daytona"
	"github.com/sandpit-dev/sandpit/internal/api/e2b"
	"github.com/sandpit-dev/sandpit/internal/router/builtin"
	"github.com/sandpit-dev/sandpit/internal/ui"
)

// TLS modes --tls accepts.
const (
	TLSOff      = builtin.TLSOff
	TLSInternal = builtin.TLSInternal
	TLSAuto     = builtin.TLSAuto
)

// tlsDir is where the builtin proxy's certificate state lives: the internal
// CA, or certmagic's ACME account and certificates.
func tlsDir(dataDir string) string { return filepath.Join(dataDir, "tls") }

// CACertPath is the well-known path of the internal CA's certificate
// (--tls internal), the file clients are told to trust.
func CACertPath(dataDir string) string { return filepath.Join(tlsDir(dataDir), builtin.CACertFile) }

// tlsOn reports whether the builtin proxy serves HTTPS.
func tlsOn(c Config) bool { return c.TLS != "" && c.TLS != TLSOff }

// validTLS refuses --tls flags that cannot work together, before the daemon
// opens anything.
func validTLS(c Config) error {
	switch c.TLS {
	case "", TLSOff, TLSInternal, TLSAuto:
	default:
		return fmt.Errorf("invalid --tls %q: want %s, %s or %s", c.TLS, TLSOff, TLSInternal, TLSAuto)
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return errors.New("--tls-cert and --tls-key go together: give both")
	}
	if !tlsOn(c) {
		if c.TLSCert != "" {
			return errors.New("--tls-cert/--tls-key need --tls internal or --tls auto (which issues certificates for the names the given certificate does not cover)")
		}
		if c.ACMECA != "" || c.ACMEEmail != "" {
			return errors.New("--acme-ca and --acme-email need --tls auto")
		}
		return nil
	}
	switch {
	case c.Router == RouterCaddy:
		return fmt.Errorf("--tls %s is the builtin router's; with --router caddy use --preview-tls", c.TLS)
	case c.Cluster != nil:
		return fmt.Errorf("--tls %s is not supported with --cluster yet (a node decides on certificates from its own sandboxes only)", c.TLS)
	case c.TLS == TLSInternal && (c.ACMECA != "" || c.ACMEEmail != ""):
		return errors.New("--acme-ca and --acme-email need --tls auto, not --tls internal")
	case c.TLS == TLSAuto && (c.Domain == "localhost" || strings.HasSuffix(c.Domain, ".localhost")):
		return fmt.Errorf("--tls auto needs a public --domain: no ACME CA issues certificates under %q (use --tls internal locally)", c.Domain)
	}
	if c.TLSCert != "" {
		if _, err := tls.LoadX509KeyPair(c.TLSCert, c.TLSKey); err != nil {
			return fmt.Errorf("--tls-cert/--tls-key: %w", err)
		}
	}
	return nil
}

// newTLS builds the proxy's certificates for --tls internal or auto. Only
// hostnames the daemon serves get one: api.<domain>, those the router has a route for
// right now (previews, every port of an E2B sandbox, custom domains), and
// those the service reports bound, the same answer the Caddy router's
// on-demand "ask" gets.
func (d *daemon) newTLS(b *builtin.Builtin) (*builtin.TLS, error) {
	cfg := d.cfg
	return builtin.NewTLS(builtin.TLSOptions{
		Mode:     cfg.TLS,
		Dir:      tlsDir(cfg.DataDir),
		CertFile: cfg.TLSCert, KeyFile: cfg.TLSKey,
		ACMECA: cfg.ACMECA, ACMEEmail: cfg.ACMEEmail,
		Logger: d.log,
		Allow: func(ctx context.Context, host string) (bool, error) {
			if host == apiHost(cfg) {
				return true, nil
			}
			if _, ok := b.Resolve(host); ok {
				return true, nil
			}
			if d.validSignedHost != nil && d.validSignedHost(host) {
				return true, nil
			}
			if cfg.TLS == TLSInternal && e2bAgentHost(host, cfg.Domain) {
				return true, nil
			}
			if d.svc == nil {
				return false, nil
			}
			return d.svc.HostnameBound(ctx, host)
		},
	})
}

// e2bAgentHost reports whether host is a sandbox's agent host in E2B's
// form, 49983-<id>.<domain>, whatever the sandbox's state. E2B's edge
// serves every such name (a wildcard certificate) and answers one whose
// sandbox is gone with 502, which the SDK reads as "not running": a
// command cut off by a kill becomes its TimeoutError only if that health
// probe is answered. So the internal CA issues for these names without
// asking whether the sandbox exists; an issue costs one signature, and the
// cache of leaves is bounded. An ACME CA is never asked for them.
func e2bAgentHost(host, domain string) bool {
	label, ok := strings.CutSuffix(host, "."+domain)
	if !ok {
		return false
	}
	id, ok := strings.CutPrefix(label, strconv.Itoa(agentapi.Port)+"-")
	if !ok || id == "" || len(id) > 63 {
		return false
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// apiHost is the name under which the proxy listener also serves the API
// when TLS is on: https://api.<domain> is where E2B's SDK, configured by
// E2B_DOMAIN alone, finds its control plane, next to the sandboxes'
// https://<port>-<id>.<domain> on the same listener.
func apiHost(c Config) string { return "api." + c.Domain }

// splitAPIHost routes the proxy listener's requests by Host: api.<domain>
// to the API's handler, everything else to the preview proxy. The E2B
// facade, which the SDK addresses at the origin's root, gets every path the
// native API and the other facades do not own. With TLS on it is the first
// handler of a preview, so it reads the host (sandpit.ResolvePreviewHost)
// and the request carries the reading to the preview handlers behind it.
func splitAPIHost(cfg Config, apiHandler, preview http.Handler) http.Handler {
	host := apiHost(cfg)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, ctx, fresh := sandpit.ResolvePreviewHost(r.Context(), r.Host, cfg.Domain)
		if p.Host != host {
			if fresh {
				r = r.WithContext(ctx)
			}
			preview.ServeHTTP(w, r)
			return
		}
		if !apiOwnPath(r.URL.Path) {
			r = r.Clone(r.Context())
			r.URL.Path = e2b.Prefix + r.URL.Path
			r.URL.RawPath = ""
		}
		apiHandler.ServeHTTP(w, r)
	})
}

// apiOwnPath reports whether a path on api.<domain> is the API's own rather
// than an E2B control-plane path (E2B's are /sandboxes..., /v2/...,
// /templates...).
func apiOwnPath(p string) bool {
	for _, pre := range []string{"/v1/", e2b.Prefix + "/", daytona.DefaultPrefix + "/", ui.Prefix} {
		if strings.HasPrefix(p, pre) {
			return true
		}
	}
	switch p {
	case "/health", "/metrics", "/files", "/ui", e2b.Prefix, daytona.DefaultPrefix:
		return true
	}
	return false
}
