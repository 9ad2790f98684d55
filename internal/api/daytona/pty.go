package daytona

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/sandpit-dev/sandpit/internal/api"
	"github.com/sandpit-dev/sandpit/internal/httpguard"
	"github.com/sandpit-dev/sandpit/proto/process"
)

// PTY sessions over WebSocket, on the agent's own PTY support: a PTY is a
// shell the agent started with a terminal, tagged with the PTY's id. Its
// output reaches the client as binary frames, the client's frames are its
// input, resize is the agent's Update and kill a SIGKILL to its process
// group. The WebSocket speaks Daytona's control messages: a text frame
// {"type":"control","status":"connected"} once the shell runs, and
// {"type":"control","status":"exited","exitCode":N} before a normal close.

const (
	ptyTagPrefix = "daytona-pty:"
	// ptyExitControl is the subprotocol by which the SDK asks for the exit
	// control message; ptyEnvsPrefix carries the shell's environment as
	// base64url JSON in a subprotocol, since browsers cannot send headers.
	ptyExitControl = "X-Daytona-Pty-Exit-Control"
	ptyEnvsPrefix  = "X-Daytona-Pty-Envs~"
	maxPTYSize     = 1000
)

// PtySessionInfo is Daytona's description of a PTY.
type PtySessionInfo struct {
	ID        string            `json:"id"`
	Active    bool              `json:"active"`
	Cols      int               `json:"cols"`
	Rows      int               `json:"rows"`
	Cwd       string            `json:"cwd"`
	Envs      map[string]string `json:"envs"`
	CreatedAt string            `json:"createdAt"`
	LazyStart bool              `json:"lazyStart"`
}

// PtyCreateRequest is the body of POST /process/pty.
type PtyCreateRequest struct {
	ID        string            `json:"id"`
	Cols      int               `json:"cols"`
	Rows      int               `json:"rows"`
	Cwd       string            `json:"cwd"`
	Envs      map[string]string `json:"envs"`
	LazyStart bool              `json:"lazyStart"`
}

// ptyTable remembers what the agent does not: each PTY's size, cwd,
// environment and creation time, for PtySessionInfo. Whether a PTY is alive
// is always asked of the agent.
type ptyTable struct {
	mu   sync.Mutex
	info map[string]PtySessionInfo // key: sandbox id + "/" + pty id
}

func newPTYTable() *ptyTable { return &ptyTable{info: map[string]PtySessionInfo{}} }

func (t *ptyTable) get(sandboxID, id string) (PtySessionInfo, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	i, ok := t.info[sandboxID+"/"+id]
	return i, ok
}

func (t *ptyTable) put(sandboxID string, i PtySessionInfo) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.info[sandboxID+"/"+i.ID] = i
}

func (t *ptyTable) drop(sandboxID, id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.info, sandboxID+"/"+id)
}

// dropSandbox forgets every PTY of a sandbox that is gone or stopped (its
// shells went with it).
func (t *ptyTable) dropSandbox(sandboxID string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k := range t.info {
		if strings.HasPrefix(k, sandboxID+"/") {
			delete(t.info, k)
		}
	}
}

func validSize(cols, rows int) error {
	if cols < 1 || cols > maxPTYSize || rows < 1 || rows > maxPTYSize {
		return badRequest("cols and rows must be from 1 to %d", maxPTYSize)
	}
	return nil
}

// validate checks a create and fills in Daytona's defaults.
func (req *PtyCreateRequest) validate() error {
	if !sessionIDRE.MatchString(req.ID) {
		return badRequest("invalid PTY id %q: use 1-128 letters, digits, '_', '.' or '-'", req.ID)
	}
	if req.Cols == 0 {
		req.Cols = 80
	}
	if req.Rows == 0 {
		req.Rows = 24
	}
	if err := validSize(req.Cols, req.Rows); err != nil {
		return err
	}
	for k := range req.Envs {
		if !envName.MatchString(k) {
			return badRequest("invalid environment variable name %q", k)
		}
	}
	return nil
}

// startRequest is the agent request that starts the PTY's shell.
func (req *PtyCreateRequest) startRequest() *process.StartRequest {
	envs := map[string]string{"TERM": "xterm-256color"}
	for k, v := range req.Envs {
		envs[k] = v
	}
	cfg := &process.ProcessConfig{Cmd: "/bin/sh", Envs: envs}
	if req.Cwd != "" {
		cfg.Cwd = &req.Cwd
	}
	tag := ptyTagPrefix + req.ID
	return &process.StartRequest{
		Process: cfg,
		Tag:     &tag,
		Pty:     &process.PTY{Size: &process.PTY_Size{Cols: uint32(req.Cols), Rows: uint32(req.Rows)}},
	}
}

// createPTY starts a PTY's shell unless one with the id runs; it answers
// the request itself on failure.
func (h *processAPI) createPTY(w http.ResponseWriter, r *http.Request, c *sandboxConn, req *PtyCreateRequest) bool {
	if p, err := c.byTag(r.Context(), ptyTagPrefix+req.ID); err != nil {
		WriteError(w, r, err)
		return false
	} else if p != nil {
		WriteError(w, r, newProblem(http.StatusConflict, "PTY session %s already exists", req.ID))
		return false
	}
	if _, err := c.startDetached(r.Context(), req.startRequest()); err != nil {
		WriteError(w, r, err)
		return false
	}
	h.ptys.put(c.id, PtySessionInfo{
		ID: req.ID, Active: true, Cols: req.Cols, Rows: req.Rows, Cwd: req.Cwd, Envs: nonNilMap(req.Envs),
		CreatedAt: time.Now().UTC().Format(isoMillis), LazyStart: req.LazyStart,
	})
	return true
}

func nonNilMap(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

func (h *processAPI) postPTY(w http.ResponseWriter, r *http.Request) {
	var req PtyCreateRequest
	if err := api.DecodeJSON(r, &req, false); err != nil {
		WriteError(w, r, err)
		return
	}
	if err := req.validate(); err != nil {
		WriteError(w, r, err)
		return
	}
	c, err := h.conn(r)
	if err != nil {
		WriteError(w, r, err)
		return
	}
	if h.createPTY(w, r, c, &req) {
		api.WriteJSON(w, http.StatusCreated, map[string]string{"sessionId": req.ID})
	}
}

// ptyInfo describes a running PTY, or reports that none runs with the id.
func (h *processAPI) ptyInfo(ctx context.Context, c *sandboxConn, id string) (PtySessionInfo, bool, error) {
	p, err := c.byTag(ctx, ptyTagPrefix+id)
	if err != nil || p == nil {
		return PtySessionInfo{}, false, err
	}
	info, ok := h.ptys.get(c.id, id)
	if !ok {
		// Started by an earlier daemon process: what the agent knows.
		info = PtySessionInfo{ID: id, Cols: 80, Rows: 24, Cwd: p.GetConfig().GetCwd(), Envs: map[string]string{}}
	}
	info.Active = true
	return info, true, nil
}

func (h *processAPI) listPTYs(w http.ResponseWriter, r *http.Request) {
	c, err := h.conn(r)
	if err != nil {
		WriteError(w, r, err)
		return
	}
	resp, err := c.Process.List(r.Context(), fsRequest(&process.ListRequest{}, c.Token))
	if err != nil {
		WriteError(w, r, rpcError(err, false))
		return
	}
	out := []PtySessionInfo{}
	for _, p := range resp.Msg.GetProcesses() {
		id, ok := strings.CutPrefix(p.GetTag(), ptyTagPrefix)
		if !ok {
			continue
		}
		info, ok := h.ptys.get(c.id, id)
		if !ok {
			info = PtySessionInfo{ID: id, Cols: 80, Rows: 24, Envs: map[string]string{}}
		}
		info.Active = true
		out = append(out, info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	api.WriteJSON(w, http.StatusOK, map[string]any{"sessions": out})
}

// livePTY resolves {sessionId} to a running PTY; on failure it has answered.
func (h *processAPI) livePTY(w http.ResponseWriter, r *http.Request) (*sandboxConn, PtySessionInfo, bool) {
	id, err := sessionID(r)
	if err != nil {
		WriteError(w, r, err)
		return nil, PtySessionInfo{}, false
	}
	c, err := h.conn(r)
	if err != nil {
		WriteError(w, r, err)
		return nil, PtySessionInfo{}, false
	}
	info, ok, err := h.ptyInfo(r.Context(), c, id)
	if err != nil {
		WriteError(w, r, err)
		return nil, PtySessionInfo{}, false
	}
	if !ok {
		WriteError(w, r, newProblem(http.StatusNotFound, "PTY session %s not found", id))
		return nil, PtySessionInfo{}, false
	}
	return c, info, true
}

func (h *processAPI) getPTY(w http.ResponseWriter, r *http.Request) {
	if _, info, ok := h.livePTY(w, r); ok {
		api.WriteJSON(w, http.StatusOK, info)
	}
}

func (h *processAPI) killPTY(w http.ResponseWriter, r *http.Request) {
	c, info, ok := h.livePTY(w, r)
	if !ok {
		return
	}
	if err := c.kill(r.Context(), ptyTagPrefix+info.ID); err != nil {
		WriteError(w, r, err)
		return
	}
	h.ptys.drop(c.id, info.ID)
	w.WriteHeader(http.StatusOK)
}

// PtyResizeRequest is the body of POST /process/pty/{id}/resize.
type PtyResizeRequest struct {
	Cols int `json:"cols"`
	Rows int `json:"rows"`
}

func (h *processAPI) resizePTY(w http.ResponseWriter, r *http.Request) {
	var req PtyResizeRequest
	if err := api.DecodeJSON(r, &req, false); err != nil {
		WriteError(w, r, err)
		return
	}
	if err := validSize(req.Cols, req.Rows); err != nil {
		WriteError(w, r, err)
		return
	}
	c, info, ok := h.livePTY(w, r)
	if !ok {
		return
	}
	_, err := c.Process.Update(r.Context(), fsRequest(&process.UpdateRequest{
		Process: &process.ProcessSelector{Selector: &process.ProcessSelector_Tag{Tag: ptyTagPrefix + info.ID}},
		Pty:     &process.PTY{Size: &process.PTY_Size{Cols: uint32(req.Cols), Rows: uint32(req.Rows)}},
	}, c.Token))
	if err != nil {
		WriteError(w, r, rpcError(err, false))
		return
	}
	info.Cols, info.Rows = req.Cols, req.Rows
	h.ptys.put(c.id, info)
	api.WriteJSON(w, http.StatusOK, info)
}

// createConnectPTY answers the SDK's createPty: a WebSocket upgrade whose
// query says id, cols, rows and cwd, and whose subprotocols may carry the
// environment. The shell is started first, so that a refusal (bad input, an
// id in use) is a plain HTTP error.
func (h *processAPI) createConnectPTY(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	req := PtyCreateRequest{ID: q.Get("id"), Cwd: q.Get("cwd")}
	for _, f := range []struct {
		name string
		v    *int
	}{{"cols", &req.Cols}, {"rows", &req.Rows}} {
		if s := q.Get(f.name); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil {
				WriteError(w, r, badRequest("%s must be an integer", f.name))
				return
			}
			*f.v = n
		}
	}
	for _, p := range websocketProtocols(r) {
		if enc, ok := strings.CutPrefix(p, ptyEnvsPrefix); ok {
			b, err := base64.RawURLEncoding.DecodeString(enc)
			if err != nil || json.Unmarshal(b, &req.Envs) != nil {
				WriteError(w, r, badRequest("the PTY environment subprotocol is not base64url JSON"))
				return
			}
		}
	}
	if err := req.validate(); err != nil {
		WriteError(w, r, err)
		return
	}
	c, err := h.conn(r)
	if err != nil {
		WriteError(w, r, err)
		return
	}
	if !h.createPTY(w, r, c, &req) {
		return
	}
	h.attachPTY(w, r, c, req.ID)
}

func (h *processAPI) connectPTY(w http.ResponseWriter, r *http.Request) {
	c, info, ok := h.livePTY(w, r)
	if !ok {
		return
	}
	h.attachPTY(w, r, c, info.ID)
}

func websocketProtocols(r *http.Request) []string {
	var out []string
	for _, v := range r.Header.Values("Sec-WebSocket-Protocol") {
		for _, p := range strings.Split(v, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
	}
	return out
}

// ptyControl is a control message of the PTY WebSocket.
type ptyControl struct {
	Type       string `json:"type"`
	Status     string `json:"status"`
	ExitCode   *int   `json:"exitCode,omitempty"`
	ExitReason string `json:"exitReason,omitempty"`
	Error      string `json:"error,omitempty"`
}

// attachPTY joins a WebSocket to a running PTY: the agent's Connect stream
// feeds the socket, the socket's frames are the PTY's input. Closing the
// socket leaves the shell running, as Daytona does; only kill ends it.
func (h *processAPI) attachPTY(w http.ResponseWriter, r *http.Request, c *sandboxConn, id string) {
	// The socket lasts as long as the terminal or the command: no read
	// deadline of the request's may cut it.
	httpguard.LiftReadDeadline(w)
	sess, release, ok := h.openStream(w, r)
	if !ok {
		return
	}
	defer release()
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{ptyExitControl}})
	if err != nil {
		return
	}
	defer ws.CloseNow()
	ws.SetReadLimit(1 << 20)
	ctx, cancel := context.WithCancel(sess)
	defer cancel()
	tag := ptyTagPrefix + id
	stream, err := c.Process.Connect(ctx, fsRequest(&process.ConnectRequest{
		Process: &process.ProcessSelector{Selector: &process.ProcessSelector_Tag{Tag: tag}},
	}, c.Token))
	if err != nil {
		h.ptyFail(ctx, ws, err.Error())
		return
	}
	defer stream.Close()

	// Input: every frame from the client is typed into the terminal.
	go func() {
		defer cancel()
		for {
			_, b, err := ws.Read(ctx)
			if err != nil {
				return
			}
			if err := c.input(ctx, tag, &process.ProcessInput{Input: &process.ProcessInput_Pty{Pty: b}}); err != nil {
				return
			}
		}
	}()

	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		switch {
		case ev.GetStart() != nil:
			if err := writeControl(ctx, ws, ptyControl{Type: "control", Status: "connected"}); err != nil {
				return
			}
		case ev.GetData() != nil:
			if b := ev.GetData().GetPty(); len(b) > 0 {
				if err := ws.Write(ctx, websocket.MessageBinary, b); err != nil {
					return
				}
			}
		case ev.GetEnd() != nil:
			end := ev.GetEnd()
			code := int(end.GetExitCode())
			msg := ptyControl{Type: "control", Status: "exited", ExitCode: &code}
			if !end.GetExited() {
				msg.ExitReason = end.GetStatus()
			}
			h.ptys.drop(c.id, id)
			_ = writeControl(ctx, ws, msg)
			reason, _ := json.Marshal(map[string]any{"exitCode": code})
			_ = ws.Close(websocket.StatusNormalClosure, string(reason))
			return
		}
	}
	if ctx.Err() == nil {
		h.ptyFail(ctx, ws, "the PTY's stream ended without an exit")
	}
}

func writeControl(ctx context.Context, ws *websocket.Conn, m ptyControl) error {
	b, _ := json.Marshal(m)
	return ws.Write(ctx, websocket.MessageText, b)
}

// ptyFail tells the client why the PTY cannot be served and closes.
func (h *processAPI) ptyFail(ctx context.Context, ws *websocket.Conn, msg string) {
	_ = writeControl(ctx, ws, ptyControl{Type: "control", Status: "error", Error: msg})
	_ = ws.Close(websocket.StatusInternalError, "PTY unavailable")
}
