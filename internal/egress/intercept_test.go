package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/secrets"
	"github.com/sandpit-dev/sandpit/internal/store"
)

// echoHeaders answers go-httpbin's /headers shape: {"headers": {name:
// [values]}}, and counts the requests it saw.
func echoHeaders(seen *atomic.Int32) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Add(1)
		_ = json.NewEncoder(w).Encode(map[string]any{"headers": r.Header, "host": r.Host})
	})
}

// realSecrets is the secrets aggregate on a store of the test's own, with
// alice's secret "api-token".
func realSecrets(t *testing.T) *secrets.Service {
	t.Helper()
	dir := t.TempDir()
	st, err := store.Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	sec := secrets.New(secrets.Config{Store: st, KeyPath: filepath.Join(dir, secrets.KeyFile)})
	alice := sandpit.WithPrincipal(context.Background(), sandpit.Principal{TokenName: "a", Owner: "alice"})
	if _, _, err := sec.Create(alice, "api-token", "s3cr3t-value", nil); err != nil {
		t.Fatal(err)
	}
	return sec
}

// TestIntercept: a connection to a host with a transform is terminated with
// a certificate of the egress CA, the rule's headers are set with the
// owner's secrets filled (replacing what the sandbox sent under that name),
// and the request goes on to the original destination over TLS verified
// for the host. A placeholder naming a secret the owner lacks, a request
// for another host on the connection, and an upstream whose certificate is
// not trusted are refused with nothing of the secret sent.
func TestIntercept(t *testing.T) {
	ca, err := LoadOrCreateCA(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	sec := realSecrets(t)
	var seen atomic.Int32
	up := httptest.NewUnstartedServer(echoHeaders(&seen))
	up.StartTLS()
	defer up.Close()
	trusted := x509.NewCertPool()
	trusted.AddCert(up.Certificate())
	plainUp := httptest.NewServer(echoHeaders(&seen))
	defer plainUp.Close()
	sandboxRoots := x509.NewCertPool()
	sandboxRoots.AppendCertsFromPEM(ca.CertPEM())

	headers := []Header{{Name: "Authorization", Value: "Bearer {{secret:api-token}}"}, {Name: "X-E2B", Value: "${e2b.secrets.API-TOKEN}"}, {Name: "X-Plain", Value: "v"}}
	tests := []struct {
		name       string
		owner      string
		headers    []Header
		roots      *x509.CertPool
		plain      bool
		host       string
		wantStatus int
		wantHeader map[string]string
		wantSeen   bool
	}{
		{name: "https with secrets", owner: "alice", headers: headers, roots: trusted, host: "example.com", wantStatus: 200,
			wantHeader: map[string]string{"Authorization": "Bearer s3cr3t-value", "X-E2b": "s3cr3t-value", "X-Plain": "v", "X-Sandbox": "kept"}, wantSeen: true},
		{name: "plain http with secrets", owner: "alice", headers: headers, plain: true, host: "example.com", wantStatus: 200,
			wantHeader: map[string]string{"Authorization": "Bearer s3cr3t-value"}, wantSeen: true},
		{name: "another owner's secret", owner: "bob", headers: headers, roots: trusted, host: "example.com", wantStatus: http.StatusBadGateway},
		{name: "another host on the connection", owner: "alice", headers: headers, roots: trusted, host: "other.example", wantStatus: http.StatusMisdirectedRequest},
		{name: "untrusted upstream", owner: "alice", headers: headers, roots: x509.NewCertPool(), host: "example.com", wantStatus: http.StatusBadGateway},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := seen.Load()
			s := New(Config{CA: ca, UpstreamRoots: tc.roots, Secrets: sec})
			r := Rules{SandboxID: "sb1", Owner: tc.owner, Transforms: []HostTransform{{Pattern: "example.com", Headers: tc.headers}}}
			s.records[r.SandboxID] = &record{rules: r, learned: map[string]bool{}}
			target := up.Listener.Addr().String()
			if tc.plain {
				target = plainUp.Listener.Addr().String()
			}
			dst := netip.MustParseAddrPort(target)
			client, proxySide := tcpPair(t)
			done := make(chan struct{})
			go func() {
				defer close(done)
				s.intercept(proxySide, bufio.NewReaderSize(proxySide, maxPeek), dst, dst.String(), tc.roots, "example.com", r.Transforms[0], r)
			}()
			var conn net.Conn = client
			if !tc.plain {
				tc := tls.Client(client, &tls.Config{ServerName: "example.com", RootCAs: sandboxRoots})
				if err := tc.Handshake(); err != nil {
					t.Fatalf("the sandbox's handshake with the CA's certificate: %v", err)
				}
				conn = tc
			}
			_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
			req, _ := http.NewRequest("GET", "http://"+tc.host+"/headers", nil)
			req.Header.Set("X-Sandbox", "kept")
			req.Header.Set("Authorization", "Bearer what-the-sandbox-typed")
			if err := req.Write(conn); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(conn), req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			conn.Close()
			<-done
			if resp.StatusCode != tc.wantStatus {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.wantStatus, body)
			}
			if strings.Contains(string(body), "s3cr3t") && !tc.wantSeen {
				t.Errorf("a refused request's answer holds the secret: %s", body)
			}
			if got := seen.Load() > before; got != tc.wantSeen {
				t.Fatalf("upstream reached: %v, want %v", got, tc.wantSeen)
			}
			if !tc.wantSeen {
				return
			}
			var echo struct {
				Headers map[string][]string `json:"headers"`
			}
			if err := json.Unmarshal(body, &echo); err != nil {
				t.Fatalf("%v: %s", err, body)
			}
			for k, v := range tc.wantHeader {
				if got := strings.Join(echo.Headers[k], ","); got != v {
					t.Errorf("upstream got %s: %q, want %q", k, got, v)
				}
			}
		})
	}
}

// TestInterceptRefusesWithoutTrust: a sandbox that does not trust the CA
// fails its handshake, and nothing reaches the upstream.
func TestInterceptRefusesWithoutTrust(t *testing.T) {
	ca, err := LoadOrCreateCA(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var seen atomic.Int32
	up := httptest.NewTLSServer(echoHeaders(&seen))
	defer up.Close()
	s := New(Config{CA: ca})
	r := Rules{SandboxID: "sb1", Owner: "alice", Transforms: []HostTransform{{Pattern: "example.com", Headers: []Header{{Name: "X", Value: "y"}}}}}
	client, proxySide := tcpPair(t)
	done := make(chan struct{})
	go func() {
		defer close(done)
		dst := netip.MustParseAddrPort(up.Listener.Addr().String())
		s.intercept(proxySide, bufio.NewReaderSize(proxySide, maxPeek), dst, dst.String(), nil, "example.com", r.Transforms[0], r)
	}()
	_ = client.SetDeadline(time.Now().Add(10 * time.Second))
	if err := tls.Client(client, &tls.Config{ServerName: "example.com", RootCAs: x509.NewCertPool()}).Handshake(); err == nil {
		t.Fatal("a sandbox without the CA completed the handshake")
	}
	client.Close()
	<-done
	if seen.Load() != 0 {
		t.Fatal("the upstream was reached")
	}
}

// TestCAKeptAndReadBack: the CA is made once, its key 0600, and read back
// the same; its leaves chain to it for their name only.
func TestCAKeptAndReadBack(t *testing.T) {
	dir := t.TempDir()
	a, err := LoadOrCreateCA(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := LoadOrCreateCA(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if string(a.CertPEM()) != string(b.CertPEM()) {
		t.Fatal("the CA read back differs")
	}
	if fi, err := os.Stat(filepath.Join(dir, CAKeyFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v %v", fi, err)
	}
	leaf, err := b.Leaf("api.example.com")
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(a.CertPEM())
	if _, err := leaf.Leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "api.example.com"}); err != nil {
		t.Fatal(err)
	}
	if _, err := leaf.Leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "other.example.com"}); err == nil {
		t.Fatal("a leaf verified for another name")
	}
}

func TestTransformFor(t *testing.T) {
	r := Rules{Transforms: []HostTransform{{Pattern: "*.example.com"}, {Pattern: "*.api.example.com"}, {Pattern: "api.example.com"}}}
	for name, want := range map[string]string{
		"api.example.com":   "api.example.com",
		"x.api.example.com": "*.api.example.com",
		"x.example.com":     "*.example.com",
		"example.com":       "",
		"":                  "",
	} {
		got, ok := r.transformFor(name)
		if ok != (want != "") || got.Pattern != want {
			t.Errorf("transformFor(%q) = %q %v, want %q", name, got.Pattern, ok, want)
		}
	}
}

func TestNormalizeRules(t *testing.T) {
	hdr := func(k, v string) []sandpit.NetworkRule {
		return []sandpit.NetworkRule{{Transform: &sandpit.NetworkTransform{Headers: map[string]string{k: v}}}}
	}
	good := map[string][]sandpit.NetworkRule{"API.Example.com": hdr("Authorization", "Bearer {{secret:tok}} ${e2b.secrets.other}"), "b.example.com:8443": hdr("X", "y")}
	out, err := NormalizeRules(good)
	if err != nil || out["api.example.com"] == nil || out["b.example.com"] == nil {
		t.Fatalf("%v %v", out, err)
	}
	if got := SecretNames(out); strings.Join(got, ",") != "other,tok" {
		t.Errorf("secret names %v", got)
	}
	for name, bad := range map[string]map[string][]sandpit.NetworkRule{
		"bare wildcard":       {"*": hdr("X", "y")},
		"address":             {"10.0.0.1": hdr("X", "y")},
		"reserved header":     {"a.example": hdr("Host", "y")},
		"bad header name":     {"a.example": hdr("X Y", "y")},
		"line break":          {"a.example": hdr("X", "a\r\nEvil: 1")},
		"broken placeholder":  {"a.example": hdr("X", "{{secret:tok")},
		"identity token":      {"a.example": hdr("X", "${e2b.identity.tokens.aws}")},
		"twice the same host": {"a.example": hdr("X", "y"), "A.example": hdr("X", "y")},
	} {
		if _, err := NormalizeRules(bad); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
