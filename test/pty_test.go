package sandpit_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/test/harness"
)

// ptyTerm is the client side of GET /v1/sandboxes/{id}/pty: what the shell
// wrote so far, and the control messages it sent.
type ptyTerm struct {
	ws       *websocket.Conn
	out      chan []byte
	controls chan map[string]any
	seen     strings.Builder
	// end is why the socket ended; it is set before out closes.
	end error
}

// dialPTY opens the terminal the way a browser does: the token rides in
// the subprotocol list, beside sandpit.pty, and nowhere else.
func dialPTY(ctx context.Context, d *harness.Daemon, token, id, query string) (*ptyTerm, *http.Response, error) {
	u := "ws://" + d.Addr + "/v1/sandboxes/" + id + "/pty"
	if query != "" {
		u += "?" + query
	}
	ws, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{Subprotocols: []string{"sandpit.pty", "bearer." + token}})
	if err != nil {
		return nil, resp, err
	}
	t := &ptyTerm{ws: ws, out: make(chan []byte, 256), controls: make(chan map[string]any, 16)}
	go func() {
		defer close(t.out)
		for {
			// Bounded by the test's context, so that a socket the server
			// never ends fails the test instead of hanging it.
			typ, b, err := ws.Read(ctx)
			if err != nil {
				t.end = err
				return
			}
			if typ == websocket.MessageText {
				var m map[string]any
				_ = json.Unmarshal(b, &m)
				t.controls <- m
				continue
			}
			t.out <- b
		}
	}()
	return t, resp, nil
}

func (p *ptyTerm) send(t *testing.T, ctx context.Context, s string) {
	t.Helper()
	if err := p.ws.Write(ctx, websocket.MessageBinary, []byte(s)); err != nil {
		t.Fatalf("type %q: %v", s, err)
	}
}

// waitFor reads the terminal until its output holds want.
func (p *ptyTerm) waitFor(t *testing.T, ctx context.Context, want string) {
	t.Helper()
	for !strings.Contains(p.seen.String(), want) {
		select {
		case b, ok := <-p.out:
			if !ok {
				t.Fatalf("the terminal closed before %q appeared; it showed %q", want, p.seen.String())
			}
			p.seen.Write(b)
		case <-ctx.Done():
			t.Fatalf("%q never appeared; the terminal showed %q", want, p.seen.String())
		}
	}
}

// TestPTYWebSocket: a terminal over the native WebSocket runs a shell with
// the sandbox's environment, takes typed input and resizes, reports the
// shell's exit code; the token travels in the subprotocol; a read-only
// token, another owner and a missing token are refused before any upgrade;
// and leaving the socket ends the shell.
func TestPTYWebSocket(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	ctx := ctxFor(t, 2*time.Minute)
	admin := d.Client(client.WithRetry(client.RetryPolicy{MaxAttempts: 1}))
	mint := func(name, owner string, scopes ...string) string {
		tok, err := admin.CreateToken(ctx, client.TokenRequest{Name: name, Owner: owner, Scopes: scopes})
		if err != nil {
			t.Fatal(err)
		}
		return tok.Secret
	}
	rw, ro, other := mint("ana-rw", "ana"), mint("ana-ro", "ana", "sandboxes:read"), mint("ben-rw", "ben")
	sb, err := client.New(d.Addr, rw).Create(ctx, client.CreateRequest{Env: map[string]string{"GREETING": "hello-from-pty"}})
	if err != nil {
		t.Fatal(err)
	}

	t.Run("refusals", func(t *testing.T) {
		for _, c := range []struct {
			what, token, id, query string
			status                 int
		}{
			{"no token", "", sb.ID, "", http.StatusUnauthorized},
			{"wrong token", "not-a-token", sb.ID, "", http.StatusUnauthorized},
			{"read-only token", ro, sb.ID, "", http.StatusForbidden},
			{"another owner", other, sb.ID, "", http.StatusNotFound},
			{"no such sandbox", rw, "sb_doesnotexist", "", http.StatusNotFound},
			{"zero columns", rw, sb.ID, "cols=0&rows=24", http.StatusBadRequest},
			{"too many rows", rw, sb.ID, "cols=80&rows=100000", http.StatusBadRequest},
		} {
			_, resp, err := dialPTY(ctx, d, c.token, c.id, c.query)
			if err == nil || resp == nil || resp.StatusCode != c.status {
				got := 0
				if resp != nil {
					got = resp.StatusCode
				}
				t.Errorf("%s: dial answered %d (%v), want %d", c.what, got, err, c.status)
			}
		}
		// A token in the URL is not read: only headers carry tokens.
		if _, resp, err := websocket.Dial(ctx, "ws://"+d.Addr+"/v1/sandboxes/"+sb.ID+"/pty?token="+rw, nil); err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("token in the query: %v %v, want 401", resp, err)
		}
		// A plain GET is told the endpoint is a WebSocket.
		if got := raw(t, ctx, d, rw, "GET", "/v1/sandboxes/"+sb.ID+"/pty", ""); got.Status != http.StatusBadRequest || !strings.Contains(string(got.Body), "WebSocket") {
			t.Errorf("plain GET: %d %s, want 400 naming WebSocket", got.Status, got.Body)
		}
	})

	t.Run("session", func(t *testing.T) {
		term, resp, err := dialPTY(ctx, d, rw, sb.ID, "cols=80&rows=24")
		if err != nil {
			t.Fatalf("dial: %v (%v)", err, resp)
		}
		defer term.ws.CloseNow()
		if got := term.ws.Subprotocol(); got != "sandpit.pty" {
			t.Fatalf("negotiated subprotocol %q, want sandpit.pty (never the token's)", got)
		}
		term.send(t, ctx, "echo \"[$GREETING]\"\r")
		term.waitFor(t, ctx, "[hello-from-pty]")

		// Resize, then ask the terminal its size.
		if err := term.ws.Write(ctx, websocket.MessageText, []byte(`{"type":"resize","cols":100,"rows":30}`)); err != nil {
			t.Fatal(err)
		}
		term.send(t, ctx, "stty size | sed 's/^/size=/'\r")
		term.waitFor(t, ctx, "size=30 100")

		// A malformed control message is answered, and the session goes on.
		if err := term.ws.Write(ctx, websocket.MessageText, []byte(`{"type":"resize","cols":0,"rows":0}`)); err != nil {
			t.Fatal(err)
		}
		select {
		case m := <-term.controls:
			if m["type"] != "error" {
				t.Fatalf("bad resize answered %v, want an error message", m)
			}
		case <-ctx.Done():
			t.Fatal("no answer to a bad resize")
		}

		term.send(t, ctx, "exit 3\r")
		select {
		case m := <-term.controls:
			if m["type"] != "exit" || m["exit_code"] != float64(3) {
				t.Fatalf("control message %v, want exit with exit_code 3", m)
			}
		case <-ctx.Done():
			t.Fatalf("no exit message; the terminal showed %q", term.seen.String())
		}
		for range term.out {
			// Drain until the server closes.
		}
		if websocket.CloseStatus(term.end) != websocket.StatusNormalClosure {
			t.Fatalf("after exit the socket closed with %v, want a normal closure", term.end)
		}
	})

	t.Run("leaving ends the shell", func(t *testing.T) {
		term, resp, err := dialPTY(ctx, d, rw, sb.ID, "")
		if err != nil {
			t.Fatalf("dial: %v (%v)", err, resp)
		}
		term.send(t, ctx, "echo ready; exec sleep 7777\r")
		term.waitFor(t, ctx, "ready")
		running := func() bool {
			res, err := admin.Exec(ctx, sb.ID, client.ExecRequest{Cmd: "sh", Args: []string{"-c", "ps -o args | grep -c '^sleep 7777' || true"}})
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(50 * time.Millisecond) // a poll's pause, not a bound
			return strings.TrimSpace(res.Stdout) != "0"
		}
		for !running() {
			if ctx.Err() != nil {
				t.Fatal("the shell's sleep never showed in ps")
			}
		}
		term.ws.Close(websocket.StatusNormalClosure, "bye")
		for running() {
			if ctx.Err() != nil {
				t.Fatal("the terminal's sleep still runs after the socket closed")
			}
		}
	})

	t.Run("revoking the token ends the terminal", func(t *testing.T) {
		tok := mint("ana-short", "ana")
		term, resp, err := dialPTY(ctx, d, tok, sb.ID, "")
		if err != nil {
			t.Fatalf("dial: %v (%v)", err, resp)
		}
		defer term.ws.CloseNow()
		term.send(t, ctx, "echo before-revoke\r")
		term.waitFor(t, ctx, "before-revoke")
		if _, err := admin.RevokeToken(ctx, "ana-short"); err != nil {
			t.Fatal(err)
		}
		for range term.out {
			// The server ends the socket; nothing waits for the shell.
		}
		if ctx.Err() != nil {
			t.Fatal("the terminal outlived its token")
		}
	})
}
