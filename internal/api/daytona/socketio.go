package daytona

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/api"
	"github.com/sandpit-dev/sandpit/internal/events"
	"github.com/sandpit-dev/sandpit/internal/identity"
)

// This file serves the Daytona event socket: the Engine.IO v4 / Socket.IO v5
// protocol over a WebSocket, reduced to what the SDK's event dispatcher uses.
// Without it the SDK still works, but Node keeps the process alive for minutes
// retrying the connection; with it the SDK connects, unrefs the socket and the
// process exits as soon as the caller's work is done.
//
// Engine.IO frames are text: a one-digit packet type followed by data
// (0 open, 1 close, 2 ping, 3 pong, 4 message). A Socket.IO packet travels
// inside a message: a one-digit type (0 connect, 1 disconnect, 2 event,
// 4 connect error), an optional "/namespace," and a JSON payload.

// Engine.IO timing announced in the open packet. The server pings every
// pingInterval and drops a client that has not answered within pingTimeout.
const (
	pingInterval   = 25 * time.Second
	pingTimeout    = 20 * time.Second
	maxSocketFrame = 1_000_000
	// sendQueue bounds the events queued for one socket; a client that falls
	// that far behind is disconnected rather than allowed to grow memory.
	sendQueue = 64
)

// Events the SDK listens for.
const (
	eventStateUpdated = "sandbox.state.updated"
	eventCreated      = "sandbox.created"
)

// hub is the set of authenticated sockets, to which sandbox events are
// broadcast. A socket receives the events of its principal's owner's
// sandboxes only (an admin's receives all); the SDK filters them further by
// sandbox id.
type hub struct {
	mu    sync.Mutex
	conns map[*sioConn]struct{}
}

func newHub() *hub { return &hub{conns: map[*sioConn]struct{}{}} }

func (h *hub) add(c *sioConn) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.conns[c] = struct{}{}
}

func (h *hub) remove(c *sioConn) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.conns, c)
}

// broadcast queues one Socket.IO event for every authenticated socket, its
// payload rendered for that socket (sandboxes carry the toolbox URL the
// client reached the daemon by). It never blocks: a socket whose queue is
// full is closed instead.
func (h *hub) broadcast(owner, event string, payload func(c *sioConn) any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for c := range h.conns {
		// A socket sees only its own owner's sandboxes; admin sees all.
		if !c.who.Admin && c.who.Owner != owner {
			continue
		}
		// A socket whose token was revoked or expired gets nothing more:
		// the revocation cancelled its session before it was acknowledged,
		// so this check sees it.
		if c.session != nil && c.session.Err() != nil {
			continue
		}
		b, err := json.Marshal([]any{event, payload(c)})
		if err != nil {
			continue
		}
		select {
		case c.out <- "42" + string(b):
		default:
			delete(h.conns, c)
			c.kill()
		}
	}
}

// size returns the number of authenticated sockets (tests use it).
func (h *hub) size() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.conns)
}

// sioConn is one Socket.IO client.
type sioConn struct {
	// who is the principal the socket authenticated as; it is set before
	// the socket joins the hub and never changes.
	who sandpit.Principal
	// toolbox is the toolbox URL as this client reaches the daemon.
	toolbox string
	ws      *websocket.Conn
	out     chan string
	done    chan struct{}
	once    sync.Once
	// authed is set once the client's connect packet carried the token.
	authed atomic.Bool
	// refused is set when the socket is closed for a bad token.
	refused atomic.Bool
	// session is the socket's session of its token (identity.Service.OpenSession),
	// set with who; release ends it. ended is closed when the session
	// ends, which closes the socket.
	session context.Context
	release func()
	ended   chan struct{}
}

// kill ends the connection's writer, which closes the socket.
func (c *sioConn) kill() { c.once.Do(func() { close(c.done) }) }

// refuse sends a last packet and closes the socket.
func (c *sioConn) refuse(msg string) {
	c.refused.Store(true)
	c.enqueue(msg)
	c.kill()
}

// openPacket is the Engine.IO handshake.
type openPacket struct {
	SID          string   `json:"sid"`
	Upgrades     []string `json:"upgrades"`
	PingInterval int      `json:"pingInterval"`
	PingTimeout  int      `json:"pingTimeout"`
	MaxPayload   int      `json:"maxPayload"`
}

// newSID returns a random session id.
func newSID() string {
	var b [15]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// engineError answers a request the Engine.IO server cannot take, in the
// JSON shape Engine.IO servers use ({"code":N,"message":"..."}).
func engineError(w http.ResponseWriter, code int, msg string) {
	api.WriteJSON(w, http.StatusBadRequest, map[string]any{"code": code, "message": msg})
}

// serveSocket handles GET {prefix}/socket.io/.
func (h *eventAPI) serveSocket(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if q.Get("EIO") != "4" {
		engineError(w, 5, "Unsupported protocol version")
		return
	}
	if q.Get("transport") != "websocket" || !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		// Only the WebSocket transport is offered; the SDK asks for nothing
		// else, and a long-polling client learns it here at once.
		engineError(w, 0, "Transport unknown")
		return
	}
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{
		// The socket authenticates with the API token inside its first
		// Socket.IO packet, never with cookies, so a page of another origin
		// gains nothing by opening one; and the SDK outside a browser sends
		// no Origin to check.
		InsecureSkipVerify: true,
	})
	if err != nil {
		h.log.Debug("daytona socket: upgrade failed", "err", err)
		return
	}
	ws.SetReadLimit(maxSocketFrame)
	c := &sioConn{toolbox: h.toolboxBase(r), ws: ws, out: make(chan string, sendQueue), done: make(chan struct{}), ended: make(chan struct{})}
	sid := newSID()
	open, _ := json.Marshal(openPacket{
		SID: sid, Upgrades: []string{},
		PingInterval: int(pingInterval / time.Millisecond), PingTimeout: int(pingTimeout / time.Millisecond),
		MaxPayload: maxSocketFrame,
	})
	if err := h.write(ws, "0"+string(open)); err != nil {
		ws.Close(websocket.StatusGoingAway, "")
		return
	}
	pongs := make(chan struct{}, 1)
	go h.socketWriter(c, pongs)
	defer func() {
		h.hub.remove(c)
		c.kill()
		if c.release != nil {
			c.release()
		}
	}()
	for {
		// Reads take no deadline: the writer closes the socket, with a
		// close frame, on shutdown, on a ping timeout and when the client
		// does not authenticate in time, and the close ends the read.
		typ, msg, err := ws.Read(context.Background())
		if err != nil {
			if websocket.CloseStatus(err) == -1 && h.ctx.Err() == nil {
				h.log.Debug("daytona socket: read", "err", err)
			}
			return
		}
		if typ != websocket.MessageText || len(msg) == 0 {
			continue
		}
		switch msg[0] {
		case '1': // Engine.IO close
			return
		case '2': // a ping from the client (Engine.IO v3 habit); answer it
			c.enqueue("3" + string(msg[1:]))
		case '3':
			select {
			case pongs <- struct{}{}:
			default:
			}
		case '4':
			if !h.socketMessage(c, sid, string(msg[1:])) {
				return
			}
		}
	}
}

// writeTimeout bounds one frame's write; a client that does not take a frame
// within it is gone.
const writeTimeout = 10 * time.Second

func (h *eventAPI) write(ws *websocket.Conn, msg string) error {
	// Not bounded by the daemon's lifetime: a write cut by the shutdown
	// would close the connection without a close frame, while the writer
	// closes it with "going away" right after.
	ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
	defer cancel()
	return ws.Write(ctx, websocket.MessageText, []byte(msg))
}

// enqueue queues a frame for the writer without blocking; a full queue means
// the client is not reading, and it is disconnected.
func (c *sioConn) enqueue(msg string) {
	select {
	case c.out <- msg:
	default:
		c.kill()
	}
}

// socketMessage handles one Socket.IO packet; false ends the connection.
func (h *eventAPI) socketMessage(c *sioConn, sid, pkt string) bool {
	if pkt == "" {
		return true
	}
	typ, rest := pkt[0], pkt[1:]
	nsp := "/"
	if strings.HasPrefix(rest, "/") {
		n, after, _ := strings.Cut(rest, ",")
		nsp, rest = n, after
	}
	switch typ {
	case '0': // connect, with the auth object as payload
		if nsp != "/" {
			c.enqueue("44" + nsp + `,{"message":"Invalid namespace"}`)
			return true
		}
		var auth struct {
			Token string `json:"token"`
		}
		if rest != "" {
			_ = json.Unmarshal([]byte(rest), &auth)
		}
		p, err := h.auth.Principal(h.ctx, auth.Token)
		if err != nil || !p.May(sandpit.ActionRead) {
			// The refusal is sent, then the socket closed: a client with a
			// wrong token has nothing more to do here.
			c.refuse(`44{"message":"Unauthorized"}`)
			return false
		}
		// The socket is a session of the token: revoking or expiring the
		// token closes it, and a token holding its cap of sessions is
		// refused.
		sess, release, err := h.auth.OpenSession(sandpit.WithPrincipal(h.ctx, p))
		if err != nil {
			msg := "Unauthorized"
			if errors.Is(err, identity.ErrTooManyStreams) {
				msg = "Too many open streams for this token"
			}
			c.refuse(`44{"message":"` + msg + `"}`)
			return false
		}
		context.AfterFunc(sess, func() {
			if cause := context.Cause(sess); errors.Is(cause, identity.ErrTokenRevoked) || errors.Is(cause, identity.ErrTokenExpired) {
				close(c.ended)
			}
		})
		c.who, c.session, c.release = p, sess, release
		b, _ := json.Marshal(map[string]string{"sid": sid})
		c.enqueue("40" + string(b))
		c.authed.Store(true)
		h.hub.add(c)
	case '1': // the client left the namespace
		h.hub.remove(c)
		return false
	}
	// Events and acks from the client carry nothing Sandpit acts on.
	return true
}

// socketWriter owns the socket's outgoing side: queued packets, the periodic
// ping, and closing when the client stops answering, when the connection is
// killed, or when the daemon shuts down (hijacked connections are not closed
// by http.Server.Shutdown, so the handler's context does it).
func (h *eventAPI) socketWriter(c *sioConn, pongs <-chan struct{}) {
	ping := time.NewTicker(pingInterval)
	defer ping.Stop()
	// A client must authenticate within authTimeout of connecting; one that
	// does not is closed, so idle unauthenticated sockets cannot pile up.
	auth := time.NewTimer(h.authTimeout)
	defer auth.Stop()
	var deadline <-chan time.Time
	for {
		select {
		case <-auth.C:
			if !c.authed.Load() {
				c.ws.Close(websocket.StatusPolicyViolation, "not authenticated in time")
				return
			}
		case msg := <-c.out:
			if err := h.write(c.ws, msg); err != nil {
				c.ws.Close(websocket.StatusGoingAway, "")
				return
			}
		case <-ping.C:
			if err := h.write(c.ws, "2"); err != nil {
				c.ws.Close(websocket.StatusGoingAway, "")
				return
			}
			if deadline == nil {
				deadline = time.After(pingTimeout)
			}
		case <-pongs:
			deadline = nil
		case <-deadline:
			c.ws.Close(websocket.StatusPolicyViolation, "ping timeout")
			return
		case <-c.done:
			// Frames queued before the end (a refusal) go out first.
			for {
				select {
				case msg := <-c.out:
					if h.write(c.ws, msg) != nil {
						c.ws.Close(websocket.StatusGoingAway, "")
						return
					}
					continue
				default:
				}
				break
			}
			status, reason := websocket.StatusNormalClosure, ""
			if c.refused.Load() {
				status, reason = websocket.StatusPolicyViolation, "unauthorized"
			}
			c.ws.Close(status, reason)
			return
		case <-h.ctx.Done():
			c.ws.Close(websocket.StatusGoingAway, "server shutting down")
			return
		case <-c.ended:
			c.ws.Close(websocket.StatusPolicyViolation, "the token was revoked or expired")
			return
		}
	}
}

// relayEvents announces the service's sandbox state changes, whichever
// surface or background task made them, on every socket until ctx ends.
func (h *eventAPI) relayEvents(ctx context.Context, sub *events.Subscription) {
	defer func() { sub.Close() }()
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-sub.C():
			if !ok {
				// Dropped as too slow (or the service is shutting down):
				// subscribe again rather than go silent.
				if ctx.Err() != nil {
					return
				}
				sub = h.svc.Events().Subscribe(eventBuffer)
				continue
			}
			if e.IsBuild() || e.Type == events.NetworkDenied {
				continue // Daytona's socket speaks of sandbox states only
			}
			h.announce(ctx, e)
		}
	}
}

// eventBuffer is how far the relay may fall behind the service.
const eventBuffer = 1024

// announce sends one state change as the SDK expects it: sandbox.created for
// a new sandbox, and sandbox.state.updated with the old and new state for
// every change.
func (h *eventAPI) announce(ctx context.Context, e events.Event) {
	old, state, desired := daytonaState(e.OldState), daytonaState(e.Sandbox.State), ""
	if e.Gone() {
		state, desired = stateDestroyed, stateDestroyed
		// Deleted by any surface or by the sweeper: its PTYs' sizes go
		// with it (ids are never reused, so nothing newer is dropped).
		h.ptys.dropSandbox(e.Sandbox.ID)
	}
	render := func(c *sioConn) Sandbox {
		sb := h.sandboxes.renderSandbox(c.toolbox, e.Sandbox, true)
		// A subscriber that may not execute sees env keys, not values.
		sb.Env = sandpit.RedactEnv(sandpit.WithPrincipal(ctx, c.who), sb.Env)
		if desired != "" {
			sb.State, sb.DesiredState = state, desired
		}
		return sb
	}
	if e.Type == events.Created {
		h.hub.broadcast(e.Sandbox.Owner, eventCreated, func(c *sioConn) any { return render(c) })
	}
	if old != state {
		h.hub.broadcast(e.Sandbox.Owner, eventStateUpdated, func(c *sioConn) any {
			return map[string]any{"sandbox": render(c), "oldState": old, "newState": state}
		})
	}
	if h.log.Enabled(ctx, slog.LevelDebug) {
		h.log.Debug("daytona event", "sandbox", e.Sandbox.ID, "old", old, "new", state)
	}
}
