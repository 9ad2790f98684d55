package daytona

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/sandpit-dev/sandpit/internal/api"
	"github.com/sandpit-dev/sandpit/proto/process"
)

// Input to a running session command (sendSessionCommandInput). An async
// command's stdin is a FIFO next to its other files, <c>.in, which the
// command opens read-write (so opening it never blocks and the command does
// not see end-of-file while input may still come). Input is written to that
// FIFO, again opened read-write, so a command that ended between the check
// and the write cannot leave the writer waiting for a reader. A synchronous
// command reads /dev/null: its call only answers once it has ended, so
// nothing could ever send it input.

// maxSessionInput bounds one input: it travels as a process argument and
// must fit the FIFO's buffer, so the write never waits on a command that
// does not read.
const maxSessionInput = 60 << 10

// SessionSendInputRequest is the body of POST .../command/{cid}/input.
type SessionSendInputRequest struct {
	Data string `json:"data"`
}

// sendInputScript checks the command's files and writes $1 to its FIFO;
// its exit codes name what is wrong.
const sendInputScript = `c="$2/$3"
[ -e "$c.cmd" ] || exit 10
[ -e "$c.exit" ] && exit 11
[ -p "$c.in" ] || exit 12
printf %s "$1" 1<>"$c.in"`

func (h *processAPI) sendSessionInput(w http.ResponseWriter, r *http.Request) {
	var req SessionSendInputRequest
	if err := api.DecodeJSON(r, &req, false); err != nil {
		WriteError(w, r, err)
		return
	}
	if len(req.Data) > maxSessionInput {
		WriteError(w, r, badRequest("data is %d bytes; at most %d are accepted in one call", len(req.Data), maxSessionInput))
		return
	}
	if strings.IndexByte(req.Data, 0) >= 0 {
		WriteError(w, r, badRequest("data must not contain NUL bytes"))
		return
	}
	cid := r.PathValue("commandId")
	if !sessionIDRE.MatchString(cid) {
		WriteError(w, r, badRequest("invalid command id %q", cid))
		return
	}
	c, sid, ok := h.liveSession(w, r)
	if !ok {
		return
	}
	res, err := h.runProc(r.Context(), c.Agent, &process.ProcessConfig{
		Cmd:  "/bin/sh",
		Args: []string{"-c", sendInputScript, "input", req.Data, sessionDir(sid), cid},
	}, fsToolTimeout)
	if err != nil {
		WriteError(w, r, err)
		return
	}
	switch res.exitCode {
	case 0:
		w.WriteHeader(http.StatusOK)
	case 10:
		WriteError(w, r, newProblem(http.StatusNotFound, "command %s not found in session %s", cid, sid))
	case 11:
		WriteError(w, r, &problem{status: http.StatusConflict, message: "command " + cid + " has already completed", code: codeCommandCompleted, source: sourceDaemon})
	case 12:
		WriteError(w, r, newProblem(http.StatusConflict, "command %s takes no input: only commands run with runAsync read input", cid))
	default:
		WriteError(w, r, newProblem(http.StatusInternalServerError, "send input to command %s: %s", cid, strings.TrimSpace(string(res.stderr))))
	}
}

// makeFIFO makes the named pipe an async command reads as its stdin.
func (h *processAPI) makeFIFO(ctx context.Context, c *sandboxConn, path string) error {
	res, err := h.runProc(ctx, c.Agent, &process.ProcessConfig{Cmd: "mkfifo", Args: []string{"-m", "600", "--", path}}, fsToolTimeout)
	if err != nil {
		return err
	}
	if res.exitCode != 0 {
		return fmt.Errorf("make the command's input pipe: %s", strings.TrimSpace(string(res.stderr)))
	}
	return nil
}
