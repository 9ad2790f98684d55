package daytona

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/coder/websocket"

	"github.com/sandpit-dev/sandpit/internal/agentapi"
	"github.com/sandpit-dev/sandpit/internal/api"
	"github.com/sandpit-dev/sandpit/internal/httpguard"
	fspb "github.com/sandpit-dev/sandpit/proto/filesystem"
	"github.com/sandpit-dev/sandpit/proto/process"
)

// Process sessions. A session is one long-lived /bin/sh in the sandbox,
// started through the agent with its stdin kept open and tagged with the
// session's id. A command is written to that stdin as a line that sources
// the command's text from a file (so cd, exports and variables stay in the
// shell for the next command) with its stdout and stderr redirected to
// files, and then writes its exit code to a file. Everything a session
// knows lives in the sandbox (the process table and the session's
// directory), so the daemon keeps no session state and a daemon restart
// loses nothing.

// sessionRoot holds one directory per session: for each command <c>,
// <c>.cmd (its text), <c>.out, <c>.err and, once it ended, <c>.exit.
const sessionRoot = "/tmp/.daytona/sessions"

// sessionTagPrefix tags session shells in the agent's process table.
const sessionTagPrefix = "daytona-session:"

// followPoll is how often a followed command's logs are checked for growth.
const followPoll = 100 * time.Millisecond

var sessionIDRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`)

func sessionDir(sid string) string { return sessionRoot + "/" + sid }

// Session is Daytona's session model.
type Session struct {
	SessionID string    `json:"sessionId"`
	Commands  []Command `json:"commands"`
}

// Command is one command of a session.
type Command struct {
	ID       string `json:"id"`
	Command  string `json:"command"`
	ExitCode *int   `json:"exitCode,omitempty"`
}

// SessionExecuteRequest is the body of POST /process/session/{sid}/exec.
type SessionExecuteRequest struct {
	Command  string `json:"command"`
	Async    bool   `json:"async"`
	RunAsync bool   `json:"runAsync"`
}

// SessionExecuteResponse is its answer; an async command has only cmdId.
type SessionExecuteResponse struct {
	CmdID    string  `json:"cmdId"`
	ExitCode *int    `json:"exitCode,omitempty"`
	Output   *string `json:"output,omitempty"`
	Stdout   *string `json:"stdout,omitempty"`
	Stderr   *string `json:"stderr,omitempty"`
}

// SessionCommandLogs is the answer of GET .../command/{cid}/logs.
type SessionCommandLogs struct {
	Output string `json:"output"`
	Stdout string `json:"stdout"`
	Stderr string `json:"stderr"`
}

// sandboxConn is a resolved sandbox: its id and the service's connection to
// its agent.
type sandboxConn struct {
	id string // the sandbox's
	agentapi.Agent
}

func (h *core) conn(r *http.Request) (*sandboxConn, error) {
	id, a, err := h.agentOf(r)
	if err != nil {
		return nil, err
	}
	return &sandboxConn{id: id, Agent: a}, nil
}

// processes lists the sandbox's running processes.
func (c *sandboxConn) processes(ctx context.Context) ([]*process.ProcessInfo, error) {
	resp, err := c.Process.List(ctx, fsRequest(&process.ListRequest{}, c.Token))
	if err != nil {
		return nil, rpcError(err, false)
	}
	return resp.Msg.GetProcesses(), nil
}

// byTag returns the running process with the tag, if any.
func (c *sandboxConn) byTag(ctx context.Context, tag string) (*process.ProcessInfo, error) {
	procs, err := c.processes(ctx)
	if err != nil {
		return nil, err
	}
	for _, p := range procs {
		if p.GetTag() == tag {
			return p, nil
		}
	}
	return nil, nil
}

// sessions returns the ids of the running session shells.
func (c *sandboxConn) sessions(ctx context.Context) ([]string, error) {
	procs, err := c.processes(ctx)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, p := range procs {
		if sid, ok := strings.CutPrefix(p.GetTag(), sessionTagPrefix); ok {
			ids = append(ids, sid)
		}
	}
	sort.Strings(ids)
	return ids, nil
}

// startDetached starts a process and returns once the agent reports its
// pid; the process keeps running after the stream is closed.
func (c *sandboxConn) startDetached(ctx context.Context, req *process.StartRequest) (uint32, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.Process.Start(ctx, fsRequest(req, c.Token))
	if err != nil {
		return 0, rpcError(err, false)
	}
	defer stream.Close()
	for stream.Receive() {
		if st := stream.Msg().GetEvent().GetStart(); st != nil {
			return st.GetPid(), nil
		}
	}
	if err := stream.Err(); err != nil {
		return 0, rpcError(err, false)
	}
	return 0, fmt.Errorf("the agent's stream closed before the process started")
}

func (c *sandboxConn) input(ctx context.Context, tag string, in *process.ProcessInput) error {
	_, err := c.Process.SendInput(ctx, fsRequest(&process.SendInputRequest{
		Process: &process.ProcessSelector{Selector: &process.ProcessSelector_Tag{Tag: tag}},
		Input:   in,
	}, c.Token))
	if err != nil {
		return rpcError(err, false)
	}
	return nil
}

// killWait bounds how long kill waits for the agent to report the end of a
// process it sent SIGKILL; past it the caller gets an error rather than an
// answer that says the process is gone while it is still listed.
const killWait = 10 * time.Second

// kill sends the process with the tag SIGKILL and returns once the agent
// reports its end. The signal alone returns before the process is reaped,
// and until then the agent still lists it: a delete answered at that point
// would let the caller's next list show what it just deleted.
func (c *sandboxConn) kill(ctx context.Context, tag string) error {
	sel := &process.ProcessSelector{Selector: &process.ProcessSelector_Tag{Tag: tag}}
	wctx, cancel := context.WithTimeout(ctx, killWait)
	defer cancel()
	// Attach before the signal, so the end cannot be missed; a process
	// already gone has nothing to wait for.
	stream, err := c.Process.Connect(wctx, fsRequest(&process.ConnectRequest{Process: sel}, c.Token))
	if err != nil && connect.CodeOf(err) != connect.CodeNotFound {
		return rpcError(err, false)
	}
	if stream != nil {
		defer stream.Close()
	}
	if _, err := c.Process.SendSignal(ctx, fsRequest(&process.SendSignalRequest{
		Process: sel,
		Signal:  process.Signal_SIGNAL_SIGKILL,
	}, c.Token)); err != nil {
		return rpcError(err, false)
	}
	if stream == nil {
		return nil
	}
	for stream.Receive() {
		if stream.Msg().GetEvent().GetEnd() != nil {
			return nil
		}
	}
	if err := stream.Err(); err != nil && connect.CodeOf(err) != connect.CodeNotFound {
		return rpcError(fmt.Errorf("wait for %s to end: %w", tag, err), false)
	}
	return nil
}

// exists reports whether a path exists in the sandbox.
func (c *sandboxConn) exists(ctx context.Context, path string) (bool, error) {
	_, err := c.Filesystem.Stat(ctx, fsRequest(&fspb.StatRequest{Path: path}, c.Token))
	if connect.CodeOf(err) == connect.CodeNotFound {
		return false, nil
	}
	if err != nil {
		return false, rpcError(err, true)
	}
	return true, nil
}

// readFrom reads a sandbox file from offset on; a missing file reads as
// empty.
func (h *core) readFrom(ctx context.Context, c *sandboxConn, path string, offset int64) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+c.Addr+"/files?path="+url.QueryEscape(path), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set(accessTokenHeader, c.Token)
	if offset > 0 {
		req.Header.Set("Range", "bytes="+strconv.FormatInt(offset, 10)+"-")
	}
	resp, err := h.svc.AgentHTTP().Do(req)
	if err != nil {
		return nil, fmt.Errorf("sandbox agent unreachable: %w", err)
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK, http.StatusPartialContent:
		return io.ReadAll(io.LimitReader(resp.Body, maxExecOutput))
	case http.StatusNotFound, http.StatusRequestedRangeNotSatisfiable:
		return nil, nil
	}
	return nil, agentHTTPError(resp, path)
}

func newCommandID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// sessionID validates the {sessionId} path value.
func sessionID(r *http.Request) (string, error) {
	sid := r.PathValue("sessionId")
	if !sessionIDRE.MatchString(sid) {
		return "", badRequest("invalid session id %q: use 1-128 letters, digits, '_', '.' or '-'", sid)
	}
	return sid, nil
}

func sessionNotFound(sid string) error {
	return newProblem(http.StatusNotFound, "session %s not found", sid)
}

// CreateSessionRequest is the body of POST /process/session.
type CreateSessionRequest struct {
	SessionID string `json:"sessionId"`
}

func (h *processAPI) createSession(w http.ResponseWriter, r *http.Request) {
	var req CreateSessionRequest
	if err := api.DecodeJSON(r, &req, false); err != nil {
		WriteError(w, r, err)
		return
	}
	if !sessionIDRE.MatchString(req.SessionID) {
		WriteError(w, r, badRequest("invalid sessionId %q: use 1-128 letters, digits, '_', '.' or '-'", req.SessionID))
		return
	}
	c, err := h.conn(r)
	if err != nil {
		WriteError(w, r, err)
		return
	}
	tag := sessionTagPrefix + req.SessionID
	if p, err := c.byTag(r.Context(), tag); err != nil {
		WriteError(w, r, err)
		return
	} else if p != nil {
		WriteError(w, r, newProblem(http.StatusConflict, "session %s already exists", req.SessionID))
		return
	}
	dir := sessionDir(req.SessionID)
	// A directory left by a session of the same id that died on its own is
	// replaced, so the new session does not list the old one's commands.
	prep, err := h.runProc(r.Context(), c.Agent, &process.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", `rm -rf -- "$1" && mkdir -p -- "$1"`, "prep", dir}}, fsToolTimeout)
	if err != nil {
		WriteError(w, r, err)
		return
	}
	if prep.exitCode != 0 {
		WriteError(w, r, fmt.Errorf("prepare session directory: %s", strings.TrimSpace(string(prep.stderr))))
		return
	}
	stdin := true
	if _, err := c.startDetached(r.Context(), &process.StartRequest{
		Process: &process.ProcessConfig{Cmd: "/bin/sh"},
		Tag:     &tag,
		Stdin:   &stdin,
	}); err != nil {
		WriteError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusCreated)
}

// commandLine is what the session shell reads for one command. "command ."
// runs the command's file in the shell itself, and "command" keeps a syntax
// error in it from ending the shell. The exit code is written to a
// temporary name and renamed, so that <c>.exit never exists half-written.
// An async command reads its FIFO <c>.in (see session_input.go), a
// synchronous one /dev/null.
func commandLine(dir, cid string, async bool) string {
	base := "'" + dir + "/" + cid
	stdin := "</dev/null"
	if async {
		stdin = "0<>" + base + ".in'"
	}
	line := "{ command . " + base + ".cmd'; } " + stdin + " >" + base + ".out' 2>" + base + ".err'; echo $? >" + base + ".x'; mv -f " + base + ".x' " + base + ".exit'"
	if async {
		return "{ " + line + "; } &\n"
	}
	return line + "\n"
}

func (h *processAPI) sessionExec(w http.ResponseWriter, r *http.Request) {
	sid, err := sessionID(r)
	if err != nil {
		WriteError(w, r, err)
		return
	}
	var req SessionExecuteRequest
	if err := api.DecodeJSON(r, &req, false); err != nil {
		WriteError(w, r, err)
		return
	}
	if strings.TrimSpace(req.Command) == "" {
		WriteError(w, r, badRequest("command is required"))
		return
	}
	c, err := h.conn(r)
	if err != nil {
		WriteError(w, r, err)
		return
	}
	tag := sessionTagPrefix + sid
	p, err := c.byTag(r.Context(), tag)
	if err != nil {
		WriteError(w, r, err)
		return
	}
	if p == nil {
		WriteError(w, r, sessionNotFound(sid))
		return
	}
	dir, cid := sessionDir(sid), newCommandID()
	if err := h.writeFile(r.Context(), c.Addr, c.Token, dir+"/"+cid+".cmd", strings.NewReader(req.Command+"\n")); err != nil {
		WriteError(w, r, err)
		return
	}
	async := req.Async || req.RunAsync
	if async {
		// The FIFO exists before the shell is told to run the command, so
		// input sent as soon as this call answers finds it.
		if err := h.makeFIFO(r.Context(), c, dir+"/"+cid+".in"); err != nil {
			WriteError(w, r, err)
			return
		}
	}
	if err := c.input(r.Context(), tag, &process.ProcessInput{Input: &process.ProcessInput_Stdin{Stdin: []byte(commandLine(dir, cid, async))}}); err != nil {
		WriteError(w, r, err)
		return
	}
	if async {
		api.WriteJSON(w, http.StatusAccepted, SessionExecuteResponse{CmdID: cid})
		return
	}
	code, err := h.awaitCommand(r.Context(), c, tag, dir, cid)
	if err != nil {
		WriteError(w, r, err)
		return
	}
	logs, err := h.commandLogs(r.Context(), c, dir, cid)
	if err != nil {
		WriteError(w, r, err)
		return
	}
	api.WriteJSON(w, http.StatusOK, SessionExecuteResponse{CmdID: cid, ExitCode: &code, Output: &logs.Output, Stdout: &logs.Stdout, Stderr: &logs.Stderr})
}

// awaitCommand waits for a command's exit file. It polls, backing off to
// followPoll, and checks now and then that the session's shell is still
// there: a command that ran "exit" ends the shell and never writes one.
func (h *processAPI) awaitCommand(ctx context.Context, c *sandboxConn, tag, dir, cid string) (int, error) {
	delay := 5 * time.Millisecond
	lastAlive := time.Now()
	for {
		code, done, err := h.exitCode(ctx, c, dir, cid)
		if err != nil || done {
			return code, err
		}
		if time.Since(lastAlive) > time.Second {
			p, err := c.byTag(ctx, tag)
			if err != nil {
				return 0, err
			}
			if p == nil {
				return 0, newProblem(http.StatusGone, "the session's shell ended while the command ran (did it run exit?)")
			}
			lastAlive = time.Now()
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(delay):
		}
		delay = min(2*delay, followPoll)
	}
}

// exitCode reads a command's exit file, if it has one.
func (h *processAPI) exitCode(ctx context.Context, c *sandboxConn, dir, cid string) (int, bool, error) {
	ok, err := c.exists(ctx, dir+"/"+cid+".exit")
	if err != nil || !ok {
		return 0, false, err
	}
	b, err := h.readFrom(ctx, c, dir+"/"+cid+".exit", 0)
	if err != nil {
		return 0, false, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, false, fmt.Errorf("command %s: malformed exit file %q", cid, b)
	}
	return n, true, nil
}

// commandLogs reads a command's output. Output is stdout followed by
// stderr: the two are kept in separate files, so their interleaving is not
// known.
func (h *processAPI) commandLogs(ctx context.Context, c *sandboxConn, dir, cid string) (SessionCommandLogs, error) {
	out, err := h.readFrom(ctx, c, dir+"/"+cid+".out", 0)
	if err != nil {
		return SessionCommandLogs{}, err
	}
	errb, err := h.readFrom(ctx, c, dir+"/"+cid+".err", 0)
	if err != nil {
		return SessionCommandLogs{}, err
	}
	return SessionCommandLogs{Output: string(out) + string(errb), Stdout: string(out), Stderr: string(errb)}, nil
}

// session reads a session's commands from its directory.
func (h *processAPI) session(ctx context.Context, c *sandboxConn, sid string) (Session, error) {
	out := Session{SessionID: sid, Commands: []Command{}}
	dir := sessionDir(sid)
	resp, err := c.Filesystem.ListDir(ctx, fsRequest(&fspb.ListDirRequest{Path: dir, Depth: 1}, c.Token))
	if connect.CodeOf(err) == connect.CodeNotFound {
		return out, nil
	}
	if err != nil {
		return out, rpcError(err, true)
	}
	type entry struct {
		cmd   Command
		mtime time.Time
	}
	var cmds []entry
	for _, e := range resp.Msg.GetEntries() {
		cid, ok := strings.CutSuffix(e.GetName(), ".cmd")
		if !ok {
			continue
		}
		cmd, err := h.command(ctx, c, dir, cid)
		if err != nil {
			return out, err
		}
		cmds = append(cmds, entry{cmd, e.GetModifiedTime().AsTime()})
	}
	sort.SliceStable(cmds, func(i, j int) bool { return cmds[i].mtime.Before(cmds[j].mtime) })
	for _, e := range cmds {
		out.Commands = append(out.Commands, e.cmd)
	}
	return out, nil
}

func (h *processAPI) command(ctx context.Context, c *sandboxConn, dir, cid string) (Command, error) {
	text, err := h.readFrom(ctx, c, dir+"/"+cid+".cmd", 0)
	if err != nil {
		return Command{}, err
	}
	cmd := Command{ID: cid, Command: strings.TrimSuffix(string(text), "\n")}
	code, done, err := h.exitCode(ctx, c, dir, cid)
	if err != nil {
		return Command{}, err
	}
	if done {
		cmd.ExitCode = &code
	}
	return cmd, nil
}

func (h *processAPI) listSessions(w http.ResponseWriter, r *http.Request) {
	c, err := h.conn(r)
	if err != nil {
		WriteError(w, r, err)
		return
	}
	ids, err := c.sessions(r.Context())
	if err != nil {
		WriteError(w, r, err)
		return
	}
	out := make([]Session, 0, len(ids))
	for _, sid := range ids {
		s, err := h.session(r.Context(), c, sid)
		if err != nil {
			WriteError(w, r, err)
			return
		}
		out = append(out, s)
	}
	api.WriteJSON(w, http.StatusOK, out)
}

// liveSession resolves the {sessionId} of a request to a running session.
func (h *processAPI) liveSession(w http.ResponseWriter, r *http.Request) (*sandboxConn, string, bool) {
	sid, err := sessionID(r)
	if err != nil {
		WriteError(w, r, err)
		return nil, "", false
	}
	c, err := h.conn(r)
	if err != nil {
		WriteError(w, r, err)
		return nil, "", false
	}
	p, err := c.byTag(r.Context(), sessionTagPrefix+sid)
	if err != nil {
		WriteError(w, r, err)
		return nil, "", false
	}
	if p == nil {
		WriteError(w, r, sessionNotFound(sid))
		return nil, "", false
	}
	return c, sid, true
}

func (h *processAPI) getSession(w http.ResponseWriter, r *http.Request) {
	c, sid, ok := h.liveSession(w, r)
	if !ok {
		return
	}
	s, err := h.session(r.Context(), c, sid)
	if err != nil {
		WriteError(w, r, err)
		return
	}
	api.WriteJSON(w, http.StatusOK, s)
}

// deleteSession kills the session's shell with its whole process group
// (background commands included) and removes its directory.
func (h *processAPI) deleteSession(w http.ResponseWriter, r *http.Request) {
	c, sid, ok := h.liveSession(w, r)
	if !ok {
		return
	}
	if err := c.kill(r.Context(), sessionTagPrefix+sid); err != nil {
		WriteError(w, r, err)
		return
	}
	if _, err := c.Filesystem.Remove(r.Context(), fsRequest(&fspb.RemoveRequest{Path: sessionDir(sid)}, c.Token)); err != nil && connect.CodeOf(err) != connect.CodeNotFound {
		WriteError(w, r, rpcError(err, true))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// commandRef resolves {sessionId} and {commandId} to an existing command.
func (h *processAPI) commandRef(w http.ResponseWriter, r *http.Request) (*sandboxConn, string, string, bool) {
	sid, err := sessionID(r)
	if err != nil {
		WriteError(w, r, err)
		return nil, "", "", false
	}
	cid := r.PathValue("commandId")
	if !sessionIDRE.MatchString(cid) {
		WriteError(w, r, badRequest("invalid command id %q", cid))
		return nil, "", "", false
	}
	c, err := h.conn(r)
	if err != nil {
		WriteError(w, r, err)
		return nil, "", "", false
	}
	dir := sessionDir(sid)
	ok, err := c.exists(r.Context(), dir+"/"+cid+".cmd")
	if err != nil {
		WriteError(w, r, err)
		return nil, "", "", false
	}
	if !ok {
		WriteError(w, r, newProblem(http.StatusNotFound, "command %s not found in session %s", cid, sid))
		return nil, "", "", false
	}
	return c, dir, cid, true
}

func (h *processAPI) getSessionCommand(w http.ResponseWriter, r *http.Request) {
	c, dir, cid, ok := h.commandRef(w, r)
	if !ok {
		return
	}
	cmd, err := h.command(r.Context(), c, dir, cid)
	if err != nil {
		WriteError(w, r, err)
		return
	}
	api.WriteJSON(w, http.StatusOK, cmd)
}

// Stream prefixes of followed logs: each run of bytes is preceded by the
// marker of the stream it belongs to, which the SDK demultiplexes.
var (
	stdoutMarker = []byte{1, 1, 1}
	stderrMarker = []byte{2, 2, 2}
)

func (h *processAPI) getSessionCommandLogs(w http.ResponseWriter, r *http.Request) {
	c, dir, cid, ok := h.commandRef(w, r)
	if !ok {
		return
	}
	if r.URL.Query().Get("follow") == "true" && strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		h.followLogs(w, r, c, dir, cid)
		return
	}
	logs, err := h.commandLogs(r.Context(), c, dir, cid)
	if err != nil {
		WriteError(w, r, err)
		return
	}
	api.WriteJSON(w, http.StatusOK, logs)
}

// followLogs streams a command's output over a WebSocket as it grows, each
// chunk prefixed with its stream's marker, and closes normally once the
// command has ended and everything it wrote was sent.
func (h *processAPI) followLogs(w http.ResponseWriter, r *http.Request, c *sandboxConn, dir, cid string) {
	// The socket lasts as long as the terminal or the command: no read
	// deadline of the request's may cut it.
	httpguard.LiftReadDeadline(w)
	sess, release, ok := h.openStream(w, r)
	if !ok {
		return
	}
	defer release()
	ws, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	defer ws.CloseNow()
	// The client sends nothing; reading is what notices it going away.
	ctx := ws.CloseRead(sess)
	files := []struct {
		path   string
		marker []byte
		off    int64
	}{{dir + "/" + cid + ".out", stdoutMarker, 0}, {dir + "/" + cid + ".err", stderrMarker, 0}}
	for {
		// The exit file is checked before the last read, so that output
		// written just before the command ended is still sent.
		_, done, err := h.exitCode(ctx, c, dir, cid)
		if err != nil {
			_ = ws.Close(websocket.StatusInternalError, "reading the command's state failed")
			return
		}
		for i := range files {
			b, err := h.readFrom(ctx, c, files[i].path, files[i].off)
			if err != nil {
				_ = ws.Close(websocket.StatusInternalError, "reading the command's output failed")
				return
			}
			if len(b) == 0 {
				continue
			}
			files[i].off += int64(len(b))
			if err := ws.Write(ctx, websocket.MessageBinary, append(append([]byte{}, files[i].marker...), b...)); err != nil {
				return
			}
		}
		if done {
			_ = ws.Close(websocket.StatusNormalClosure, "")
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(followPoll):
		}
	}
}
