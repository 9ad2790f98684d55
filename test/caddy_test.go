package sandpit_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/test/harness"
)

// tlsClient trusts Caddy's internal CA and dials every name to the proxy
// address, as a wildcard DNS record for the test domain would.
func tlsClient(t *testing.T, cd *harness.Caddy, proxyAddr string) (*http.Client, *tls.Config) {
	t.Helper()
	var pem []byte
	eventually(t, 10*time.Second, "caddy's internal root CA", func() error {
		var err error
		pem, err = os.ReadFile(cd.RootCA())
		return err
	})
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatal("no certificate in Caddy's root.crt")
	}
	conf := &tls.Config{RootCAs: pool}
	dialer := &net.Dialer{Timeout: 5 * time.Second}
	tr := &http.Transport{
		TLSClientConfig:   conf,
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return dialer.DialContext(ctx, network, proxyAddr)
		},
	}
	return &http.Client{Transport: tr, Timeout: 15 * time.Second}, conf
}

func httpsPage(ctx context.Context, hc *http.Client, rawURL, page string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK || string(b) != page {
		return fmt.Errorf("GET %s: %d %q, want 200 %q", rawURL, resp.StatusCode, b, page)
	}
	return nil
}

// handshake opens a TLS connection to the proxy for serverName.
func handshake(proxyAddr, serverName string, conf *tls.Config) error {
	c := conf.Clone()
	c.ServerName = serverName
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", proxyAddr, c)
	if err != nil {
		return err
	}
	return conn.Close()
}

// e2bModules is test/e2b with its node_modules, where the SDK scripts run;
// without them the SDK part is skipped, except in CI.
func e2bModules(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("e2b"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "e2b")); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("test/e2b/node_modules missing (scripts/test.sh installs it before the Go tests): %v", err)
		}
		t.Skipf("test/e2b/node_modules missing; run npm ci in test/e2b: %v", err)
	}
	return dir
}

// TestCaddyPreviewTLS runs the daemon with --preview-tls and Caddy's internal
// CA, on Debian's Caddy 2.6 (on-demand "ask") and on the caddy-l4 build
// (the "permission" module): the preview URL and a custom domain serve the
// sandbox over HTTPS, a hostname that is not bound gets no certificate, and
// the official E2B SDK, with E2B_DOMAIN and no E2B_SANDBOX_URL, reaches the
// sandbox's agent at https://49983-<id>.<domain> by itself.
//
// Caddy listens on a free loopback port rather than 443: the SDK takes the
// sandbox domain from the create answer, which carries the proxy port
// ("sandpit.test:PORT"), so it builds https://49983-<id>.sandpit.test:PORT
// and needs no privileged port, and parallel tests (and other runs on this
// machine) never compete for 443.
func TestCaddyPreviewTLS(t *testing.T) {
	t.Parallel()
	for _, rc := range routerCases[1:] {
		t.Run("router="+rc.name, func(t *testing.T) {
			t.Parallel()
			const domain = "sandpit.test"
			d, cd := startRouted(t, rc, harness.Options{}, "--preview-tls", "--caddy-internal-ca", "--domain", domain)
			c := d.Client()
			ctx := ctxFor(t, 3*time.Minute)
			id := newSandbox(t, ctx, c)
			startHTTPD(t, ctx, c, id, 8080, "over tls")
			hc, conf := tlsClient(t, cd, d.ProxyAddr)

			web := mustExpose(t, ctx, d, id, 8080, "http", http.StatusCreated)
			if want := "https://" + id + "-8080." + domain + ":" + proxyPort(t, d); web.PublicURL != want {
				t.Fatalf("public_url = %q, want %q", web.PublicURL, want)
			}
			eventually(t, 20*time.Second, "https preview", func() error { return httpsPage(ctx, hc, web.PublicURL, "over tls") })

			status, dom, code, err := addDomain(ctx, d, id, "secure.example.test", 8080)
			if err != nil || status != http.StatusCreated || !strings.HasPrefix(dom.URL, "https://") {
				t.Fatalf("add domain: %d %s %+v %v", status, code, dom, err)
			}
			eventually(t, 20*time.Second, "https custom domain", func() error { return httpsPage(ctx, hc, dom.URL, "over tls") })

			// Hostnames that are not bound right now get no certificate.
			for _, stranger := range []string{"stranger.example.com", id + "-8081." + domain, "sbnosuchsandbox-8080." + domain} {
				if err := handshake(d.ProxyAddr, stranger, conf); err == nil {
					t.Fatalf("TLS handshake for unbound %s succeeded", stranger)
				}
			}

			// The official SDK through Caddy over HTTPS.
			dir := e2bModules(t)
			cmd := exec.CommandContext(ctx, "node", "tls-sdk.mjs")
			cmd.Dir = dir
			env := []string{}
			for _, kv := range os.Environ() {
				if !strings.HasPrefix(kv, "E2B_") && !strings.HasPrefix(kv, "NODE_EXTRA_CA_CERTS=") {
					env = append(env, kv)
				}
			}
			cmd.Env = append(env, "E2B_DOMAIN="+domain, "E2B_API_URL="+d.URL()+"/e2b", "E2B_API_KEY="+d.Token, "NODE_EXTRA_CA_CERTS="+cd.RootCA())
			out, err := cmd.Output()
			if err != nil {
				var ee *exec.ExitError
				if errors.As(err, &ee) {
					t.Fatalf("tls-sdk.mjs: %v\n%s\n%s", err, out, ee.Stderr)
				}
				t.Fatal(err)
			}
			var res struct {
				SandboxID, SandboxDomain, Stdout string
				ExitCode                         int
				Resolved                         []string
			}
			if err := json.Unmarshal(out, &res); err != nil {
				t.Fatalf("tls-sdk.mjs printed %q: %v", out, err)
			}
			wantHost := "49983-" + res.SandboxID + "." + domain
			if res.ExitCode != 0 || !strings.HasPrefix(res.Stdout, "hello from ") || res.SandboxDomain != domain+":"+proxyPort(t, d) || !contains(res.Resolved, wantHost) {
				t.Fatalf("SDK run = %+v, want exit 0, stdout 'hello from ...', and the SDK resolving %s", res, wantHost)
			}
		})
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

var _ = strconv.Itoa
var _ sync.Mutex
var _ atomic.Int64
var _ = httputil.NewSingleHostReverseProxy
var _ url.URL
