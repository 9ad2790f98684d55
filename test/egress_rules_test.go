package sandpit_test

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/test/harness"
)

// withHeader is a host's rules setting one header.
func withHeader(name, value string) []client.NetworkRule {
	return []client.NetworkRule{{Transform: &client.NetworkTransform{Headers: map[string]string{name: value}}}}
}

// lastHeader is header name of the last request host received over tls (or
// plain HTTP), and whether there was one.
func lastHeader(ti *testInternet, host string, tls bool, name string) (string, bool) {
	reqs := ti.requests(host)
	for i := len(reqs) - 1; i >= 0; i-- {
		if reqs[i].TLS == tls {
			return reqs[i].Header.Get(name), true
		}
	}
	return "", false
}

// TestSecretInjectedAtEgress: a secret set on /v1 reaches the one host a
// sandbox's rule names, over HTTPS (the egress proxy intercepts with the
// daemon's CA, which the sandbox trusts through its own trust store) and
// over HTTP, in the header the rule sets, replacing what the sandbox sent.
// The sandbox never holds the value: not in its environment, any
// process's /proc/*/environ, any file it can read, or any output; nor does
// the daemon's log. A placeholder the sandbox sends to another host arrives
// as typed. A live update that drops the rule stops the injection for the
// next connection; another owner's rule naming the secret gets a refusal,
// not the value; a rule with a bad placeholder is refused with nothing made.
func TestSecretInjectedAtEgress(t *testing.T) {
	t.Parallel()
	ti := newTestInternet(t)
	caFile := filepath.Join(t.TempDir(), "upstream-ca.pem")
	if err := os.WriteFile(caFile, ti.caPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	d := harness.Start(t, sandpitBin, harness.Options{Args: []string{"--egress-resolver", ti.dnsURL, "--egress-ca", caFile}})
	ctx := ctxFor(t, 5*time.Minute)
	tokens, _ := ownerTokens(t, ctx, d.Client(), "alice", "bob")
	alice, bob := client.New(d.URL(), tokens["alice"]), client.New(d.URL(), tokens["bob"])
	value := secretValue(t)
	if _, err := alice.CreateSecret(ctx, "api-key", value); err != nil {
		t.Fatal(err)
	}

	allow := []string{"allowed.test", "other.test"}
	policy := client.Network{AllowDomains: allow, Rules: map[string][]client.NetworkRule{
		"allowed.test": withHeader("Authorization", "Bearer {{secret:api-key}}"),
	}}
	sb, err := alice.Create(ctx, client.CreateRequest{Network: &policy})
	if err != nil {
		t.Fatal(err)
	}
	if got := sb.Network; got == nil || got.Rules["allowed.test"] == nil || got.Rules["allowed.test"][0].Transform.Headers["Authorization"] != "Bearer {{secret:api-key}}" {
		t.Fatalf("stored policy %+v", got)
	}
	if s, err := alice.Secret(ctx, "api-key"); err != nil || strings.Join(s.Hosts, ",") != "allowed.test" {
		t.Fatalf("the secret's hosts: %+v %v, want allowed.test", s, err)
	}
	if err := alice.WriteFile(ctx, sb.ID, "/tmp/egress-probe", egressProbeBinary(t)); err != nil {
		t.Fatal(err)
	}
	if res, err := alice.Exec(ctx, sb.ID, client.ExecRequest{Cmd: "chmod", Args: []string{"+x", "/tmp/egress-probe"}}); err != nil || res.ExitCode != 0 {
		t.Fatalf("chmod the probe: %v %+v", err, res)
	}
	var outputs []string
	probe := func(c *client.Client, id string, args ...string) (bool, string) {
		t.Helper()
		ok, out := egressRun(t, ctx, c, id, args...)
		outputs = append(outputs, out)
		return ok, out
	}

	// HTTPS and HTTP to the ruled host: the secret is in the header, the
	// sandbox's own value of it replaced.
	for _, tc := range []struct {
		url string
		tls bool
	}{{"https://allowed.test/headers", true}, {"http://allowed.test/headers", false}} {
		if ok, out := probe(alice, sb.ID, "hget", tc.url, "Authorization", "Bearer sandbox-typed"); !ok || !strings.HasPrefix(out, "OK 200 hello allowed.test") {
			t.Fatalf("%s through the intercepting proxy: %s", tc.url, out)
		}
		if got, ok := lastHeader(ti, "allowed.test", tc.tls, "Authorization"); !ok || got != "Bearer "+value {
			t.Fatalf("%s: the upstream got Authorization %q, want the secret", tc.url, got)
		}
	}
	// Another host: TLS passes through untouched (the sandbox trusts the
	// test CA only through the probe's get), and a placeholder the sandbox
	// typed arrives as typed.
	if ok, out := probe(alice, sb.ID, "hget", "http://other.test/headers", "Authorization", "Bearer {{secret:api-key}}"); !ok {
		t.Fatalf("other.test: %s", out)
	}
	if got, _ := lastHeader(ti, "other.test", false, "Authorization"); got != "Bearer {{secret:api-key}}" {
		t.Fatalf("other.test got Authorization %q, want the placeholder as typed", got)
	}
	if ok, out := probe(alice, sb.ID, "hget", "https://other.test/headers"); ok {
		t.Fatalf("a host without a rule was intercepted (the sandbox trusts only the daemon's CA here): %s", out)
	}

	// No trace of the value inside the sandbox.
	for _, cmd := range [][]string{
		{"env"},
		{"sh", "-c", "cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'"},
		{"sh", "-c", "grep -r -l -F '" + value + "' / --exclude-dir=proc --exclude-dir=sys 2>/dev/null; echo done"},
	} {
		res, err := alice.Exec(ctx, sb.ID, client.ExecRequest{Cmd: cmd[0], Args: cmd[1:], TimeoutS: 60})
		if err != nil {
			t.Fatal(err)
		}
		outputs = append(outputs, string(res.Stdout)+string(res.Stderr))
		if cmd[0] == "env" && !strings.Contains(string(res.Stdout), "SSL_CERT_FILE=") {
			t.Errorf("the sandbox's environment names no trust store:\n%s", res.Stdout)
		}
	}
	for _, out := range outputs {
		if strings.Contains(out, value) {
			t.Fatalf("the sandbox saw the secret's value: %s", out)
		}
	}

	// A live update without the rule: the next connection carries the
	// sandbox's own header.
	if _, err := alice.UpdateNetwork(ctx, sb.ID, client.Network{AllowDomains: allow}); err != nil {
		t.Fatal(err)
	}
	if ok, out := probe(alice, sb.ID, "hget", "http://allowed.test/headers", "Authorization", "Bearer sandbox-typed"); !ok {
		t.Fatalf("after the update: %s", out)
	}
	if got, _ := lastHeader(ti, "allowed.test", false, "Authorization"); got != "Bearer sandbox-typed" {
		t.Fatalf("after the rule was removed the upstream got Authorization %q", got)
	}

	// Bob names alice's secret: his request is refused by the proxy, and
	// nothing with the value reaches the upstream.
	before := len(ti.requests("allowed.test"))
	bsb, err := bob.Create(ctx, client.CreateRequest{Network: &policy})
	if err != nil {
		t.Fatal(err)
	}
	if err := bob.WriteFile(ctx, bsb.ID, "/tmp/egress-probe", egressProbeBinary(t)); err != nil {
		t.Fatal(err)
	}
	if res, err := bob.Exec(ctx, bsb.ID, client.ExecRequest{Cmd: "chmod", Args: []string{"+x", "/tmp/egress-probe"}}); err != nil || res.ExitCode != 0 {
		t.Fatalf("chmod the probe: %v %+v", err, res)
	}
	if _, out := probe(bob, bsb.ID, "hget", "https://allowed.test/headers"); !strings.HasPrefix(out, "OK 502") || strings.Contains(out, value) {
		t.Fatalf("bob's rule naming alice's secret: %s", out)
	}
	if after := len(ti.requests("allowed.test")); after != before {
		t.Fatalf("bob's request reached the upstream (%d requests, was %d)", after, before)
	}

	// Bad rules are refused, with no sandbox made.
	n := sandboxCount(t, ctx, d)
	for _, rules := range []map[string][]client.NetworkRule{
		{"allowed.test": withHeader("Authorization", "Bearer {{secret:api-key")},
		{"allowed.test": withHeader("Host", "x")},
		{"*": withHeader("X", "y")},
	} {
		if _, err := alice.Create(ctx, client.CreateRequest{Network: &client.Network{Rules: rules}}); apiCode(err) != "bad_request" {
			t.Errorf("create with rules %+v: %v, want bad_request", rules, err)
		}
	}
	if sandboxCount(t, ctx, d) != n {
		t.Error("a refused create made a sandbox")
	}
	if strings.Contains(d.Logs(), value) {
		t.Fatal("the daemon's log holds the secret's value")
	}
}

// TestSecretInjectedAtEgressE2B: the same through the official e2b SDK,
// unchanged: Secret.create, a create whose network.rules set a header to
// Secret.fill(name) (with allowOut from the rules' keys), a request over
// HTTPS from the sandbox that arrives with the value; getInfo shows the
// rule with its placeholder, Secret.list names only, and an update that
// leaves the rules out clears them.
func TestSecretInjectedAtEgressE2B(t *testing.T) {
	t.Parallel()
	e2bDir := harness.SDKDir(t, "e2b", "e2b")
	ti := newTestInternet(t)
	dir := t.TempDir()
	caFile, probePath := filepath.Join(dir, "upstream-ca.pem"), filepath.Join(dir, "probe")
	if err := os.WriteFile(caFile, ti.caPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(probePath, egressProbeBinary(t), 0o755); err != nil {
		t.Fatal(err)
	}
	d := harness.Start(t, sandpitBin, harness.Options{Args: []string{"--egress-resolver", ti.dnsURL, "--egress-ca", caFile}})
	ctx := ctxFor(t, 3*time.Minute)
	value := secretValue(t)
	var res struct {
		Info struct {
			AllowOut []string
			Rules    map[string][]client.NetworkRule
		}
		HTTPS, Env, Cleared sdkReach
		List                []map[string]any
	}
	harness.RunSDK(t, ctx, e2bDir, "secrets-egress-sdk.mjs",
		[]string{"SANDPIT_URL=" + d.URL(), "SANDPIT_TOKEN=" + d.Token, "PROBE=" + probePath, "VALUE=" + value}, &res)
	if !res.HTTPS.OK || !strings.HasPrefix(res.HTTPS.Out, "OK 200 hello allowed.test") {
		t.Fatalf("the request through the rule: %+v", res.HTTPS)
	}
	reqs := ti.requests("allowed.test")
	if len(reqs) == 0 || !reqs[0].TLS || reqs[0].Header.Get("X-Api-Key") != value || reqs[0].Header.Get("X-Static") != "static-value" {
		t.Fatalf("the upstream received %+v, want X-Api-Key the secret and X-Static", reqs)
	}
	if !res.Cleared.OK {
		t.Fatalf("after the update: %+v", res.Cleared)
	}
	if got, _ := lastHeader(ti, "allowed.test", false, "X-Api-Key"); got != "sandbox-typed" {
		t.Fatalf("after the update cleared the rules the upstream got X-Api-Key %q", got)
	}
	h := res.Info.Rules["allowed.test"]
	if len(h) != 1 || h[0].Transform == nil || h[0].Transform.Headers["X-Api-Key"] != "${e2b.secrets.upstream-key}" || strings.Join(res.Info.AllowOut, ",") != "allowed.test" {
		t.Errorf("getInfo().network: %+v", res.Info)
	}
	if len(res.List) != 1 || res.List[0]["name"] != "upstream-key" {
		t.Errorf("Secret.list: %+v", res.List)
	}
	all := fmt.Sprint(res)
	if strings.Contains(all, value) || strings.Contains(d.Logs(), value) {
		t.Fatal("the value reached the sandbox, an answer or the daemon's log")
	}
}

// headersServer is a server for the realistic image answering go-httpbin's
// /headers shape on port 8080.
const headersServer = `import http.server, json
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        out = {}
        for k, v in self.headers.items():
            out.setdefault(k, []).append(v)
        b = json.dumps({"headers": out}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)
http.server.ThreadingHTTPServer(("0.0.0.0", 8080), H).serve_forever()
`

// TestPreviewHostFromSandbox: with a preview domain of its own and --tls
// internal, a sandbox whose egress the daemon handles resolves another
// sandbox's preview host to the daemon and reaches its public port over
// HTTPS by name, trusting the internal CA; a rule on that host sets its
// header on the way.
func TestPreviewHostFromSandbox(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{Args: []string{"--tls", "internal", "--domain", "sandpit.test"}})
	ctx := ctxFor(t, 3*time.Minute)
	c := d.Client()
	sidecar, err := c.Create(ctx, client.CreateRequest{Image: sshBaseImage})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WriteFile(ctx, sidecar.ID, "/tmp/headers.py", []byte(headersServer)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, sidecar.ID, client.ExecRequest{Cmd: "sh", Args: []string{"-c", "nohup python3 /tmp/headers.py >/tmp/headers.log 2>&1 &"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ExposePort(ctx, sidecar.ID, 8080, "http"); err != nil {
		t.Fatal(err)
	}
	_, proxyPort, _ := net.SplitHostPort(d.ProxyAddr)
	host := "8080-" + sidecar.ID + ".sandpit.test"
	sb, err := c.Create(ctx, client.CreateRequest{Image: sshBaseImage, Network: &client.Network{Rules: map[string][]client.NetworkRule{
		host: withHeader("X-Test-Token", "tok-123"),
	}}})
	if err != nil {
		t.Fatal(err)
	}
	url := "https://" + host + ":" + proxyPort + "/headers"
	var out string
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: "curl", Args: []string{"-sS", "--max-time", "10", url}, TimeoutS: 20})
		if err != nil {
			t.Fatal(err)
		}
		out = string(res.Stdout) + string(res.Stderr)
		if res.ExitCode == 0 && strings.Contains(out, "headers") || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second)
	}
	if !strings.Contains(out, `"X-Test-Token": ["tok-123"]`) {
		t.Fatalf("curl %s from the sandbox:\n%s", url, out)
	}
}
