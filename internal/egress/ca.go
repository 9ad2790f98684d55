package egress

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// Files of the egress CA in the data directory. The key is the daemon's
// alone (0600); the certificate is what every sandbox trusts.
const (
	CACertFile = "egress-ca.pem"
	CAKeyFile  = "egress-ca-key.pem"
)

// Lifetimes: the CA lasts long (rotating it means every sandbox trusts a
// new one), the leaves short (they are made again on demand).
const (
	caLifetime   = 10 * 365 * 24 * time.Hour
	leafLifetime = 7 * 24 * time.Hour
	maxLeaves    = 4096
)

// CA is the daemon's egress CA: it signs, per host name, the certificate
// the proxy presents to a sandbox whose rules transform that host's
// requests.
type CA struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte
	now     func() time.Time

	mu     sync.Mutex
	leaves map[string]*tls.Certificate
}

// LoadOrCreateCA reads the CA kept in dir, or makes one there.
func LoadOrCreateCA(dir string, now func() time.Time) (*CA, error) {
	if now == nil {
		now = time.Now
	}
	certPath, keyPath := filepath.Join(dir, CACertFile), filepath.Join(dir, CAKeyFile)
	certPEM, cerr := os.ReadFile(certPath)
	keyPEM, kerr := os.ReadFile(keyPath)
	if errors.Is(cerr, fs.ErrNotExist) && errors.Is(kerr, fs.ErrNotExist) {
		return createCA(certPath, keyPath, now)
	}
	if cerr != nil || kerr != nil {
		return nil, fmt.Errorf("egress CA in %s: %w", dir, errors.Join(cerr, kerr))
	}
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, fmt.Errorf("egress CA in %s: not PEM", dir)
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("egress CA certificate: %w", err)
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("egress CA key: %w", err)
	}
	return &CA{cert: cert, key: key, certPEM: certPEM, now: now, leaves: map[string]*tls.Certificate{}}, nil
}

// newKey makes a P-256 key and a random serial for a certificate.
func newKey() (*ecdsa.PrivateKey, *big.Int, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		return nil, nil, err
	}
	return key, serial, nil
}

func createCA(certPath, keyPath string, now func() time.Time) (*CA, error) {
	key, serial, err := newKey()
	if err != nil {
		return nil, err
	}
	t := now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "Sandpit egress CA " + serial.Text(36)[:8], Organization: []string{"Sandpit"}},
		NotBefore:    t.Add(-time.Hour), NotAfter: t.Add(caLifetime),
		IsCA: true, BasicConstraintsValid: true, MaxPathLenZero: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, _ := x509.ParseCertificate(der)
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	// The key is written first and the certificate last, each through a
	// rename, so that a crash leaves either nothing or a whole pair.
	if err := writeFileAtomic(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return nil, err
	}
	if err := writeFileAtomic(certPath, certPEM, 0o644); err != nil {
		return nil, err
	}
	return &CA{cert: cert, key: key, certPEM: certPEM, now: now, leaves: map[string]*tls.Certificate{}}, nil
}

func writeFileAtomic(path string, b []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, mode); err != nil {
		return err
	}
	if err := os.Chmod(tmp, mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// CertPEM is the CA's certificate, which sandboxes trust.
func (c *CA) CertPEM() []byte { return c.certPEM }

// Leaf returns a certificate for name signed by the CA, made once and kept
// until it nears its end.
func (c *CA) Leaf(name string) (*tls.Certificate, error) {
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if l := c.leaves[name]; l != nil && l.Leaf.NotAfter.After(now.Add(time.Hour)) {
		return l, nil
	}
	key, serial, err := newKey()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name},
		DNSNames:     []string{name},
		NotBefore:    now.Add(-time.Hour), NotAfter: now.Add(leafLifetime),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		return nil, err
	}
	leaf, _ := x509.ParseCertificate(der)
	l := &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
	if len(c.leaves) >= maxLeaves {
		clear(c.leaves)
	}
	c.leaves[name] = l
	return l, nil
}
