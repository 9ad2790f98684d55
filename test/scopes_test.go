package sandpit_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/apitypes"
	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/test/harness"
)

// scopeTable fetches GET /v1/scopes.
func scopeTable(t *testing.T, ctx context.Context, d *harness.Daemon, token string) apitypes.ScopeTable {
	t.Helper()
	got := raw(t, ctx, d, token, "GET", "/v1/scopes", "")
	if got.Status != 200 {
		t.Fatalf("GET /v1/scopes: %d %s", got.Status, got.Body)
	}
	var tbl apitypes.ScopeTable
	if err := json.Unmarshal(got.Body, &tbl); err != nil {
		t.Fatal(err)
	}
	return tbl
}

// scopeDocTable renders the scope table as docs/tokens.md prints it.
func scopeDocTable(tbl apitypes.ScopeTable) string {
	var b strings.Builder
	b.WriteString("| scope | actions |\n|---|---|\n")
	for _, s := range tbl.Scopes {
		b.WriteString("| `" + s.Scope + "` | " + strings.Join(s.Actions, ", ") + " |\n")
	}
	b.WriteString("\n| surface | route | action |\n|---|---|---|\n")
	for _, r := range tbl.Routes {
		a := r.Action
		if r.Note != "" {
			a += " (" + r.Note + ")"
		}
		b.WriteString("| `" + r.Surface + "` | `" + r.Pattern + "` | " + a + " |\n")
	}
	return b.String()
}

const (
	scopeDocBegin = "<!-- scope table: generated from GET /v1/scopes, checked by TestScopeTable -->\n"
	scopeDocEnd   = "<!-- end of scope table -->"
)

// concretePath fills a route pattern's wildcards with values that reach the
// handler: the sandbox's id, and names that need not exist.
func concretePath(pattern, id string) string {
	r := strings.NewReplacer("{id}", id, "{idOrName}", id, "{port}", "8080", "{sessionId}", "nosession",
		"{commandId}", "nocommand", "{contextId}", "nocontext", "{interval}", "5", "{token}", "notoken",
		"{hostname}", "nohost.example.test", "{name}", "notoken", "{owner}", "team", "{key}", "nokey")
	return r.Replace(pattern)
}

// TestScopeTable: every route of every surface declares its action, the
// documentation prints exactly the table the daemon enforces, and a
// read-only token is refused (403) by every route that does more than
// read, on its own sandbox, before anything happens.
func TestScopeTable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	admin := d.Client(client.WithRetry(client.RetryPolicy{MaxAttempts: 1}))
	ro, err := admin.CreateToken(ctx, client.TokenRequest{Name: "team-ro", Owner: "team", Scopes: []string{"sandboxes:read"}})
	if err != nil {
		t.Fatal(err)
	}
	rw, err := admin.CreateToken(ctx, client.TokenRequest{Name: "team-rw", Owner: "team"})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := client.New(d.Addr, rw.Secret).Create(ctx, client.CreateRequest{Name: "scoped", Env: map[string]string{"SECRET": "hunter2"}})
	if err != nil {
		t.Fatal(err)
	}
	tbl := scopeTable(t, ctx, d, ro.Secret)

	// The documentation's table is the daemon's.
	docPath := filepath.Join("..", "docs", "tokens.md")
	doc, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	want := scopeDocBegin + scopeDocTable(tbl) + scopeDocEnd
	i, j := strings.Index(string(doc), scopeDocBegin), strings.Index(string(doc), scopeDocEnd)
	if i < 0 || j < i {
		t.Fatalf("docs/tokens.md has no scope table between %q and %q", scopeDocBegin, scopeDocEnd)
	}
	if got := string(doc)[i : j+len(scopeDocEnd)]; got != want {
		if os.Getenv("SANDPIT_UPDATE_DOCS") != "" {
			if err := os.WriteFile(docPath, []byte(string(doc)[:i]+want+string(doc)[j+len(scopeDocEnd):]), 0o644); err != nil {
				t.Fatal(err)
			}
		} else {
			t.Errorf("docs/tokens.md's scope table differs from GET /v1/scopes (SANDPIT_UPDATE_DOCS=1 rewrites it); want:\n%s", want)
		}
	}

	seen := map[string]bool{}
	for _, rt := range tbl.Routes {
		if rt.Action == "" {
			t.Errorf("%s %s declares no action", rt.Surface, rt.Pattern)
		}
		seen[rt.Surface] = true
		method, path, ok := strings.Cut(rt.Pattern, " ")
		if !ok || rt.Pattern == "GET /v1/events" {
			// The agent passthrough decides per path; its cases are below.
			// The event stream (a read) never ends, and is covered by
			// the redaction tests.
			continue
		}
		if rt.Surface != "/v1" {
			path = rt.Surface + path
		}
		path = concretePath(path, sb.ID)
		hdr := []string{"X-API-KEY", ro.Secret}
		got := raw(t, ctx, d, ro.Secret, method, path, "{}", hdr...)
		readOnly := rt.Action == "read" || rt.Action == "read-files"
		switch {
		case !readOnly && got.Status != http.StatusForbidden:
			t.Errorf("read token: %s %s (%s) answered %d %s, want 403", method, path, rt.Action, got.Status, got.Body)
		case readOnly && got.Status == http.StatusForbidden:
			t.Errorf("read token: %s %s (%s) answered 403 %s", method, path, rt.Action, got.Body)
		}
	}
	for _, s := range []string{"/v1", "/e2b", "/daytona"} {
		if !seen[s] {
			t.Errorf("GET /v1/scopes lists no route of %s", s)
		}
	}

	// The agent passthrough: reads pass, anything that writes or runs is
	// refused.
	for _, c := range []struct {
		method, rest string
		status       int
	}{
		{"GET", "health", 200},
		{"POST", "filesystem.Filesystem/ListDir", 200},
		{"POST", "filesystem.Filesystem/Remove", 403},
		{"POST", "filesystem.Filesystem/MakeDir", 403},
		{"POST", "files?path=/tmp/x", 403},
		{"POST", "process.Process/Start", 403},
		{"POST", "process.Process/SendInput", 403},
		{"POST", "no.Such/Path", 403},
	} {
		body := "{}"
		if strings.HasPrefix(c.rest, "filesystem.") {
			body = `{"path":"/tmp"}`
		}
		got := raw(t, ctx, d, ro.Secret, c.method, "/v1/sandboxes/"+sb.ID+"/agent/"+c.rest, body)
		if (c.status == 403) != (got.Status == 403) {
			t.Errorf("read token: %s agent/%s answered %d %s, want %d", c.method, c.rest, got.Status, got.Body, c.status)
		}
	}
	// The sandbox is as it was: nothing a refused request asked for
	// happened.
	ports, err := admin.ListPorts(ctx, sb.ID)
	if err != nil || len(ports) != 0 {
		t.Fatalf("after the refused requests the sandbox has ports %v (%v)", ports, err)
	}
	if got, err := admin.Get(ctx, sb.ID); err != nil || got.State != "running" {
		t.Fatalf("after the refused requests: %+v %v", got, err)
	}
}

// TestReadTokenRunsNoCode reproduces the attacks of a read-only token: the
// Daytona PTY WebSockets, the interpreter, E2B's envd access token and
// connect, Daytona's preview URLs, and env values. Each is refused or
// redacted; the same requests on another owner's sandbox are 404.
func TestReadTokenRunsNoCode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	admin := d.Client(client.WithRetry(client.RetryPolicy{MaxAttempts: 1}))
	mint := func(name, owner string, scopes ...string) string {
		tok, err := admin.CreateToken(ctx, client.TokenRequest{Name: name, Owner: owner, Scopes: scopes})
		if err != nil {
			t.Fatal(err)
		}
		return tok.Secret
	}
	ro, rw, other := mint("alice-ro", "alice", "sandboxes:read"), mint("alice-rw", "alice"), mint("bob-rw", "bob")
	sb, err := client.New(d.Addr, rw).Create(ctx, client.CreateRequest{Env: map[string]string{"SECRET": "hunter2"}})
	if err != nil {
		t.Fatal(err)
	}
	id := sb.ID

	wsHeaders := []string{"Connection", "Upgrade", "Upgrade", "websocket", "Sec-WebSocket-Version", "13", "Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="}
	attacks := []struct {
		what, method, path string
		hdr                []string
		body               string // a POST's default is an exec body
	}{
		{"Daytona PTY create-connect", "GET", "/daytona/toolbox/" + id + "/process/pty/create-connect?id=p1&cols=80&rows=24", wsHeaders, ""},
		{"Daytona PTY connect", "GET", "/daytona/toolbox/" + id + "/process/pty/p1/connect", wsHeaders, ""},
		{"Daytona interpreter", "GET", "/daytona/toolbox/" + id + "/process/interpreter/execute", wsHeaders, ""},
		{"Daytona preview URL", "GET", "/daytona/sandbox/" + id + "/ports/5432/preview-url", nil, ""},
		{"Daytona signed preview URL", "GET", "/daytona/sandbox/" + id + "/ports/6000/signed-preview-url?expiresInSeconds=60", nil, ""},
		{"E2B connect", "POST", "/e2b/sandboxes/" + id + "/connect", []string{"X-API-KEY", ro}, ""},
		{"v1 exec", "POST", "/v1/sandboxes/" + id + "/exec", nil, ""},
		{"v1 PTY", "GET", "/v1/sandboxes/" + id + "/pty", wsHeaders, ""},
		// Changing egress rules or reading the key that signs file URLs
		// is more than reading.
		{"v1 network update", "PUT", "/v1/sandboxes/" + id + "/network", nil, `{"egress":"none"}`},
		{"E2B network update", "PUT", "/e2b/sandboxes/" + id + "/network", []string{"X-API-KEY", ro}, `{"allowOut":["1.1.1.1"]}`},
		{"Daytona network settings", "POST", "/daytona/sandbox/" + id + "/network-settings", nil, `{"networkBlockAll":true}`},
		{"v1 resize", "PUT", "/v1/sandboxes/" + id + "/resources", nil, `{"memory_mb":512}`},
		{"Daytona SSH access", "POST", "/daytona/sandbox/" + id + "/ssh-access?expiresInMinutes=5", nil, `{}`},
		{"Daytona SSH access revocation", "DELETE", "/daytona/sandbox/" + id + "/ssh-access", nil, ""},
		{"Daytona resize", "POST", "/daytona/sandbox/" + id + "/resize", nil, `{"memory":1}`},
		{"Daytona signing key", "GET", "/daytona/sandbox/" + id + "/signing-key", nil, ""},
		{"Daytona signing key rotation", "POST", "/daytona/sandbox/" + id + "/signing-key/rotate", nil, `{}`},
	}
	for _, a := range attacks {
		body := a.body
		if a.method == "POST" && body == "" {
			body = `{"cmd":"id"}`
		}
		if got := raw(t, ctx, d, ro, a.method, a.path, body, a.hdr...); got.Status != http.StatusForbidden {
			t.Errorf("read token, %s: %d %s, want 403", a.what, got.Status, got.Body)
		}
		// Another owner that may execute does not learn the sandbox exists.
		hdr := a.hdr
		if strings.HasPrefix(a.path, "/e2b/") {
			hdr = []string{"X-API-KEY", other}
		}
		if got := raw(t, ctx, d, other, a.method, a.path, body, hdr...); got.Status != http.StatusNotFound {
			t.Errorf("another owner, %s: %d %s, want 404", a.what, got.Status, got.Body)
		}
	}
	if ports, err := admin.ListPorts(ctx, id); err != nil || len(ports) != 0 {
		t.Fatalf("the refused preview URLs exposed %v (%v)", ports, err)
	}
	if after, err := admin.Get(ctx, id); err != nil || after.Network != nil {
		t.Fatalf("the refused network updates changed the policy to %+v (%v)", after.Network, err)
	}

	// Reads: no envd access token, no env values.
	var detail struct {
		EnvdAccessToken string `json:"envdAccessToken"`
	}
	got := raw(t, ctx, d, ro, "GET", "/e2b/sandboxes/"+id, "", "X-API-KEY", ro)
	if got.Status != 200 || json.Unmarshal(got.Body, &detail) != nil || detail.EnvdAccessToken != "" {
		t.Errorf("read token, E2B get: %d %s, want 200 without envdAccessToken", got.Status, got.Body)
	}
	got = raw(t, ctx, d, rw, "GET", "/e2b/sandboxes/"+id, "", "X-API-KEY", rw)
	if json.Unmarshal(got.Body, &detail) != nil || detail.EnvdAccessToken == "" {
		t.Errorf("write token, E2B get: %d %s, want the envdAccessToken", got.Status, got.Body)
	}
	for _, path := range []string{"/v1/sandboxes/" + id, "/daytona/sandbox/" + id} {
		var out struct {
			Env map[string]string `json:"env"`
		}
		got := raw(t, ctx, d, ro, "GET", path, "")
		if got.Status != 200 || json.Unmarshal(got.Body, &out) != nil || out.Env["SECRET"] != "[redacted]" || strings.Contains(string(got.Body), "hunter2") {
			t.Errorf("read token, GET %s: %d %s, want env SECRET [redacted]", path, got.Status, got.Body)
		}
		got = raw(t, ctx, d, rw, "GET", path, "")
		if json.Unmarshal(got.Body, &out) != nil || out.Env["SECRET"] != "hunter2" {
			t.Errorf("write token, GET %s: %d %s, want env SECRET hunter2", path, got.Status, got.Body)
		}
	}
	// A sandbox that does not exist is the same 403 for a read token, so a
	// refusal tells nothing about which ids exist.
	if got := raw(t, ctx, d, ro, "POST", "/v1/sandboxes/sb_doesnotexist/exec", `{"cmd":"id"}`); got.Status != http.StatusForbidden {
		t.Errorf("read token, exec on a missing sandbox: %d %s, want 403", got.Status, got.Body)
	}
}
