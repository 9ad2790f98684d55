package sandpit_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/testenv/testkit"
	"github.com/sandpit-dev/sandpit/test/harness"
)

// tlsClient trusts Caddy's internal CA and dials every name to the proxy
// address, as a wildcard DNS record for the test domain would.
func tlsClient(t *testing.T, cd *harness.Caddy, proxyAddr string) (*http.Client, *tls.Config) {
	t.Helper()
	var pem []byte
	testkit.Eventually(t, 10*time.Second, "caddy's internal root CA", func() error {
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
			// Caddy 2.6 knows only on_demand.ask; newer Caddy the
			// permission module, which sandpit prefers.
			wantForm := map[harness.CaddyFlavor]string{harness.CaddyDebian: "form=ask", harness.CaddyL4: "form=permission"}[rc.caddy]
			if !strings.Contains(d.Logs(), wantForm) {
				t.Fatalf("daemon log does not show on-demand TLS configured with %s", wantForm)
			}

			web := mustExpose(t, ctx, d, id, 8080, "http", http.StatusCreated)
			if want := "https://" + id + "-8080." + domain + ":" + proxyPort(t, d); web.PublicURL != want {
				t.Fatalf("public_url = %q, want %q", web.PublicURL, want)
			}
			testkit.Eventually(t, 20*time.Second, "https preview", func() error { return httpsPage(ctx, hc, web.PublicURL, "over tls") })

			status, dom, code, err := addDomain(ctx, d, id, "secure.example.test", 8080)
			if err != nil || status != http.StatusCreated || !strings.HasPrefix(dom.URL, "https://") {
				t.Fatalf("add domain: %d %s %+v %v", status, code, dom, err)
			}
			testkit.Eventually(t, 20*time.Second, "https custom domain", func() error { return httpsPage(ctx, hc, dom.URL, "over tls") })

			// Hostnames that are not bound right now get no certificate.
			for _, stranger := range []string{"stranger.example.com", id + "-8081." + domain, "sbnosuchsandbox-8080." + domain} {
				if err := handshake(d.ProxyAddr, stranger, conf); err == nil {
					t.Fatalf("TLS handshake for unbound %s succeeded", stranger)
				}
			}

			// The official SDK through Caddy over HTTPS.
			dir := harness.SDKDir(t, "e2b", "e2b")
			var res struct {
				SandboxID, SandboxDomain, Stdout string
				ExitCode                         int
				Resolved                         []string
				// The code interpreter SDK's run, when its image is built.
				Code, CodeHost string
				NoToken        int
			}
			// The code interpreter SDK too, when its template is there
			// (scripts/test.sh builds it before the Go tests).
			withCode := exec.Command("docker", "image", "inspect", "sandpit/code-interpreter:latest").Run() == nil
			env := []string{
				"E2B_DOMAIN=" + domain, "E2B_API_URL=" + d.URL() + "/e2b", "E2B_API_KEY=" + d.Token, "NODE_EXTRA_CA_CERTS=" + cd.RootCA(),
			}
			if withCode {
				env = append(env, "SANDPIT_TLS_CODE=1")
			} else if os.Getenv("CI") == "true" {
				t.Fatal("sandpit/code-interpreter:latest is not built (scripts/test.sh builds it)")
			}
			harness.RunSDK(t, ctx, dir, "tls-sdk.mjs", env, &res)
			wantHost := "49983-" + res.SandboxID + "." + domain
			if res.ExitCode != 0 || !strings.HasPrefix(res.Stdout, "hello from ") || res.SandboxDomain != domain+":"+proxyPort(t, d) || !contains(res.Resolved, wantHost) {
				t.Fatalf("SDK run = %+v, want exit 0, stdout 'hello from ...', and the SDK resolving %s", res, wantHost)
			}
			if withCode && (res.Code != "42" || !strings.HasPrefix(res.CodeHost, "49999-") || !contains(res.Resolved, strings.Split(res.CodeHost, ":")[0]) || res.NoToken != http.StatusUnauthorized) {
				t.Fatalf("code interpreter over https = %+v, want result 42 through %s and 401 without the access token", res, "49999-<id>."+domain)
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

// TestCaddyDown stops Caddy under a running daemon: every new exposure and
// custom domain answers 502 and leaves nothing behind (no row, no host port:
// the pool holds one port, which the exposure after Caddy's return gets).
func TestCaddyDown(t *testing.T) {
	t.Parallel()
	d, cd := startRouted(t, routerCases[2], harness.Options{PortRange: harness.FreeRange(t, 1)})
	c := d.Client()
	ctx := ctxFor(t, 3*time.Minute)
	id := newSandbox(t, ctx, c)
	startHTTPD(t, ctx, c, id, 8080, "after the outage")
	startEcho(t, ctx, c, id, 9000)
	lo, _ := poolBounds(t, d.PortRange)

	cd.Stop()
	for _, tc := range []struct {
		port     int
		protocol string
	}{{8080, "http"}, {9000, "tcp"}} {
		r, err := expose(ctx, d, id, tc.port, tc.protocol)
		if err != nil || r.status != http.StatusBadGateway {
			t.Fatalf("%s expose with Caddy down: %+v %v, want 502", tc.protocol, r, err)
		}
	}
	// The exposure failed, so a domain has no port to target: refused
	// before the router is asked.
	if status, _, code, err := addDomain(ctx, d, id, "down.example.test", 8080); err != nil || status != http.StatusBadRequest {
		t.Fatalf("domain with Caddy down: %d %s %v, want 400", status, code, err)
	}
	if ps, err := c.ListPorts(ctx, id); err != nil || len(ps) != 0 {
		t.Fatalf("ports after failed exposures: %+v %v, want none", ps, err)
	}
	if ds, err := c.ListDomains(ctx, id); err != nil || len(ds) != 0 {
		t.Fatalf("domains after a failed add: %+v %v, want none", ds, err)
	}
	if conn, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(lo), time.Second); err == nil {
		conn.Close()
		t.Fatalf("the pool's host port %d accepts connections after a failed exposure", lo)
	}

	cd.Start() // empty, as a restarted Caddy is
	echo := mustExpose(t, ctx, d, id, 9000, "tcp", http.StatusCreated)
	if echo.HostPort != lo {
		t.Fatalf("exposure after the outage got host port %d, want the pool's only port %d", echo.HostPort, lo)
	}
	testkit.Eventually(t, 10*time.Second, "tcp echo after the outage", func() error { return echoes(tcpAddr(t, echo.PublicURL), "back") })
	web := mustExpose(t, ctx, d, id, 8080, "http", http.StatusCreated)
	testkit.Eventually(t, 10*time.Second, "preview after the outage", func() error { return servesPage(ctx, d, web.PublicURL, "after the outage") })
}

// faultyAdmin stands between the daemon and Caddy's admin API and fails the
// first config write that names match, after holding it until release is
// closed: Caddy refusing one request and accepting the next is a fault the
// real Caddy cannot be made to produce on cue.
type faultyAdmin struct {
	match   atomic.Pointer[string]
	held    chan struct{}
	release chan struct{}
	once    sync.Once
}

func newFaultyAdmin(t *testing.T, target string) (*faultyAdmin, string) {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	f := &faultyAdmin{held: make(chan struct{}), release: make(chan struct{})}
	// Caddy checks the Host of admin requests, so the proxy sends Caddy's.
	rp := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(u) }}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m := f.match.Load()
		if m != nil && r.Method != http.MethodGet {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(strings.NewReader(string(body)))
			if strings.Contains(string(body), *m) || strings.Contains(r.URL.Path, *m) {
				fail := false
				f.once.Do(func() { fail = true })
				if fail {
					close(f.held)
					<-f.release
					http.Error(w, `{"error":"injected fault"}`, http.StatusInternalServerError)
					return
				}
			}
		}
		rp.ServeHTTP(w, r)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	return f, "http://" + ln.Addr().String()
}

// TestCaddyRetryKeepsRowOnRollback is the rollback rule across the process
// boundary: the first exposure inserts the row and its install is held, then
// refused by Caddy; a concurrent retry installs the route successfully. The
// first caller answers 502, but its rollback must not delete the row the
// retry answered success for: the exposure survives and serves.
func TestCaddyRetryKeepsRowOnRollback(t *testing.T) {
	t.Parallel()
	cd := harness.StartCaddy(t, harness.CaddyDebian)
	fault, adminURL := newFaultyAdmin(t, cd.AdminURL())
	d := harness.Start(t, sandpitBin, harness.Options{Args: []string{"--router", "caddy", "--caddy-admin", adminURL}})
	c := d.Client()
	ctx := ctxFor(t, 3*time.Minute)
	id := newSandbox(t, ctx, c)
	startHTTPD(t, ctx, c, id, 8080, "kept")
	objID := "sandpit_http_" + id + "_8080"
	fault.match.Store(&objID)

	first := make(chan exposeResp, 1)
	go func() {
		r, err := expose(ctx, d, id, 8080, "http")
		if err != nil {
			t.Error(err)
		}
		first <- r
	}()
	select {
	case <-fault.held:
	case <-ctx.Done():
		t.Fatal("the first exposure's install never reached Caddy")
	}
	retry := make(chan exposeResp, 1)
	go func() {
		r, err := expose(ctx, d, id, 8080, "http")
		if err != nil {
			t.Error(err)
		}
		retry <- r
	}()
	// Let the retry reach the daemon (it finds the row and waits for the
	// router) before Caddy refuses the first install. Should it arrive
	// later, after the rollback, it makes the exposure anew: either way the
	// retry's answer must be true afterwards.
	time.Sleep(300 * time.Millisecond)
	close(fault.release)
	a, b := <-first, <-retry
	if a.status != http.StatusBadGateway {
		t.Fatalf("first exposure: %+v, want 502 from the refused install", a)
	}
	if b.status != http.StatusOK && b.status != http.StatusCreated {
		t.Fatalf("retry: %+v, want success", b)
	}
	t.Logf("retry answered %d (reused %v)", b.status, b.port.Reused)
	ps, err := c.ListPorts(ctx, id)
	if err != nil || len(ps) != 1 || ps[0].Port != 8080 {
		t.Fatalf("ports after the rollback: %+v %v, want the retry's exposure", ps, err)
	}
	if n := caddyObjects(t, cd, objID); n != 1 {
		t.Fatalf("%d routes %s in Caddy, want 1", n, objID)
	}
	testkit.Eventually(t, 10*time.Second, "the retry's exposure serves", func() error { return servesPage(ctx, d, b.port.PublicURL, "kept") })
}

// TestCaddyReconcile restarts Caddy with an empty config: every route (the
// preview, the custom domain, the layer4 TCP forward) is back within 5 s and
// a server added by hand meanwhile is left alone. Then the daemon restarts
// with a stale route of its own in Caddy and a route added by hand in its
// server: the stale one goes, the hand-made one stays.
func TestCaddyReconcile(t *testing.T) {
	t.Parallel()
	d, cd := startRouted(t, routerCases[2], harness.Options{})
	c := d.Client()
	ctx := ctxFor(t, 3*time.Minute)
	id := newSandbox(t, ctx, c)
	startHTTPD(t, ctx, c, id, 8080, "reconciled")
	startEcho(t, ctx, c, id, 9000)
	web := mustExpose(t, ctx, d, id, 8080, "http", http.StatusCreated)
	echo := mustExpose(t, ctx, d, id, 9000, "tcp", http.StatusCreated)
	status, dom, code, err := addDomain(ctx, d, id, "reconciled.example.test", 8080)
	if err != nil || status != http.StatusCreated {
		t.Fatalf("add domain: %d %s %v", status, code, err)
	}
	serving := func(budget time.Duration, when string) {
		t.Helper()
		testkit.Eventually(t, budget, when+": preview", func() error { return servesPage(ctx, d, web.PublicURL, "reconciled") })
		testkit.Eventually(t, budget, when+": domain", func() error { return servesPage(ctx, d, dom.URL, "reconciled") })
		testkit.Eventually(t, budget, when+": tcp", func() error { return echoes(tcpAddr(t, echo.PublicURL), "again") })
	}
	serving(10*time.Second, "before")

	handAddr := "127.0.0.1:" + strconv.Itoa(testkit.FreePort(t))
	handServer := map[string]any{
		"listen":          []any{handAddr},
		"automatic_https": map[string]any{"disable": true},
		"routes":          []any{map[string]any{"handle": []any{map[string]any{"handler": "static_response", "body": "by hand"}}}},
	}
	cd.Stop()
	cd.Start()
	restarted := time.Now()
	// An operator's server, added while sandpit has not reconciled yet.
	if _, err := cd.Admin(http.MethodPost, "/config/apps/http/servers/hand", handServer, nil); err != nil {
		if _, err := cd.Admin(http.MethodPost, "/config/apps", map[string]any{"http": map[string]any{"servers": map[string]any{"hand": handServer}}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	serving(5*time.Second, "after Caddy restarted empty")
	t.Logf("routes back %s after Caddy restarted empty", time.Since(restarted).Round(time.Millisecond))
	handPage := func() error {
		status, body, err := proxyGet(ctx, &harness.Daemon{ProxyAddr: handAddr}, "http://anything.test/")
		if err != nil || status != http.StatusOK || body != "by hand" {
			return fmt.Errorf("hand-made server: %d %q %v", status, body, err)
		}
		return nil
	}
	testkit.Eventually(t, 5*time.Second, "the hand-made server", handPage)

	// A route by hand inside sandpit's server, and a stale route of
	// sandpit's own that no row backs.
	handRoute := map[string]any{
		"@id":      "hand-made",
		"match":    []any{map[string]any{"host": []any{"hand.example.test"}}},
		"handle":   []any{map[string]any{"handler": "static_response", "body": "by hand"}},
		"terminal": true,
	}
	ghost := map[string]any{
		"@id":      "sandpit_http_sbghost_1234",
		"match":    []any{map[string]any{"host": []any{"sbghost-1234.localhost"}}},
		"handle":   []any{map[string]any{"handler": "static_response", "body": "ghost"}},
		"terminal": true,
	}
	for _, r := range []any{handRoute, ghost} {
		if _, err := cd.Admin(http.MethodPut, "/config/apps/http/servers/sandpit/routes/0", r, nil); err != nil {
			t.Fatal(err)
		}
	}
	d.Stop()
	d.Restart(nil)
	serving(10*time.Second, "after the daemon restarted")
	if n := caddyObjects(t, cd, "sandpit_http_sbghost_1234"); n != 0 {
		t.Fatal("the stale route of sandpit's own survived the start reconcile")
	}
	if n := caddyObjects(t, cd, "hand-made"); n != 1 {
		t.Fatal("the start reconcile removed a route added by hand")
	}
	if err := servesPage(ctx, d, "http://hand.example.test", "by hand"); err != nil {
		t.Fatal(err)
	}
	if err := handPage(); err != nil {
		t.Fatal(err)
	}
}
