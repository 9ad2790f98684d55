package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"connectrpc.com/connect"

	"github.com/sandpit-dev/sandpit/apitypes"
	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/internal/agentapi"
)

// Exit codes of the CLI's own failures, as docker's: 125 when the CLI or
// the daemon failed (no such sandbox, a stopped one, a refusal), 126 when
// the command was found but cannot be run, 127 when it was not found. Any
// other code is the command's own.
const (
	exitCLI           = 125
	exitNotExecutable = 126
	exitNotFound      = 127
)

// exitDaemonDown is the exit code when the daemon cannot be reached: it is
// the CLI's failure, not the command's.
const exitDaemonDown = exitCLI

// cliError is a failure already put in words, with the exit code the
// process ends with.
type cliError struct {
	code int
	msg  string
}

func (e *cliError) Error() string { return e.msg }

// describe puts err in words for a person: the daemon's message without
// the HTTP status or error code it travelled with, and for an error of the
// agent protocol its message without the protocol's code.
func describe(err error) string {
	var ce *client.Error
	if errors.As(err, &ce) {
		if ce.Message != "" {
			return ce.Message
		}
		return strings.ToLower(http.StatusText(ce.Status))
	}
	var pe *connect.Error
	if errors.As(err, &pe) {
		if msg := pe.Message(); msg != "" && !strings.HasPrefix(msg, "HTTP status ") {
			return msg
		}
		return "the sandbox's agent did not answer (" + strings.ToLower(pe.Code().String()) + ")"
	}
	return err.Error()
}

// notRunning is the refusal of a command that needs a running sandbox,
// with the command that makes it run; ref is the name the user typed.
func notRunning(ref string, sb client.Sandbox) error {
	switch sb.State {
	case "stopped":
		return &cliError{exitCLI, fmt.Sprintf("sandbox %s is stopped: run 'sandpit start %s'", ref, ref)}
	case "paused":
		return &cliError{exitCLI, fmt.Sprintf("sandbox %s is paused: run 'sandpit resume %s'", ref, ref)}
	case "creating", "starting":
		return &cliError{exitCLI, fmt.Sprintf("sandbox %s is still %s: try again in a moment", ref, sb.State)}
	}
	msg := fmt.Sprintf("sandbox %s is %s", ref, sb.State)
	if sb.StateReason != "" {
		msg += " (" + sb.StateReason + ")"
	}
	return &cliError{exitCLI, msg + ": 'sandpit inspect " + ref + "' shows it; 'sandpit rm " + ref + "' removes it"}
}

// execFailure classifies the failure of a command that never ran: a
// program not found exits 127, one found but not executable 126, and any
// other failure (the daemon's, the agent's) 125. The agent marks the first
// two in its error's metadata (agentapi.ExecErrorHeader).
func execFailure(ctx context.Context, c *client.Client, ref, id string, err error) error {
	var pe *connect.Error
	if errors.As(err, &pe) {
		switch pe.Meta().Get(agentapi.ExecErrorHeader) {
		case agentapi.ExecNotFound:
			return &cliError{exitNotFound, pe.Message()}
		case agentapi.ExecNotExecutable:
			return &cliError{exitNotExecutable, pe.Message()}
		}
	}
	if ctx.Err() == nil {
		// The sandbox may have stopped between the check and the call.
		if sb, gerr := c.Get(ctx, id); gerr == nil && sb.State != "running" {
			return notRunning(ref, sb)
		} else if isNotFound(gerr) {
			return &cliError{exitCLI, fmt.Sprintf("sandbox %s was removed", ref)}
		}
	}
	if isDialError(err) {
		return err
	}
	return &cliError{exitCLI, describe(err)}
}

// createHint adds to a refused create what to do next.
func createHint(err error, name string) error {
	switch {
	case client.IsCode(err, apitypes.CodeNameConflict):
		return fmt.Errorf("%s: remove it ('sandpit rm %s') or choose another --name", describe(err), name)
	case client.IsCode(err, apitypes.CodeUnknownImage):
		return fmt.Errorf("%s: this daemon pulls no such image; create from a template instead (--template NAME; 'sandpit template ls' lists them) or build one from a Dockerfile ('sandpit template build')", describe(err))
	case client.IsCode(err, apitypes.CodeForbidden) && strings.Contains(describe(err), "--allow-image"):
		return fmt.Errorf("%s; 'sandpit template ls' lists the templates to create from (--template NAME)", describe(err))
	}
	return err
}
