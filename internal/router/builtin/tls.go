package builtin

import (
	"context"
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
	"log/slog"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/certmagic"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// TLS modes of the builtin proxy (serve --tls).
const (
	TLSOff      = "off"
	TLSInternal = "internal"
	TLSAuto     = "auto"
)

// Files of the internal CA inside TLSOptions.Dir. The certificate is what
// clients trust (serve's docs and `sandpit ca` point at it); the key never
// leaves the data directory.
const (
	CACertFile = "ca.crt"
	CAKeyFile  = "ca.key"
)

// ErrHostNotServed is why a handshake for a hostname the daemon does not
// serve gets no certificate.
var ErrHostNotServed = errors.New("no certificate: not a hostname this daemon serves")

// TLSOptions configure the proxy's certificates.
type TLSOptions struct {
	// Mode is TLSInternal or TLSAuto.
	Mode string
	// Dir holds the internal CA (TLSInternal) or the ACME account and
	// certificates (TLSAuto); it persists across restarts.
	Dir string
	// CertFile and KeyFile, when set, are a certificate the operator has
	// (typically a wildcard for the preview domain): it is served for every
	// name it covers, and certificates are issued only for the others.
	CertFile, KeyFile string
	// Allow decides whether a certificate may be handed out for a hostname:
	// only hostnames the daemon serves right now get one, so a stranger's
	// name pointed at this address makes the daemon issue (or, with ACME,
	// ask a public CA for) nothing.
	Allow func(ctx context.Context, host string) (bool, error)
	// ACMECA is the ACME directory URL (TLSAuto; default Let's Encrypt's
	// production directory) and ACMEEmail the account's contact address.
	ACMECA    string
	ACMEEmail string
	Logger    *slog.Logger
}

// TLS hands out the proxy's certificates.
type TLS struct {
	opts     TLSOptions
	log      *slog.Logger
	operator *tls.Certificate // from CertFile/KeyFile, or nil

	// internal CA
	ca    *x509.Certificate
	caKey *ecdsa.PrivateKey
	mu    sync.Mutex
	leafs map[string]*tls.Certificate // hostname -> leaf, issued on demand

	magic *certmagic.Config // TLSAuto
	cache *certmagic.Cache  // magic's
}

// leafLifetime is how long an internally issued leaf certificate is valid;
// they live in memory only, so a restart issues new ones, and one that
// comes near its end is replaced at the next handshake.
const leafLifetime = 7 * 24 * time.Hour

// maxLeafs bounds the in-memory leaf cache; beyond it, expired leaves are
// dropped and, if that is not enough, the whole cache is (leaves are cheap
// to issue again).
const maxLeafs = 10000

// NewTLS loads (or, on the first start, creates) what opts.Mode needs.
func NewTLS(opts TLSOptions) (*TLS, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Allow == nil {
		return nil, errors.New("tls: no decision function")
	}
	t := &TLS{opts: opts, log: opts.Logger, leafs: map[string]*tls.Certificate{}}
	if (opts.CertFile == "") != (opts.KeyFile == "") {
		return nil, errors.New("--tls-cert and --tls-key go together")
	}
	if opts.CertFile != "" {
		c, err := tls.LoadX509KeyPair(opts.CertFile, opts.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("--tls-cert/--tls-key: %w", err)
		}
		if c.Leaf == nil {
			if c.Leaf, err = x509.ParseCertificate(c.Certificate[0]); err != nil {
				return nil, fmt.Errorf("--tls-cert: %w", err)
			}
		}
		if time.Now().After(c.Leaf.NotAfter) {
			return nil, fmt.Errorf("--tls-cert %s expired on %s", opts.CertFile, c.Leaf.NotAfter.Format(time.RFC3339))
		}
		t.operator = &c
	}
	switch opts.Mode {
	case TLSInternal:
		ca, key, created, err := loadOrCreateCA(opts.Dir)
		if err != nil {
			return nil, fmt.Errorf("internal CA: %w", err)
		}
		if created {
			t.log.Info("tls: created the internal CA; clients trust it through this file (sandpit ca prints it)", "ca_cert", filepath.Join(opts.Dir, CACertFile))
		}
		t.ca, t.caKey = ca, key
	case TLSAuto:
		t.magic, t.cache = newMagic(opts)
	default:
		return nil, fmt.Errorf("tls mode %q: want %q or %q", opts.Mode, TLSInternal, TLSAuto)
	}
	return t, nil
}

// Config is the server-side TLS configuration of the proxy listener.
func (t *TLS) Config() *tls.Config {
	c := &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: t.getCertificate,
		NextProtos:     []string{"h2", "http/1.1"},
	}
	if t.magic != nil {
		// The TLS-ALPN-01 challenge is answered on this listener.
		c.NextProtos = append(c.NextProtos, "acme-tls/1")
	}
	return c
}

// CACertPEM returns the internal CA's certificate, PEM-encoded (nil in the
// other modes).
func (t *TLS) CACertPEM() []byte {
	if t.ca == nil {
		return nil
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: t.ca.Raw})
}

func (t *TLS) getCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	name := strings.TrimSuffix(strings.ToLower(hello.ServerName), ".")
	if name == "" {
		// Without SNI (a client dialling an IP address) there is no
		// hostname to route either.
		return nil, fmt.Errorf("%w: the client sent no server name", ErrHostNotServed)
	}
	if t.operator != nil && t.operator.Leaf.VerifyHostname(name) == nil {
		return t.operator, nil
	}
	if t.magic != nil {
		// certmagic asks the same decision function (OnDemand) before it
		// obtains or renews anything, and answers ACME's TLS-ALPN challenge.
		return t.magic.GetCertificate(hello)
	}
	ctx := hello.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	// The decision is asked at every handshake, not only when a leaf is
	// issued: a deleted sandbox's hostname must stop getting its cached
	// certificate at once.
	ok, err := t.opts.Allow(ctx, name)
	if err != nil {
		t.log.Warn("tls: decide on a certificate", "host", name, "err", err)
		return nil, fmt.Errorf("tls: decide on %s: %w", name, err)
	}
	if !ok {
		t.log.Debug("tls: no certificate for a hostname not served", "host", name)
		return nil, fmt.Errorf("%w: %s", ErrHostNotServed, name)
	}
	return t.leaf(name)
}

// leaf returns the cached leaf for name, issuing it when there is none or
// the cached one is within a day of its end. The lock is held while one is
// issued: an ECDSA signature takes well under a millisecond, and it keeps
// concurrent first handshakes from issuing the same name twice.
func (t *TLS) leaf(name string) (*tls.Certificate, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	if c, ok := t.leafs[name]; ok && now.Add(24*time.Hour).Before(c.Leaf.NotAfter) {
		return c, nil
	}
	c, err := issueLeaf(t.ca, t.caKey, name, now)
	if err != nil {
		return nil, fmt.Errorf("tls: issue a certificate for %s: %w", name, err)
	}
	if len(t.leafs) >= maxLeafs {
		for n, old := range t.leafs {
			if now.After(old.Leaf.NotAfter) {
				delete(t.leafs, n)
			}
		}
		if len(t.leafs) >= maxLeafs {
			clear(t.leafs)
		}
	}
	t.leafs[name] = c
	return c, nil
}

func serial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

// issueLeaf signs a server certificate for one hostname.
func issueLeaf(ca *x509.Certificate, caKey *ecdsa.PrivateKey, name string, now time.Time) (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	sn, err := serial()
	if err != nil {
		return nil, err
	}
	notAfter := now.Add(leafLifetime)
	if notAfter.After(ca.NotAfter) {
		notAfter = ca.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: sn,
		Subject:      pkix.Name{CommonName: name},
		DNSNames:     []string{name},
		// A little in the past, for clients whose clocks lag.
		NotBefore:   now.Add(-time.Hour),
		NotAfter:    notAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &tls.Certificate{Certificate: [][]byte{der, ca.Raw}, PrivateKey: key, Leaf: leaf}, nil
}

// loadOrCreateCA reads the CA from dir, or creates it there. The key is
// written first and the certificate last, each under a temporary name and
// linked into place (never replacing a file), so a crash leaves either
// nothing, or a key without a certificate, which the next start completes
// with a certificate for that key: a CA certificate clients were given is
// never replaced behind their back.
func loadOrCreateCA(dir string) (*x509.Certificate, *ecdsa.PrivateKey, bool, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, false, err
	}
	certPath, keyPath := filepath.Join(dir, CACertFile), filepath.Join(dir, CAKeyFile)
	keyPEM, err := os.ReadFile(keyPath)
	created := false
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if _, err := os.Stat(certPath); err == nil {
			return nil, nil, false, fmt.Errorf("%s exists without its key %s: restore the key, or remove both to make a new CA (clients must then trust the new one)", certPath, keyPath)
		}
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, nil, false, err
		}
		der, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			return nil, nil, false, err
		}
		keyPEM = pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
		if err := writeNew(keyPath, keyPEM, 0o600); err != nil {
			return nil, nil, false, err
		}
		created = true
	case err != nil:
		return nil, nil, false, err
	}
	key, err := parseECKey(keyPEM)
	if err != nil {
		return nil, nil, false, fmt.Errorf("%s: %w", keyPath, err)
	}
	certPEM, err := os.ReadFile(certPath)
	if errors.Is(err, fs.ErrNotExist) {
		if certPEM, err = selfSignCA(key); err != nil {
			return nil, nil, false, err
		}
		if err := writeNew(certPath, certPEM, 0o644); err != nil {
			return nil, nil, false, err
		}
		created = true
	} else if err != nil {
		return nil, nil, false, err
	}
	b, _ := pem.Decode(certPEM)
	if b == nil || b.Type != "CERTIFICATE" {
		return nil, nil, false, fmt.Errorf("%s: no PEM certificate", certPath)
	}
	ca, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return nil, nil, false, fmt.Errorf("%s: %w", certPath, err)
	}
	if pub, ok := ca.PublicKey.(*ecdsa.PublicKey); !ok || !pub.Equal(&key.PublicKey) {
		return nil, nil, false, fmt.Errorf("%s does not belong to the key %s", certPath, keyPath)
	}
	if time.Now().After(ca.NotAfter) {
		return nil, nil, false, fmt.Errorf("%s expired on %s: remove it (keep the key) to sign a new one", certPath, ca.NotAfter.Format(time.RFC3339))
	}
	return ca, key, created, nil
}

func parseECKey(p []byte) (*ecdsa.PrivateKey, error) {
	b, _ := pem.Decode(p)
	if b == nil {
		return nil, errors.New("no PEM key")
	}
	return x509.ParseECPrivateKey(b.Bytes)
}

// selfSignCA makes the CA certificate: valid ten years, allowed to sign
// server certificates only (no intermediate CAs below it).
func selfSignCA(key *ecdsa.PrivateKey) ([]byte, error) {
	sn, err := serial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	host, _ := os.Hostname()
	tmpl := &x509.Certificate{
		SerialNumber:          sn,
		Subject:               pkix.Name{CommonName: "Sandpit local CA " + host, Organization: []string{"Sandpit"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.AddDate(10, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

// writeNew writes data to path, which must not exist yet, whole or not at
// all: under a temporary name, synced, then linked into place.
func writeNew(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	_, werr := tmp.Write(data)
	if werr == nil {
		werr = tmp.Chmod(mode)
	}
	if werr == nil {
		werr = tmp.Sync()
	}
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return werr
	}
	return os.Link(tmp.Name(), path)
}

// newMagic configures certmagic for on-demand ACME certificates, asking
// opts.Allow before it obtains or renews one. Only the TLS-ALPN challenge is
// used: it is answered on the proxy listener itself (which must then be
// reachable on port 443 under the names), so no port-80 listener is needed.
func newMagic(opts TLSOptions) (*certmagic.Config, *certmagic.Cache) {
	logger := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.Lock(os.Stderr), zap.WarnLevel))
	var magic *certmagic.Config
	cache := certmagic.NewCache(certmagic.CacheOptions{
		GetConfigForCert: func(certmagic.Certificate) (*certmagic.Config, error) { return magic, nil },
		Logger:           logger,
	})
	magic = certmagic.New(cache, certmagic.Config{
		Storage: &certmagic.FileStorage{Path: filepath.Join(opts.Dir, "acme")},
		Logger:  logger,
		OnDemand: &certmagic.OnDemandConfig{
			DecisionFunc: decisionFunc(opts.Allow),
		},
	})
	ca := opts.ACMECA
	if ca == "" {
		ca = certmagic.LetsEncryptProductionCA
	}
	magic.Issuers = []certmagic.Issuer{certmagic.NewACMEIssuer(magic, certmagic.ACMEIssuer{
		CA:                   ca,
		Email:                opts.ACMEEmail,
		Agreed:               true,
		DisableHTTPChallenge: true,
		Logger:               logger,
	})}
	return magic, cache
}

// decisionFunc adapts Allow to certmagic's on-demand decision.
func decisionFunc(allow func(ctx context.Context, host string) (bool, error)) func(ctx context.Context, name string) error {
	return func(ctx context.Context, name string) error {
		name = strings.TrimSuffix(strings.ToLower(name), ".")
		ok, err := allow(ctx, name)
		if err != nil {
			return fmt.Errorf("decide on %s: %w", name, err)
		}
		if !ok {
			return fmt.Errorf("%w: %s", ErrHostNotServed, name)
		}
		return nil
	}
}

// Close stops certmagic's background maintenance (TLSAuto).
func (t *TLS) Close() {
	if t.cache != nil {
		t.cache.Stop()
	}
}
