package sandpit_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/internal/testenv/testkit"
	"github.com/sandpit-dev/sandpit/test/harness"
)

// hostGet fetches / through the proxy with the given Host and headers
// (name, value pairs) and returns the status and body.
func hostGet(t *testing.T, ctx context.Context, proxyAddr, host string, hdr ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+proxyAddr+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	// Caddy swaps its servers when its configuration changes, and a
	// connection that meets the old listener closing is reset or closed
	// before any answer (EOF): that one is sent again, as a browser would,
	// a few times. The request has no body, so sending it again is safe.
	swapped := func(err error) bool {
		return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
	}
	resp, err := noKeepAlive.Do(req)
	for i := 0; err != nil && swapped(err) && i < 20; i++ {
		time.Sleep(100 * time.Millisecond)
		resp, err = noKeepAlive.Do(req)
	}
	if err != nil {
		t.Fatalf("GET %s: %v", host, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// daytonaCall sends one Daytona API request with token and decodes a JSON
// answer into out.
func daytonaCall(t *testing.T, ctx context.Context, d *harness.Daemon, token, method, path, body string, out any) int {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, d.URL()+"/daytona"+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode/100 == 2 {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %v in %s", method, path, err, b)
		}
	}
	return resp.StatusCode
}

// TestTenantSignedPreviewRevocation reproduces "signed previews revoke
// nothing": once a Daytona signed preview URL is made for a port, neither
// plain preview host of that port (<id>-<port> and <port>-<id>) serves it
// without a credential, nor does the E2B gateway; getPreviewLink answers the
// port's preview token, which opens the plain hosts; and after the signed URL
// is expired through the API, or runs out, every host form is a 403. A port
// exposed the ordinary way stays public.
func TestTenantSignedPreviewRevocation(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	c := d.Client()
	ctx := ctxFor(t, 3*time.Minute)

	var sb struct {
		ID string `json:"id"`
	}
	if st := daytonaCall(t, ctx, d, d.Token, http.MethodPost, "/sandbox", `{"labels":{"test":"signed-preview"}}`, &sb); st/100 != 2 || sb.ID == "" {
		t.Fatalf("daytona create: %d %+v", st, sb)
	}
	id := sb.ID
	startHTTPD(t, ctx, c, id, 8080, "private page")
	sh(t, ctx, c, id, "mkdir -p /tmp/pub && printf 'public page' > /tmp/pub/index.html && httpd -p 8081 -h /tmp/pub")
	port := proxyPort(t, d)
	plain := []string{id + "-8080.localhost:" + port, "8080-" + id + ".localhost:" + port}

	var signed struct {
		Token string `json:"token"`
		URL   string `json:"url"`
	}
	if st := daytonaCall(t, ctx, d, d.Token, http.MethodGet, "/sandbox/"+id+"/ports/8080/signed-preview-url?expiresInSeconds=3600", "", &signed); st != http.StatusOK {
		t.Fatalf("signed-preview-url: %d", st)
	}
	testkit.Eventually(t, 10*time.Second, "the signed URL", func() error { return servesPage(ctx, d, signed.URL, "private page") })
	for _, h := range plain {
		if st, body := hostGet(t, ctx, d.ProxyAddr, h); st != http.StatusForbidden {
			t.Fatalf("plain host %s of a signed-only port: %d %q, want 403", h, st, body)
		}
	}
	if got := gatewayGet(t, ctx, d, id, 8080, ""); got != http.StatusForbidden {
		t.Fatalf("the E2B gateway to a signed-only port: %d, want 403", got)
	}

	// getPreviewLink: the URL and the token the SDK sends in its header.
	var link struct {
		URL   string `json:"url"`
		Token string `json:"token"`
	}
	if st := daytonaCall(t, ctx, d, d.Token, http.MethodGet, "/sandbox/"+id+"/ports/8080/preview-url", "", &link); st != http.StatusOK || link.Token == "" {
		t.Fatalf("preview-url of a private port: %d %+v, want a token", st, link)
	}
	for _, h := range plain {
		if st, body := hostGet(t, ctx, d.ProxyAddr, h, "X-Daytona-Preview-Token", link.Token); st != http.StatusOK || body != "private page" {
			t.Fatalf("plain host %s with the preview token: %d %q, want 200", h, st, body)
		}
		if st, _ := hostGet(t, ctx, d.ProxyAddr, h, "X-Daytona-Preview-Token", "wrong"); st != http.StatusForbidden {
			t.Fatalf("plain host %s with a wrong preview token: %d, want 403", h, st)
		}
	}

	// An ordinary exposure stays public, on both host forms.
	var pub struct {
		URL   string `json:"url"`
		Token string `json:"token"`
	}
	if st := daytonaCall(t, ctx, d, d.Token, http.MethodGet, "/sandbox/"+id+"/ports/8081/preview-url", "", &pub); st != http.StatusOK || pub.Token != "" {
		t.Fatalf("preview-url of a public port: %d %+v, want no token", st, pub)
	}
	testkit.Eventually(t, 10*time.Second, "the public port", func() error { return servesPage(ctx, d, pub.URL, "public page") })
	if st, body := hostGet(t, ctx, d.ProxyAddr, "8081-"+id+".localhost:"+port); st != http.StatusOK || body != "public page" {
		t.Fatalf("the other host form of a public port: %d %q", st, body)
	}

	// Expired through the API: every host form refuses.
	if st := daytonaCall(t, ctx, d, d.Token, http.MethodPost, "/sandbox/"+id+"/ports/8080/signed-preview-url/"+signed.Token+"/expire", "", nil); st != http.StatusOK {
		t.Fatalf("expire: %d", st)
	}
	if st, _, err := proxyGet(ctx, d, signed.URL); err != nil || st != http.StatusForbidden {
		t.Fatalf("expired signed URL: %d %v, want 403", st, err)
	}
	for _, h := range plain {
		if st, body := hostGet(t, ctx, d.ProxyAddr, h); st != http.StatusForbidden {
			t.Fatalf("plain host %s after the signed URL was expired: %d %q, want 403", h, st, body)
		}
	}

	// Run out on its own: the same.
	var short struct {
		URL string `json:"url"`
	}
	if st := daytonaCall(t, ctx, d, d.Token, http.MethodGet, "/sandbox/"+id+"/ports/8080/signed-preview-url?expiresInSeconds=1", "", &short); st != http.StatusOK {
		t.Fatalf("short signed-preview-url: %d", st)
	}
	testkit.Eventually(t, 10*time.Second, "the short signed URL to run out", func() error {
		if st, _, err := proxyGet(ctx, d, short.URL); err != nil || st != http.StatusForbidden {
			return fmt.Errorf("signed URL past its expiry: %d %v, want 403", st, err)
		}
		return nil
	})
	for _, h := range plain {
		if st, body := hostGet(t, ctx, d.ProxyAddr, h); st != http.StatusForbidden {
			t.Fatalf("plain host %s after the signed URL ran out: %d %q, want 403", h, st, body)
		}
	}
	d.CheckConsistent(t)
}

// tenant makes a token for owner with limits and returns a client for it.
func tenant(t *testing.T, ctx context.Context, d *harness.Daemon, owner string, limits *client.Limits) (*client.Client, string) {
	t.Helper()
	admin := d.Client(client.WithRetry(client.RetryPolicy{MaxAttempts: 1}))
	tok, err := admin.CreateToken(ctx, client.TokenRequest{Name: owner + "-token", Owner: owner, Limits: limits})
	if err != nil {
		t.Fatal(err)
	}
	return client.New(d.Addr, tok.Secret, client.WithRetry(client.RetryPolicy{MaxAttempts: 1})), tok.Secret
}

// bindAs posts a custom domain with token and returns status and code.
func bindAs(t *testing.T, ctx context.Context, d *harness.Daemon, token, id, host string, port int) (int, string, string) {
	t.Helper()
	a := raw(t, ctx, d, token, http.MethodPost, "/v1/sandboxes/"+id+"/custom-domains", fmt.Sprintf(`{"hostname":%q,"port":%d}`, host, port))
	var e struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	_ = json.Unmarshal(a.Body, &e)
	return a.Status, e.Error.Code, e.Error.Message
}

// TestTenantCustomDomainSquatting reproduces "custom domains can be squatted
// and can hijack hosts" on the builtin router: a tenant cannot bind the
// daemon's own names (the --domain apex and names under it, --public-host,
// the API's and proxy's hosts, a --reserved-hostname), special-use names
// (localhost, localhost.localdomain, .internal, .local) or IP literals (400);
// outside --custom-domain-suffix it gets 403; a domain must target an
// exposed HTTP port (400) and keeps that exposure from being removed under
// it (409); max_domains stops the 61st of 62 binds (429). No refusal binds
// anything, and a successful bind repeated is a 200 with one binding.
func TestTenantCustomDomainSquatting(t *testing.T) {
	t.Parallel()
	const (
		domain   = "apps.sandpit.test"
		public   = "tcp.sandpit.test"
		reserved = "api.sandpit.test"
		suffix   = "tenants.example.test"
	)
	d := harness.Start(t, sandpitBin, harness.Options{Args: []string{
		"--domain", domain, "--public-host", public, "--reserved-hostname", reserved,
		"--reserved-hostname", "*.ops.example.test", "--custom-domain-suffix", suffix,
	}})
	ctx := ctxFor(t, 4*time.Minute)
	admin := d.Client()
	mallory, tokM := tenant(t, ctx, d, "mallory", &client.Limits{MaxDomains: 60, MaxPorts: 2})
	alice, tokA := tenant(t, ctx, d, "alice", nil)

	sbM, err := mallory.Create(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	startHTTPD(t, ctx, admin, sbM.ID, 8080, "mallory's page")
	if _, err := mallory.ExposePort(ctx, sbM.ID, 8080, "http"); err != nil {
		t.Fatal(err)
	}
	if _, err := mallory.ExposePort(ctx, sbM.ID, 9000, "tcp"); err != nil {
		t.Fatal(err)
	}
	sbA, err := alice.Create(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	startHTTPD(t, ctx, admin, sbA.ID, 8080, "alice's page")
	if _, err := alice.ExposePort(ctx, sbA.ID, 8080, "http"); err != nil {
		t.Fatal(err)
	}
	if st, code, msg := bindAs(t, ctx, d, tokA, sbA.ID, "shop."+suffix, 8080); st != http.StatusCreated {
		t.Fatalf("alice binds shop.%s: %d %s %s", suffix, st, code, msg)
	}

	apiHost, _, _ := net.SplitHostPort(d.Addr)
	for _, tc := range []struct {
		name, host string
		port       int
		status     int
	}{
		{"the --domain apex", domain, 8080, http.StatusBadRequest},
		{"a preview host", sbA.ID + "-8080." + domain, 8080, http.StatusBadRequest},
		{"the other preview host form", "8080-" + sbA.ID + "." + domain, 8080, http.StatusBadRequest},
		{"--public-host", public, 8080, http.StatusBadRequest},
		{"a --reserved-hostname", reserved, 8080, http.StatusBadRequest},
		{"under a reserved *.suffix", "grafana.ops.example.test", 8080, http.StatusBadRequest},
		{"the API's host", apiHost, 8080, http.StatusBadRequest},
		{"localhost.localdomain", "localhost.localdomain", 8080, http.StatusBadRequest},
		{"a .localhost name", "app.localhost", 8080, http.StatusBadRequest},
		{"cloud metadata", "metadata.google.internal", 8080, http.StatusBadRequest},
		{"mDNS", "printer.local", 8080, http.StatusBadRequest},
		{"an IPv4 literal", "169.254.169.254", 8080, http.StatusBadRequest},
		{"a short IPv4 literal", "127.1", 8080, http.StatusBadRequest},
		{"an IPv6 literal", "[::1]", 8080, http.StatusBadRequest},
		{"outside the owners' suffix", "www.bank.example.com", 8080, http.StatusForbidden},
		{"the suffix itself", suffix, 8080, http.StatusForbidden},
		{"another owner's hostname", "shop." + suffix, 8080, http.StatusConflict},
		{"an unexposed port", "hidden." + suffix, 5432, http.StatusBadRequest},
		{"a tcp exposure", "raw." + suffix, 9000, http.StatusBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, code, msg := bindAs(t, ctx, d, tokM, sbM.ID, tc.host, tc.port)
			if st != tc.status {
				t.Fatalf("bind %q port %d: %d %s %q, want %d", tc.host, tc.port, st, code, msg, tc.status)
			}
			if msg == "" {
				t.Fatalf("bind %q: %d with no message", tc.host, st)
			}
		})
	}
	if ds, err := mallory.ListDomains(ctx, sbM.ID); err != nil || len(ds) != 0 {
		t.Fatalf("mallory's domains after the refusals: %+v %v, want none", ds, err)
	}
	// Alice's binding still serves Alice.
	if st, body := hostGet(t, ctx, d.ProxyAddr, "shop."+suffix+":"+proxyPort(t, d)); st != http.StatusOK || body != "alice's page" {
		t.Fatalf("alice's hostname: %d %q", st, body)
	}
	// The unexposed port stays unexposed, and max_ports (2) is not used up
	// by the refusals: one more exposure fits, the next does not.
	if ps, err := mallory.ListPorts(ctx, sbM.ID); err != nil || len(ps) != 2 {
		t.Fatalf("mallory's ports: %+v %v, want 8080 and 9000", ps, err)
	}

	// The admin is not bound by the suffix policy, but by the reserved names.
	if st, code, msg := bindAs(t, ctx, d, d.Token, sbM.ID, "admin-made.example.org", 8080); st != http.StatusCreated {
		t.Fatalf("admin binds outside the suffix: %d %s %s", st, code, msg)
	}
	if st, _, _ := bindAs(t, ctx, d, d.Token, sbM.ID, reserved, 8080); st != http.StatusBadRequest {
		t.Fatalf("admin binds a reserved name: %d, want 400", st)
	}

	// A good bind, and its retry.
	host := "app." + suffix
	if st, code, msg := bindAs(t, ctx, d, tokM, sbM.ID, host, 8080); st != http.StatusCreated {
		t.Fatalf("bind %s: %d %s %s", host, st, code, msg)
	}
	if st, code, msg := bindAs(t, ctx, d, tokM, sbM.ID, host, 8080); st != http.StatusOK {
		t.Fatalf("retry of bind %s: %d %s %s, want 200", host, st, code, msg)
	}
	testkit.Eventually(t, 10*time.Second, "the tenant's hostname", func() error {
		return servesPage(ctx, d, "http://"+host+":"+proxyPort(t, d), "mallory's page")
	})
	// The exposure under a domain cannot be removed from under it.
	if err := mallory.UnexposePort(ctx, sbM.ID, 8080); apiCode(err) != "conflict" {
		t.Fatalf("unexpose a port with domains: %v, want 409 conflict", err)
	}

	// The quota: 60 domains in all (two are bound), so of 60 more binds 58
	// succeed and the last two are refused.
	var refused int
	for i := range 60 {
		st, code, msg := bindAs(t, ctx, d, tokM, sbM.ID, fmt.Sprintf("n%d.%s", i, suffix), 8080)
		switch {
		case i < 58 && st != http.StatusCreated:
			t.Fatalf("bind %d: %d %s %s", i, st, code, msg)
		case i >= 58 && (st != http.StatusTooManyRequests || code != "quota_exceeded"):
			t.Fatalf("bind %d past max_domains: %d %s %s, want 429 quota_exceeded", i, st, code, msg)
		case i >= 58:
			refused++
		}
	}
	ds, err := mallory.ListDomains(ctx, sbM.ID)
	if err != nil || len(ds) != 60 || refused != 2 {
		t.Fatalf("domains of the sandbox: %d %v (refused %d), want 60", len(ds), err, refused)
	}
	ol, err := admin.GetOwnerLimits(ctx, "mallory")
	if err != nil || ol.Usage.Domains != 60 || ol.Limits.MaxDomains != 60 {
		t.Fatalf("mallory's limits: %+v %v", ol, err)
	}
	d.CheckConsistent(t)
}

// txtServer is a DNS server on loopback that answers TXT questions from a
// table the test edits.
type txtServer struct {
	addr string
	mu   sync.Mutex
	txt  map[string][]string // fully qualified name -> values
}

func startTXTServer(t *testing.T) *txtServer {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &txtServer{addr: pc.LocalAddr().String(), txt: map[string][]string{}}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(q)
		m.Authoritative = true
		found := false
		for _, qq := range q.Question {
			s.mu.Lock()
			vals, ok := s.txt[strings.ToLower(qq.Name)]
			s.mu.Unlock()
			found = found || ok
			if qq.Qtype != dns.TypeTXT {
				continue
			}
			for _, v := range vals {
				m.Answer = append(m.Answer, &dns.TXT{Hdr: dns.RR_Header{Name: qq.Name, Rrtype: dns.TypeTXT, Class: dns.ClassINET, Ttl: 1}, Txt: []string{v}})
			}
		}
		if !found {
			m.Rcode = dns.RcodeNameError
		}
		_ = w.WriteMsg(m)
	})}
	go func() { _ = srv.ActivateAndServe() }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	return s
}

func (s *txtServer) set(name string, values ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(values) == 0 {
		delete(s.txt, dns.Fqdn(name))
		return
	}
	s.txt[dns.Fqdn(name)] = values
}

var challengeValue = regexp.MustCompile(`"(sandpit-verify=[0-9a-f]+)"`)

// TestTenantCustomDomainTXTProof: with --custom-domain-verify txt a tenant
// binds a hostname only once a TXT record _sandpit-challenge.<hostname>
// holds its own challenge token (another owner's token does not do), as
// the daemon's resolver (a DNS server this test runs on loopback) answers;
// the refusal says which record to publish and binds nothing, and a retry
// of the bind stays a 200 after the record is gone.
func TestTenantCustomDomainTXTProof(t *testing.T) {
	t.Parallel()
	ns := startTXTServer(t)
	d := harness.Start(t, sandpitBin, harness.Options{Args: []string{"--custom-domain-verify", "txt", "--custom-domain-resolver", ns.addr}})
	ctx := ctxFor(t, 3*time.Minute)
	mallory, tokM := tenant(t, ctx, d, "mallory", nil)
	_, tokA := tenant(t, ctx, d, "alice", nil)
	sb, err := mallory.Create(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mallory.ExposePort(ctx, sb.ID, 8080, "http"); err != nil {
		t.Fatal(err)
	}
	other, err := client.New(d.Addr, tokA).Create(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.New(d.Addr, tokA).ExposePort(ctx, other.ID, 8080, "http"); err != nil {
		t.Fatal(err)
	}

	const host = "shop.example.test"
	st, code, msg := bindAs(t, ctx, d, tokM, sb.ID, host, 8080)
	if st != http.StatusForbidden || !strings.Contains(msg, "_sandpit-challenge."+host) {
		t.Fatalf("bind without a record: %d %s %q, want 403 naming the record", st, code, msg)
	}
	m := challengeValue.FindStringSubmatch(msg)
	if m == nil {
		t.Fatalf("no challenge value in %q", msg)
	}
	mine := m[1]
	_, _, msgA := bindAs(t, ctx, d, tokA, other.ID, "alice.example.test", 8080)
	ma := challengeValue.FindStringSubmatch(msgA)
	if ma == nil || ma[1] == mine {
		t.Fatalf("alice's challenge %q, mallory's %q: want two different tokens", msgA, mine)
	}

	// Alice's token under mallory's name proves nothing.
	ns.set("_sandpit-challenge."+host, ma[1])
	if st, _, _ := bindAs(t, ctx, d, tokM, sb.ID, host, 8080); st != http.StatusForbidden {
		t.Fatalf("bind with another owner's token in the record: %d, want 403", st)
	}
	if ds, err := mallory.ListDomains(ctx, sb.ID); err != nil || len(ds) != 0 {
		t.Fatalf("domains after refusals: %+v %v", ds, err)
	}
	ns.set("_sandpit-challenge."+host, "unrelated", mine)
	if st, code, msg := bindAs(t, ctx, d, tokM, sb.ID, host, 8080); st != http.StatusCreated {
		t.Fatalf("bind with the record published: %d %s %s", st, code, msg)
	}
	ns.set("_sandpit-challenge." + host)
	if st, code, msg := bindAs(t, ctx, d, tokM, sb.ID, host, 8080); st != http.StatusOK {
		t.Fatalf("retry after the record is gone: %d %s %s, want 200", st, code, msg)
	}
	// Alice cannot take it, record or not.
	ns.set("_sandpit-challenge."+host, ma[1])
	if st, _, _ := bindAs(t, ctx, d, tokA, other.ID, host, 8080); st != http.StatusConflict {
		t.Fatalf("alice binds mallory's verified hostname: %d, want 409", st)
	}
}
