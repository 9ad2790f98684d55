package daemon

import (
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"

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
