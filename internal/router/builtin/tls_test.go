package builtin

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// allowOnly is a decision function that allows the given names and counts
// its calls.
func allowOnly(calls *atomic.Int32, names ...string) func(context.Context, string) (bool, error) {
	return func(_ context.Context, host string) (bool, error) {
		calls.Add(1)
		for _, n := range names {
			if n == host {
				return true, nil
			}
		}
		return false, nil
	}
}

func hello(name string) *tls.ClientHelloInfo {
	return &tls.ClientHelloInfo{ServerName: name, SupportedProtos: []string{"http/1.1"}}
}

func TestInternalCAIssuesOnlyAllowedNamesAndPersists(t *testing.T) {
	dir := t.TempDir()
	var calls atomic.Int32
	allow := allowOnly(&calls, "sb1-8080.sandpit.test")
	tl, err := NewTLS(TLSOptions{Mode: TLSInternal, Dir: dir, Allow: allow})
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, CACertFile))
	if err != nil || !bytes.Equal(caPEM, tl.CACertPEM()) {
		t.Fatalf("exported CA: %v", err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)

	c, err := tl.getCertificate(hello("SB1-8080.sandpit.test."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Leaf.Verify(x509.VerifyOptions{DNSName: "sb1-8080.sandpit.test", Roots: pool}); err != nil {
		t.Fatalf("leaf does not verify against the exported CA: %v", err)
	}
	again, err := tl.getCertificate(hello("sb1-8080.sandpit.test"))
	if err != nil || again != c {
		t.Fatalf("second handshake: %v; cached leaf reused: %v", err, again == c)
	}
	if calls.Load() != 2 {
		t.Fatalf("decision asked %d times, want at every handshake (2)", calls.Load())
	}
	for _, name := range []string{"stranger.example.com", "sb2-8080.sandpit.test", ""} {
		if _, err := tl.getCertificate(hello(name)); !errors.Is(err, ErrHostNotServed) {
			t.Fatalf("certificate for %q: err %v, want ErrHostNotServed", name, err)
		}
	}
	if n := len(tl.leafs); n != 1 {
		t.Fatalf("%d leaves issued, want 1", n)
	}

	// A second start reuses the CA.
	tl2, err := NewTLS(TLSOptions{Mode: TLSInternal, Dir: dir, Allow: allow})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(tl2.CACertPEM(), caPEM) {
		t.Fatal("a second start made a new CA")
	}
	// A crash between the key and the certificate: the next start signs a
	// certificate for the key it finds.
	if err := os.Remove(filepath.Join(dir, CACertFile)); err != nil {
		t.Fatal(err)
	}
	tl3, err := NewTLS(TLSOptions{Mode: TLSInternal, Dir: dir, Allow: allow})
	if err != nil {
		t.Fatal(err)
	}
	if !tl3.ca.PublicKey.(*ecdsa.PublicKey).Equal(tl.ca.PublicKey) {
		t.Fatal("the completed CA has another key")
	}
	// A certificate without its key is refused, never replaced.
	if err := os.Remove(filepath.Join(dir, CAKeyFile)); err != nil {
		t.Fatal(err)
	}
	if _, err := NewTLS(TLSOptions{Mode: TLSInternal, Dir: dir, Allow: allow}); err == nil {
		t.Fatal("a CA certificate without its key was accepted")
	}
}

// TestOperatorCertificateCoversItsNames: the operator's wildcard is served
// for the names it covers, with no decision and nothing issued; other names
// go through the decision.
func TestOperatorCertificateCoversItsNames(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := writeSelfSigned(t, dir, "*.sandpit.test")
	var calls atomic.Int32
	tl, err := NewTLS(TLSOptions{Mode: TLSInternal, Dir: filepath.Join(dir, "tls"), CertFile: certFile, KeyFile: keyFile, Allow: allowOnly(&calls, "custom.example.test")})
	if err != nil {
		t.Fatal(err)
	}
	c, err := tl.getCertificate(hello("anything-8080.sandpit.test"))
	if err != nil || c != tl.operator {
		t.Fatalf("covered name: %v, operator's certificate: %v", err, c == tl.operator)
	}
	if calls.Load() != 0 {
		t.Fatal("the decision was asked for a name the operator's certificate covers")
	}
	if c, err := tl.getCertificate(hello("custom.example.test")); err != nil || c == tl.operator {
		t.Fatalf("uncovered allowed name: %v", err)
	}
	if _, err := tl.getCertificate(hello("a.b.sandpit.test")); !errors.Is(err, ErrHostNotServed) {
		t.Fatalf("name the wildcard does not cover, not allowed: %v", err)
	}
}

// TestAutoDecisionWiring checks what --tls auto can be tested for without
// an ACME server: certmagic is given the daemon's decision function, asks
// it before obtaining anything, and refuses a hostname the daemon does not
// serve without contacting the CA (whose URL here is a closed loopback
// port). Obtaining a real certificate needs a reachable ACME CA and is not
// tested.
func TestAutoDecisionWiring(t *testing.T) {
	var calls atomic.Int32
	var asked atomic.Value
	allow := func(ctx context.Context, host string) (bool, error) {
		calls.Add(1)
		asked.Store(host)
		return host == "sb1-8080.example.com", nil
	}
	tl, err := NewTLS(TLSOptions{Mode: TLSAuto, Dir: t.TempDir(), ACMECA: "https://127.0.0.1:1/directory", Allow: allow})
	if err != nil {
		t.Fatal(err)
	}
	defer tl.Close()
	if tl.magic.OnDemand == nil || tl.magic.OnDemand.DecisionFunc == nil {
		t.Fatal("certmagic has no on-demand decision function")
	}
	if err := tl.magic.OnDemand.DecisionFunc(context.Background(), "SB1-8080.example.com"); err != nil {
		t.Fatalf("allowed name refused: %v", err)
	}
	if err := tl.magic.OnDemand.DecisionFunc(context.Background(), "stranger.example.com"); !errors.Is(err, ErrHostNotServed) {
		t.Fatalf("stranger: %v, want ErrHostNotServed", err)
	}
	before := calls.Load()
	if _, err := tl.getCertificate(hello("stranger.example.com")); err == nil {
		t.Fatal("a certificate for a stranger's name")
	}
	if calls.Load() == before || asked.Load() != "stranger.example.com" {
		t.Fatalf("a handshake did not ask the decision function (calls %d -> %d, last %v)", before, calls.Load(), asked.Load())
	}
	if protos := tl.Config().NextProtos; protos[len(protos)-1] != "acme-tls/1" {
		t.Fatalf("NextProtos %v: the TLS-ALPN challenge is not answered", protos)
	}
}

func writeSelfSigned(t *testing.T, dir, name string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sn, err := serial()
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: sn, Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kd, _ := x509.MarshalECPrivateKey(key)
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}
