package sandpit_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/test/harness"
)

// egressProbeSrc is the program a sandbox runs to reach the test's
// internet: a static Go binary, so the test image needs no curl or TLS
// library. It prints one line and exits 0 on success, 1 on failure.
//
//	get URL          GET with the test CA, through the sandbox's own DNS
//	sni IP NAME      TLS to IP:443 presenting NAME ("" for none), then GET
//	resolve NAME     look NAME up through the sandbox's DNS
//	bench IP NAME N  request medians (µs): fresh connections, then kept alive
//	hget URL [H V]   GET with the sandbox's own trust store, header H: V
//	hold IP NAME N   open N connections to IP:80, one request for NAME on
//	                 each, and hold them (idle) until killed
const egressProbeSrc = `package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sort"
	"strconv"
	"time"
)

func main() {
	// The sandbox's own trust store (SSL_CERT_FILE: the daemon's egress CA
	// among others) plus the test's CA, when it was copied in.
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if pem, err := os.ReadFile("/tmp/egress-ca.pem"); err == nil {
		pool.AppendCertsFromPEM(pem)
	}
	fail := func(err error) { fmt.Println("FAIL", err); os.Exit(1) }
	switch os.Args[1] {
	case "get":
		c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil, TLSClientConfig: &tls.Config{RootCAs: pool}}}
		resp, err := c.Get(os.Args[2])
		if err != nil {
			fail(err)
		}
		b, _ := io.ReadAll(resp.Body)
		fmt.Println("OK", resp.StatusCode, string(b))
	case "sni":
		d := &net.Dialer{Timeout: 5 * time.Second}
		cfg := &tls.Config{RootCAs: pool, ServerName: os.Args[3]}
		if os.Args[3] == "" {
			cfg.InsecureSkipVerify = true
		}
		conn, err := tls.DialWithDialer(d, "tcp", net.JoinHostPort(os.Args[2], "443"), cfg)
		if err != nil {
			fail(err)
		}
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(conn, "GET / HTTP/1.0\r\nHost: %s\r\n\r\n", os.Args[3])
		b, _ := io.ReadAll(conn)
		fmt.Println("OK", len(b))
	case "bench":
		// bench IP NAME N: N HTTPS requests to IP:443 presenting NAME, each
		// on a fresh connection (the handshake and, through the egress
		// proxy, its decision included); then N on one kept-alive
		// connection. Prints the two medians in microseconds.
		n, _ := strconv.Atoi(os.Args[4])
		cfg := &tls.Config{RootCAs: pool, ServerName: os.Args[3]}
		url := "https://" + os.Args[2] + "/"
		median := func(keep bool) int64 {
			tr := &http.Transport{Proxy: nil, TLSClientConfig: cfg, DisableKeepAlives: !keep}
			c := &http.Client{Timeout: 10 * time.Second, Transport: tr}
			defer tr.CloseIdleConnections()
			var ds []int64
			for i := 0; i < n; i++ {
				t0 := time.Now()
				// The Host header names the host, as a client's would.
				req, _ := http.NewRequest("GET", url, nil)
				req.Host = os.Args[3]
				resp, err := c.Do(req)
				if err != nil {
					fail(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				ds = append(ds, time.Since(t0).Microseconds())
			}
			sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
			return ds[len(ds)/2]
		}
		fresh := median(false)
		fmt.Println("OK", fresh, median(true))
	case "hget":
		// hget URL [NAME VALUE]: GET trusting what the sandbox's trust
		// store and SSL_CERT_FILE say (not the test CA), with one header.
		req, err := http.NewRequest("GET", os.Args[2], nil)
		if err != nil {
			fail(err)
		}
		if len(os.Args) > 4 {
			req.Header.Set(os.Args[3], os.Args[4])
		}
		c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil}}
		resp, err := c.Do(req)
		if err != nil {
			fail(err)
		}
		b, _ := io.ReadAll(resp.Body)
		fmt.Println("OK", resp.StatusCode, string(b))
	case "hold":
		n, _ := strconv.Atoi(os.Args[4])
		var held []net.Conn
		for i := 0; i < n; i++ {
			c, err := net.DialTimeout("tcp", net.JoinHostPort(os.Args[2], "80"), 5*time.Second)
			if err != nil {
				continue
			}
			fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\n\r\n", os.Args[3])
			held = append(held, c)
		}
		fmt.Println("OK", len(held))
		time.Sleep(time.Hour)
	case "resolve":
		addrs, err := net.LookupHost(os.Args[2])
		if err != nil {
			fail(err)
		}
		fmt.Println("OK", addrs)
	}
}
`

var egressProbeOnce = struct {
	sync.Once
	bin []byte
	err error
}{}

// egressProbeBinary builds the probe once per test binary.
func egressProbeBinary(t testing.TB) []byte {
	t.Helper()
	egressProbeOnce.Do(func() {
		dir, err := os.MkdirTemp("", "sandpit-egress-probe-")
		if err != nil {
			egressProbeOnce.err = err
			return
		}
		defer os.RemoveAll(dir)
		src := filepath.Join(dir, "main.go")
		if err := os.WriteFile(src, []byte(egressProbeSrc), 0o644); err != nil {
			egressProbeOnce.err = err
			return
		}
		out := filepath.Join(dir, "probe")
		cmd := exec.Command("go", "build", "-o", out, src)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOFLAGS=")
		if b, err := cmd.CombinedOutput(); err != nil {
			egressProbeOnce.err = fmt.Errorf("build the egress probe: %v\n%s", err, b)
			return
		}
		egressProbeOnce.bin, egressProbeOnce.err = os.ReadFile(out)
	})
	if egressProbeOnce.err != nil {
		t.Fatal(egressProbeOnce.err)
	}
	return egressProbeOnce.bin
}

// testInternet is the test's own internet for name rules: web servers
// (HTTP on 80, HTTPS on 443 with a test CA) on the fake network's addresses,
// and a DNS server on loopback, the daemon's upstream, that answers the
// test's names.
type testInternet struct {
	fn     *fakeNet
	caPEM  []byte
	dnsURL string // host:port of the DNS server
	names  map[string]string

	mu   sync.Mutex
	seen []seenRequest // what reached the servers, for rules' tests
}

// seenRequest is one request the test's internet received.
type seenRequest struct {
	Host, Path string
	TLS        bool
	Header     http.Header
}

// requests returns the requests received for host so far.
func (ti *testInternet) requests(host string) []seenRequest {
	ti.mu.Lock()
	defer ti.mu.Unlock()
	var out []seenRequest
	for _, r := range ti.seen {
		if r.Host == host {
			out = append(out, r)
		}
	}
	return out
}

// newTestInternet serves, on every fake address, a page naming the host it
// was asked for: "hello <Host>".
func newTestInternet(t testing.TB) *testInternet {
	t.Helper()
	fn := newFakeNet(t)
	ti := &testInternet{fn: fn, names: map[string]string{
		"allowed.test":  fn.internet,
		"other.test":    fn.internet,
		"a.wild.test":   fn.internet,
		"b.a.wild.test": fn.internet,
		"rebind.test":   fn.lan,
		"meta.test":     fn.linkLocal,
	}}
	// A CA and one leaf for every name.
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sandpit egress test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	ti.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	leafKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	var dnsNames []string
	for n := range ti.names {
		dnsNames = append(dnsNames, n)
	}
	leafTmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "allowed.test"}, DNSNames: dnsNames,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage: x509.KeyUsageDigitalSignature}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTmpl, ca, &leafKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	cert := tls.Certificate{Certificate: [][]byte{leafDER}, PrivateKey: leafKey}
	page := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, err := net.SplitHostPort(r.Host)
		if err != nil {
			host = r.Host
		}
		ti.mu.Lock()
		ti.seen = append(ti.seen, seenRequest{Host: host, Path: r.URL.Path, TLS: r.TLS != nil, Header: r.Header.Clone()})
		ti.mu.Unlock()
		fmt.Fprintf(w, "hello %s", host)
	})
	for _, addr := range []string{fn.internet, fn.internet2, fn.lan, fn.linkLocal} {
		lns := fn.listenTCP(t, addr+":80", addr+":443")
		plain := &http.Server{Handler: page, ReadHeaderTimeout: 5 * time.Second}
		secure := &http.Server{Handler: page, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = plain.Serve(lns[0]) }()
		go func() { _ = secure.Serve(tls.NewListener(lns[1], &tls.Config{Certificates: []tls.Certificate{cert}})) }()
		t.Cleanup(func() { plain.Close(); secure.Close() })
	}
	// The DNS server: the test's names, NXDOMAIN for the rest.
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ti.dnsURL = pc.LocalAddr().String()
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(q)
		name := strings.TrimSuffix(strings.ToLower(q.Question[0].Name), ".")
		ip, ok := ti.names[name]
		switch {
		case !ok:
			m.SetRcode(q, dns.RcodeNameError)
		case q.Question[0].Qtype == dns.TypeA:
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 30}, A: net.ParseIP(ip)})
		}
		_ = w.WriteMsg(m)
	})}
	go func() { _ = srv.ActivateAndServe() }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	return ti
}

// egressRun runs the probe in a sandbox and reports whether it succeeded,
// with its output line.
func egressRun(t testing.TB, ctx context.Context, c *client.Client, id string, args ...string) (bool, string) {
	t.Helper()
	res, err := c.Exec(ctx, id, client.ExecRequest{Cmd: "/tmp/egress-probe", Args: args, TimeoutS: 30})
	if err != nil {
		t.Fatalf("probe %v in %s: %v", args, id, err)
	}
	return res.ExitCode == 0, strings.TrimSpace(string(res.Stdout))
}

// installProbe copies the probe and the test CA into a sandbox.
func installProbe(t testing.TB, ctx context.Context, c *client.Client, id string, ti *testInternet) {
	t.Helper()
	if err := c.WriteFile(ctx, id, "/tmp/egress-probe", egressProbeBinary(t)); err != nil {
		t.Fatal(err)
	}
	if err := c.WriteFile(ctx, id, "/tmp/egress-ca.pem", ti.caPEM); err != nil {
		t.Fatal(err)
	}
	if res, err := c.Exec(ctx, id, client.ExecRequest{Cmd: "chmod", Args: []string{"+x", "/tmp/egress-probe"}}); err != nil || res.ExitCode != 0 {
		t.Fatalf("chmod the probe: %v %+v", err, res)
	}
}

// expectReach runs the probe and fails the test unless it succeeds (want)
// or fails (!want).
func expectReach(t *testing.T, ctx context.Context, c *client.Client, id string, want bool, args ...string) {
	t.Helper()
	ok, out := egressRun(t, ctx, c, id, args...)
	if ok != want {
		t.Errorf("probe %v in %s: got %q, want success %v", args, id, out, want)
	}
}

// TestEgressByName: domain rules through the /v1 API. A sandbox allowed
// only some names reaches them over HTTP and HTTPS and nothing else: not
// another name on the same address, not that address with a made-up or
// missing SNI, not an allowed name that resolves inside (DNS rebinding to
// the LAN or to the metadata service). Every refusal is in the sandbox's
// denied list, its metric and the event stream; a live update flips a name
// for the next connection; learn mode records the names used; an
// operator's profile expands to its names; bad rules are refused with no
// sandbox made.
func TestEgressByName(t *testing.T) {
	t.Parallel()
	ti := newTestInternet(t)
	fn := ti.fn
	d := harness.Start(t, sandpitBin, harness.Options{Args: []string{"--egress-resolver", ti.dnsURL, "--egress-profile", "testing=allowed.test"}})
	ctx := ctxFor(t, 5*time.Minute)
	c := d.Client()
	_, events := openEvents(t, ctx, d, d.Token)

	sb, err := c.Create(ctx, client.CreateRequest{Network: &client.Network{Egress: "none",
		AllowDomains: []string{"allowed.test", "*.wild.test", "rebind.test", "meta.test"}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := sb.Network; got == nil || strings.Join(got.AllowDomains, ",") != "allowed.test,*.wild.test,rebind.test,meta.test" {
		t.Fatalf("stored policy %+v", got)
	}
	installProbe(t, ctx, c, sb.ID, ti)
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{[]string{"get", "https://allowed.test/"}, true},
		{[]string{"get", "http://allowed.test/"}, true},
		{[]string{"get", "https://a.wild.test/"}, true},
		{[]string{"get", "https://b.a.wild.test/"}, true},
		{[]string{"resolve", "other.test"}, false},
		{[]string{"sni", fn.internet, "other.test"}, false},
		{[]string{"sni", fn.internet, ""}, false},
		{[]string{"sni", fn.internet, "allowed.test"}, true},
		// Rebinding: the allowed names' inside answers are dropped, and
		// presenting them to the inside addresses is refused.
		{[]string{"resolve", "rebind.test"}, false},
		{[]string{"sni", fn.lan, "rebind.test"}, false},
		{[]string{"resolve", "meta.test"}, false},
		{[]string{"sni", fn.linkLocal, "meta.test"}, false},
		// Spoofing: an allowed name presented to an address it does not
		// resolve to.
		{[]string{"sni", fn.internet2, "allowed.test"}, false},
	} {
		expectReach(t, ctx, c, sb.ID, tc.want, tc.args...)
	}
	// Other ports follow the address rules: egress none.
	if reaches(t, ctx, c, sb.ID, fn.internet, fn.port) {
		t.Error("a port other than 80 and 443 of the internet is reachable under egress none")
	}

	// The refusals, as the user sees them.
	rep, err := c.NetworkDenials(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, dn := range rep.Denied {
		lines = append(lines, dn.Message)
	}
	all := strings.Join(lines, "\n")
	for _, want := range []string{
		"blocked DNS other.test (not in allow list)",
		"blocked other.test:443 (not in allow list)",
		fn.internet + ":443 (no server name",
		"blocked rebind.test:443 (resolves to a private or link-local address)",
		"blocked meta.test:443 (resolves to a private or link-local address)",
		"blocked allowed.test:443 (address is not one the name resolves to)",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("denied list lacks %q:\n%s", want, all)
		}
	}
	if rep.Total < uint64(len(rep.Denied)) || len(rep.Denied) == 0 {
		t.Errorf("denied total %d for %d shown", rep.Total, len(rep.Denied))
	}
	if n := metricValue(t, ctx, d, `sandpit_egress_denied_total{kind="tcp",sandbox="`+sb.ID+`"}`); n < 4 {
		t.Errorf("tcp refusals counted: %v, want at least 4", n)
	}
	if out := cli(t, ctx, d, "network", "denied", sb.ID); !strings.Contains(out, "blocked other.test:443 (not in allow list)") {
		t.Errorf("sandpit network denied printed:\n%s", out)
	}
	sawDenied := false
	for !sawDenied {
		select {
		case e := <-events:
			sawDenied = e.Type == "network.denied" && e.SandboxID == sb.ID && e.Network != nil && e.Network.Name == "other.test" && e.State == "running"
		case <-time.After(10 * time.Second):
			t.Fatal("no network.denied event for other.test")
		}
	}

	// A live update: allowed.test is denied by name for the very next
	// connection, everything else public; the same update again is a
	// no-op; an empty policy lifts every rule.
	if _, err := c.UpdateNetwork(ctx, sb.ID, client.Network{DenyDomains: []string{"allowed.test"}}); err != nil {
		t.Fatal(err)
	}
	if out := cli(t, ctx, d, "network", "set", sb.ID, "--deny-domain", "allowed.test"); strings.TrimSpace(out) != sb.ID {
		t.Fatalf("sandpit network set printed %q", out)
	}
	expectReach(t, ctx, c, sb.ID, false, "get", "https://allowed.test/")
	expectReach(t, ctx, c, sb.ID, true, "get", "https://other.test/")
	if after, err := c.Get(ctx, sb.ID); err != nil || after.Network == nil || strings.Join(after.Network.DenyDomains, ",") != "allowed.test" || after.Network.Egress != "" {
		t.Fatalf("after the update: %+v %v", after.Network, err)
	}
	if _, err := c.UpdateNetwork(ctx, sb.ID, client.Network{}); err != nil {
		t.Fatal(err)
	}
	// With no rules on names the sandbox's DNS is the host's again, which
	// knows none of the test's names: the addresses are reached directly.
	expectReach(t, ctx, c, sb.ID, true, "sni", fn.internet, "allowed.test")
	expectReach(t, ctx, c, sb.ID, true, "sni", fn.internet2, "allowed.test")
	if !reaches(t, ctx, c, sb.ID, fn.internet, fn.port) {
		t.Error("with no rules the sandbox does not reach the internet")
	}

	// Learn mode refuses nothing by name and records the names.
	learner, err := c.Create(ctx, client.CreateRequest{Network: &client.Network{Mode: "learn"}})
	if err != nil {
		t.Fatal(err)
	}
	installProbe(t, ctx, c, learner.ID, ti)
	expectReach(t, ctx, c, learner.ID, true, "get", "https://allowed.test/")
	expectReach(t, ctx, c, learner.ID, true, "get", "http://other.test/")
	lrep, err := c.NetworkDenials(ctx, learner.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(lrep.Learned, ","); !strings.Contains(got, "allowed.test") || !strings.Contains(got, "other.test") {
		t.Errorf("learned names %q", got)
	}

	// An operator's profile.
	prof, err := c.Create(ctx, client.CreateRequest{Network: &client.Network{Egress: "none", Profiles: []string{"testing"}}})
	if err != nil {
		t.Fatal(err)
	}
	if prof.Network == nil || strings.Join(prof.Network.AllowDomains, ",") != "allowed.test" {
		t.Fatalf("profile expanded to %+v", prof.Network)
	}
	installProbe(t, ctx, c, prof.ID, ti)
	expectReach(t, ctx, c, prof.ID, true, "get", "https://allowed.test/")
	expectReach(t, ctx, c, prof.ID, false, "get", "https://other.test/")

	// A restarted daemon listens on new ports; the rules of its running
	// sandboxes follow, and a name still denied stays denied.
	d.Stop()
	if !d.Wait(30 * time.Second) {
		t.Fatal("the daemon did not stop")
	}
	d.Restart(nil)
	expectReach(t, ctx, c, prof.ID, true, "get", "https://allowed.test/")
	expectReach(t, ctx, c, prof.ID, false, "get", "https://other.test/")

	// Bad rules: refused, nothing made.
	before := sandboxCount(t, ctx, d)
	for _, n := range []client.Network{
		{AllowDomains: []string{"*.test"}},
		{AllowDomains: []string{"bad domain"}},
		{DenyDomains: []string{"a.*.test"}},
		{Mode: "record"},
		{Profiles: []string{"nope"}},
	} {
		if _, err := c.Create(ctx, client.CreateRequest{Network: &n}); apiCode(err) != "bad_request" {
			t.Errorf("create with %+v: %v, want bad_request", n, err)
		}
		if _, err := c.UpdateNetwork(ctx, sb.ID, n); apiCode(err) != "bad_request" {
			t.Errorf("update with %+v: %v, want bad_request", n, err)
		}
	}
	if sandboxCount(t, ctx, d) != before {
		t.Error("a refused create made a sandbox")
	}
}

// sdkReach is one probe run as an SDK script reports it.
type sdkReach struct {
	OK  bool
	Out string
}

// TestEgressByNameSDKs: the same rules through the official SDKs, unchanged.
// E2B: allowOut with a name and internet access off reaches that name only
// (not another name on its address, not the address with another SNI or
// none); updateNetwork with denyOut of the name blocks it for the next
// connection and, since omitted fields replace all rules, opens the rest;
// sending it again changes nothing; the static updateNetwork goes back to
// allow-only. Daytona: domainAllowList on create (a wildcard included),
// updateNetworkSettings swapping the list, then networkBlockAll.
func TestEgressByNameSDKs(t *testing.T) {
	t.Parallel()
	e2bDir := harness.SDKDir(t, "e2b", "e2b")
	daytonaDir := harness.SDKDir(t, "daytona", "@daytonaio/sdk")
	ti := newTestInternet(t)
	d := harness.Start(t, sandpitBin, harness.Options{Args: []string{"--egress-resolver", ti.dnsURL}})
	dir := t.TempDir()
	probePath, caPath := filepath.Join(dir, "probe"), filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(probePath, egressProbeBinary(t), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(caPath, ti.caPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{"SANDPIT_URL=" + d.URL(), "SANDPIT_TOKEN=" + d.Token, "PROBE=" + probePath, "CA=" + caPath, "INTERNET=" + ti.fn.internet}
	expect := func(what string, r sdkReach, want bool) {
		t.Helper()
		if r.OK != want {
			t.Errorf("%s: %+v, want success %v", what, r, want)
		}
	}
	// The subtests run one after the other inside the parent, each with
	// its own deadline: parallel subtests would wait for a free slot
	// behind the package's other tests, with the parent's deadline running.
	t.Run("e2b", func(t *testing.T) {
		ctx := ctxFor(t, 3*time.Minute)
		var res struct {
			Created   struct{ Allowed, Other, IPOtherSNI, IPNoSNI sdkReach }
			Denied    struct{ Allowed, Other sdkReach }
			Again     struct{ Allowed sdkReach }
			AllowOnly struct {
				Allowed, Other sdkReach
			}
			SandboxID   string
			CreatedInfo struct{ AllowOut, DenyOut []string }
			DeniedInfo  struct{ AllowOut, DenyOut []string }
		}
		harness.RunSDK(t, ctx, e2bDir, "egress-sdk.mjs", env, &res)
		// getInfo reports the rules as they were given.
		if fmt.Sprint(res.CreatedInfo.AllowOut, res.CreatedInfo.DenyOut) != "[allowed.test] [0.0.0.0/0]" ||
			fmt.Sprint(res.DeniedInfo.AllowOut, res.DeniedInfo.DenyOut) != "[] [allowed.test]" {
			t.Errorf("getInfo().network: created %+v, after the update %+v", res.CreatedInfo, res.DeniedInfo)
		}
		expect("created: allowed.test", res.Created.Allowed, true)
		expect("created: other.test", res.Created.Other, false)
		expect("created: allowed.test's address with SNI other.test", res.Created.IPOtherSNI, false)
		expect("created: allowed.test's address with no SNI", res.Created.IPNoSNI, false)
		expect("denyOut allowed.test: allowed.test", res.Denied.Allowed, false)
		expect("denyOut allowed.test: other.test (allowOut omitted, internet on)", res.Denied.Other, true)
		expect("the same update again: allowed.test", res.Again.Allowed, false)
		expect("allow-only again: allowed.test", res.AllowOnly.Allowed, true)
		expect("allow-only again: other.test", res.AllowOnly.Other, false)
	})
	t.Run("daytona", func(t *testing.T) {
		ctx := ctxFor(t, 3*time.Minute)
		var res struct {
			CreatedList string
			Created     struct{ Allowed, Wild, Other sdkReach }
			Swapped     struct{ Allowed, Other sdkReach }
			Blocked     struct{ Other sdkReach }
			BlockAll    bool
		}
		harness.RunSDK(t, ctx, daytonaDir, "egress-sdk.mjs", env, &res)
		if res.CreatedList != "allowed.test,*.wild.test" {
			t.Errorf("the sandbox's domainAllowList: %q", res.CreatedList)
		}
		expect("created: allowed.test", res.Created.Allowed, true)
		expect("created: a.wild.test", res.Created.Wild, true)
		expect("created: other.test", res.Created.Other, false)
		expect("swapped: allowed.test", res.Swapped.Allowed, false)
		expect("swapped: other.test", res.Swapped.Other, true)
		expect("block all: other.test", res.Blocked.Other, false)
		if !res.BlockAll {
			t.Error("networkBlockAll is not reported after blocking all")
		}
	})
}
