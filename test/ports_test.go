package sandpit_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/internal/testenv/testkit"
	"github.com/sandpit-dev/sandpit/test/harness"
)

// exposeResp is one answer of POST /v1/sandboxes/{id}/ports: the status, the
// exposure on success and the error code otherwise.
type exposeResp struct {
	status int
	port   client.Port
	code   string
	msg    string
}

// postJSON sends one authenticated request without the client's retries, so
// the test sees every status the daemon answers, and decodes a success into
// out and an error into code and message.
func postJSON(ctx context.Context, d *harness.Daemon, method, path, body string, out any) (status int, code, msg string, err error) {
	req, err := http.NewRequestWithContext(ctx, method, d.URL()+path, strings.NewReader(body))
	if err != nil {
		return 0, "", "", err
	}
	req.Header.Set("Authorization", "Bearer "+d.Token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, "", "", err
	}
	if resp.StatusCode >= 300 {
		var e struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		_ = json.Unmarshal(b, &e)
		return resp.StatusCode, e.Error.Code, e.Error.Message, nil
	}
	if out != nil && len(b) > 0 {
		if err := json.Unmarshal(b, out); err != nil {
			return resp.StatusCode, "", "", fmt.Errorf("decode %s: %w", b, err)
		}
	}
	return resp.StatusCode, "", "", nil
}

func expose(ctx context.Context, d *harness.Daemon, id string, port int, protocol string) (exposeResp, error) {
	var r exposeResp
	body := fmt.Sprintf(`{"port":%d,"protocol":%q}`, port, protocol)
	var err error
	r.status, r.code, r.msg, err = postJSON(ctx, d, http.MethodPost, "/v1/sandboxes/"+id+"/ports", body, &r.port)
	return r, err
}

func mustExpose(t *testing.T, ctx context.Context, d *harness.Daemon, id string, port int, protocol string, wantStatus int) client.Port {
	t.Helper()
	r, err := expose(ctx, d, id, port, protocol)
	if err != nil {
		t.Fatal(err)
	}
	if r.status != wantStatus {
		t.Fatalf("expose %s %d: status %d (%s: %s), want %d", protocol, port, r.status, r.code, r.msg, wantStatus)
	}
	return r.port
}

func addDomain(ctx context.Context, d *harness.Daemon, id, hostname string, port int) (status int, dom client.Domain, code string, err error) {
	body := fmt.Sprintf(`{"hostname":%q,"port":%d}`, hostname, port)
	status, code, _, err = postJSON(ctx, d, http.MethodPost, "/v1/sandboxes/"+id+"/custom-domains", body, &dom)
	return status, dom, code, err
}

// newSandbox creates a running sandbox and returns its id.
func newSandbox(t *testing.T, ctx context.Context, c *client.Client) string {
	t.Helper()
	sb, err := c.Create(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return sb.ID
}

// sh runs a shell command in a sandbox and fails the test unless it exits 0.
func sh(t *testing.T, ctx context.Context, c *client.Client, id, script string) {
	t.Helper()
	res, err := c.Exec(ctx, id, client.ExecRequest{Cmd: "sh", Args: []string{"-c", script}, TimeoutS: 30})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("%q in %s: %v exit %d stderr %q", script, id, err, res.ExitCode, res.Stderr)
	}
}

// startHTTPD serves page on port from busybox httpd, which daemonizes, so
// the exec returns while the server keeps running.
func startHTTPD(t *testing.T, ctx context.Context, c *client.Client, id string, port int, page string) {
	t.Helper()
	sh(t, ctx, c, id, fmt.Sprintf("mkdir -p /tmp/www && printf '%%s' %q > /tmp/www/index.html && httpd -p %d -h /tmp/www", page, port))
}

// startEcho runs a persistent TCP echo server on port: busybox nc with -ll
// keeps listening after each connection and -e cat echoes what it reads.
func startEcho(t *testing.T, ctx context.Context, c *client.Client, id string, port int) {
	t.Helper()
	sh(t, ctx, c, id, fmt.Sprintf("nc -ll -p %d -e cat </dev/null >/dev/null 2>&1 &", port))
}

// proxyGet fetches a public URL through the daemon's proxy. *.localhost does
// not resolve on every machine (this one's resolver asks DNS for it), so the
// request goes to the proxy address with the URL's host as its Host header,
// which is exactly what a resolving client would send.
func proxyGet(ctx context.Context, d *harness.Daemon, rawURL string) (int, string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return 0, "", err
	}
	target := *u
	target.Host = d.ProxyAddr
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target.String(), nil)
	if err != nil {
		return 0, "", err
	}
	req.Host = u.Host
	resp, err := noKeepAlive.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// noKeepAlive makes every proxy request a fresh connection, so a test that
// removes a route sees the proxy's answer and not a reused upstream.
var noKeepAlive = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}

// servesPage checks that rawURL answers 200 with page through the proxy.
func servesPage(ctx context.Context, d *harness.Daemon, rawURL, page string) error {
	status, body, err := proxyGet(ctx, d, rawURL)
	if err != nil {
		return err
	}
	if status != http.StatusOK || body != page {
		return fmt.Errorf("GET %s: %d %q, want 200 %q", rawURL, status, body, page)
	}
	return nil
}

// echoes sends msg to addr and checks the same bytes come back.
func echoes(addr, msg string) error {
	conn, err := net.DialTimeout("tcp", addr, 3*time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(conn, msg+"\n"); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return fmt.Errorf("read echo from %s: %w", addr, err)
	}
	if line != msg+"\n" {
		return fmt.Errorf("echo from %s = %q, want %q", addr, line, msg+"\n")
	}
	return nil
}

// tcpAddr turns "tcp://host:port" into "host:port".
func tcpAddr(t *testing.T, publicURL string) string {
	t.Helper()
	addr, ok := strings.CutPrefix(publicURL, "tcp://")
	if !ok {
		t.Fatalf("public_url %q is not a tcp:// URL", publicURL)
	}
	return addr
}

func proxyPort(t *testing.T, d *harness.Daemon) string {
	t.Helper()
	_, port, err := net.SplitHostPort(d.ProxyAddr)
	if err != nil {
		t.Fatal(err)
	}
	return port
}

func poolBounds(t *testing.T, r string) (lo, hi int) {
	t.Helper()
	a, b, _ := strings.Cut(r, "-")
	lo, err1 := strconv.Atoi(a)
	hi, err2 := strconv.Atoi(b)
	if err1 != nil || err2 != nil {
		t.Fatalf("bad range %q", r)
	}
	return lo, hi
}

// TestExposeHTTPPreview serves a page from busybox httpd and reads it back
// through the preview URL, in both host forms the proxy routes.
func TestExposeHTTPPreview(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	c := d.Client()
	ctx := ctxFor(t, 2*time.Minute)
	id := newSandbox(t, ctx, c)
	startHTTPD(t, ctx, c, id, 8080, "hello from the sandbox")

	p := mustExpose(t, ctx, d, id, 8080, "http", http.StatusCreated)
	wantURL := "http://" + id + "-8080.localhost:" + proxyPort(t, d)
	if p.PublicURL != wantURL || p.HostPort != 0 || p.Protocol != "http" || p.Reused {
		t.Fatalf("exposure = %+v, want public_url %s, host_port 0, reused false", p, wantURL)
	}
	testkit.Eventually(t, 10*time.Second, "preview URL", func() error { return servesPage(ctx, d, p.PublicURL, "hello from the sandbox") })
	// E2B clients build <port>-<id>.<domain>; the proxy routes that form too.
	alt := "http://8080-" + id + ".localhost:" + proxyPort(t, d)
	if err := servesPage(ctx, d, alt, "hello from the sandbox"); err != nil {
		t.Fatal(err)
	}

	if err := c.UnexposePort(ctx, id, 8080); err != nil {
		t.Fatal(err)
	}
	if status, _, err := proxyGet(ctx, d, p.PublicURL); err != nil || status != http.StatusNotFound {
		t.Fatalf("preview after unexpose: %d %v, want 404", status, err)
	}
	if ports, err := c.ListPorts(ctx, id); err != nil || len(ports) != 0 {
		t.Fatalf("ports after unexpose = %v %v", ports, err)
	}
}

// TestExposeDomainAndPublicHostFlags runs a daemon with --domain and
// --public-host: preview URLs are built on (and routed by) that domain,
// whatever its case on the command line, and tcp:// URLs name the public
// host while the forward listens where the proxy does.
func TestExposeDomainAndPublicHostFlags(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{Args: []string{"--domain", "Preview.Sandpit.TEST", "--public-host", "sandbox-host.example"}})
	c := d.Client()
	ctx := ctxFor(t, 2*time.Minute)
	id := newSandbox(t, ctx, c)
	startHTTPD(t, ctx, c, id, 8080, "on my domain")
	startEcho(t, ctx, c, id, 9000)

	web := mustExpose(t, ctx, d, id, 8080, "http", http.StatusCreated)
	if want := "http://" + id + "-8080.preview.sandpit.test:" + proxyPort(t, d); web.PublicURL != want {
		t.Fatalf("public_url = %q, want %q", web.PublicURL, want)
	}
	testkit.Eventually(t, 10*time.Second, "preview on the configured domain", func() error { return servesPage(ctx, d, web.PublicURL, "on my domain") })

	echo := mustExpose(t, ctx, d, id, 9000, "tcp", http.StatusCreated)
	if want := "tcp://sandbox-host.example:" + strconv.Itoa(echo.HostPort); echo.PublicURL != want {
		t.Fatalf("public_url = %q, want %q", echo.PublicURL, want)
	}
	testkit.Eventually(t, 10*time.Second, "tcp on the proxy's interface", func() error { return echoes("127.0.0.1:"+strconv.Itoa(echo.HostPort), "hi") })

	if status, _, code, err := addDomain(ctx, d, id, "x.preview.sandpit.test", 8080); err != nil || status != http.StatusBadRequest {
		t.Fatalf("hostname under the configured preview domain: %d %s %v, want 400", status, code, err)
	}
}

// TestExposeTCPEcho forwards a host port from the pool to a TCP echo server
// in the sandbox.
func TestExposeTCPEcho(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	c := d.Client()
	ctx := ctxFor(t, 2*time.Minute)
	id := newSandbox(t, ctx, c)
	startEcho(t, ctx, c, id, 9000)

	p := mustExpose(t, ctx, d, id, 9000, "tcp", http.StatusCreated)
	lo, hi := poolBounds(t, d.PortRange)
	if p.HostPort < lo || p.HostPort > hi || p.Protocol != "tcp" || p.Reused {
		t.Fatalf("exposure = %+v, want a host port in %s", p, d.PortRange)
	}
	if want := "tcp://127.0.0.1:" + strconv.Itoa(p.HostPort); p.PublicURL != want {
		t.Fatalf("public_url = %q, want %q", p.PublicURL, want)
	}
	addr := tcpAddr(t, p.PublicURL)
	testkit.Eventually(t, 10*time.Second, "tcp echo", func() error { return echoes(addr, "ping") })
	// Several connections, each with its own bytes. They go one after
	// another: busybox nc, forking a cat per connection with a listen
	// backlog of one, drops some of many simultaneous connections even when
	// reached directly, so parallel ones would test nc rather than Sandpit.
	for i := range 10 {
		if err := echoes(addr, "conn-"+strconv.Itoa(i)+"-"+strings.Repeat("x", 4096)); err != nil {
			t.Fatal(err)
		}
	}

	if err := c.UnexposePort(ctx, id, 9000); err != nil {
		t.Fatal(err)
	}
	if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		conn.Close()
		t.Fatalf("host port %d still accepts after unexpose", p.HostPort)
	}
}

// TestExposeRetriesConsumeOneHostPort repeats one exposure 100 times in a row
// and 32 times at once. Every answer carries the same URL and host port, only
// the first is new (201, reused false), and the pool proves that one host
// port was consumed: with a pool of two, one more exposure fits and the next
// does not.
func TestExposeRetriesConsumeOneHostPort(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{PortRange: harness.FreeRange(t, 2)})
	c := d.Client()
	ctx := ctxFor(t, 2*time.Minute)
	id := newSandbox(t, ctx, c)
	startEcho(t, ctx, c, id, 9000)

	cases := []struct {
		name     string
		port     int
		protocol string
	}{
		{"tcp", 9000, "tcp"},
		{"http", 8080, "http"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			exposeRepeatedly(t, ctx, d, id, tc.port, tc.protocol, 100, 32)
			ports, err := c.ListPorts(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, p := range ports {
				if p.Port == tc.port {
					n++
				}
			}
			if n != 1 {
				t.Fatalf("%d exposures of port %d listed, want 1: %+v", n, tc.port, ports)
			}
		})
	}
	// The retried tcp exposure holds one of the pool's two ports (the http
	// one holds none): one more tcp exposure fits, a second does not.
	mustExpose(t, ctx, d, id, 9001, "tcp", http.StatusCreated)
	if r, err := expose(ctx, d, id, 9002, "tcp"); err != nil || r.status != http.StatusServiceUnavailable || r.code != "port_pool_exhausted" {
		t.Fatalf("exposure past the pool: %+v %v, want 503 port_pool_exhausted", r, err)
	}
	// And the retried exposure still carries traffic.
	ports, err := c.ListPorts(ctx, id)
	if err != nil || len(ports) != 3 {
		t.Fatalf("ports = %+v %v, want 3", ports, err)
	}
	for _, p := range ports {
		if p.Port == 9000 {
			testkit.Eventually(t, 10*time.Second, "tcp echo", func() error { return echoes(tcpAddr(t, p.PublicURL), "still here") })
		}
	}
}

// TestPortPoolExhaustion fills a pool of N host ports, sees the next
// exposure refused with 503 while retries of the existing ones still
// succeed, and frees one port with an unexpose.
func TestPortPoolExhaustion(t *testing.T) {
	t.Parallel()
	const n = 4
	d := harness.Start(t, sandpitBin, harness.Options{PortRange: harness.FreeRange(t, n)})
	c := d.Client()
	ctx := ctxFor(t, 2*time.Minute)
	id := newSandbox(t, ctx, c)
	lo, hi := poolBounds(t, d.PortRange)

	held := map[int]int{} // sandbox port -> host port
	used := map[int]bool{}
	for i := range n {
		p := mustExpose(t, ctx, d, id, 9000+i, "tcp", http.StatusCreated)
		if p.HostPort < lo || p.HostPort > hi || used[p.HostPort] {
			t.Fatalf("exposure %d got host port %d: outside %s or already used (%v)", i, p.HostPort, d.PortRange, used)
		}
		used[p.HostPort] = true
		held[9000+i] = p.HostPort
	}
	r, err := expose(ctx, d, id, 9100, "tcp")
	if err != nil || r.status != http.StatusServiceUnavailable || r.code != "port_pool_exhausted" {
		t.Fatalf("exposure %d of a pool of %d: %+v %v, want 503 port_pool_exhausted", n+1, n, r, err)
	}
	// The Go client does not retry a full pool: no retry can cure it.
	if _, err := c.ExposePort(ctx, id, 9100, "tcp"); !client.IsCode(err, "port_pool_exhausted") {
		t.Fatalf("client expose into a full pool: %v", err)
	}
	// Retries of every existing exposure succeed while the pool is full.
	for port, hp := range held {
		p := mustExpose(t, ctx, d, id, port, "tcp", http.StatusOK)
		if p.HostPort != hp || !p.Reused {
			t.Fatalf("retry of %d while full = %+v, want host port %d reused", port, p, hp)
		}
	}
	// HTTP exposures take no host port, so a full pool does not stop them.
	mustExpose(t, ctx, d, id, 8080, "http", http.StatusCreated)

	if err := c.UnexposePort(ctx, id, 9001); err != nil {
		t.Fatal(err)
	}
	p := mustExpose(t, ctx, d, id, 9100, "tcp", http.StatusCreated)
	if p.HostPort != held[9001] {
		t.Fatalf("after unexposing the port on %d the next exposure got %d", held[9001], p.HostPort)
	}
	if r, err := expose(ctx, d, id, 9101, "tcp"); err != nil || r.status != http.StatusServiceUnavailable {
		t.Fatalf("exposure into the full pool again: %+v %v, want 503", r, err)
	}
	ports, err := c.ListPorts(ctx, id)
	if err != nil || len(ports) != n+1 {
		t.Fatalf("ports = %+v %v, want %d tcp and 1 http", ports, err, n)
	}
}

// TestCustomDomainRace has two sandboxes claim the same hostnames at the
// same moment: one wins each (201), the other gets 409 hostname_conflict,
// and the hostname serves the winner's page.
func TestCustomDomainRace(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	c := d.Client()
	ctx := ctxFor(t, 2*time.Minute)
	ids := [2]string{newSandbox(t, ctx, c), newSandbox(t, ctx, c)}
	for i, id := range ids {
		startHTTPD(t, ctx, c, id, 8080, "page of sandbox "+strconv.Itoa(i))
		mustExpose(t, ctx, d, id, 8080, "http", http.StatusCreated)
	}

	const rounds = 5
	for round := range rounds {
		host := fmt.Sprintf("app%d.example.test", round)
		var (
			statuses [2]int
			codes    [2]string
			doms     [2]client.Domain
			wg       sync.WaitGroup
		)
		start := make(chan struct{})
		for i, id := range ids {
			wg.Go(func() {
				<-start
				var err error
				statuses[i], doms[i], codes[i], err = addDomain(ctx, d, id, host, 8080)
				if err != nil {
					t.Error(err)
				}
			})
		}
		close(start)
		wg.Wait()
		winner := -1
		for i := range ids {
			if statuses[i] == http.StatusCreated {
				winner = i
			}
		}
		if winner < 0 || statuses[1-winner] != http.StatusConflict || codes[1-winner] != "hostname_conflict" {
			t.Fatalf("round %d: statuses %v codes %v, want one 201 and one 409 hostname_conflict", round, statuses, codes)
		}
		w := doms[winner]
		if w.Hostname != host || w.SandboxID != ids[winner] || w.Port != 8080 {
			t.Fatalf("round %d: record %+v", round, w)
		}
		testkit.Eventually(t, 10*time.Second, "custom domain", func() error {
			return servesPage(ctx, d, w.URL, "page of sandbox "+strconv.Itoa(winner))
		})
		// The winner repeating its call gets the same record with 200,
		// whatever the case of the hostname.
		for _, again := range []string{host, strings.ToUpper(host)} {
			status, dom, code, err := addDomain(ctx, d, ids[winner], again, 8080)
			if err != nil || status != http.StatusOK || dom != w {
				t.Fatalf("repeat %q: %d %s %+v %v, want 200 %+v", again, status, code, dom, err, w)
			}
		}
		ds, err := c.ListDomains(ctx, ids[1-winner])
		if err != nil {
			t.Fatal(err)
		}
		for _, dm := range ds {
			if dm.Hostname == host {
				t.Fatalf("round %d: the loser holds %+v too", round, dm)
			}
		}
		// Released by the winner, the hostname goes to the other sandbox.
		if round == rounds-1 {
			if err := c.RemoveDomain(ctx, ids[winner], host); err != nil {
				t.Fatal(err)
			}
			if status, _, err := proxyGet(ctx, d, w.URL); err != nil || status != http.StatusNotFound {
				t.Fatalf("removed hostname: %d %v, want 404", status, err)
			}
			status, dom, code, err := addDomain(ctx, d, ids[1-winner], host, 8080)
			if err != nil || status != http.StatusCreated {
				t.Fatalf("claim after release: %d %s %v", status, code, err)
			}
			if err := servesPage(ctx, d, dom.URL, "page of sandbox "+strconv.Itoa(1-winner)); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestRoutesSurviveRestart stops and restarts the daemon: the preview URL,
// the TCP host port and the custom domain all serve again, unchanged.
func TestRoutesSurviveRestart(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	c := d.Client()
	ctx := ctxFor(t, 3*time.Minute)
	id := newSandbox(t, ctx, c)
	startHTTPD(t, ctx, c, id, 8080, "survivor")
	startEcho(t, ctx, c, id, 9000)

	web := mustExpose(t, ctx, d, id, 8080, "http", http.StatusCreated)
	echo := mustExpose(t, ctx, d, id, 9000, "tcp", http.StatusCreated)
	status, dom, code, err := addDomain(ctx, d, id, "survivor.example.test", 8080)
	if err != nil || status != http.StatusCreated {
		t.Fatalf("add domain: %d %s %v", status, code, err)
	}
	check := func(when string) {
		t.Helper()
		testkit.Eventually(t, 10*time.Second, when+": preview", func() error { return servesPage(ctx, d, web.PublicURL, "survivor") })
		testkit.Eventually(t, 10*time.Second, when+": tcp", func() error { return echoes(tcpAddr(t, echo.PublicURL), "again") })
		testkit.Eventually(t, 10*time.Second, when+": domain", func() error { return servesPage(ctx, d, dom.URL, "survivor") })
	}
	check("before restart")

	d.Stop()
	if err := servesPage(ctx, d, web.PublicURL, "survivor"); err == nil {
		t.Fatal("the proxy still answers with the daemon stopped")
	}
	if err := echoes(tcpAddr(t, echo.PublicURL), "x"); err == nil {
		t.Fatal("the host port still answers with the daemon stopped")
	}
	d.Restart(nil)
	check("after restart")

	// The exposures are the same records, and retrying them is still a retry.
	if p := mustExpose(t, ctx, d, id, 9000, "tcp", http.StatusOK); p.HostPort != echo.HostPort || p.PublicURL != echo.PublicURL {
		t.Fatalf("tcp exposure after restart = %+v, was %+v", p, echo)
	}
	if p := mustExpose(t, ctx, d, id, 8080, "http", http.StatusOK); p.PublicURL != web.PublicURL {
		t.Fatalf("http exposure after restart = %+v, was %+v", p, web)
	}
}

// TestRestartWithHostPortTaken reinstalls routes while another program
// holds the host port of one TCP exposure: across a daemon restart, and
// across a sandbox start (the exposure made while the sandbox was stopped,
// so no listener held its port). That one route cannot be installed, but
// the daemon and the sandbox must still start and the other route serve,
// and a retry of the blocked exposure installs it once the port is free.
func TestRestartWithHostPortTaken(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	c := d.Client()
	ctx := ctxFor(t, 2*time.Minute)
	cases := []struct {
		name string
		// down and up take the routes away and reinstall them.
		down, up func(t *testing.T, id string)
		// exposeWhileDown makes the blocked exposure between down and up.
		exposeWhileDown bool
	}{
		{
			name: "daemon restart",
			down: func(*testing.T, string) { d.Stop() },
			up:   func(*testing.T, string) { d.Restart(nil) },
		},
		{
			name: "sandbox start",
			down: func(t *testing.T, id string) {
				if _, err := c.Stop(ctx, id); err != nil {
					t.Fatal(err)
				}
			},
			up: func(t *testing.T, id string) {
				if sb, err := c.Start(ctx, id); err != nil || sb.State != "running" {
					t.Fatalf("start with a host port taken: %+v %v", sb, err)
				}
				startEcho(t, ctx, c, id, 9000)
				startEcho(t, ctx, c, id, 9001)
			},
			exposeWhileDown: true,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			id := newSandbox(t, ctx, c)
			startEcho(t, ctx, c, id, 9000)
			startEcho(t, ctx, c, id, 9001)
			free := mustExpose(t, ctx, d, id, 9000, "tcp", http.StatusCreated)
			var blocked client.Port
			if !tc.exposeWhileDown {
				blocked = mustExpose(t, ctx, d, id, 9001, "tcp", http.StatusCreated)
			}
			tc.down(t, id)
			if tc.exposeWhileDown {
				blocked = mustExpose(t, ctx, d, id, 9001, "tcp", http.StatusCreated)
			}
			squatter, err := net.Listen("tcp", tcpAddr(t, blocked.PublicURL))
			if err != nil {
				t.Fatal(err)
			}
			defer squatter.Close()
			tc.up(t, id)
			testkit.Eventually(t, 10*time.Second, "the free exposure", func() error { return echoes(tcpAddr(t, free.PublicURL), "free") })

			squatter.Close()
			p := mustExpose(t, ctx, d, id, 9001, "tcp", http.StatusOK)
			if p.HostPort != blocked.HostPort {
				t.Fatalf("retry got host port %d, the exposure holds %d", p.HostPort, blocked.HostPort)
			}
			testkit.Eventually(t, 10*time.Second, "the blocked exposure after a retry", func() error { return echoes(tcpAddr(t, p.PublicURL), "healed") })
		})
	}
}

// TestExposeBadInput sends invalid exposures and hostnames: each is a 400
// and nothing is reserved, which the one-port pool then proves.
func TestExposeBadInput(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{PortRange: harness.FreeRange(t, 1)})
	c := d.Client()
	ctx := ctxFor(t, 2*time.Minute)
	id := newSandbox(t, ctx, c)

	ports := []struct {
		name, body string
	}{
		{"port 0", `{"port":0,"protocol":"tcp"}`},
		{"port 70000", `{"port":70000,"protocol":"tcp"}`},
		{"negative port", `{"port":-1,"protocol":"tcp"}`},
		{"no port", `{"protocol":"tcp"}`},
		{"unknown protocol", `{"port":9000,"protocol":"udp"}`},
		{"upper-case protocol", `{"port":9000,"protocol":"TCP"}`},
		{"agent port", `{"port":49983,"protocol":"tcp"}`},
		{"port as string", `{"port":"9000","protocol":"tcp"}`},
		{"unknown field", `{"port":9000,"protocol":"tcp","host_port":1234}`},
		{"malformed", `{"port":`},
	}
	for _, tc := range ports {
		t.Run("expose "+tc.name, func(t *testing.T) {
			status, code, msg, err := postJSON(ctx, d, http.MethodPost, "/v1/sandboxes/"+id+"/ports", tc.body, nil)
			if err != nil || status != http.StatusBadRequest || code != "bad_request" {
				t.Fatalf("%s: %d %s %q %v, want 400 bad_request", tc.body, status, code, msg, err)
			}
		})
	}
	long := strings.Repeat("a", 64)
	hostnames := []struct {
		name, hostname string
		port           int
	}{
		{"wildcard", "*.example.com", 8080},
		{"wildcard label", "a.*.example.com", 8080},
		{"underscore", "my_app.example.com", 8080},
		{"label over 63", long + ".example.com", 8080},
		{"name over 253", strings.Repeat(strings.Repeat("a", 60)+".", 5) + "com", 8080},
		{"ipv4", "192.0.2.10", 8080},
		{"ipv6", "2001:db8::1", 8080},
		{"leading hyphen", "-app.example.com", 8080},
		{"trailing hyphen", "app-.example.com", 8080},
		{"empty label", "app..example.com", 8080},
		{"single label", "localhost", 8080},
		{"empty", "", 8080},
		{"space", "my app.example.com", 8080},
		// A name under the preview domain would shadow preview URLs, which
		// the proxy resolves after custom hostnames: another sandbox could
		// take over this one's traffic.
		{"under the preview domain", id + "-8080.localhost", 8080},
		{"port 0", "ok.example.com", 0},
		{"port 70000", "ok.example.com", 70000},
	}
	for _, tc := range hostnames {
		t.Run("domain "+tc.name, func(t *testing.T) {
			status, _, code, err := addDomain(ctx, d, id, tc.hostname, tc.port)
			if err != nil || status != http.StatusBadRequest || code != "bad_request" {
				t.Fatalf("%q port %d: %d %s %v, want 400 bad_request", tc.hostname, tc.port, status, code, err)
			}
		})
	}
	if ps, err := c.ListPorts(ctx, id); err != nil || len(ps) != 0 {
		t.Fatalf("ports after bad input: %v %v", ps, err)
	}
	if ds, err := c.ListDomains(ctx, id); err != nil || len(ds) != 0 {
		t.Fatalf("domains after bad input: %v %v", ds, err)
	}
	// The one host port of the pool is still free.
	mustExpose(t, ctx, d, id, 9000, "tcp", http.StatusCreated)

	// Upper case is not an error: the hostname is lower-cased. A domain
	// targets an exposed port only.
	mustExpose(t, ctx, d, id, 8080, "http", http.StatusCreated)
	status, dom, code, err := addDomain(ctx, d, id, "Shop.Example.COM", 8080)
	if err != nil || status != http.StatusCreated || dom.Hostname != "shop.example.com" {
		t.Fatalf("upper-case hostname: %d %s %+v %v, want 201 shop.example.com", status, code, dom, err)
	}
	if status, _, code, err := addDomain(ctx, d, id, "shop.example.com.", 8080); err != nil || status != http.StatusOK {
		t.Fatalf("the same hostname with a trailing dot: %d %s %v, want 200", status, code, err)
	}
	// Unknown sandboxes are 404, for ports and domains alike.
	if r, err := expose(ctx, d, "sbnosuchsandbox", 9000, "tcp"); err != nil || r.status != http.StatusNotFound {
		t.Fatalf("expose on an unknown sandbox: %+v %v", r, err)
	}
	if status, _, _, err := addDomain(ctx, d, "sbnosuchsandbox", "x.example.com", 8080); err != nil || status != http.StatusNotFound {
		t.Fatalf("domain on an unknown sandbox: %d %v", status, err)
	}
}

// TestExposeProtocolConflict exposes a port over one protocol and then the
// other: 409 port_protocol_conflict, the first exposure untouched, and no
// host port consumed by the refused call.
func TestExposeProtocolConflict(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{PortRange: harness.FreeRange(t, 1)})
	c := d.Client()
	ctx := ctxFor(t, 2*time.Minute)
	id := newSandbox(t, ctx, c)

	cases := []struct {
		name        string
		port        int
		first, then string
	}{
		{"http then tcp", 8080, "http", "tcp"},
		{"tcp then http", 9000, "tcp", "http"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			orig := mustExpose(t, ctx, d, id, tc.port, tc.first, http.StatusCreated)
			r, err := expose(ctx, d, id, tc.port, tc.then)
			if err != nil || r.status != http.StatusConflict || r.code != "port_protocol_conflict" {
				t.Fatalf("re-expose as %s: %+v %v, want 409 port_protocol_conflict", tc.then, r, err)
			}
			if !strings.Contains(r.msg, "exposed as "+tc.first) {
				t.Fatalf("message %q does not say how the port is exposed", r.msg)
			}
			again := mustExpose(t, ctx, d, id, tc.port, tc.first, http.StatusOK)
			if again.PublicURL != orig.PublicURL || again.HostPort != orig.HostPort {
				t.Fatalf("exposure after the conflict = %+v, was %+v", again, orig)
			}
		})
	}
	// The http-then-tcp conflict took no host port: the pool's one port went
	// to the tcp exposure, and nothing else fits.
	if r, err := expose(ctx, d, id, 9001, "tcp"); err != nil || r.status != http.StatusServiceUnavailable {
		t.Fatalf("second tcp exposure in a pool of one: %+v %v, want 503", r, err)
	}
}

// TestDeleteSandboxFreesPortsAndRoutes deletes a sandbox with a TCP
// exposure, an HTTP exposure and a custom domain: the listener closes (open
// connections too), the routes answer 404, and another sandbox gets the host
// port and the hostname.
func TestDeleteSandboxFreesPortsAndRoutes(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{PortRange: harness.FreeRange(t, 1)})
	c := d.Client()
	ctx := ctxFor(t, 2*time.Minute)
	id := newSandbox(t, ctx, c)
	startHTTPD(t, ctx, c, id, 8080, "doomed")
	startEcho(t, ctx, c, id, 9000)
	echo := mustExpose(t, ctx, d, id, 9000, "tcp", http.StatusCreated)
	web := mustExpose(t, ctx, d, id, 8080, "http", http.StatusCreated)
	status, dom, code, err := addDomain(ctx, d, id, "doomed.example.test", 8080)
	if err != nil || status != http.StatusCreated {
		t.Fatalf("add domain: %d %s %v", status, code, err)
	}
	addr := tcpAddr(t, echo.PublicURL)
	testkit.Eventually(t, 10*time.Second, "tcp echo", func() error { return echoes(addr, "hi") })
	testkit.Eventually(t, 10*time.Second, "preview", func() error { return servesPage(ctx, d, web.PublicURL, "doomed") })
	testkit.Eventually(t, 10*time.Second, "domain", func() error { return servesPage(ctx, d, dom.URL, "doomed") })
	open, err := net.DialTimeout("tcp", addr, 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()

	if err := c.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		conn.Close()
		t.Fatalf("host port %s still accepts after the sandbox was deleted", addr)
	}
	_ = open.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := open.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("a connection open across the delete: read %v, want it closed", err)
	}
	for _, u := range []string{web.PublicURL, dom.URL} {
		if status, _, err := proxyGet(ctx, d, u); err != nil || status != http.StatusNotFound {
			t.Fatalf("GET %s after delete: %d %v, want 404", u, status, err)
		}
	}

	other := newSandbox(t, ctx, c)
	if p := mustExpose(t, ctx, d, other, 9000, "tcp", http.StatusCreated); p.HostPort != echo.HostPort {
		t.Fatalf("the pool's one port is %d, the next sandbox got %d", echo.HostPort, p.HostPort)
	}
	mustExpose(t, ctx, d, other, 8080, "http", http.StatusCreated)
	if status, _, code, err := addDomain(ctx, d, other, "doomed.example.test", 8080); err != nil || status != http.StatusCreated {
		t.Fatalf("hostname after its sandbox was deleted: %d %s %v, want 201", status, code, err)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return err != nil && errors.As(err, &ne) && ne.Timeout()
}

// TestPortsCLI drives expose, ports, unexpose and domain through the sandpit
// command line against the daemon.
func TestPortsCLI(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	c := d.Client()
	ctx := ctxFor(t, 2*time.Minute)
	id := newSandbox(t, ctx, c)
	startHTTPD(t, ctx, c, id, 8080, "via cli")
	cli := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, sandpitBin, args...)
		cmd.Env = append(cmd.Environ(), "SANDPIT_ADDR="+d.Addr, "SANDPIT_TOKEN="+d.Token)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("sandpit %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	preview := strings.TrimSpace(cli("expose", id, "8080"))
	testkit.Eventually(t, 10*time.Second, "cli preview", func() error { return servesPage(ctx, d, preview, "via cli") })
	tcpURL := strings.TrimSpace(cli("expose", id, "9000", "--tcp"))
	if !strings.HasPrefix(tcpURL, "tcp://127.0.0.1:") {
		t.Fatalf("expose --tcp printed %q", tcpURL)
	}
	if again := strings.TrimSpace(cli("expose", id, "9000", "--tcp")); again != tcpURL {
		t.Fatalf("expose --tcp again printed %q, first %q", again, tcpURL)
	}
	if ls := cli("ports", id); !strings.Contains(ls, preview) || !strings.Contains(ls, tcpURL) {
		t.Fatalf("ports:\n%s", ls)
	}
	cli("unexpose", id, "9000")
	if ls := cli("ports", id); strings.Contains(ls, tcpURL) {
		t.Fatalf("ports after unexpose:\n%s", ls)
	}
	domURL := strings.TrimSpace(cli("domain", "add", id, "cli.example.test", "8080"))
	if err := servesPage(ctx, d, domURL, "via cli"); err != nil {
		t.Fatal(err)
	}
	if ls := cli("domain", "ls", id); !strings.Contains(ls, "cli.example.test") {
		t.Fatalf("domain ls:\n%s", ls)
	}
	cli("domain", "rm", id, "cli.example.test")
	if ls := cli("domain", "ls", id); strings.Contains(ls, "cli.example.test") {
		t.Fatalf("domain ls after rm:\n%s", ls)
	}
}
