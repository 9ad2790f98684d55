package sandpit_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/test/harness"
)

// tenantToken mints a sandboxes:write token for owner through the admin API.
func tenantToken(t *testing.T, ctx context.Context, d *harness.Daemon, owner string) string {
	t.Helper()
	tok, err := d.Client().CreateToken(ctx, client.TokenRequest{Name: owner + "-ci", Owner: owner})
	if err != nil {
		t.Fatal(err)
	}
	return tok.Secret
}

// facadeCreate sends one create through a surface as the token and returns
// the status and body: "v1" (JSON body of /v1/sandboxes), "e2b" or
// "daytona".
func facadeCreate(t *testing.T, ctx context.Context, d *harness.Daemon, token, surface, body string) (int, string) {
	t.Helper()
	var path, header string
	switch surface {
	case "v1":
		path, header = "/v1/sandboxes", "Authorization"
	case "e2b":
		path, header = "/e2b/sandboxes", "X-API-KEY"
	case "daytona":
		path, header = "/daytona/sandbox", "Authorization"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.URL()+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if header == "Authorization" {
		req.Header.Set(header, "Bearer "+token)
	} else {
		req.Header.Set(header, token)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s create: %v", surface, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// ownerSandboxes counts the sandboxes of the token's owner (a non-admin
// token lists only its own).
func ownerSandboxes(t *testing.T, ctx context.Context, d *harness.Daemon, token string) int {
	t.Helper()
	sbs, _, err := client.New(d.Addr, token).List(ctx, client.ListOptions{Limit: 500})
	if err != nil {
		t.Fatal(err)
	}
	return len(sbs)
}

// sandboxID reads the id of a created sandbox from any surface's answer.
func sandboxID(t *testing.T, body string) string {
	t.Helper()
	var v struct {
		ID        string `json:"id"`
		SandboxID string `json:"sandboxID"`
	}
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatalf("create answer %q: %v", body, err)
	}
	if v.ID != "" {
		return v.ID
	}
	return v.SandboxID
}

// TestTenantPrivateRangeCeiling reproduces "any owner lifts the
// private-range block": a non-admin owner's allow list covering private
// space is refused with 403 on every facade, with nothing made, unless the
// operator granted the owner those ranges (then the LAN listener of a
// network namespace the test runs answers); a link-local allow is a 400;
// public allows and the admin are not limited.
func TestTenantPrivateRangeCeiling(t *testing.T) {
	t.Parallel()
	fn := newFakeNet(t)
	d := harness.Start(t, sandpitBin, harness.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	tenant := tenantToken(t, ctx, d, "tenant")
	granted := tenantToken(t, ctx, d, "granted")
	cli(t, ctx, d, "owner", "limits", "granted", "--allow-private", fn.lanCIDR)

	for _, tc := range []struct{ surface, body string }{
		{"v1", `{"network":{"allow":["0.0.0.0/0"]}}`},
		{"v1", `{"network":{"allow":["` + fn.lanCIDR + `"]}}`},
		{"e2b", `{"templateID":"base","network":{"allowOut":["0.0.0.0/0"]}}`},
		{"daytona", `{"networkAllowList":"0.0.0.0/0"}`},
		{"daytona", `{"networkAllowList":"` + fn.lan + `/32"}`},
	} {
		status, body := facadeCreate(t, ctx, d, tenant, tc.surface, tc.body)
		if status != http.StatusForbidden || !strings.Contains(body, "private") {
			t.Errorf("%s %s as a tenant: %d %s, want 403 naming the private range", tc.surface, tc.body, status, body)
		}
	}
	if n := ownerSandboxes(t, ctx, d, tenant); n != 0 {
		t.Fatalf("refused creates left %d sandboxes", n)
	}
	for _, allow := range []string{"169.254.169.254/32", "169.254.0.0/16"} {
		if status, body := facadeCreate(t, ctx, d, tenant, "v1", `{"network":{"allow":["`+allow+`"]}}`); status != http.StatusBadRequest {
			t.Errorf("link-local allow %s: %d %s, want 400", allow, status, body)
		}
		if status, body := facadeCreate(t, ctx, d, d.Token, "v1", `{"network":{"allow":["`+allow+`"]}}`); status != http.StatusBadRequest {
			t.Errorf("link-local allow %s as admin: %d %s, want 400", allow, status, body)
		}
	}

	// A public allow is the tenant's own business.
	status, body := facadeCreate(t, ctx, d, tenant, "v1", `{"network":{"allow":["`+fn.internet+`/32"]}}`)
	if status != http.StatusCreated {
		t.Fatalf("public allow: %d %s", status, body)
	}
	c := d.Client()
	pub := sandboxID(t, body)
	if reaches(t, ctx, c, pub, fn.lan, fn.port) {
		t.Errorf("a tenant's sandbox reached the LAN at %s", fn.lan)
	}

	// The granted owner opens its range, and only that range.
	status, body = facadeCreate(t, ctx, d, granted, "v1", `{"network":{"allow":["`+fn.lanCIDR+`"]}}`)
	if status != http.StatusCreated {
		t.Fatalf("granted owner's allow of %s: %d %s", fn.lanCIDR, status, body)
	}
	if id := sandboxID(t, body); !reaches(t, ctx, c, id, fn.lan, fn.port) {
		t.Errorf("the granted owner's sandbox does not reach the LAN listener at %s", fn.lan)
	}
	if status, body := facadeCreate(t, ctx, d, granted, "v1", `{"network":{"allow":["0.0.0.0/0"]}}`); status != http.StatusForbidden {
		t.Errorf("granted owner's allow of 0.0.0.0/0 (beyond its grant): %d %s, want 403", status, body)
	}
	status, body = facadeCreate(t, ctx, d, granted, "daytona", `{"networkAllowList":"`+fn.lanCIDR+`"}`)
	if status/100 != 2 {
		t.Errorf("granted owner's Daytona allow of %s: %d %s", fn.lanCIDR, status, body)
	}

	// The admin is not limited.
	if status, body := facadeCreate(t, ctx, d, d.Token, "v1", `{"network":{"allow":["0.0.0.0/0"]}}`); status != http.StatusCreated {
		t.Errorf("admin allow 0.0.0.0/0: %d %s", status, body)
	}
	out := cli(t, ctx, d, "owner", "limits", "granted")
	if !strings.Contains(out, fn.lanCIDR) {
		t.Errorf("owner limits does not show the grant:\n%s", out)
	}
}

// TestTenantImagePolicy reproduces "any owner runs any image": an operator
// image on the engine (here a tag of the test image) is refused to a tenant
// on /v1 and Daytona (403, nothing made), while the default image,
// templates and --allow-image patterns run, and the admin runs anything.
func TestTenantImagePolicy(t *testing.T) {
	t.Parallel()
	tag := "t" + strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	secret, allowed := "sptest-operator-"+tag+":1", "sptest-ok-"+tag+":1"
	for _, img := range []string{secret, allowed} {
		if out, err := exec.Command("docker", "tag", "sandpit/base:test", img).CombinedOutput(); err != nil {
			t.Fatalf("docker tag %s: %v %s", img, err, out)
		}
		t.Cleanup(func() { _ = exec.Command("docker", "rmi", img).Run() })
	}
	d := harness.Start(t, sandpitBin, harness.Options{Args: []string{"--allow-image", "sptest-ok-*", "--template", "ops=" + allowed}})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	tenant := tenantToken(t, ctx, d, "tenant")

	for _, tc := range []struct{ surface, body string }{
		{"v1", `{"image":"` + secret + `"}`},
		{"daytona", `{"buildInfo":{"dockerfileContent":"FROM ` + secret + `\n"}}`},
	} {
		status, body := facadeCreate(t, ctx, d, tenant, tc.surface, tc.body)
		if status != http.StatusForbidden || !strings.Contains(body, "not allowed") {
			t.Errorf("%s %s as a tenant: %d %s, want 403", tc.surface, tc.body, status, body)
		}
	}
	if n := ownerSandboxes(t, ctx, d, tenant); n != 0 {
		t.Fatalf("refused creates left %d sandboxes", n)
	}
	for _, tc := range []struct{ surface, body string }{
		{"v1", `{}`},
		{"v1", `{"image":"` + allowed + `"}`},
		{"v1", `{"image":"sandpit/base:test"}`},
		{"e2b", `{"templateID":"ops"}`},
	} {
		if status, body := facadeCreate(t, ctx, d, tenant, tc.surface, tc.body); status/100 != 2 {
			t.Errorf("%s %s as a tenant: %d %s, want it made", tc.surface, tc.body, status, body)
		}
	}
	if status, body := facadeCreate(t, ctx, d, d.Token, "v1", `{"image":"`+secret+`"}`); status != http.StatusCreated {
		t.Errorf("admin runs %s: %d %s", secret, status, body)
	}
}

// TestTenantResourceCeilings reproduces the 256 GiB sandbox on a smaller
// host: memory above what the engine's host has is a 400 for everyone; an
// owner's per-sandbox caps refuse more, and its defaults apply to a create
// naming none. /v1/status says whether tenants can fill the host's disk.
func TestTenantResourceCeilings(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("docker", "info", "-f", "{{.MemTotal}}").Output()
	if err != nil {
		t.Fatal(err)
	}
	hostBytes, _ := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	hostMB := hostBytes >> 20
	if hostMB+1024 > 256*1024 {
		t.Skipf("the host has %d MiB, the built-in maximum already bounds it", hostMB)
	}
	d := harness.Start(t, sandpitBin, harness.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	tenant := tenantToken(t, ctx, d, "tenant")
	for _, tok := range []string{d.Token, tenant} {
		if status, body := facadeCreate(t, ctx, d, tok, "v1", fmt.Sprintf(`{"memory_mb":%d}`, hostMB+1024)); status != http.StatusBadRequest {
			t.Errorf("memory above the host's %d MiB: %d %s, want 400", hostMB, status, body)
		}
	}
	if status, body := facadeCreate(t, ctx, d, tenant, "daytona", `{"memory":256}`); status != http.StatusBadRequest {
		t.Errorf("Daytona 256 GiB: %d %s, want 400", status, body)
	}

	if a := raw(t, ctx, d, d.Token, http.MethodPut, "/v1/owners/tenant/limits",
		`{"max_sandbox_memory_mb":512,"default_memory_mb":256,"max_sandbox_cpu":0.5,"default_cpu":0.25}`); a.Status != http.StatusOK {
		t.Fatalf("PUT limits: %d %s", a.Status, a.Body)
	}
	for _, body := range []string{`{"memory_mb":1024}`, `{"cpu":1}`} {
		if status, got := facadeCreate(t, ctx, d, tenant, "v1", body); status != http.StatusBadRequest || !strings.Contains(got, "max_sandbox") {
			t.Errorf("%s above the owner's cap: %d %s, want 400", body, status, got)
		}
	}
	status, body := facadeCreate(t, ctx, d, tenant, "v1", `{}`)
	if status != http.StatusCreated {
		t.Fatalf("create within the caps: %d %s", status, body)
	}
	var sb client.Sandbox
	if err := json.Unmarshal([]byte(body), &sb); err != nil {
		t.Fatal(err)
	}
	if sb.MemoryMB != 256 || sb.CPU != 0.25 {
		t.Errorf("owner defaults: memory %d MiB cpu %g, want 256 and 0.25", sb.MemoryMB, sb.CPU)
	}

	st := raw(t, ctx, d, d.Token, http.MethodGet, "/v1/status", "")
	var status1 struct {
		Disk struct {
			LimitMB int64  `json:"limit_mb"`
			Warning string `json:"warning"`
		} `json:"disk"`
	}
	if err := json.Unmarshal(st.Body, &status1); err != nil {
		t.Fatal(err)
	}
	if status1.Disk.LimitMB == 0 && !strings.Contains(status1.Disk.Warning, "fill the host") {
		t.Errorf("no disk limit and /v1/status does not say so: %s", st.Body)
	}
	if status1.Disk.LimitMB == 0 && !strings.Contains(d.Logs(), "fill the host") {
		t.Errorf("no disk limit and the serve log does not say so")
	}
	if out := cli(t, ctx, d, "status"); status1.Disk.LimitMB == 0 && !strings.Contains(out, "UNLIMITED") {
		t.Errorf("sandpit status does not show the unlimited disk:\n%s", out)
	}
}

// TestTenantSharedNetworkSurvivesOtherDaemon reproduces "a stopping daemon
// removed a network it did not make": a second daemon (its own data
// directory) joins the first one's network, and neither its start nor its
// stop disturbs the first: the network, the first daemon's port rule and its
// sandbox's own rules stay, and its sandboxes still work.
func TestTenantSharedNetworkSurvivesOtherDaemon(t *testing.T) {
	t.Parallel()
	d1 := harness.Start(t, sandpitBin, harness.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c1 := d1.Client()
	confined, err := c1.Create(ctx, client.CreateRequest{Network: &client.Network{Egress: "none"}})
	if err != nil {
		t.Fatal(err)
	}
	instance := func(d *harness.Daemon) string {
		out, err := exec.Command("cat", d.DataDir+"/instance").Output()
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(out))[:16]
	}
	label, err := exec.Command("docker", "network", "inspect", "-f", `{{index .Labels "sandpit.instance"}}`, d1.Network).Output()
	if err != nil || strings.TrimSpace(string(label)) != instance(d1) {
		t.Fatalf("network %s instance label %q (%v), want %s", d1.Network, label, err, instance(d1))
	}

	d2 := harness.Start(t, sandpitBin, harness.Options{Args: []string{"--network-name", d1.Network}})
	mine := "sandpit-instance:" + instance(d1)
	rules := iptablesRules(t)
	if !strings.Contains(rules, "sandpit:"+confined.ID) {
		t.Errorf("the second daemon's start pruned the first one's sandbox rule:\n%s", rules)
	}
	if !strings.Contains(rules, mine) {
		t.Errorf("the second daemon's start dropped the first one's port rule:\n%s", rules)
	}
	// The second daemon makes and deletes a sandbox of its own, then stops
	// with none attached: the first daemon's sandbox has gone meanwhile too,
	// so nothing is attached when it stops.
	c2 := d2.Client()
	sb2, err := c2.Create(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c2.Delete(ctx, sb2.ID); err != nil {
		t.Fatal(err)
	}
	if err := c1.Delete(ctx, confined.ID); err != nil {
		t.Fatal(err)
	}
	d2.Stop()
	if !d2.Wait(time.Minute) {
		t.Fatal("second daemon did not stop")
	}
	if err := exec.Command("docker", "network", "inspect", d1.Network).Run(); err != nil {
		t.Fatalf("the second daemon's stop removed the first one's network %s: %v\n%s", d1.Network, err, d2.Logs())
	}
	rules = iptablesRules(t)
	if !strings.Contains(rules, "sandpit network "+d1.Network) || !strings.Contains(rules, mine) {
		t.Fatalf("the second daemon's stop removed the first one's rules:\n%s", rules)
	}
	if strings.Contains(rules, "sandpit-instance:"+instance(d2)) {
		t.Errorf("the stopped daemon's port rule remains:\n%s", rules)
	}
	// The first daemon still works: a new sandbox runs and stays confined.
	sb, err := c1.Create(ctx, client.CreateRequest{Network: &client.Network{Egress: "none"}})
	if err != nil {
		t.Fatalf("first daemon after the second one stopped: %v", err)
	}
	if res, err := c1.Exec(ctx, sb.ID, client.ExecRequest{Cmd: "echo", Args: []string{"ok"}}); err != nil || strings.TrimSpace(res.Stdout) != "ok" {
		t.Fatalf("exec: %v %+v", err, res)
	}
	if !strings.Contains(iptablesRules(t), "sandpit:"+sb.ID) {
		t.Errorf("the first daemon's new sandbox has no rules")
	}
}

// TestTenantHostPortsOnlyOnBindAddress: sandboxes reach the proxy and the
// TCP pool only on the address they are bound to (the bridge's gateway for
// a wildcard bind), not on the host's other addresses; with the default
// loopback bind a host service holding a pool port on the gateway is
// refused too.
func TestTenantHostPortsOnlyOnBindAddress(t *testing.T) {
	t.Parallel()
	t.Run("wildcard", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer cancel()
		d := harness.Start(t, sandpitBin, harness.Options{ProxyHost: "0.0.0.0"})
		c := d.Client()
		a, b := newSandbox(t, ctx, c), newSandbox(t, ctx, c)
		startEcho(t, ctx, c, b, 9000)
		fwd := mustExpose(t, ctx, d, b, 9000, "tcp", http.StatusCreated)
		gw := gateway(t, ctx, c, a)
		proxyPort := portOf(t, d.ProxyAddr)
		if got, ok := probe(t, ctx, c, a, gw, fwd.HostPort, "ping\\n"); !ok || !strings.Contains(got, "ping") {
			t.Errorf("TCP forward via the gateway: %q %v", got, ok)
		}
		if _, ok := probe(t, ctx, c, a, gw, proxyPort, ""); !ok {
			t.Errorf("proxy via the gateway refused")
		}
		h := hostAddr(t, gw)
		if h == "" {
			t.Skip("the host has no other address")
		}
		for name, port := range map[string]int{"proxy": proxyPort, "TCP forward": fwd.HostPort} {
			if got, ok := probe(t, ctx, c, a, h, port, "ping\\n"); ok {
				t.Errorf("%s on the host's address %s:%d connected: %q", name, h, port, got)
			}
		}
	})

	t.Run("loopback", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer cancel()
		d := harness.Start(t, sandpitBin, harness.Options{})
		c := d.Client()
		a := newSandbox(t, ctx, c)
		gw := gateway(t, ctx, c, a)
		lo, _, _ := strings.Cut(d.PortRange, "-")
		poolPort, _ := strconv.Atoi(lo)
		ln, err := net.Listen("tcp4", net.JoinHostPort(gw, lo))
		if err != nil {
			t.Skipf("pool port %d on the gateway is taken: %v", poolPort, err)
		}
		t.Cleanup(func() { ln.Close() })
		go serveGreeting(ln)
		if got, ok := probe(t, ctx, c, a, gw, poolPort, ""); ok {
			t.Errorf("a host service on pool port %s:%d (the pool is bound to loopback) connected: %q", gw, poolPort, got)
		}
	})
}
