package sandpit_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/test/harness"
)

// raw sends one request with a bearer token and returns status, body and
// whether it was an idempotent replay.
func raw(t *testing.T, ctx context.Context, d *harness.Daemon, token, method, path, body string, hdr ...string) harness.Answer {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, d.URL()+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return harness.Answer{Status: resp.StatusCode, Body: b, Replayed: resp.Header.Get("Idempotent-Replayed") == "true"}
}

// cli runs the sandpit CLI against d with the admin token file.
func cli(t *testing.T, ctx context.Context, d *harness.Daemon, args ...string) string {
	t.Helper()
	full := append([]string{"--addr", d.Addr, "--token-file", filepath.Join(d.DataDir, "admin-token")}, args...)
	cmd := exec.CommandContext(ctx, sandpitBin, full...)
	cmd.Env = append(os.Environ(), "SANDPIT_TOKEN=")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("sandpit %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out)
}

func apiCode(err error) string {
	var e *client.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

func ids(sbs []client.Sandbox) []string {
	var out []string
	for _, sb := range sbs {
		out = append(out, sb.ID)
	}
	return out
}

// TestOwnersTokensQuotasAudit is the acceptance of personal access tokens:
// two owners on one daemon see only their own sandboxes through every /v1
// route, keyed creates are idempotent per owner, revoked and expired tokens
// are refused with no side effect, an owner's quota stops its third create,
// the database holds no token in clear, and the audit log names who did what.
func TestOwnersTokensQuotasAudit(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	admin := d.Client(client.WithRetry(client.RetryPolicy{MaxAttempts: 1}))

	// Alice's token through the CLI (printed once on stdout), with a quota
	// of two sandboxes; Bob's through the API.
	tokA := strings.TrimSpace(cli(t, ctx, d, "token", "create", "--name", "alice-ci", "--owner", "alice", "--expires", "30d", "--max-sandboxes", "2"))
	if !strings.HasPrefix(tokA, "spt_") {
		t.Fatalf("token create printed %q", tokA)
	}
	bt, err := admin.CreateToken(ctx, client.TokenRequest{Name: "bob-ci", Owner: "bob"})
	if err != nil {
		t.Fatal(err)
	}
	tokB := bt.Secret
	if _, err := admin.CreateToken(ctx, client.TokenRequest{Name: "bob-ci", Owner: "bob"}); apiCode(err) != "token_name_conflict" {
		t.Fatalf("second live token named bob-ci: %v, want token_name_conflict", err)
	}
	noRetry := client.WithRetry(client.RetryPolicy{MaxAttempts: 1})
	a := client.New(d.Addr, tokA, noRetry)
	b := client.New(d.Addr, tokB, noRetry)

	sbA, err := a.Create(ctx, client.CreateRequest{Name: "alice-box", Labels: map[string]string{"who": "alice"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.ExposePort(ctx, sbA.ID, 8080, "http"); err != nil {
		t.Fatal(err)
	}

	// Every /v1 route on Alice's sandbox is a 404 for Bob.
	notFound := map[string]error{}
	_, notFound["get"] = b.Get(ctx, sbA.ID)
	_, notFound["exec"] = b.Exec(ctx, sbA.ID, client.ExecRequest{Cmd: "true"})
	notFound["read file"] = b.ReadFile(ctx, sbA.ID, "/etc/hostname", io.Discard)
	notFound["write file"] = b.WriteFile(ctx, sbA.ID, "/tmp/x", []byte("x"))
	_, notFound["list ports"] = b.ListPorts(ctx, sbA.ID)
	_, notFound["expose"] = b.ExposePort(ctx, sbA.ID, 9090, "http")
	notFound["unexpose"] = b.UnexposePort(ctx, sbA.ID, 8080)
	_, notFound["add domain"] = b.AddDomain(ctx, sbA.ID, "bob.example.test", 8080)
	_, notFound["list domains"] = b.ListDomains(ctx, sbA.ID)
	_, notFound["stop"] = b.Stop(ctx, sbA.ID)
	notFound["delete"] = b.Delete(ctx, sbA.ID)
	for what, err := range notFound {
		if apiCode(err) != "not_found" {
			t.Errorf("bob %s on alice's sandbox: %v, want 404 not_found", what, err)
		}
	}
	if got := raw(t, ctx, d, tokB, "GET", "/v1/sandboxes/"+sbA.ID+"/agent/health", ""); got.Status != 404 {
		t.Errorf("bob through the agent route: %d %s, want 404", got.Status, got.Body)
	}
	if _, err := a.Get(ctx, sbA.ID); err != nil {
		t.Fatalf("alice lost her sandbox to bob's attempts: %v", err)
	}
	if ps, err := a.ListPorts(ctx, sbA.ID); err != nil || len(ps) != 1 {
		t.Fatalf("alice's ports after bob's unexpose: %v %v", ps, err)
	}
	listB, _, err := b.List(ctx, client.ListOptions{})
	if err != nil || slices.Contains(ids(listB), sbA.ID) {
		t.Fatalf("bob's list %v (err %v) includes alice's sandbox", ids(listB), err)
	}
	listAdmin, _, err := admin.List(ctx, client.ListOptions{})
	if err != nil || !slices.Contains(ids(listAdmin), sbA.ID) {
		t.Fatalf("admin's list %v (err %v) lacks alice's sandbox", ids(listAdmin), err)
	}

	// Names are unique per daemon; the conflict does not reveal the id.
	conflict := raw(t, ctx, d, tokB, "POST", "/v1/sandboxes", `{"name":"alice-box"}`)
	if conflict.Status != 409 || conflict.Code() != "name_conflict" || bytes.Contains(conflict.Body, []byte(sbA.ID)) {
		t.Fatalf("bob creating alice's name: %d %s", conflict.Status, conflict.Body)
	}

	// The same Idempotency-Key and body from both owners: two sandboxes.
	body := `{"labels":{"job":"same"}}`
	ka := raw(t, ctx, d, tokA, "POST", "/v1/sandboxes", body, "Idempotency-Key", "shared-key-1")
	kb := raw(t, ctx, d, tokB, "POST", "/v1/sandboxes", body, "Idempotency-Key", "shared-key-1")
	if ka.Status != 201 || kb.Status != 201 || kb.Replayed || ka.ID() == kb.ID() {
		t.Fatalf("same key from two owners: alice %d %s, bob %d replayed=%v %s", ka.Status, ka.Body, kb.Status, kb.Replayed, kb.Body)
	}
	// Each owner's own retry still replays its own answer.
	if again := raw(t, ctx, d, tokB, "POST", "/v1/sandboxes", body, "Idempotency-Key", "shared-key-1"); !again.Replayed || again.ID() != kb.ID() {
		t.Fatalf("bob's retry: replayed=%v id %s, want a replay of %s", again.Replayed, again.ID(), kb.ID())
	}

	// Quota: alice holds two sandboxes, her limit; the third is refused and
	// nothing is made.
	before := len(d.Containers(t))
	_, err = a.Create(ctx, client.CreateRequest{Name: "alice-third"})
	var qe *client.Error
	if !errors.As(err, &qe) || qe.Status != 429 || qe.Code != "quota_exceeded" || !strings.Contains(qe.Message, "max_sandboxes") {
		t.Fatalf("alice's third create: %v, want 429 quota_exceeded naming max_sandboxes", err)
	}
	if after := len(d.Containers(t)); after != before {
		t.Fatalf("a refused create made a container: %d -> %d", before, after)
	}
	if _, err := admin.Get(ctx, "alice-third"); err == nil {
		t.Fatal("a refused create left a row")
	}
	// Port quota, set through the owner-limits command: a retry of an
	// existing exposure passes, a new one past the limit does not.
	if out := cli(t, ctx, d, "owner", "limits", "alice", "--max-sandboxes", "2", "--max-ports", "1"); !strings.Contains(out, "ports     1 / 1") {
		t.Fatalf("owner limits:\n%s", out)
	}
	if _, err := a.ExposePort(ctx, sbA.ID, 8080, "http"); err != nil {
		t.Fatalf("re-exposing an exposed port under the port quota: %v", err)
	}
	if _, err := a.ExposePort(ctx, sbA.ID, 9090, "http"); !errors.As(err, &qe) || qe.Code != "quota_exceeded" || !strings.Contains(qe.Message, "max_ports") {
		t.Fatalf("a second port over max_ports 1: %v", err)
	}
	if err := a.Delete(ctx, ka.ID()); err != nil {
		t.Fatal(err)
	}

	// A read-only token reads but cannot write.
	ro, err := admin.CreateToken(ctx, client.TokenRequest{Name: "alice-ro", Owner: "alice", Scopes: []string{"sandboxes:read"}})
	if err != nil {
		t.Fatal(err)
	}
	r := client.New(d.Addr, ro.Secret, noRetry)
	if _, err := r.Get(ctx, sbA.ID); err != nil {
		t.Fatalf("read-only token reading its owner's sandbox: %v", err)
	}
	if _, err := r.Create(ctx, client.CreateRequest{}); apiCode(err) != "forbidden" {
		t.Fatalf("read-only token creating: %v, want 403 forbidden", err)
	}
	if _, err := b.ListTokens(ctx, false); apiCode(err) != "forbidden" {
		t.Fatalf("bob listing tokens: %v, want 403 forbidden", err)
	}

	// Revocation takes effect on the next request; other tokens carry on,
	// and a refused create makes nothing.
	if out := cli(t, ctx, d, "token", "revoke", "bob-ci"); strings.TrimSpace(out) != "bob-ci" {
		t.Fatalf("token revoke printed %q", out)
	}
	n := sandboxCount(t, ctx, d)
	if got := raw(t, ctx, d, tokB, "POST", "/v1/sandboxes", `{}`); got.Status != 401 || strings.Contains(string(got.Body), tokB) {
		t.Fatalf("create with a revoked token: %d %s", got.Status, got.Body)
	}
	if _, err := b.Get(ctx, kb.ID()); apiCode(err) != "unauthorized" {
		t.Fatalf("revoked token: %v, want 401", err)
	}
	if sandboxCount(t, ctx, d) != n {
		t.Fatal("a request with a revoked token made a sandbox")
	}
	if _, err := a.Get(ctx, sbA.ID); err != nil {
		t.Fatalf("alice's token after bob's revocation: %v", err)
	}

	// Expiry.
	short, err := admin.CreateToken(ctx, client.TokenRequest{Name: "short", Owner: "carol", ExpiresInS: 1})
	if err != nil {
		t.Fatal(err)
	}
	sc := client.New(d.Addr, short.Secret, noRetry)
	if _, _, err := sc.List(ctx, client.ListOptions{}); err != nil {
		t.Fatalf("fresh token: %v", err)
	}
	time.Sleep(1200 * time.Millisecond)
	if _, _, err := sc.List(ctx, client.ListOptions{}); apiCode(err) != "unauthorized" {
		t.Fatalf("expired token: %v, want 401", err)
	}

	// token list shows names, owners, prefixes and last use, never secrets.
	listing := cli(t, ctx, d, "token", "list", "--all")
	for _, want := range []string{"alice-ci", "alice", "bob-ci", "sandboxes:write", strings.Split(tokA, "_")[1]} {
		if !strings.Contains(listing, want) {
			t.Errorf("token list lacks %q:\n%s", want, listing)
		}
	}

	// No token in clear in the database, its WAL, or the daemon's log.
	for _, f := range []string{"sandpit.db", "sandpit.db-wal"} {
		data, err := os.ReadFile(filepath.Join(d.DataDir, f))
		if err != nil {
			if f == "sandpit.db" {
				t.Fatal(err)
			}
			continue
		}
		for _, tok := range []string{tokA, tokB, ro.Secret, short.Secret} {
			// spt_<hex prefix>_<base64url secret>: the secret's own
			// alphabet has '_', so it is what follows the second one.
			secret := strings.SplitN(tok, "_", 3)[2]
			if len(secret) < 40 {
				t.Fatalf("token %q: secret %q is not the whole secret", tok, secret)
			}
			if bytes.Contains(data, []byte(secret)) {
				t.Errorf("%s holds a token secret in clear", f)
			}
		}
	}
	for _, tok := range []string{tokA, tokB, d.Token} {
		if strings.Contains(d.Logs(), tok) || strings.Contains(listing, tok) {
			t.Error("a token appears in the daemon's log or the token listing")
		}
	}

	// The audit log names the creates, deletes and revocations by token.
	entries, _, err := admin.Audit(ctx, client.AuditOptions{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	has := func(token, action, resource, outcome string) bool {
		for _, e := range entries {
			if e.TokenName == token && e.Action == action && (resource == "" || e.Resource == resource) && e.Outcome == outcome {
				return true
			}
		}
		return false
	}
	for _, c := range []struct{ token, action, resource, outcome string }{
		{"admin", "token.create", "alice-ci", "ok"},
		{"alice-ci", "sandbox.create", sbA.ID, "ok"},
		{"alice-ci", "sandbox.create", ka.ID(), "ok"},
		{"bob-ci", "sandbox.create", kb.ID(), "ok"},
		{"alice-ci", "sandbox.create", "alice-third", "quota_exceeded"},
		{"alice-ci", "sandbox.delete", ka.ID(), "ok"},
		{"alice-ci", "port.expose", sbA.ID + ":8080", "ok"},
		{"admin", "token.revoke", "bob-ci", "ok"},
	} {
		if !has(c.token, c.action, c.resource, c.outcome) {
			b, _ := json.MarshalIndent(entries, "", " ")
			t.Errorf("audit log lacks %+v:\n%s", c, b)
		}
	}
	for _, e := range entries {
		for _, tok := range []string{tokA, tokB, d.Token} {
			if strings.Contains(e.Detail, tok) || strings.Contains(e.Resource, tok) {
				t.Errorf("audit entry %d holds a token", e.Seq)
			}
		}
	}
	if out := cli(t, ctx, d, "audit"); !strings.Contains(out, "token.revoke") || !strings.Contains(out, "alice-ci") {
		t.Errorf("sandpit audit:\n%s", out)
	}
}
