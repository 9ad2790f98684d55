package daytona

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/api"
)

// wsClient is a tiny WebSocket client, enough to drive the event socket the
// way the SDK's Socket.IO client does.
type wsClient struct {
	t    *testing.T
	conn net.Conn
	br   *bufio.Reader
}

// dialWS opens path on srv with a WebSocket handshake and returns the client
// and the handshake response.
func dialWS(t *testing.T, srv *httptest.Server, path string) (*wsClient, *http.Response) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	var k [16]byte
	_, _ = rand.Read(k[:])
	key := base64.StdEncoding.EncodeToString(k[:])
	req := "GET " + path + " HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: " + key + "\r\nSec-WebSocket-Version: 13\r\n\r\n"
	if _, err := conn.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode == http.StatusSwitchingProtocols && resp.Header.Get("Sec-WebSocket-Accept") != wsAccept(key) {
		t.Fatalf("Sec-WebSocket-Accept = %q", resp.Header.Get("Sec-WebSocket-Accept"))
	}
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	return &wsClient{t: t, conn: conn, br: br}, resp
}

// send writes one frame, masked unless told otherwise.
func (c *wsClient) send(op byte, payload []byte, fin, mask bool) {
	c.t.Helper()
	var b []byte
	first := op
	if fin {
		first |= 0x80
	}
	b = append(b, first)
	maskBit := byte(0)
	if mask {
		maskBit = 0x80
	}
	switch l := len(payload); {
	case l <= 125:
		b = append(b, maskBit|byte(l))
	case l <= 0xFFFF:
		b = append(b, maskBit|126, byte(l>>8), byte(l))
	default:
		b = append(b, maskBit|127)
		b = binary.BigEndian.AppendUint64(b, uint64(l))
	}
	if mask {
		var m [4]byte
		_, _ = rand.Read(m[:])
		b = append(b, m[:]...)
		for i, x := range payload {
			b = append(b, x^m[i%4])
		}
	} else {
		b = append(b, payload...)
	}
	if _, err := c.conn.Write(b); err != nil {
		c.t.Fatal(err)
	}
}

func (c *wsClient) text(s string) { c.send(opText, []byte(s), true, true) }

// recv reads one server frame.
func (c *wsClient) recv() (byte, []byte) {
	c.t.Helper()
	var h [2]byte
	if _, err := io.ReadFull(c.br, h[:]); err != nil {
		c.t.Fatalf("read frame: %v", err)
	}
	if h[1]&0x80 != 0 {
		c.t.Fatal("server frame is masked")
	}
	l := uint64(h[1] & 0x7F)
	switch l {
	case 126:
		var b [2]byte
		_, _ = io.ReadFull(c.br, b[:])
		l = uint64(binary.BigEndian.Uint16(b[:]))
	case 127:
		var b [8]byte
		_, _ = io.ReadFull(c.br, b[:])
		l = binary.BigEndian.Uint64(b[:])
	}
	p := make([]byte, l)
	if _, err := io.ReadFull(c.br, p); err != nil {
		c.t.Fatalf("read payload: %v", err)
	}
	return h[0] & 0x0F, p
}

// recvText reads the next text frame.
func (c *wsClient) recvText() string {
	c.t.Helper()
	op, p := c.recv()
	if op != opText {
		c.t.Fatalf("frame opcode %d (%q), want text", op, p)
	}
	return string(p)
}

const socketPath = "/daytona/socket.io/?EIO=4&transport=websocket&source=sdk-typescript"

// handshake opens a socket and completes the Engine.IO open.
func handshake(t *testing.T, e *env) (*wsClient, openPacket) {
	t.Helper()
	c, resp := dialWS(t, e.srv, socketPath)
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("handshake status %d", resp.StatusCode)
	}
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

	// A wrong token is refused at the Socket.IO connect.
	bad, _ := handshake(t, e)
	bad.text(`40{"token":"wrong"}`)
	if msg := bad.recvText(); msg != `44{"message":"Unauthorized"}` {
		t.Fatalf("bad token answer %q", msg)
	}

	c, open := handshake(t, e)
	c.text(`40{"token":"` + testToken + `"}`)
	msg := c.recvText()
	var ack struct {
		SID string `json:"sid"`
	}
	if !strings.HasPrefix(msg, "40") || json.Unmarshal([]byte(msg[2:]), &ack) != nil || ack.SID != open.SID {
		t.Fatalf("connect answer %q", msg)
	}
	// Engine.IO ping from the client and a WebSocket-level ping.
	c.text("2")
	if msg := c.recvText(); msg != "3" {
		t.Fatalf("pong %q", msg)
	}
	c.send(opPing, []byte("hi"), true, true)
	if op, p := c.recv(); op != opPong || string(p) != "hi" {
		t.Fatalf("ws pong %d %q", op, p)
	}
	// A fragmented message is reassembled (here, a pong, which is ignored).
	c.send(opText, []byte("3"), false, true)
	c.send(opContinuation, []byte(""), true, true)

	// State changes made through the facade are pushed.
	sb := e.create(map[string]any{"name": "evented"})
	want := []string{`42["sandbox.created",`, `42["sandbox.state.updated",`}
	for _, w := range want {
		if msg := c.recvText(); !strings.HasPrefix(msg, w) || !strings.Contains(msg, sb.ID) {
			t.Fatalf("event %q, want prefix %q", msg, w)
		}
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
	if op, _ := c.recv(); op != opClose {
		t.Fatalf("after 41: opcode %d, want close", op)
	}
	deadline := time.Now().Add(5 * time.Second)
	for e.h.hub.size() != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := e.h.hub.size(); n != 0 {
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

	// An unmasked client frame breaks RFC 6455: the server closes with 1002.
	c, _ := handshake(t, e)
	c.send(opText, []byte("40{}"), true, false)
	op, p := c.recv()
	if op != opClose || len(p) < 2 || binary.BigEndian.Uint16(p) != closeProtocolError {
		t.Fatalf("unmasked frame: opcode %d payload %q", op, p)
	}

	// Invalid UTF-8 in a text message: 1007.
	c, _ = handshake(t, e)
	c.send(opText, []byte{0xff, 0xfe}, true, true)
	if op, p := c.recv(); op != opClose || binary.BigEndian.Uint16(p) != closeInvalidPayload {
		t.Fatalf("invalid UTF-8: opcode %d payload %q", op, p)
	}

	// A client close is answered with a close.
	c, _ = handshake(t, e)
	c.send(opClose, []byte{0x03, 0xe8}, true, true)
	if op, _ := c.recv(); op != opClose {
		t.Fatalf("close: opcode %d", op)
	}
}

func TestSocketClosesWithTheDaemon(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	h := New(ctx, e.h.svc, api.NewAuth(e.h.svc, testToken), Options{})
	srv := httptest.NewServer(h)
	defer srv.Close()
	c, resp := dialWS(t, srv, socketPath)
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("status %d", resp.StatusCode)
	}
	c.recvText() // open
	cancel()
	if op, p := c.recv(); op != opClose || binary.BigEndian.Uint16(p) != closeGoingAway {
		t.Fatalf("after shutdown: opcode %d payload %q", op, p)
	}
}
