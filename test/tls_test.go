package sandpit_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/testenv/testkit"
	"github.com/sandpit-dev/sandpit/test/harness"
)

// caClient trusts the PEM CA certificate and dials every name to the proxy
// address, as a wildcard DNS record for the test domain would.
func caClient(t *testing.T, caPEM []byte, proxyAddr string) (*http.Client, *tls.Config) {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatalf("no PEM certificate in %q", caPEM)
	}
	conf := &tls.Config{RootCAs: pool}
	dialer := &net.Dialer{Timeout: 5 * time.Second}
	tr := &http.Transport{
		TLSClientConfig:   conf,
		DisableKeepAlives: true,
		ForceAttemptHTTP2: true,
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return dialer.DialContext(ctx, network, proxyAddr)
		},
	}
	return &http.Client{Transport: tr, Timeout: 15 * time.Second}, conf
}

// sandpitCA runs `sandpit ca` against a data directory.
func sandpitCA(t *testing.T, dataDir string, args ...string) []byte {
	t.Helper()
	out, err := exec.Command(sandpitBin, append([]string{"ca", "--data-dir", dataDir}, args...)...).Output()
	if err != nil {
		t.Fatalf("sandpit ca: %v", err)
	}
	return out
}

// TestBuiltinTLSInternal runs the builtin router with --tls internal: the
// daemon makes a CA in its data directory, exports its certificate (the
// well-known file and `sandpit ca`), and the preview listener serves an
// exposed port and a custom domain over HTTPS with certificates it issues
// on demand, to Go and to Node's fetch trusting that CA. A hostname the
// daemon does not serve gets no certificate. After a restart the CA is the
// same, so clients that trusted it keep working.
func TestBuiltinTLSInternal(t *testing.T) {
	t.Parallel()
	const domain = "sandpit.test"
	d := harness.Start(t, sandpitBin, harness.Options{Args: []string{"--tls", "internal", "--domain", domain}})
	c := d.Client()
	ctx := ctxFor(t, 3*time.Minute)

	caPath := filepath.Join(d.DataDir, "tls", "ca.crt")
	caPEM, err := os.ReadFile(caPath)
	if err != nil {
		t.Fatalf("the CA certificate is not at its well-known path: %v", err)
	}
	if got := sandpitCA(t, d.DataDir); !bytes.Equal(got, caPEM) {
		t.Fatalf("sandpit ca printed %q, want the contents of %s", got, caPath)
	}
	if got := strings.TrimSpace(string(sandpitCA(t, d.DataDir, "--path"))); got != caPath {
		t.Fatalf("sandpit ca --path = %q, want %q", got, caPath)
	}
	if fi, err := os.Stat(filepath.Join(d.DataDir, "tls", "ca.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("CA key: %v, mode %v, want 0600", err, fi.Mode().Perm())
	}

	id := newSandbox(t, ctx, c)
	startHTTPD(t, ctx, c, id, 8080, "over builtin tls")
	web := mustExpose(t, ctx, d, id, 8080, "http", http.StatusCreated)
	if want := "https://" + id + "-8080." + domain + ":" + proxyPort(t, d); web.PublicURL != want {
		t.Fatalf("public_url = %q, want %q", web.PublicURL, want)
	}
	hc, conf := caClient(t, caPEM, d.ProxyAddr)
	testkit.Eventually(t, 20*time.Second, "https preview", func() error { return httpsPage(ctx, hc, web.PublicURL, "over builtin tls") })

	status, dom, code, err := addDomain(ctx, d, id, "secure.example.test", 8080)
	if err != nil || status != http.StatusCreated || !strings.HasPrefix(dom.URL, "https://") {
		t.Fatalf("add domain: %d %s %+v %v", status, code, dom, err)
	}
	testkit.Eventually(t, 20*time.Second, "https custom domain", func() error { return httpsPage(ctx, hc, dom.URL, "over builtin tls") })

	// Hostnames that are not served right now get no certificate: a
	// stranger's name, an unexposed port, a sandbox that does not exist.
	for _, stranger := range []string{"stranger.example.com", id + "-8081." + domain, "sbnosuchsandbox-8080." + domain, ""} {
		if err := handshake(d.ProxyAddr, stranger, conf); err == nil {
			t.Fatalf("TLS handshake for unserved %q succeeded", stranger)
		}
	}

	// Node's fetch, trusting the CA through NODE_EXTRA_CA_CERTS.
	nodeFetch(t, ctx, web.PublicURL, domain, caPath, "over builtin tls")

	// A plain-HTTP request to the TLS listener is not served.
	if resp, err := http.Get("http://" + d.ProxyAddr + "/"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Fatalf("plain HTTP on the TLS listener answered 200")
		}
	}

	// The CA survives a restart: same certificate, and the preview is
	// served with a leaf it signed.
	d.Stop()
	d.Restart(nil)
	again, err := os.ReadFile(caPath)
	if err != nil || !bytes.Equal(again, caPEM) {
		t.Fatalf("CA certificate after a restart differs (err %v)", err)
	}
	testkit.Eventually(t, 30*time.Second, "https preview after a restart", func() error { return httpsPage(ctx, hc, web.PublicURL, "over builtin tls") })
	// Deleting the sandbox takes its hostnames' certificates with it.
	if err := c.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	for _, gone := range []string{id + "-8080." + domain, "secure.example.test"} {
		testkit.Eventually(t, 10*time.Second, "no certificate for "+gone, func() error {
			if err := handshake(d.ProxyAddr, gone, conf); err == nil {
				return errString("handshake for a deleted sandbox's " + gone + " succeeded")
			}
			return nil
		})
	}
}

type errString string

func (e errString) Error() string { return string(e) }

// nodeFetch fetches url with Node's fetch, names under domain resolving to
// loopback, the CA at caPath trusted, and wants 200 with page.
func nodeFetch(t *testing.T, ctx context.Context, url, domain, caPath, page string) {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("node not installed")
		}
		t.Logf("node not installed: skipping the Node fetch")
		return
	}
	cmd := exec.CommandContext(ctx, "node", filepath.Join("testdata", "tls-fetch.mjs"))
	cmd.Env = append(os.Environ(), "FETCH_URL="+url, "RESOLVE_DOMAIN="+domain, "RESOLVE_ADDR=127.0.0.1", "NODE_EXTRA_CA_CERTS="+caPath)
	out, err := cmd.Output()
	var res struct {
		Status      int
		Body, Error string
		Cause       string
	}
	if jerr := json.Unmarshal(bytes.TrimSpace(out), &res); err != nil || jerr != nil || res.Status != http.StatusOK || res.Body != page {
		t.Fatalf("node fetch %s: %v %s: %+v, want 200 %q", url, err, out, res, page)
	}
}

// TestTLSFlagsRefused: flag combinations that cannot work stop `serve`
// before it opens anything, with an error that names the flags.
func TestTLSFlagsRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	certPath, keyPath := filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem")
	if err := os.WriteFile(certPath, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyPath, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--tls", "yes"}, `invalid --tls "yes"`},
		{[]string{"--tls", "internal", "--router", "caddy"}, "with --router caddy use --preview-tls"},
		{[]string{"--tls", "internal", "--tls-cert", certPath}, "--tls-cert and --tls-key go together"},
		{[]string{"--tls-cert", certPath, "--tls-key", keyPath}, "--tls-cert/--tls-key need --tls internal or --tls auto"},
		{[]string{"--tls", "auto"}, "--tls auto needs a public --domain"},
		{[]string{"--tls", "auto", "--domain", "dev.localhost"}, "--tls auto needs a public --domain"},
		{[]string{"--tls", "internal", "--acme-email", "ops@example.com"}, "--acme-ca and --acme-email need --tls auto"},
		{[]string{"--acme-ca", "https://127.0.0.1:1/dir"}, "--acme-ca and --acme-email need --tls auto"},
		{[]string{"--tls", "internal", "--tls-cert", certPath, "--tls-key", keyPath}, "--tls-cert/--tls-key: "},
		{[]string{"--tls", "internal", "--cluster", "--cluster-key-file", keyPath}, "not supported with --cluster"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			args := append([]string{"serve", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--proxy-listen", "127.0.0.1:0"}, tc.args...)
			out, err := exec.CommandContext(ctx, sandpitBin, args...).CombinedOutput()
			if err == nil || ctx.Err() != nil || !strings.Contains(string(out), tc.want) {
				t.Fatalf("serve %v: %v\n%s\nwant a refusal naming %q", tc.args, err, out, tc.want)
			}
		})
	}
}

// TestBuiltinTLSE2BDomain: with --tls internal and --domain, the official
// E2B SDK configured by E2B_DOMAIN and E2B_API_KEY alone (no debug
// variables) creates and lists sandboxes through https://api.<domain>, runs
// a command and writes and reads a file through the agent at
// https://49983-<id>.<domain>, and fetches https:// + getHost(8000) from a
// server in the sandbox; a sandbox with allowPublicTraffic false answers
// that URL 403 without its traffic token and 200 with it. The proxy
// listener is on a free loopback port, which the create answer's domain
// carries, so E2B_DOMAIN is "<domain>:<port>".
func TestBuiltinTLSE2BDomain(t *testing.T) {
	t.Parallel()
	const domain = "sandpit.test"
	d := harness.Start(t, sandpitBin, harness.Options{Args: []string{"--tls", "internal", "--domain", domain}})
	ctx := ctxFor(t, 4*time.Minute)
	dir := harness.SDKDir(t, "e2b", "e2b")
	e2bDomain := domain + ":" + proxyPort(t, d)
	var res struct {
		SandboxID, SandboxDomain, Stdout, File, Host string
		ExitCode                                     int
		Listed                                       bool
		Public, PrivateWith, PrivateWithout          struct {
			Status      int
			Body, Error string
		}
		Resolved []string
	}
	harness.RunSDK(t, ctx, dir, "domain-sdk.mjs", []string{
		"E2B_DOMAIN=" + e2bDomain, "E2B_API_KEY=" + d.Token, "NODE_EXTRA_CA_CERTS=" + filepath.Join(d.DataDir, "tls", "ca.crt"),
	}, &res)
	t.Logf("SDK run: %+v", res)
	if res.ExitCode != 0 || !strings.HasPrefix(res.Stdout, "hello from ") || res.File != "written over https" || !res.Listed {
		t.Fatalf("SDK run = %+v, want the command, the file and the list to work", res)
	}
	if res.SandboxDomain != e2bDomain || res.Host != "8000-"+res.SandboxID+"."+e2bDomain {
		t.Fatalf("sandbox domain %q, host %q", res.SandboxDomain, res.Host)
	}
	if res.Public.Status != http.StatusOK || res.Public.Body != "public page" {
		t.Fatalf("https getHost(8000) = %+v, want 200 'public page'", res.Public)
	}
	if res.PrivateWith.Status != http.StatusOK || res.PrivateWith.Body != "private page" || res.PrivateWithout.Status != http.StatusForbidden {
		t.Fatalf("private sandbox: with token %+v, without %+v; want 200 and 403", res.PrivateWith, res.PrivateWithout)
	}
	for _, want := range []string{"api." + domain, "49983-" + res.SandboxID + "." + domain} {
		if !contains(res.Resolved, want) {
			t.Fatalf("the SDK never resolved %s (resolved %v): it did not use E2B_DOMAIN", want, res.Resolved)
		}
	}
}

// TestBuiltinTLSDaytonaDomain: with --tls internal and --domain, the
// official Daytona SDK pointed at https://api.<domain>/daytona creates a
// sandbox and runs a command in it through the proxy's TLS listener, and
// the URL getPreviewLink returns answers over https from Node.
func TestBuiltinTLSDaytonaDomain(t *testing.T) {
	t.Parallel()
	const domain = "sandpit.test"
	d := harness.Start(t, sandpitBin, harness.Options{Args: []string{"--tls", "internal", "--domain", domain}})
	ctx := ctxFor(t, 4*time.Minute)
	dir := harness.SDKDir(t, "daytona", "@daytonaio/sdk")
	var res struct {
		Result, URL string
		Preview     struct {
			Status      int
			Body, Error string
		}
		Resolved  []string
		SignedURL string
		Signed    struct {
			Status      int
			Body, Error string
		}
	}
	harness.RunSDK(t, ctx, dir, "domain-sdk.mjs", []string{
		"DAYTONA_API_URL=https://api." + domain + ":" + proxyPort(t, d) + "/daytona", "DAYTONA_API_KEY=" + d.Token,
		"RESOLVE_DOMAIN=" + domain, "NODE_EXTRA_CA_CERTS=" + filepath.Join(d.DataDir, "tls", "ca.crt"),
	}, &res)
	t.Logf("SDK run: %+v", res)
	if !strings.Contains(res.Result, "started") {
		t.Fatalf("command through https://api.%s: %+v", domain, res)
	}
	if !strings.HasPrefix(res.URL, "https://") || res.Preview.Status != http.StatusOK || res.Preview.Body != "preview-over-https" {
		t.Fatalf("getPreviewLink %q fetched over https: %+v, want 200 preview-over-https", res.URL, res.Preview)
	}
	if !contains(res.Resolved, "api."+domain) {
		t.Fatalf("the SDK never resolved api.%s (resolved %v)", domain, res.Resolved)
	}
	if !strings.HasPrefix(res.SignedURL, "https://") || res.Signed.Status != http.StatusOK || res.Signed.Body != "preview-over-https" {
		t.Fatalf("getSignedPreviewUrl %q fetched over https: %+v, want 200 preview-over-https", res.SignedURL, res.Signed)
	}
}
