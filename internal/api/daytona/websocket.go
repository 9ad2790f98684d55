package daytona

import (
	"bufio"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// This file is a minimal RFC 6455 WebSocket server: enough for the Socket.IO
// client inside the Daytona SDK, which is its only user. It exists because
// go.mod has no WebSocket module and the project adds no dependencies for one
// small endpoint. It supports text and binary messages, fragmentation, ping,
// pong and close; it negotiates no extensions and no subprotocols.

// WebSocket opcodes.
const (
	opContinuation = 0x0
	opText         = 0x1
	opBinary       = 0x2
	opClose        = 0x8
	opPing         = 0x9
	opPong         = 0xA
)

// Close status codes used here.
const (
	closeNormal          = 1000
	closeGoingAway       = 1001
	closeProtocolError   = 1002
	closeInvalidPayload  = 1007
	closePolicyViolation = 1008
	closeTooBig          = 1009
)

// wsGUID is the fixed string RFC 6455 appends to the client's key.
const wsGUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

var (
	// errNotWebSocket: the request is not a WebSocket upgrade.
	errNotWebSocket = errors.New("not a websocket upgrade request")
	// errWSClosed: the peer closed the connection (or sent a close frame).
	errWSClosed = errors.New("websocket closed")
	// errWSProtocol: the peer broke the framing rules.
	errWSProtocol = errors.New("websocket protocol error")
)

// wsConn is one server-side WebSocket connection. Reads happen on one
// goroutine only; writes may come from several, so they are serialised.
type wsConn struct {
	conn       net.Conn
	br         *bufio.Reader
	maxMessage int

	wmu    sync.Mutex
	closed bool
}

// wsAccept computes Sec-WebSocket-Accept for a client key.
func wsAccept(key string) string {
	h := sha1.Sum([]byte(key + wsGUID))
	return base64.StdEncoding.EncodeToString(h[:])
}

// headerHasToken reports whether a comma-separated header contains token,
// case-insensitively (browsers send "keep-alive, Upgrade").
func headerHasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for _, part := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(part), token) {
				return true
			}
		}
	}
	return false
}

// isWebSocketUpgrade reports whether r asks for a WebSocket.
func isWebSocketUpgrade(r *http.Request) bool {
	return r.Method == http.MethodGet &&
		headerHasToken(r.Header, "Connection", "upgrade") &&
		headerHasToken(r.Header, "Upgrade", "websocket")
}

// upgradeWebSocket validates the handshake, hijacks the connection and
// answers 101. On a bad handshake it writes a 400 itself and returns an error.
func upgradeWebSocket(w http.ResponseWriter, r *http.Request, maxMessage int) (*wsConn, error) {
	if !isWebSocketUpgrade(r) {
		return nil, errNotWebSocket
	}
	if r.Header.Get("Sec-WebSocket-Version") != "13" {
		w.Header().Set("Sec-WebSocket-Version", "13")
		http.Error(w, "unsupported websocket version", http.StatusBadRequest)
		return nil, fmt.Errorf("%w: version %q", errNotWebSocket, r.Header.Get("Sec-WebSocket-Version"))
	}
	key := r.Header.Get("Sec-WebSocket-Key")
	if raw, err := base64.StdEncoding.DecodeString(key); err != nil || len(raw) != 16 {
		http.Error(w, "bad Sec-WebSocket-Key", http.StatusBadRequest)
		return nil, fmt.Errorf("%w: bad key", errNotWebSocket)
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		http.Error(w, "websocket upgrade unavailable", http.StatusInternalServerError)
		return nil, fmt.Errorf("hijack: %w", err)
	}
	// The server's read and write deadlines were set for ordinary requests;
	// a socket lives as long as its client, so they are lifted.
	_ = conn.SetDeadline(time.Time{})
	resp := "HTTP/1.1 101 Switching Protocols\r\n" +
		"Upgrade: websocket\r\n" +
		"Connection: Upgrade\r\n" +
		"Sec-WebSocket-Accept: " + wsAccept(key) + "\r\n\r\n"
	if _, err := brw.Writer.WriteString(resp); err != nil {
		conn.Close()
		return nil, err
	}
	if err := brw.Writer.Flush(); err != nil {
		conn.Close()
		return nil, err
	}
	return &wsConn{conn: conn, br: brw.Reader, maxMessage: maxMessage}, nil
}

// writeFrame writes one unfragmented, unmasked frame (servers never mask).
func (c *wsConn) writeFrame(op byte, payload []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.closed {
		return errWSClosed
	}
	var hdr [10]byte
	hdr[0] = 0x80 | op
	n := 2
	switch l := len(payload); {
	case l <= 125:
		hdr[1] = byte(l)
	case l <= 0xFFFF:
		hdr[1] = 126
		binary.BigEndian.PutUint16(hdr[2:], uint16(l))
		n = 4
	default:
		hdr[1] = 127
		binary.BigEndian.PutUint64(hdr[2:], uint64(l))
		n = 10
	}
	// A stuck client must not pin a writer forever.
	_ = c.conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.conn.Write(append(hdr[:n:n], payload...)); err != nil {
		return err
	}
	return nil
}

// WriteText sends a text message.
func (c *wsConn) WriteText(s string) error { return c.writeFrame(opText, []byte(s)) }

// Close sends a close frame with code and reason (best effort) and closes the
// connection. It is safe to call more than once.
func (c *wsConn) Close(code int, reason string) error {
	payload := make([]byte, 2, 2+len(reason))
	binary.BigEndian.PutUint16(payload, uint16(code))
	payload = append(payload, reason...)
	_ = c.writeFrame(opClose, payload)
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	return c.conn.Close()
}

// frame is one decoded frame.
type frame struct {
	fin     bool
	op      byte
	payload []byte
}

// readFrame reads and unmasks one frame, enforcing the rules a server must:
// client frames are masked, reserved bits are clear, control frames are short
// and final, and no frame exceeds the message limit.
func (c *wsConn) readFrame() (frame, error) {
	var h [2]byte
	if _, err := io.ReadFull(c.br, h[:]); err != nil {
		return frame{}, err
	}
	f := frame{fin: h[0]&0x80 != 0, op: h[0] & 0x0F}
	if h[0]&0x70 != 0 {
		return f, fmt.Errorf("%w: reserved bits set without an extension", errWSProtocol)
	}
	if h[1]&0x80 == 0 {
		return f, fmt.Errorf("%w: client frame not masked", errWSProtocol)
	}
	length := uint64(h[1] & 0x7F)
	switch length {
	case 126:
		var b [2]byte
		if _, err := io.ReadFull(c.br, b[:]); err != nil {
			return f, err
		}
		length = uint64(binary.BigEndian.Uint16(b[:]))
	case 127:
		var b [8]byte
		if _, err := io.ReadFull(c.br, b[:]); err != nil {
			return f, err
		}
		length = binary.BigEndian.Uint64(b[:])
	}
	if f.op >= opClose {
		if !f.fin || length > 125 {
			return f, fmt.Errorf("%w: control frame fragmented or longer than 125 bytes", errWSProtocol)
		}
	} else if length > uint64(c.maxMessage) {
		return f, errMessageTooBig
	}
	var mask [4]byte
	if _, err := io.ReadFull(c.br, mask[:]); err != nil {
		return f, err
	}
	f.payload = make([]byte, length)
	if _, err := io.ReadFull(c.br, f.payload); err != nil {
		return f, err
	}
	for i := range f.payload {
		f.payload[i] ^= mask[i%4]
	}
	return f, nil
}

// errMessageTooBig: a message exceeds maxMessage.
var errMessageTooBig = errors.New("websocket message too big")

// ReadMessage returns the next complete data message, answering pings and
// close frames on the way. It returns errWSClosed once the peer has closed.
func (c *wsConn) ReadMessage() (op byte, msg []byte, err error) {
	var buf []byte
	var msgOp byte
	for {
		f, err := c.readFrame()
		if err != nil {
			switch {
			case errors.Is(err, errWSProtocol):
				_ = c.Close(closeProtocolError, "protocol error")
			case errors.Is(err, errMessageTooBig):
				_ = c.Close(closeTooBig, "message too big")
			}
			return 0, nil, err
		}
		switch f.op {
		case opPing:
			if err := c.writeFrame(opPong, f.payload); err != nil {
				return 0, nil, err
			}
			continue
		case opPong:
			continue
		case opClose:
			code := closeNormal
			if len(f.payload) >= 2 {
				code = int(binary.BigEndian.Uint16(f.payload))
			}
			_ = c.Close(code, "")
			return 0, nil, errWSClosed
		case opText, opBinary:
			if buf != nil {
				_ = c.Close(closeProtocolError, "new message inside a fragmented one")
				return 0, nil, fmt.Errorf("%w: interleaved data message", errWSProtocol)
			}
			msgOp = f.op
			buf = f.payload
		case opContinuation:
			if buf == nil {
				_ = c.Close(closeProtocolError, "continuation without a message")
				return 0, nil, fmt.Errorf("%w: stray continuation", errWSProtocol)
			}
			if len(buf)+len(f.payload) > c.maxMessage {
				_ = c.Close(closeTooBig, "message too big")
				return 0, nil, errMessageTooBig
			}
			buf = append(buf, f.payload...)
		default:
			_ = c.Close(closeProtocolError, "unknown opcode")
			return 0, nil, fmt.Errorf("%w: opcode %d", errWSProtocol, f.op)
		}
		if !f.fin {
			continue
		}
		if msgOp == opText && !utf8.Valid(buf) {
			_ = c.Close(closeInvalidPayload, "invalid UTF-8")
			return 0, nil, fmt.Errorf("%w: invalid UTF-8 in a text message", errWSProtocol)
		}
		if buf == nil {
			buf = []byte{}
		}
		return msgOp, buf, nil
	}
}
