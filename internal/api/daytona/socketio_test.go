package daytona

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/sandpit-dev/sandpit/internal/api"
)

// wsClient drives the event socket the way the SDK's Socket.IO client does.
type wsClient struct {
	t    *testing.T
	conn *websocket.Conn
}

const socketPath = "/daytona/socket.io/?EIO=4&transport=websocket&source=sdk-typescript"

// dialWS opens the event socket on srv.
func dialWS(t *testing.T, srv *httptest.Server) *wsClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http")+socketPath, nil)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("handshake status %d", resp.StatusCode)
	}
	t.Cleanup(func() { conn.CloseNow() })
	return &wsClient{t: t, conn: conn}
}

func (c *wsClient) text(s string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.conn.Write(ctx, websocket.MessageText, []byte(s)); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// read returns the next message, or the error that ended the socket.
func (c *wsClient) read(within time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	_, p, err := c.conn.Read(ctx)
	return string(p), err
}

func (c *wsClient) recvText() string {
	c.t.Helper()
	msg, err := c.read(10 * time.Second)
	if err != nil {
		c.t.Fatalf("read: %v", err)
	}
	return msg
}

// expectClose reads until the server closes the socket and returns the close
// status.
func (c *wsClient) expectClose(within time.Duration) websocket.StatusCode {
	c.t.Helper()
	deadline := time.Now().Add(within)
	for {
		_, err := c.read(time.Until(deadline))
		if err != nil {
			if time.Now().After(deadline) {
				c.t.Fatalf("socket still open after %s", within)
			}
			return websocket.CloseStatus(err)
		}
	}
}

// handshake opens a socket and completes the Engine.IO open.
func handshake(t *testing.T, srv *httptest.Server) (*wsClient, openPacket) {
	t.Helper()
	c := dialWS(t, srv)
	msg := c.recvText()
	if !strings.HasPrefix(msg, "0") {
		t.Fatalf("first packet %q, want open", msg)
	}
	var open openPacket
	if err := json.Unmarshal([]byte(msg[1:]), &open); err != nil || open.SID == "" || open.PingInterval <= 0 || open.PingTimeout <= 0 || open.MaxPayload <= 0 {
		t.Fatalf("open packet %q: %v", msg, err)
	}
	return c, open
}

func TestSocketHandshakeAndEvents(t *testing.T) {
	e := newEnv(t)

	c, open := handshake(t, e.srv)
	c.text(`40{"token":"` + testToken + `"}`)
	msg := c.recvText()
	var ack struct {
		SID string `json:"sid"`
	}
	if !strings.HasPrefix(msg, "40") || json.Unmarshal([]byte(msg[2:]), &ack) != nil || ack.SID != open.SID {
		t.Fatalf("connect answer %q", msg)
	}
	// Engine.IO ping from the client, and a WebSocket-level ping.
	c.text("2")
	if msg := c.recvText(); msg != "3" {
		t.Fatalf("pong %q", msg)
	}
	pingDone := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		pingDone <- c.conn.Ping(ctx)
	}()

	// State changes are pushed.
	sb := e.create(map[string]any{"name": "evented"})
	want := []string{`42["sandbox.created",`, `42["sandbox.state.updated",`}
	for _, w := range want {
		if msg := c.recvText(); !strings.HasPrefix(msg, w) || !strings.Contains(msg, sb.ID) {
			t.Fatalf("event %q, want prefix %q", msg, w)
		}
	}
	if err := <-pingDone; err != nil {
		t.Fatalf("websocket ping: %v", err)
	}
	if code, b := e.do("POST", "/daytona/sandbox/evented/stop", nil); code != 200 {
		t.Fatalf("stop: %d %s", code, b)
	}
	msg = c.recvText()
	var ev []json.RawMessage
	if !strings.HasPrefix(msg, "42") || json.Unmarshal([]byte(msg[2:]), &ev) != nil || len(ev) != 2 {
		t.Fatalf("stop event %q", msg)
	}
	var payload struct {
		Sandbox            Sandbox `json:"sandbox"`
		OldState, NewState string
	}
	if json.Unmarshal(ev[1], &payload) != nil || payload.Sandbox.ID != sb.ID || payload.OldState != "started" ||
		payload.NewState != "stopped" || payload.Sandbox.State != "stopped" {
		t.Fatalf("stop event payload %s", ev[1])
	}

	// Leaving the namespace ends the socket.
	c.text("41")
	c.expectClose(5 * time.Second)
	deadline := time.Now().Add(5 * time.Second)
	for e.h.events.hub.size() != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := e.h.events.hub.size(); n != 0 {
		t.Fatalf("%d sockets still registered", n)
	}
}

func TestSocketRefusals(t *testing.T) {
	e := newEnv(t)
	for _, path := range []string{
		"/daytona/socket.io/?EIO=4&transport=polling",
		"/daytona/socket.io/?EIO=3&transport=websocket",
	} {
		resp, err := e.srv.Client().Get(e.srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), `"code"`) {
			t.Errorf("%s: %d %s", path, resp.StatusCode, b)
		}
	}

	// A wrong token is refused at the Socket.IO connect, and the socket is
	// closed.
	bad, _ := handshake(t, e.srv)
	bad.text(`40{"token":"wrong"}`)
	if msg := bad.recvText(); msg != `44{"message":"Unauthorized"}` {
		t.Fatalf("bad token answer %q", msg)
	}
	if code := bad.expectClose(5 * time.Second); code != websocket.StatusPolicyViolation {
		t.Fatalf("bad token: close status %v, want policy violation", code)
	}
	if n := e.h.events.hub.size(); n != 0 {
		t.Fatalf("%d sockets registered after a refusal", n)
	}
}

// TestSocketAuthTimeout: a socket that never authenticates is closed once
// the authentication window passes; one that does authenticate stays.
func TestSocketAuthTimeout(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h := New(ctx, e.svc, api.NewAuth(e.svc.Identity(), testToken), Options{AuthTimeout: 300 * time.Millisecond})
	srv := httptest.NewServer(h)
	defer srv.Close()

	silent, _ := handshake(t, srv)
	authed, _ := handshake(t, srv)
	authed.text(`40{"token":"` + testToken + `"}`)
	if msg := authed.recvText(); !strings.HasPrefix(msg, "40") {
		t.Fatalf("connect answer %q", msg)
	}
	silent.expectClose(5 * time.Second)
	// Past the window, the authenticated socket still answers.
	authed.text("2")
	if msg := authed.recvText(); msg != "3" {
		t.Fatalf("authenticated socket after the window: %q", msg)
	}
}

func TestSocketClosesWithTheDaemon(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	h := New(ctx, e.svc, api.NewAuth(e.svc.Identity(), testToken), Options{})
	srv := httptest.NewServer(h)
	defer srv.Close()
	c, _ := handshake(t, srv)
	cancel()
	if code := c.expectClose(5 * time.Second); code != websocket.StatusGoingAway {
		t.Fatalf("after shutdown: close status %v, want going away", code)
	}
}
