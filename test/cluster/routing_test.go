package cluster_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/internal/testenv/testkit"
	"github.com/sandpit-dev/sandpit/test/harness"
)

// viaProxy sends a GET for host to node n's preview proxy: the test domain
// does not resolve, so the request goes to the proxy's address with the host
// as its Host header, which is what a resolving client sends.
func viaProxy(ctx context.Context, n *node, host, path string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+n.ProxyAddr+path, nil)
	if err != nil {
		return 0, "", err
	}
	req.Host = host
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return res.StatusCode, string(b), err
}

// placeOn creates named sandboxes through entry until one lands on the node
// called want (placement is by free capacity, so each try has a fair chance),
// deletes the others, and returns the one that landed.
func placeOn(t testing.TB, ctx context.Context, entry *node, want, prefix string) client.Sandbox {
	t.Helper()
	c := entry.Client()
	for i := 0; i < 30; i++ {
		sb, err := c.Create(ctx, client.CreateRequest{Name: fmt.Sprintf("%s-%d", prefix, i)})
		if err != nil {
			t.Fatalf("create: %v", err)
		}
		if sb.Node == want {
			return sb
		}
		if err := c.Delete(ctx, sb.ID); err != nil {
			t.Fatalf("delete %s: %v", sb.ID, err)
		}
	}
	t.Fatalf("30 creates, none on %s", want)
	return client.Sandbox{}
}

// streamCGI is a busybox httpd CGI script that sends one line, then waits
// for /tmp/go to appear before sending the second: a proxy that buffers
// would hold the first line back until the test, which waits for it, gives
// up.
const streamCGI = `#!/bin/sh
printf 'Content-Type: text/plain\r\n\r\n'
echo first
while [ ! -e /tmp/go ]; do sleep 1; done
echo second
`

// TestClusterRoutesFromAnyNode is the routing acceptance: a sandbox on n3,
// with an HTTP exposure and a custom domain, answers through the proxies of
// all three nodes (both preview label forms, the custom domain, a Daytona
// signed preview and the E2B agent host), a streamed response and a
// WebSocket pass a non-owner's proxy, its TCP exposure is bound on n3 and
// named by n3's public host, the official E2B SDK pointed at n1 runs a command and
// reads and writes files in it (signed file URLs too), and the official
// Daytona SDK pointed at n2 finds it by name, executes in it and opens a PTY
// (a WebSocket) in it.
func TestClusterRoutesFromAnyNode(t *testing.T) {
	e2bDir := harness.SDKDir(t, "e2b", "e2b")
	daytonaDir := harness.SDKDir(t, "daytona", "@daytonaio/sdk")
	c := startClusterWith(t, func(name string) []string { return []string{"--public-host", name + ".nodes.test"} })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	n1, n2, n3 := c.nodes[0], c.nodes[1], c.nodes[2]

	sb := placeOn(t, ctx, n1, "n3", "routed")
	id := sb.ID
	if owner := c.ownerOf(t, id); owner != n3 {
		t.Fatalf("the container of %s is not on n3", id)
	}
	if err := n2.Client().WriteFile(ctx, id, "/tmp/www/cgi-bin/stream", []byte(streamCGI)); err != nil {
		t.Fatal(err)
	}
	script := "printf routed-page > /tmp/www/index.html && chmod +x /tmp/www/cgi-bin/stream && httpd -p 8080 -h /tmp/www && httpd -p 8082 -h /tmp/www"
	if res, err := n2.Client().Exec(ctx, id, client.ExecRequest{Cmd: "sh", Args: []string{"-c", script}, TimeoutS: 30}); err != nil || res.ExitCode != 0 {
		t.Fatalf("httpd: %+v %v", res, err)
	}
	web, err := n1.Client().ExposePort(ctx, id, 8080, "http")
	if err != nil {
		t.Fatal(err)
	}
	const domain = "routed-app.example.test"
	if _, err := n2.Client().AddDomain(ctx, id, domain, 8080); err != nil {
		t.Fatal(err)
	}
	// A Daytona signed preview URL, asked of n2; n3 signs it with its key.
	// It is for another port: a signed preview makes its port private,
	// and 8080's plain hosts are checked below.
	var signed struct{ URL string }
	if a := call(ctx, n2, http.MethodGet, "/daytona/sandbox/"+sb.Name+"/ports/8082/signed-preview-url?expiresInSeconds=600", "", nil); a.Status != 200 || json.Unmarshal(a.Body, &signed) != nil {
		t.Fatalf("signed preview url: %d %s", a.Status, a.Body)
	}
	su, err := url.Parse(signed.URL)
	if err != nil {
		t.Fatal(err)
	}
	wu, err := url.Parse(web.PublicURL)
	if err != nil {
		t.Fatal(err)
	}

	hosts := []string{
		wu.Host,                       // <id>-8080.localhost:<n3's proxy port>
		"8080-" + id + ".localhost",   // the form E2B clients build
		domain,                        // the custom domain
		strings.ToUpper(domain) + ".", // as a client may spell it
		su.Host,                       // 8082-<signed token>.localhost
	}
	for _, n := range c.nodes {
		for _, h := range hosts {
			code, body, err := viaProxy(ctx, n, h, "/")
			if err != nil || code != 200 || body != "routed-page" {
				t.Errorf("%s through %s's proxy: %d %q %v", h, n.name, code, body, err)
			}
		}
		// The agent's port (E2B's 49983-<id> host) answers its health check.
		if code, body, err := viaProxy(ctx, n, "49983-"+id+".localhost", "/health"); err != nil || code >= 300 {
			t.Errorf("agent host through %s's proxy: %d %q %v", n.name, code, body, err)
		}
	}
	// A host of no sandbox is still the receiving proxy's 404.
	if code, _, _ := viaProxy(ctx, n1, "nosuch-8080.localhost", "/"); code != http.StatusNotFound {
		t.Errorf("unknown preview through n1: %d, want 404", code)
	}
	if t.Failed() {
		t.FailNow()
	}

	// A streamed response and a WebSocket through a proxy that does not
	// run the sandbox.
	streamThrough(t, ctx, n1, n2, id, "8080-"+id+".localhost")
	webSocketThrough(t, ctx, n1, n2, id)

	// A TCP exposure asked of n1 is bound on n3 and named by n3's public
	// host.
	if r, err := n1.Client().Exec(ctx, id, client.ExecRequest{Cmd: "sh", Args: []string{"-c", "nc -ll -p 9000 -e cat </dev/null >/dev/null 2>&1 &"}}); err != nil || r.ExitCode != 0 {
		t.Fatalf("echo server: %+v %v", r, err)
	}
	tcp, err := n1.Client().ExposePort(ctx, id, 9000, "tcp")
	if err != nil {
		t.Fatal(err)
	}
	tu, err := url.Parse(tcp.PublicURL)
	if err != nil || tu.Scheme != "tcp" || tu.Hostname() != "n3.nodes.test" {
		t.Fatalf("tcp exposure URL %q, want tcp://n3.nodes.test:PORT", tcp.PublicURL)
	}
	lo, hi := portRange(t, n3.PortRange)
	if tcp.HostPort < lo || tcp.HostPort > hi || tu.Port() != strconv.Itoa(tcp.HostPort) {
		t.Fatalf("tcp exposure on port %d (URL %s), want one of n3's %s", tcp.HostPort, tcp.PublicURL, n3.PortRange)
	}
	echoed := ""
	for deadline := time.Now().Add(20 * time.Second); echoed != "ping\n" && time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		echoed = echo(net.JoinHostPort("127.0.0.1", tu.Port()), "ping\n")
	}
	if echoed != "ping\n" {
		t.Fatalf("tcp exposure echoed %q", echoed)
	}

	// The official E2B SDK, pointed at n1 only.
	var e struct {
		ID, Stdout, Page, Back string
		ExitCode               int
		SignedDown             struct {
			Status       int
			Body, Origin string
		}
		SignedUp struct {
			Status int
			Body   string
		}
		ForgedStatus int
	}
	harness.RunSDK(t, ctx, e2bDir, "cluster-route.mjs", []string{
		"E2B_API_URL=" + n1.URL() + "/e2b", "E2B_SANDBOX_URL=" + n1.URL() + "/e2b/envd", "E2B_API_KEY=" + n1.Token,
		"ROUTE_SANDBOX_ID=" + id,
	}, &e)
	if e.ID != id || e.Stdout != "routed-42" || e.ExitCode != 0 || e.Page != "routed-page" || e.Back != "written through another node" {
		t.Fatalf("e2b through n1: %+v", e)
	}
	// Its signed file URLs, which name no sandbox, work at n1's API root.
	if e.SignedDown.Status != 200 || e.SignedDown.Body != "written through another node" || e.SignedDown.Origin != n1.URL() ||
		e.SignedUp.Status != 200 || e.SignedUp.Body != "uploaded through a signed URL" || e.ForgedStatus != 401 {
		t.Fatalf("signed file URLs through n1: %+v", e)
	}

	// The official Daytona SDK, pointed at n2 only, finds it by name.
	var d struct {
		ID, Name, Result, PreviewURL string
		ExitCode                     int
		Pty                          bool
	}
	harness.RunSDK(t, ctx, daytonaDir, "cluster-route.mjs", []string{
		"ROUTE_API_URL=" + n2.URL() + "/daytona", "ROUTE_API_KEY=" + n2.Token, "ROUTE_SANDBOX_NAME=" + sb.Name,
	}, &d)
	if d.ID != id || d.Name != sb.Name || d.Result != "routed-page" || d.ExitCode != 0 || !d.Pty {
		t.Fatalf("daytona through n2: %+v", d)
	}
	// Its preview link (n3's proxy in the URL) answers through n2's proxy.
	pu, err := url.Parse(d.PreviewURL)
	if err != nil {
		t.Fatal(err)
	}
	if code, body, err := viaProxy(ctx, n2, pu.Host, "/"); err != nil || code != 200 || body != "routed-page" {
		t.Fatalf("daytona preview link %s through n2: %d %q %v", d.PreviewURL, code, body, err)
	}
}

// wsEcho answers one WebSocket handshake (the key of RFC 6455's example, so
// its accept value is fixed) and then echoes the connection's bytes.
const wsEcho = `#!/bin/sh
while read -r line; do
	[ -z "$(printf '%s' "$line" | tr -d '\r')" ] && break
done
printf 'HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n'
exec cat
`

// wsThrough opens a WebSocket handshake for host at proxy, checks the 101
// and its accept value, then sends msg and returns the line that comes
// back.
func wsThrough(proxy, host, msg string) (string, error) {
	conn, err := net.DialTimeout("tcp", proxy, 2*time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(conn, "GET /chat HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n", host)
	br := bufio.NewReader(conn)
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		return "", err
	}
	if res.StatusCode != http.StatusSwitchingProtocols || res.Header.Get("Sec-WebSocket-Accept") != "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=" {
		b, _ := io.ReadAll(res.Body)
		return "", fmt.Errorf("handshake answered %d %q", res.StatusCode, b)
	}
	if _, err := io.WriteString(conn, msg); err != nil {
		return "", err
	}
	return br.ReadString('\n')
}

func portRange(t *testing.T, r string) (int, int) {
	t.Helper()
	a, b, _ := strings.Cut(r, "-")
	lo, err1 := strconv.Atoi(a)
	hi, err2 := strconv.Atoi(b)
	if err1 != nil || err2 != nil {
		t.Fatalf("port range %q", r)
	}
	return lo, hi
}

// echo sends msg to addr and returns what comes back before a short wait.
func echo(addr, msg string) string {
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return ""
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.WriteString(conn, msg); err != nil {
		return ""
	}
	line, _ := bufio.NewReader(conn).ReadString('\n')
	return line
}

// TestClusterCaddyRoutesFromAnyNode: with --router caddy every node's Caddy
// holds the routes of its own node's sandboxes only, and the host it has no
// route for goes, through its fallback, to its daemon's preview forwarder,
// which sends it to the owner node; there the owner's Caddy serves it. So a
// sandbox on n3 answers through the Caddy of every node: both preview label
// forms, its custom domain, a streamed response and a WebSocket. A port it
// does not expose, and a host of no sandbox, are still 404s, not loops.
func TestClusterCaddyRoutesFromAnyNode(t *testing.T) {
	caddies := map[string]*harness.Caddy{}
	for _, name := range []string{"n1", "n2", "n3"} {
		caddies[name] = harness.StartCaddy(t, harness.CaddyDebian)
	}
	// n1's Caddy still holds what a single daemon wrote: its server with
	// the fallback that answers 404. The node replaces that fallback.
	standalone := map[string]any{
		"listen":          []any{loopback(t)},
		"automatic_https": map[string]any{"disable": true},
		"routes": []any{map[string]any{"@id": "sandpit_fallback", "handle": []any{map[string]any{
			"handler": "static_response", "status_code": 404, "body": "sandpit: no route for host {http.request.host}\n"}}}},
	}
	if _, err := caddies["n1"].Admin(http.MethodPost, "/config/apps", map[string]any{"http": map[string]any{"servers": map[string]any{"sandpit": standalone}}}, nil); err != nil {
		t.Fatal(err)
	}
	c := startClusterWith(t, func(name string) []string {
		return []string{"--router", "caddy", "--caddy-admin", caddies[name].AdminURL()}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	n1, n2 := c.nodes[0], c.nodes[1]

	sb := placeOn(t, ctx, n1, "n3", "caddy-routed")
	id := sb.ID
	if err := n2.Client().WriteFile(ctx, id, "/tmp/www/cgi-bin/stream", []byte(streamCGI)); err != nil {
		t.Fatal(err)
	}
	script := "printf caddy-page > /tmp/www/index.html && chmod +x /tmp/www/cgi-bin/stream && httpd -p 8080 -h /tmp/www"
	if res, err := n2.Client().Exec(ctx, id, client.ExecRequest{Cmd: "sh", Args: []string{"-c", script}, TimeoutS: 30}); err != nil || res.ExitCode != 0 {
		t.Fatalf("httpd: %+v %v", res, err)
	}
	if _, err := n1.Client().ExposePort(ctx, id, 8080, "http"); err != nil {
		t.Fatal(err)
	}
	const domain = "caddy-routed.example.test"
	if _, err := n2.Client().AddDomain(ctx, id, domain, 8080); err != nil {
		t.Fatal(err)
	}
	for _, n := range c.nodes {
		for _, h := range []string{id + "-8080.localhost", "8080-" + id + ".localhost", domain} {
			testkit.Eventually(t, 20*time.Second, "", func() error {
				if code, body, err := viaProxy(ctx, n, h, "/"); err != nil || code != 200 || body != "caddy-page" {
					return fmt.Errorf("%s through %s's Caddy: %d %q %v", h, n.name, code, body, err)
				}
				return nil
			})
		}
	}
	for _, h := range []string{id + "-8099.localhost", "nosuch-8080.localhost", "elsewhere.example.test"} {
		if code, body, err := viaProxy(ctx, n1, h, "/"); err != nil || code != http.StatusNotFound {
			t.Errorf("%s through n1's Caddy: %d %q %v, want 404", h, code, body, err)
		}
	}

	// A streamed response through n1's Caddy, a WebSocket through n2's.
	streamThrough(t, ctx, n1, n2, id, id+"-8080.localhost")
	webSocketThrough(t, ctx, n2, n2, id)
}

// streamThrough asks entry's proxy for the sandbox's streaming CGI script
// (streamCGI, served on port 8080 under host) and checks that the first
// line arrives while the script still waits; ctl (any node) then lets it
// finish.
func streamThrough(t *testing.T, ctx context.Context, entry, ctl *node, id, host string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+entry.ProxyAddr+"/cgi-bin/stream", nil)
	req.Host = host
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	br := bufio.NewReader(res.Body)
	if line, err := br.ReadString('\n'); err != nil || line != "first\n" {
		t.Fatalf("first streamed line through %s: %q %v", entry.name, line, err)
	}
	if r, err := ctl.Client().Exec(ctx, id, client.ExecRequest{Cmd: "touch", Args: []string{"/tmp/go"}}); err != nil || r.ExitCode != 0 {
		t.Fatalf("touch: %+v %v", r, err)
	}
	if rest, err := io.ReadAll(br); err != nil || string(rest) != "second\n" {
		t.Fatalf("second streamed line through %s: %q %v", entry.name, rest, err)
	}
}

// webSocketThrough starts a WebSocket echo server on the sandbox's port 8081
// and exposes it through ctl, then opens a WebSocket through entry's proxy:
// the 101 comes back and the upgraded connection carries bytes both ways.
func webSocketThrough(t *testing.T, ctx context.Context, entry, ctl *node, id string) {
	t.Helper()
	if err := ctl.Client().WriteFile(ctx, id, "/tmp/ws.sh", []byte(wsEcho)); err != nil {
		t.Fatal(err)
	}
	if r, err := ctl.Client().Exec(ctx, id, client.ExecRequest{Cmd: "sh", Args: []string{"-c", "chmod +x /tmp/ws.sh && (nc -ll -p 8081 -e /tmp/ws.sh </dev/null >/dev/null 2>&1 &)"}}); err != nil || r.ExitCode != 0 {
		t.Fatalf("websocket server: %+v %v", r, err)
	}
	if _, err := ctl.Client().ExposePort(ctx, id, 8081, "http"); err != nil {
		t.Fatal(err)
	}
	var (
		upgraded string
		err      error
	)
	for deadline := time.Now().Add(20 * time.Second); upgraded != "ping\n" && time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		upgraded, err = wsThrough(entry.ProxyAddr, id+"-8081.localhost", "ping\n")
	}
	if upgraded != "ping\n" {
		t.Fatalf("websocket through %s's proxy: %q %v", entry.name, upgraded, err)
	}
}
