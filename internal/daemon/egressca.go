package daemon

import (
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/sandpit-dev/sandpit/internal/egress"
	"github.com/sandpit-dev/sandpit/internal/secrets"
)

// loadEgressTrust makes or reads what the egress proxy intercepts with: the
// daemon's egress CA (which every sandbox trusts, so it exists before any
// sandbox starts), the roots it verifies upstreams against, and the
// secrets aggregate that fills rules' placeholders.
func (d *daemon) loadEgressTrust() error {
	cfg := d.cfg
	// The secrets aggregate reads or makes its key at its first use of a
	// value, so that a daemon whose owners keep no secrets makes no key.
	d.sec = secrets.New(secrets.Config{Store: d.st, KeyPath: filepath.Join(cfg.DataDir, secrets.KeyFile), Log: d.log})
	ca, err := egress.LoadOrCreateCA(cfg.DataDir, nil)
	if err != nil {
		return fmt.Errorf("egress CA (remove %s and %s in the data directory to make a new one): %w", egress.CACertFile, egress.CAKeyFile, err)
	}
	d.egressCA = ca
	if d.egressRoots, err = egressRoots(cfg.Network.EgressCAs); err != nil {
		return err
	}
	return nil
}

// egressRoots are the host's trust store plus the operator's --egress-ca
// files; nil (the host's alone) when there are none.
func egressRoots(files []string) (*x509.CertPool, error) {
	if len(files) == 0 {
		return nil, nil
	}
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("--egress-ca: %w", err)
		}
		if !pool.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("--egress-ca %s: no PEM certificate in it", f)
		}
	}
	return pool, nil
}

// SandboxTrustFile is the file in the data directory that sandboxes trust
// (mounted read-only into each): the egress CA, and the internal CA of the
// preview hosts under --tls internal, so that a sandbox reaches another's
// preview URL over HTTPS.
const SandboxTrustFile = "sandbox-ca.pem"

// writeSandboxTrust writes SandboxTrustFile anew from the CAs this start
// has, and returns its path.
func (d *daemon) writeSandboxTrust() (string, error) {
	pem := append([]byte(nil), d.egressCA.CertPEM()...)
	if d.cfg.TLS == TLSInternal {
		internal, err := os.ReadFile(CACertPath(d.cfg.DataDir))
		if err != nil {
			return "", fmt.Errorf("the internal CA for sandboxes to trust: %w", err)
		}
		pem = append(append(pem, '\n'), internal...)
	}
	path := filepath.Join(d.cfg.DataDir, SandboxTrustFile)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, pem, 0o644); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", err
	}
	return path, nil
}

// servePreviewToSandboxes lets sandboxes whose egress the daemon handles
// (rules on names or transforms) reach preview hosts by name: their DNS
// answers the preview domain with the egress server's address, and the
// egress proxy hands those connections to this daemon's proxy on loopback,
// verifying it against the internal CA when a rule intercepts.
func (d *daemon) servePreviewToSandboxes() error {
	if d.egress == nil || d.proxyLn == nil {
		return nil
	}
	_, port, err := net.SplitHostPort(d.proxyLn.Addr().String())
	if err != nil {
		return err
	}
	p := egress.Preview{Domain: d.cfg.Domain, Upstream: net.JoinHostPort("127.0.0.1", port), Port: uint16(d.proxyPort)}
	if h, _, _ := net.SplitHostPort(d.proxyLn.Addr().String()); h != "" && h != "0.0.0.0" && h != "::" {
		if ip := net.ParseIP(h); ip != nil && ip.To4() != nil {
			p.Upstream = net.JoinHostPort(h, port)
		}
	}
	if d.cfg.TLS == TLSInternal {
		if p.Roots, err = egressRoots(append([]string{CACertPath(d.cfg.DataDir)}, d.cfg.Network.EgressCAs...)); err != nil {
			return err
		}
	}
	d.egress.SetPreview(p)
	return nil
}

// previewPortForSandboxes is the proxy port whose connections from
// sandboxes with rules the firewall hands to the egress proxy, which sends
// them on to the proxy: none for a localhost domain, whose names a sandbox
// resolves to itself.
func previewPortForSandboxes(cfg Config, port int) int {
	if cfg.Domain == "localhost" || strings.HasSuffix(cfg.Domain, ".localhost") {
		return 0
	}
	return port
}
