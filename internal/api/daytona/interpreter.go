package daytona

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/coder/websocket"

	"github.com/sandpit-dev/sandpit/internal/api"
	"github.com/sandpit-dev/sandpit/internal/httpguard"
	"github.com/sandpit-dev/sandpit/internal/interpreter"
	"github.com/sandpit-dev/sandpit/internal/service"
	fspb "github.com/sandpit-dev/sandpit/proto/filesystem"
	"github.com/sandpit-dev/sandpit/proto/process"
)

// The stateful code interpreter (codeInterpreter.runCode and its contexts).
// A context is one long-running python3 in the sandbox, started through the
// agent with its stdin kept open and tagged with the context's id; it runs
// interpreterDriver, which executes each request it reads in one namespace
// that persists between requests, so variables, imports and functions
// carry over. Everything about a context lives in the agent's process
// table (its cwd in the process's config, its creation time in its
// environment), so the daemon keeps no state but a lock per context and a
// daemon restart loses no context.
//
// An execution attaches to the context's output (the agent's Connect),
// writes one JSON request line to its stdin and relays the JSON chunks the
// driver prints, one per line, to the SDK's WebSocket as they come:
// {"type":"stdout"|"stderr","text"}, {"type":"error","name","value",
// "traceback"} and finally {"type":"control","text":"completed"}. Each
// chunk carries the request's id (rid), so chunks of an earlier request
// whose client went away mid-run are not taken for this one's.

const (
	interpTagPrefix = "daytona-interpreter:"
	// defaultContextID is the context runCode uses when it names none; it
	// is made on first use and not listed, as on Daytona.
	defaultContextID = "default"
	// interpCreatedEnv carries a context's creation time in its process's
	// environment.
	interpCreatedEnv = "SANDPIT_INTERPRETER_CREATED"
	// wsCloseTimeout is the close code the SDK turns into its timeout error.
	wsCloseTimeout websocket.StatusCode = 4008
	// interruptGrace is how long interrupted code has to stop before the
	// socket is closed with the timeout anyway.
	interruptGrace = 5 * time.Second
)

// interpreterDriver runs in the context's python3. The protocol has its own
// descriptors (duplicates of the original stdin and stdout); the code's
// stdin is /dev/null, and its file descriptors 1 and 2 both go to the
// process's stderr, so output written below Python's sys.stdout (a child
// process's) cannot corrupt the protocol and is relayed as stderr. SIGTERM
// interrupts the running code (a timeout).
const interpreterDriver = `
import json, os, signal, sys, traceback
chan = os.fdopen(os.dup(0), "r")
proto = os.fdopen(os.dup(1), "w")
null = os.open(os.devnull, os.O_RDONLY)
os.dup2(null, 0)
os.dup2(2, 1)
sys.stdin = open(os.devnull)
rid = None
def emit(kind, **kw):
    kw["type"] = kind
    kw["rid"] = rid
    proto.write(json.dumps(kw) + "\n")
    proto.flush()
class Out:
    def __init__(self, kind):
        self.kind = kind
    def write(self, s):
        if s:
            emit(self.kind, text=s)
        return len(s)
    def flush(self):
        pass
    def isatty(self):
        return False
def on_term(signum, frame):
    raise KeyboardInterrupt("interrupted: the execution's timeout passed")
signal.signal(signal.SIGTERM, on_term)
ns = {"__name__": "__main__", "__builtins__": __builtins__}
while True:
    try:
        line = chan.readline()
        if not line:
            break
        req = json.loads(line)
        rid = req.get("rid")
    except KeyboardInterrupt:
        continue
    saved = dict(os.environ)
    outcome = "completed"
    try:
        os.environ.update(req.get("envs") or {})
        sys.stdout, sys.stderr = Out("stdout"), Out("stderr")
        exec(compile(req["code"], "<code>", "exec"), ns)
    except BaseException as e:
        if isinstance(e, KeyboardInterrupt):
            outcome = "interrupted"
        tb = traceback.format_exception(type(e), e, e.__traceback__)
        emit("error", name=type(e).__name__, value=str(e), traceback="".join(tb))
    finally:
        sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
        os.environ.clear()
        os.environ.update(saved)
    emit("control", text=outcome)
`

// InterpreterContext is Daytona's context model.
type InterpreterContext struct {
	ID        string `json:"id"`
	Cwd       string `json:"cwd"`
	CreatedAt string `json:"createdAt"`
	Language  string `json:"language"`
	Active    bool   `json:"active"`
}

// CreateContextRequest is the body of POST /process/interpreter/context.
type CreateContextRequest struct {
	Cwd      string `json:"cwd"`
	Language string `json:"language"`
}

// ListContextsResponse is the answer of GET /process/interpreter/context.
type ListContextsResponse struct {
	Contexts []InterpreterContext `json:"contexts"`
}

// InterpreterExecuteRequest is the first message of the execute socket.
type InterpreterExecuteRequest struct {
	Code      string            `json:"code"`
	ContextID string            `json:"contextId"`
	Envs      map[string]string `json:"envs"`
	// Timeout is in seconds; 0 or absent means none.
	Timeout *float64 `json:"timeout"`
}

// interpLocks serialises executions (and the default context's creation)
// per sandbox and context: the driver runs one request at a time, and two
// executions attached at once would see each other's output.
type interpLocks struct {
	mu    sync.Mutex
	locks map[string]*interpLock
}

type interpLock struct {
	ch   chan struct{}
	refs int
}

// lock waits for key's lock or the context's end.
func (l *interpLocks) lock(ctx context.Context, key string) (func(), error) {
	l.mu.Lock()
	if l.locks == nil {
		l.locks = map[string]*interpLock{}
	}
	e := l.locks[key]
	if e == nil {
		e = &interpLock{ch: make(chan struct{}, 1)}
		l.locks[key] = e
	}
	e.refs++
	l.mu.Unlock()
	release := func() {
		l.mu.Lock()
		e.refs--
		if e.refs == 0 {
			delete(l.locks, key)
		}
		l.mu.Unlock()
	}
	select {
	case e.ch <- struct{}{}:
		return func() { <-e.ch; release() }, nil
	case <-ctx.Done():
		release()
		return nil, ctx.Err()
	}
}

func interpNotFound(id string) error {
	return newProblem(http.StatusNotFound, "interpreter context %s not found", id)
}

// contextOf renders a context's process.
func contextOf(p *process.ProcessInfo) (InterpreterContext, bool) {
	id, ok := strings.CutPrefix(p.GetTag(), interpTagPrefix)
	if !ok {
		return InterpreterContext{}, false
	}
	return InterpreterContext{
		ID:        id,
		Cwd:       p.GetConfig().GetCwd(),
		CreatedAt: p.GetConfig().GetEnvs()[interpCreatedEnv],
		Language:  "python",
		Active:    true,
	}, true
}

// startContext starts a context's python3 in cwd, which the caller has
// checked is a directory.
func (h *processAPI) startContext(ctx context.Context, c *sandboxConn, id, cwd string) (InterpreterContext, error) {
	tag := interpTagPrefix + id
	stdin := true
	created := time.Now().UTC().Format(isoMillis)
	_, err := c.startDetached(ctx, &process.StartRequest{
		Process: &process.ProcessConfig{
			Cmd:  "python3",
			Args: []string{"-u", "-c", interpreterDriver},
			Envs: map[string]string{interpCreatedEnv: created, "PYTHONUNBUFFERED": "1"},
			Cwd:  &cwd,
		},
		Tag:   &tag,
		Stdin: &stdin,
	})
	if err != nil {
		return InterpreterContext{}, err
	}
	return InterpreterContext{ID: id, Cwd: cwd, CreatedAt: created, Language: "python", Active: true}, nil
}

// contextDir resolves and checks a context's working directory; empty is
// the home directory.
func (h *core) contextDir(ctx context.Context, c *sandboxConn, cwd string) (string, error) {
	if cwd == "" {
		cwd = "~"
	}
	resp, err := c.Filesystem.Stat(ctx, fsRequest(&fspb.StatRequest{Path: cwd}, c.Token))
	if err != nil {
		if connect.CodeOf(err) == connect.CodeNotFound {
			return "", badRequest("cwd %s does not exist in the sandbox", cwd)
		}
		return "", rpcError(err, true)
	}
	if resp.Msg.GetEntry().GetType() != fspb.FileType_FILE_TYPE_DIRECTORY {
		return "", badRequest("cwd %s is not a directory", cwd)
	}
	return resp.Msg.GetEntry().GetPath(), nil
}

func (h *processAPI) createInterpreterContext(w http.ResponseWriter, r *http.Request) {
	var req CreateContextRequest
	if err := api.DecodeJSON(r, &req, false); err != nil {
		WriteError(w, r, err)
		return
	}
	if req.Language != "" && req.Language != "python" {
		WriteError(w, r, badRequest("language %q is not supported: the interpreter runs python", req.Language))
		return
	}
	c, err := h.conn(r)
	if err != nil {
		WriteError(w, r, err)
		return
	}
	dir, err := h.contextDir(r.Context(), c, req.Cwd)
	if err != nil {
		WriteError(w, r, err)
		return
	}
	// A sandbox with a code interpreter gets a kernel context, the kind
	// codeRun and the other surfaces use; any other runs python3 itself.
	id := newCommandID()
	switch err := h.svc.CreateCodeContext(r.Context(), c.id, id, "python", dir); {
	case err == nil:
		api.WriteJSON(w, http.StatusOK, InterpreterContext{ID: id, Cwd: dir, CreatedAt: time.Now().UTC().Format(isoMillis), Language: "python", Active: true})
		return
	case !errors.Is(err, service.ErrNoInterpreter):
		WriteError(w, r, err)
		return
	}
	ic, err := h.startContext(r.Context(), c, id, dir)
	if err != nil {
		WriteError(w, r, err)
		return
	}
	api.WriteJSON(w, http.StatusOK, ic)
}

func (h *processAPI) listInterpreterContexts(w http.ResponseWriter, r *http.Request) {
	c, err := h.conn(r)
	if err != nil {
		WriteError(w, r, err)
		return
	}
	procs, err := c.processes(r.Context())
	if err != nil {
		WriteError(w, r, err)
		return
	}
	out := ListContextsResponse{Contexts: []InterpreterContext{}}
	if kernels, err := h.svc.CodeContexts(r.Context(), c.id); err == nil {
		for _, k := range kernels {
			out.Contexts = append(out.Contexts, InterpreterContext{ID: k.Name, Language: k.Language, Active: true})
		}
	}
	for _, p := range procs {
		if ic, ok := contextOf(p); ok && ic.ID != defaultContextID {
			out.Contexts = append(out.Contexts, ic)
		}
	}
	sort.Slice(out.Contexts, func(i, j int) bool { return out.Contexts[i].CreatedAt < out.Contexts[j].CreatedAt })
	api.WriteJSON(w, http.StatusOK, out)
}

func (h *processAPI) deleteInterpreterContext(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("contextId")
	if !sessionIDRE.MatchString(id) {
		WriteError(w, r, badRequest("invalid context id %q", id))
		return
	}
	c, err := h.conn(r)
	if err != nil {
		WriteError(w, r, err)
		return
	}
	if h.svc.HasCodeContext(c.id, id) {
		if err := h.svc.DeleteCodeContext(r.Context(), c.id, id); err != nil {
			WriteError(w, r, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
		return
	}
	tag := interpTagPrefix + id
	p, err := c.byTag(r.Context(), tag)
	if err != nil {
		WriteError(w, r, err)
		return
	}
	if p == nil {
		WriteError(w, r, interpNotFound(id))
		return
	}
	if err := c.kill(r.Context(), tag); err != nil {
		WriteError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// executeInterpreter serves the execute WebSocket: one request, its chunks,
// then a normal close; a timeout interrupts the code and closes with 4008,
// the SDK's timeout code. Refusals close with 1008 and a reason the SDK
// shows.
func (h *processAPI) executeInterpreter(w http.ResponseWriter, r *http.Request) {
	c, err := h.conn(r)
	if err != nil {
		WriteError(w, r, err)
		return
	}
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
	ws.SetReadLimit(16 << 20)
	ctx, cancel := context.WithCancel(sess)
	defer cancel()
	_, msg, err := ws.Read(ctx)
	if err != nil {
		return
	}
	// From here on the socket is only read for its close: a client that
	// goes away ends the wait (not the code, which keeps running).
	ctx = ws.CloseRead(ctx)
	var req InterpreterExecuteRequest
	refuse := func(format string, args ...any) {
		_ = ws.Close(websocket.StatusPolicyViolation, truncateReason(badRequest(format, args...).Error()))
	}
	if err := json.Unmarshal(msg, &req); err != nil {
		refuse("the request is not JSON: %v", err)
		return
	}
	if strings.TrimSpace(req.Code) == "" {
		refuse("code is required")
		return
	}
	if req.Timeout != nil && *req.Timeout < 0 {
		refuse("timeout must not be negative")
		return
	}
	id := req.ContextID
	if id == "" {
		id = defaultContextID
	}
	if !sessionIDRE.MatchString(id) {
		refuse("invalid context id %q", id)
		return
	}
	unlock, err := h.interp.lock(ctx, c.id+"/"+id)
	if err != nil {
		return
	}
	defer unlock()
	if id == defaultContextID || h.svc.HasCodeContext(c.id, id) {
		if h.relayKernel(ctx, ws, c.id, id, req) {
			return
		}
	}
	tag := interpTagPrefix + id
	p, err := c.byTag(ctx, tag)
	if err != nil {
		_ = ws.Close(websocket.StatusInternalError, truncateReason(err.Error()))
		return
	}
	if p == nil {
		if id != defaultContextID {
			_ = ws.Close(websocket.StatusPolicyViolation, truncateReason(interpNotFound(id).Error()))
			return
		}
		dir, err := h.contextDir(ctx, c, "")
		if err == nil {
			_, err = h.startContext(ctx, c, id, dir)
		}
		if err != nil {
			_ = ws.Close(websocket.StatusInternalError, truncateReason("start the default interpreter context: "+err.Error()))
			return
		}
	}
	h.relayExecution(ctx, ws, c, tag, req)
}

// relayExecution attaches to the context, sends the request and relays its
// chunks until the driver reports the end.
func (h *processAPI) relayExecution(ctx context.Context, ws *websocket.Conn, c *sandboxConn, tag string, req InterpreterExecuteRequest) {
	stream, err := c.Process.Connect(ctx, fsRequest(&process.ConnectRequest{
		Process: &process.ProcessSelector{Selector: &process.ProcessSelector_Tag{Tag: tag}},
	}, c.Token))
	if err != nil {
		_ = ws.Close(websocket.StatusInternalError, truncateReason(rpcError(err, false).Error()))
		return
	}
	defer stream.Close()
	rid := newCommandID()
	line, _ := json.Marshal(map[string]any{"code": req.Code, "envs": req.Envs, "rid": rid})
	line = append(line, '\n')
	var timedOut chan struct{}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Code that ignores the interrupt (it catches it, or sits in a C call)
	// still gets the SDK its timeout: grace runs interruptGrace after it.
	grace := time.AfterFunc(time.Hour, func() {
		_ = ws.Close(wsCloseTimeout, "execution timed out; the code did not stop")
		cancel()
	})
	grace.Stop()
	defer grace.Stop()
	var pending []byte
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		switch {
		case ev.GetStart() != nil:
			// Attached: output from here on reaches this socket.
			if err := c.input(ctx, tag, &process.ProcessInput{Input: &process.ProcessInput_Stdin{Stdin: line}}); err != nil {
				_ = ws.Close(websocket.StatusInternalError, truncateReason(err.Error()))
				return
			}
			if req.Timeout != nil && *req.Timeout > 0 {
				timedOut = make(chan struct{})
				t := time.AfterFunc(time.Duration(*req.Timeout*float64(time.Second)), func() {
					close(timedOut)
					// The driver turns SIGTERM into KeyboardInterrupt: the
					// code stops, the context and its variables remain.
					_, _ = c.Process.SendSignal(context.WithoutCancel(ctx), fsRequest(&process.SendSignalRequest{
						Process: &process.ProcessSelector{Selector: &process.ProcessSelector_Tag{Tag: tag}},
						Signal:  process.Signal_SIGNAL_SIGTERM,
					}, c.Token))
					grace.Reset(interruptGrace)
				})
				defer t.Stop()
			}
		case ev.GetData() != nil:
			if b := ev.GetData().GetStderr(); len(b) > 0 {
				// Output written straight to the descriptors (a child
				// process's) arrives here, outside the protocol.
				chunk, _ := json.Marshal(map[string]string{"type": "stderr", "text": string(b)})
				if ws.Write(ctx, websocket.MessageText, chunk) != nil {
					return
				}
			}
			pending = append(pending, ev.GetData().GetStdout()...)
			for {
				i := bytes.IndexByte(pending, '\n')
				if i < 0 {
					break
				}
				chunk := pending[:i]
				pending = pending[i+1:]
				var ctl struct{ Type, Text, Rid string }
				if json.Unmarshal(chunk, &ctl) != nil || ctl.Rid != rid {
					continue
				}
				if ctl.Type == "control" {
					// After a timeout the SDK must see the timeout close,
					// not the "interrupted" chunk it would take as success.
					if timedOut != nil && isClosed(timedOut) {
						_ = ws.Close(wsCloseTimeout, "execution timed out")
						return
					}
					if ws.Write(ctx, websocket.MessageText, chunk) == nil {
						_ = ws.Close(websocket.StatusNormalClosure, "")
					}
					return
				}
				if ws.Write(ctx, websocket.MessageText, chunk) != nil {
					return
				}
			}
		case ev.GetEnd() != nil:
			end := ev.GetEnd()
			_ = ws.Close(websocket.StatusInternalError, truncateReason("the interpreter context ended (exit code "+strconv.Itoa(int(end.GetExitCode()))+"); its state is lost"))
			return
		}
	}
	if ctx.Err() == nil {
		_ = ws.Close(websocket.StatusInternalError, "the interpreter context's stream ended")
	}
}

// relayKernel runs the request on the sandbox's code interpreter, the
// kernels codeRun and the other surfaces share: the default context is the
// kernel's default one, a named context the kernel context made for it. It
// relays the chunks in the driver's shape and reports false, having written
// nothing, when the sandbox has no interpreter.
func (h *processAPI) relayKernel(ctx context.Context, ws *websocket.Conn, sandboxID, id string, req InterpreterExecuteRequest) bool {
	name := id
	if id == defaultContextID {
		name = ""
	}
	var timeout time.Duration
	if req.Timeout != nil && *req.Timeout > 0 {
		timeout = time.Duration(*req.Timeout * float64(time.Second))
	}
	err := h.svc.RunCode(ctx, sandboxID, service.CodeRequest{Code: req.Code, Language: "python", Context: name, Env: req.Envs, Timeout: timeout}, func(ev interpreter.Event) error {
		var chunk any
		switch ev.Type {
		case interpreter.EventStdout, interpreter.EventStderr:
			chunk = map[string]string{"type": ev.Type, "text": ev.Text}
		case interpreter.EventError:
			chunk = map[string]string{"type": "error", "name": ev.Name, "value": ev.Value, "traceback": ev.TracebackText()}
		case interpreter.EventResult:
			// A cell's value is what a REPL would print; display data
			// (figures) has no chunk in this protocol.
			if !ev.IsMainResult || ev.Text == "" {
				return nil
			}
			chunk = map[string]string{"type": "stdout", "text": ev.Text + "\n"}
		default:
			return nil
		}
		b, _ := json.Marshal(chunk)
		return ws.Write(ctx, websocket.MessageText, b)
	})
	switch {
	case errors.Is(err, service.ErrNoInterpreter):
		return false
	case errors.Is(err, context.DeadlineExceeded) && timeout > 0:
		_ = ws.Close(wsCloseTimeout, "execution timed out")
	case err != nil:
		_ = ws.Close(websocket.StatusInternalError, truncateReason(err.Error()))
	default:
		b, _ := json.Marshal(map[string]string{"type": "control", "text": "completed"})
		if ws.Write(ctx, websocket.MessageText, b) == nil {
			_ = ws.Close(websocket.StatusNormalClosure, "")
		}
	}
	return true
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// truncateReason keeps a close reason within the 123 bytes a close frame
// allows.
func truncateReason(s string) string {
	if len(s) > 120 {
		return s[:120]
	}
	return s
}
