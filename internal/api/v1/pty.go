package v1

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/coder/websocket"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/agentapi"
	"github.com/sandpit-dev/sandpit/internal/api"
	"github.com/sandpit-dev/sandpit/internal/httpguard"
	"github.com/sandpit-dev/sandpit/proto/process"
)

// GET /v1/sandboxes/{id}/pty is an interactive shell under a
// pseudo-terminal, over a WebSocket, for clients that cannot speak the
// agent protocol's streams (a browser cannot stream a request body, nor put
// an Authorization header on a WebSocket). Binary frames carry the
// terminal's bytes both ways; text frames carry JSON control messages: the
// client sends {"type":"resize","cols":C,"rows":R}, the server sends
// {"type":"exit","exit_code":N} when the shell ends, or
// {"type":"error","message":"..."} when it cannot be served, and closes.
// Closing the socket ends the shell: a terminal nobody sees has no use.
//
// The token may come in the Authorization header or, for a browser, as the
// subprotocol "bearer.<token>" beside PTYSubprotocol (see
// api.WebSocketBearer), so it never appears in a URL or an access log.

// PTYSubprotocol is the WebSocket subprotocol of the PTY route; the server
// selects it, never the one that carries the token.
const PTYSubprotocol = "sandpit.pty"

const (
	maxPTYSize = 1000
	// ptyInputLimit bounds one frame from the client (a paste).
	ptyInputLimit = 1 << 20
	// ptyKillWait bounds how long a left terminal's shell is waited for
	// after it was sent SIGKILL.
	ptyKillWait = 10 * time.Second
)

// ptyControl is a control message of the PTY WebSocket, either way.
type ptyControl struct {
	Type     string `json:"type"`
	Cols     int    `json:"cols,omitempty"`
	Rows     int    `json:"rows,omitempty"`
	ExitCode *int   `json:"exit_code,omitempty"`
	Message  string `json:"message,omitempty"`
}

// ptySize reads the cols and rows query parameters (80 by 24 when absent).
func ptySize(r *http.Request) (cols, rows int, err error) {
	cols, rows = 80, 24
	for _, f := range []struct {
		name string
		v    *int
	}{{"cols", &cols}, {"rows", &rows}} {
		s := r.URL.Query().Get(f.name)
		if s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxPTYSize {
			return 0, 0, fmt.Errorf("%w: %s must be an integer from 1 to %d", sandpit.ErrInvalid, f.name, maxPTYSize)
		}
		*f.v = n
	}
	return cols, rows, nil
}

// ptyShell starts bash where the image has it, sh otherwise, as a login
// shell so that the image's profile sets the prompt and PATH.
var ptyShell = []string{"-c", "command -v bash >/dev/null 2>&1 && exec bash -l; exec sh -l"}

func (h *Handler) pty(w http.ResponseWriter, r *http.Request) {
	cols, rows, err := ptySize(r)
	if err != nil {
		fail(w, err)
		return
	}
	if !api.IsWebSocket(r) {
		fail(w, fmt.Errorf("%w: this endpoint is a WebSocket (subprotocol %s)", sandpit.ErrInvalid, PTYSubprotocol))
		return
	}
	// Everything that can be refused is refused before the upgrade, as a
	// plain HTTP error: the sandbox is looked up as the caller (another
	// owner's is not found), and a stopped one has no agent.
	id := r.PathValue("id")
	agent, err := h.svc.Agent(r.Context(), id)
	if err != nil {
		fail(w, err)
		return
	}
	// The terminal is a session of the token: it ends when the token is
	// revoked or expires, and counts against the token's cap of streams.
	ctx, release, err := h.auth.OpenSession(r.Context())
	if err != nil {
		fail(w, err)
		return
	}
	defer release()
	h.svc.Touch(ctx, id, false)
	// The socket lasts as long as the shell: no read deadline of the
	// request's may cut it.
	httpguard.LiftReadDeadline(w)
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{PTYSubprotocol}})
	if err != nil {
		return // Accept has answered
	}
	defer ws.CloseNow()
	ws.SetReadLimit(ptyInputLimit)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	term := "xterm-256color"
	stream, err := agent.Process.Start(ctx, agentapi.NewRequest(&process.StartRequest{
		Process: &process.ProcessConfig{Cmd: "/bin/sh", Args: ptyShell, Envs: map[string]string{"TERM": term}},
		Pty:     &process.PTY{Size: &process.PTY_Size{Cols: uint32(cols), Rows: uint32(rows)}},
	}, agent.Token))
	if err != nil {
		ptyFail(ctx, ws, "the shell did not start: "+err.Error())
		return
	}
	defer stream.Close()

	var sel *process.ProcessSelector
	ended := false
	defer func() {
		if sel != nil && !ended {
			killPTY(agent, sel)
		}
	}()
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		switch {
		case ev.GetStart() != nil:
			sel = &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: ev.GetStart().GetPid()}}
			go ptyInput(ctx, cancel, ws, agent, sel)
		case ev.GetData() != nil:
			if b := ev.GetData().GetPty(); len(b) > 0 {
				if err := ws.Write(ctx, websocket.MessageBinary, b); err != nil {
					return
				}
				h.svc.Touch(ctx, id, false)
			}
		case ev.GetEnd() != nil:
			ended = true
			code := int(ev.GetEnd().GetExitCode())
			_ = writePTYControl(ctx, ws, ptyControl{Type: "exit", ExitCode: &code})
			_ = ws.Close(websocket.StatusNormalClosure, "exit "+strconv.Itoa(code))
			return
		}
	}
	if ctx.Err() == nil {
		ptyFail(ctx, ws, "the shell's stream ended without an exit")
	}
}

// ptyInput copies the client's frames to the shell until the socket ends,
// then cancels the terminal: binary frames are typed, text frames are
// control messages.
func ptyInput(ctx context.Context, cancel context.CancelFunc, ws *websocket.Conn, agent agentapi.Agent, sel *process.ProcessSelector) {
	defer cancel()
	for {
		typ, b, err := ws.Read(ctx)
		if err != nil {
			return
		}
		if typ == websocket.MessageBinary {
			if _, err := agent.Process.SendInput(ctx, agentapi.NewRequest(&process.SendInputRequest{
				Process: sel, Input: &process.ProcessInput{Input: &process.ProcessInput_Pty{Pty: b}},
			}, agent.Token)); err != nil {
				return
			}
			continue
		}
		var m ptyControl
		if err := json.Unmarshal(b, &m); err != nil || m.Type != "resize" {
			_ = writePTYControl(ctx, ws, ptyControl{Type: "error", Message: `a text frame must be {"type":"resize","cols":C,"rows":R}`})
			continue
		}
		if m.Cols < 1 || m.Cols > maxPTYSize || m.Rows < 1 || m.Rows > maxPTYSize {
			_ = writePTYControl(ctx, ws, ptyControl{Type: "error", Message: fmt.Sprintf("cols and rows must be from 1 to %d", maxPTYSize)})
			continue
		}
		if _, err := agent.Process.Update(ctx, agentapi.NewRequest(&process.UpdateRequest{
			Process: sel, Pty: &process.PTY{Size: &process.PTY_Size{Cols: uint32(m.Cols), Rows: uint32(m.Rows)}},
		}, agent.Token)); err != nil {
			return
		}
	}
}

// killPTY ends the shell of a terminal the client left. It runs after the
// request's context may have ended, so it has its own bound.
func killPTY(agent agentapi.Agent, sel *process.ProcessSelector) {
	ctx, cancel := context.WithTimeout(context.Background(), ptyKillWait)
	defer cancel()
	_, _ = agent.Process.SendSignal(ctx, agentapi.NewRequest(&process.SendSignalRequest{
		Process: sel, Signal: process.Signal_SIGNAL_SIGKILL,
	}, agent.Token))
}

func writePTYControl(ctx context.Context, ws *websocket.Conn, m ptyControl) error {
	b, _ := json.Marshal(m)
	return ws.Write(ctx, websocket.MessageText, b)
}

// ptyFail tells the client why the terminal cannot be served and closes.
func ptyFail(ctx context.Context, ws *websocket.Conn, msg string) {
	_ = writePTYControl(ctx, ws, ptyControl{Type: "error", Message: msg})
	_ = ws.Close(websocket.StatusInternalError, "terminal unavailable")
}
