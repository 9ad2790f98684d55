package daemon

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/sandpit-dev/sandpit/internal/router/builtin"
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
// hostnames the daemon serves get one: those the router has a route for
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
			if _, ok := b.Resolve(host); ok {
				return true, nil
			}
			if d.svc == nil {
				return false, nil
			}
			return d.svc.HostnameBound(ctx, host)
		},
	})
}
