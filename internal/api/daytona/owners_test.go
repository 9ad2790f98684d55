package daytona

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/api"
	"github.com/sandpit-dev/sandpit/internal/identity"
)

// TestHubSendsEventsToTheOwnerOnly: a socket receives the events of its own
// owner's sandboxes, an admin socket every owner's.
func TestHubSendsEventsToTheOwnerOnly(t *testing.T) {
	h := newHub()
	conn := func(p sandpit.Principal) *sioConn {
		c := &sioConn{who: p, out: make(chan string, 4), done: make(chan struct{})}
		h.add(c)
		return c
	}
	alice := conn(sandpit.Principal{Owner: "alice"})
	bob := conn(sandpit.Principal{Owner: "bob"})
	admin := conn(api.AdminPrincipal())
	h.broadcast("alice", eventCreated, func(*sioConn) any { return map[string]string{"id": "sb-a"} })
	if len(alice.out) != 1 || len(admin.out) != 1 || len(bob.out) != 0 {
		t.Fatalf("queued: alice %d, admin %d, bob %d; want 1, 1, 0", len(alice.out), len(admin.out), len(bob.out))
	}
}

// TestEventStreamIsScopedByOwner: over the real facade, a socket
// authenticated with B's personal access token never hears of A's sandbox,
// while A's own socket does.
func TestEventStreamIsScopedByOwner(t *testing.T) {
	e := newEnv(t)
	adminCtx := sandpit.WithPrincipal(context.Background(), api.AdminPrincipal())
	mint := func(name string) string {
		ct, err := e.svc.Identity().CreateToken(adminCtx, identity.TokenRequest{Name: name, Owner: name})
		if err != nil {
			t.Fatal(err)
		}
		return ct.Secret
	}
	tokA, tokB := mint("alice"), mint("bob")
	connect := func(tok string) *wsClient {
		c, _ := handshake(t, e.srv)
		c.text(`40{"token":"` + tok + `"}`)
		if msg := c.recvText(); !strings.HasPrefix(msg, "40{") {
			t.Fatalf("connect answer %q", msg)
		}
		return c
	}
	sockA, sockB := connect(tokA), connect(tokB)

	req, _ := http.NewRequest("POST", e.srv.URL+"/daytona/sandbox", strings.NewReader(`{"name":"owned-by-alice"}`))
	req.Header.Set("Authorization", "Bearer "+tokA)
	req.Header.Set("Content-Type", "application/json")
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var sb Sandbox
	_ = json.NewDecoder(resp.Body).Decode(&sb)
	resp.Body.Close()
	if resp.StatusCode != 200 || sb.ID == "" {
		t.Fatalf("alice's create: %d", resp.StatusCode)
	}
	t.Cleanup(func() { _ = e.svc.DeleteSandbox(adminCtx, sb.ID) })
	if msg := sockA.recvText(); !strings.Contains(msg, sb.ID) {
		t.Fatalf("alice's socket got %q, want her sandbox's event", msg)
	}
	// Bob's socket answers a ping with nothing of Alice's queued before it.
	sockB.text("2")
	if msg, err := sockB.read(5 * time.Second); err != nil || msg != "3" {
		t.Fatalf("bob's socket got %q before its pong: another owner's event leaked", msg)
	}
}
